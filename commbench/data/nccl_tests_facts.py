"""What an nccl-tests run said about itself, as read from its text or JSON, before any mapping.

The text reader (`nccl_tests_text`) and the JSON reader (`nccl_tests_json`) each fill these; the
assembly in `nccl_tests` turns them into run.json and records. Keeping the readers' output this
plain lets a reader be tested on its own and keeps the two readers from depending on each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
    unreadable_rows: list[int] = field(default_factory=list)  # line numbers of rows that did not fit
    measurements: list[Measurement] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def nccl_version_from_code(code: int) -> str:
    """NCCL_VERSION_CODE -> 'major.minor.patch': 22807 -> '2.28.7'; codes below 2.9 use 1000s: 2708 -> '2.7.8'."""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"
