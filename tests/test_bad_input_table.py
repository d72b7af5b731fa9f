"""Every command, walked with a table of bad inputs: one line on stderr naming the problem, exit 2,
no traceback, and nothing written where the input was refused.

The commands run in this process (`commbench.cli.main`), so the table stays fast; an exception that
escapes `main` is what a user would have seen as a traceback, and fails the case. `run`, `overlap`
and `diagnose` refuse these before any rank or process group exists, so nothing starts.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest

from commbench.cli import main

REPO = Path(__file__).resolve().parents[1]
RUN = str(REPO / "results/examples/example-cpu-2rank")
NCCL_LOG = str(REPO / "tests/fixtures/nccl_tests/synthetic_all_gather_perf_2node.log")
PLAN = ["--gpus", "8", "--global-batch", "64", "--seq-len", "2048"]
PLAN_7B = ["plan", "--model", "llama2-7b", *PLAN]

# (argv, a word the one line must contain); {file}, {binary}, {utf16}, {text}, {tmp} are filled in
CASES: list[tuple[list[str], str]] = [
    # run
    (["run", "--out", "{file}"], "is a file, not a folder"),
    (["run", "--out", "/proc/nope"], "cannot create the folder"),
    (["run", "--out", "{file}/sub"], "cannot create the folder"),
    (["run", "-b", "-8"], "negative"),
    (["run", "-b", "4M", "-e", "1K"], "--min-bytes"),
    (["run", "-e", "12Q"], "bad size"),
    (["run", "--iters", "-3"], "--iters"),
    (["run", "--iters", "0"], "--iters"),
    (["run", "--warmup", "-1"], "--warmup"),
    (["run", "--nproc", "-1"], "--nproc"),
    (["run", "--nproc", "0"], "--nproc"),
    (["run", "--ops", ""], "empty list"),
    (["run", "--ops", "all_reduce,bogus"], "bogus"),
    (["run", "-d", "complex"], "unknown dtype"),
    (["run", "--backend", "gloo", "-d", "bfloat16"], "bfloat16"),
    (["run", "--backend", "mpi"], "invalid choice"),
    (["run", "--scopes", "galaxy"], "galaxy"),
    (["run", "--step-factor", "1"], "--step-factor"),
    (["run", "--min-iters", "9", "--max-iters", "3"], "--min-iters"),
    (["run", "--time-budget-ms", "inf"], "--time-budget-ms"),
    (["run", "--timeout", "nan"], "--timeout"),
    (["run", "--outlier-ratio", "1.5"], "--outlier-ratio"),
    (["run", "--max-retransmit-pct", "-1"], "--max-retransmit-pct"),
    (["run", "--pairwise", "--nproc", "1"], "at least 2"),
    (["run", "--routing", "zipf:x"], "zipf"),
    (["run", "--routing", "zipf:-1"], "negative"),
    (["run", "--routing", "gauss"], "gauss"),
    (["run", "--tokens", "a,b"], "whole numbers"),
    (["run", "--hidden", "0"], "--hidden"),
    (["run", "--top-k", "9", "--experts", "8"], "--top-k"),
    # topo
    (["topo", "--import-nccl-xml", "/nonexistent.xml"], "/nonexistent.xml"),
    (["topo", "--import-nccl-xml", "{binary}"], "{binary}"),
    (["topo", "--import-smi-topo", "/nonexistent"], "/nonexistent"),
    (["topo", "--import-smi-topo", "{text}"], "nvidia-smi topo"),
    # import
    (["import"], "required"),
    (["import", "bogus", "x"], "invalid choice"),
    (["import", "nccl-tests", "/nonexistent.log"], "/nonexistent.log"),
    (["import", "nccl-tests", "{binary}"], "binary data"),
    (["import", "nccl-tests", "{text}"], "not nccl-tests output"),
    (["import", "nccl-tests", NCCL_LOG, "--out", "{file}"], "is a file, not a folder"),
    (["import", "nccl-tests", NCCL_LOG, "--out", "/proc/nope"], "cannot create the folder"),
    # table
    (["table", "/nonexistent"], "no such run directory"),
    (["table", "{tmp}"], "not a run directory"),
    (["table", RUN, "--at", "-4M"], "negative"),
    (["table", RUN, "--at", "4Q"], "bad size"),
    (["table", RUN, "--op", "bogus"], "bogus"),
    (["table", RUN, "--format", "xml"], "invalid choice"),
    (["table", RUN, "--calculon", "/proc/nope/x.json"], "--calculon"),
    # overlap
    (["overlap", "--gemm-size", "-1"], "--gemm-size"),
    (["overlap", "--ops", "bogus"], "bogus"),
    (["overlap", "--iters", "0"], "--iters"),
    (["overlap", "--out", "{file}", "-n", "2"], "is a file, not a folder"),
    (["overlap", "--out", "/proc/nope", "-n", "2"], "cannot create the folder"),
    # trace
    (["trace"], "trace file"),
    (["trace", "/nonexistent.json"], "no such trace file"),
    (["trace", "{text}"], "not a chrome trace"),
    (["trace", "{binary}"], "not UTF-8"),
    (["trace", "--timeline-limit", "-1", "{text}"], "--timeline-limit"),
    (["trace", "--demo", "{file}"], "is a file, not a folder"),
    (["trace", "--demo", "/proc/nope"], "cannot create the folder"),
    # estimate
    (["estimate"], "--params"),
    (["estimate", "--params", "-7e9"], "--params"),
    (["estimate", "--params", "abc"], "invalid float"),
    (["estimate", "--params", "7e9", "--gpus", "0"], "--gpus"),
    (["estimate", "--params", "7e9", "--mfu", "1.5"], "--mfu"),
    (["estimate", "--params", "7e9", "--gpu", "bogus"], "bogus"),
    (["estimate", "--params", "7e9", "--tokens", "-1e12"], "--tokens"),
    (["estimate", "--params", "7e9", "--bytes", "7"], "invalid choice"),
    # plan
    (["plan", "--model", "missing/config.json", *PLAN], "no such file"),
    (["plan", "--model", "bogus", *PLAN], "unknown model"),
    (["plan", "--model", "{text}", *PLAN], "unreadable JSON"),
    (["plan", "--model", "{binary}", *PLAN], "not a config file"),
    ([*PLAN_7B, "--bandwidth", "results/nope"], "not a run directory"),
    ([*PLAN_7B, "--overlap-run", "/nonexistent"], "not a run directory"),
    (["plan", "--model", "llama2-7b", "--gpus", "-8", "--global-batch", "64", "--seq-len", "2048"], "--gpus"),
    ([*PLAN_7B, "--hardware", "bogus"], "bogus"),
    ([*PLAN_7B, "--layout", "tp=3"], "does not divide"),
    ([*PLAN_7B, "--layout", "tp=two"], "tp"),
    (["plan", "--model", "llama2-7b", "--gpus", "8", "--global-batch", "0", "--seq-len", "2048"], "--global-batch"),
    (["plan", "--model", "llama2-7b", "--gpus", "8", "--global-batch", "64", "--seq-len", "-1"], "--seq-len"),
    ([*PLAN_7B, "--processor", "/nonexistent.json"], "/nonexistent.json"),
    ([*PLAN_7B, "--slowdown", "-0.5"], "slowdown"),
    ([*PLAN_7B, "--slowdown", "0.1", "--overlap-run", RUN], "not both"),
    ([*PLAN_7B, "--top", "0"], "--top"),
    ([*PLAN_7B, "--routing", "zipf:-1"], "negative"),
    ([*PLAN_7B, "--precision", "8"], "invalid choice"),
    # calibrate
    (["calibrate", "--repeats", "0"], "--repeats"),
    (["calibrate", "--dtype", "bogus"], "bogus"),
    (["calibrate", "--gemm-dims", "a"], "whole number"),
    (["calibrate", "--gemm-shapes", "1x2"], "--gemm-shapes"),
    (["calibrate", "--attention", "1x2"], "--attention"),
    (["calibrate", "--threads", "-1"], "--threads"),
    (["calibrate", "--peak-flops", "-1"], "--peak-flops"),
    (["calibrate", "--out", "/proc/nope/x.json", "--quick"], "cannot write"),
    (["calibrate", "--out", "{file}/x.json", "--quick"], "cannot write"),
    # submit (--dry-run: nothing reaches Slurm)
    (["submit", "--dry-run"], "--nodes"),
    (["submit", "--nodes", "0", "--ntasks-per-node", "1", "--dry-run"], "--nodes"),
    (["submit", "--nodes", "1", "--ntasks-per-node", "1", "--time", "soon", "--dry-run"], "--time"),
    (["submit", "--nodes", "1", "--ntasks-per-node", "1", "--env", "NOEQ", "--dry-run"], "--env"),
    (["submit", "--nodes", "1", "--ntasks-per-node", "1", "--dry-run", "--", "--bogus"], "--bogus"),
    # jobs
    (["jobs", "--limit", "-1"], "--limit"),
    (["jobs", "--limit", "x"], "invalid int"),
    # dashboard (refused before any server starts)
    (["dashboard", "--results", "/nonexistent"], "no such folder"),
    (["dashboard", "--results", "{tmp}", "--port", "70000"], "--port"),
    (["dashboard", "--results", "{tmp}", "--port", "-1"], "--port"),
    # db
    (["db"], "required"),
    (["db", "sql", "DROP TABLE runs"], "read-only"),
    (["db", "sql", "SELECT 1; SELECT 2"], "one statement"),
    (["db", "ingest", "/nonexistent"], "/nonexistent"),
    (["db", "ingest", RUN, "--db", "/proc/nope/x.duckdb"], "/proc/nope"),
    (["db", "export"], "--parquet"),
    # compare, baseline, check, history
    (["compare", RUN, "/nonexistent"], "/nonexistent"),
    (["compare", RUN, RUN, "--threshold", "-1"], "--threshold"),
    (["compare", RUN, RUN, "--alpha", "2"], "--alpha"),
    (["baseline"], "required"),
    (["baseline", "create"], "required"),
    (["baseline", "create", "/nonexistent", "-o", "{tmp}/b.json"], "/nonexistent"),
    (["check", RUN], "--baseline"),
    (["check", RUN, "--baseline", "/nonexistent"], "/nonexistent"),
    (["check", RUN, "--expect", "bogus"], "bogus"),
    (["check", RUN, "--expect", "dgx-h100", "--tolerance", "-1"], "--tolerance"),
    (["history"], "required"),
    (["history", "--cluster", "x", "--op", "all_reduce", "--size", "-4M"], "negative"),
    (["history", "--cluster", "x", "--op", "all_reduce", "--size", "4M", "--db", "/nonexistent.duckdb"], "no database"),
    # diagnose
    (["diagnose", "--group-size", "0", "--simulate", "8"], "--group-size"),
    (["diagnose", "--simulate", "-1"], "at least 2"),
    (["diagnose", "--hosts", "@/nonexistent"], "/nonexistent"),
    (["diagnose", "--slow", "zz", "--simulate", "4"], "zz"),
    (["diagnose", "--size", "-1", "--simulate", "4"], "negative"),
    (["diagnose", "--iters", "0"], "--iters"),
    (["diagnose", "--timeout", "0"], "--timeout"),
    (["diagnose", "--out", "{file}", "--simulate", "4"], "is a file, not a folder"),
    (["diagnose", "--out", "/proc/nope", "--simulate", "4"], "cannot create the folder"),
    # health, efficiency, metrics
    (["health", "--tolerance", "2"], "--tolerance"),
    (["health", "--checks", "bogus"], "--checks"),
    (["health", "--expect", "bogus"], "bogus"),
    (["health", "--baseline", "/nonexistent"], "/nonexistent"),
    (["health", "--nic-rate", "fast"], "--nic-rate"),
    (["health", "--seconds", "-1"], "--seconds"),
    (["health", "--slurm", "--max-drain", "150%"], "--max-drain"),
    (["efficiency", "/nonexistent"], "/nonexistent"),
    (["efficiency", RUN, "--below", "2"], "--below"),
    (["metrics"], "required"),
    (["metrics", "serve", "--db", "/nonexistent.duckdb"], "no database"),
    (["metrics", "textfile", "{tmp}", "--db", "/nonexistent.duckdb"], "no database"),
    # no command, unknown command
    (["frobnicate"], "invalid choice"),
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("bad-inputs")
    (folder / "plain.txt").write_text("hello\n")
    (folder / "binary.log").write_bytes(bytes(range(256)) * 4)
    (folder / "utf16.log").write_text("# nThread 1 nGpus 1\n", encoding="utf-16")
    (folder / "text.json").write_text("not json at all\n")
    (folder / "empty").mkdir()
    return {
        "file": str(folder / "plain.txt"),
        "binary": str(folder / "binary.log"),
        "utf16": str(folder / "utf16.log"),
        "text": str(folder / "text.json"),
        "tmp": str(folder / "empty"),
    }


def call(argv: list[str]) -> tuple[int | str | None, str]:
    """Exit code and stderr of `commbench ARGV` run here; an escaping exception is a traceback."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as done:
            code = done.code
        except BaseException as exc:
            return f"traceback: {type(exc).__name__}: {exc}", err.getvalue()
    return code, err.getvalue()


@pytest.mark.parametrize("argv,needle", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_is_one_line_and_exit_2(inputs, tmp_path, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)  # anything a refused command wrote by default would land here
    monkeypatch.delenv("COMMBENCH_DB", raising=False)
    argv = [arg.format(**inputs) for arg in argv]
    code, stderr = call(argv)
    lines = stderr.strip().splitlines()
    assert code == 2, (code, stderr)
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert needle.format(**inputs) in lines[0], lines[0]
    assert not os.listdir(tmp_path), f"a refused command wrote {os.listdir(tmp_path)}"


def test_the_table_covers_every_command():
    from commbench.cli import COMMANDS

    assert {argv[0] for argv, _ in CASES} >= set(COMMANDS)
    assert len(CASES) >= 86


def _commands_and_actions() -> list[list[str]]:
    from commbench.cli import COMMANDS, build_parser

    parser = build_parser()
    found = []
    for name in COMMANDS:
        found.append([name])
        command = parser._subparsers._group_actions[0].choices[name]
        for action in command._actions:
            if isinstance(action, type(parser._subparsers._group_actions[0])):
                found.extend([name, sub] for sub in action.choices)
    return found


@pytest.mark.parametrize("argv", _commands_and_actions(), ids=" ".join)
def test_every_help_prints_and_exits_0(argv):
    """A help text argparse cannot format (a stray % in it) is a traceback the first time a user asks."""
    code, stderr = call([*argv, "--help"])
    assert code == 0 and not stderr, (code, stderr)
