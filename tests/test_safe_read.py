"""safe_read: the one reader of files from results folders and arguments refuses what would hang,
exhaust memory, escape the folder or break the parser, in one line that never quotes the file."""

from __future__ import annotations

import json
import os

import pytest

from commbench.data import safe_read
from commbench.data.rundir import load_run
from commbench.data.safe_read import (
    CONFIG,
    RECORDS,
    RUN_JSON,
    LineReport,
    UnsafeFile,
    iter_jsonl,
    iter_lines,
    load_json,
    read_text,
)


def test_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "run.json"
    os.mkfifo(fifo)
    with pytest.raises(UnsafeFile, match="not a regular file \\(a FIFO\\)"):
        load_json(fifo, RUN_JSON)


def test_devices_are_refused_streamed_or_not(tmp_path):
    with pytest.raises(UnsafeFile, match="character device"):
        list(iter_lines("/dev/zero", RECORDS))
    link = tmp_path / "records.jsonl"
    link.symlink_to("/dev/zero")
    with pytest.raises(UnsafeFile, match="character device"):
        list(iter_jsonl(link, RECORDS))
    with pytest.raises(UnsafeFile, match="points outside"):
        list(iter_jsonl(link, RECORDS, root=tmp_path))


def test_links_out_of_the_root_are_refused_and_links_inside_kept(tmp_path):
    (tmp_path / "secret.json").write_text('{"token": "TOPSECRET"}')
    root = tmp_path / "results"
    root.mkdir()
    (root / "out.json").symlink_to(tmp_path / "secret.json")
    with pytest.raises(UnsafeFile, match="points outside") as refused:
        load_json(root / "out.json", CONFIG, root=root)
    assert "TOPSECRET" not in str(refused.value)
    (root / "real.json").write_text("[1]")
    (root / "in.json").symlink_to(root / "real.json")
    assert load_json(root / "in.json", CONFIG, root=root) == [1]


def test_size_cap_names_the_kind_and_the_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(safe_read, "CONFIG", safe_read.Kind("config file", 1024))
    big = tmp_path / "big.json"
    big.write_text("[" + "1," * 2000 + "1]")
    with pytest.raises(UnsafeFile, match="over the 0 MiB a config file may have"):
        read_text(big, safe_read.CONFIG)


@pytest.mark.parametrize(
    "text, why",
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deep"),
        ("[" * 500 + "]" * 500, "nested too deep"),  # under Python's recursion limit, over ours
        ('{"hidden_size": ' + "9" * 5000 + "}", "integer longer than"),
        ('{"value": TOPSECRET-1234}', "unreadable JSON"),
    ],
)
def test_hostile_json_is_one_line_that_never_quotes_the_file(tmp_path, text, why):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(UnsafeFile, match=why) as refused:
        load_json(path, CONFIG)
    message = str(refused.value)
    assert "\n" not in message and "TOPSECRET" not in message and len(message) < 300


def test_utf16_and_binary_are_named(tmp_path):
    utf16 = tmp_path / "a.log"
    utf16.write_text("# nccl-tests\n", encoding="utf-16")
    with pytest.raises(UnsafeFile, match=r"UTF-16 text.*iconv -f UTF-16"):
        list(iter_lines(utf16, RECORDS))
    binary = tmp_path / "b.json"
    binary.write_bytes(b"\x7fELF\x00\x00\x01")
    with pytest.raises(UnsafeFile, match="binary data"):
        load_json(binary, CONFIG)


def test_jsonl_bad_lines_are_counted_and_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(safe_read, "MAX_LINE_BYTES", 1024)
    path = tmp_path / "records.jsonl"
    lines = [
        '{"a": 1}',
        "not json",
        "[" * 300 + "]" * 300,
        "x" * 5000,
        '{"a": ' + "1" * 70 + "}",
        b"\xff\xfe{}",
        '{"a": 2}',
    ]
    path.write_bytes(b"\n".join(line if isinstance(line, bytes) else line.encode() for line in lines) + b"\n")
    report = LineReport()
    assert list(iter_jsonl(path, RECORDS, report)) == [(1, {"a": 1}), (7, {"a": 2})]
    assert report.bad == 5
    assert report.warnings("records.jsonl")[-1] == "records.jsonl: 5 bad lines skipped in all"


def test_a_run_whose_records_are_dev_zero_loads_with_a_warning(tmp_path):
    run = tmp_path / "run1"
    run.mkdir()
    (run / "run.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "run_id": "run1",
                "kind": "sweep",
                "complete": True,
                "created": "2026-12-01T00:00:00+00:00",
                "backend": "gloo",
                "world_size": 2,
            }
        )
    )
    (run / "records.jsonl").symlink_to("/dev/zero")
    loaded = load_run(run)
    assert loaded.records == [] and any("records.jsonl: points outside" in w for w in loaded.warnings)
