"""The results folder as the dashboard sees it: runs loaded once, reloaded when their files change.

Every request rescans the folder (a glob of run.json files, cheap even with hundreds of runs) so
runs written while the dashboard is up appear without a restart; a run is read again only when
the modification time or size of one of its files changed. A run that cannot be read becomes an
entry carrying its error message instead of its data, so one broken directory never hides the
others.

When the results database exists (`commbench db ingest`: $COMMBENCH_DB, else
<results folder>/commbench.duckdb), the run pickers (`usable`, `listing`) read the database and the
folder together: the database names the runs it holds without any run directory being read, and
a glob of the folder (the same cheap scan) finds the runs it does not hold yet (written without
`--db`, or after the last ingest). Only those are read, each once per change of its files (the
cache above), so a run written while the dashboard is up appears in every picker on the next page
load, no re-ingest and no restart needed. The merged list is newest first; runs whose creation
time is unknown come last. The Runs page (`entries`) walks the folder: its job is to show broken
and partial directories, which the database skips. A database that cannot be read (a newer
commbench's schema, a damaged file) is passed over and the folder walked, as with no database.

Keys name runs and topology files in the browser: paths relative to the results folder, in
POSIX spelling ("examples/example-cpu-2rank"). Keys come back from the browser, so every key is
checked to stay inside the results folder before it touches the disk.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cached_property
from pathlib import Path, PurePosixPath

import pandas as pd

from commbench.data.rundir import RECORDS_JSONL, RUN_FILE, Run, list_runs, load_run
from commbench.data.safe_read import TOPOLOGY, UnsafeFile, checked_path, load_json
from commbench.data.store import list_runs_under
from commbench.data.store_location import DB_ENV
from commbench.diagnose.report import DIAGNOSE_FILE, load_report
from commbench.errors import CommbenchError, UsageError
from commbench.traces.store import TRACE_FILE, load_trace_analysis

# Topologies captured without a run (`commbench topo --json > results/NAME.topology.json`).
TOPOLOGY_SUFFIX = ".topology.json"
# shown after the name of every synthetic run or topology file (run.json / file `"synthetic": true`)
SYNTHETIC_BADGE = "[SYNTHETIC]"
_WATCHED_FILES = (RUN_FILE, RECORDS_JSONL, TRACE_FILE, DIAGNOSE_FILE)
DB_FILE = "commbench.duckdb"  # the database inside the results folder: results/commbench.duckdb is the default

Signature = tuple[tuple[str, int, int] | None, ...]
# kinds whose rows are imported from another tool's output: never "measured here"
IMPORTED_KINDS = ("import",)


def created_at(created: object) -> datetime | None:
    """run.json's (or the database's) creation time as an aware datetime; None when unknown
    ("unknown", empty, unparseable): such runs sort after every dated one."""
    if isinstance(created, str):
        try:
            created = datetime.fromisoformat(created)
        except ValueError:
            return None
    if not isinstance(created, datetime):
        return None
    return created if created.tzinfo else created.replace(tzinfo=timezone.utc)


def newest_first(items: Iterable, created: Callable, key: Callable) -> list:
    """items sorted newest first by created(item), ties and undated items by key; undated ones last."""
    by_key = sorted(items, key=key, reverse=True)
    return sorted(by_key, key=lambda item: _age(created_at(created(item))))


def _age(when: datetime | None) -> tuple[bool, float]:
    return (when is None, -when.timestamp() if when else 0.0)


def database_for(results_root: Path) -> Path | None:
    """The results database the dashboard reads, or None when there is none yet."""
    path = Path(os.environ.get(DB_ENV) or results_root / DB_FILE)
    return path if path.is_file() else None


def safe_path(root: Path, key: str) -> Path:
    """root/key, refusing keys that are absolute, climb with '..', or resolve outside root."""
    if not isinstance(key, str) or not key or "\\" in key or "\x00" in key:
        raise UsageError(f"{key!r} is not a path inside the results folder")
    relative = PurePosixPath(key)
    if relative.is_absolute() or ".." in relative.parts or Path(key).is_absolute():
        raise UsageError(f"{key!r} is not a path inside the results folder")
    path = (root / relative).resolve()
    if not path.is_relative_to(root):  # a symbolic link pointing elsewhere
        raise UsageError(f"{key!r} is not a path inside the results folder")
    return path


@dataclass
class RunEntry:
    """One run directory: its data, or the reason it could not be read."""

    key: str
    path: Path
    run: Run | None = None
    error: str | None = None
    trace: dict | None = None  # the stored analysis of a trace run
    diagnosis: dict | None = None  # the stored report of a diagnose run
    warnings: list[str] = field(default_factory=list)
    signature: Signature = ()  # the files' state when read: changes whenever the run is read again

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def info(self) -> dict:
        return self.run.info.model_dump() if self.run else {}

    @property
    def kind(self) -> str:
        return self.run.info.kind if self.run else "?"

    @property
    def synthetic(self) -> bool:
        """No machine measured this run (run.json `synthetic`): every view of it carries the badge."""
        return bool(self.run and self.run.info.synthetic)

    @property
    def measured(self) -> bool:
        """Measured here: neither imported from another tool nor synthetic."""
        return self.ok and self.kind not in IMPORTED_KINDS and not self.synthetic

    @property
    def label(self) -> str:
        """The run's name as the pages show it: its key, with the badge when it is synthetic."""
        return f"{self.key} {SYNTHETIC_BADGE}" if self.synthetic else self.key

    @property
    def state(self) -> str:
        if self.error:
            return "error"
        return "complete" if self.run.info.complete else "incomplete"

    @cached_property
    def records(self) -> pd.DataFrame:
        """The run's records with a `run` column naming the run (badge included: legends, tables and
        downloads show it), for overlaying runs."""
        frame = pd.DataFrame(self.run.records if self.run else [])
        for column in ("time_us_p10", "time_us_p90", "cv"):  # null in imports that did not report them
            if column in frame:
                frame[column] = pd.to_numeric(frame[column], errors="coerce")
        frame.insert(0, "run", self.label)
        return frame

    def scopes(self) -> list[str]:
        return sorted(self.records["scope"].unique()) if "scope" in self.records else []

    def ops(self) -> list[str]:
        return sorted(self.records["op"].unique()) if "op" in self.records else []

    def messages(self) -> list[str]:
        """The error, or the warnings, each naming the run once."""
        own = [self.error] if self.error else self.warnings
        return [m if m.startswith((self.key, self.path.name)) else f"{self.key}: {m}" for m in own]

    def summary(self) -> dict:
        """One row of the runs table (only the name and state for a run that could not be read)."""
        if self.run is None:
            return {"id": self.key, "run": self.key, "state": "error", "problems": self.error}
        info = self.info
        reason = info.get("reason") or ""
        return {
            "id": self.key,
            "run": self.key,
            "synthetic": SYNTHETIC_BADGE if self.synthetic else "",
            "kind": info.get("kind", ""),
            "source": info.get("source", ""),
            "created": (info.get("created") or "").replace("T", " ").split("+")[0],
            "backend": info.get("backend", ""),
            "nodes": len(info.get("nodes") or []),
            "ranks": info.get("world_size", ""),
            "scopes": ", ".join(self.scopes()),
            "ops": ", ".join(self.ops()),
            "records": len(self.run.records) if self.run else 0,
            "state": self.state if not reason else f"{self.state}: {reason}",
            "problems": "; ".join(self.messages()),
        }


@dataclass(frozen=True)
class RunListing:
    """One run as a picker offers it: enough to name it, read from the database or the run itself."""

    key: str
    kind: str
    backend: str | None
    world_size: int | None
    synthetic: bool
    records: int
    created: str | None = None

    @property
    def label(self) -> str:
        return f"{self.key} {SYNTHETIC_BADGE}" if self.synthetic else self.key

    @property
    def measured(self) -> bool:
        """Measured here: neither imported from another tool nor synthetic."""
        return self.kind not in IMPORTED_KINDS and not self.synthetic


@dataclass
class TopologySource:
    """Something the topology page can draw: a run that recorded one, or a saved topology file."""

    key: str  # "run:<run key>" or "file:<file key>"
    label: str
    gpus: int
    measured: bool = False  # a run measured here (a file, an import or a synthetic run is not)


class ResultsStore:
    """Thread-safe cache of the run directories under one results folder."""

    def __init__(self, results_dir: str | Path, models_dir: str | Path | None = None):
        self.root = Path(results_dir).resolve()
        self.models = Path(models_dir).resolve() if models_dir else None  # --models: more configs for the planner
        # the database records absolute paths without resolving links: either spelling may prefix them
        self._prefixes = list(dict.fromkeys([Path(os.path.abspath(results_dir)), self.root]))
        self._cache: dict[str, RunEntry] = {}
        self._lock = threading.Lock()

    # runs --------------------------------------------------------------------------------
    def entries(self) -> list[RunEntry]:
        """Every run directory, newest first (broken ones included, with their error)."""
        keys = [path.relative_to(self.root).as_posix() for path in list_runs(self.root)]
        with self._lock:
            for gone in set(self._cache) - set(keys):
                del self._cache[gone]
        entries = [self._entry_or_refusal(key) for key in keys]
        return newest_first(entries, lambda e: e.info.get("created"), lambda e: e.key)

    def _entry_or_refusal(self, key: str) -> RunEntry:
        """The entry, or one that names the run and why it is skipped (a link out of the folder):
        one such directory must not take the pages down."""
        try:
            return self.entry(key)
        except UsageError:
            return RunEntry(key, self.root / key, error=f"{key}: skipped: it points outside the results folder")

    def usable(self, kinds: tuple[str, ...] | None = None) -> list[RunEntry]:
        """The readable runs of these kinds, newest first: the database's and the folder's together."""
        if database_for(self.root) is None:
            return [e for e in self.entries() if e.ok and (kinds is None or e.kind in kinds)]
        return [e for e in (self.entry(row.key) for row in self.listing(kinds)) if e.ok]

    def listing(self, kinds: tuple[str, ...] | None = None) -> list[RunListing]:
        """The runs a picker offers, newest first: the database's (no run directory read), then the
        folder's runs the database does not hold (each read once per change of its files)."""
        listed = self._listed_in_database()
        if listed is None:
            return [_listing_of(e) for e in self.entries() if e.ok and (kinds is None or e.kind in kinds)]
        missing = [key for key in self._run_keys() if key not in listed]
        found = [_listing_of(e) for e in map(self._entry_or_refusal, missing) if e.ok]
        merged = [row for row in [*listed.values(), *found] if kinds is None or row.kind in kinds]
        return newest_first(merged, lambda row: row.created, lambda row: row.key)

    def _run_keys(self) -> list[str]:
        return [path.relative_to(self.root).as_posix() for path in list_runs(self.root)]

    def _listed_in_database(self) -> dict[str, RunListing] | None:
        """The database's runs under this folder by key, or None when there is no readable database."""
        db = database_for(self.root)
        if db is None:
            return None
        listed: dict[str, RunListing] = {}
        try:
            for prefix in self._prefixes:
                for row in list_runs_under(db, prefix, None):
                    key = PurePosixPath(Path(row["path"]).relative_to(prefix)).as_posix()
                    listed.setdefault(key, self._listing_row(key, row))
        except CommbenchError:
            return None
        return listed

    def _listing_row(self, key: str, row: dict) -> RunListing:
        synthetic = row["synthetic"]
        if synthetic is None:  # ingested under store schema 1, which did not keep the flag: ask the run
            synthetic = self.entry(key).synthetic
        created = row.get("created")
        return RunListing(
            key,
            row["kind"],
            row["backend"],
            row["world_size"],
            bool(synthetic),
            row["records"],
            created.isoformat() if isinstance(created, datetime) else created,
        )

    def entry(self, key: str) -> RunEntry:
        """The run at key, read again only if its files changed since the last read."""
        path = safe_path(self.root, key)
        signature = _signature(path)
        with self._lock:
            cached = self._cache.get(key)
            if cached and cached.signature == signature:
                return cached
        entry = _load_entry(key, path)
        entry.signature = signature
        with self._lock:
            self._cache[key] = entry
        return entry

    def entries_for(self, keys: list[str] | None) -> list[RunEntry]:
        """The entries of keys the browser sent; keys that no longer name a run are skipped."""
        found = []
        for key in keys or []:
            try:
                path = safe_path(self.root, key)
            except UsageError:
                continue
            if (path / RUN_FILE).is_file():
                found.append(self.entry(key))
        return found

    def records(self, keys: list[str] | None) -> pd.DataFrame:
        """Records of the given runs stacked into one frame (column `run` tells them apart)."""
        frames = [e.records for e in self.entries_for(keys) if e.ok and len(e.records)]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    # topologies ---------------------------------------------------------------------------
    def topology_sources(self) -> list[TopologySource]:
        sources = [
            TopologySource(f"run:{e.key}", f"{e.label} (run)", _gpu_count(e.info["topology"]), e.measured)
            for e in self.usable()
            if e.info.get("topology")
        ]
        for path in sorted(self.root.glob(f"*{TOPOLOGY_SUFFIX}")) + sorted(self.root.glob(f"*/*{TOPOLOGY_SUFFIX}")):
            key = path.relative_to(self.root).as_posix()
            try:
                topology = self._topology_file(key)
            except CommbenchError:
                topology = {}
            badge = f" {SYNTHETIC_BADGE}" if topology.get("synthetic") else ""
            sources.append(TopologySource(f"file:{key}", f"{key} (topology file){badge}", _gpu_count(topology)))
        return sources

    def topology(self, source_key: str) -> tuple[dict, RunEntry | None]:
        """The ClusterTopology dict of a source, and the run it came from (None for a file)."""
        kind, _, key = source_key.partition(":")
        if kind == "file":
            return self._topology_file(key), None
        if kind != "run":
            raise UsageError(f"{source_key!r} is not a topology source")
        entry = self.entry(key)
        if not entry.ok:
            raise CommbenchError(entry.error)
        if not entry.info.get("topology"):
            raise CommbenchError(f"{key}: the run recorded no topology")
        return entry.info["topology"], entry

    def _topology_file(self, key: str) -> dict:
        path = safe_path(self.root, key)
        if not path.name.endswith(TOPOLOGY_SUFFIX):
            raise UsageError(f"{key!r} is not a {TOPOLOGY_SUFFIX} file")
        try:
            data = load_json(path, TOPOLOGY, root=self.root)
        except UnsafeFile as exc:
            raise CommbenchError(f"{key}: {str(exc).split(': ', 1)[-1]}") from None
        if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
            raise CommbenchError(f"{key}: not a topology (no 'nodes' list)")
        return data

    # planner inputs ------------------------------------------------------------------------
    def model_files(self) -> dict[str, Path]:
        """Model configs the planner may read: every config.json (or folder/*.json under --models) up to
        three levels down, keyed by where it is ("results/x/config.json", "models/llama.json")."""
        return self._files("config.json", "*.json")

    def processor_files(self) -> dict[str, Path]:
        """Processor descriptions (`commbench calibrate` writes processor-HOST.json) the planner may read."""
        return self._files("processor-*.json", "processor-*.json")

    def _files(self, in_results: str, in_models: str) -> dict[str, Path]:
        found: dict[str, Path] = {}
        for label, root, pattern in (("results", self.root, in_results), ("models", self.models, in_models)):
            if root is None:
                continue
            for depth in ("", "*/", "*/*/", "*/*/*/"):
                for path in sorted(root.glob(depth + pattern)):
                    try:
                        real = checked_path(path, root)  # a link out of the folder is not offered
                    except UnsafeFile:
                        continue
                    if real.is_file():
                        found[f"{label}/{path.relative_to(root).as_posix()}"] = real
        return found


def _listing_of(entry: RunEntry) -> RunListing:
    info = entry.info
    return RunListing(
        entry.key,
        entry.kind,
        info.get("backend"),
        info.get("world_size"),
        entry.synthetic,
        len(entry.run.records) if entry.run else 0,
        info.get("created"),
    )


def _signature(path: Path) -> Signature:
    stamps = []
    for name in _WATCHED_FILES:
        try:
            stat = (path / name).stat()
            stamps.append((name, stat.st_mtime_ns, stat.st_size))
        except OSError:
            stamps.append(None)
    return tuple(stamps)


def _load_entry(key: str, path: Path) -> RunEntry:
    try:
        run = load_run(path)
    except CommbenchError as exc:
        return RunEntry(key, path, error=str(exc))
    except Exception as exc:
        return RunEntry(key, path, error=f"{path.name}: cannot be read ({type(exc).__name__}: {exc})")
    entry = RunEntry(key, path, run=run, warnings=list(run.warnings))
    try:
        if run.info.kind == "trace":
            entry.trace = load_trace_analysis(path)
        elif run.info.kind == "diagnose":
            entry.diagnosis = load_report(path)
    except CommbenchError as exc:
        entry.error = str(exc)
    return entry


def _gpu_count(topology: dict) -> int:
    return sum(len(node.get("gpus") or []) for node in topology.get("nodes") or [] if isinstance(node, dict))
