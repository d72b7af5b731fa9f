"""Ctrl-C during `commbench run --nproc 2`: one line, exit 130, and the rows so far kept and readable.

The terminal sends SIGINT to its foreground process group: the launcher, not the ranks (they run
in sessions of their own). The launcher passes it on; each rank stops, rank 0 records why, and the
launcher alone says what was kept, so no rank prints a traceback.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from foreground import as_foreground_job, signal_state

REPO = Path(__file__).resolve().parents[1]


def _first_rows(out: Path, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(p.stat().st_size for p in out.glob("*/records.jsonl")):
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    raise AssertionError("no row was written in time")


@pytest.mark.parametrize(
    "sig,code,says", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")]
)
def test_a_signal_mid_sweep_is_one_line_and_keeps_the_rows(tmp_path, sig, code, says):
    out = tmp_path / "results"
    proc = subprocess.Popen(
        [sys.executable, "-m", "commbench", "run", "--nproc", "2", "--out", str(out), "-n", "400", "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        start_new_session=True,
        preexec_fn=as_foreground_job,
    )
    _first_rows(out, proc)
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # what Ctrl-C does: the launcher's process group
    else:
        proc.send_signal(sig)  # kill, systemd, a batch system: the launcher alone
    try:
        _, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        state = signal_state(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"the launcher did not leave within 120 s of {sig.name}: {state}") from None
    lines = stderr.strip().splitlines()
    assert proc.returncode == code, stderr
    assert len(lines) <= 3 and "Traceback" not in stderr, stderr
    (run_dir,) = out.iterdir()
    info = json.loads((run_dir / "run.json").read_text())
    kept = len((run_dir / "records.jsonl").read_text().splitlines())
    planned = r"of \d+ " if sig == signal.SIGINT else ""  # rank 0 recorded the planned rows on Ctrl-C
    assert len(lines) == 1 and re.fullmatch(
        rf"commbench run: {re.escape(says)}: {kept} {planned}rows kept in "
        rf"{re.escape(str(run_dir))}",
        lines[0],
    ), stderr
    assert info["complete"] is False
    assert (
        info["reason"].startswith(f"interrupted: {kept} of ")
        if sig == signal.SIGINT
        else info["reason"] == "terminated"
    )
    table = subprocess.run(
        [sys.executable, "-m", "commbench", "table", str(run_dir), "--format", "json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert table.returncode == 0 and json.loads(table.stdout), table.stderr
