"""Ingest keeps going past what one directory gets wrong (issue 24): a duplicated run id inside a
batch aborted the whole batch (ConstraintException) before; a run whose records were all bad was
ingested as complete; a records.jsonl linked to a device hung the digest."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from commbench.data import store

EXAMPLE = Path(__file__).parent.parent / "results" / "examples" / "example-cpu-2rank"


def test_a_duplicated_run_id_in_one_batch_ingests_the_first_and_reports_the_second(tmp_path):
    first, second = tmp_path / "a" / "run", tmp_path / "b" / "run"
    shutil.copytree(EXAMPLE, first)
    shutil.copytree(EXAMPLE, second)
    report = store.ingest(tmp_path / "r.duckdb", [first, second])
    assert report.added == ["example-cpu-2rank"]
    ((path, why),) = report.skipped
    assert path == str(second) and "duplicate run id example-cpu-2rank" in why and str(first) in why
    assert store.query(tmp_path / "r.duckdb", "SELECT path FROM runs")[1] == [(os.path.abspath(first),)]


def test_runs_without_valid_records_are_reported_not_ingested(tmp_path):
    garbage, device = tmp_path / "garbage", tmp_path / "device"
    for run in (garbage, device):
        shutil.copytree(EXAMPLE, run)
        (run / "records.jsonl").unlink()
    (garbage / "records.jsonl").write_text('not json\n{"op": 1}\n')
    (device / "records.jsonl").symlink_to("/dev/zero")
    (device / "samples.jsonl").unlink(missing_ok=True)
    (device / "samples.jsonl").symlink_to("/dev/zero")
    report = store.ingest(tmp_path / "r.duckdb", [garbage, device])
    assert report.added == []
    skipped = dict(report.skipped)
    assert "no valid records (2 bad lines)" in skipped[str(garbage)]
    assert "no valid records" in skipped[str(device)]


def test_stale_staging_folders_of_killed_ingests_are_removed(tmp_path):
    dead = Path(tempfile.gettempdir()) / "commbench-ingest-999999999-stale"
    dead.mkdir(exist_ok=True)
    store.ingest(tmp_path / "r.duckdb", [EXAMPLE])
    assert not dead.exists()
    assert not list(Path(tempfile.gettempdir()).glob(f"commbench-ingest-{os.getpid()}-*"))
