"""An import writes its records streamed (RunWriter.write_all_records): the same bytes as the
record-by-record writer, and never mixed with it. Its memory is measured in bench/import_memory.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from commbench.data.nccl_tests import parse_file
from commbench.data.rundir import RECORDS_CSV, RECORDS_JSONL, RunWriter, _csv_chunks, records_to_csv

FIXTURE = Path(__file__).parent / "fixtures" / "nccl_tests" / "synthetic_all_reduce_perf_h100x8.log"


def test_streamed_records_match_the_incremental_writer(tmp_path):
    run = parse_file(FIXTURE)[0]
    streamed = RunWriter(tmp_path, run.info.model_copy(update={"run_id": "streamed"}))
    streamed.write_all_records(run.records)
    incremental = RunWriter(tmp_path, run.info.model_copy(update={"run_id": "incremental"}))
    incremental.add_records(run.records)
    for name in (RECORDS_JSONL, RECORDS_CSV):
        assert (streamed.path / name).read_bytes() == (incremental.path / name).read_bytes()
    assert len((streamed.path / RECORDS_JSONL).read_text().splitlines()) == len(run.records) == 50


def test_streamed_writer_refuses_more_records(tmp_path):
    run = parse_file(FIXTURE)[0]
    writer = RunWriter(tmp_path, run.info)
    writer.write_all_records(run.records)
    with pytest.raises(ValueError, match="not kept"):
        writer.add_records(run.records[:1])  # would rewrite the files with one record
    mixed = RunWriter(tmp_path, run.info.model_copy(update={"run_id": "mixed"}))
    mixed.add_records(run.records[:1])
    with pytest.raises(ValueError, match="already holds"):
        mixed.write_all_records(run.records)


def test_csv_in_chunks_is_the_whole_csv():
    dumped = [record.model_dump() for record in parse_file(FIXTURE)[0].records]
    extra = sorted(set(dumped[0]) - set(records_to_csv([]).strip().split(",")))
    chunks = list(_csv_chunks(dumped, extra, rows_per_chunk=7))
    assert len(chunks) == 8  # 50 rows: seven chunks of 7, then the last one
    assert "".join(chunks) == records_to_csv(dumped)
