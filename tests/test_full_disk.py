"""A full disk is one line naming the path and the error, and leaves nothing half-written (issue 24).

Each test fills a 2 MiB tmpfs (mounting needs root; in CI a test that cannot mount fails, by
tests/conftest.py's rule on skips) and points --out or --db into it. Before: `run` printed ~200
traceback lines and blamed the network, import left a half run directory, `db ingest` left a
0-byte .duckdb that broke every later ingest."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from commbench.cli import main as cli_main

EXAMPLES = Path(__file__).parent.parent / "results" / "examples"
LOG = Path(__file__).parent / "fixtures" / "nccl_tests" / "synthetic_all_reduce_perf_h100x8.log"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def full_disk(tmp_path):
    """A 2 MiB tmpfs with all but a few KiB taken by a filler file."""
    mount = tmp_path / "full"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:  # ENOSPC: full
            pass
        finally:
            os.close(fd)
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def leftovers(mount: Path) -> list[str]:
    """Temporary and empty files left on the disk (the filler aside)."""
    return [
        str(path)
        for path in mount.rglob("*")
        if path.name != "filler"
        and path.is_file()
        and (path.stat().st_size == 0 or ".tmp" in path.name or path.name.endswith(".probe"))
    ]


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_import_into_a_full_disk(full_disk, capsys):
    assert cli_main(["import", "nccl-tests", str(LOG), "--out", str(full_disk / "out")]) == 1
    line = _one_line(capsys.readouterr().err)
    assert str(full_disk) in line and "No space left on device (ENOSPC)" in line
    assert leftovers(full_disk) == [] and list((full_disk / "out").iterdir()) == []


def test_calibrate_into_a_full_disk_refuses_before_measuring(full_disk, capsys):
    assert cli_main(["calibrate", "--quick", "--out", str(full_disk / "p.json")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(full_disk / "p.json") in line and "No space left on device" in line
    assert leftovers(full_disk) == []


def test_ingest_into_a_full_disk_leaves_no_database_and_a_later_ingest_works(full_disk, tmp_path, capsys):
    db = full_disk / "r.duckdb"
    assert cli_main(["db", "ingest", str(EXAMPLES), "--db", str(db), "--quiet"]) == 1
    line = _one_line(capsys.readouterr().err)
    assert str(db) in line and "No space left on device" in line
    assert leftovers(full_disk) == [] and not db.exists()
    assert not list(Path(tempfile.gettempdir()).glob(f"commbench-ingest-{os.getpid()}-*"))
    good = tmp_path / "good.duckdb"
    assert cli_main(["db", "ingest", str(EXAMPLES), "--db", str(good), "--quiet"]) == 0
    assert "8 added" in capsys.readouterr().out


def test_run_into_a_full_disk(full_disk):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = full_disk / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "commbench",
            "run",
            "--nproc",
            "2",
            "-e",
            "1K",
            "--ops",
            "all_reduce",
            "--no-progress",
            "--out",
            str(out),
            "--run-id",
            f"full-{uuid.uuid4().hex[:6]}",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode != 0
    line = _one_line(done.stderr)
    assert str(out) in line and "No space left on device (ENOSPC)" in line
    assert leftovers(full_disk) == [] and list(out.iterdir()) == []
