"""The local launcher owns its ranks (issue 24): they ran in a session of their own and the
launcher's `finally` never ran on SIGKILL or the default SIGTERM, so killing `commbench run` left
the ranks running (on a GPU node, holding the GPUs). Now the kernel stops them when the launcher
dies (PR_SET_PDEATHSIG), and SIGTERM ends the run as `reason: "terminated"` with records.jsonl,
records.csv and samples.jsonl holding the same rows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TAG = "COMMBENCH_TEST_LAUNCHER_TAG"


def _start(out: Path, tag: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{TAG: tag})
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "commbench",
            "run",
            "--nproc",
            "2",
            "--ops",
            "all_reduce",
            "-b",
            "1K",
            "-e",
            "64M",
            "-n",
            "200",
            "-w",
            "2",
            "--no-progress",
            "--out",
            str(out),
            "--run-id",
            "owned",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _ranks_alive(tag: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if f"{TAG}={tag}".encode() in environ.split(b"\0") and b"COMMBENCH_DRIVER=sweep" in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def _wait_for_rows(run: Path, launcher: subprocess.Popen, rows: int = 2, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        records = run / "records.jsonl"
        if records.exists() and len(records.read_text().splitlines()) >= rows:
            return
        assert launcher.poll() is None, launcher.communicate()
        time.sleep(0.1)
    pytest.fail(f"no {rows} rows in {timeout_s} s")


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killing_the_launcher_stops_its_ranks_and_the_run_says_terminated(tmp_path, sig):
    tag = uuid.uuid4().hex
    launcher = _start(tmp_path, tag)
    try:
        _wait_for_rows(tmp_path / "owned", launcher)
        assert len(_ranks_alive(tag)) == 2
        launcher.send_signal(sig)
        launcher.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _ranks_alive(tag) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _ranks_alive(tag) == [], "ranks outlived their launcher by 10 s"
    finally:
        for pid in _ranks_alive(tag):
            os.kill(pid, signal.SIGKILL)
        if launcher.poll() is None:
            launcher.kill()
    run = tmp_path / "owned"
    info = json.loads((run / "run.json").read_text())
    assert info["complete"] is False and info["reason"] == "terminated"
    rows = _lines(run / "records.jsonl")
    assert rows >= 2 and _lines(run / "records.csv") == rows + 1 and _lines(run / "samples.jsonl") == rows
    if sig == signal.SIGTERM:
        assert launcher.returncode == 143
        assert "terminated (SIGTERM)" in launcher.stderr.read() and "Traceback" not in launcher.stderr.read()
