"""NVIDIA NCCL Inspector logs as a commbench job run: communicators, and per op and size bucket
the samples of execution time and busbw.

NCCL Inspector (NVIDIA/nccl, plugins/profiler/inspector; read at commit INSPECTOR_COMMIT) is an
NCCL profiler plugin. In its JSON mode every process appends one JSON object per line to
`<NCCL_INSPECTOR_DUMP_DIR>/<hostname>-pid<pid>.log` (the directory defaults to
`nccl-inspector-<SLURM_JOBID>` or `nccl-inspector-unknown-jobid`); its exporter also reads
`.log.gz`, `.jsonl` and `.jsonl.gz`. Each line (inspector_json.cc) is
  {"header":   {"id": "0x<comm hash>", "comm_name": ..., "rank": r, "n_ranks": n, "nnodes": k},
   "metadata": {"inspector_output_format_version": "v4.0", "git_rev", "rec_mechanism",
                "dump_timestamp_us", "hostname", "pid"},
   "coll_perf": {"coll": "AllReduce", "coll_sn", "coll_msg_size_bytes", "coll_exec_time_us",
                 "coll_timing_source", "coll_algobw_gbs", "coll_busbw_gbs", [event_trace_*]}}
or, for point-to-point work, "p2p_perf" with p2p, p2p_sn, p2p_peer, p2p_msg_size_bytes,
p2p_exec_time_us, p2p_timing_source, p2p_algobw_gbs, p2p_busbw_gbs. `comm_name` and the
timing source are absent in the README's older example: both are optional here.

How a log becomes commbench's terms:
  - a communicator is its `id` (the same hash in every process of it); its ranks are the header
    ranks seen, its hosts the metadata hostnames of those ranks, its scope from placement:
    one node -> intra, one rank per node -> inter, several ranks on each of several nodes -> world;
  - one collective call is one (communicator, kind, sn); every rank that logged it gave its own
    execution time and the call's time is the slowest rank's (commbench's convention), so the
    records' time_us is the slowest-rank median over calls, as a sweep's is;
  - size: Inspector logs one rank's message (`count` x type size); commbench's size_bytes is
    nccl-tests' (the gathered output for all_gather, the whole input for reduce_scatter), i.e.
    Inspector's msg size x n_ranks for those two, as Inspector's own busbw formula uses it;
  - sizes are bucketed by powers of two (SIZE_BUCKET_DOC), so a job's thousands of sizes make a
    bounded number of rows; each sample keeps its exact size;
  - busbw is recomputed from size and time with commbench.ops' factor; Inspector's own figure is
    kept as reported_busbw_gbps_median (it gives 0 for all_to_all, whose factor it lacks);
  - the job's identity: --job-id, else the `nccl-inspector-<id>` directory the logs are in.
Inspector logs no dtype and no element count: records say dtype "unknown" and count 0.

Reading is tolerant and bounded (files open through commbench.data.safe_read): lines that are not
Inspector records (cut by a crash, binary, nested too deep, wrong types) are skipped and counted; a
line over safe_read.MAX_LINE_BYTES is skipped unread; a file where most lines are bad, or no line
is an Inspector record, is refused with one line. Only regular files are read; inside a directory,
symbolic links are not followed and a file whose real path leaves the directory is refused.
Torch-free.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import secrets
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from commbench import ops
from commbench.data.records import RowFacts, Stats, build_record
from commbench.data.rundir import RunWriter
from commbench.data.safe_read import INSPECTOR_LOG, MAX_LINE_BYTES, UnsafeFile, open_regular, parse_json
from commbench.data.samples import KEY_FIELDS, SAMPLES_JSONL
from commbench.data.schema import NodeInfo, Record, RunInfo
from commbench.errors import UsageError
from commbench.scopes import Scope

INSPECTOR_COMMIT = "5067397c2676d5aed50042fc39e5c8ee96eb0027"
SOURCE = "nccl-inspector"
LOG_SUFFIXES = (".log", ".jsonl", ".log.gz", ".jsonl.gz")  # what Inspector's exporter reads
MAX_BAD_SHARE = 0.5  # more bad lines than this share: the file is not an Inspector log
MAX_FILES = 100_000
SIZE_BUCKET_DOC = "power-of-two buckets [2^k, 2^(k+1)) bytes of commbench's size_bytes"

# Inspector's collective names (inspector.cc ncclFuncToString) -> commbench's op names
INSPECTOR_OPS = {
    "AllReduce": "all_reduce",
    "AllGather": "all_gather",
    "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast",
    "Reduce": "reduce",
    "All2All": "all_to_all",
    "AllGatherV": "all_gatherv",
    "SendRecv": "sendrecv",
    "Send": "send",
    "Recv": "recv",
}
# ops whose logged message is one rank's share of the whole (Inspector's trafficSize = msg x n)
_PER_RANK_MESSAGE = {"all_gather", "all_gatherv", "reduce_scatter"}


@dataclass(frozen=True)
class Call:
    """One rank's line: its record of one collective (or p2p operation) of one communicator."""

    comm_id: str
    comm_name: str
    rank: int
    n_ranks: int
    nnodes: int
    host: str
    pid: int
    op: str
    sn: int
    msg_bytes: int
    exec_us: float
    reported_busbw_gbps: float
    timing_source: str | None
    dump_us: int | None
    format_version: str | None


@dataclass
class FileStats:
    path: str
    lines: int = 0
    calls: int = 0
    bad: int = 0
    first_bad: list[str] = field(default_factory=list)


class _BadLine(ValueError):
    """A line that is not an Inspector record; its message says why."""


# ---------------------------------------------------------------------------------------------
# Files


def log_files(paths: list[str | Path]) -> list[tuple[Path, Path | None]]:
    """The Inspector logs among paths, each with the folder it must stay inside (None: given by name):
    files as given, directories searched (links not followed)."""
    found: list[tuple[Path, Path | None]] = []
    for path in map(Path, paths):
        if path.is_dir() and not path.is_symlink():
            found.extend((log, path) for log in _logs_under(path))
        elif path.is_file():
            found.append((path, None))
        elif path.exists():
            raise UsageError(f"{path}: not a regular file (a device, pipe or socket is not a log)")
        else:
            raise UsageError(f"{path}: no such file or directory")
        if len(found) > MAX_FILES:
            raise UsageError(f"{path}: more than {MAX_FILES} log files; import fewer at a time")
    if not found:
        raise UsageError(f"{', '.join(map(str, paths))}: no Inspector logs ({', '.join(LOG_SUFFIXES)})")
    return found


def _logs_under(root: Path) -> list[Path]:
    found = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder) / name
            if name.endswith(LOG_SUFFIXES) and not path.is_symlink() and path.is_file():
                found.append(path)
    return found


def _lines(path: Path, root: Path | None) -> Iterator[bytes | None]:
    """The file's lines; None for a line longer than MAX_LINE_BYTES (skipped without holding it).
    Opened through commbench.data.safe_read: regular files only, and inside root when one is given."""
    with open_regular(path, INSPECTOR_LOG, root) as raw:
        handle = gzip.GzipFile(fileobj=raw) if path.name.endswith(".gz") else raw
        try:
            while True:
                line = handle.readline(MAX_LINE_BYTES + 1)
                if not line:
                    return
                if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                    while line and not line.endswith(b"\n"):  # drain the rest of the long line
                        line = handle.readline(MAX_LINE_BYTES)
                    yield None
                    continue
                yield line
        except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
            raise UsageError(f"{path}: cannot read ({exc})") from None


def read_calls(path: Path, root: Path | None = None) -> tuple[list[Call], FileStats]:
    """Every Inspector record of one file; UsageError when the file is not an Inspector log."""
    stats = FileStats(str(path))
    calls: list[Call] = []
    for number, raw in enumerate(_lines(path, root), 1):
        if raw is not None and not raw.strip():
            continue
        stats.lines += 1
        try:
            if raw is None:
                raise _BadLine(f"longer than {MAX_LINE_BYTES} bytes")
            calls.append(parse_line(raw))
        except _BadLine as exc:
            stats.bad += 1
            if len(stats.first_bad) < 3:
                stats.first_bad.append(f"line {number}: {exc}")
    stats.calls = len(calls)
    if not calls:
        why = f" ({stats.first_bad[0]})" if stats.first_bad else " (empty)"
        raise UsageError(f"{path}: not an NCCL Inspector log: no line is an Inspector record{why}")
    if stats.bad > MAX_BAD_SHARE * stats.lines:
        raise UsageError(
            f"{path}: {stats.bad} of {stats.lines} lines are not Inspector records "
            f"({stats.first_bad[0]}); not importing a file that is mostly something else"
        )
    return calls, stats


# ---------------------------------------------------------------------------------------------
# One line


def parse_line(raw: bytes | str) -> Call:
    """One Inspector JSON line as a Call; _BadLine says why it is not one."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        item = parse_json(text, "line")  # safe_read's depth and integer-length limits
    except UnicodeDecodeError:
        raise _BadLine("not JSON (not UTF-8 text)") from None
    except UnsafeFile as exc:
        raise _BadLine(f"not JSON ({str(exc).split(': ', 1)[-1][:80]})") from None
    if not isinstance(item, dict):
        raise _BadLine("not a JSON object")
    header, metadata = _object(item, "header"), _object(item, "metadata")
    kind = "coll" if "coll_perf" in item else "p2p" if "p2p_perf" in item else None
    if kind is None:
        raise _BadLine("neither coll_perf nor p2p_perf")
    perf = _object(item, f"{kind}_perf")
    name = _text(perf, kind)
    if name not in INSPECTOR_OPS:
        raise _BadLine(f"unknown operation {name[:40]!r}")
    n_ranks = _integer(header, "n_ranks", low=1)
    rank = _integer(header, "rank", low=0)
    if rank >= n_ranks:
        raise _BadLine(f"rank {rank} of a communicator of {n_ranks}")
    return Call(
        comm_id=_text(header, "id"),
        comm_name=_optional_text(header, "comm_name") or "unknown",
        rank=rank,
        n_ranks=n_ranks,
        nnodes=_integer(header, "nnodes", low=1),
        host=_text(metadata, "hostname"),
        pid=_integer(metadata, "pid", low=0),
        op=INSPECTOR_OPS[name],
        sn=_integer(perf, f"{kind}_sn", low=0),
        msg_bytes=_integer(perf, f"{kind}_msg_size_bytes", low=0),
        exec_us=_number(perf, f"{kind}_exec_time_us"),
        reported_busbw_gbps=_number(perf, f"{kind}_busbw_gbs"),
        timing_source=_optional_text(perf, f"{kind}_timing_source"),
        dump_us=_integer(metadata, "dump_timestamp_us", low=0) if "dump_timestamp_us" in metadata else None,
        format_version=_optional_text(metadata, "inspector_output_format_version"),
    )


def _object(item: dict[str, Any], key: str) -> dict[str, Any]:
    value = item.get(key)
    if not isinstance(value, dict):
        raise _BadLine(f"no {key} object")
    return value


def _text(item: dict[str, Any], key: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value or len(value) > 256:
        raise _BadLine(f"{key} missing or not a short string")
    return value


def _optional_text(item: dict[str, Any], key: str) -> str | None:
    return _text(item, key) if key in item else None


def _integer(item: dict[str, Any], key: str, low: int) -> int:
    value = item.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value < 1 << 63:
        raise _BadLine(f"{key} missing or not an integer >= {low}")
    return value


def _number(item: dict[str, Any], key: str) -> float:
    value = item.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise _BadLine(f"{key} missing or not a finite number >= 0")
    return float(value)


# ---------------------------------------------------------------------------------------------
# The job


@dataclass
class Communicator:
    comm_id: str
    name: str
    n_ranks: int
    nnodes: int
    ranks: dict[int, tuple[str, int]]  # rank -> (host, pid) of the ranks seen

    @property
    def hosts(self) -> list[str]:
        return sorted({host for host, _ in self.ranks.values()})

    @property
    def scope(self) -> Scope:
        """From placement: one node intra, one rank per node inter, several ranks on several nodes world."""
        if self.nnodes == 1:
            return "intra"
        return "inter" if self.n_ranks == self.nnodes else "world"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.comm_id,
            "name": self.name,
            "n_ranks": self.n_ranks,
            "nnodes": self.nnodes,
            "scope": self.scope,
            "ranks_seen": sorted(self.ranks),
            "hosts": self.hosts,
            "rank_hosts": {str(rank): host for rank, (host, _) in sorted(self.ranks.items())},
        }


class Sample(NamedTuple):
    """One call of a communicator: its exact size (commbench's size_bytes), the slowest rank's time."""

    sn: int
    size_bytes: int
    time_us: float
    rank_time_us: dict[int, float]
    reported_busbw_gbps: float


class InspectorJob(NamedTuple):
    info: RunInfo
    records: list[Record]
    samples: list[str]  # samples.jsonl lines, one per record


def read_job(paths: list[str | Path], job_id: str | None = None) -> InspectorJob:
    """The job the logs under paths describe. Every file is read before anything is returned."""
    files = log_files(paths)
    calls: list[Call] = []
    stats: list[FileStats] = []
    for path, root in files:
        found, file_stats = read_calls(path, root)
        calls.extend(found)
        stats.append(file_stats)
    comms = _communicators(calls)
    records, samples = _rows(calls, comms)
    paths = [path for path, _ in files]
    info = _run_info(paths, calls, comms, stats, job_id or _job_id(paths), len(records))
    return InspectorJob(info, records, samples)


def _communicators(calls: list[Call]) -> dict[str, Communicator]:
    comms: dict[str, Communicator] = {}
    names: dict[str, Counter[Any]] = defaultdict(Counter[Any])
    for call in calls:
        comm = comms.setdefault(call.comm_id, Communicator(call.comm_id, call.comm_name, call.n_ranks, call.nnodes, {}))
        if (call.n_ranks, call.nnodes) != (comm.n_ranks, comm.nnodes):
            raise UsageError(
                f"communicator {call.comm_id}: logged with {comm.n_ranks} ranks on {comm.nnodes} nodes "
                f"and with {call.n_ranks} on {call.nnodes}; the logs are not of one job"
            )
        comm.ranks.setdefault(call.rank, (call.host, call.pid))
        names[call.comm_id][call.comm_name] += 1
    for comm_id, comm in comms.items():
        comm.name = names[comm_id].most_common(1)[0][0]
    return comms


def size_bytes(op: str, msg_bytes: int, n_ranks: int) -> int:
    """commbench's (nccl-tests') size of a call Inspector logged with msg_bytes on n_ranks."""
    return msg_bytes * n_ranks if op in _PER_RANK_MESSAGE else msg_bytes


def busbw_factor(op: str, n_ranks: int) -> float:
    if op in ops.OPS:
        return ops.busbw_factor(op, n_ranks)
    if op == "all_gatherv":
        return ops.busbw_factor("all_gather", n_ranks)  # Inspector's formula for AllGatherV is all_gather's
    return 1.0  # send, recv: Inspector's own rule for point-to-point (factor 1)


def size_bucket(size: int) -> tuple[int, int]:
    """[low, high) of the power-of-two bucket holding size (0 -> [0, 1))."""
    if size <= 0:
        return 0, 1
    low = 1 << (size.bit_length() - 1)
    return low, low * 2


def _rows(calls: list[Call], comms: dict[str, Communicator]) -> tuple[list[Record], list[str]]:
    by_call: dict[tuple[Any, ...], list[Call]] = defaultdict(list)
    for call in calls:
        by_call[(call.comm_id, call.op, call.sn)].append(call)
    buckets: dict[tuple[Any, ...], list[Sample]] = defaultdict(list)
    for (comm_id, op, sn), ranks in by_call.items():
        n = comms[comm_id].n_ranks
        size = size_bytes(op, max(c.msg_bytes for c in ranks), n)
        times = {c.rank: c.exec_us for c in ranks}
        if size <= 0 or max(times.values()) <= 0:
            continue  # a zero-byte call, or one too fast for Inspector's whole-microsecond clock: no bandwidth
        buckets[(comm_id, op, size_bucket(size))].append(
            Sample(sn, size, max(times.values()), times, float(np.median([c.reported_busbw_gbps for c in ranks])))
        )
    records, lines = [], []
    for (comm_id, op, bucket), samples in sorted(buckets.items()):
        record = _record(comms[comm_id], op, bucket, sorted(samples))
        records.append(record)
        lines.append(_samples_line(record, comms[comm_id], sorted(samples)))
    return records, lines


def _record(comm: Communicator, op: str, bucket: tuple[int, int], samples: list[Sample]) -> Record:
    sizes = [s.size_bytes for s in samples]
    size = int(np.median(sizes)) if len(set(sizes)) > 1 else sizes[0]
    factor = busbw_factor(op, comm.n_ranks)
    row = RowFacts(
        op=op,
        scope=comm.scope,
        group_size=comm.n_ranks,
        n_groups=1,
        size_bytes=size,
        count=0,
        dtype="unknown",
        redop="none",
        root=-1,
        in_place=False,
        iters=len(samples),
        warmup=0,
        timer="imported",
        stop_reason=None,
    )  # no timed loop: the job's own calls, as observed
    busbw = [s.size_bytes / s.time_us / 1e3 * factor for s in samples]
    return build_record(
        row,
        Stats.of([s.time_us for s in samples]),
        factor,
        time_us_mean_nccl=None,
        wrong=-1,
        comm_id=comm.comm_id,
        comm_name=comm.name,
        hosts=comm.hosts,
        size_bucket=list(bucket),
        size_bytes_min=min(sizes),
        size_bytes_max=max(sizes),
        busbw_gbps_samples_median=float(np.median(busbw)),
        reported_busbw_gbps_median=float(np.median([s.reported_busbw_gbps for s in samples])),
    )


def _samples_line(record: Record, comm: Communicator, samples: list[Sample]) -> str:
    """samples.jsonl's format (commbench/data/samples.py) plus this import's own keys: the
    communicator, each call's exact size, sequence number and busbw."""
    dumped = record.model_dump()
    ranks = sorted({rank for s in samples for rank in s.rank_time_us})
    medians = [float(np.median([s.rank_time_us[r] for s in samples if r in s.rank_time_us])) for r in ranks]
    line = {
        "key": [dumped.get(name) for name in KEY_FIELDS],
        "slowest_rank": None,
        "time_us": [s.time_us for s in samples],
        "ranks": ranks,
        "rank_median_us": medians,
        "comm_id": comm.comm_id,
        "size_bytes": [s.size_bytes for s in samples],
        "sn": [s.sn for s in samples],
        "busbw_gbps": [round(s.size_bytes / s.time_us / 1e3 * record.busbw_factor, 6) for s in samples],
    }
    return json.dumps(line) + "\n"


_JOB_DIR = re.compile(r"^nccl-inspector-(?P<id>[A-Za-z0-9_.-]+)$")


def _job_id(files: list[str | Path]) -> str:
    """The Slurm job id Inspector put in its default directory name, where the logs still sit in it."""
    found = {
        match.group("id")
        for path in files
        for part in Path(path).resolve().parts
        if (match := _JOB_DIR.match(part)) and match.group("id") != "unknown-jobid"
    }
    return found.pop() if len(found) == 1 else "unknown"


def _iso(us: int | None) -> str | None:
    return None if us is None else datetime.fromtimestamp(us / 1e6, timezone.utc).isoformat(timespec="seconds")


def _run_info(
    files: list[str | Path],
    calls: list[Call],
    comms: dict[str, Communicator],
    stats: list[FileStats],
    job_id: str,
    n_records: int,
) -> RunInfo:
    if not n_records:
        raise UsageError(f"{files[0]}: Inspector records, but none with a size and a time above 0; nothing to import")
    processes = sorted({(c.host, c.pid) for c in calls})
    hosts = sorted({host for host, _ in processes})
    widest = max(comms.values(), key=lambda comm: (comm.n_ranks, len(comm.ranks)))
    rank_of = {process: rank for rank, process in widest.ranks.items()}
    stamps = [c.dump_us for c in calls if c.dump_us is not None]
    warnings = [f"{s.path}: skipped {s.bad} of {s.lines} lines ({'; '.join(s.first_bad)})" for s in stats if s.bad]
    warnings += [
        f"communicator {c.comm_id} ({c.name}): {len(c.ranks)} of its {c.n_ranks} ranks logged (the others' "
        "files were not given, or their ring buffers dropped the calls)"
        for c in comms.values()
        if len(c.ranks) < c.n_ranks
    ]
    nodes = [
        NodeInfo(
            hostname=host,
            node_id=i,
            ranks=sorted(rank_of[p] for p in processes if p[0] == host and p in rank_of),
            local_ranks=[],
        )
        for i, host in enumerate(hosts)
    ]
    versions = sorted({c.format_version for c in calls if c.format_version})
    return RunInfo(
        run_id=f"inspector-{re.sub(r'[^A-Za-z0-9_.-]', '-', job_id)[:40]}-{secrets.token_hex(3)}",
        kind="import",
        source=SOURCE,
        created=_iso(min(stamps)) if stamps else "unknown",
        finished=_iso(max(stamps)) if stamps else None,
        backend="nccl",
        world_size=len(processes),
        nodes=nodes,
        complete=True,
        warnings=warnings,
        versions={"inspector_output_format_version": ", ".join(versions) or "unknown"},
        args={
            "job_id": job_id,
            "source_files": [str(f) for f in files],
            "calls_logged": len(calls),
            "communicators": [comm.to_dict() for comm in comms.values()],
            "size_buckets": SIZE_BUCKET_DOC,
            "inspector_commit_read": INSPECTOR_COMMIT,
            "timing_sources": dict(Counter(c.timing_source or "unlogged" for c in calls)),
        },
        note=f"imported from NCCL Inspector logs of job {job_id} ({len(files)} file(s), {len(calls)} lines)",
    )


def write_job(job: InspectorJob, out_dir: str | Path, run_id: str | None = None) -> Path:
    """`<out_dir>/<run_id>/`: run.json first as not complete, records and samples, then complete."""
    info = job.info.model_copy(update={"run_id": run_id} if run_id else {})
    writer = RunWriter(out_dir, info.model_copy(update={"complete": False}))
    writer.add_records(job.records, job.samples)
    writer.info = info
    writer.write_info()
    return writer.path


def read_job_samples(run_dir: str | Path) -> dict[tuple[Any, ...], dict[str, Any]]:
    """(comm_id, op, size_bucket low) -> that row's samples line, as write_job wrote it."""
    path = Path(run_dir) / SAMPLES_JSONL
    found: dict[tuple[Any, ...], dict[str, Any]] = {}
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return found
    for line in text.splitlines():
        try:
            item = json.loads(line)
            sizes = [int(v) for v in item["size_bytes"]]
            times = [float(v) for v in item["time_us"]]
            key = (str(item["comm_id"]), str(item["key"][0]), size_bucket(min(sizes))[0])
        except (ValueError, KeyError, TypeError, IndexError, RecursionError):
            continue
        if len(sizes) == len(times) and times:
            found[key] = item
    return found


__all__ = [
    "INSPECTOR_COMMIT",
    "Call",
    "Communicator",
    "InspectorJob",
    "busbw_factor",
    "log_files",
    "parse_line",
    "read_calls",
    "read_job",
    "read_job_samples",
    "size_bucket",
    "size_bytes",
    "write_job",
]
