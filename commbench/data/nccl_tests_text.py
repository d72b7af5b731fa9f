"""Read the table nccl-tests prints (stdout) into RunFacts, one per run found in the text.

Layouts read, by the names in their column header line (never by position):
  2019-2021  `size count type [redop] [root] time algbw busbw error ...` where `error` is a float
             (it becomes -1, not checked); all_gather/broadcast printed no `redop`, only rooted
             collectives printed `root`.
  2.x        `size count type redop root time algbw busbw #wrong ...`, with `-I` adding
             `i_min i_max i_p99 i_cv%`, `-C` printing `cputime`, `-S` a trailing `timestamp`.
Every line is first stripped of what surrounds logs kept elsewhere: leading blanks (markdown or
RST indentation), `> ` quoting, mpirun `--tag-output` tags (`[1,0]<stdout>:`), `srun -l` rank
numbers (`0: `) and ISO timestamps. A row that does not fit its header is counted and reported,
never shifted; so is a row on a last line cut without its newline.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from commbench.data.nccl_tests_facts import INCOMPLETE_REASON, Device, RunFacts, nccl_version_from_code
from commbench.data.safe_read import TextLine

# Prefixes that launchers and documents put before each line; stripped repeatedly, in any order.
_LINE_PREFIXES = (
    re.compile(r"\[\d+,\d+\]<std(?:out|err)>:"),  # mpirun --tag-output
    re.compile(r"\d{1,5}:\s"),  # srun -l
    re.compile(r"\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?\s"),  # timestamps
    re.compile(r">\s?"),  # markdown quote
)
# "# nccl-tests version 2.17.9 nccl-headers=22807 nccl-library=22807"
_VERSION_LINE = re.compile(
    r"^# nccl-tests version (?P<tests>\S+) nccl-headers=(?P<headers>\d+) nccl-library=(?P<library>\d+)"
)
# "# Collective test starting: all_reduce_perf"
_PROGRAM_LINE = re.compile(r"^# Collective test starting: (?P<program>\S+)")
_CONCLUDED_LINE = re.compile(r"^# Collective test concluded: (?P<program>\S+)")
# "# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 ..."
_PARAMS_LINE = re.compile(
    r"^# nThread (?P<nthreads>\d+) nGpus (?P<ngpus>\d+) minBytes (?P<min_bytes>\d+) maxBytes (?P<max_bytes>\d+)"
)
# the "name: number" pairs of that line; longer names first so "warmup iters" is not read as "iters"
_PARAM_PAIR = re.compile(r"(warmup iters|agg iters|iters|validation|graph|unalign): (-?\d+)")
_STEP = re.compile(r"step: (?P<step>\d+)\((?P<kind>factor|bytes)\)")
# "#  Rank  0 Group  0 Pid 123456 on gpu-node-01 device  0 [0000:18:00] NVIDIA H100 80GB HBM3"
# (2019-2021 releases print no Group)
_RANK_LINE = re.compile(
    r"^#\s+Rank\s+(?P<rank>\d+)\s+(?:Group\s+(?P<group>\d+)\s+)?Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)"
    r"\s+device\s+(?P<device>\d+)\s+\[(?P<pci>[^\]]*)\]\s*(?P<name>.*?)\s*$"
)
# NCCL's banner, alone or inside an INFO line: "NCCL version 2.21.5+cuda12.4"
_NCCL_VERSION = re.compile(r"\bNCCL version (?P<version>\d+\.\d+\.\d+\S*)")
_OUT_OF_BOUNDS = re.compile(r"^# Out of bounds values\s*:\s*(?P<count>\d+)")
_AVG_BUSBW = re.compile(r"^# Avg bus bandwidth\s*:\s*(?P<busbw>\S+)")
# how nccl-tests and CUDA report a fatal error ("node0: Test CUDA failure common.cu:389 'an illegal ...'")
_FAILURE = re.compile(r"(?:Test (?:CUDA |NCCL )?failure|Cuda failure|NCCL failure) \S+.*$")
# a shell prompt before a command: "$ ", "user@host:~/dir$ ", "[root@test dir]# ", "(venv) ..."
_PROMPT = re.compile(r"^(?:\([^)]*\)\s+)*(?:\$|\S+@\S*?[:~][^\s]*[#$]|\[[^\]]+\][#$])\s+")
# a command naming an nccl-tests binary: "./build/all_gather_perf -b 8", "alltoall_perf_mpi"
_BINARY = re.compile(r"(?:^|[\s/=])(?P<binary>[a-z_]+_perf(?:_mpi)?)(?=\s|$)")
# "Started: 2024-05-01 10:00:00" / "Start time: ..." written by wrappers and batch scripts
_STARTED = re.compile(r"^(?:Started|Start time|Date)\s*:\s*(?P<when>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2})?\S*)")
_ISO_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}")

_PREFIX_COLUMNS = ("size", "count", "type", "redop", "root")
# -I columns and the Measurement fields they fill
_PER_ITERATION = {"i_min": "time_min", "i_max": "time_max", "i_p99": "time_p99", "i_cv%": "cv"}
# what a cell of each kind may hold
_CELL = re.compile(r"\S+")
_NAME = re.compile(r"[A-Za-z]\w*")
_INT = re.compile(r"-?\d{1,19}")
_FLOAT = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
# The layout assumed for rows printed before any column header (nccl-tests 2.x).
_DEFAULT_COLUMNS = [
    "size",
    "count",
    "type",
    "redop",
    "root",
    "time",
    "algbw",
    "busbw",
    "#wrong",
    "time",
    "algbw",
    "busbw",
    "#wrong",
]
# A row whose out-of-place group was left blank (-O 0) has this many blanks where it would be.
_BLANK_GROUP_WIDTH = 20


@dataclass(slots=True)
class _Line:
    number: int  # 1-based, in the original text
    text: str  # stripped of prefixes and surrounding blanks
    stamp: str | None  # the timestamp a stripped prefix carried
    terminated: bool  # a newline followed it; a last line without one may have been cut


def read_runs(lines: Iterable[TextLine], source: str) -> list[RunFacts]:
    """Every run in the lines, in order, each with its line range and its position in the file.

    Each line is read once and none is kept (lines may come streamed from a file of any length):
    what stays is each run's facts, its measurements in compact columns."""
    splitter = _RunSplitter(source)
    for number, text, terminated in lines:
        splitter.read(_Line(number, *_strip(text), terminated))
    runs = splitter.finish()
    for position, facts in enumerate(runs, 1):
        facts.position, facts.runs_in_file = position, len(runs)
    return runs


def text_lines(text: str) -> Iterator[TextLine]:
    """The lines of a text held whole, as safe_read.iter_text_lines gives a file's."""
    raw = text.split("\n")
    last = len(raw) - 1
    for number, line in enumerate(raw, 1):
        if number - 1 == last and not line:
            return  # the text ended with its newline
        yield TextLine(number, line.rstrip("\r"), number - 1 < last)


def _strip(line: str) -> tuple[str, str | None]:
    """The line's content, and the timestamp a prefix carried (when one did)."""
    text, stamp = line.strip(), None
    changed = True
    while changed:
        changed = False
        for prefix in _LINE_PREFIXES:
            if match := prefix.match(text):
                if stamp is None and (found := _ISO_STAMP.search(match.group(0))):
                    stamp = found.group(0).replace(" ", "T")
                text = text[match.end() :].lstrip()
                changed = True
    return text, stamp


class _RunSplitter:
    """Cuts the lines into runs as they come: a header block after rows or a footer starts the next.

    A run's command is the last one printed before its header and after the previous run's
    results (a shell session shows the next command after the previous footer)."""

    def __init__(self, source: str):
        self.source = source
        self.runs: list[RunFacts] = []
        self.reader = _RunReader(source)
        self.seen_results = False  # the current run printed a row or its footer
        self.seen_header = False
        self.command: str | None = None  # the last command since the last result line

    def read(self, line: _Line) -> None:
        text = line.text
        if _starts_header(text):
            if self.seen_results:
                self.runs.append(self.reader.finish())
                self.reader, self.seen_results, self.seen_header = _RunReader(self.source), False, False
            if not self.seen_header:
                self.seen_header = True
                self.reader.set_command(self.command)
        self.reader.read(line)
        result = _looks_like_row(text) or bool(_AVG_BUSBW.match(text))
        self.seen_results = self.seen_results or result
        if result or _OUT_OF_BOUNDS.match(text):
            self.command = None
        elif command := _command_in(text):
            self.command = command

    def finish(self) -> list[RunFacts]:
        return [*self.runs, self.reader.finish()]


def _starts_header(text: str) -> bool:
    return bool(_VERSION_LINE.match(text) or _PROGRAM_LINE.match(text) or _PARAMS_LINE.match(text))


def _command_in(text: str) -> str | None:
    """The command line when this line runs an nccl-tests binary (prompt stripped), else None."""
    if text.startswith("#") or " NCCL INFO " in text:
        return None
    command = _PROMPT.sub("", text)
    return command if _BINARY.search(command) else None


def _looks_like_row(text: str) -> bool:
    first = text.split(maxsplit=1)[:1]
    return bool(first) and first[0].isdigit()


class _RunReader:
    """Reads the lines of one run in order; the column header in force decides how rows are read."""

    def __init__(self, source: str):
        self.facts = RunFacts(source=source)
        self.columns: list[str] | None = None
        self.layout: _Layout | None = None
        self.first_stamp: str | None = None  # the first timestamp a launcher or logger put before a line

    def set_command(self, command: str | None) -> None:
        """The command before the run's header; the program it runs, unless a line already named one."""
        self.facts.command = command
        if command and self.facts.program is None and (binary := _BINARY.search(command)):
            self.facts.program = binary["binary"]

    def read(self, line: _Line) -> None:
        text, facts = line.text, self.facts
        facts.first_line = facts.first_line or line.number
        facts.last_line = line.number
        self.first_stamp = self.first_stamp or line.stamp
        if not text:
            return
        if text.startswith("#"):
            self._read_comment(text)
        elif _looks_like_row(text):
            self._read_row(line)
        elif match := _NCCL_VERSION.search(text):
            facts.versions["nccl"] = match["version"]
        elif match := _STARTED.match(text):
            facts.created = facts.created or match["when"].replace(" ", "T", 1)
        if facts.failure is None and (failure := _FAILURE.search(text)):
            facts.failure = failure.group(0).strip()

    def _read_comment(self, text: str) -> None:
        facts = self.facts
        if match := _RANK_LINE.match(text):
            facts.devices.append(_device(match))
        elif (names := _column_names(text)) is not None:
            self._set_columns(names)
        elif match := _PARAMS_LINE.match(text):
            _read_params(match, text, facts)
        elif match := _VERSION_LINE.match(text):
            facts.versions["nccl-tests"] = match["tests"]
            facts.versions.setdefault("nccl", nccl_version_from_code(int(match["library"])))
        elif match := _PROGRAM_LINE.match(text) or _CONCLUDED_LINE.match(text):
            facts.program = match["program"]
        elif match := _OUT_OF_BOUNDS.match(text):
            facts.args["out_of_bounds"] = int(match["count"])
        elif match := _AVG_BUSBW.match(text):
            facts.args["avg_busbw_gbps"] = _float(match["busbw"])
            facts.complete = True

    def _set_columns(self, names: list[str]) -> None:
        self.columns = self.facts.columns = names
        self.layout = _layout(names)

    def _read_row(self, line: _Line) -> None:
        if self.columns is None:
            self._set_columns(list(_DEFAULT_COLUMNS))
            self.facts.warnings.append(
                f"{self.facts.source}: rows before any column header; read them as the 2.x layout"
            )
        assert self.layout is not None
        measurements = _row_measurements(line, self.layout) if line.terminated else None
        if measurements is None:
            self.facts.unreadable_rows.append(line.number)
            return
        for fixed, extras in measurements:
            self.facts.measurements.add(fixed, extras)
        if self.layout.timestamp and self.facts.created is None and (stamp := _ISO_STAMP.search(line.text)):
            self.facts.created = stamp.group(0).replace(" ", "T")  # -S: the first row's local time

    def finish(self) -> RunFacts:
        facts = self.facts
        if facts.created is None:
            facts.created = self.first_stamp
        if facts.measurements and not facts.complete:
            said = f"; the log says: {facts.failure}" if facts.failure else ""
            kept = len(facts.measurements)
            facts.warnings.append(
                f"{facts.source}: {INCOMPLETE_REASON}: kept the {kept} records read before it stopped{said}"
            )
        return facts


def _column_names(text: str) -> list[str] | None:
    """The column names when text is the column header line ('#  size  count  type ...'), else None."""
    names = text.lstrip("#").split()
    if names[:3] != ["size", "count", "type"]:
        return None
    return names


class _Layout(NamedTuple):
    """How a column header lays a row out, worked out once per header, not once per row."""

    prefix: list[str]  # the row's leading columns (size count type [redop] [root])
    groups: list[list[str]]  # the value columns of the out-of-place and in-place groups
    readable: bool  # False: no row can fit this header
    timestamp: bool  # -S: a trailing local time, not a value
    width: int  # cells a full row has before any timestamp


def _layout(columns: list[str]) -> _Layout:
    prefix = [name for name in columns if name in _PREFIX_COLUMNS]
    groups = _value_groups([name for name in columns if name not in _PREFIX_COLUMNS and name != "timestamp"])
    readable = groups is not None and columns[: len(prefix)] == prefix
    groups = groups or []
    width = len(prefix) + sum(len(group) for group in groups)
    return _Layout(prefix, groups, readable, "timestamp" in columns, width)


def _row_measurements(line: _Line, layout: _Layout) -> list[_Values] | None:
    """One measurement per column group of the row, or None when the row does not fit its header."""
    if not layout.readable:
        return None
    values = line.text.split()
    cells_printed = len(values)
    if layout.timestamp:
        values = values[: layout.width]
    placements = _placements(line.text, values, cells_printed, layout)
    if placements is None:
        return None
    prefix = layout.prefix
    head = _head(dict(zip(prefix, values)))
    if head is None:
        return None
    measurements = []
    position = len(prefix)
    for in_place, names in placements:
        cells = dict(zip(names, values[position : position + len(names)]))
        position += len(names)
        measurement = _measurement(head, cells, in_place, line.number)
        if measurement is None:
            return None
        measurements.append(measurement)
    return measurements


def _value_groups(names: list[str]) -> list[list[str]] | None:
    """Split the value columns into the out-of-place and in-place groups: a group ends where a name repeats."""
    groups: list[list[str]] = [[]]
    for name in names:
        if name in groups[-1]:
            groups.append([])
        groups[-1].append(name)
    if len(groups) > 2 or any("time" not in group and "cputime" not in group for group in groups):
        return None
    return groups


def _placements(
    text: str, values: list[str], cells_printed: int, layout: _Layout
) -> list[tuple[bool, list[str]]] | None:
    """(in_place, column names) of the groups the row's values fill: all of them, or only the
    in-place one after a blank gap (-O 0); None when the cell count fits neither."""
    prefix, groups = layout.prefix, layout.groups
    if len(values) == layout.width:
        return [(len(groups) == 2 and index == 1, group) for index, group in enumerate(groups)]
    if len(groups) == 2 and len(values) == len(prefix) + len(groups[1]) and cells_printed > len(prefix):
        spans = [match.span() for match in _CELL.finditer(text, 0)][len(prefix) - 1 : len(prefix) + 1]
        if spans[1][0] - spans[0][1] > _BLANK_GROUP_WIDTH:
            return [(True, groups[1])]
    return None


# A measurement as the reader hands it to Measurements.add: its FIXED_FIELDS values and its -I extras.
_Values = tuple[tuple[Any, ...], dict[str, float]]


def _head(head: dict[str, str]) -> tuple[int, int, str, str, int] | None:
    """The row's size, count, type, reduction op and root, each checked; None if any cannot be one."""
    size, count = _uint(head.get("size")), _uint(head.get("count"))
    dtype = head.get("type", "")
    redop = head.get("redop", "none")
    root = _int(head.get("root", "-1"))
    if size is None or count is None or root is None or not _NAME.fullmatch(dtype) or not _NAME.fullmatch(redop):
        return None
    return size, count, dtype, redop, root


def _measurement(
    head: tuple[int, int, str, str, int], cells: dict[str, str], in_place: bool, line_number: int
) -> _Values | None:
    """A column group's cells, each checked against what its column can hold; None if any cannot."""
    time_us = _float(cells.get("time", cells.get("cputime")))
    algbw, busbw = _float(cells.get("algbw")), _float(cells.get("busbw"))
    wrong = _wrong(cells)
    if time_us is None or algbw is None or busbw is None or wrong is None:
        return None
    printed = cells.get("#wrong", cells.get("error", ""))
    fixed = (*head, in_place, time_us, algbw, busbw, wrong, printed, line_number)
    if not cells.keys() & _PER_ITERATION:
        return fixed, {}
    read = {name: _float(cells[name]) for name in _PER_ITERATION if name in cells}
    if None in read.values():
        return None
    extras: dict[str, float] = {_PER_ITERATION[name]: value for name, value in read.items() if value is not None}
    if "cv" in extras:
        extras["cv"] /= 100  # printed in percent
    return fixed, extras


def _wrong(cells: dict[str, str]) -> int | None:
    """'#wrong' is a count, or N/A when the check was off; the 2019-2021 float 'error' is never a count."""
    if "#wrong" in cells:
        printed = cells["#wrong"]
        if printed == "N/A":
            return -1
        count = _uint(printed)
        return count
    if "error" in cells:
        return -1 if cells["error"] == "N/A" or _float(cells["error"]) is not None else None
    return None


def _uint(text: str | None) -> int | None:
    # bounded so that a corrupted cell of hundreds of digits is refused, not stored
    return int(text) if text is not None and text.isdigit() and len(text) <= 19 else None


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and _INT.fullmatch(text) else None


def _float(text: str | None) -> float | None:
    if text is None or not _FLOAT.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) and value >= 0 else None


def _device(match: re.Match[str]) -> Device:
    return Device(
        rank=int(match["rank"]),
        group=int(match["group"] or 0),
        host=match["host"],
        device=int(match["device"]),
        pci=match["pci"],
        name=match["name"],
    )


def _read_params(match: re.Match[str], line: str, facts: RunFacts) -> None:
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
