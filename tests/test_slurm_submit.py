"""`commbench submit` / `commbench jobs` and the sbatch templates in slurm/.

The first part needs nothing (rendering, parsing, the registry, bad input). The rest runs against
a real Slurm on the emulated 2-node cluster (tests/cluster/slurm.py; root, slurm-wlm and munge,
skipped otherwise): jobs run on the nodes with this machine's filesystem, gloo between the nodes
over their eth0 (GLOO_SOCKET_IFNAME), and the commands find the cluster through SLURM_CONF.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from commbench.cli import COMMANDS
from commbench.cli import main as cli_main
from commbench.commands import submit as submit_command
from commbench.data.rundir import list_runs, load_run
from commbench.errors import CommbenchError
from commbench.measure import slurm

REPO = Path(__file__).resolve().parents[1]
# `python -m commbench`, with submit and jobs registered until cli.py lists them itself
CLI = (
    "import sys; from commbench.cli import COMMANDS, main; "
    "COMMANDS.setdefault('submit', 'submit'); COMMANDS.setdefault('jobs', 'jobs'); sys.exit(main(sys.argv[1:]))"
)
# small and quick: 4 ranks on 2 cores, all_reduce and sendrecv from 1 KiB to 4 MiB in steps of 4x
QUICK_RUN = ["--ops", "all_reduce,sendrecv", "-b", "1K", "--max-bytes", "4M", "-f", "4"]
TINY_RUN = ["--ops", "all_reduce", "-b", "1K", "-e", "64K", "-f", "8"]


@pytest.fixture
def commands(monkeypatch):
    monkeypatch.setitem(COMMANDS, "submit", "submit")
    monkeypatch.setitem(COMMANDS, "jobs", "jobs")


# ---- rendering --------------------------------------------------------------------------------------


def _bash_syntax_ok(text: str) -> bool:
    return subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True).returncode == 0


def test_render_srun_fills_directives_settings_and_run_options():
    opts = slurm.JobOptions(
        nodes=3,
        ranks_per_node=4,
        gpus_per_node=4,
        cpus_per_rank=2,
        partition="gpu",
        time_limit="1:00:00",
        exclusive=True,
        results_dir="/data/res dir",
        python="/opt/py/bin/python",
        run_args=("--ops", "all_reduce", "--run-id", "a b"),
        env=(("NCCL_DEBUG", "INFO"),),
    ).validate()
    text = slurm.render(opts)
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    for directive in (
        "--nodes=3",
        "--ntasks-per-node=4",
        "--gpus-per-node=4",
        "--cpus-per-task=2",
        "--partition=gpu",
        "--time=1:00:00",
        "--exclusive",
    ):
        assert f"#SBATCH {directive}" in lines, directive
    assert "##SBATCH --account=myproject" in lines  # not asked: stays switched off
    assert "COMMBENCH_PYTHON=${COMMBENCH_PYTHON:-/opt/py/bin/python}" in lines
    assert "COMMBENCH_RESULTS=${COMMBENCH_RESULTS:-'/data/res dir'}" in lines
    assert "DEFAULT_RUN_ARGS=(--ops all_reduce --run-id 'a b')" in lines
    # --env comes after the template's own knob defaults, so it is the value that holds
    assert lines.index("export NCCL_DEBUG=INFO") > lines.index("export NCCL_DEBUG=${NCCL_DEBUG:-WARN}")
    assert _bash_syntax_ok(text)


def test_render_torchrun_one_task_per_node_with_the_ranks_cores():
    opts = slurm.JobOptions(nodes=2, ranks_per_node=8, launcher="torchrun", cpus_per_rank=4).validate()
    lines = slurm.render(opts).splitlines()
    assert "#SBATCH --ntasks-per-node=1" in lines and "#SBATCH --cpus-per-task=32" in lines
    assert "COMMBENCH_RANKS_PER_NODE=${COMMBENCH_RANKS_PER_NODE:-8}" in lines
    assert "##SBATCH --gpus-per-node=8" in lines and "##SBATCH --exclusive" in lines
    assert any("--rdzv-backend=c10d" in line for line in lines)


@pytest.mark.parametrize("template", sorted((REPO / "slurm").glob("*.sbatch")), ids=lambda p: p.name)
def test_templates_are_bash_and_render_every_line_the_options_need(template):
    assert _bash_syntax_ok(template.read_text())
    launcher = template.stem.removeprefix("commbench-")
    slurm.render(slurm.JobOptions(nodes=1, ranks_per_node=1, launcher=launcher))  # raises on a missing line


def test_a_template_missing_a_line_is_an_error(tmp_path, monkeypatch):
    text = (REPO / "slurm" / "commbench-srun.sbatch").read_text().replace("#SBATCH --exclusive\n", "")
    (tmp_path / "commbench-srun.sbatch").write_text(text)
    monkeypatch.setattr(slurm, "TEMPLATES_DIR", tmp_path)
    with pytest.raises(CommbenchError, match="lacks lines for exclusive"):
        slurm.render(slurm.JobOptions(nodes=1, ranks_per_node=1))


def test_templates_ship_with_the_package():
    """The package reads the slurm/ templates through a link that a wheel turns into copies."""
    for name in ("commbench-srun.sbatch", "commbench-torchrun.sbatch"):
        assert (slurm.TEMPLATES_DIR / name).read_text() == (REPO / "slurm" / name).read_text()
    assert '"slurm_templates/*.sbatch"' in (REPO / "pyproject.toml").read_text()


# ---- parsing Slurm's answers ------------------------------------------------------------------------


def test_parse_squeue_scontrol_and_sacct():
    queued = slurm.parse_squeue("12|PENDING|0:00||Resources\n13|RUNNING|1:02|n[0-1]|None\n14_2|RUNNING|0:01|n0|None\n")
    assert {k: (v.state, v.nodes) for k, v in queued.items()} == {12: ("PENDING", ""), 13: ("RUNNING", "n[0-1]")}
    fields = slurm.parse_scontrol(
        "JobId=7 JobName=commbench JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15 "
        "RunTime=00:01:03 NodeList=n[0-1] StdOut=/w/commbench-7.out"
    )
    status = slurm.status_from_scontrol(fields)
    assert (status.job_id, status.state, status.exit_code) == (7, "TIMEOUT", "0:15")
    assert status.stdout_path == "/w/commbench-7.out"
    assert status.finished and not status.succeeded
    assert slurm.parse_sacct("9|CANCELLED by 0|00:00:05|n0|0:0\n").state == "CANCELLED"
    assert slurm.parse_state("OUT_OF_MEMORY") == "OUT_OF_MEMORY" and slurm.parse_state("") == slurm.UNKNOWN


def _fake_slurm(bin_dir: Path, monkeypatch, **scripts: str) -> None:
    """Stand-in Slurm commands (name -> sh body) first on PATH."""
    bin_dir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        tool = bin_dir / name
        tool.write_text(f"#!/bin/sh\n{body}\n")
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")


FORGOTTEN = dict(
    squeue="echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1",
    scontrol="echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1",
)


def test_a_job_slurmctld_forgot_is_looked_up_in_sacct(tmp_path, monkeypatch):
    _fake_slurm(tmp_path / "bin", monkeypatch, **FORGOTTEN, sacct="echo '7|OUT_OF_MEMORY|00:03:10|n[0-1]|0:125'")
    status = slurm.job_status(7)
    assert (status.state, status.source, status.exit_code) == ("OUT_OF_MEMORY", "sacct", "0:125")


def test_without_accounting_a_forgotten_job_is_unknown(tmp_path, monkeypatch):
    _fake_slurm(
        tmp_path / "bin", monkeypatch, **FORGOTTEN, sacct="echo 'Slurm accounting storage is disabled' >&2; exit 1"
    )
    assert slurm.job_status(7).state == slurm.UNKNOWN


def test_jobs_without_slurm_shows_the_recorded_states(commands, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("COMMBENCH_JOBS_FILE", str(tmp_path / "jobs.jsonl"))
    sub = slurm.Submission(3, "alpha", "2026-01-01T00:00:00+00:00", "srun", 2, 4, "/r/slurm-3")
    slurm.remember_submission(sub)
    slurm.remember_state(sub, slurm.JobStatus(3, "TIMEOUT", "scontrol", elapsed="00:30:00"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert cli_main(["jobs"]) == 0
    out, err = capsys.readouterr()
    assert "warning: states as last seen (scontrol not found" in err
    row = r"^3\s+TIMEOUT\s+00:30:00\s+2026-01-01T00:00:00\s+run\s+2 x 4\s+srun\s+/r/slurm-3$"
    assert re.search(row, out, re.MULTILINE), out


def test_registry_merges_states_and_keeps_clusters_apart(tmp_path, monkeypatch):
    monkeypatch.setenv("COMMBENCH_JOBS_FILE", str(tmp_path / "jobs.jsonl"))
    first = slurm.Submission(5, "alpha", "t0", "srun", 2, 2, "/r/slurm-5")
    other = slurm.Submission(5, "beta", "t1", "torchrun", 4, 8, "/s/slurm-5")
    slurm.remember_submission(first)
    slurm.remember_submission(other)
    slurm.remember_state(first, slurm.JobStatus(5, "COMPLETED", "scontrol", elapsed="00:01:02"))
    with open(tmp_path / "jobs.jsonl", "a") as handle:
        handle.write('{"event": "submitted", "job_id"')  # a torn line
    subs = slurm.submissions()
    assert [(s.cluster, s.job_id, s.state, s.elapsed) for s in subs] == [
        ("alpha", 5, "COMPLETED", "00:01:02"),
        ("beta", 5, "", ""),
    ]


# ---- bad input ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--", "--ops", "bogus"], "unknown 'bogus'"),
        (["--", "--out", "x"], "give the results folder to submit"),
        (["--time", "2h"], "not a Slurm time limit"),
        (["--launcher", "mpirun"], "invalid choice"),
        (["--env", "NOEQUALS"], "expected NAME=VALUE"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(commands, capsys, argv, message):
    assert _exit_code(["submit", "--nodes", "2", "--ntasks-per-node", "2", "--dry-run", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def _exit_code(argv: list[str]) -> int:
    try:
        return cli_main(argv)
    except SystemExit as exc:  # argparse's own checks (choices) exit from the parser
        return exc.code


def test_without_sbatch_a_clear_error(commands, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert cli_main(["submit", "--nodes", "1", "--ntasks-per-node", "1", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("commbench submit: error: sbatch not found") and len(err.splitlines()) == 1


# ---- against a real Slurm ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(slurm_cluster, tmp_path_factory):
    """The cluster, a working directory to submit from, and the environment commbench runs with:
    the cluster's SLURM_CONF, a private job registry, commbench importable on the nodes."""
    work = tmp_path_factory.mktemp("slurm-submit")
    env = {**slurm_cluster.env, "XDG_CACHE_HOME": str(work / "cache"), "PYTHONPATH": str(REPO)}
    return SimpleNamespace(sc=slurm_cluster, work=work, env=env, results=work / "results")


def commbench(site, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CLI, *args], cwd=site.work, env=site.env, capture_output=True, text=True, timeout=timeout
    )


def submit_args(site, *extra: str) -> list[str]:
    return [
        "submit",
        "--nodes",
        "2",
        "--ntasks-per-node",
        "2",
        "--out",
        str(site.results),
        "--env",
        "GLOO_SOCKET_IFNAME=eth0",
        *extra,
    ]


def job_id_of(stdout: str) -> int:
    match = re.search(r"submitted job (\d+)", stdout)
    assert match, stdout
    return int(match.group(1))


def listed_state(site, job_id: int) -> str:
    p = commbench(site, "jobs", "--json")
    assert p.returncode == 0, p.stderr
    return {row["job_id"]: row["state"] for row in json.loads(p.stdout)}[job_id]


def the_run(job_dir: Path):
    runs = list_runs(job_dir)
    assert len(runs) == 1, (job_dir, runs)
    return load_run(runs[0])


def assert_two_by_two(run, names):
    assert run.info.complete, run.info.reason
    assert [(node.hostname, len(node.ranks)) for node in run.info.nodes] == [(names[0], 2), (names[1], 2)]
    assert {"intra", "inter"} <= {rec["scope"] for rec in run.records}
    assert run.records and all(rec["wrong"] == 0 for rec in run.records)


@pytest.mark.cluster
@pytest.mark.slurm
def test_submit_wait_completes_and_summarises(site):
    t0 = time.monotonic()
    p = commbench(site, *submit_args(site, "--wait", "--", *QUICK_RUN))
    wall = time.monotonic() - t0
    assert p.returncode == 0, p.stdout + p.stderr
    job = job_id_of(p.stdout)
    run = the_run(site.results / f"slurm-{job}")
    assert_two_by_two(run, site.sc.ec.names)
    assert {rec["scope"] for rec in run.records} == {"world", "intra", "inter"}
    assert max(rec["size_bytes"] for rec in run.records) == 4 << 20
    assert f"run directory: {run.path}" in p.stdout
    assert "2 nodes x 2 ranks (world 4)" in p.stdout and "scopes: world, intra, inter;" in p.stdout
    assert "wrong: 0" in p.stdout and f"job {job} COMPLETED" in p.stdout
    assert (site.results / f"slurm-{job}" / "job.sbatch").read_text().startswith("#!/bin/bash")
    assert listed_state(site, job) == "COMPLETED"
    print(f"\njob {job}: submit --wait took {wall:.0f} s\n{p.stdout}")


@pytest.mark.cluster
@pytest.mark.slurm
def test_a_failing_job_is_reported_with_its_log_tail(site):
    # valid for commbench run, impossible on these CPU nodes: fails in the job, not at submit
    p = commbench(site, *submit_args(site, "--wait", "--", "--backend", "nccl", "-e", "1K"))
    job = job_id_of(p.stdout)
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"error: job {job} FAILED" in p.stderr
    assert "--- last " in p.stderr and "--backend nccl needs one GPU per rank" in p.stderr
    assert listed_state(site, job) == "FAILED"


@pytest.mark.cluster
@pytest.mark.slurm
def test_a_job_over_its_time_limit_is_reported_timeout(site):
    # a sendrecv that would take hours; SlurmCluster.expire moves its end time to now
    endless = ["--ops", "sendrecv", "-b", "16M", "-e", "16M", "-n", "100000", "--scopes", "inter"]
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI, *submit_args(site, "--time", "10", "--wait", "--", *endless)],
        cwd=site.work,
        env=site.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        job = job_id_of(proc.stdout.readline())
        # expire only once the ranks are measuring: expiring a job whose batch script has not yet
        # started its srun step makes srun fail ("already completing") and the job FAILED, not TIMEOUT
        deadline = time.monotonic() + 90
        while not list((site.results / f"slurm-{job}").glob("*/run.json")) and time.monotonic() < deadline:
            time.sleep(0.3)
        site.sc.expire(job)
        out, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 1, out + err
    assert f"error: job {job} TIMEOUT" in err and "--- last " in err
    assert listed_state(site, job) == "TIMEOUT"


@pytest.mark.cluster
@pytest.mark.slurm
def test_dry_run_output_is_a_script_sbatch_runs_as_is(site):
    p = commbench(site, *submit_args(site, "--launcher", "torchrun", "--dry-run", "--", *TINY_RUN))
    assert p.returncode == 0, p.stderr
    script = site.work / "dry-run.sbatch"
    script.write_text(p.stdout)
    sub = site.sc.run(["sbatch", "--parsable", str(script)], env=site.env, cwd=site.work, check=True)
    job = int(sub.stdout.strip())
    assert site.sc.wait(job, timeout=150) == "COMPLETED", _logs(site, job)
    run = the_run(site.results / f"slurm-{job}")
    assert_two_by_two(run, site.sc.ec.names)
    assert run.info.args["launcher"] == "torchrun"


@pytest.mark.cluster
@pytest.mark.slurm
def test_templates_run_unmodified_with_sbatch(site):
    """The files in slurm/ as they are; only sbatch options and exported variables adapt them to
    2 CPU nodes (no GPUs, 4 cores): what a user would do on the command line."""
    names = site.sc.ec.names
    results = site.work / "template-results"
    env = {
        "COMMBENCH_PYTHON": sys.executable,
        "COMMBENCH_RESULTS": str(results),
        "GLOO_SOCKET_IFNAME": "eth0",
        "COMMBENCH_RANKS_PER_NODE": "2",
    }
    overrides = {"srun": ["--ntasks-per-node=2", "--cpus-per-task=1"], "torchrun": ["--cpus-per-task=2"]}
    jobs = {}
    for launcher, args in overrides.items():
        sub = site.sc.run(
            [
                "sbatch",
                "--parsable",
                "--gpus-per-node=0",
                *args,
                str(REPO / "slurm" / f"commbench-{launcher}.sbatch"),
                *TINY_RUN,
            ],
            env={**site.env, **env},
            cwd=site.work,
            check=True,
        )
        jobs[launcher] = int(sub.stdout.strip())
    for launcher, job in jobs.items():
        assert site.sc.wait(job, timeout=150) == "COMPLETED", _logs(site, job, results)
        run = the_run(results / f"slurm-{job}")
        assert_two_by_two(run, names)
        assert run.info.args["launcher"] == launcher
        pointer = (site.work / f"commbench-{job}.out").read_text()
        assert str(results / f"slurm-{job}") in pointer  # Slurm's own file says where the results are


def _logs(site, job: int, results: Path | None = None) -> str:
    job_log = (results or site.results) / f"slurm-{job}" / "job.log"
    text = job_log.read_text()[-3000:] if job_log.exists() else f"(no {job_log})"
    return text + "\n" + site.sc.run(["scontrol", "show", "job", str(job)]).stdout


# ---- calibrate under Slurm: one task per node ------------------------------------------------------------


def test_render_calibrate_runs_it_on_every_node():
    opts = slurm.JobOptions(nodes=3, ranks_per_node=1, command="calibrate", run_args=("--quick",)).validate()
    lines = slurm.render(opts).splitlines()
    assert "COMMBENCH_COMMAND=${COMMBENCH_COMMAND:-calibrate}" in lines
    assert "DEFAULT_RUN_ARGS=(--quick)" in lines and "#SBATCH --ntasks-per-node=1" in lines
    assert any('-m commbench "$COMMBENCH_COMMAND" --out "$job_dir"' in line for line in lines)
    assert "COMMBENCH_COMMAND=${COMMBENCH_COMMAND:-run}" in slurm.render(slurm.JobOptions(nodes=1, ranks_per_node=2))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--ntasks-per-node", "2", "--", "--quick"], "one task per node"),
        (["--ntasks-per-node", "1", "--", "--dtype", "fp8"], "--dtype 'fp8': unknown"),
        (["--ntasks-per-node", "1", "--", "--gemm-dims", "0"], "out of range"),
        (["--ntasks-per-node", "1", "--", "--out", "x.json"], "give the results folder to submit"),
        (["--ntasks-per-node", "1", "--", "--max-bytes", "4M"], "unrecognized arguments"),
    ],
)
def test_calibrate_options_are_checked_before_queueing(commands, capsys, argv, message):
    assert _exit_code(["submit", "--command", "calibrate", "--nodes", "2", "--dry-run", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


@pytest.mark.cluster
@pytest.mark.slurm
def test_submit_calibrate_writes_one_processor_per_node(site):
    p = commbench(
        site,
        "submit",
        "--command",
        "calibrate",
        "--nodes",
        "2",
        "--ntasks-per-node",
        "1",
        "--out",
        str(site.results),
        "--wait",
        "--",
        "--quick",
        "--gemm-dims",
        "32,64",
        "--attention",
        "64x2x16",
        "--repeats",
        "1",
        "--threads",
        "1",
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    job = job_id_of(p.stdout)
    files = sorted((site.results / f"slurm-{job}").glob("processor-*.json"))
    assert [f.name for f in files] == [f"processor-{name}.json" for name in sorted(site.sc.ec.names)]
    for path in files:
        assert json.loads(path.read_text())["gemm_surface"]["source"].startswith(f"measured on {path.stem[10:]} ")
        assert f"processor: {path}" in p.stdout


# ---- diagnose under Slurm: one task per node, the diagnosis in the job's folder --------------------------


def test_dry_run_diagnose_runs_it_once_per_node_without_killing_the_step(commands, capsys):
    """--diagnose renders diagnose with one task per node (the default), its options as given, and
    srun without --kill-on-bad-exit: a failing node is what the diagnosis reports."""
    assert (
        cli_main(
            ["submit", "--diagnose", "--nodes", "4", "--out", "/r", "--dry-run", "--", "--group-size", "4", "--json"]
        )
        == 0
    )
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert "COMMBENCH_COMMAND=${COMMBENCH_COMMAND:-diagnose}" in lines
    assert "#SBATCH --nodes=4" in lines and "#SBATCH --ntasks-per-node=1" in lines
    assert "DEFAULT_RUN_ARGS=(--group-size 4 --json)" in lines
    srun_line = next(i for i, line in enumerate(lines) if line.startswith("srun "))
    assert 'srun --label --kill-on-bad-exit="$kill_on_bad_exit"' in lines[srun_line]
    assert 'commbench "$COMMBENCH_COMMAND" --out "$job_dir" "${quiet[@]}" "$@"' in lines[srun_line + 1]
    assert _bash_syntax_ok(text)


@pytest.mark.parametrize("command, kill, quiet", [("diagnose", "0", ""), ("run", "1", " --no-progress")])
@pytest.mark.parametrize("launcher", slurm.LAUNCHERS)
def test_the_rendered_script_starts_diagnose_without_kill_on_bad_exit_or_progress_flag(
    tmp_path, command, kill, quiet, launcher
):
    """Run the rendered script with stand-in srun and scontrol; srun prints what it was asked to start."""
    fake = tmp_path / "bin"
    fake.mkdir()
    for tool, body in {"srun": 'echo "$@"', "scontrol": "echo n0"}.items():
        (fake / tool).write_text(f"#!/bin/sh\n{body}\n")
        (fake / tool).chmod(0o755)
    opts = slurm.JobOptions(
        nodes=2,
        ranks_per_node=1,
        launcher=launcher,
        command=command,
        python="python",
        results_dir=str(tmp_path),
        run_args=("--timeout", "5"),
    ).validate()
    env = {
        "PATH": f"{fake}:/usr/bin:/bin",
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "n[0-1]",
        "SLURM_NTASKS": "2",
        "SLURM_JOB_NUM_NODES": "2",
    }
    proc = subprocess.run(["bash", "-c", slurm.render(opts)], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    started = (tmp_path / "slurm-7" / "job.log").read_text().splitlines()[-1]
    assert f"--kill-on-bad-exit={kill} python -m " in started, started
    assert started.endswith(f"-m commbench {command} --out {tmp_path / 'slurm-7'}{quiet} --timeout 5"), started


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--nodes", "4", "--ntasks-per-node", "2"], "diagnose runs one task per node"),
        (["--nodes", "1"], "diagnose needs at least 2 nodes"),
        (["--nodes", "4", "--", "--group-size", "8"], "--group-size 8: must be between 2 and the job's 4 nodes"),
        (["--nodes", "4", "--", "--simulate", "64"], "--simulate describes a cluster model"),
        (["--nodes", "4", "--", "--slow", "n1"], "--slow describes a cluster model"),
        (["--nodes", "4", "--", "--out", "x"], "give the results folder to submit"),
        (["--nodes", "4", "--", "--timeout", "0"], "--timeout 0: must be positive"),
        (["--nodes", "4", "--", "--iters", "0"], "--iters 0: must be at least 1"),
        (["--nodes", "4", "--", "--max-bytes", "4M"], "unrecognized arguments: --max-bytes"),
        (["--nodes", "4", "--command", "calibrate"], "--diagnose is --command diagnose"),
        (["--nodes", "4", "--db", "x.duckdb"], "--db and --cluster apply to --command run, not diagnose"),
    ],
)
def test_diagnose_bad_input_is_refused_before_queueing(commands, capsys, argv, message):
    assert _exit_code(["submit", "--diagnose", "--dry-run", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_run_still_needs_its_ranks_per_node(commands, capsys):
    assert _exit_code(["submit", "--nodes", "2", "--dry-run"]) == 2
    assert "--ntasks-per-node is needed" in capsys.readouterr().err


def test_wait_summarises_the_diagnosis_and_records_the_command(commands, capsys, tmp_path, monkeypatch):
    """At COMPLETED the summary comes from the diagnosis run directory in the job's folder."""
    from commbench.diagnose.report import save_run

    monkeypatch.setenv("COMMBENCH_JOBS_FILE", str(tmp_path / "jobs.jsonl"))
    job_dir = tmp_path / "slurm-9"
    report = {
        "source": "measured (test)",
        "nodes": 4,
        "rounds": 5,
        "group_tests": 9,
        "reference": None,
        "drain": [{"node": "n2", "reasons": ["slow"], "evidence": []}],
        "links": [{"link": ["n0", "n3"], "reasons": ["slow"], "evidence": []}],
        "exclude": "n2",
        "good": "n[0-1,3]",
        "round_log": [],
    }
    run_dir = save_run(report, job_dir, {}, synthetic=False, note="test")
    sub = slurm.Submission(9, "ci", "t0", "srun", 4, 1, str(job_dir), ["--timeout", "60"], command="diagnose")
    slurm.remember_submission(sub)
    assert submit_command.report(sub, slurm.JobStatus(9, "COMPLETED", "scontrol", elapsed="00:01:10")) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "job 9 COMPLETED after 00:01:10",
        f"diagnosis: {run_dir}",
        "4 nodes, 5 concurrent rounds, 9 group tests (measured (test))",
        "nodes to drain: n2 (slow)",
        "links to inspect: n0 <-> n3 (slow)",
        "good nodes: n[0-1,3]",
        "# exclude: n2",
    ]
    assert [s.command for s in slurm.submissions()] == ["diagnose"]


def test_a_failed_diagnose_job_still_shows_the_diagnosis_it_wrote(commands, capsys, tmp_path):
    from commbench.diagnose.report import save_run

    job_dir = tmp_path / "slurm-9"
    report = {
        "source": "s",
        "nodes": 2,
        "rounds": 1,
        "group_tests": 1,
        "reference": None,
        "drain": [],
        "links": [],
        "exclude": "",
        "good": "n[0-1]",
        "round_log": [],
    }
    save_run(report, job_dir, {}, synthetic=False, note="test")
    (job_dir / "job.log").write_text("1: lost the rendezvous\n")
    sub = slurm.Submission(9, "ci", "t0", "srun", 2, 1, str(job_dir), command="diagnose")
    with pytest.raises(CommbenchError, match="job 9 FAILED"):
        submit_command.report(sub, slurm.JobStatus(9, "FAILED", "scontrol", exit_code="1:0"))
    captured = capsys.readouterr()
    assert "# exclude: " in captured.out.splitlines() and "nodes to drain: none" in captured.out
    assert "1: lost the rendezvous" in captured.err
