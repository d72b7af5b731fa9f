"""Scheduler actions on a real Slurm (tests/cluster/slurm.py: slurmctld and one slurmd per network-namespace
node, links shaped with tc), one four-node cluster shared by the tests of this module:

- `submit --diagnose --wait -- --drain` drains exactly the node shaped to 300 Mbit/s, with a commbench
  reason (sinfo -R); shaped back, `commbench health --slurm` as Slurm's HealthCheckProgram resumes it;
- the HealthCheckProgram drains a node shaped slow later on its own, within HealthCheckInterval plus
  the check's time, and never resumes a node an admin drained;
- the cap refuses three of four nodes and drains nothing (exit 1, naming the cap); `check --resume`
  resumes a node commbench drained and leaves an admin's drain;
- a recurring sweep (`submit --every`) runs at least twice and both runs are in the store.

The health check is told the NIC's line rate (1 Gbit/s, the emulated link) and sends to the bridge's
address; no program runs there. The checks run one after the other in the order written.

Slow (about 3 minutes in all on the 2-core test VM, one cluster for all): a 4-node diagnosis job
(~30 s), health checks that need whole HealthCheckIntervals (10 s, Slurm's to pace) to drain and
resume, a sweep that must run twice 20 s apart, and a torch import per intra-node check.
"""

from __future__ import annotations

import atexit
import itertools
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from commbench.data import store

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "commbench"]
NODES, SLOW, LATER, ADMIN = 4, 2, 1, 3
INTERVAL = 10  # HealthCheckInterval, seconds
HC_DIR = Path(tempfile.mkdtemp(prefix="commbench-hc-"))
HC_DIR.chmod(0o755)
atexit.register(shutil.rmtree, HC_DIR, True)
HC_SCRIPT, HC_ARGS = HC_DIR / "health.sh", HC_DIR / "args"
HC_SCRIPT.write_text("#!/bin/sh\nexit 0\n")  # until the cluster is up (slurmd runs it as it starts)
HC_SCRIPT.chmod(0o755)
CLUSTER = {
    "nodes": NODES,
    "rate": "1gbit",
    "slurm": {
        "extra_conf": f"HealthCheckProgram={HC_SCRIPT}\nHealthCheckInterval={INTERVAL}\nHealthCheckNodeState=ANY"
    },
}
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.slurm,
    pytest.mark.slow,
    pytest.mark.parametrize("slurm_cluster", [CLUSTER], indirect=True),
]


def reasons(sc) -> dict[str, str]:
    """sinfo -R: node -> reason, for every node that has one."""
    out = sc.run(["sinfo", "-R", "-N", "-h", "-o", "%N|%E"], check=True).stdout
    return dict(line.split("|", 1) for line in out.splitlines() if line.strip())


def wait_for(what: str, predicate, timeout: float, poll: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


def start_health_checks(sc, *health_args: str) -> None:
    """Make the HealthCheckProgram run `commbench health ...` on every node, its output in HC_DIR."""
    HC_SCRIPT.write_text(f"""#!/bin/sh
[ -f {HC_ARGS} ] || exit 0
export PATH={shutil.which("scontrol").rsplit("/", 1)[0]}:/usr/bin:/bin SLURM_CONF={sc.conf} PYTHONPATH={REPO}
log={HC_DIR}/health-$(hostname).log
echo "# check started $(date +%s.%N)" >> $log
{sys.executable} -m commbench health $(cat {HC_ARGS}) >> $log 2>&1
rc=$?
echo "# check ended $(date +%s.%N) exit $rc" >> $log
""")
    HC_ARGS.write_text(" ".join(health_args))


def check_times(log: Path) -> tuple[list[float], float]:
    """A node's health checks from its log: when each started (epoch seconds), and the longest one's seconds."""
    text = log.read_text()
    started = [float(x) for x in re.findall(r"^# check started (\S+)$", text, re.MULTILINE)]
    ended = [float(x) for x in re.findall(r"^# check ended (\S+) ", text, re.MULTILINE)]
    return started, max(end - start for start, end in zip(started, ended))


def stop_health_checks(sc) -> None:
    """No new check does anything; wait out the checks already running (one that started just before
    may still drain a node on a loaded host), then undo what they drained, so the next test starts
    with every node up."""
    HC_ARGS.unlink(missing_ok=True)

    def none_running() -> bool:
        logs = [log.read_text() for log in HC_DIR.glob("health-*.log")]
        return all(text.count("# check started") == text.count("# check ended") for text in logs)

    wait_for("the health checks already running to end", none_running, 3 * INTERVAL + 60)
    for node, reason in reasons(sc).items():
        if reason.startswith("commbench: health"):
            sc.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=True)


def test_diagnose_drains_the_slow_node_and_the_health_check_resumes_it_drains_and_spares(slurm_cluster, tmp_path):
    sc = slurm_cluster
    names, db = sc.ec.names, tmp_path / "store.duckdb"
    env = {**sc.env, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    sc.ec.shape(SLOW, rate="300mbit")
    p = subprocess.run(
        [
            *CLI,
            "submit",
            "--diagnose",
            "--nodes",
            str(NODES),
            "--out",
            str(tmp_path / "results"),
            "--env",
            "GLOO_SOCKET_IFNAME=eth0",
            "--wait",
            "--",
            "--timeout",
            "60",
            "--iters",
            "3",
            "--drain",
            "--db",
            str(db),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
        check=False,
    )
    print(p.stdout, p.stderr[-3000:])
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(rf"^actions: drain {names[SLOW]} done$", p.stdout, re.MULTILINE), p.stdout
    drained = reasons(sc)
    assert list(drained) == [names[SLOW]] and drained[names[SLOW]].startswith("commbench: diagnose: slow"), drained
    (action,) = store.read_actions(db)
    assert (action["node"], action["verb"], action["result"], action["source"]) == (
        names[SLOW],
        "drain",
        "done",
        "diagnose",
    )
    assert action["evidence_run"].startswith("diagnose-")

    sc.ec.shape(SLOW, rate="1gbit")
    sc.run(
        ["scontrol", "update", f"NodeName={names[ADMIN]}", "State=DRAIN", "Reason=admin: bad DIMM, ticket 4411"],
        check=True,
    )
    start_health_checks(
        sc,
        "--slurm",
        "--checks",
        "nic",
        "--nic-peer",
        sc.ec.bridge_addr,
        "--nic-rate",
        "1gbit",
        "--tolerance",
        "50%",
        "--seconds",
        "1",
        "-v",
        "--db",
        str(db),
    )
    try:
        wait_for(
            "the slow node resumed by the health check once shaped back",
            lambda: names[SLOW] not in reasons(sc),
            3 * INTERVAL + 60,
        )
        sc.ec.shape(LATER, rate="300mbit")
        degraded = time.monotonic()
        reason = wait_for(
            "the node shaped slow drained by its own health check",
            lambda: reasons(sc).get(names[LATER]),
            3 * INTERVAL + 60,
            poll=0.5,
        )
        took = time.monotonic() - degraded
        starts, check_s = check_times(HC_DIR / f"health-{names[LATER]}.log")
        every = max(b - a for a, b in itertools.pairwise(starts))  # Slurm starts the checks: its period, as run
        print(
            f"health check drained {names[LATER]} {took:.1f} s after it was shaped slow (HealthCheckInterval "
            f"{INTERVAL} s; checks started up to {every:.1f} s apart, the longest took {check_s:.1f} s): {reason}"
        )
        assert reason.startswith("commbench: health: nic eth0 egress: 0.")
        assert took <= max(INTERVAL, every) + check_s + 3  # + sinfo's polling
        sc.ec.shape(LATER, rate="1gbit")
        wait_for("the node resumed when it passes again", lambda: names[LATER] not in reasons(sc), 3 * INTERVAL + 60)
        admin_log = HC_DIR / f"health-{names[ADMIN]}.log"
        wait_for(
            "two health checks on the admin-drained node",
            lambda: (
                admin_log.is_file()
                and admin_log.read_text().count("drained by someone else (admin: bad DIMM, ticket 4411): not resumed")
                >= 2
            ),
            3 * INTERVAL + 60,
        )
        assert reasons(sc) == {names[ADMIN]: "admin: bad DIMM, ticket 4411"}
    finally:
        for i in (SLOW, LATER):
            sc.ec.shape(i, rate="1gbit")
        stop_health_checks(sc)
        sc.run(["scontrol", "update", f"NodeName={names[ADMIN]}", "State=RESUME"])
    verbs = [(row["node"], row["verb"], row["source"]) for row in store.read_actions(db)]
    assert (names[SLOW], "resume", "health") in verbs and (names[LATER], "drain", "health") in verbs
    assert all(node != names[ADMIN] for node, _, _ in verbs)


def fake_run(tmp_path: Path, example: str, hosts: list[str]) -> Path:
    """A shipped example run, moved onto these hosts (its figures unchanged)."""
    run = tmp_path / f"{example}-on-{len(hosts)}"
    shutil.copytree(REPO / "results" / "examples" / example, run)
    info = json.loads((run / "run.json").read_text())
    info["nodes"] = [{**info["nodes"][0], "hostname": host} for host in hosts]
    (run / "run.json").write_text(json.dumps(info))
    return run


def test_the_cap_refuses_three_of_four_and_check_resumes_only_commbench_drains(slurm_cluster, tmp_path):
    sc = slurm_cluster
    assert reasons(sc) == {}, "a node is still drained from an earlier test"
    env = {**sc.env, "PYTHONPATH": str(REPO), "COMMBENCH_DB": str(tmp_path / "store.duckdb")}
    run = fake_run(tmp_path, "example-cpu-2rank", sc.ec.names[:3])  # fails against dgx-h100 on all three
    p = subprocess.run(
        [*CLI, "check", str(run), "--expect", "dgx-h100", "--drain"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 1, p.stdout + p.stderr
    assert (
        "refused: draining 3 of the 4 nodes of partition debug in one action is over the cap --max-drain 10% "
        "(at most 1 node); nothing drained"
    ) in p.stdout.splitlines()[-1], p.stdout
    assert reasons(sc) == {}
    assert {row["result"].split(":")[0] for row in store.read_actions(tmp_path / "store.duckdb")} == {"refused"}

    # check --resume on a run that passes: a commbench drain is undone, an admin's is not
    ours, admins = sc.ec.names[0], sc.ec.names[1]
    sc.run(["scontrol", "update", f"NodeName={ours}", "State=DRAIN", "Reason=commbench: check: slow"], check=True)
    sc.run(["scontrol", "update", f"NodeName={admins}", "State=DRAIN", "Reason=admin: rack 4 power"], check=True)
    try:
        passing = fake_run(tmp_path, "example-nccl-tests-h100-synthetic", [ours, admins])
        p = subprocess.run(
            [*CLI, "check", str(passing), "--expect", "dgx-h100", "--resume"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert p.returncode == 0, p.stdout + p.stderr
        assert reasons(sc) == {admins: "admin: rack 4 power"}, p.stdout
        assert f"left alone: {admins}: drained by someone else (admin: rack 4 power): not resumed" in p.stdout
    finally:
        sc.run(["scontrol", "update", f"NodeName={ours},{admins}", "State=RESUME"])


def two_or_more(db: Path) -> list[tuple] | None:
    rows = store.query(db, "SELECT run_id, created FROM runs ORDER BY created")[1] if db.exists() else []
    return rows if len(rows) >= 2 else None


def test_a_recurring_sweep_runs_twice_and_both_runs_are_in_the_store(slurm_cluster, tmp_path):
    sc = slurm_cluster
    db = tmp_path / "sweeps.duckdb"
    env = {**sc.env, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    p = subprocess.run(
        [
            *CLI,
            "submit",
            "--nodes",
            "2",
            "--ntasks-per-node",
            "1",
            "--every",
            "20s",
            "--db",
            str(db),
            "--out",
            str(tmp_path / "results"),
            "--env",
            "GLOO_SOCKET_IFNAME=eth0",
            "--",
            "--ops",
            "all_reduce",
            "-b",
            "1K",
            "-e",
            "64K",
            "-f",
            "8",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    try:
        runs = wait_for("two sweeps in the store", lambda: two_or_more(db), 300, poll=2)
    finally:
        sc.run(["scancel", "--name=commbench"])
    first, second = runs[0], runs[1]
    assert (second[1] - first[1]).total_seconds() >= 15, runs  # the second began no sooner than --every allows
    # check grades the later sweep against the earlier, every row found in both (the verdict is the shared
    # machine's: a 1 KiB all_reduce took 18 ms once against 0.56 ms)
    checked = subprocess.run(
        [*CLI, "check", second[0], "--baseline", first[0], "--db", str(db)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode in (0, 1), checked.stdout + checked.stderr
    graded = [line for line in checked.stdout.splitlines() if line.strip().startswith(("pass", "FAIL"))]
    assert len(graded) == 6 and "not measured" not in checked.stdout, checked.stdout  # 1K, 8K, 64K x 2 variants
    cluster = store.query(db, "SELECT DISTINCT cluster FROM runs")[1][0][0]
    history = subprocess.run(
        [
            *CLI,
            "history",
            "--db",
            str(db),
            "--cluster",
            cluster,
            "--op",
            "all_reduce",
            "--size",
            "64K",
            "--scope",
            "world",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert history.returncode == 0, history.stdout + history.stderr
    assert f"{len(runs)} runs" in history.stdout and first[0] in history.stdout and second[0] in history.stdout


def test_the_intra_node_check_fails_a_node_whose_loopback_is_slow(slurm_cluster, tmp_path):
    """No GPUs here: the intra check is gloo send/recv over the node's loopback, graded against a baseline
    written on the node while healthy; then its loopback is shaped to 200 Mbit/s (tc on lo)."""
    node = slurm_cluster.ec.node(0)
    env = {"PYTHONPATH": str(REPO)}
    baseline = tmp_path / "health.json"
    health = [*CLI, "health", "--checks", "intra", "--iters", "3"]
    written = node.run([*health, "--write-baseline", str(baseline)], env=env, timeout=180)
    assert written.returncode == 0, written.stdout + written.stderr
    subprocess.run(
        [
            "tc",
            "-n",
            node.netns,
            "qdisc",
            "add",
            "dev",
            "lo",
            "root",
            "tbf",
            "rate",
            "200mbit",
            "burst",
            "512kb",
            "latency",
            "50ms",
        ],
        check=True,
    )  # burst above lo's 64 KiB MTU
    try:
        slow = node.run([*health, "--baseline", str(baseline)], env=env, timeout=180)
    finally:
        subprocess.run(["tc", "-n", node.netns, "qdisc", "del", "dev", "lo", "root"], check=False)
    print(written.stdout, slow.stdout, slow.stderr[-2000:])
    assert slow.returncode == 1
    (line,) = slow.stdout.splitlines()
    assert re.fullmatch(
        r"FAIL intra gloo loopback: [0-9.]+ GB/s, \d+% of the expected [0-9.]+ \(limit 70%; baseline .*\)", line
    )
