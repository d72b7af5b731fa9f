"""A rank tears its process groups down before the interpreter finalizes.

The SIGTERM watch thread lives until the process ends and holds the run, and through it the
session's gloo groups; groups left to finalization aborted ranks at exit ("terminate called
without an active exception") after runs that had measured every row.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Runs one launched rank in-process and reports whether its run (with the session and groups it
# holds) is still alive once the command has returned.
RANK_SCRIPT = """
import gc, sys, weakref
from commbench.measure import runner
runs = []
init = runner.MeasuredRun.__init__
def remember(self, *args, **kwargs):
    init(self, *args, **kwargs)
    runs.append(weakref.ref(self))
runner.MeasuredRun.__init__ = remember
from commbench.cli import main
code = main(["run", "-b", "1K", "-e", "1K", "--ops", "all_reduce", "--no-progress", "--out", sys.argv[1]])
gc.collect()
alive = sum(ref() is not None for ref in runs)
print(f"exit={code} runs={len(runs)} alive={alive}")
"""


def _free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def test_a_finished_rank_holds_no_run_or_process_group(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=_free_port())
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-c", RANK_SCRIPT, str(tmp_path)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "exit=0 runs=1 alive=0" in done.stdout, done.stdout + done.stderr[-2000:]


def test_an_interrupted_rank_leaves_without_the_interpreters_teardown(monkeypatch):
    """Ctrl-C mid-collective: the rank exits 130 through os._exit, so the gloo threads of the cut-short
    collective are not torn down under it (that aborted ranks with "terminate called ..." in a
    fresh-clone CI run, 2026-12-02)."""
    from commbench.measure import worker

    def interrupted(*_args):
        raise KeyboardInterrupt

    exits: list[int] = []

    def fake_exit(code: int) -> None:
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setenv(worker.WORKER_DRIVER_ENV, "sweep")
    monkeypatch.setenv(worker.WORKER_CONFIG_ENV, worker.RunConfig().to_json())
    monkeypatch.setattr(worker, "require_launched", lambda: None)
    monkeypatch.setattr(worker, "run_driver", interrupted)
    monkeypatch.setattr(worker.os, "_exit", fake_exit)
    with pytest.raises(SystemExit):
        worker.main()
    assert exits == [130]
