"""Deep JSON, huge integers, binary and UTF-16 files are one line and exit 2 for table, import and
plan, and a skipped directory for ingest (issue 24). Before: RecursionError / ValueError tracebacks
(the whole ingest aborted), binary input exited 1 and UTF-16 logs were refused without naming the
encoding."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from commbench.cli import main as cli_main
from commbench.data import store

EXAMPLE = Path(__file__).parent.parent / "results" / "examples" / "example-cpu-2rank"
LOG = Path(__file__).parent / "fixtures" / "nccl_tests" / "synthetic_all_reduce_perf_h100x8.log"
DEEP = "[" * 100_000 + "]" * 100_000
HUGE_INT = '{"config": {"nGpus": ' + "7" * 5000 + '}, "results": []}'


def _one_line_exit_2(argv: list[str], capsys) -> str:
    assert cli_main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    return lines[0]


def _hostile_files(tmp_path: Path) -> dict[str, Path]:
    files = {
        "deep": tmp_path / "deep.json",
        "huge-int": tmp_path / "huge.json",
        "binary": tmp_path / "a.bin",
        "utf-16": tmp_path / "a16.log",
    }
    files["deep"].write_text('{"config": ' + DEEP + "}")  # an object: read as a -J report
    files["huge-int"].write_text(HUGE_INT)
    files["binary"].write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8)
    files["utf-16"].write_text(LOG.read_text(), encoding="utf-16")
    return files


@pytest.mark.parametrize(
    "kind, why",
    [
        ("deep", "nested too deep"),
        ("huge-int", "integer longer than"),
        ("binary", "binary data"),
        ("utf-16", "UTF-16 text"),
    ],
)
def test_import_refuses_in_one_line(tmp_path, capsys, kind, why):
    path = _hostile_files(tmp_path)[kind]
    assert why in _one_line_exit_2(["import", "nccl-tests", str(path), "--out", str(tmp_path / "out")], capsys)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


@pytest.mark.parametrize(
    "flag, kind, why",
    [
        ("--model", "deep", "nested too deep"),
        ("--model", "huge-int", "integer longer than"),
        ("--model", "binary", "binary data"),
        ("--processor", "deep", "nested too deep"),
        ("--processor", "huge-int", "integer longer than"),
    ],
)
def test_plan_refuses_in_one_line(tmp_path, capsys, flag, kind, why):
    path = _hostile_files(tmp_path)[kind]
    argv = ["plan", "--model", "llama2-7b", "--gpus", "8", "--global-batch", "64", "--seq-len", "2048"]
    if flag == "--model":
        argv[2] = str(path.rename(path.with_name("config.json")))
    else:
        argv += ["--processor", str(path.rename(path.with_suffix(".json")))]
    assert why in _one_line_exit_2(argv, capsys)


@pytest.mark.parametrize("kind, text", [("deep", DEEP), ("huge-int", '{"schema_version": ' + "1" * 5000 + "}")])
def test_table_refuses_and_ingest_skips_a_hostile_run_json(tmp_path, capsys, kind, text):
    bad, good = tmp_path / "runs" / "bad", tmp_path / "runs" / "good"
    shutil.copytree(EXAMPLE, bad)
    shutil.copytree(EXAMPLE, good)
    (bad / "run.json").write_text(text)
    assert "refused" in _one_line_exit_2(["table", str(bad)], capsys)
    report = store.ingest(tmp_path / "r.duckdb", [tmp_path / "runs"])
    assert report.added == ["example-cpu-2rank"] and [path for path, _ in report.skipped] == [str(bad)]


def test_hostile_lines_in_records_jsonl_are_skipped_not_fatal(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(EXAMPLE, run)
    records = (run / "records.jsonl").read_text().splitlines()
    (run / "records.jsonl").write_text(
        "\n".join([DEEP, '{"size_bytes": ' + "9" * 5000 + "}", "\x00\x01binary"] + records) + "\n"
    )
    assert cli_main(["table", str(run)]) == 0
    err = capsys.readouterr().err
    assert "line 1: skipped" in err and "line 2: skipped" in err and "Traceback" not in err
    report = store.ingest(tmp_path / "r.duckdb", [run])
    assert report.added == ["example-cpu-2rank"]
    assert store.query(tmp_path / "r.duckdb", "SELECT count(*) FROM records")[1] == [(len(records),)]
    assert json.loads((run / "run.json").read_text())["run_id"] == "example-cpu-2rank"
