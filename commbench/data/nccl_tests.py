"""NVIDIA nccl-tests results as commbench runs: one run directory per run found in a file.

The readers (`nccl_tests_text` for the printed table, `nccl_tests_json` for `-J` reports) say
what each run printed; this module names the collective (`nccl_tests_infer`), refuses what
cannot be read without guessing, and builds run.json and the records:
  - every column group of every row becomes one Record (timer "imported"), its values as printed;
  - a run records where it came from: file, line range, `run 2 of 3`, its command line, the
    nccl-tests and NCCL versions, hosts, GPUs and ranks; `created` is the log's own time when it
    gives one, else "unknown" (never the importing machine's clock or name);
  - a run with no rows is refused quoting the log's failure line; a run where more than
    MAX_UNREADABLE_SHARE of its rows do not fit the column header is refused;
  - an `--op` that contradicts the log is an error.
nccl-tests reports one time per size, averaged over ranks: it becomes time_us and
time_us_mean_nccl; only `-I` reports carry real extremes, percentiles and a slowest process.
"""

from __future__ import annotations

import codecs
import re
import secrets
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple, overload

from commbench import ops
from commbench.data.nccl_tests_facts import INCOMPLETE_REASON, Device, Measurement, RunFacts, nccl_version_from_code
from commbench.data.nccl_tests_infer import SHAPES, candidates, factor_fits
from commbench.data.nccl_tests_json import read_report
from commbench.data.nccl_tests_text import read_runs, text_lines
from commbench.data.records import RowFacts, Stats, build_record
from commbench.data.rundir import RunWriter
from commbench.data.safe_read import (
    NCCL_TESTS_JSON,
    NCCL_TESTS_LOG,
    Kind,
    LineReport,
    MiB,
    TextLine,
    UnsafeFile,
    decode,
    iter_text_lines,
    open_regular,
)
from commbench.data.schema import NodeInfo, Record, RunInfo
from commbench.errors import CommbenchError, UsageError
from commbench.scopes import Scope

__all__ = [
    "INCOMPLETE_REASON",
    "ImportedRecords",
    "ImportedRun",
    "busbw_factor",
    "nccl_version_from_code",
    "op_name",
    "parse_file",
    "parse_json",
    "parse_text",
    "write_run",
]

# More than this share of a run's rows not fitting its column header refuses the run: the
# table is not what its header says, and any value read from it could sit in the wrong column.
MAX_UNREADABLE_SHARE = 0.1
# A log is streamed line by line and only its rows' values are kept (compact columns, under 200
# bytes a row: nccl_tests_facts.Measurements), so its cap bounds the memory an import can take; a
# -J report is parsed whole, under its own cap.
LOG_FILE = Kind(NCCL_TESTS_LOG.name, 512 * MiB)


class ImportedRecords(Sequence[Record]):
    """A run's records, each made from its measurement when it is read: a 10^6-row log never holds
    its 2x10^6 Records (4 KB each) at once, only the measurements' columns."""

    def __init__(self, facts: RunFacts, op: str, group_size: int, n_groups: int, scope: Scope):
        self.facts, self.op, self.group_size, self.n_groups, self.scope = facts, op, group_size, n_groups, scope

    def __len__(self) -> int:
        return len(self.facts.measurements)

    @overload
    def __getitem__(self, index: int) -> Record: ...

    @overload
    def __getitem__(self, index: slice) -> list[Record]: ...

    def __getitem__(self, index: int | slice) -> Record | list[Record]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        return self._record(self.facts.measurements[index])

    def __iter__(self) -> Iterator[Record]:
        for measurement in self.facts.measurements:
            yield self._record(measurement)

    def _record(self, measurement: Measurement) -> Record:
        return _record(measurement, self.facts, self.op, self.group_size, self.n_groups, self.scope)

    def extra_fields(self) -> list[str]:
        """The fields beyond the schema's that some record has (records.csv's last columns), sorted."""
        rows = self.facts.measurements
        has = {"source_line": any(rows.column("line")), "time_us_p99": rows.has("time_p99")}
        has["process_times_us"] = rows.has("process_times")
        return sorted(name for name, present in has.items() if present)

    def sizes(self) -> int:
        """How many message sizes the records cover."""
        return len(self.facts.measurements.distinct("size"))

    def process_times(self) -> list[list[float]]:
        """-I: each record's per-process times, for the records that have them."""
        return [times for times in self.facts.measurements.column("process_times") if times]


class ImportedRun(NamedTuple):
    """One nccl-tests run in commbench's terms: run.json and its records."""

    info: RunInfo
    records: ImportedRecords


def op_name(nccl_tests_name: str) -> str:
    """Commbench's name for an nccl-tests collective: './all_reduce_perf', 'AllReduce' -> 'all_reduce'.

    Collectives commbench.ops does not know keep a lower_snake name ('MyColl' -> 'my_coll').
    """
    known = ops.op_from_nccl_tests(nccl_tests_name)
    if known:
        return known
    stem = re.sub(r"_perf(_mpi)?$", "", Path(nccl_tests_name).name)
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", stem).lower()


def busbw_factor(op: str, n: int) -> float | None:
    """busbw / algbw that nccl-tests uses for op on n ranks (commbench.ops); None for an op it does not know."""
    return ops.busbw_factor(op, n) if op in ops.OPS else None


# ---------------------------------------------------------------------------------------------
# Files


def parse_file(path: str | Path, op: str | None = None) -> list[ImportedRun]:
    """Every run of one nccl-tests output file (text or JSON, told apart by content).

    op is the user's `--op`: it names the collective where the log does not, and must agree with
    the log where it does. Raises UsageError for a file that cannot be read or imported as asked.
    """
    path = Path(path)
    hint = _op_from_file_name(path)
    if _first_character(path) == "{":
        # safe_read: a regular file under the report's cap, not UTF-16 (named) nor binary (exit 2)
        with open_regular(path, NCCL_TESTS_JSON) as handle:
            data = handle.read()
        text = decode(data, path, NCCL_TESTS_JSON) if data.isascii() else _lenient_text(data, path)
        return [parse_json(text, source=str(path), op=op, file_hint=hint)]
    # streamed: bytes that are not UTF-8 inside a log's text become U+FFFD, as the log's own junk
    # lines do; a line over safe_read's length limit is skipped and reported
    skipped = LineReport()
    lines = iter_text_lines(path, LOG_FILE, skipped, replace_undecodable=True)
    return _parse_lines(lines, str(path), op, hint, skipped)


def _first_character(path: Path) -> str:
    """The file's first character that is not blank ('' for none), read a piece at a time."""
    decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
    with open_regular(path, LOG_FILE) as handle:
        while chunk := handle.read(64 * 1024):
            if text := decoder.decode(chunk).lstrip():
                return text[0]
    return decoder.decode(b"", final=True).lstrip()[:1]


def _lenient_text(data: bytes, path: Path) -> str:
    try:
        return decode(data, path, NCCL_TESTS_JSON)
    except UnsafeFile as exc:
        if "not UTF-8" not in str(exc):
            raise  # UTF-16, binary: refused by name
        return data.decode("utf-8", errors="replace")


def parse_text(
    text: str, source: str = "<text>", op: str | None = None, file_hint: str | None = None
) -> list[ImportedRun]:
    """Every run in nccl-tests stdout. Raises UsageError when the text holds no nccl-tests run."""
    return _parse_lines(text_lines(text), source, op, file_hint)


def _parse_lines(
    lines: Iterator[TextLine], source: str, op: str | None, file_hint: str | None, skipped: LineReport | None = None
) -> list[ImportedRun]:
    runs = read_runs(lines, source)
    if not any(facts.measurements or facts.unreadable_rows or facts.iters is not None for facts in runs):
        raise UsageError(f"{source}: not nccl-tests output (no '# nThread' header and no result rows)")
    with_rows = [facts for facts in runs if facts.measurements]
    if not with_rows:
        raise CommbenchError(_no_rows_message(runs[-1]) + "; nothing to import")
    for facts in runs:
        if not facts.measurements and facts.iters is not None:
            with_rows[-1].warnings.append(_no_rows_message(facts))
    if skipped is not None:  # read once the lines are: what the stream skipped
        with_rows[-1].warnings.extend(skipped.warnings(Path(source).name))
    return [_assemble(facts, op, file_hint) for facts in with_rows]


def parse_json(text: str, source: str = "<json>", op: str | None = None, file_hint: str | None = None) -> ImportedRun:
    """The run of a -J report. Raises UsageError when the text is not an nccl-tests report."""
    facts = read_report(text, source)
    if not facts.measurements:
        raise CommbenchError(f"{source}: nccl-tests report but no result rows; nothing to import")
    return _assemble(facts, op, file_hint)


def write_run(run: ImportedRun, out_dir: str | Path, run_id: str | None = None) -> Path:
    """Write run as `<out_dir>/<run_id>/`; returns that directory. The run id defaults to the parsed one."""
    info = run.info.model_copy(update={"run_id": run_id} if run_id else {})
    # written as not complete first, like a live run, so a reader never sees complete without records
    writer = RunWriter(out_dir, info.model_copy(update={"complete": False, "reason": None}))
    try:
        writer.write_all_records(run.records, run.records.extra_fields())
        writer.info = info
        writer.write_info()
    except BaseException:
        writer.discard()  # a full disk, a kill: no half import is left behind
        raise
    return writer.path


def _op_from_file_name(path: Path) -> str | None:
    """'logs/all_gather_perf.2node.log' -> 'all_gather'; longest names first, so reduce_scatter is not reduce."""
    squashed = re.sub(r"[^a-z0-9]", "", path.name.lower())
    names = {
        re.sub(r"[^a-z0-9]", "", op.nccl_tests_name.lower()): op.name for op in ops.OPS.values() if op.nccl_tests_name
    }
    return next((names[name] for name in sorted(names, key=len, reverse=True) if name in squashed), None)


def _no_rows_message(facts: RunFacts) -> str:
    where = _where(facts)
    if facts.failure:
        return f"{where}: no result rows; the log says: {facts.failure}"
    if facts.unreadable_rows:
        lines = ", ".join(str(number) for number in facts.unreadable_rows[:5])
        return f"{where}: no result rows: the {len(facts.unreadable_rows)} printed do not fit the column header (lines {lines})"
    return f"{where}: nccl-tests header but no result rows"


def _where(facts: RunFacts) -> str:
    """'ar.log run 2 of 3 (lines 40-81)', or just the file for a file holding one run."""
    if facts.runs_in_file > 1:
        return (
            f"{facts.source} run {facts.position} of {facts.runs_in_file} (lines {facts.first_line}-{facts.last_line})"
        )
    return facts.source


# ---------------------------------------------------------------------------------------------
# Mapping onto the schema


def _assemble(facts: RunFacts, op: str | None, file_hint: str | None) -> ImportedRun:
    """Turn what a run said into run.json and records; names the collective, the ranks and the groups."""
    _refuse_unreadable(facts)
    world_size = _world_size(facts)
    group_size, n_groups, scope = _grouping(facts.devices, world_size)
    collective, named_by = _collective(facts, op, file_hint, group_size)
    records = ImportedRecords(facts, collective, group_size, n_groups, scope)
    info = RunInfo(
        run_id=_run_id(facts, collective),
        kind="import",
        source="nccl-tests",
        created=facts.created or "unknown",
        finished=facts.finished,
        backend="nccl",
        world_size=world_size,
        nodes=_nodes(facts.devices),
        args={**facts.args, **_provenance(facts), "collective_from": named_by},
        versions=facts.versions,
        env=facts.env,
        complete=facts.complete,
        reason=None if facts.complete else INCOMPLETE_REASON,
        warnings=facts.warnings + _consistency_warnings(facts),
    )
    return ImportedRun(info, records)


def _provenance(facts: RunFacts) -> dict[str, Any]:
    where: dict[str, Any] = {"source_file": facts.source, "program": facts.program, "command": facts.command}
    if facts.last_line:
        where.update(lines=f"{facts.first_line}-{facts.last_line}", run=f"run {facts.position} of {facts.runs_in_file}")
    if facts.columns:
        where["table_columns"] = facts.columns
    return where


def _run_id(facts: RunFacts, collective: str) -> str:
    """Names the file and the run's place in it; the random end keeps a second import apart."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(facts.source).stem)[:40].strip("-.") or "log"
    return f"nccl-tests-{collective}-{stem}-run{facts.position}of{facts.runs_in_file}-{secrets.token_hex(3)}"


def _refuse_unreadable(facts: RunFacts) -> None:
    """Report rows that did not fit the header; refuse the run when they are more than a small share.

    The last row of a run that stopped early is usually cut by the crash: it is reported but not
    held against the run.
    """
    unreadable = facts.unreadable_rows
    if not unreadable:
        return
    counted = (
        unreadable[:-1]
        if not facts.complete and unreadable[-1] > max(facts.measurements.column("line"))
        else unreadable
    )
    rows = facts.measurements.rows + len(unreadable)
    lines = ", ".join(str(number) for number in unreadable[:5]) + (" ..." if len(unreadable) > 5 else "")
    if len(counted) > MAX_UNREADABLE_SHARE * rows:
        raise UsageError(
            f"{_where(facts)}: {len(unreadable)} of {rows} rows do not fit the column header {' '.join(facts.columns)} "
            f"(lines {lines}); not importing values that may sit in the wrong column"
        )
    facts.warnings.append(
        f"{_where(facts)}: skipped {len(unreadable)} unreadable row(s) that do not fit the column header (lines {lines})"
    )


def _collective(facts: RunFacts, op: str | None, file_hint: str | None, ranks: int) -> tuple[str, str]:
    """The run's collective and what named it (the log, --op, the file name or the table); warns
    when the table's busbw/algbw is not that collective's factor."""
    fitting = candidates(facts, ranks if facts.devices else None)
    chosen, named_by = _choose(facts, op, file_hint, fitting)
    if facts.devices and not factor_fits(chosen, facts.measurements, ranks):
        facts.warnings.append(_factor_warning(facts, chosen, ranks, fitting))
    return chosen, named_by


def _choose(facts: RunFacts, op: str | None, file_hint: str | None, fitting: list[str]) -> tuple[str, str]:
    named = op_name(facts.program) if facts.program else None
    wanted = op_name(op) if op else None
    if wanted and named and wanted != named:
        raise UsageError(f"{_where(facts)}: --op {wanted} contradicts the log, which names {named}")
    if wanted:
        if fitting and wanted not in fitting and _inferable(wanted):
            raise UsageError(
                f"{_where(facts)}: --op {wanted} contradicts the log's table, which fits {_either(fitting)}"
            )
        return wanted, "--op"
    if named:
        return named, "log"
    if file_hint and file_hint in fitting:
        return file_hint, "file name"
    if len(fitting) == 1:
        return fitting[0], "table"
    if fitting:
        raise UsageError(
            f"{_where(facts)}: the log does not name its collective and its table fits {_either(fitting)}; pass --op"
        )
    raise UsageError(
        f"{_where(facts)}: the log does not name its collective and its table fits none nccl-tests prints; pass --op"
    )


def _inferable(op: str) -> bool:
    """Whether the table can say it is not op (alltoallv, hypercube and unknown names it cannot)."""
    return op in SHAPES and SHAPES[op].from_table


def _either(ops: list[str]) -> str:
    return ops[0] if len(ops) == 1 else ", ".join(ops[:-1]) + " or " + ops[-1]


def _factor_warning(facts: RunFacts, op: str, ranks: int, fitting: list[str]) -> str:
    algbws = facts.measurements.column("algbw")
    largest = facts.measurements[max(range(len(algbws)), key=algbws.__getitem__)]
    reported = largest.busbw / largest.algbw if largest.algbw else float("nan")
    expected = busbw_factor(op, ranks)
    also = f"; the table fits {_either(fitting)}" if fitting else ""
    return (
        f"{_where(facts)}: reported busbw/algbw {reported:.3f} is not the {op} factor "
        f"{'unknown' if expected is None else f'{expected:.3f}'} for {ranks} ranks{also}; is the collective or the rank count wrong?"
    )


def _world_size(facts: RunFacts) -> int:
    if facts.devices:
        world_size = max(device.rank for device in facts.devices) + 1
        shown = len({device.rank for device in facts.devices})
        if shown < world_size:  # e.g. a README that replaced the middle rank lines with "..."
            facts.warnings.append(
                f"{_where(facts)}: the log lists {shown} of its {world_size} ranks; hosts and GPUs are those listed"
            )
        return world_size
    facts.warnings.append(
        f"{facts.source}: no '#  Rank' lines; assuming one process of {facts.ranks_per_process} ranks"
    )
    return facts.ranks_per_process


def _grouping(devices: list[Device], world_size: int) -> tuple[int, int, Scope]:
    """Communicator size, how many ran at once, and what they span.

    NCCL_TESTS_SPLIT runs one communicator per 'Group' value concurrently and nccl-tests computes
    busbw with the communicator's size. A group within one host is 'intra', one rank per host 'inter'.
    """
    groups: dict[int, list[Device]] = {}
    for device in devices:
        groups.setdefault(device.group, []).append(device)
    if len(groups) <= 1:
        return world_size, 1, "world"
    members = list(groups.values())
    if all(len({device.host for device in group}) == 1 for group in members):
        scope: Scope = "intra"
    elif all(len({device.host for device in group}) == len(group) for group in members):
        scope = "inter"
    else:
        scope = "world"
    return len(members[0]), len(members), scope


def _nodes(devices: list[Device]) -> list[NodeInfo]:
    """Hosts in order of first appearance, each with its ranks and GPUs."""
    by_host: dict[str, list[Device]] = {}
    for device in sorted(devices, key=lambda device: device.rank):
        by_host.setdefault(device.host, []).append(device)
    return [
        NodeInfo(
            hostname=host,
            node_id=node_id,
            ranks=[device.rank for device in members],
            local_ranks=list(range(len(members))),
            gpus=[{"rank": d.rank, "cuda_device": d.device, "pci": d.pci, "name": d.name} for d in members],
        )
        for node_id, (host, members) in enumerate(by_host.items())
    ]


def _record(m: Measurement, facts: RunFacts, op: str, group_size: int, n_groups: int, scope: Scope) -> Record:
    factor = busbw_factor(op, group_size)
    if factor is None:  # a collective without a known formula: take nccl-tests' own ratio
        factor = m.busbw / m.algbw if m.algbw > 0 else 0.0
    iters = m.iters if m.iters is not None else facts.iters
    row = RowFacts(
        op=op,
        scope=scope,
        group_size=group_size,
        n_groups=n_groups,
        size_bytes=m.size,
        count=m.count,
        dtype=m.dtype,
        redop=m.redop,
        root=m.root,
        in_place=m.in_place,
        iters=(iters or 0) * facts.ops_per_iteration,
        warmup=facts.warmup,
        timer="imported",
        stop_reason="fixed",
    )  # nccl-tests always times its -n iterations
    # nccl-tests prints one rank-averaged time; the spread only with -I: without it the spread is null
    stats = Stats(
        median=m.time_us, p10=m.time_p10, p90=m.time_p90, min=m.time_min, max=m.time_max, mean=m.time_us, cv=m.cv
    )
    extra: dict[str, Any] = {"source_line": m.line} if m.line else {}  # where in the file the row was printed
    if m.time_p99 is not None:
        extra["time_us_p99"] = m.time_p99
    if m.process_times is not None:  # -I: every process's time, so stragglers can be seen
        extra["process_times_us"] = m.process_times
    slowest = (
        None if m.slowest_process is None else m.slowest_process * facts.ranks_per_process
    )  # that process's first rank
    record: Record = build_record(
        row,
        stats,
        factor,
        time_us_mean_nccl=m.time_us,
        wrong=m.wrong,
        slowest_rank=slowest,
        time_stat="rank-averaged mean",
        reported_bandwidth=(m.algbw, m.busbw),
        **extra,
    )
    return record


def _consistency_warnings(facts: RunFacts) -> list[str]:
    """Say so when nccl-tests itself found a problem: wrong elements or out-of-bounds values."""
    warnings = []
    wrong = sum(count for count in facts.measurements.column("wrong") if count > 0)
    if wrong:
        warnings.append(f"{_where(facts)}: nccl-tests found {wrong} wrong elements")
    if facts.args.get("out_of_bounds"):
        warnings.append(f"{_where(facts)}: nccl-tests found {facts.args['out_of_bounds']} out-of-bounds values")
    return warnings
