"""Per-iteration timing (host clock or CUDA events), and when to stop warming up and timing.

The rules are pure functions of the per-op times seen so far, so they are tested on synthetic
sequences (tests/test_stopping_rules.py) and every rank of a row applies them to figures agreed
over the control group:
  - warmed_up: the median of the last WARMUP_WINDOW ops no longer falls (within
    WARMUP_TOLERANCE) against the window before it; at most WARMUP_LIMIT ops or the time budget
    (counted at the fastest op's pace, as timing's).
  - median_ci_halfwidth: the relative half-width of the 95% distribution-free confidence interval
    of the median (order statistics of a binomial(n, 1/2)); timing stops when it is within
    --ci-pct ("converged") or the time budget / --max-iters is spent ("budget"), the budget counted
    at the fastest op's pace (count x fastest), so a stretch of slow ops cannot cut a row short, and
    at most WALL_SLACK x the budget of wall time (spent_budget). -n
    fixes the count ("fixed"), as nccl-tests does.
The statistics of the samples are commbench.data.records.Stats.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence

STOP_REASONS = ("converged", "budget", "fixed")
WARMUP_WINDOW = 5
WARMUP_TOLERANCE = 0.02  # a window 2% faster than the one before is still warming up
WARMUP_LIMIT = 100  # warm-up ops at most, whatever the trend
CI_Z = 1.96  # 95% two-sided
FIRST_CHUNK_MIN = 10  # the fewest timed ops before the interval is first looked at
WALL_SLACK = 5.0  # a loaded host may stretch a row's budget to this many times its wall time


def choose_iters(op_time_us: float, budget_ms: float, min_iters: int, max_iters: int) -> int:
    """As many iterations as fit the time budget, clamped: small messages get many, large few."""
    if op_time_us <= 0:
        return max_iters
    fitting = math.floor(budget_ms * 1000.0 / op_time_us)
    return max(min_iters, min(max_iters, fitting))


def warmed_up(times_us: Sequence[float], window: int = WARMUP_WINDOW, tolerance: float = WARMUP_TOLERANCE) -> bool:
    """True once the median of the last `window` ops is not `tolerance` below the window's before it."""
    if len(times_us) < 2 * window:
        return False
    last = statistics.median(times_us[-window:])
    before = statistics.median(times_us[-2 * window : -window])
    return last >= before * (1.0 - tolerance)


def median_ci_halfwidth(times_us: Sequence[float]) -> float:
    """Half the width of the median's 95% confidence interval, relative to the median (inf while
    too few samples bound it: fewer than 6). Order statistics, so no distribution is assumed."""
    n = len(times_us)
    if n < 6:
        return math.inf
    ordered = sorted(times_us)
    half_spread = CI_Z * math.sqrt(n) / 2.0
    # ranks floor(n/2 - z sqrt(n)/2) and ceil(1 + n/2 + z sqrt(n)/2), 1-based, as 0-based indices
    low = max(0, math.floor(n / 2.0 - half_spread) - 1)
    high = min(n - 1, math.ceil(1 + n / 2.0 + half_spread) - 1)
    median = statistics.median(ordered)
    return (ordered[high] - ordered[low]) / (2.0 * median) if median > 0 else 0.0


def spent_budget(times_us: Sequence[float], count: int) -> float:
    """How much of the time budget `count` ops have spent (us): at the fastest op's pace, so a
    stretch of slow ops (descheduled for milliseconds on a loaded host) cannot end a row after a
    handful of samples timed inside it, where a fixed count (nccl-tests' -n) samples mostly outside
    it; but never less than the wall time / WALL_SLACK, so such a host stretches a row by at most that."""
    return max(min(times_us) * count, sum(times_us) / WALL_SLACK)


def next_chunk(done: int, op_time_us: float, elapsed_us: float, budget_ms: float, max_iters: int) -> int:
    """How many timed ops to add before the interval is looked at again: as many as already done
    (so looking costs O(log n) control round trips), no more than the budget and --max-iters allow."""
    left_by_budget = math.floor((budget_ms * 1000.0 - elapsed_us) / op_time_us) if op_time_us > 0 else max_iters
    return max(0, min(max(done, 1), left_by_budget, max_iters - done))


def stop_reason(
    halfwidth: float, ci_pct: float, done: int, elapsed_us: float, budget_ms: float, min_iters: int, max_iters: int
) -> str | None:
    """Why timing stops now ("converged" / "budget"), or None to time more."""
    if done < min_iters:
        return None
    if halfwidth <= ci_pct / 100.0:
        return "converged"
    if done >= max_iters or elapsed_us >= budget_ms * 1000.0:
        return "budget"
    return None


class HostTimer:
    """perf_counter around each op; `sync` waits for the op (gloo ops are synchronous already)."""

    kind = "host"

    def __init__(self, sync: Callable[[], None] | None = None):
        self.sync = sync

    def time(self, op: Callable[[], None], iters: int) -> list[float]:
        # two loops, so a synchronous backend pays no no-op call per iteration
        clock, sync = time.perf_counter, self.sync
        samples = [0.0] * iters
        if sync is None:
            for i in range(iters):
                start = clock()
                op()
                samples[i] = clock() - start
        else:
            for i in range(iters):
                start = clock()
                op()
                sync()
                samples[i] = clock() - start
        return [s * 1e6 for s in samples]


class CudaEventTimer:
    """CUDA events around each op on the current stream; one synchronisation after the loop,
    so back-to-back ops are timed as nccl-tests times them, without host gaps in between."""

    kind = "cuda_event"

    def __init__(self, torch_module):
        self.torch = torch_module

    def time(self, op: Callable[[], None], iters: int) -> list[float]:
        cuda = self.torch.cuda
        events = [(cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)) for _ in range(iters)]
        for start, end in events:
            start.record()
            op()
            end.record()
        cuda.synchronize()
        return [start.elapsed_time(end) * 1000.0 for start, end in events]
