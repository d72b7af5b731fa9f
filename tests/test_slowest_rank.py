"""`time_us` is the slowest rank's median, and `slowest_rank` names that rank.

One rank is made a straggler with the fault-injection switch (COMMBENCH_INJECT_DELAY, see
commbench/measure/faults.py): it sleeps inside every timed op. With `--scopes inter` on one node every
rank is a group of its own, so no collective couples the ranks' timings and the straggler alone is
slow; on the world scope the collective makes every rank wait for it.
"""

import os
import subprocess
import sys

import pytest

from commbench.data.rundir import list_runs, load_run
from tests.conftest import REPO

DELAY_US = 20000  # far above what a one-rank op costs even on a loaded machine (~0.05-5 ms)


def straggler_run(out, rank: int):
    env = {**os.environ, "COMMBENCH_INJECT_DELAY": f"{rank}:all_reduce", "COMMBENCH_INJECT_DELAY_US": str(DELAY_US)}
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
            "1K",
            "--ops",
            "all_reduce",
            "--scopes",
            "world,inter",
            "-n",
            "5",
            "-w",
            "1",
            "--out",
            str(out),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    return load_run(list_runs(out)[0]).records


@pytest.mark.parametrize("straggler", [0, 1])
def test_time_and_slowest_rank_follow_the_delayed_rank(tmp_path, straggler):
    records = straggler_run(tmp_path, straggler)
    alone = [r for r in records if r["scope"] == "inter"]
    assert len(alone) == 2  # out-of-place and in-place
    for record in alone:
        assert record["group_size"] == 1 and record["n_groups"] == 2
        assert record["slowest_rank"] == straggler
        assert record["time_us_min"] >= DELAY_US
        # nccl-tests' mean over ranks includes the fast rank, so it sits well below the straggler's time
        assert record["time_us_mean_nccl"] < 0.75 * record["time_us"]
    for record in (r for r in records if r["scope"] == "world"):
        assert record["time_us"] >= DELAY_US  # the all_reduce cannot finish before the straggler joins
