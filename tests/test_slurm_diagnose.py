"""`commbench submit --diagnose --wait` on a real Slurm (tests/cluster/slurm.py) over the emulated
cluster: one `commbench diagnose` task per node, one node's link shaped slow; the job completes and
submit prints an exclude list naming exactly that node. And when a node loses its link in the middle,
the diagnosis names it, Slurm ends the job NODE_FAIL, and submit still prints the diagnosis.

Four nodes keep the job short (about 15 s on the 2-core test VM; the eight-node acceptance without
Slurm is tests/test_diagnose_cluster.py's); each is a network namespace with its own slurmd, gloo
between them over their 1 Gbit/s eth0. The two tests share one Slurm cluster (module scope); the
second, which cuts a node off, runs last and puts the link back.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "commbench"]
NODES = 4
SLOW = 2  # the node whose link is shaped to 300 Mbit/s both ways
# diagnose's own options: a per-round timeout, and few iterations to keep the job short
DIAGNOSE = ["--timeout", "60", "--iters", "3"]

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.slurm,
    pytest.mark.parametrize("slurm_cluster", [dict(nodes=NODES, rate="1gbit")], indirect=True),
]


def submit_diagnose(sc, tmp_path: Path, *diagnose_args: str) -> tuple[subprocess.CompletedProcess, dict]:
    env = {**sc.env, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    t0 = time.monotonic()
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
            *diagnose_args,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
    )
    print(
        f"\nsubmit --diagnose --wait on {NODES} nodes took {time.monotonic() - t0:.0f} s\n{p.stdout}{p.stderr[-3000:]}"
    )
    return p, env


def test_submit_diagnose_wait_names_the_slow_node_in_the_exclude_list(slurm_cluster, tmp_path):
    sc = slurm_cluster
    sc.ec.shape(SLOW, rate="300mbit")
    p, env = submit_diagnose(sc, tmp_path, *DIAGNOSE)
    assert p.returncode == 0, p.stdout + p.stderr
    job = int(re.search(r"submitted job (\d+) \(diagnose, 4 nodes x 1 ranks, srun\)", p.stdout).group(1))
    slow = sc.ec.names[SLOW]
    assert f"job {job} COMPLETED" in p.stdout
    assert f"# exclude: {slow}" in p.stdout.splitlines(), p.stdout
    assert re.search(rf"^nodes to drain: {slow} \(", p.stdout, re.MULTILINE), p.stdout
    assert "links to inspect: none" in p.stdout
    assert re.search(rf"^diagnosis: {re.escape(str(tmp_path / 'results' / f'slurm-{job}'))}/", p.stdout, re.MULTILINE)
    jobs = subprocess.run([*CLI, "jobs", "--json"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert [(row["job_id"], row["command"], row["state"]) for row in json.loads(jobs.stdout)] == [
        (job, "diagnose", "COMPLETED")
    ]


def test_a_node_cut_off_mid_diagnosis_is_named_and_the_failed_job_still_shows_the_diagnosis(slurm_cluster, tmp_path):
    """The templates start diagnose without --kill-on-bad-exit and submit shows a failed job's diagnosis:
    Slurm ends the job NODE_FAIL when it loses the cut node, after rank 0 has written its report."""
    sc = slurm_cluster
    sc.ec.shape(SLOW, rate="300mbit")  # so the diagnosis has rounds after the first
    cut = NODES - 1
    watcher = threading.Thread(target=_cut_after_round_one, args=(sc, cut, tmp_path / "results"), daemon=True)
    watcher.start()
    try:
        p, _ = submit_diagnose(sc, tmp_path, "--timeout", "10", "--iters", "3")
    finally:
        watcher.join(timeout=1)
        sc.ec.set_link(cut, up=True)  # the cluster is the module's
    names = sc.ec.names
    assert p.returncode == 1, p.stdout + p.stderr
    assert "NODE_FAIL" in p.stderr and "the job failed, but its diagnosis was written:" in p.stdout
    assert re.search(rf"^nodes to drain: {names[SLOW]} \(slow\); {names[cut]} \(no answer\)$", p.stdout, re.MULTILINE)
    assert f"# exclude: {names[SLOW][:-1]}[{SLOW}-{cut}]" in p.stdout.splitlines(), p.stdout  # hostlist of n2, n3


def _cut_after_round_one(sc, node: int, results: Path) -> None:
    """Take node's link down as soon as rank 0 logs its first round (within 2 minutes)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if any("# round 1:" in log.read_text(errors="replace") for log in results.glob("slurm-*/job.log")):
            sc.ec.set_link(node, up=False)
            return
        time.sleep(0.2)
