"""The results database: ingest is idempotent and incremental, faults are skipped or refused, SQL is read-only."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest

from commbench.analysis.synthetic import generate_history, read_profile
from commbench.data import store
from commbench.data.samples import read_samples, row_key
from commbench.errors import CommbenchError, UsageError

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLES = Path(__file__).parent.parent / "results" / "examples"
PROFILE = read_profile(FIXTURES / "history-noise-profile.json")


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commbench", *args], capture_output=True, text=True, env=env)


def count(db: Path, sql: str) -> int:
    return store.query(db, sql)[1][0][0]


def test_every_kind_of_example_run_is_ingested_and_reingest_changes_nothing(tmp_path):
    db = tmp_path / "r.duckdb"
    report = store.ingest(db, [EXAMPLES])
    assert not report.skipped, report.skipped
    kinds = {row[0] for row in store.query(db, "SELECT DISTINCT kind FROM runs")[1]}
    assert {"sweep", "import", "overlap", "pairwise"} <= kinds
    assert count(db, "SELECT count(*) FROM pairs") > 0
    assert count(db, "SELECT count(*) FROM records WHERE extra IS NOT NULL") > 0  # overlap's own fields
    runs, records = count(db, "SELECT count(*) FROM runs"), count(db, "SELECT count(*) FROM records")

    again = store.ingest(db, [EXAMPLES])
    assert (again.added, again.updated, again.unchanged) == ([], [], runs)
    assert count(db, "SELECT count(*) FROM records") == records


def test_a_changed_run_is_replaced_and_samples_are_loaded(tmp_path):
    runs = generate_history(tmp_path / "runs", PROFILE, 3, cluster="c1")
    db = tmp_path / "r.duckdb"
    store.ingest(db, [tmp_path / "runs"])
    assert count(db, "SELECT count(*) FROM samples") == 3 * len(PROFILE["rows"])
    assert count(db, "SELECT len(time_us) FROM samples LIMIT 1") == 20

    lines = (runs[1] / "records.jsonl").read_text().splitlines()
    (runs[1] / "records.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    report = store.ingest(db, [tmp_path / "runs"])
    assert report.updated == [runs[1].name] and report.unchanged == 2
    assert count(db, f"SELECT count(*) FROM records WHERE run_id = '{runs[1].name}'") == len(lines) - 1


def test_older_runs_without_samples_still_load(tmp_path):
    db = tmp_path / "r.duckdb"
    store.ingest(db, [EXAMPLES / "example-cpu-2rank"])
    assert count(db, "SELECT count(*) FROM records") > 0
    assert count(db, "SELECT count(*) FROM samples") == 0


def test_corrupt_and_partial_directories_are_reported_and_skipped(tmp_path):
    runs = generate_history(tmp_path / "runs", PROFILE, 4, cluster="c1")
    (runs[0] / "run.json").write_text("{ not json")
    partial = json.loads((runs[1] / "run.json").read_text()) | {"complete": False, "reason": "rank 3 lost"}
    (runs[1] / "run.json").write_text(json.dumps(partial))
    (runs[2] / "records.jsonl").write_text("garbage\n" + (runs[2] / "records.jsonl").read_text())
    report = store.ingest(tmp_path / "r.duckdb", [tmp_path / "runs"])
    skipped = dict(report.skipped)
    assert "unreadable" in skipped[str(runs[0])]
    assert "partial run" in skipped[str(runs[1])] and "rank 3 lost" in skipped[str(runs[1])]
    assert sorted(report.added) == [runs[2].name, runs[3].name]  # a bad line costs that line only


def test_a_database_from_a_newer_schema_is_refused_in_one_line(tmp_path):
    db = tmp_path / "r.duckdb"
    store.ingest(db, [EXAMPLES / "example-cpu-2rank"])
    con = duckdb.connect(str(db))
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(store.STORE_SCHEMA_VERSION + 1)])
    con.close()
    with pytest.raises(UsageError, match="newer commbench"):
        store.ingest(db, [EXAMPLES / "example-cpu-2rank"])
    result = cli("db", "sql", "SELECT 1", "--db", str(db))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "newer commbench" in result.stderr


def _ingest_in_process(db: str, folder: str) -> None:
    store.ingest(db, [folder])


def test_two_ingests_at_once_lose_nothing(tmp_path):
    for name in ("a", "b"):
        generate_history(tmp_path / name, PROFILE, 40, cluster=name)
    db = str(tmp_path / "r.duckdb")
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_ingest_in_process, args=(db, str(tmp_path / name))) for name in ("a", "b")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [worker.exitcode for worker in workers] == [0, 0]
    assert count(db, "SELECT count(*) FROM runs") == 80
    assert count(db, "SELECT count(DISTINCT run_id) FROM records") == 80
    assert count(db, "SELECT count(*) FROM records") == 80 * len(PROFILE["rows"])


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM runs",
        "DROP TABLE runs",
        "INSERT INTO meta VALUES ('x', 'y')",
        "CREATE TABLE t (a INT)",
        "COPY runs TO 'out.csv'",
        "ATTACH 'other.duckdb'",
        "SELECT 1; DELETE FROM runs",
    ],
)
def test_db_sql_refuses_statements_that_write(tmp_path, statement):
    db = tmp_path / "r.duckdb"
    store.ingest(db, [EXAMPLES / "example-cpu-2rank"])
    result = cli("db", "sql", statement, "--db", str(db))
    assert result.returncode == 2, result
    assert len(result.stderr.strip().splitlines()) == 1
    assert count(db, "SELECT count(*) FROM runs") == 1


def test_db_commands_end_to_end(tmp_path):
    db = tmp_path / "r.duckdb"
    env = {**os.environ, "COMMBENCH_DB": str(db)}
    ingest = cli("db", "ingest", str(EXAMPLES / "example-cpu-2rank"), env=env)
    assert ingest.returncode == 0 and "1 added" in ingest.stdout
    sql = cli("db", "sql", "SELECT run_id, cluster FROM runs", "--format", "json", env=env)
    assert json.loads(sql.stdout)[0]["run_id"]
    export = cli("db", "export", "--parquet", str(tmp_path / "pq"), env=env)
    assert export.returncode == 0
    parquet = duckdb.connect().execute(f"SELECT count(*) FROM '{tmp_path / 'pq' / 'records.parquet'}'").fetchall()
    assert parquet[0][0] > 0


def test_missing_database_is_one_line(tmp_path):
    result = cli("db", "sql", "SELECT 1", "--db", str(tmp_path / "none.duckdb"))
    assert result.returncode == 2 and "no database" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_file_that_is_not_a_database_is_one_line(tmp_path):
    bogus = tmp_path / "bogus.duckdb"
    bogus.write_text("hello")
    with pytest.raises(CommbenchError):
        store.open_read_only(bogus)


def test_a_real_sweep_keeps_its_samples_and_run_db_ingests_it(tmp_path):
    db = tmp_path / "r.duckdb"
    result = cli(
        "run",
        "--nproc",
        "2",
        "--ops",
        "all_reduce",
        "-b",
        "1K",
        "-e",
        "4K",
        "--out",
        str(tmp_path),
        "--run-id",
        "with-samples",
        "--no-progress",
        "--cluster",
        "lab",
        "--db",
        str(db),
    )
    assert result.returncode == 0, result.stderr
    assert store.query(db, "SELECT run_id, cluster FROM runs")[1] == [("with-samples", "lab")]
    assert count(db, "SELECT count(*) FROM samples") == 6
    run_dir = tmp_path / "with-samples"
    kept = read_samples(run_dir)
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    assert len(kept) == len(records) == 6
    for record in records:
        samples = kept[row_key(record)]
        assert len(samples["time_us"]) == record["iters"] and samples["slowest_rank"] == record["slowest_rank"]
        assert abs(float(np.median(samples["time_us"])) - record["time_us"]) <= 1e-3 * record["time_us"]
        assert samples["ranks"] == [0, 1] and len(samples["rank_median_us"]) == 2
    assert json.loads((run_dir / "run.json").read_text())["cluster"] == "lab"


def kept_for(run_dir: Path) -> list[tuple[dict, dict]]:
    """(record, its samples) for every record of a run directory; fails when a record kept none."""
    kept = read_samples(run_dir)
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    keys = [row_key(record) for record in records]
    assert len(kept) == len(records) and set(keys) == set(kept)
    return [(record, kept[key]) for record, key in zip(records, keys)]


def test_pairwise_and_overlap_runs_keep_samples_and_ingest_loads_them(tmp_path):
    """Every kind of measured run keeps per-iteration samples: pairwise per pair (4 ranks: two pairs
    per round share every key field but the pair), overlap per row (the collective alone)."""
    pairwise = cli(
        "run",
        "--pairwise",
        "--nproc",
        "4",
        "-b",
        "1K",
        "-e",
        "4K",
        "-n",
        "5",
        "-w",
        "1",
        "--out",
        str(tmp_path),
        "--run-id",
        "pw",
        "--no-progress",
    )
    assert pairwise.returncode == 0, pairwise.stderr
    overlap = cli(
        "overlap",
        "--nproc",
        "2",
        "--gemm-size",
        "64",
        "-b",
        "64K",
        "-e",
        "128K",
        "--iters",
        "3",
        "--warmup",
        "1",
        "--out",
        str(tmp_path),
        "--run-id",
        "ov",
        "--no-progress",
    )
    assert overlap.returncode == 0, overlap.stderr
    pairs = kept_for(tmp_path / "pw")
    assert len(pairs) == 12 and {tuple(record["pair"]) for record, _ in pairs} == {
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 2),
        (1, 3),
        (2, 3),
    }
    for record, samples in pairs + kept_for(tmp_path / "ov"):
        assert len(samples["time_us"]) == record["iters"] and samples["slowest_rank"] == record["slowest_rank"]
        assert abs(float(np.median(samples["time_us"])) - record["time_us"]) <= 1e-3 * record["time_us"]
        assert samples["ranks"] == (record["pair"] if record.get("pair") else [0, 1])

    db = tmp_path / "r.duckdb"
    assert cli("db", "ingest", str(tmp_path), "--db", str(db)).returncode == 0
    per_kind = store.query(
        db,
        "SELECT r.kind, count(*), count(s.pair) FROM samples s JOIN runs r USING (run_id) "
        "GROUP BY r.kind ORDER BY r.kind",
    )[1]
    assert per_kind == [("overlap", 4, 0), ("pairwise", 12, 12)]
    joined = (
        "SELECT count(*) FROM samples s JOIN pairs p ON p.run_id = s.run_id AND p.size_bytes = s.size_bytes "
        "AND [p.rank_a, p.rank_b] = s.pair AND abs(list_median(s.time_us) - p.time_us) <= 1e-3 * p.time_us"
    )
    assert count(db, joined) == 12


def test_a_schema_2_database_gains_the_samples_pair_column(tmp_path):
    db = tmp_path / "r.duckdb"
    store.ingest(db, [EXAMPLES])
    con = duckdb.connect(str(db))
    con.execute("ALTER TABLE samples DROP COLUMN pair")
    con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    con.close()
    store.ingest(db, [EXAMPLES])
    assert store.query(db, "SELECT value FROM meta WHERE key = 'schema_version'")[1] == [
        (str(store.STORE_SCHEMA_VERSION),)
    ]
    assert "pair" in store.query(db, "SELECT * FROM samples LIMIT 0")[0]


def test_a_schema_5_database_gains_stop_reason_and_keeps_its_rows(tmp_path):
    db = tmp_path / "r.duckdb"
    store.ingest(db, [EXAMPLES])
    before = count(db, "SELECT count(*) FROM records")
    con = duckdb.connect(str(db))
    con.execute("ALTER TABLE records DROP COLUMN stop_reason")
    con.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    con.close()
    assert store.ingest(db, []).summary() == "0 added, 0 updated, 0 unchanged, 0 skipped"  # opening to write migrates
    assert count(db, "SELECT count(*) FROM records") == before
    assert count(db, "SELECT count(stop_reason) FROM records") == 0  # null until re-ingested
    for run in EXAMPLES.iterdir():  # the imported examples say fixed: re-ingesting them fills the column
        if run.is_dir():
            os.utime(run / "records.jsonl")
    store.ingest(db, [EXAMPLES])
    fixed = store.query(
        db, "SELECT DISTINCT stop_reason FROM records r JOIN runs USING (run_id) WHERE source = 'nccl-tests'"
    )[1]
    assert fixed == [("fixed",)]


def test_submit_passes_db_and_cluster_to_the_job(tmp_path):
    script = cli(
        "submit",
        "--nodes",
        "2",
        "--ntasks-per-node",
        "2",
        "--db",
        str(tmp_path / "f.duckdb"),
        "--cluster",
        "lab",
        "--dry-run",
        "--",
        "-e",
        "4M",
    )
    assert script.returncode == 0, script.stderr
    assert f"DEFAULT_RUN_ARGS=(-e 4M --db {tmp_path / 'f.duckdb'} --cluster lab)" in script.stdout
