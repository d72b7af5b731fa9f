"""Sets of time intervals (microseconds) with union, intersection and difference.

The overlap figures are measures of such sets: "time when compute and communication both run" is the
length of (compute ∩ communication), whatever the number of streams or threads each runs on. The
sets are kept as sorted, disjoint [start, end) intervals in two numpy arrays so that traces with
millions of kernels stay fast.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike


class IntervalSet:
    """A union of half-open intervals, stored sorted and disjoint (touching intervals are joined)."""

    __slots__ = ("ends", "starts")

    def __init__(self, starts: np.ndarray, ends: np.ndarray):
        # Callers outside this module go through union_of(), which sorts and merges.
        self.starts = starts
        self.ends = ends

    @classmethod
    def union_of(cls, starts: ArrayLike, ends: ArrayLike) -> IntervalSet:
        """The union of possibly overlapping, unsorted intervals; empty ones are dropped."""
        starts = np.asarray(starts, dtype=float)
        ends = np.asarray(ends, dtype=float)
        nonempty = ends > starts
        starts, ends = starts[nonempty], ends[nonempty]
        if not len(starts):
            return cls.empty()
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        # An interval opens a new run unless it starts inside (or at the end of) everything before.
        reach = np.maximum.accumulate(ends)
        opens_run = np.ones(len(starts), dtype=bool)
        opens_run[1:] = starts[1:] > reach[:-1]
        closes_run = np.append(opens_run[1:], True)
        return cls(starts[opens_run], reach[closes_run])

    @classmethod
    def empty(cls) -> IntervalSet:
        return cls(np.empty(0), np.empty(0))

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def length(self) -> float:
        """Total time covered."""
        return float(np.sum(self.ends - self.starts))

    def clip(self, lo: float, hi: float) -> IntervalSet:
        """The part of the set inside [lo, hi)."""
        first = np.searchsorted(self.ends, lo, side="right")
        last = np.searchsorted(self.starts, hi, side="left")
        starts = np.maximum(self.starts[first:last], lo)
        ends = np.minimum(self.ends[first:last], hi)
        inside = ends > starts
        return IntervalSet(starts[inside], ends[inside])

    def __or__(self, other: IntervalSet) -> IntervalSet:
        return _combine(self, other, np.logical_or)

    def __and__(self, other: IntervalSet) -> IntervalSet:
        return _combine(self, other, np.logical_and)

    def __sub__(self, other: IntervalSet) -> IntervalSet:
        return _combine(self, other, lambda in_self, in_other: in_self & ~in_other)

    def __repr__(self) -> str:
        pairs = ", ".join(f"[{s:g}, {e:g})" for s, e in zip(self.starts, self.ends))
        return f"IntervalSet({pairs})"


def _combine(a: IntervalSet, b: IntervalSet, keep: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> IntervalSet:
    """Sweep the boundaries of both sets; keep(in_a, in_b) says which elementary segments survive."""
    points = np.concatenate([a.starts, a.ends, b.starts, b.ends])
    na, nb = len(a), len(b)
    step_a = np.concatenate([np.ones(na), -np.ones(na), np.zeros(2 * nb)])
    step_b = np.concatenate([np.zeros(2 * na), np.ones(nb), -np.ones(nb)])
    order = np.argsort(points, kind="stable")
    points = points[order]
    # Each set is disjoint, so these counts are 0 or 1 on every segment of non-zero length.
    in_a = np.cumsum(step_a[order]) > 0
    in_b = np.cumsum(step_b[order]) > 0
    kept = keep(in_a, in_b)[:-1]
    return IntervalSet.union_of(points[:-1][kept], points[1:][kept])
