"""A measuring run appends each row to its run directory (issue 31): a row costs its own lines,
not a rewrite of the run so far, which rank 0 paid between rows while the other ranks waited (the
CLI-level harness overhead in bench/RESULTS.md). What was written is never touched, a failed
append leaves no part of a line behind, and a last line cut mid-write is dropped by every reader."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import duckdb
import pytest

from commbench.commands.submit import _rows_measured
from commbench.data import rundir
from commbench.data.rundir import RECORDS_CSV, RECORDS_JSONL, RunWriter, load_run, records_to_csv
from commbench.data.samples import SAMPLES_JSONL, read_samples, samples_line
from commbench.data.schema import Record, RunInfo
from commbench.data.store import ingest

GOLDEN = Path(__file__).parent / "golden" / "runs" / "example-cpu-2rank"
FILES = (RECORDS_JSONL, RECORDS_CSV, SAMPLES_JSONL)


def _golden() -> tuple[RunInfo, list[Record]]:
    info = RunInfo(**{**json.loads((GOLDEN / "run.json").read_text()), "run_id": "appended"})
    records = [Record(**json.loads(line)) for line in (GOLDEN / RECORDS_JSONL).read_text().splitlines()]
    return info, records


def _samples(record: Record) -> str:
    return samples_line(record.model_dump(), 0, [100.0 + i / 7 for i in range(200)], [0, 1], [101.5, 102.25])


def _written_bytes() -> int:
    """What this process has passed to write(2) so far (Linux's per-process I/O accounting)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("no wchar in /proc/self/io")


def _sizes(path: Path) -> int:
    return sum((path / name).stat().st_size for name in FILES)


def test_each_row_costs_its_own_lines_not_the_run_so_far(tmp_path):
    info, records = _golden()
    writer = RunWriter(tmp_path, info)
    for record in records[:10]:
        writer.add_records([record], [_samples(record)])
    inodes = {name: (writer.path / name).stat().st_ino for name in FILES}
    size_before, written_before = _sizes(writer.path), _written_bytes()
    for record in records[10:]:  # 120 more rows
        writer.add_records([record], [_samples(record)])
    grown, written = _sizes(writer.path) - size_before, _written_bytes() - written_before
    # whole-run rewriting wrote ~65 times what the files grew by over these rows; appending, once
    assert grown <= written < 1.2 * grown, (written, grown)
    assert {name: (writer.path / name).stat().st_ino for name in FILES} == inodes  # appended, never replaced
    lines = "".join(json.dumps(rec) + "\n" for rec in writer.records)
    assert (writer.path / RECORDS_JSONL).read_text() == lines
    assert (writer.path / RECORDS_CSV).read_text() == records_to_csv(writer.records)
    assert (writer.path / SAMPLES_JSONL).read_text() == "".join(_samples(r) for r in records)


def test_a_new_column_rewrites_records_csv_once_and_whole(tmp_path):
    info, records = _golden()
    writer = RunWriter(tmp_path, info)
    writer.add_records(records[:5])
    csv_inode = (writer.path / RECORDS_CSV).stat().st_ino
    noted = Record(**{**records[5].model_dump(), "site_note": 'rack 7, "quoted"'})
    writer.add_records([noted])
    assert (writer.path / RECORDS_CSV).stat().st_ino != csv_inode  # replaced: every row has the column now
    csv_inode = (writer.path / RECORDS_CSV).stat().st_ino
    writer.add_records(records[6:20])
    assert (writer.path / RECORDS_CSV).stat().st_ino == csv_inode
    assert (writer.path / RECORDS_CSV).read_text() == records_to_csv(writer.records)
    assert not list(writer.path.glob(".*.tmp"))


def test_a_failed_append_leaves_no_part_of_a_line(tmp_path, monkeypatch):
    info, records = _golden()
    writer = RunWriter(tmp_path, info)
    writer.add_records(records[:3], [_samples(r) for r in records[:3]])
    before = {name: (writer.path / name).read_bytes() for name in FILES}
    real_write = os.write

    def half_then_full(fd, data):  # the disk fills part-way through a row's lines
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(rundir.os, "write", half_then_full)
    with pytest.raises(OSError, match="No space left") as failed:
        writer.add_records(records[3:4], [_samples(records[3])])
    assert failed.value.filename == str(writer.path / SAMPLES_JSONL)
    assert {name: (writer.path / name).read_bytes() for name in FILES} == before
    assert len(writer.records) == 3
    monkeypatch.setattr(rundir.os, "write", real_write)
    writer.add_records(records[3:5], [_samples(r) for r in records[3:5]])  # the next row starts a fresh line
    writer.finish(complete=True)
    run = load_run(writer.path)
    assert len(run.records) == 5 and run.bad_records == 0 and len(read_samples(writer.path)) == 5


def test_a_line_cut_mid_write_is_dropped_by_every_reader(tmp_path):
    info, records = _golden()
    writer = RunWriter(tmp_path, info)
    writer.add_records(records[:4], [_samples(r) for r in records[:4]])
    for name, line in ((RECORDS_JSONL, json.dumps(records[4].model_dump())), (SAMPLES_JSONL, _samples(records[4]))):
        with open(writer.path / name, "a") as handle:  # the writer died inside a row's write
            handle.write(line[: len(line) // 2])
    run = load_run(writer.path)
    assert len(run.records) == 4 and run.bad_records == 0
    assert any("records.jsonl line 5: dropped (cut mid-write" in w for w in run.warnings), run.warnings
    warnings: list[str] = []
    assert len(read_samples(writer.path, warnings)) == 4
    assert any("samples.jsonl line 5: dropped" in w for w in warnings), warnings
    assert _rows_measured(tmp_path) == 4  # `commbench submit --wait`'s progress line
    database = tmp_path / "history.duckdb"  # DuckDB reads samples.jsonl itself
    assert ingest(database, [writer.path]).added == ["appended"]
    with duckdb.connect(str(database), read_only=True) as con:
        assert [con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in ("records", "samples")] == [
            4,
            4,
        ]
    with open(writer.path / RECORDS_JSONL, "a") as handle:  # a bad line that is not the last is still bad
        handle.write("\n" + json.dumps(records[5].model_dump()) + "\n")
    again = load_run(writer.path)
    assert len(again.records) == 5 and again.bad_records == 1
