"""Run directories: created exclusively, written atomically or by appending whole lines, read tolerantly.

Writers never overwrite a file in place. A whole file (run.json, a rewritten records.csv) goes to a
temporary file in the same directory and is renamed over the old one, so a reader (the dashboard, a
second process) sees either the previous complete file or the new complete file, even if the
writer is killed mid-write. A measuring run's rows are appended instead, one line per record to
records.jsonl and records.csv and one per samples line to samples.jsonl: each row costs its own
lines, not a rewrite of the run so far (whose cost grew as the square of the rows, and which rank
0 paid between rows while the other ranks waited). What was there is never touched; only the
last line of a file can be incomplete (being written, or cut when the writer died mid-write), and
every reader drops a last line without its newline that does not parse (`iter_jsonl`). A failed
append is truncated back, so the next line never continues a cut one.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import secrets
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from commbench.config_options import as_argument
from commbench.data.safe_read import (
    DOCUMENT,
    RECORDS,
    RUN_JSON,
    Kind,
    LineReport,
    UnsafeFile,
    iter_jsonl,
    load_json,
)
from commbench.data.samples import SAMPLES_JSONL
from commbench.data.schema import RECORD_FIELDS, SCHEMA_VERSION, Record, RunInfo
from commbench.errors import CommbenchError, UsageError

RUN_FILE = "run.json"
RECORDS_JSONL = "records.jsonl"
RECORDS_CSV = "records.csv"
# run.json's reason after Ctrl-C: rank 0 writes "interrupted: 12 of 40 rows", the launcher reads it back
INTERRUPTED_PREFIX = "interrupted: "


def interrupted_reason(kept: int, planned: int) -> str:
    return f"{INTERRUPTED_PREFIX}{kept} of {planned} rows"


# A run id is a directory name: one path component from a safe alphabet, so `--run-id ../x`, an
# absolute id or a newline can never place or name a run outside --out.
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")


def check_run_id(run_id: str) -> str:
    """run_id, if it is one safe path component; UsageError (exit 2) otherwise."""
    if not isinstance(run_id, str) or not RUN_ID_PATTERN.fullmatch(run_id):
        raise UsageError(
            f"run id {run_id!r}: a run id is one directory name of letters, digits, '.', '_', "
            "'+' and '-', starting with a letter or digit (at most 200)"
        )
    return run_id


def run_id_argument(text: str) -> str:
    """argparse type for --run-id: one line and exit 2 on a bad id, before anything starts."""
    return as_argument(check_run_id, text)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_run_id(prefix: str = "") -> str:
    """Sortable by time, unique across hosts and concurrent runs: 20261130-101500-host-a1b2c3."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    host = socket.gethostname().split(".")[0] or "host"
    return f"{prefix}{stamp}-{host}-{secrets.token_hex(3)}"


def prepare_output_folder(folder: str | Path, flag: str = "--out") -> Path:
    """Create the results folder now, or refuse it in one line: a command checks where it will
    write before it starts ranks or spends minutes measuring, not when the first row is due."""
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {folder}: is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"{flag} {folder}: cannot create the folder ({error.strerror or error})") from None
    try:  # a real probe: permissions, a read-only mount and quotas all show here
        tempfile.TemporaryFile(dir=path).close()
    except OSError as error:
        raise UsageError(f"{flag} {folder}: cannot write in the folder ({error.strerror or error})") from None
    return path


def atomic_write_text(path: Path, text: str, durable: bool = True) -> None:
    """Write a temporary file and rename it over `path`. The rename alone protects readers and
    crashes of this process; `durable` also syncs to disk, against losing power (slow: once per run)."""
    atomic_write_chunks(path, (text,), durable)


def atomic_write_chunks(path: Path, chunks: Iterable[str], durable: bool = True) -> None:
    """atomic_write_text for text made piece by piece, so a big file is never whole in memory."""
    with atomic_file(path, durable) as handle:
        for chunk in chunks:
            handle.write(chunk)


@contextlib.contextmanager
def atomic_file(path: Path, durable: bool = True) -> Iterator[IO[str]]:
    """A text file to write that replaces `path` only when the block ends without an error; on one,
    the temporary file is removed and `path` is as it was."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            yield handle
            handle.flush()  # a full disk shows here, inside the try, not in a close after it
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()  # never leave a .tmp beside the file: the old `path` is still whole
        if isinstance(exc, OSError) and not exc.filename:
            exc.filename = str(path)  # a full disk shows in write(), whose error names no file
        raise


def records_to_csv(records: list[dict[str, Any]]) -> str:
    extra = sorted({key for rec in records for key in rec} - set(RECORD_FIELDS))
    return "".join(_csv_chunks(records, extra))


def _csv_chunks(records: Iterable[dict[str, Any]], extra: list[str], rows_per_chunk: int = 1000) -> Iterator[str]:
    """The CSV of records (columns RECORD_FIELDS then `extra`), header first, a chunk of rows at a time."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=RECORD_FIELDS + extra, lineterminator="\n")
    writer.writeheader()
    for number, rec in enumerate(records, 1):
        writer.writerow({key: "" if value is None else value for key, value in rec.items()})
        if number % rows_per_chunk == 0:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


class _AppendedFile:
    """A run-directory file that grows by whole lines (see the module's docstring)."""

    def __init__(self, path: Path):
        self.path = path

    def append(self, text: str) -> None:
        """Add `text` (whole lines) at the end, in as few writes as the kernel takes; on an error the
        file is cut back to what it held, so it never ends in part of a line another append continues."""
        data = memoryview(text.encode("utf-8"))
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            whole = os.fstat(fd).st_size
            try:
                while data:
                    data = data[os.write(fd, data) :]
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, whole)
                exc.filename = exc.filename or str(self.path)  # a full disk's error names no file
                raise
        finally:
            os.close(fd)

    def sync(self) -> None:
        """Flush what was appended to the disk (against losing power; once per run)."""
        if not self.path.exists():
            return
        fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class RunWriter:
    """Owns one run directory. Only rank 0 of a run creates one."""

    def __init__(self, out_dir: str | Path, info: RunInfo):
        check_run_id(info.run_id)
        self.root = prepare_output_folder(out_dir)
        self.path = self.root / info.run_id
        try:
            self.path.mkdir()  # exclusive: two runs never share (or clobber) a directory
        except FileExistsError:
            raise UsageError(f"run directory {self.path} already exists; pick another --run-id") from None
        self.info = info
        self.records: list[dict[str, Any]] = []
        self.samples_kept = 0  # samples.jsonl lines written (appended, not held here)
        self._lock = threading.Lock()  # the watchdog thread may finish the run while rows are written
        self._streamed = False  # write_all_records wrote the records files: they are not held here
        self._files = {name: _AppendedFile(self.path / name) for name in (RECORDS_JSONL, RECORDS_CSV, SAMPLES_JSONL)}
        self._csv_extra: list[str] = []  # records.csv's columns beyond RECORD_FIELDS
        try:
            self.write_info()
            self._rewrite_records()
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        """Remove the run directory this writer created (it failed before holding anything whole)."""
        shutil.rmtree(self.path, ignore_errors=True)

    def write_info(self) -> None:
        atomic_write_text(self.path / RUN_FILE, self.info.model_dump_json(indent=2) + "\n")

    def add_records(self, records: list[Record], samples: Sequence[str] = ()) -> None:
        """Append these records and, where the driver has them, their per-iteration samples lines:
        the cost is these rows' lines, whatever the run holds already. records.csv is rewritten
        (atomically) only when a record brings a column it does not have."""
        dumped = [rec.model_dump() for rec in records]
        with self._lock:
            if self._streamed:
                raise ValueError("this writer's records were written by write_all_records and are not kept")
            kept, extra = len(self.records), self._csv_extra
            try:
                self._append(dumped, samples)
            except BaseException:
                del self.records[kept:]  # memory holds what records.jsonl holds
                self._csv_extra = extra
                raise

    def _append(self, dumped: list[dict[str, Any]], samples: Sequence[str]) -> None:
        """samples.jsonl, records.csv, then records.jsonl last: a row is in the run once its records are."""
        if samples:
            self._files[SAMPLES_JSONL].append("".join(samples))
            self.samples_kept += len(samples)
        self.records.extend(dumped)
        extra = _extra_columns(dumped, self._csv_extra)
        if extra != self._csv_extra:  # a new column: every row again, replaced whole
            self._csv_extra = extra
            atomic_write_chunks(self.path / RECORDS_CSV, _csv_chunks(self.records, extra), durable=False)
        else:
            self._files[RECORDS_CSV].append(_csv_rows(dumped, extra))
        self._files[RECORDS_JSONL].append("".join(json.dumps(rec) + "\n" for rec in dumped))

    def set_records(self, records: list[dict[str, Any]]) -> None:
        """Replace every record (e.g. to add flags computed once all rows are in): both records files
        rewritten whole, atomically."""
        with self._lock:
            self.records = list(records)
            self._rewrite_records()

    def write_all_records(self, records: Iterable[Record], extra: Sequence[str] | None = None) -> None:
        """Write a run's whole, final records at once (an import), streamed record by record in one
        pass over them: neither the records, their dumps nor the files' text are held whole, so
        `records` may make each one as it is read. `extra` names the fields beyond the schema's that
        some record has (records.csv's last columns); without it a first pass finds them. The writer
        keeps no record, so it refuses to be handed records before or after."""
        if self.records or self.samples_kept:
            raise ValueError("write_all_records writes every record; this writer already holds some")
        if extra is None:
            records = records if isinstance(records, Sequence) else list(records)
            extra = sorted({key for rec in records for key in rec.model_extra or {}} - set(RECORD_FIELDS))
        with self._lock:
            self._streamed = True
            with atomic_file(self.path / RECORDS_JSONL) as jsonl, atomic_file(self.path / RECORDS_CSV) as table:
                columns = RECORD_FIELDS + list(extra)
                known = set(columns)
                writer = csv.writer(table, lineterminator="\n")  # as csv.DictWriter writes, in one pass
                writer.writerow(columns)
                for rec in records:
                    dumped = rec.model_dump()
                    jsonl.write(json.dumps(dumped) + "\n")
                    if not dumped.keys() <= known:
                        raise ValueError(f"record fields not in records.csv's columns: {sorted(dumped.keys() - known)}")
                    writer.writerow(["" if (value := dumped.get(key)) is None else value for key in columns])

    def _rewrite_records(self, durable: bool = False) -> None:
        """records.jsonl and records.csv from self.records, each replaced whole (atomically)."""
        if self._streamed:
            raise ValueError("this writer's records were written by write_all_records and are not kept")
        self._csv_extra = _extra_columns(self.records, [])
        atomic_write_chunks(self.path / RECORDS_JSONL, (json.dumps(rec) + "\n" for rec in self.records), durable)
        atomic_write_chunks(self.path / RECORDS_CSV, _csv_chunks(self.records, self._csv_extra), durable)

    def finish(self, complete: bool, reason: str | None = None) -> None:
        """run.json says whether the run is complete (and why not), after every appended line is on disk."""
        with self._lock:
            self.info.complete = complete
            self.info.reason = reason
            self.info.finished = utc_now()
            for appended in self._files.values():
                appended.sync()
            self.write_info()


def _extra_columns(records: Iterable[dict[str, Any]], known: list[str]) -> list[str]:
    """records.csv's columns beyond RECORD_FIELDS once `records` are in: `known` and any new ones, sorted."""
    return sorted(set(known) | ({key for rec in records for key in rec} - set(RECORD_FIELDS)))


def _csv_rows(records: list[dict[str, Any]], extra: list[str]) -> str:
    """records.csv's rows of `records`, without the header."""
    text = "".join(_csv_chunks(records, extra))
    return text[text.index("\n") + 1 :]


@dataclass
class Run:
    """A run directory as read back: what was valid, and warnings about what was not."""

    path: Path
    info: RunInfo
    records: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    bad_records: int = 0  # records.jsonl lines skipped (not JSON, not a record, too long)

    @property
    def run_id(self) -> str:
        return self.info.run_id


def read_json(path: Path, missing: str, kind: Kind = DOCUMENT) -> Any:
    """The JSON in `path`, or CommbenchError with `missing` (no file) or why it is refused (safe_read:
    not a regular file, a link out of the run directory, too big, too deep, not UTF-8)."""
    if not os.path.lexists(path):
        raise CommbenchError(missing)
    try:
        return load_json(path, kind, root=path.parent)
    except UnsafeFile as exc:
        raise CommbenchError(str(exc)) from None


def save_document_run(out_dir: str | Path, info: RunInfo, filename: str, document: dict[str, Any]) -> Path:
    """A complete run directory whose content is one JSON document beside run.json (trace analyses,
    diagnoses): run.json is written incomplete first and marked complete once the document is in place."""
    writer = RunWriter(out_dir, info)
    atomic_write_text(writer.path / filename, json.dumps(document) + "\n")
    writer.finish(complete=True)
    return writer.path


def load_document(run_dir: str | Path, filename: str, what: str, list_key: str) -> dict[str, Any]:
    """The JSON document `filename` of such a run directory; CommbenchError unless it is a dict
    holding a `list_key` list (what makes it `what`, e.g. "a trace analysis")."""
    path = Path(run_dir) / filename
    document = read_json(path, f"{path}: missing (the run was not finished)")
    if not isinstance(document, dict) or not isinstance(document.get(list_key), list):
        raise CommbenchError(f"{path}: not {what} (no '{list_key}' list)")
    return document


def load_run(path: str | Path) -> Run:
    """Read a run directory, keeping every valid record; raises CommbenchError if run.json is unusable."""
    path = Path(path)
    warnings: list[str] = []
    run_file = path / RUN_FILE
    if not run_file.is_file():  # a path the user named that holds no run: bad input (exit 2), not a failure
        raise UsageError(f"{path}: not a run directory (no {RUN_FILE})")
    raw = read_json(run_file, f"{path}: not a run directory (no {RUN_FILE})", RUN_JSON)
    if not isinstance(raw, dict):
        raise CommbenchError(f"{run_file}: expected a JSON object")
    version = raw.get("schema_version")
    if version != SCHEMA_VERSION:
        warnings.append(
            f"{run_file}: schema_version {version!r}, this commbench reads {SCHEMA_VERSION}; fields may be missing"
        )
    try:
        info = RunInfo.model_validate(raw)
    except ValidationError as exc:
        raise CommbenchError(f"{run_file}: invalid ({_first_error(exc)})") from None
    lines = LineReport()
    records = _read_records(path / RECORDS_JSONL, warnings, lines)
    if not info.complete:
        warnings.append(f"{path.name}: run not complete" + (f" ({info.reason})" if info.reason else ""))
    return Run(path=path, info=info, records=records, warnings=warnings + info.warnings, bad_records=lines.bad)


def _read_records(path: Path, warnings: list[str], lines: LineReport) -> list[dict[str, Any]]:
    """Every valid record, streamed (safe_read); bad lines are counted and skipped. A records file
    that cannot be read at all (a FIFO, a device, a link out of the run) is a warning: no records."""
    records: list[dict[str, Any]] = []
    if not os.path.lexists(path):
        warnings.append(f"{path}: missing, no records")
        return records
    try:
        for number, item in iter_jsonl(path, RECORDS, lines, root=path.parent):
            try:
                records.append(Record.model_validate(item).model_dump())
            except (ValidationError, TypeError) as exc:
                lines.skip(f"{path.name} line {number}", _first_error(exc))
    except UnsafeFile as exc:
        warnings.append(f"{exc}; no records read")
        lines.skip(path.name, "unreadable")
        return []
    warnings.extend(lines.warnings(path.name))
    return records


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        where = ".".join(str(part) for part in err["loc"]) or "record"
        return f"{where}: {err['msg']}"
    return str(exc).splitlines()[0]


def list_runs(results_dir: str | Path) -> list[Path]:
    """Every directory under results_dir (one level, or one more for grouped runs) holding a run.json."""
    root = Path(results_dir)
    if not root.is_dir():
        return []
    found = [p.parent for p in root.glob(f"*/{RUN_FILE}")] + [p.parent for p in root.glob(f"*/*/{RUN_FILE}")]
    return sorted(set(found))
