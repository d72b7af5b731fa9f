"""`commbench diagnose` on live local ranks (real mode, no cluster needed): each local rank is a "node".

The verdicts of a local run mean little (the ranks share two loaded cores and loopback), so these
tests check the machinery: a rank that stops answering is named within --timeout and the rest
completes, the report is marked measured, and a group's bandwidth and loss come out of its members'
parts as documented.
"""

import json
import math
import os
import subprocess
import sys
import time

from commbench.data.rundir import list_runs, load_run
from commbench.diagnose.hostlist import expand
from commbench.diagnose.report import load_report
from commbench.diagnose.stragglers import STRAGGLER_RATIO
from commbench.measure.diagnose import group_busbw, group_retransmit_pct
from commbench.measure.launch import free_port
from tests.conftest import REPO


def test_a_rank_that_hangs_in_round_1_is_named_and_the_diagnosis_completes(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "COMMBENCH_INJECT_HANG": "3:round1"}
    start = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "commbench",
            "diagnose",
            "--nproc",
            "4",
            "--size",
            "256K",
            "--iters",
            "2",
            "--timeout",
            "4",
            "--json",
            "--out",
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    hung = [item for item in report["drain"] if item["reasons"] == ["no answer"]]
    assert [item["node"] for item in hung] == [report["round_log"][0]["hung"][0]]
    assert hung[0]["node"].endswith("-rank3") and "round 1" in hung[0]["evidence"][0]["note"]
    assert report["round_log"][0]["outcomes"].count("hung") == 1
    assert hung[0]["node"] in expand(report["exclude"])
    assert report["source"].startswith("measured: gloo")
    assert elapsed < 60  # one round's timeout, not the whole run's
    [path] = list_runs(tmp_path)
    info = load_run(path).info
    assert info.kind == "diagnose" and not info.synthetic and info.backend == "gloo" and info.complete
    assert load_report(path)["round_log"] == report["round_log"]


def test_the_text_report_ends_with_the_exclude_line_slurm_reads(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "commbench", "diagnose", "--nproc", "2", "--size", "64K", "--iters", "2"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("# diagnose: 2 nodes") and "measured" in lines[0]
    assert lines[1].endswith("median retransmissions not measured")  # local ranks share one host's counters
    assert lines[-1].startswith("# exclude:")


def test_ranks_all_on_one_host_are_refused_in_one_line_and_every_rank_released():
    """Under a launcher (RANK, WORLD_SIZE set) node names are host names: one host is one node."""
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "COMMBENCH_LAUNCHER": "env",
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "commbench", "diagnose", "--size", "64K", "--timeout", "5"],
            env={**env, "RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    (out0, err0), (_, _) = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [2, 0]
    errors = [line for line in err0.splitlines() if "error" in line]
    assert len(errors) == 1 and "at least 2 nodes" in errors[0] and out0 == ""


def test_the_straggler_screen_names_the_rank_the_others_wait_for():
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "COMMBENCH_INJECT_DELAY": "2:screen",
        "COMMBENCH_INJECT_DELAY_US": "30000",
    }  # 30 ms late to each iteration of a ~1 ms ring
    done = subprocess.run(
        [sys.executable, "-m", "commbench", "diagnose", "--nproc", "4", "--size", "64K", "--iters", "5", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    screen = json.loads(done.stdout)["stragglers"]
    assert [s["node"] for s in screen["waited_for"]] == [f"{screen_host(done.stdout)}-rank2"], screen
    assert screen["waited_for"][0]["iterations_slow"] >= 3 and screen["slow"] == []
    assert screen["ratio"] == STRAGGLER_RATIO  # the threshold it screened at, which the dashboard draws


def screen_host(report_json: str) -> str:
    return json.loads(report_json)["source"].split("rank 0 on ")[1].split("-rank0")[0]


def part(times, error=None, sent=1000, retransmitted=0):
    return {"times": times, "error": error, "sent": sent, "retransmitted": retransmitted}


def test_a_group_runs_at_its_slowest_members_median():
    parts = [part([0.1, 0.1, 0.1]), part([0.2, 0.4, 0.3])]
    assert math.isclose(group_busbw(parts, 8 << 20), (8 << 20) / 0.3 / 1e9)


def test_a_group_that_answered_but_ran_out_of_time_is_slower_than_anything():
    assert group_busbw([part([0.1]), part([], error="TimeoutError: the round's time is up")], 1 << 20) == 0.0


def test_a_groups_loss_is_its_members_retransmissions_over_their_segments():
    assert math.isclose(group_retransmit_pct([part([1], sent=900, retransmitted=30), part([1], sent=100)]), 3.0)
    assert math.isnan(group_retransmit_pct([part([1]), part([1], sent=None, retransmitted=None)]))
