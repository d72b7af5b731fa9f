"""RunWriter renders each record once as rows arrive: the files it rewrites after every row must
stay exactly what rendering every record from scratch gives, a new CSV column and set_records
included."""

import json
from pathlib import Path

from commbench.data.rundir import RECORDS_CSV, RECORDS_JSONL, RunWriter, records_to_csv
from commbench.data.schema import Record, RunInfo

GOLDEN = Path(__file__).parent / "golden" / "runs" / "example-cpu-2rank"


def _from_scratch(records: list[dict]) -> tuple[str, str]:
    return "".join(json.dumps(rec) + "\n" for rec in records), records_to_csv(records)


def test_rows_written_one_by_one_match_a_whole_rendering(tmp_path):
    info = RunInfo(**{**json.loads((GOLDEN / "run.json").read_text()), "run_id": "incremental"})
    records = [Record(**json.loads(line)) for line in (GOLDEN / RECORDS_JSONL).read_text().splitlines()]
    writer = RunWriter(tmp_path, info)
    for number, record in enumerate(records):
        if number == len(records) // 2:  # a record with a field beyond the schema: a new CSV column
            record = Record(**{**record.model_dump(), "site_note": 'rack 7, "quoted", two words'})
        writer.add_records([record])
        lines, table = _from_scratch(writer.records)
        assert (writer.path / RECORDS_JSONL).read_text() == lines
        assert (writer.path / RECORDS_CSV).read_text() == table
    writer.set_records(writer.records[:3])
    writer.finish(complete=True)
    lines, table = _from_scratch(writer.records[:3])
    assert (writer.path / RECORDS_JSONL).read_text() == lines
    assert (writer.path / RECORDS_CSV).read_text() == table
