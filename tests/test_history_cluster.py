"""History, compare and check on real runs of the emulated cluster (network namespaces, tc-shaped links).

Ten runs with the nodes' links at 400 Mbit/s, then ten at 250 Mbit/s (the rows take 1.6x as long),
all with the same command: `history` must find the change at run 11; `compare` of two 400 Mbit/s runs
must call >= 95% of rows unchanged; `check` of a 250 Mbit/s run against a baseline of the 400 Mbit/s runs must
exit 1 and name the inter-node rows. Kept short: 2 nodes x 2 ranks, the inter-node all_reduce (two
rails sharing each link) at 2 and 4 MiB, 5 iterations. Only inter-node rows, at a rate where the
link sets their time: the intra-node (loopback) rows, and rows at 1 Gbit/s, which needs a good part
of a core per rank, moved with the load of the two shared cores when other tests ran beside. The
drop is larger than check's 10% tolerance plus the baseline's spread under that load (a 20% drop
failed rows by +21-41% against limits of +16-22% in one loaded run: too close to call every time).
Needs root; skips with the reason otherwise (and fails in CI, where root is there).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cluster.emulated import wait_procs

from commbench.data.rundir import list_runs
from tests.conftest import REPO

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

RUN_ARGS = [
    "--ops",
    "all_reduce",
    "-b",
    "2M",
    "-e",
    "4M",
    "-n",
    "5",
    "-w",
    "1",
    "--scopes",
    "inter",
    "--cluster",
    "emu",
]


def run_on_every_rank(cluster, args: list[str], out, port: int, ranks_per_node: int = 2):
    """Start every rank itself (RANK, WORLD_SIZE, ... as torchrun would set them): no launcher agents,
    a third fewer processes per run than torchrun on this 2-core machine."""
    world = ranks_per_node * len(cluster.nodes)
    procs = []
    for node in range(len(cluster.nodes)):
        for local in range(ranks_per_node):
            env = {
                "RANK": str(node * ranks_per_node + local),
                "WORLD_SIZE": str(world),
                "LOCAL_RANK": str(local),
                "GROUP_RANK": str(node),
                "MASTER_ADDR": cluster.addr(0),
                "MASTER_PORT": str(port),
                "GLOO_SOCKET_IFNAME": "eth0",
            }
            procs.append(
                cluster.node(node).popen(
                    [sys.executable, "-m", "commbench", "run", "--out", str(out), "--no-progress", *args],
                    env=env,
                    cwd=REPO,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
    return wait_procs(procs, 300)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commbench", *args], capture_output=True, text=True, cwd=REPO)


# twenty runs of four freshly started ranks each (80 Python + torch start-ups): beside the other
# xdist workers at a load average of 15 on two cores it passed pytest's 600 s (2026-12-02). Each
# run keeps its own 300 s bound (run_on_every_rank), so a hung run still fails inside this limit.
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("emulated_cluster", [dict(rate="400mbit")], indirect=True)
def test_rate_drop_found_by_history_compare_and_check(emulated_cluster, tmp_path):
    out, db = tmp_path / "runs", tmp_path / "fleet.duckdb"
    for number in range(1, 21):
        if number == 11:
            for node in range(len(emulated_cluster.nodes)):
                emulated_cluster.shape(node, rate="250mbit")
        results = run_on_every_rank(
            emulated_cluster, RUN_ARGS + ["--run-id", f"run{number:02d}"], out, port=29631 + number
        )
        assert [code for code, _, _ in results] == [0] * 4, results[0][2][-3000:]
    assert cli("db", "ingest", str(out), "--db", str(db)).returncode == 0
    runs = [str(path) for path in list_runs(out)]

    history = cli(
        "history",
        "--cluster",
        "emu",
        "--op",
        "all_reduce",
        "--size",
        "4M",
        "--scope",
        "inter",
        "--db",
        str(db),
        "--json",
    )
    assert history.returncode == 0, history.stderr
    (series,) = json.loads(history.stdout)
    print("inter 4M busbw per run:", [round(point["busbw_gbps"], 4) for point in series["points"]])
    found = [change["index"] for change in series["change_points"]]
    print("change points at runs", found)
    # the rate's change must be found at run 11; this 2-core machine's load can move a few runs for
    # real (a CI run measured runs 7-10 at 1 Gbit/s 12-17% slower than runs 1-6, and history rightly
    # found that too), so one or two other change points are allowed, not a detector that fires everywhere
    assert 11 in found and len(found) <= 3, series["change_points"]

    same = json.loads(cli("compare", runs[0], runs[1], "--json").stdout)
    unchanged = sum(row["verdict"] == "no significant change" for row in same["rows"])
    print(f"compare run01 run02: {unchanged} of {len(same['rows'])} rows unchanged")
    assert unchanged >= 0.95 * len(same["rows"])

    baseline = tmp_path / "baseline.json"
    assert cli("baseline", "create", *runs[:10], "-o", str(baseline)).returncode == 0
    check = cli("check", runs[14], "--baseline", str(baseline), "--tolerance", "10%")
    print(check.stdout)
    assert check.returncode == 1
    failed = [line for line in check.stdout.splitlines() if line.strip().startswith("FAIL")]
    # the inter-node rows cross the slowed link
    assert any(" inter " in line and " 4M float out-of-place" in line for line in failed), check.stdout
    assert sum(" inter " in line for line in failed) >= 2, check.stdout
