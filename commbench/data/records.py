"""The one way a Record is made: a row's facts, its time statistics and its busbw factor.

Every writer of records goes through `build_record`: the sweep, pairwise and overlap drivers
(from samples they timed) and the nccl-tests import (from the times and bandwidths a log
reports). It owns the bandwidth arithmetic, so it is written once:
    algbw = size_bytes / time_us (GB/s = 1e3 B/us), busbw = algbw x factor,
    aggregate_busbw = busbw x n_groups (what all groups of the scope moved together).
Torch-free (numpy for the statistics).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import numpy as np

from commbench.data.schema import Record

R = TypeVar("R", bound=Record)


@dataclass(frozen=True)
class Stats:
    """Statistics of one rank's per-iteration times (us)."""

    median: float
    p10: float | None  # None: the source did not report it (an imported log)
    p90: float | None
    min: float | None
    max: float | None
    mean: float
    cv: float | None  # stdev / mean: 0.05 means the iterations scatter by about 5%

    @classmethod
    def of(cls, samples_us: Sequence[float] | np.ndarray) -> Stats:
        values = np.asarray(samples_us, dtype=np.float64)
        mean = float(values.mean())
        p10, median, p90 = np.percentile(values, [10, 50, 90])
        cv = float(values.std() / mean) if mean > 0 else 0.0
        return cls(float(median), float(p10), float(p90), float(values.min()), float(values.max()), mean, cv)


@dataclass(frozen=True)
class RowFacts:
    """What a row is, independent of how long it took: the columns nccl-tests prints left of the times."""

    op: str
    scope: str
    group_size: int
    n_groups: int
    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int
    in_place: bool
    iters: int
    warmup: int
    timer: str
    stop_reason: str | None  # converged / budget / fixed (schema.Record.stop_reason); None: no timed loop
    direction: str | None = None


_ROW_FIELDS = tuple(field.name for field in fields(RowFacts))


def build_record(
    facts: RowFacts,
    stats: Stats,
    factor: float,
    *,
    time_us_mean_nccl: float | None,
    wrong: int,
    slowest_rank: int | None = None,
    reported_bandwidth: tuple[float, float] | None = None,
    record_class: type[R] = Record,  # type: ignore[assignment]  # mypy#3737: a TypeVar's default
    time_stat: str = "slowest-rank median",
    **extra: Any,
) -> R:
    """A Record of `record_class` (Record, or a subclass with `extra` fields). time_us is stats.median,
    which `time_stat` names; time_us_mean is stats.mean. The bandwidths follow from size and time_us
    unless `reported_bandwidth` (algbw, busbw) gives them, as a log does."""
    algbw, busbw = reported_bandwidth or _bandwidths(facts.size_bytes, stats.median, factor)
    # RowFacts holds only scalars: a shallow read of its fields, not asdict's deep copy (asdict took
    # 28 us a row against 4 us, and an nccl-tests import builds one per column group)
    row = {name: getattr(facts, name) for name in _ROW_FIELDS}
    return record_class(
        **row,
        time_us=stats.median,
        time_stat=time_stat,
        time_us_mean=stats.mean,
        time_us_p10=stats.p10,
        time_us_p90=stats.p90,
        time_us_min=stats.min,
        time_us_max=stats.max,
        cv=stats.cv,
        time_us_mean_nccl=time_us_mean_nccl,
        algbw_gbps=algbw,
        busbw_gbps=busbw,
        busbw_factor=factor,
        aggregate_busbw_gbps=busbw * facts.n_groups,
        wrong=wrong,
        slowest_rank=slowest_rank,
        **extra,
    )


def _bandwidths(size_bytes: int, time_us: float, factor: float) -> tuple[float, float]:
    algbw = size_bytes / time_us / 1e3 if time_us > 0 else 0.0
    return algbw, algbw * factor
