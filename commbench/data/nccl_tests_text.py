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
from dataclasses import dataclass
from typing import Any

from commbench.data.nccl_tests_facts import INCOMPLETE_REASON, Device, Measurement, RunFacts, nccl_version_from_code

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


@dataclass
class _Line:
    number: int  # 1-based, in the original text
    text: str  # stripped of prefixes and surrounding blanks
    stamp: str | None  # the timestamp a stripped prefix carried
    terminated: bool  # a newline followed it; a last line without one may have been cut


def read_runs(text: str, source: str) -> list[RunFacts]:
    """Every run in the text, in order, each with its line range and its position in the file."""
    lines = _clean_lines(text)
    pieces = _split_runs(lines)
    runs = [_read_run(lines[start:end], source, _command_before(lines, header)) for start, end, header in pieces]
    for position, facts in enumerate(runs, 1):
        facts.position, facts.runs_in_file = position, len(runs)
    return runs


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


def _clean_lines(text: str) -> list[_Line]:
    raw = text.split("\n")
    lines = [_Line(number, *_strip(line.rstrip("\r")), True) for number, line in enumerate(raw, 1)]
    if raw and raw[-1] == "":
        lines.pop()
    elif lines:
        lines[-1].terminated = False
    return lines


def _split_runs(lines: list[_Line]) -> list[tuple[int, int, int]]:
    """(start, end, header) indices of each run: a header block after rows or a footer starts the next."""
    pieces: list[tuple[int, int, int]] = []
    start, seen_results = 0, False
    header: int | None = None
    for index, line in enumerate(lines):
        if _starts_header(line.text):
            if seen_results:
                pieces.append((start, index, start if header is None else header))
                start, header, seen_results = index, None, False
            header = index if header is None else header
        seen_results = seen_results or _looks_like_row(line.text) or bool(_AVG_BUSBW.match(line.text))
    pieces.append((start, len(lines), start if header is None else header))
    return pieces


def _starts_header(text: str) -> bool:
    return bool(_VERSION_LINE.match(text) or _PROGRAM_LINE.match(text) or _PARAMS_LINE.match(text))


def _command_before(lines: list[_Line], header: int) -> str | None:
    """The command that started a run: the last one printed before its header and after the previous
    run's results (a shell session shows the next command after the previous footer)."""
    for index in range(header - 1, -1, -1):
        text = lines[index].text
        if _looks_like_row(text) or _AVG_BUSBW.match(text) or _OUT_OF_BOUNDS.match(text):
            return None
        if command := _command_in(text):
            return command
    return None


def _command_in(text: str) -> str | None:
    """The command line when this line runs an nccl-tests binary (prompt stripped), else None."""
    if text.startswith("#") or " NCCL INFO " in text:
        return None
    command = _PROMPT.sub("", text)
    return command if _BINARY.search(command) else None


def _looks_like_row(text: str) -> bool:
    first = text.split(maxsplit=1)[:1]
    return bool(first) and first[0].isdigit()


def _read_run(lines: list[_Line], source: str, command: str | None) -> RunFacts:
    reader = _RunReader(source, command)
    for line in lines:
        reader.read(line)
    return reader.finish(lines)


class _RunReader:
    """Reads the lines of one run in order; the column header in force decides how rows are read."""

    def __init__(self, source: str, command: str | None):
        self.facts = RunFacts(source=source, command=command)
        self.columns: list[str] | None = None
        if command and (binary := _BINARY.search(command)):
            self.facts.program = binary["binary"]

    def read(self, line: _Line) -> None:
        text, facts = line.text, self.facts
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
            self.columns = names
            facts.columns = names
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

    def _read_row(self, line: _Line) -> None:
        columns = self.columns
        if columns is None:
            columns = self.columns = list(_DEFAULT_COLUMNS)
            self.facts.warnings.append(
                f"{self.facts.source}: rows before any column header; read them as the 2.x layout"
            )
        measurements = _row_measurements(line, columns) if line.terminated else None
        if measurements is None:
            self.facts.unreadable_rows.append(line.number)
            return
        self.facts.measurements.extend(measurements)
        if "timestamp" in columns and self.facts.created is None and (stamp := _ISO_STAMP.search(line.text)):
            self.facts.created = stamp.group(0).replace(" ", "T")  # -S: the first row's local time

    def finish(self, lines: list[_Line]) -> RunFacts:
        facts = self.facts
        if lines:
            facts.first_line, facts.last_line = lines[0].number, lines[-1].number
        if facts.created is None:  # else the first timestamp a launcher or logger put before a line
            facts.created = next((line.stamp for line in lines if line.stamp), None)
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


def _row_measurements(line: _Line, columns: list[str]) -> list[Measurement] | None:
    """One measurement per column group of the row, or None when the row does not fit its header."""
    prefix = [name for name in columns if name in _PREFIX_COLUMNS]
    groups = _value_groups([name for name in columns if name not in _PREFIX_COLUMNS and name != "timestamp"])
    if groups is None or columns[: len(prefix)] != prefix:
        return None
    spans = [(match.start(), match.group(0)) for match in re.finditer(r"\S+", line.text)]
    values = [token for _, token in spans]
    if "timestamp" in columns:
        values = values[: len(prefix) + sum(len(group) for group in groups)]
    placements = _placements(spans, values, prefix, groups)
    if placements is None:
        return None
    head = dict(zip(prefix, values))
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
    spans: list[tuple[int, str]], values: list[str], prefix: list[str], groups: list[list[str]]
) -> list[tuple[bool, list[str]]] | None:
    """(in_place, column names) of the groups the row's values fill: all of them, or only the
    in-place one after a blank gap (-O 0); None when the cell count fits neither."""
    if len(values) == len(prefix) + sum(len(group) for group in groups):
        return [(len(groups) == 2 and index == 1, group) for index, group in enumerate(groups)]
    if len(groups) == 2 and len(values) == len(prefix) + len(groups[1]) and len(spans) > len(prefix):
        last_start, last_text = spans[len(prefix) - 1]
        if spans[len(prefix)][0] - (last_start + len(last_text)) > _BLANK_GROUP_WIDTH:
            return [(True, groups[1])]
    return None


def _measurement(head: dict[str, Any], cells: dict[str, Any], in_place: bool, line_number: int) -> Measurement | None:
    """A column group's cells, each checked against what its column can hold; None if any cannot."""
    size, count = _uint(head.get("size")), _uint(head.get("count"))
    dtype = head.get("type", "")
    redop = head.get("redop", "none")
    root = _int(head.get("root", "-1"))
    time_us = _float(cells.get("time", cells.get("cputime")))
    algbw, busbw = _float(cells.get("algbw")), _float(cells.get("busbw"))
    wrong = _wrong(cells)
    if (
        (
            size is None
            or count is None
            or root is None
            or time_us is None
            or algbw is None
            or busbw is None
            or wrong is None
        )
        or not re.fullmatch(r"[A-Za-z]\w*", dtype)
        or not re.fullmatch(r"[A-Za-z]\w*", redop)
    ):
        return None
    read = {name: _float(cells[name]) for name in ("i_min", "i_max", "i_p99", "i_cv%") if name in cells}
    extras = {name: value for name, value in read.items() if value is not None}
    if len(extras) < len(read):
        return None
    return Measurement(
        size=size,
        count=count,
        dtype=dtype,
        redop=redop,
        root=root,
        in_place=in_place,
        time_us=time_us,
        algbw=algbw,
        busbw=busbw,
        wrong=wrong,
        wrong_printed=cells.get("#wrong", cells.get("error", "")),
        line=line_number,
        time_min=extras.get("i_min"),
        time_max=extras.get("i_max"),
        time_p99=extras.get("i_p99"),
        cv=extras["i_cv%"] / 100 if "i_cv%" in extras else None,
    )


def _wrong(cells: dict[str, Any]) -> int | None:
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
    return int(text) if text is not None and re.fullmatch(r"-?\d{1,19}", text) else None


def _float(text: str | None) -> float | None:
    if text is None or not re.fullmatch(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", text):
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
