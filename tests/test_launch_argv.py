"""spawn_local's `argv`: another program started as the launcher starts its ranks (the rank's
environment, a session each), so bench/harness_overhead.py --cli can place its raw loop's pair
as `commbench run` places its ranks (bench/RESULTS.md, harness overhead)."""

from __future__ import annotations

import os
import sys

from commbench.measure.launch import spawn_local

REPORT = (
    "import os, sys; from pathlib import Path; "
    "Path(sys.argv[1], 'rank' + os.environ['RANK']).write_text("
    "f\"{os.environ['WORLD_SIZE']} {os.getsid(0)} {os.getpid()}\")"
)


def test_argv_runs_as_each_rank_in_a_session_of_its_own(tmp_path):
    # "none" is no driver: were argv ignored, the worker module would exit non-zero at once
    code = spawn_local(2, "{}", "none", argv=[sys.executable, "-c", REPORT, str(tmp_path)])
    assert code == 0
    for rank in (0, 1):
        world, session, pid = (tmp_path / f"rank{rank}").read_text().split()
        assert world == "2"
        assert session == pid  # a session leader: its own session (and autogroup), not ours
        assert int(session) != os.getsid(0)
