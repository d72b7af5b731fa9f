"""Read NVIDIA nccl-tests results into commbench's schema, so old results sit beside new ones.

Two inputs are understood:
  text  what `all_reduce_perf ...` prints: `#` header lines (version, parameters, one `#  Rank`
        line per GPU), a column header, one row per size holding an out-of-place and an
        in-place column group, and a footer (`# Out of bounds values`, `# Avg bus bandwidth`).
        A log holding several runs back to back yields one run per header block.
  JSON  the file written with `-J FILE`: version, args, env, nccl_version, config (with devices),
        results (one object per size, with out_of_place/in_place and, with `-I`, per-iteration
        statistics), out_of_bounds, average_bus_bandwidth, errors.

Every column group becomes one Record (timer "imported"). nccl-tests reports one time per
size, averaged over ranks by default, so time_us, time_us_mean_nccl and, unless per-iteration
figures were printed, the percentiles all carry that time. Lines that are not part of the table
(NCCL INFO chatter, launcher noise) are skipped; a log that stops before its footer keeps the
rows it has and is marked incomplete.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

from commbench.data.rundir import RunWriter, new_run_id, utc_now
from commbench.data.schema import NodeInfo, Record, RunInfo, Scope
from commbench.errors import CommbenchError, UsageError

INCOMPLETE_REASON = "log ends early (crashed run?)"

# Binaries (all_reduce_perf, alltoall_perf) and test names (AllReduce, AlltoAll) squash to the
# same key once lower-cased without separators; the value is commbench's name.
_OPS_BY_SQUASHED_NAME = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "sendrecv": "sendrecv",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "hypercube": "hypercube",
}

# busbw / algbw as each nccl-tests <op>.cu computes it, n = ranks in the communicator.
# hypercube already counts (n-1) pieces in its algbw, so its factor is 1.
_BUSBW_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "sendrecv": lambda n: 1.0,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "hypercube": lambda n: 1.0,
}

# Launchers may prefix every line: `mpirun --tag-output` -> "[1,0]<stdout>:", `srun -l` -> "0: ".
_LAUNCHER_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\d+:\s)")

# "# nccl-tests version 2.17.9 nccl-headers=22807 nccl-library=22807"
_VERSION_LINE = re.compile(r"^# nccl-tests version (?P<tests>\S+) nccl-headers=(?P<headers>\d+) nccl-library=(?P<library>\d+)")
# "# Collective test starting: all_reduce_perf"
_PROGRAM_LINE = re.compile(r"^# Collective test starting: (?P<program>\S+)")
# "# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 ..."
_PARAMS_LINE = re.compile(r"^# nThread (?P<nthreads>\d+) nGpus (?P<ngpus>\d+) minBytes (?P<min_bytes>\d+) maxBytes (?P<max_bytes>\d+)")
# the "name: number" pairs of that line; "warmup iters" and "agg iters" come before "iters" so
# that the longer names win where they start.
_PARAM_PAIR = re.compile(r"(warmup iters|agg iters|iters|validation|graph|unalign): (-?\d+)")
# "step: 2(factor)" or "step: 1048576(bytes)"
_STEP = re.compile(r"step: (?P<step>\d+)\((?P<kind>factor|bytes)\)")
# "#  Rank  0 Group  0 Pid 123456 on gpu-node-01 device  0 [0000:18:00] NVIDIA H100 80GB HBM3"
# (older releases print the PCI bus as "[0x18]"; the oldest have no Group)
_RANK_LINE = re.compile(
    r"^#\s+Rank\s+(?P<rank>\d+)\s+(?:Group\s+(?P<group>\d+)\s+)?Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)"
    r"\s+device\s+(?P<device>\d+)\s+\[(?P<pci>[^\]]*)\]\s*(?P<name>.*?)\s*$"
)
# "gpu-node-01:123456:123456 [0] NCCL INFO NCCL version 2.21.5+cuda12.4" (NCCL_DEBUG=VERSION or INFO)
_NCCL_VERSION = re.compile(r"NCCL version (?P<version>\d+\.\d+\.\d+\S*)")
# "#       size         count      type   redop    root     time   algbw   busbw  #wrong  ..."
_COLUMN_HEADER = re.compile(r"^#\s+size\s+count\s+type\s+redop\s+root\s+(?P<groups>.*\S)")
# "   134217728      33554432     float     sum      -1  592.31  226.60  396.55       0  ..."
_ROW = re.compile(r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<dtype>\w+)\s+(?P<redop>\w+)\s+(?P<root>-?\d+)\s+(?P<values>\S.*)$")
# "# Out of bounds values : 0 OK"
_OUT_OF_BOUNDS = re.compile(r"^# Out of bounds values\s*:\s*(?P<count>\d+)")
# "# Avg bus bandwidth    : 231.452 "
_AVG_BUSBW = re.compile(r"^# Avg bus bandwidth\s*:\s*(?P<busbw>\S+)")

# One column group as printed since nccl-tests 2.x when no header line was seen.
_DEFAULT_GROUP = ["time", "algbw", "busbw", "#wrong"]

# Only these variables of a JSON run's environment are kept: the rest may hold secrets.
_KEPT_ENV_PREFIXES = ("NCCL_", "CUDA_", "NVIDIA_", "UCX_", "FI_", "SLURM_", "OMPI_", "PMIX_", "TORCH_")


class ImportedRun(NamedTuple):
    """One nccl-tests run in commbench's terms: run.json and its records."""

    info: RunInfo
    records: list[Record]


@dataclass
class _Device:
    """One `#  Rank` line / one entry of the JSON `devices` list."""

    rank: int
    group: int
    host: str
    device: int
    pci: str
    name: str


@dataclass
class _Measurement:
    """One column group of one table row (one size, one placement)."""

    size: int
    count: int
    dtype: str
    redop: str
    root: int
    in_place: bool
    time_us: float
    algbw: float
    busbw: float
    wrong: int  # -1: nccl-tests did not check (-c 0 prints N/A)
    iters: int | None = None
    time_min: float | None = None
    time_max: float | None = None
    time_p10: float | None = None
    time_p90: float | None = None
    cv: float | None = None


@dataclass
class _RunFacts:
    """What one run said about itself, before it is mapped onto the schema."""

    source: str
    program: str | None = None
    devices: list[_Device] = field(default_factory=list)
    ranks_per_process: int = 1
    warmup: int = 0
    ops_per_iteration: int = 1  # agg iters x graph launches: collectives per timed iteration
    iters: int | None = None
    args: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    created: str | None = None
    finished: str | None = None
    complete: bool = False
    measurements: list[_Measurement] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def op_name(nccl_tests_name: str) -> str:
    """Commbench's name for an nccl-tests collective: './all_reduce_perf', 'AllReduce' -> 'all_reduce'.

    Collectives commbench does not measure keep a lower_snake name ('HyperCube' -> 'hypercube').
    """
    stem = re.sub(r"_perf(_mpi)?$", "", Path(nccl_tests_name).name)
    squashed = re.sub(r"[^a-z0-9]", "", stem.lower())
    if squashed in _OPS_BY_SQUASHED_NAME:
        return _OPS_BY_SQUASHED_NAME[squashed]
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", stem).lower()


def busbw_factor(op: str, n: int) -> float | None:
    """busbw / algbw that nccl-tests uses for op on n ranks; None for a collective it is unknown for."""
    formula = _BUSBW_FACTORS.get(op)
    return formula(n) if formula else None


def nccl_version_from_code(code: int) -> str:
    """NCCL_VERSION_CODE -> 'major.minor.patch': 22807 -> '2.28.7'; codes below 2.9 use 1000s: 2708 -> '2.7.8'."""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


# ---------------------------------------------------------------------------------------------
# Files


def parse_file(path: str | Path, op: str | None = None) -> list[ImportedRun]:
    """Parse one nccl-tests output file (text or JSON, told apart by content).

    op names the collective for logs that do not say which one they measured (older nccl-tests
    print no program name); failing both, the file name is searched for it.
    Raises UsageError for a file that cannot be read or is not nccl-tests output.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
    # a text log has no timestamps, so the file's modification time is the best guess at when it ran
    modified = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).isoformat(timespec="seconds")
    op = op or _op_from_file_name(path)
    if text.lstrip().startswith("{"):
        return [parse_json(text, source=str(path), op=op)]
    return parse_text(text, source=str(path), op=op, created=modified)


def _op_from_file_name(path: Path) -> str | None:
    """'logs/all_gather_perf.2node.log' -> 'all_gather'; longest names first, so reduce_scatter is not reduce."""
    squashed = re.sub(r"[^a-z0-9]", "", path.name.lower())
    for name in sorted(_OPS_BY_SQUASHED_NAME, key=len, reverse=True):
        if name in squashed:
            return _OPS_BY_SQUASHED_NAME[name]
    return None


def write_run(run: ImportedRun, out_dir: str | Path, run_id: str | None = None) -> Path:
    """Write run as `<out_dir>/<run_id>/`; returns that directory. The run id defaults to the parsed one."""
    info = run.info.model_copy(update={"run_id": run_id} if run_id else {})
    # written as not complete first, like a live run, so a reader never sees complete without records
    writer = RunWriter(out_dir, info.model_copy(update={"complete": False, "reason": None}))
    writer.add_records(run.records)
    writer.info = info
    writer.write_info()
    return writer.path


# ---------------------------------------------------------------------------------------------
# Text


def parse_text(text: str, source: str = "<text>", op: str | None = None, created: str | None = None) -> list[ImportedRun]:
    """Parse nccl-tests stdout: one ImportedRun per run found (usually one).

    op is used when the log does not name its collective; created is when the run happened
    (text logs carry no time; default: now). Raises UsageError when the text holds no nccl-tests run.
    """
    pieces = [_read_text_run(lines, source) for lines in _split_runs(_clean_lines(text))]
    if not any(facts.measurements or facts.iters is not None for facts in pieces):
        raise UsageError(f"{source}: not nccl-tests output (no '# nThread' header and no result rows)")
    with_rows = [facts for facts in pieces if facts.measurements]
    if not with_rows:
        raise CommbenchError(f"{source}: nccl-tests header but no result rows; nothing to import")
    if len(with_rows) < len(pieces):
        with_rows[-1].warnings.append(f"{source}: {len(pieces) - len(with_rows)} run(s) in the log printed no rows")
    for facts in with_rows:
        facts.created = created
    return [_assemble(facts, op) for facts in with_rows]


def _clean_lines(text: str) -> list[str]:
    return [_LAUNCHER_PREFIX.sub("", line.rstrip("\r")) for line in text.splitlines()]


def _split_runs(lines: list[str]) -> list[list[str]]:
    """Cut a log where a new header block starts after rows or a footer: one piece per run."""
    runs: list[list[str]] = [[]]
    seen_results = False
    for line in lines:
        starts_header = bool(_VERSION_LINE.match(line) or _PROGRAM_LINE.match(line) or _PARAMS_LINE.match(line))
        if starts_header and seen_results:
            runs.append([])
            seen_results = False
        seen_results = seen_results or bool(_ROW.match(line) or _AVG_BUSBW.match(line))
        runs[-1].append(line)
    return runs


def _read_text_run(lines: list[str], source: str) -> _RunFacts:
    facts = _RunFacts(source=source)
    groups = [_DEFAULT_GROUP, _DEFAULT_GROUP]
    for number, line in enumerate(lines, 1):
        if match := _ROW.match(line):
            _read_row(match, groups, facts, number)
        elif match := _RANK_LINE.match(line):
            facts.devices.append(_device_from_rank_line(match))
        elif match := _COLUMN_HEADER.match(line):
            groups = _column_groups(match["groups"])
        elif match := _PARAMS_LINE.match(line):
            _read_params(match, line, facts)
        elif match := _VERSION_LINE.match(line):
            facts.versions["nccl-tests"] = match["tests"]
            facts.versions.setdefault("nccl", nccl_version_from_code(int(match["library"])))
        elif match := _PROGRAM_LINE.match(line):
            facts.program = match["program"]
        elif match := _NCCL_VERSION.search(line):
            facts.versions["nccl"] = match["version"]  # NCCL's own banner also names the CUDA build
        elif match := _OUT_OF_BOUNDS.match(line):
            facts.args["out_of_bounds"] = int(match["count"])
        elif match := _AVG_BUSBW.match(line):
            facts.args["avg_busbw_gbps"] = float(match["busbw"])
            facts.complete = True
    if facts.measurements and not facts.complete:
        facts.warnings.append(f"{source}: {INCOMPLETE_REASON}: kept the {len(facts.measurements)} records read before it stopped")
    return facts


def _column_groups(header: str) -> list[list[str]]:
    """The column names of the out-of-place and in-place groups, from the column header line.

    "time algbw busbw #wrong time algbw busbw #wrong" -> two groups of four. The in-place group
    starts at the second time column (cputime with -C); a trailing timestamp column is not a group's.
    """
    names = [name for name in header.split() if name != "timestamp"]
    starts = [index for index, name in enumerate(names) if name in ("time", "cputime")]
    if len(starts) != 2:
        return [_DEFAULT_GROUP, _DEFAULT_GROUP]
    return [names[: starts[1]], names[starts[1] :]]


def _read_row(match: re.Match, groups: list[list[str]], facts: _RunFacts, line_number: int) -> None:
    """One table row -> one measurement per complete column group.

    With -O 0 (or trace replay) nccl-tests prints blanks where the out-of-place group would be, so
    the values start far right of the root column; a row cut short by a crash keeps its whole groups.
    """
    values = match["values"].split()
    out_of_place, in_place = groups
    out_of_place_blank = match.start("values") - match.end("root") > 20
    placements = [(True, in_place)] if out_of_place_blank else [(False, out_of_place), (True, in_place)]
    position = 0
    for is_in_place, names in placements:
        group_values = values[position : position + len(names)]
        position += len(names)
        measurement = _measurement_or_none(match, is_in_place, names, group_values)
        if measurement is None:
            facts.warnings.append(f"{facts.source} line {line_number}: incomplete or unreadable values skipped: {match[0].strip()}")
            return
        facts.measurements.append(measurement)


def _measurement_or_none(match: re.Match, in_place: bool, names: list[str], values: list[str]) -> _Measurement | None:
    """None for a group cut short by a crash or holding something else than figures (interleaved output)."""
    if len(values) < len(names):
        return None
    try:
        return _measurement(match, in_place, dict(zip(names, values)))
    except (KeyError, ValueError):
        return None


def _measurement(match: re.Match, in_place: bool, columns: dict[str, str]) -> _Measurement:
    time_column = "time" if "time" in columns else "cputime"
    cv_percent = columns.get("i_cv%")
    return _Measurement(
        size=int(match["size"]),
        count=int(match["count"]),
        dtype=match["dtype"],
        redop=match["redop"],
        root=int(match["root"]),
        in_place=in_place,
        time_us=float(columns[time_column]),
        algbw=float(columns["algbw"]),
        busbw=float(columns["busbw"]),
        wrong=_wrong(columns.get("#wrong", "N/A")),
        time_min=float(columns["i_min"]) if "i_min" in columns else None,
        time_max=float(columns["i_max"]) if "i_max" in columns else None,
        cv=float(cv_percent) / 100 if cv_percent is not None else None,
    )


def _wrong(text: str | float | None) -> int:
    """'#wrong' column / nwrong field: a count, or N/A (null in JSON) when the check was off -> -1."""
    if text is None or text == "N/A":
        return -1
    count = float(text)
    if not 0 <= count < 2 ** 63:  # also refuses nan and inf: the row is then skipped with a warning
        raise ValueError(f"#wrong {text!r} is not a count")
    return int(count)


def _device_from_rank_line(match: re.Match) -> _Device:
    return _Device(
        rank=int(match["rank"]),
        group=int(match["group"] or 0),
        host=match["host"],
        device=int(match["device"]),
        pci=match["pci"],
        name=match["name"],
    )


def _read_params(match: re.Match, line: str, facts: _RunFacts) -> None:
    """The '# nThread ...' line: how many ranks each process drives and how each size was timed."""
    pairs = {name: int(value) for name, value in _PARAM_PAIR.findall(line)}
    facts.ranks_per_process = int(match["nthreads"]) * int(match["ngpus"])
    facts.warmup = pairs.get("warmup iters", 0)
    facts.iters = pairs.get("iters")
    facts.ops_per_iteration = max(pairs.get("agg iters", 1), 1) * max(pairs.get("graph", 0), 1)
    header = {key: int(value) for key, value in match.groupdict().items()}
    header.update({name.replace(" ", "_"): value for name, value in pairs.items()})
    if step := _STEP.search(line):
        header["step_" + step["kind"]] = int(step["step"])
    facts.args["header"] = header


# ---------------------------------------------------------------------------------------------
# JSON


def parse_json(text: str, source: str = "<json>", op: str | None = None) -> ImportedRun:
    """Parse the file nccl-tests writes with -J. A file cut short by a crash keeps its complete results.

    op is used when the file's argv does not name the binary. Raises UsageError when the text is
    not an nccl-tests JSON report.
    """
    document = _load_json_report(text, source)
    if not isinstance(document, dict) or "results" not in document or "config" not in document:
        raise UsageError(f"{source}: JSON, but not an nccl-tests report (no 'config' and 'results')")
    try:
        facts = _facts_from_json(document, source)
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise UsageError(f"{source}: nccl-tests JSON report in a layout this commbench does not know ({exc!r})") from None
    return _assemble(facts, op)


def _load_json_report(text: str, source: str) -> dict:
    """The report; for a writer that died mid-run, its header and complete results.

    nccl-tests writes the report as it goes and closes it only at the end, so a crash leaves
    '{...,"results":[{...},{...},{"size":' behind.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    start = text.find('"results":[')
    if start < 0:
        raise UsageError(f"{source}: not valid JSON and no nccl-tests results in it")
    try:
        document = json.loads(text[:start] + '"results":[]}')
    except json.JSONDecodeError:
        raise UsageError(f"{source}: not valid JSON and its nccl-tests header is unreadable") from None
    document["results"] = _complete_json_items(text, start + len('"results":['))
    return document


def _complete_json_items(text: str, position: int) -> list:
    """Decode the items of a JSON list from position on, stopping at the first incomplete one."""
    decoder = json.JSONDecoder()
    items = []
    while True:
        position = len(text) - len(text[position:].lstrip(", \n\t\r"))
        try:
            item, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            return items
        items.append(item)


def _facts_from_json(document: dict, source: str) -> _RunFacts:
    config = document.get("config") or {}
    argv = [str(arg) for arg in document.get("args") or []]
    env = dict(entry.split("=", 1) for entry in document.get("env") or [] if "=" in entry)
    ranks_per_process = int(config.get("nthreads", 1)) * int(config.get("ngpus", 1))
    facts = _RunFacts(
        source=source,
        program=argv[0] if argv else None,
        devices=[device for entry in config.get("devices") or [] for device in _devices_from_json(entry, ranks_per_process)],
        ranks_per_process=ranks_per_process,
        warmup=int(config.get("warmup_iters", 0)),
        ops_per_iteration=max(int(config.get("aggregated_iterations", 1)), 1) * max(int(config.get("graph", 0)), 1),
        iters=config.get("iterations"),
        args={"argv": argv, "config": {key: value for key, value in config.items() if key != "devices"}},
        env={key: value for key, value in env.items() if key.startswith(_KEPT_ENV_PREFIXES)},
        created=_iso_time(document.get("start_time")),
        finished=_iso_time(document.get("end_time")),
        # written after the last result, so a report cut short lacks it
        complete="average_bus_bandwidth" in document,
    )
    if document.get("nccl_version"):
        facts.versions["nccl"] = nccl_version_from_code(int(document["nccl_version"]))
    facts.versions["nccl-tests-json-format"] = document.get("version")
    if "average_bus_bandwidth" in document:
        facts.args["avg_busbw_gbps"] = float(document["average_bus_bandwidth"].get("bandwidth"))
    if "out_of_bounds" in document:
        facts.args["out_of_bounds"] = int(document["out_of_bounds"].get("count", 0))
    for split in ("NCCL_TESTS_SPLIT", "NCCL_TESTS_SPLIT_MASK"):
        if split in env:
            facts.args["split"] = f"{split}={env[split]}"
    facts.warnings.extend(f"{source}: nccl-tests reported: {error}" for error in document.get("errors") or [])
    for entry in document["results"]:
        facts.measurements.extend(_measurements_from_json(entry))
    if not facts.complete:
        facts.warnings.append(f"{source}: {INCOMPLETE_REASON}: kept the {len(facts.measurements)} complete results")
    return facts


def _devices_from_json(entry: dict, ranks_per_process: int) -> list[_Device]:
    """One `devices` entry per process -> that process's ranks.

    nccl-tests fills the entry from the first `#  Rank` line of each process only; the others
    drive the next ranks on the next CUDA devices of the same host, same GPU model assumed,
    bus id unknown.
    """
    first = _Device(
        rank=int(entry["rank"]),
        group=int(entry.get("group", 0)),
        host=str(entry.get("hostname", "")),
        device=int(entry.get("device", 0)),
        pci=str(entry.get("device_hex", "")),
        name=str(entry.get("device_info", "")),
    )
    rest = [
        _Device(first.rank + offset, first.group, first.host, first.device + offset, "", first.name)
        for offset in range(1, ranks_per_process)
    ]
    return [first] + rest


def _measurements_from_json(entry: dict) -> list[_Measurement]:
    measurements = []
    for key, in_place in (("out_of_place", False), ("in_place", True)):
        figures = entry.get(key)
        if not figures:  # null: that placement was not run
            continue
        per_iteration = entry.get(f"{key}_per_iter") or {}
        times = [float(value) for value in per_iteration.get("times_us") or []]
        measurement = _Measurement(
            size=int(entry["size"]),
            count=int(entry["count"]),
            dtype=str(entry["type"]),
            redop=str(entry["redop"]),
            root=int(str(entry["root"]).strip()),  # written as the padded table cell, "    -1"
            in_place=in_place,
            time_us=float(figures.get("time", figures.get("cpu_time"))),
            algbw=float(figures["alg_bw"]),
            busbw=float(figures["bus_bw"]),
            wrong=_wrong(figures.get("nwrong")),
            iters=entry.get("actual_iterations"),
        )
        if per_iteration:
            measurement.time_min = float(per_iteration["min_us"])
            measurement.time_max = float(per_iteration["max_us"])
            measurement.cv = float(per_iteration["cv_pct"]) / 100
        if len(times) >= 2:
            deciles = statistics.quantiles(times, n=10, method="inclusive")
            measurement.time_p10, measurement.time_p90 = deciles[0], deciles[-1]
        measurements.append(measurement)
    return measurements


def _iso_time(stamp: str | None) -> str | None:
    """nccl-tests writes local time without a zone ('2025-11-03 14:22:05'); keep it, ISO-spelled."""
    return stamp.replace(" ", "T", 1) if stamp else None


# ---------------------------------------------------------------------------------------------
# Mapping onto the schema


def _assemble(facts: _RunFacts, op: str | None) -> ImportedRun:
    """Turn what a run said into run.json and records; names the collective, the ranks and the groups."""
    if not facts.measurements:
        raise CommbenchError(f"{facts.source}: nccl-tests header but no result rows; nothing to import")
    collective = _collective(facts, op)
    world_size = _world_size(facts)
    group_size, n_groups, scope = _grouping(facts.devices, world_size)
    records = [_record(m, facts, collective, group_size, n_groups, scope) for m in facts.measurements]
    warnings = facts.warnings + _consistency_warnings(facts, collective, group_size, records)
    info = RunInfo(
        run_id=new_run_id(prefix=f"nccl-tests-{collective}-"),
        kind="import",
        source="nccl-tests",
        created=facts.created or utc_now(),
        finished=facts.finished,
        backend="nccl",
        world_size=world_size,
        nodes=_nodes(facts.devices),
        args={**facts.args, "source_file": facts.source, "program": facts.program},
        versions=facts.versions,
        env=facts.env,
        complete=facts.complete,
        reason=None if facts.complete else INCOMPLETE_REASON,
        warnings=warnings,
    )
    return ImportedRun(info, records)


def _collective(facts: _RunFacts, op: str | None) -> str:
    named = facts.program or op
    if not named:
        raise UsageError(
            f"{facts.source}: the log does not say which collective it measured; "
            "pass --op (e.g. --op all_gather) or name the file after the binary (all_gather_perf.log)"
        )
    return op_name(named)


def _world_size(facts: _RunFacts) -> int:
    if facts.devices:
        return max(device.rank for device in facts.devices) + 1
    facts.warnings.append(f"{facts.source}: no '#  Rank' lines; assuming one process of {facts.ranks_per_process} ranks")
    return facts.ranks_per_process


def _grouping(devices: list[_Device], world_size: int) -> tuple[int, int, Scope]:
    """Communicator size, how many ran at once, and what they span.

    NCCL_TESTS_SPLIT runs one communicator per 'Group' value concurrently and nccl-tests computes
    busbw with the communicator's size. A group within one host is 'intra', one rank per host 'inter'.
    """
    groups: dict[int, list[_Device]] = {}
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


def _nodes(devices: list[_Device]) -> list[NodeInfo]:
    """Hosts in order of first appearance, each with its ranks and GPUs."""
    by_host: dict[str, list[_Device]] = {}
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


def _record(m: _Measurement, facts: _RunFacts, op: str, group_size: int, n_groups: int, scope: Scope) -> Record:
    factor = busbw_factor(op, group_size)
    if factor is None:  # a collective without a known formula: take nccl-tests' own ratio
        factor = m.busbw / m.algbw if m.algbw > 0 else 0.0
    iters = m.iters if m.iters is not None else facts.iters
    return Record(
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
        time_us=m.time_us,
        time_us_p10=_first_known(m.time_p10, m.time_us),
        time_us_p90=_first_known(m.time_p90, m.time_us),
        time_us_min=_first_known(m.time_min, m.time_us),
        time_us_max=_first_known(m.time_max, m.time_us),
        cv=_first_known(m.cv, 0.0),
        time_us_mean_nccl=m.time_us,
        algbw_gbps=m.algbw,
        busbw_gbps=m.busbw,
        busbw_factor=factor,
        aggregate_busbw_gbps=m.busbw * n_groups,
        wrong=m.wrong,
    )


def _first_known(value: float | None, fallback: float) -> float:
    return fallback if value is None else value


def _consistency_warnings(facts: _RunFacts, op: str, group_size: int, records: list[Record]) -> list[str]:
    """Say so when the log disagrees with itself: wrong elements, or busbw/algbw not the op's factor."""
    warnings = []
    wrong = sum(record.wrong for record in records if record.wrong > 0)
    if wrong:
        warnings.append(f"{facts.source}: nccl-tests found {wrong} wrong elements")
    if facts.args.get("out_of_bounds"):
        warnings.append(f"{facts.source}: nccl-tests found {facts.args['out_of_bounds']} out-of-bounds values")
    # printed bandwidths have two decimals, so only rows above 1 GB/s give a trustworthy ratio
    expected = busbw_factor(op, group_size)
    largest = max(records, key=lambda record: record.algbw_gbps)
    if expected is not None and largest.algbw_gbps >= 1:
        reported = largest.busbw_gbps / largest.algbw_gbps
        if abs(reported - expected) > 0.02 * max(expected, 0.05):
            warnings.append(
                f"{facts.source}: reported busbw/algbw {reported:.3f} is not the {op} factor {expected:.3f} "
                f"for {group_size} ranks; is the collective or the rank count wrong?"
            )
    return warnings
