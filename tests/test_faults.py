"""Faults on one machine: a rank killed, a rank that hangs, intermittent corruption, concurrent runs.

Every case must end within a bounded time, non-zero, with one message naming the rank and node,
and keep every size measured before the fault. (Link faults on the emulated cluster are in
tests/test_multinode.py.)
"""

import subprocess
import sys
import time

from commbench.data.rundir import list_runs, load_run
from tests.conftest import REPO


def sweep(out, *extra, env=None, timeout=120):
    start = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "commbench",
            "run",
            "--nproc",
            "2",
            "-b",
            "1K",
            "-e",
            "256K",
            "--ops",
            "all_reduce,all_gather",
            "--out",
            str(out),
            "--no-progress",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**__import__("os").environ, **(env or {})},
    )
    return result, time.monotonic() - start


def error_lines(result):
    return [line for line in result.stderr.splitlines() if line.startswith("commbench")]


def test_killed_rank_is_named_and_measured_sizes_kept(tmp_path):
    result, elapsed = sweep(tmp_path, env={"COMMBENCH_INJECT_KILL": "1:all_gather"})
    assert result.returncode != 0 and elapsed < 60
    lines = error_lines(result)
    assert len(lines) == 1 and "lost rank 1 on node" in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    run = load_run(list_runs(tmp_path)[0])
    assert not run.info.complete and "lost rank 1" in run.info.reason
    assert {r["op"] for r in run.records} == {"all_reduce"}  # every all_reduce size finished before the fault
    assert len(run.records) == 2 * 9


def test_hung_rank_ends_at_the_timeout(tmp_path):
    result, elapsed = sweep(tmp_path, "--timeout", "5", env={"COMMBENCH_INJECT_HANG": "1:all_gather"})
    assert result.returncode == 1 and elapsed < 45
    lines = error_lines(result)
    assert len(lines) == 1 and "rank 1 on node" in lines[0] and "stopped making progress" in lines[0], result.stderr
    run = load_run(list_runs(tmp_path)[0])
    assert not run.info.complete and "no progress" in run.info.reason
    assert len([r for r in run.records if r["op"] == "all_reduce"]) == 2 * 9


def test_intermittent_corruption_needs_several_checks(tmp_path):
    result, _ = sweep(tmp_path, "-c", "3", env={"COMMBENCH_INJECT_CORRUPTION": "0:all_reduce"})
    assert result.returncode == 1
    run = load_run(list_runs(tmp_path)[0])
    wrong = {r["wrong"] for r in run.records if r["op"] == "all_reduce"}
    assert wrong == {3}, "one wrong element per check, three checks"
    assert {r["wrong"] for r in run.records if r["op"] == "all_gather"} == {0}


def test_two_runs_into_one_folder_never_clobber(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "commbench",
        "run",
        "--nproc",
        "2",
        "-b",
        "1K",
        "-e",
        "8K",
        "--ops",
        "all_reduce",
        "--out",
        str(tmp_path),
        "--no-progress",
    ]
    procs = [
        subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    assert [proc.wait(timeout=180) for proc in procs] == [0, 0]
    runs = [load_run(path) for path in list_runs(tmp_path)]
    assert len(runs) == 2 and all(run.info.complete and len(run.records) == 8 for run in runs)
