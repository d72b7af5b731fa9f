"""Ctrl-C on the local launcher ends it within its grace period, even when a rank will not leave.

A rank stuck where SIGINT cannot reach Python (a collective whose peer has stopped, or teardown)
once kept the launcher waiting past the test's 120 s; the launcher now waits `grace_s`, then kills.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from foreground import as_foreground_job, signal_state

REPO = Path(__file__).resolve().parents[1]

# A launcher whose ranks ignore SIGINT and sleep: the stuck rank, without needing a real hang.
LAUNCHER_SCRIPT = """
import sys
from commbench.measure import launch
launch.WORKER_MODULE = "stuck_rank"
try:
    launch.spawn_local(2, "{}", "sweep", grace_s=1.0)
except KeyboardInterrupt:
    print("launcher left", flush=True)
"""

# each rank says it is ready (SIGINT ignored) with a file of its own before it sleeps
STUCK_RANK = (
    "import os, signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "open(f'ready-{os.getpid()}', 'w').close()\ntime.sleep(120)\n"
)


def _wait_ready(folder: Path, ranks: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while len(list(folder.glob("ready-*"))) < ranks:
        assert time.monotonic() < deadline, f"the {ranks} ranks did not start within {timeout_s} s"
        time.sleep(0.1)


def test_ctrl_c_ends_the_launcher_when_a_rank_ignores_it(tmp_path):
    (tmp_path / "stuck_rank.py").write_text(STUCK_RANK)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER_SCRIPT],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=as_foreground_job,
    )
    try:
        # the ranks are started and ignore SIGINT (a fixed 3 s sleep was too short beside busy xdist
        # workers: the signal came while the launcher was still starting them)
        _wait_ready(tmp_path, 2)
        started = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the launcher did not leave within 60 s: {signal_state(proc.pid)}") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # its ranks follow it (PDEATHSIG)
    assert "launcher left" in out
    assert time.monotonic() - started < 15
