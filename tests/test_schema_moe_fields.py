"""The MoE rows' uniform spread, uniform_time_us_p10 / uniform_time_us_p90: declared in the results
schema, stored as records columns (store schema 4), and a store-schema-3 database migrated in place.

Fixtures (tests/fixtures/store/, see its README.md): `moe-run-zipf`, a real 2-rank gloo all_to_allv
sweep whose rows carry both fields; `store-schema-3.sql`, the tables and rows that store schema 3
(commit 4b5dab6) wrote for that run and two older runs (tests/golden/runs), which lack the fields.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from commbench.data import store
from commbench.data.rundir import RECORDS_JSONL, load_run
from commbench.data.schema import Record

STORE_FIXTURES = Path(__file__).parent / "fixtures" / "store"
MOE_RUN = STORE_FIXTURES / "moe-run-zipf"
SCHEMA_3_SQL = STORE_FIXTURES / "store-schema-3.sql"
OLD_RUNS = [
    Path(__file__).parent / "golden" / "runs" / name
    for name in ("example-overlap-cpu", "example-pairwise-3nodes-lossy-node3")
]
SPREAD = ("uniform_time_us_p10", "uniform_time_us_p90")


def raw_records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / RECORDS_JSONL).read_text().splitlines() if line.strip()]


def test_the_fields_are_declared_numbers_in_microseconds():
    for name in SPREAD:
        info = Record.model_fields[name]
        assert info.annotation == float | None and info.default is None
        assert "all_to_allv" in info.description and (
            "(us)" in info.description or "as uniform_time_us_p10" in info.description
        )
    assert (
        list(Record.model_fields).index("uniform_time_us_p10") == list(Record.model_fields).index("uniform_time_us") + 1
    )


def test_a_moe_record_round_trips_through_validation_and_the_store(tmp_path):
    raw = raw_records(MOE_RUN)
    assert raw and all(row["op"] == "all_to_allv" and row["routing"] == "zipf:1.2" for row in raw)
    for row in raw:
        validated = Record.model_validate(row)
        assert not set(validated.model_extra or {}) & set(SPREAD)  # declared, not carried as extras
        assert validated.uniform_time_us_p10 <= validated.uniform_time_us <= validated.uniform_time_us_p90
        assert Record.model_validate(validated.model_dump()).model_dump() == validated.model_dump()
    db = tmp_path / "r.duckdb"
    assert store.ingest(db, [MOE_RUN]).added == [load_run(MOE_RUN).run_id]
    _columns, rows = store.query(
        db, "SELECT uniform_time_us, uniform_time_us_p10, uniform_time_us_p90, extra FROM records ORDER BY row"
    )
    assert rows == [
        (row["uniform_time_us"], row["uniform_time_us_p10"], row["uniform_time_us_p90"], None) for row in raw
    ]


def test_old_run_directories_read_and_store_the_fields_as_null(tmp_path):
    for run in OLD_RUNS:
        assert not any(set(SPREAD) & set(row) for row in raw_records(run))  # written before the fields existed
        loaded = load_run(run)
        assert not loaded.warnings or all("skipped" not in warning for warning in loaded.warnings)
        assert len(loaded.records) == len(raw_records(run))
        assert all(record[name] is None for record in loaded.records for name in SPREAD)
    db = tmp_path / "r.duckdb"
    store.ingest(db, OLD_RUNS)
    counts = store.query(db, "SELECT count(*), count(uniform_time_us_p10), count(uniform_time_us_p90) FROM records")[1]
    assert counts == [(sum(len(raw_records(run)) for run in OLD_RUNS), 0, 0)]


def _build_schema_3_database(path: Path) -> dict[str, tuple[list[str], list[tuple]]]:
    """The database store schema 3 wrote, from its committed SQL; returns each table's columns and rows."""
    con = duckdb.connect(str(path))
    try:
        con.execute(SCHEMA_3_SQL.read_text(encoding="utf-8"))
        return {table: _table(con, table) for table in store.TABLES}
    finally:
        con.close()


def _table(con, table: str, columns: list[str] | None = None) -> tuple[list[str], list[tuple]]:
    chosen = ", ".join(f'"{name}"' for name in columns) if columns else "*"
    cursor = con.execute(f"SELECT {chosen} FROM {table} ORDER BY ALL")
    return [column[0] for column in cursor.description], cursor.fetchall()


def _records_by_name(db: Path) -> dict[tuple, dict]:
    """Every records row as {column: value}, extra parsed, keyed by (run_id, row): column order aside."""
    columns, rows = store.query(db, "SELECT * FROM records")
    by_key = {}
    for row in rows:
        record = dict(zip(columns, row))
        record["extra"] = json.loads(record["extra"]) if record["extra"] else None
        by_key[(record["run_id"], record["row"])] = record
    return by_key


def test_a_store_schema_3_database_is_migrated_in_place_keeping_every_row(tmp_path):
    db = tmp_path / "old.duckdb"
    before = _build_schema_3_database(db)
    assert store.query(db, "SELECT value FROM meta WHERE key = 'schema_version'")[1] == [("3",)]
    assert not set(SPREAD) & set(before["records"][0])
    moe_run_id = load_run(MOE_RUN).run_id
    moved = {row[1]: json.loads(row[-1]) for row in before["records"][1] if row[0] == moe_run_id}
    assert moved and all(set(SPREAD) <= set(extra) for extra in moved.values())  # where schema 3 kept them

    assert store.ingest(db, []).summary() == "0 added, 0 updated, 0 unchanged, 0 skipped"  # opening to write migrates
    assert store.query(db, "SELECT value FROM meta WHERE key = 'schema_version'")[1] == [
        (str(store.STORE_SCHEMA_VERSION),)
    ]
    con = duckdb.connect(str(db), read_only=True)
    try:
        for table, (columns, rows) in before.items():
            if table != "records":
                assert _table(con, table, columns) == (columns, rows), table
    finally:
        con.close()
    migrated = _records_by_name(db)
    assert len(migrated) == len(before["records"][1])
    for old in before["records"][1]:
        old = dict(zip(before["records"][0], old))
        new = migrated[(old["run_id"], old["row"])]
        extra = json.loads(old["extra"]) if old["extra"] else None
        if old["run_id"] == moe_run_id:
            assert [new[name] for name in SPREAD] == [extra.pop(name) for name in SPREAD]
            extra = extra or None
        else:
            assert [new[name] for name in SPREAD] == [None, None]  # never had them: null, not a copy
        assert new["stop_reason"] is None  # schema 5's column: these runs never kept it
        assert {**old, "extra": extra} == {
            name: value for name, value in new.items() if name not in SPREAD and name != "stop_reason"
        }

    fresh = tmp_path / "fresh.duckdb"
    store.ingest(fresh, [MOE_RUN, *OLD_RUNS])
    assert _records_by_name(fresh) == migrated  # in place, the same rows a new ingest stores
    store.ingest(db, [MOE_RUN, *OLD_RUNS])  # rewrites the runs: columns named, whatever their order
    assert _records_by_name(db) == migrated
