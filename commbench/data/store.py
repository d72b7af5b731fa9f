"""The fleet's results database: every run directory loaded into one DuckDB file.

Run directories stay the source of truth; the database is an index over them that can be
rebuilt at any time. Ingestion is idempotent and incremental: a run is keyed by its run id and
a SHA-256 digest of its files (run.json, records.jsonl, samples.jsonl). A cheap fingerprint
(each file's size and modification time) is kept too, so re-ingesting unchanged directories
reads no file contents.

Tables (STORE_SCHEMA_VERSION below; `meta` holds it):
  runs     one row per run: cluster, kind, source, created (UTC), complete, backend, world size,
           node names and a digest of the node set, versions, NCCL_*/launcher environment
           (JSON), a digest of the topology, the run's arguments, where it lives on disk, and
           whether it is synthetic (schema 2; null for runs ingested under schema 1).
  records  one row per record: the schema's fields, extra fields (overlap runs) as JSON. Schema 4
           added uniform_time_us_p10/p90 (all_to_allv rows); rows ingested before kept them in extra,
           and the migration moves them out of it (null where a run never had them). Schema 6 added
           stop_reason (null for rows ingested before; re-ingesting a run fills it where the run has it).
  samples  per-iteration times of the reported (slowest) rank and every rank's median, per record,
           keyed by run_id and the record's key columns (op, scope, group_size, size_bytes, dtype,
           in_place, direction), and for pairwise rows the pair of ranks (schema 3; null otherwise);
           sweeps, pairwise and overlap runs keep them, runs written before samples were kept have
           none. DuckDB reads the samples.jsonl files itself: the numbers never pass through Python.
  pairs    pairwise runs' links: the two ranks and nodes, latency/bandwidth and flags.
  actions  what commbench did to the scheduler (schema 5): when, node, verb (drain/resume), verdict,
           the run that was the evidence, the command, its result, and the command that acted
           (commbench.diagnose.scheduler). Not built from run directories: a rebuilt database starts
           it empty, and ingest never touches it.

Writers take an exclusive lock file beside the database, so two ingests at once run one after the
other and lose nothing; readers open the file read-only and wait while a writer holds it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
import types
import typing
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb

from commbench.data.cluster_name import resolve_cluster
from commbench.data.rundir import RECORDS_JSONL, RUN_FILE, Run, list_runs, load_run
from commbench.data.safe_read import RECORDS, UnsafeFile, open_regular
from commbench.data.samples import KEY_FIELDS, SAMPLES_JSONL
from commbench.data.schema import Record
from commbench.errors import CommbenchError, UsageError

# 2: runs.synthetic; 3: samples.pair; 4: records.uniform_time_us_p10/p90; 5: the actions table;
# 6: records.stop_reason
# (each added to an older file by _migrate)
STORE_SCHEMA_VERSION = 6
RUN_FILES = (RUN_FILE, RECORDS_JSONL, SAMPLES_JSONL)
LOCK_WAIT_S = 600.0
MEASURED_KINDS = ("sweep", "pairwise", "overlap")  # runs that exist for their records: none is no run
BATCH_RUNS = 2000  # runs per transaction: bounds memory, and a killed ingest keeps whole batches

RUN_COLUMNS = {
    "run_id": "VARCHAR PRIMARY KEY",
    "digest": "VARCHAR",
    "fingerprint": "VARCHAR",
    "path": "VARCHAR",
    "kind": "VARCHAR",
    "source": "VARCHAR",
    "cluster": "VARCHAR",
    "created": "TIMESTAMP",
    "finished": "TIMESTAMP",
    "complete": "BOOLEAN",
    "backend": "VARCHAR",
    "world_size": "INTEGER",
    "n_nodes": "INTEGER",
    "nodes": "VARCHAR[]",
    "nodeset_digest": "VARCHAR",
    "topology_digest": "VARCHAR",
    "versions": "JSON",
    "env": "JSON",
    "args": "JSON",
    "warnings": "JSON",
    "ingested": "TIMESTAMP",
    "synthetic": "BOOLEAN",  # last: ALTER TABLE appends it to a version-1 table
}
_PAIR_ONLY = {"pair", "pair_nodes", "outlier", "outlier_reasons", "tcp_segments_sent", "tcp_retransmits"}


def _one(con: duckdb.DuckDBPyConnection, sql: str, parameters: list[Any] | None = None) -> Any:
    """The one value a query that always returns one row returns."""
    row = con.execute(sql, parameters).fetchone()
    assert row is not None, sql
    return row[0]


def _column_type(annotation: Any) -> str:
    """The DuckDB type of a Record field, from its Python annotation (Optional stripped)."""
    args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return _column_type(args[0])
    if typing.get_origin(annotation) is typing.Literal or annotation is str:
        return "VARCHAR"
    if typing.get_origin(annotation) in (list, dict) or annotation in (list, dict):
        return "JSON"
    return {bool: "BOOLEAN", int: "BIGINT", float: "DOUBLE"}.get(annotation, "JSON")


# The records table follows schema.py's Record: a field added there changes this table, so it needs
# STORE_SCHEMA_VERSION raised and a migration (see _migrate; a database can always be rebuilt from
# the run directories). A migrated table has its new columns last, so inserts name their columns.
RECORD_COLUMNS = (
    {"run_id": "VARCHAR", "row": "INTEGER"}
    | {name: _column_type(info.annotation) for name, info in Record.model_fields.items() if name not in _PAIR_ONLY}
    | {"extra": "JSON"}
)
SAMPLE_COLUMNS = (
    {"run_id": "VARCHAR"}
    | {name: RECORD_COLUMNS[name] for name in KEY_FIELDS}
    | {
        "slowest_rank": "INTEGER",
        "time_us": "DOUBLE[]",
        "ranks": "INTEGER[]",
        "rank_median_us": "DOUBLE[]",
        "pair": "INTEGER[]",
    }
)  # last: added to a version-2 table by ALTER TABLE, and _insert_samples goes by position
PAIR_COLUMNS = {
    "run_id": "VARCHAR",
    "row": "INTEGER",
    "rank_a": "INTEGER",
    "rank_b": "INTEGER",
    "node_a": "VARCHAR",
    "node_b": "VARCHAR",
    "op": "VARCHAR",
    "direction": "VARCHAR",
    "size_bytes": "BIGINT",
    "time_us": "DOUBLE",
    "busbw_gbps": "DOUBLE",
    "outlier": "BOOLEAN",
    "outlier_reasons": "VARCHAR[]",
    "tcp_segments_sent": "BIGINT",
    "tcp_retransmits": "BIGINT",
}
TABLES = {"runs": RUN_COLUMNS, "records": RECORD_COLUMNS, "samples": SAMPLE_COLUMNS, "pairs": PAIR_COLUMNS}
# not a run's rows (ingest's per-run delete and insert leave it alone)
ACTION_COLUMNS = {
    "when": "TIMESTAMP",
    "node": "VARCHAR",
    "verb": "VARCHAR",
    "verdict": "VARCHAR",
    "evidence_run": "VARCHAR",
    "command": "VARCHAR",
    "result": "VARCHAR",
    "source": "VARCHAR",
}


# ---------------------------------------------------------------- opening


@contextmanager
def _writer_lock(path: Path, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """One writer at a time per database file; the next one waits (DuckDB itself would refuse it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(_lock_path(path), "w") as handle:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise CommbenchError(f"{path}: another ingest has held the database for {wait_s:.0f} s") from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# The reading door (db sql, the dashboard, history): no file, URL or extension is reachable from a
# query, and the statement cannot turn these back on (lock_configuration).
QUERY_CONFIG = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "lock_configuration": True,
}


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Undo the open transaction; DuckDB may have aborted it already (a full disk): the first error wins."""
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass


def _lock_path(db: Path) -> Path:
    return db.with_name(db.name + ".lock")


def _connect(
    path: Path, read_only: bool, wait_s: float = 60.0, config: dict[str, Any] | None = None
) -> duckdb.DuckDBPyConnection:
    """Open the file, waiting while another process holds it (DuckDB allows one writing process)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only, config=dict(config or {}))
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                raise CommbenchError(f"{path}: cannot open ({str(exc).splitlines()[0]})") from None
            time.sleep(0.1)
        except duckdb.Error as exc:
            raise CommbenchError(f"{path}: not a commbench database ({str(exc).splitlines()[0]})") from None


def _check_version(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except duckdb.CatalogException:
        raise CommbenchError(f"{path}: not a commbench database (no meta table)") from None
    version = int(row[0]) if row else 0
    if version > STORE_SCHEMA_VERSION:
        raise UsageError(
            f"{path}: written by a newer commbench (store schema {version}; this one reads up to "
            f"{STORE_SCHEMA_VERSION}); upgrade commbench or use another --db"
        )


def _create_tables(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", [str(STORE_SCHEMA_VERSION)])
    for table, columns in {**TABLES, "actions": ACTION_COLUMNS}.items():
        _create_table(con, table, columns)


def _create_table(con: duckdb.DuckDBPyConnection, table: str, columns: dict[str, str]) -> None:
    spec = ", ".join(f'"{name}" {kind}' for name, kind in columns.items())
    con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({spec})")


# Record fields that became records columns in schema 4; ingests before it kept them in `extra`.
_COLUMNS_OUT_OF_EXTRA_4 = ("uniform_time_us_p10", "uniform_time_us_p90")


def _migrate(con: duckdb.DuckDBPyConnection) -> None:
    """Bring an older file to this version in place, in one transaction, keeping every row:
    runs.synthetic (2) and samples.pair (3) added, null until a run is re-ingested (older runs'
    pairwise samples were never kept, so nothing is lost); records.uniform_time_us_p10/p90 (4)
    added and filled from what older ingests kept of them in `extra`; the actions table (5), empty;
    records.stop_reason (6) added, moved out of `extra` likewise where an ingest kept it there."""
    version = int(_one(con, "SELECT value FROM meta WHERE key = 'schema_version'"))
    if version >= STORE_SCHEMA_VERSION:
        return
    con.execute("BEGIN TRANSACTION")
    try:
        if version < 2:
            con.execute("ALTER TABLE runs ADD COLUMN IF NOT EXISTS synthetic BOOLEAN")
        if version < 3:
            con.execute("ALTER TABLE samples ADD COLUMN IF NOT EXISTS pair INTEGER[]")
        if version < 4:
            for name in _COLUMNS_OUT_OF_EXTRA_4:
                _move_out_of_extra(con, name)
        if version < 5:
            _create_table(con, "actions", ACTION_COLUMNS)
        if version < 6:
            _move_out_of_extra(con, "stop_reason")
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(STORE_SCHEMA_VERSION)])
        con.execute("COMMIT")
    except BaseException:
        _rollback(con)
        raise


def _move_out_of_extra(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Add the records column `name` (a number) and move each row's extra.<name> into it. A value
    that is not of its column's kind stays in extra, so nothing is dropped; rows without it get null."""
    kinds = "'VARCHAR', 'NULL'" if RECORD_COLUMNS[name] == "VARCHAR" else "'DOUBLE', 'BIGINT', 'UBIGINT', 'NULL'"
    con.execute(f'ALTER TABLE records ADD COLUMN IF NOT EXISTS "{name}" {RECORD_COLUMNS[name]}')
    con.execute(
        f'UPDATE records SET "{name}" = CAST(extra->>? AS {RECORD_COLUMNS[name]}), '
        "extra = nullif(CAST(json_merge_patch(extra, json_object(?, NULL)) AS VARCHAR), '{}') "
        f"WHERE json_exists(extra, ?) AND json_type(extra, ?) IN ({kinds})",
        [f"$.{name}", name, f"$.{name}", f"$.{name}"],
    )


def open_read_only(path: str | Path, external_access: bool = False) -> duckdb.DuckDBPyConnection:
    """A read-only connection to an existing database (QUERY_CONFIG: no file, URL or extension can be
    reached from it, unless `external_access` for our own exports); UsageError if there is none."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path}: no database (run `commbench db ingest RESULTS_DIR` first, or pass --db)")
    con = _connect(path, read_only=True, config=None if external_access else QUERY_CONFIG)
    _check_version(con, path)
    return con


# ---------------------------------------------------------------- ingesting


@dataclass
class IngestReport:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why)

    def summary(self) -> str:
        return (
            f"{len(self.added)} added, {len(self.updated)} updated, {self.unchanged} unchanged, "
            f"{len(self.skipped)} skipped"
        )


def run_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Each path that is a run directory, plus the run directories under each that is not."""
    found: list[Path] = []
    for path in map(Path, paths):
        if (path / RUN_FILE).is_file():
            found.append(path)
        elif path.is_dir():
            found.extend(list_runs(path))
        else:
            raise UsageError(f"{path}: not a directory")
    return found


def ingest(db: str | Path, paths: Iterable[str | Path]) -> IngestReport:
    """Load every run directory under `paths` into the database at `db` (created if missing).
    A database this call created is removed again when the ingest fails (a full disk, a kill the
    process survives): a half-made file would break every later ingest. Errors of the disk are one
    CommbenchError naming the file."""
    db = Path(db)
    dirs = run_dirs(paths)
    report = IngestReport()
    lock_created = not _lock_path(db).exists()
    with _writer_lock(db):
        created = not db.exists()
        try:
            _ingest_locked(db, dirs, report)
        except BaseException as exc:
            if created:
                _remove_database(db, with_lock=lock_created)
            if isinstance(exc, (duckdb.Error, OSError)) and not isinstance(exc, duckdb.InterruptException):
                kept = "no database written" if created else "database unchanged"
                raise CommbenchError(f"{db}: ingest failed, {kept} ({_first_line(exc)})") from None
            raise
    return report


def _ingest_locked(db: Path, dirs: list[Path], report: IngestReport) -> None:
    _remove_stale_staging()
    con = _connect(db, read_only=False)
    try:
        _create_tables(con)
        _check_version(con, db)
        _migrate(con)
        known = _known_runs(con)
        pending: list[tuple[Run, str, str]] = []
        staged_ids: dict[str, Path] = {}  # run id -> the directory this ingest took it from
        for path in dirs:
            staged = _stage(path, known, report)
            if staged and _first_of_its_id(staged[0], staged_ids, report):
                pending.append(staged)
            if len(pending) >= BATCH_RUNS:
                _write_batch(con, pending, known, report)
                pending = []
        _write_batch(con, pending, known, report)
    finally:
        con.close()


def _first_of_its_id(run: Run, staged_ids: dict[str, Path], report: IngestReport) -> bool:
    """True for the first directory of a run id in this ingest; a later one is reported and skipped
    (two rows with one primary key would abort the whole batch)."""
    first = staged_ids.setdefault(run.run_id, run.path)
    if first == run.path:
        return True
    report.skipped.append((str(run.path), f"duplicate run id {run.run_id} (already taken from {first}); skipped"))
    return False


def _remove_database(db: Path, with_lock: bool) -> None:
    """What a failed first ingest made: the file, its WAL and (when this ingest made it) the lock file;
    a writer waiting on that lock then creates the database afresh, and DuckDB refuses a second writer."""
    for leftover in (db, db.with_name(db.name + ".wal")) + ((_lock_path(db),) if with_lock else ()):
        try:
            leftover.unlink()
        except FileNotFoundError:
            pass


def _first_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    return (str(exc).splitlines() or [type(exc).__name__])[0]


_STAGING_PREFIX = "commbench-ingest-"


def _remove_stale_staging() -> None:
    """Staging folders of ingests that were killed (SIGKILL skips every cleanup): their pid is gone."""
    for folder in Path(tempfile.gettempdir()).glob(f"{_STAGING_PREFIX}*-*"):
        pid = folder.name.removeprefix(_STAGING_PREFIX).split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(folder, ignore_errors=True)


def _known_runs(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[str, str, str]]:
    """path -> (run_id, fingerprint, digest) and run_id -> the same, for every run in the database."""
    known: dict[str, tuple[str, str, str]] = {}
    for run_id, path, fingerprint, digest in con.execute(
        "SELECT run_id, path, fingerprint, digest FROM runs"
    ).fetchall():
        known[path] = known[run_id] = (run_id, fingerprint, digest)
    return known


def _fingerprint(path: Path) -> str:
    parts = []
    for name in RUN_FILES:
        try:
            stat = (path / name).stat()
            parts.append(f"{stat.st_size}:{stat.st_mtime_ns}")
        except FileNotFoundError:
            parts.append("-")
    return "/".join(parts)


def _digest(path: Path) -> str:
    """SHA-256 of the run's files, streamed through safe_read (a FIFO or a device is never read)."""
    digest = hashlib.sha256()
    for name in RUN_FILES:
        try:
            with open_regular(path / name, RECORDS, root=path) as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
        except UnsafeFile:
            digest.update(b"\0missing")
        digest.update(b"\0")
    return digest.hexdigest()


def _stage(path: Path, known: dict[str, Any], report: IngestReport) -> tuple[Run, str, str] | None:
    """The run to write (with its fingerprint and digest), or None when it is unchanged or unusable."""
    key = os.path.abspath(path)
    fingerprint = _fingerprint(path)
    if key in known and known[key][1] == fingerprint:
        report.unchanged += 1
        return None
    try:
        run = load_run(path)
    except CommbenchError as exc:
        report.skipped.append((str(path), str(exc)))
        return None
    if not run.info.complete:
        report.skipped.append(
            (str(path), "partial run (not complete" + (f": {run.info.reason})" if run.info.reason else ")"))
        )
        return None
    if not run.records and (run.bad_records or run.info.kind in MEASURED_KINDS):
        report.skipped.append((str(path), f"no valid records ({run.bad_records} bad lines); not ingested"))
        return None
    digest = _digest(path)
    previous = known.get(run.run_id)
    if previous and previous[2] == digest:
        report.unchanged += 1  # touched or moved, not changed: rewritten only to refresh fingerprint and path
    return run, fingerprint, digest


def _write_batch(
    con: duckdb.DuckDBPyConnection, pending: list[tuple[Run, str, str]], known: dict[str, Any], report: IngestReport
) -> None:
    if not pending:
        return
    rows: dict[str, list[dict[str, Any]]] = {table: [] for table in TABLES}
    for run, fingerprint, digest in pending:
        rows["runs"].append(_run_row(run, fingerprint, digest))
        _record_rows(run, rows)
    with tempfile.TemporaryDirectory(prefix=f"{_STAGING_PREFIX}{os.getpid()}-") as tmp:
        con.execute("BEGIN TRANSACTION")
        try:
            run_ids = [row["run_id"] for row in rows["runs"]]
            for table in TABLES:
                con.execute(f"DELETE FROM {table} WHERE run_id IN (SELECT unnest(?))", [run_ids])
            for table, columns in TABLES.items():
                if table != "samples":
                    _insert_json_rows(con, table, columns, rows[table], Path(tmp))
            _insert_samples(con, [(run.path / SAMPLES_JSONL, run.run_id) for run, _, _ in pending])
            con.execute("COMMIT")
        except BaseException:
            _rollback(con)
            raise
    for run, fingerprint, digest in pending:
        previous = known.get(run.run_id)
        if previous is None:
            report.added.append(run.run_id)
        elif previous[2] != digest:
            report.updated.append(run.run_id)
        known[os.path.abspath(run.path)] = known[run.run_id] = (run.run_id, fingerprint, digest)


def _insert_json_rows(
    con: duckdb.DuckDBPyConnection, table: str, columns: dict[str, str], rows: list[dict[str, Any]], tmp: Path
) -> None:
    """Bulk insert through a newline-delimited JSON file: far faster than row-by-row inserts."""
    if not rows:
        return
    staging = tmp / f"{table}.jsonl"
    with open(staging, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(row, default=str) + "\n" for row in rows)
    types = {name: kind.replace(" PRIMARY KEY", "") for name, kind in columns.items()}
    names = ", ".join(f'"{name}"' for name in columns)
    try:
        con.execute(
            f"INSERT INTO {table} ({names}) SELECT {names} FROM read_json(?, format='newline_delimited', columns=?)",
            [str(staging), types],
        )
    finally:
        staging.unlink()  # read: the next table's file need not share the disk with it


_SAMPLE_FILE_COLUMNS = {
    "key": "JSON",
    "slowest_rank": "INTEGER",
    "time_us": "DOUBLE[]",
    "ranks": "INTEGER[]",
    "rank_median_us": "DOUBLE[]",
    "pair": "INTEGER[]",
}


def _insert_samples(con: duckdb.DuckDBPyConnection, files: list[tuple[Path, str]]) -> None:
    """Every samples.jsonl of the batch, parsed by DuckDB; lines that do not parse are skipped."""
    present = [(str(path), run_id) for path, run_id in files if _regular_inside(path)]
    if not present:
        return
    key_columns = ", ".join(f"CAST(s.key->>{i} AS {SAMPLE_COLUMNS[name]})" for i, name in enumerate(KEY_FIELDS))
    con.execute(
        f"INSERT INTO samples SELECT m.run_id, {key_columns}, s.slowest_rank, s.time_us, s.ranks, s.rank_median_us, "
        "s.pair "
        "FROM read_json(?, format='newline_delimited', columns=?, filename=true, ignore_errors=true) s "
        "JOIN (SELECT unnest(?) AS filename, unnest(?) AS run_id) m ON s.filename = m.filename "
        "WHERE s.key IS NOT NULL AND s.time_us IS NOT NULL",
        [
            [path for path, _ in present],
            _SAMPLE_FILE_COLUMNS,
            [path for path, _ in present],
            [run_id for _, run_id in present],
        ],
    )


def _regular_inside(path: Path) -> bool:
    """A samples file DuckDB may read: a regular file inside its run directory (no link out, no FIFO)."""
    try:
        with open_regular(path, RECORDS, root=path.parent):
            return True
    except UnsafeFile:
        return False


def _timestamp(text: str | None) -> str | None:
    """ISO-8601 -> naive UTC 'YYYY-MM-DD HH:MM:SS' (DuckDB TIMESTAMP); None if unparseable."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
    return moment.isoformat(sep=" ")


def _short_digest(value: Any) -> str | None:
    if value is None:
        return None
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _run_row(run: Run, fingerprint: str, digest: str) -> dict[str, Any]:
    info = run.info
    hosts = [node.hostname for node in info.nodes]
    cluster = getattr(info, "cluster", None) or resolve_cluster(None, info.env, hosts[0] if hosts else "local")
    return {
        "run_id": info.run_id,
        "digest": digest,
        "fingerprint": fingerprint,
        "path": os.path.abspath(run.path),
        "kind": info.kind,
        "source": info.source,
        "cluster": cluster,
        "created": _timestamp(info.created),
        "finished": _timestamp(info.finished),
        "complete": info.complete,
        "backend": info.backend,
        "world_size": info.world_size,
        "n_nodes": len(hosts),
        "nodes": hosts,
        "nodeset_digest": _short_digest(sorted(hosts)) if hosts else None,
        "topology_digest": _short_digest(info.topology),
        "versions": info.versions,
        "env": info.env,
        "args": info.args,
        "warnings": run.warnings,
        "ingested": datetime.now(timezone.utc).replace(tzinfo=None).isoformat(sep=" ", timespec="seconds"),
        "synthetic": info.synthetic,
    }


def _record_rows(run: Run, rows: dict[str, list[dict[str, Any]]]) -> None:
    for index, record in enumerate(run.records):
        row = {"run_id": run.run_id, "row": index}
        row.update({name: record.get(name) for name in RECORD_COLUMNS if name not in row and name != "extra"})
        extra = {key: value for key, value in record.items() if key not in RECORD_COLUMNS and key not in _PAIR_ONLY}
        row["extra"] = extra or None
        rows["records"].append(row)
        if record.get("scope") == "pair" and record.get("pair"):
            rows["pairs"].append(_pair_row(run.run_id, index, record))


def _pair_row(run_id: str, index: int, record: dict[str, Any]) -> dict[str, Any]:
    ranks = list(record.get("pair") or [None, None]) + [None, None]
    nodes = list(record.get("pair_nodes") or [None, None]) + [None, None]
    return {
        "run_id": run_id,
        "row": index,
        "rank_a": ranks[0],
        "rank_b": ranks[1],
        "node_a": nodes[0],
        "node_b": nodes[1],
        "op": record.get("op"),
        "direction": record.get("direction"),
        "size_bytes": record.get("size_bytes"),
        "time_us": record.get("time_us"),
        "busbw_gbps": record.get("busbw_gbps"),
        "outlier": record.get("outlier"),
        "outlier_reasons": record.get("outlier_reasons"),
        "tcp_segments_sent": record.get("tcp_segments_sent"),
        "tcp_retransmits": record.get("tcp_retransmits"),
    }


# ---------------------------------------------------------------- scheduler actions


def record_actions(db: str | Path, rows: list[dict[str, Any]]) -> None:
    """Append rows (ACTION_COLUMNS; `when` ISO-8601) to the actions table, creating the file if needed."""
    if not rows:
        return
    db = Path(db)
    with _writer_lock(db):
        con = _connect(db, read_only=False)
        try:
            _create_tables(con)
            _check_version(con, db)
            _migrate(con)
            names = ", ".join(f'"{name}"' for name in ACTION_COLUMNS)
            marks = ", ".join("?" for _ in ACTION_COLUMNS)
            con.executemany(
                f"INSERT INTO actions ({names}) VALUES ({marks})",
                [
                    [_timestamp(row["when"]) if name == "when" else row.get(name) for name in ACTION_COLUMNS]
                    for row in rows
                ],
            )
        finally:
            con.close()


def read_actions(db: str | Path, limit: int = 1000) -> list[dict[str, Any]]:
    """The newest actions first (an older database without the table: none)."""
    con = open_read_only(db)
    try:
        if not _one(con, "SELECT count(*) FROM information_schema.tables WHERE table_name = 'actions'"):
            return []
        cursor = con.execute('SELECT * FROM actions ORDER BY "when" DESC LIMIT ?', [limit])
        columns = [column[0] for column in cursor.description]
        return [dict(zip(columns, row)) for row in cursor.fetchall()]
    finally:
        con.close()


# ---------------------------------------------------------------- reading for other tools

# Table functions a query may call: they compute rows or describe this database; every other one
# (read_csv, read_text, glob, parquet_scan, sqlite_scan, ...) reads files or URLs, and is refused.
_SAFE_TABLE_FUNCTIONS = {"range", "generate_series", "unnest", "json_each", "json_tree"}
_SAFE_TABLE_FUNCTION_PREFIXES = ("duckdb_", "pragma_")
_PATH_CHARACTERS = set("/.:\\~")  # a "table" named like a file is DuckDB reading that file


def check_query(sql: str) -> None:
    """UsageError unless sql is one SELECT (or WITH ... SELECT) that reads nothing but the database.
    DuckDB parses it (extract_statements, then json_serialize_sql for the parse tree): the statement
    type, every table function and every table name are checked, not the text's first word."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise UsageError(f"bad SQL: {str(exc).splitlines()[0]}") from None
    if len(statements) != 1:
        raise UsageError(f"give exactly one statement (got {len(statements)})")
    if statements[0].type != duckdb.StatementType.SELECT:
        raise UsageError(f"db sql is read-only: {statements[0].type.name} refused (one SELECT or WITH ... SELECT only)")
    with duckdb.connect(":memory:", config=dict(QUERY_CONFIG)) as parser:
        tree = json.loads(_one(parser, "SELECT json_serialize_sql(?)", [sql]))
    if tree.get("error"):
        raise UsageError(f"db sql is read-only: {tree.get('error_message', 'not a plain SELECT')}")
    for node in _parse_nodes(tree):
        _check_node(node)


def _parse_nodes(tree: Any) -> Iterator[dict[str, Any]]:
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _check_node(node: dict[str, Any]) -> None:
    if node.get("type") == "TABLE_FUNCTION":
        name = str((node.get("function") or {}).get("function_name", "")).lower()
        if name not in _SAFE_TABLE_FUNCTIONS and not name.startswith(_SAFE_TABLE_FUNCTION_PREFIXES):
            raise UsageError(
                f"db sql reads the database only: table function {name}() refused (it can read files or URLs)"
            )
    elif node.get("type") == "BASE_TABLE" and _PATH_CHARACTERS & set(str(node.get("table_name", ""))):
        raise UsageError("db sql reads the database only: a table named like a file or URL refused")


def query(db: str | Path, sql: str, params: list[Any] | None = None) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run one read-only statement (check_query) on a QUERY_CONFIG connection: (column names, rows)."""
    check_query(sql)
    con = open_read_only(db)
    try:
        cursor = con.execute(sql, params or [])
        return [column[0] for column in cursor.description], cursor.fetchall()
    except duckdb.Error as exc:
        raise UsageError(f"SQL error: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()


_LISTING_SQL = """
SELECT r.path, r.kind, r.created, r.backend, r.world_size, r.synthetic, coalesce(n.records, 0) AS records
FROM runs r LEFT JOIN (SELECT run_id, count(*) AS records FROM records GROUP BY run_id) n USING (run_id)
WHERE (?::VARCHAR[] IS NULL OR list_contains(?::VARCHAR[], r.kind)) AND starts_with(r.path, ?)
ORDER BY r.created DESC NULLS LAST, r.path DESC
"""


def list_runs_under(db: str | Path, root: str | Path, kinds: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """The runs (of these kinds; None: all) the database holds under the folder root, newest first,
    without reading any run directory: path, kind, created, backend, world_size, synthetic (None if
    ingested under schema 1) and the number of records."""
    prefix = os.path.join(os.path.abspath(root), "")
    chosen = None if kinds is None else list(kinds)
    columns, rows = query(db, _LISTING_SQL, [chosen, chosen, prefix])
    return [dict(zip(columns, row)) for row in rows]


def export_parquet(db: str | Path, out_dir: str | Path) -> list[Path]:
    """Every table as <out_dir>/<table>.parquet (DuckDB writes Parquet itself: no extra package)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    con = open_read_only(db, external_access=True)  # COPY ... TO writes the files: our statement, not a user's
    written = []
    try:
        for table in (*TABLES, "actions"):
            target = out / f"{table}.parquet"
            con.execute(f"COPY {table} TO '{_sql_text(target)}' (FORMAT PARQUET)")
            written.append(target)
    finally:
        con.close()
    return written


def _sql_text(path: Path) -> str:
    return str(path).replace("'", "''")
