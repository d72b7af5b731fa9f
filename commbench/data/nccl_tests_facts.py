"""What an nccl-tests run said about itself, as read from its text or JSON, before any mapping.

The text reader (`nccl_tests_text`) and the JSON reader (`nccl_tests_json`) each fill these; the
assembly in `nccl_tests` turns them into run.json and records. Keeping the readers' output this
plain lets a reader be tested on its own and keeps the two readers from depending on each other.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, overload

INCOMPLETE_REASON = "log ends early (crashed run?)"


@dataclass
class Device:
    """One `#  Rank` line / one entry of the JSON `devices` list."""

    rank: int
    group: int
    host: str
    device: int
    pci: str
    name: str


@dataclass
class Measurement:
    """One column group of one table row (one size, one placement), values as the log printed them."""

    size: int
    count: int
    dtype: str
    redop: str
    root: int
    in_place: bool
    time_us: float
    algbw: float
    busbw: float
    wrong: int  # -1: not checked (`N/A`, or the float `error` column of 2019-2021 releases)
    wrong_printed: str = ""  # the cell as printed, so the in-place N/A pattern can be seen
    line: int = 0  # 1-based line of the row in its file
    iters: int | None = None
    time_min: float | None = None
    time_max: float | None = None
    time_p10: float | None = None
    time_p90: float | None = None
    time_p99: float | None = None
    cv: float | None = None
    slowest_process: int | None = None  # -I JSON: the process whose iterations were slowest
    process_times: list[float] | None = None  # -I JSON: each process's mean of its slowest time per iteration


class _Column:
    """One field of every measurement of a run: a typed array (8 bytes a value, not a ~30-byte object
    behind an 8-byte pointer) while the values fit it, a list from the first one that does not (an
    integer of 20 digits, a value where the array's stand-in for None was needed)."""

    __slots__ = ("_none", "_values", "append")

    def __init__(self, typecode: str, none: float | None = None, length: int = 0):
        self._none = none  # what stands for None in the array; None: the field is never None
        self._values: array[Any] | list[Any] = (
            array(typecode, [0 if none is None else none]) * length if typecode else [None] * length
        )
        # a field that is never None appends straight to its array; a value that does not fit raises
        # OverflowError or TypeError, and the caller widens the column (Measurements.add)
        self.append: Callable[[Any], None] = self._values.append if typecode and none is None else self._append_or_widen

    def __len__(self) -> int:
        return len(self._values)

    def widen(self, value: Any) -> None:
        """Turn the column into a list, then append value (one the array could not hold)."""
        self._values = values = list(self)
        self.append = values.append
        values.append(value)

    def _append_or_widen(self, value: Any) -> None:
        values = self._values
        if isinstance(values, list):
            values.append(value)
        elif value is None:
            values.append(self._none)
        elif _same(value, self._none):
            self.widen(value)  # the array would read it back as None
        else:
            try:
                values.append(value)
            except (OverflowError, TypeError):
                self.widen(value)

    def __getitem__(self, index: int) -> Any:
        stored = self._values[index]
        return (
            None if self._none is not None and isinstance(self._values, array) and _same(stored, self._none) else stored
        )

    def __iter__(self) -> Iterator[Any]:
        values, none = self._values, self._none
        if none is None or isinstance(values, list):
            return iter(values)
        return (None if _same(stored, none) else stored for stored in values)

    def raw(self) -> Sequence[Any]:
        """The values, without a copy where the column holds them as they are (no stand-in for None)."""
        return self._values if self._none is None or isinstance(self._values, list) else list(self)


def _same(value: Any, none: float | None) -> bool:
    """Whether value is the stand-in for None (NaN is the same as NaN here)."""
    return none is not None and (value == none or (value != value and none != none))


class _Texts:
    """A text field of every measurement (dtype, redop, #wrong cell): an index per value into the few
    distinct texts a table prints."""

    __slots__ = ("_codes", "_index", "_texts")

    def __init__(self) -> None:
        self._codes = array("I")
        self._texts: list[str] = []
        self._index: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._codes)

    def append(self, text: str) -> None:
        code = self._index.get(text)
        if code is None:
            code = self._index[text] = len(self._texts)
            self._texts.append(text)
        self._codes.append(code)

    def widen(self, value: Any) -> None:
        raise TypeError(f"not a text: {value!r}")

    def __getitem__(self, index: int) -> str:
        return self._texts[self._codes[index]]

    def __iter__(self) -> Iterator[str]:
        return map(self._texts.__getitem__, self._codes)

    def distinct(self) -> set[str]:
        return set(self._texts)

    def raw(self) -> Sequence[str]:
        return list(self)


_NO_INT = -(2**63)  # stands for None in an optional integer field
# Every Measurement field in its order, and how its column holds it: (typecode, stand-in for None),
# or None for a text. The fixed fields come first: every measurement has them.
_FIXED: dict[str, tuple[str, None] | None] = {
    "size": ("q", None),
    "count": ("q", None),
    "dtype": None,
    "redop": None,
    "root": ("q", None),
    "in_place": ("b", None),
    "time_us": ("d", None),
    "algbw": ("d", None),
    "busbw": ("d", None),
    "wrong": ("q", None),
    "wrong_printed": None,
    "line": ("q", None),
}
# Fields only some sources give (-I, -J): a column is made when the first measurement has a value.
_OPTIONAL: dict[str, tuple[str, float | None]] = {
    "iters": ("q", _NO_INT),
    "time_min": ("d", math.nan),
    "time_max": ("d", math.nan),
    "time_p10": ("d", math.nan),
    "time_p90": ("d", math.nan),
    "time_p99": ("d", math.nan),
    "cv": ("d", math.nan),
    "slowest_process": ("q", _NO_INT),
    "process_times": ("", None),  # no typecode: a list of lists (None where a measurement has none)
}
FIXED_FIELDS = tuple(_FIXED)  # Measurements.add's values, in this order
_IN_PLACE = FIXED_FIELDS.index("in_place")


class Measurements(Sequence[Measurement]):
    """Every measurement of a run, one compact column per field: about 77 bytes a measurement where
    Measurement objects take about 700, so a 10^6-row log (2x10^6 measurements) is held in under
    200 MB. Indexing or iterating makes Measurement objects one at a time; `column` gives a field's
    values for a pass over all of them (the collective inference, the consistency checks).

    A table row's measurements are appended together, in line order: `rows` counts them by line."""

    def __init__(self) -> None:
        self._columns: dict[str, _Column | _Texts] = {
            name: _Texts() if layout is None else _Column(*layout) for name, layout in _FIXED.items()
        }
        self._fixed = list(self._columns.values())
        self._optional: dict[str, _Column] = {}
        self._length = 0
        self.rows = 0  # distinct table lines (each appended row's line differs from the last one's)
        self._last_line: int | None = None

    def add(self, fixed: Sequence[Any], optional: dict[str, Any] | None = None) -> None:
        """One measurement: the values of FIXED_FIELDS in order, and the optional ones it has."""
        for column, value in zip(self._fixed, fixed, strict=True):
            try:
                column.append(value)
            except (OverflowError, TypeError):
                column.widen(value)
        optional = optional or {}
        for name, value in optional.items():
            if value is not None and name not in self._optional:
                self._optional[name] = self._columns[name] = _Column(*_OPTIONAL[name], self._length)
        for name, column in self._optional.items():
            column.append(optional.get(name))
        self._length += 1
        line = fixed[-1]
        if line != self._last_line:
            self.rows += 1
            self._last_line = line

    def append(self, m: Measurement) -> None:
        self.add([getattr(m, name) for name in FIXED_FIELDS], {name: getattr(m, name) for name in _OPTIONAL})

    def extend(self, measurements: Iterable[Measurement]) -> None:
        for measurement in measurements:
            self.append(measurement)

    def __len__(self) -> int:
        return self._length

    def has(self, name: str) -> bool:
        """Whether any measurement has a value for this optional field."""
        return name in self._columns

    def column(self, name: str) -> Sequence[Any]:
        """The field's value of every measurement, in order (None where it has none)."""
        column = self._columns.get(name)
        return [None] * self._length if column is None else column.raw()

    def distinct(self, name: str) -> set[Any]:
        column = self._columns.get(name)
        return column.distinct() if isinstance(column, _Texts) else set(self.column(name))

    @overload
    def __getitem__(self, index: int) -> Measurement: ...

    @overload
    def __getitem__(self, index: slice) -> list[Measurement]: ...

    def __getitem__(self, index: int | slice) -> Measurement | list[Measurement]:
        if isinstance(index, slice):
            return [self[i] for i in range(self._length)[index]]
        if not -self._length <= index < self._length:
            raise IndexError("measurement index out of range")
        values: dict[str, Any] = {name: column[index % self._length] for name, column in self._columns.items()}
        values["in_place"] = bool(values["in_place"])
        return Measurement(**values)

    def __iter__(self) -> Iterator[Measurement]:
        columns = [
            iter(self._columns[name]) if name in self._columns else repeat(None) for name in (*_FIXED, *_OPTIONAL)
        ]
        for values in zip(*columns):  # the fixed fields' columns end it: each optional one is as long
            row = list(values)
            row[_IN_PLACE] = bool(row[_IN_PLACE])
            yield Measurement(*row)


@dataclass
class RunFacts:
    """One run of a file: its header, its rows and where in the file it sits."""

    source: str
    program: str | None = None  # binary or test name the log itself gives
    command: str | None = None  # the command line the log shows for this run
    devices: list[Device] = field(default_factory=list)
    ranks_per_process: int = 1
    warmup: int = 0
    ops_per_iteration: int = 1  # agg iters x graph launches: collectives per timed iteration
    iters: int | None = None
    columns: list[str] = field(default_factory=list)  # the table's column names, as printed
    args: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    created: str | None = None
    finished: str | None = None
    complete: bool = False
    failure: str | None = None  # the log's own failure line ("Test CUDA failure common.cu:389 ...")
    first_line: int = 0
    last_line: int = 0
    position: int = 1  # this run's place among the runs of its file
    runs_in_file: int = 1
    unreadable_rows: array[int] = field(default_factory=lambda: array("q"))  # lines of rows that did not fit
    measurements: Measurements = field(default_factory=Measurements)
    warnings: list[str] = field(default_factory=list)


def nccl_version_from_code(code: int) -> str:
    """NCCL_VERSION_CODE -> 'major.minor.patch': 22807 -> '2.28.7'; codes below 2.9 use 1000s: 2708 -> '2.7.8'."""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"
