"""A row's history across a cluster's runs, and the points where it changed, with their likely cause.

The series: per run of one cluster (ordered by start time), the out-of-place row of one op and
size (and scope), its busbw, and beside it the same run's in-place row of that op and size when
every run has one. Change points come from ruptures' PELT (least-squares cost: KernelCPD with the
linear kernel, ruptures' compiled PELT) on the log of busbw, each column scaled by a robust
estimate of its run-to-run noise (the median absolute difference between neighbouring runs, which
a level shift barely moves), with a BIC-like penalty of PENALTY_PER_LOG_N x columns x log(n).
Why both variants: they are the same op on the same ranks in the same run, so whatever moves one
(a library, a setting, a node) moves the other, while their run-to-run noise is nearly independent
(correlation 0.02 over the 12 runs of the noise profile at 64 MiB); two looks at one change place
it more sharply than one (bench/RESULTS-history.md). A change point is kept only when it is
also material on the row asked for: the medians of the out-of-place segments on each side differ
by more than the threshold (default 5%), the same threshold `compare` uses. Each kept change point
names the first run after the change and what its run.json changed against the run before it;
when exactly one run within ATTRIBUTION_WINDOW runs of the detected place changed its run.json,
that run is taken as the first run after the change (`detected_index` keeps the detector's own
estimate).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import ruptures

from commbench.analysis.runs import run_differences
from commbench.data.rundir import load_run
from commbench.data.schema import RunInfo
from commbench.errors import CommbenchError

PENALTY_PER_LOG_N = 3.0  # per column; false alarms in generated flat histories: bench/RESULTS-history.md
MIN_SEGMENT = 3
ATTRIBUTION_WINDOW = 5  # runs either side of a detected change searched for its cause
DEFAULT_THRESHOLD = 0.05


@dataclass
class Point:
    run_id: str
    created: str
    path: str
    busbw_gbps: float
    time_us: float
    source: str  # commbench, nccl-tests, or synthetic (generated: never a measurement)
    in_place_busbw_gbps: float | None = None  # the same run's in-place row, a second look at the same change


@dataclass
class ChangePoint:
    index: int  # 1-based position in the series of the first run after the change
    detected_index: int  # where the detector alone put it (index may move to a run.json change nearby)
    run_id: str
    before_busbw_gbps: float  # median of the segment before
    after_busbw_gbps: float  # median of the segment after
    change: float  # after / before - 1 (busbw)
    differences: list[str] = field(default_factory=list)


@dataclass
class Series:
    cluster: str
    op: str
    size_bytes: int
    scope: str
    group_size: int
    points: list[Point]
    change_points: list[ChangePoint]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


SERIES_SQL = """
SELECT r.run_id, CAST(r.created AS VARCHAR), r.path, rec.scope, rec.group_size, rec.busbw_gbps, rec.time_us, r.source,
       inp.busbw_gbps
FROM runs r JOIN records rec USING (run_id)
LEFT JOIN records inp ON inp.run_id = rec.run_id AND inp.in_place AND inp.op = rec.op AND inp.size_bytes = rec.size_bytes
  AND inp.scope = rec.scope AND inp.group_size = rec.group_size AND inp.dtype IS NOT DISTINCT FROM rec.dtype
  AND inp.direction IS NOT DISTINCT FROM rec.direction
WHERE r.cluster = ? AND rec.op = ? AND rec.size_bytes = ? AND NOT rec.in_place
  AND r.kind IN ('sweep', 'import') AND (? IS NULL OR rec.scope = ?)
ORDER BY rec.scope, rec.group_size, r.created, r.run_id
"""


def load_series(con: Any, cluster: str, op: str, size_bytes: int, scope: str | None) -> list[Series]:
    """One series per (scope, group size) that the cluster's runs measured for this op and size."""
    rows = con.execute(SERIES_SQL, [cluster, op, size_bytes, scope, scope]).fetchall()
    grouped: dict[tuple[str, int], list[Point]] = {}
    for run_id, created, path, row_scope, group_size, busbw, time_us, source, in_place_busbw in rows:
        grouped.setdefault((row_scope, group_size), []).append(
            Point(run_id, created, path, busbw, time_us, source, in_place_busbw)
        )
    return [
        Series(cluster, op, size_bytes, row_scope, group_size, points, [])
        for (row_scope, group_size), points in grouped.items()
    ]


def find_change_points(
    values: list[float],
    threshold: float = DEFAULT_THRESHOLD,
    penalty_per_log_n: float = PENALTY_PER_LOG_N,
    companion: list[Any] | None = None,
) -> list[int]:
    """0-based indices where a new segment of `values` starts (material changes in `values` only).
    `companion`, when given and complete, is a second series of the same runs that any real change
    moves too (the in-place row): it sharpens where the change is, not whether `values` changed."""
    signal = _log(values)
    if signal.size < 2 * MIN_SEGMENT:
        return []
    columns = [signal]
    if companion is not None and len(companion) == signal.size and all(value is not None for value in companion):
        columns.append(_log(companion))
    scaled = np.column_stack([(column - np.median(column)) / _noise_sigma(column) for column in columns])
    # KernelCPD with the linear kernel is PELT on the least-squares cost, in ruptures' C code
    algo = ruptures.KernelCPD(kernel="linear", min_size=MIN_SEGMENT, jump=1).fit(scaled)
    penalty = penalty_per_log_n * len(columns) * math.log(signal.size)
    ends = [int(end) for end in algo.predict(pen=penalty)[:-1]]
    bounds = [0] + ends + [signal.size]
    kept = []
    for i, start in enumerate(ends, 1):
        before = np.median(signal[bounds[i - 1] : start])
        after = np.median(signal[start : bounds[i + 1]])
        if abs(math.exp(after - before) - 1) > threshold:
            kept.append(start)
    return kept


def _log(values: Any) -> np.ndarray:
    return np.asarray(np.log(np.clip(np.asarray(values, dtype=float), 1e-12, None)))


def _noise_sigma(signal: np.ndarray) -> float:
    """Run-to-run noise: 1.4826 x median |x[i+1] - x[i]| / sqrt(2), floored so a flat series is not 0."""
    differences = np.abs(np.diff(signal))
    sigma = 1.4826 * float(np.median(differences)) / math.sqrt(2)
    return max(sigma, 1e-3)


def attach_change_points(series: Series, threshold: float = DEFAULT_THRESHOLD) -> Series:
    values = [point.busbw_gbps for point in series.points]
    starts = find_change_points(values, threshold, companion=[point.in_place_busbw_gbps for point in series.points])
    bounds = [0] + starts + [len(values)]
    series.change_points = []
    read = _InfoCache()
    for i, start in enumerate(starts, 1):
        before = float(np.median(values[bounds[i - 1] : start]))
        after = float(np.median(values[start : bounds[i + 1]]))
        index, differences = _attribute(series.points, start, read)
        series.change_points.append(
            ChangePoint(
                index=index + 1,
                detected_index=start + 1,
                run_id=series.points[index].run_id,
                before_busbw_gbps=before,
                after_busbw_gbps=after,
                change=after / before - 1,
                differences=differences,
            )
        )
    return series


def _attribute(points: list[Point], start: int, read: _InfoCache) -> tuple[int, list[str]]:
    """The change's first run and its run.json differences. The detector's estimate is only as
    sharp as the noise allows, so a run.json change within ATTRIBUTION_WINDOW runs of it, when
    there is exactly one, is taken as the change's run (the cause pins the place)."""
    low, high = max(1, start - ATTRIBUTION_WINDOW), min(len(points) - 1, start + ATTRIBUTION_WINDOW)
    changed = {i: read.differences(points[i - 1], points[i]) for i in range(low, high + 1)}
    changed = {i: found for i, found in changed.items() if found}
    index = next(iter(changed)) if len(changed) == 1 else start
    differences = changed.get(index) or ["no recorded difference in versions, environment, nodes, topology or options"]
    nearby = [f"also run {i + 1}: {'; '.join(found)}" for i, found in changed.items() if i != index]
    return index, differences + nearby


class _InfoCache:
    """run.json of each run, read once per history."""

    def __init__(self) -> None:
        self._infos: dict[str, RunInfo] = {}

    def differences(self, before: Point, after: Point) -> list[str]:
        try:
            return run_differences(self._info(before.path), self._info(after.path))
        except CommbenchError as exc:
            return [f"run.json not readable ({exc})"]

    def _info(self, path: str) -> RunInfo:
        if path not in self._infos:
            self._infos[path] = load_run(Path(path)).info
        return self._infos[path]
