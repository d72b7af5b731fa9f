"""The run options of every measuring command: one dataclass the CLI fills, the launcher ships to every rank as JSON.

RunConfig holds the options of `commbench run` (sweep and pairwise). OverlapConfig, for
`commbench overlap`, extends it, so the session, run directory and launcher take it unchanged;
only the defaults differ (fewer, larger sizes; a fixed iteration count, because each iteration
carries a whole GEMM), the ops are limited to the four that training overlaps, and the GEMM is added.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from commbench.collectives import DEFAULT_OPS, check_op_name
from commbench.dtypes import DTYPES, canonical_dtype, check_gloo_supports
from commbench.errors import UsageError
from commbench.scopes import SWEPT_SCOPES

BACKENDS = ("auto", "nccl", "gloo")


@dataclass
class RunConfig:
    ops: tuple[str, ...] = DEFAULT_OPS
    min_bytes: int = 8
    max_bytes: int = 64 << 20
    step_factor: int = 2
    dtype: str = "float"
    backend: str = "auto"
    scopes: tuple[str, ...] | None = None  # None: every scope that applies to the placement
    iters: int | None = None  # None: time until the median's CI is within ci_pct, or the budget is spent
    warmup: int | None = None  # None: warm up until the per-op time stops falling (commbench.measure.timing)
    time_budget_ms: float = 20.0
    ci_pct: float = 2.0  # adaptive timing stops once the median's 95% CI is within +-ci_pct %
    min_iters: int = 5
    max_iters: int = 200
    check_iters: int = 1
    cuda_graph: bool = False
    pairwise: bool = False
    outlier_ratio: float = 0.75
    max_retransmit_pct: float = 0.5
    timeout_s: float = 300.0
    out_dir: str = "results"
    run_id: str | None = None
    node_name: str | None = None
    cluster: str | None = None  # None: Slurm's cluster name, else the hostname pattern (data/cluster_name.py)
    db: str | None = None  # a results database to ingest the run into when it ends
    progress: bool = True
    argv: list[str] = field(default_factory=list)
    # all_to_allv's routing model (commbench.modeling.routing); tokens per rank is its size axis
    routing: str = "uniform"
    tokens: tuple[int, ...] | None = None  # None: from the byte sizes, tokens = size / (top_k x hidden x dtype)
    hidden: int = 4096
    top_k: int = 2
    experts: int = 8
    placement: str = "block"
    capacity_factor: float = 0.0  # 0: dropless
    routing_seed: int = 0

    def validate(self) -> RunConfig:
        if not self.ops:
            raise UsageError("--ops is empty; name at least one op")
        self.ops = tuple(check_op_name(op) for op in self.ops)
        self.dtype = canonical_dtype(self.dtype)
        if self.backend not in BACKENDS:
            raise UsageError(f"unknown backend {self.backend!r}; choose from {', '.join(BACKENDS)}")
        if self.backend == "gloo":
            check_gloo_supports(self.dtype, "--backend gloo")
        if self.min_bytes > self.max_bytes:
            raise UsageError(f"--min-bytes ({self.min_bytes}) is larger than --max-bytes ({self.max_bytes})")
        if self.max_bytes <= 0:
            raise UsageError("--max-bytes must be positive")
        if self.step_factor < 2:
            raise UsageError("--step-factor must be 2 or more")
        for name in ("warmup", "check_iters"):
            if (getattr(self, name) or 0) < 0:
                raise UsageError(f"--{name.replace('_', '-')} cannot be negative")
        if self.iters is not None and self.iters < 1:
            raise UsageError("--iters must be at least 1")
        if not 1 <= self.min_iters <= self.max_iters:
            raise UsageError("--min-iters must be at least 1 and at most --max-iters")
        if not 0 < self.ci_pct <= 100:  # also refuses nan
            raise UsageError(f"--ci-pct must be a percentage above 0 and at most 100 (got {self.ci_pct})")
        if not 0 < self.outlier_ratio < 1:
            raise UsageError("--outlier-ratio must be between 0 and 1")
        if not 0 <= self.max_retransmit_pct <= 100:  # also refuses nan
            raise UsageError(f"--max-retransmit-pct must be a percentage between 0 and 100 (got {self.max_retransmit_pct})")
        for flag, value, most in (("--time-budget-ms", self.time_budget_ms, 3_600_000), ("--timeout", self.timeout_s, 86_400)):
            if not 0 < value <= most:  # also refuses nan, which every comparison fails
                raise UsageError(f"{flag} must be a positive number of at most {most} (got {value})")
        if self.scopes is not None:
            for scope in self.scopes:
                if scope not in SWEPT_SCOPES:
                    raise UsageError(f"unknown scope {scope!r}; choose from {', '.join(SWEPT_SCOPES)}")
        # the routing options are checked even when all_to_allv is not asked for: a typo in them
        # is still a typo, and refusing it costs nothing while measuring for minutes without them does
        self.moe_shape(tokens=1, ranks=1)
        return self

    def moe_shape(self, tokens: int, ranks: int):
        """The routing model's inputs for one all_to_allv row (UsageError if they cannot be)."""
        from commbench.modeling.routing import MoeShape, parse_routing

        parse_routing(self.routing)
        if self.tokens is not None and (not self.tokens or min(self.tokens) < 1):
            raise UsageError("--tokens must list whole numbers of at least 1")
        return MoeShape(tokens=tokens, hidden=self.hidden, elt_bytes=DTYPES[self.dtype].bytes, top_k=self.top_k,
                        experts=self.experts, ranks=ranks, placement=self.placement,
                        capacity_factor=self.capacity_factor or None, seed=self.routing_seed)

    def check_moe_ranks(self, world_size: int) -> None:
        """all_to_allv on the world group: experts to place, and a routing file's matrix of that size."""
        if "all_to_allv" not in self.ops:
            return
        from commbench.modeling.routing import parse_routing, token_matrix

        token_matrix(parse_routing(self.routing), self.moe_shape(tokens=1, ranks=world_size))

    def tokens_axis(self) -> list[int]:
        """all_to_allv's tokens per rank: --tokens, else one per byte size (a rank's uniform send bytes)."""
        if self.tokens:
            return sorted(set(self.tokens))
        per_token = self.top_k * self.hidden * DTYPES[self.dtype].bytes
        return sorted({size // per_token for size in self.sizes() if size >= per_token})

    def sizes(self) -> list[int]:
        """min, min*f, min*f^2 ... up to max (nccl-tests -b/-e/-f); a zero minimum starts at 1 byte."""
        sizes, size = [], max(self.min_bytes, 1)
        while size <= self.max_bytes:
            sizes.append(size)
            size *= self.step_factor
        return sizes

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        data = json.loads(text)
        for key in ("ops", "scopes", "tokens"):
            if data.get(key) is not None:
                data[key] = tuple(data[key])
        return cls(**data)


OVERLAP_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


@dataclass
class OverlapConfig(RunConfig):
    ops: tuple[str, ...] = OVERLAP_OPS
    min_bytes: int = 1 << 20
    max_bytes: int = 64 << 20
    step_factor: int = 4
    scopes: tuple[str, ...] | None = ("world",)
    iters: int | None = 10
    warmup: int | None = 2
    gemm_size: int = 1024  # M = N = K

    def validate(self) -> OverlapConfig:
        super().validate()
        bad = [op for op in self.ops if op not in OVERLAP_OPS]
        if bad:
            raise UsageError(f"op {bad[0]!r} is not measured by overlap; choose from {', '.join(OVERLAP_OPS)}")
        if self.iters is None:
            raise UsageError("--iters must be given: overlap does not adapt the iteration count")
        if self.warmup is None:
            raise UsageError("--warmup must be given: overlap does not adapt the warm-up")
        if self.gemm_size < 1:
            raise UsageError(f"--gemm-size must be at least 1 (got {self.gemm_size})")
        if self.scopes != ("world",):
            raise UsageError("overlap measures the world scope only")
        return self
