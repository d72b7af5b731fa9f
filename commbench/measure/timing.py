"""Per-iteration timing (host clock or CUDA events) and adaptive iteration counts.

The statistics of the samples are commbench.data.records.Stats.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable


def choose_iters(op_time_us: float, budget_ms: float, min_iters: int, max_iters: int) -> int:
    """As many iterations as fit the time budget, clamped: small messages get many, large few."""
    if op_time_us <= 0:
        return max_iters
    fitting = math.floor(budget_ms * 1000.0 / op_time_us)
    return max(min_iters, min(max_iters, fitting))


class HostTimer:
    """perf_counter around each op; `sync` waits for the op (gloo ops are synchronous already)."""

    kind = "host"

    def __init__(self, sync: Callable[[], None] = lambda: None):
        self.sync = sync

    def time(self, op: Callable[[], None], iters: int) -> list[float]:
        samples = []
        for _ in range(iters):
            start = time.perf_counter()
            op()
            self.sync()
            samples.append((time.perf_counter() - start) * 1e6)
        return samples


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
