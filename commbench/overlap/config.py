"""Options of `commbench overlap`: the sweep's options plus the GEMM, shipped to every rank as JSON.

OverlapConfig extends RunConfig, so the session, run directory and launcher code of the sweep take
it unchanged; only the defaults differ (fewer, larger sizes; a fixed iteration count, because each
iteration carries a whole GEMM) and the ops are limited to the four that training overlaps.
"""

from __future__ import annotations

from dataclasses import dataclass

from commbench.config import RunConfig
from commbench.errors import UsageError

OVERLAP_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


@dataclass
class OverlapConfig(RunConfig):
    ops: tuple[str, ...] = OVERLAP_OPS
    min_bytes: int = 1 << 20
    max_bytes: int = 64 << 20
    step_factor: int = 4
    scopes: tuple[str, ...] | None = ("world",)
    iters: int | None = 10
    gemm_size: int = 1024  # M = N = K

    def validate(self) -> "OverlapConfig":
        super().validate()
        bad = [op for op in self.ops if op not in OVERLAP_OPS]
        if bad:
            raise UsageError(f"op {bad[0]!r} is not measured by overlap; choose from {', '.join(OVERLAP_OPS)}")
        if self.iters is None:
            raise UsageError("--iters must be given: overlap does not adapt the iteration count")
        if self.gemm_size < 1:
            raise UsageError(f"--gemm-size must be at least 1 (got {self.gemm_size})")
        if self.scopes != ("world",):
            raise UsageError("overlap measures the world scope only")
        return self
