"""Pieces of the harness that need no ranks: sizes, counts, statistics, run directories."""

import json

import pytest

from commbench.collectives import get_collective
from commbench.data.records import Stats
from commbench.data.rundir import RunWriter, load_run
from commbench.data.schema import Record, RunInfo
from commbench.errors import CommbenchError, UsageError
from commbench.measure.options import RunConfig
from commbench.measure.timing import choose_iters
from commbench.units import format_size, parse_size


def test_sizes_are_binary():
    assert parse_size("1K") == 1024 and parse_size("4M") == 4 << 20 and parse_size("1G") == 1 << 30
    assert parse_size("8") == 8 and format_size(4 << 20) == "4M" and format_size(1000) == "1000"
    for bad in ("-1", "4X", "1.5", ""):
        with pytest.raises(UsageError):
            parse_size(bad)


def test_sweep_sizes_follow_min_max_factor():
    assert RunConfig(min_bytes=1024, max_bytes=4 << 20).sizes() == [1 << k for k in range(10, 23)]
    assert RunConfig(min_bytes=8, max_bytes=1024, step_factor=4).sizes() == [8, 32, 128, 512]


@pytest.mark.parametrize(
    "op,n,elt,size,send,recv,param",
    [
        ("all_reduce", 8, 4, 1024, 256, 256, 256),
        ("all_gather", 8, 4, 1024, 32, 256, 32),
        ("reduce_scatter", 8, 4, 1024, 256, 32, 32),
        ("all_to_all", 8, 4, 1024, 256, 256, 32),
        ("all_gather", 3, 4, 1024, 84, 252, 84),  # 85 trimmed to a multiple of 16 bytes
        ("all_gather", 8, 4, 128, 4, 32, 4),
        ("all_gather", 8, 4, 64, 0, 0, 0),  # below 16 bytes a rank: an empty row, skipped by the sweep
        ("sendrecv", 2, 2, 1024, 512, 512, 512),
    ],
)
def test_counts_follow_nccl_tests(op, n, elt, size, send, recv, param):
    counts = get_collective(op).counts(size // elt, n, elt)
    assert (counts.send, counts.recv, counts.param) == (send, recv, param)
    assert counts.size_bytes(elt) == max(send, recv) * elt


def test_stats_and_adaptive_iterations():
    stats = Stats.of([10, 20, 30, 40, 50])
    assert (stats.median, stats.min, stats.max) == (30, 10, 50)
    assert stats.cv == pytest.approx((200**0.5) / 30)
    assert choose_iters(10, 50, 5, 200) == 200  # small messages: many
    assert choose_iters(100_000, 50, 5, 200) == 5  # large messages: few
    assert choose_iters(1000, 50, 5, 200) == 50


def _record(**overrides):
    base = dict(
        op="all_reduce",
        group_size=2,
        size_bytes=1024,
        count=256,
        dtype="float",
        in_place=False,
        iters=5,
        time_us=10.0,
        time_us_p10=9.0,
        time_us_p90=11.0,
        time_us_min=8.0,
        time_us_max=12.0,
        cv=0.1,
        algbw_gbps=0.1024,
        busbw_gbps=0.1024,
        busbw_factor=1.0,
    )
    return Record(**{**base, **overrides})


def test_run_directory_is_exclusive_and_round_trips(tmp_path):
    info = RunInfo(run_id="r1", created="now", backend="gloo", world_size=2)
    writer = RunWriter(tmp_path, info)
    writer.add_records([_record(), _record(in_place=True)])
    writer.finish(complete=True)
    run = load_run(tmp_path / "r1")
    assert run.info.complete and len(run.records) == 2 and not run.warnings
    with pytest.raises(CommbenchError):
        RunWriter(tmp_path, info)
    assert not list((tmp_path / "r1").glob(".*tmp")), "no temporary files left behind"


def test_damaged_files_keep_what_is_valid(tmp_path):
    writer = RunWriter(tmp_path, RunInfo(run_id="r2", created="now", backend="gloo", world_size=2, schema_version=99))
    writer.add_records([_record()])
    with open(writer.path / "records.jsonl", "a") as handle:
        handle.write('{"op": "all_reduce", "size_by')  # a line cut short
    run = load_run(writer.path)
    assert len(run.records) == 1
    assert any("schema_version 99" in w for w in run.warnings)
    assert any("line 2" in w for w in run.warnings)
    assert any("not complete" in w for w in run.warnings)
    (writer.path / "run.json").write_text("{not json")
    with pytest.raises(CommbenchError, match="unreadable"):
        load_run(writer.path)


def test_schema_documents_every_field():
    schema = Record.model_json_schema()
    assert {
        "op",
        "scope",
        "group_size",
        "size_bytes",
        "count",
        "dtype",
        "in_place",
        "iters",
        "time_us",
        "time_us_p10",
        "time_us_p90",
        "time_us_min",
        "time_us_max",
        "cv",
        "algbw_gbps",
        "busbw_gbps",
        "wrong",
    } <= set(schema["properties"])
    json.dumps(schema)
