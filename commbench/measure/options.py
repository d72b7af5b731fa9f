"""The run options of every measuring command: one dataclass the CLI fills, the launcher ships to every rank as JSON.

RunConfig holds the options of `commbench run` (sweep and pairwise). OverlapConfig, for
`commbench overlap`, extends it, so the session, run directory and launcher take it unchanged;
only the defaults differ (fewer, larger sizes; a fixed iteration count, because each iteration
carries a whole GEMM), the ops are limited to the four that training overlaps, and the GEMM is added.
"""

from __future__ import annotations

import json
from dataclasses import Field, asdict, dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from commbench.collectives import DEFAULT_OPS, check_op_name
from commbench.config_options import csv_list, documented, size_arg, tokens_list
from commbench.data.rundir import run_id_argument
from commbench.dtypes import DTYPES, MEASURED_DTYPES, canonical_dtype, check_gloo_supports
from commbench.errors import UsageError
from commbench.ops import MEASURED_OPS
from commbench.scopes import SWEPT_SCOPES, describe
from commbench.units import format_size

if TYPE_CHECKING:  # the routing model pulls in numpy; `commbench run --help` need not
    from commbench.modeling.routing import MoeShape, Routing

BACKENDS = ("auto", "nccl", "gloo")


# the --help sections of `commbench run`, one per concern
SWEEP, PAIRWISE, TIMING, ROUTING, OUTPUT = (
    "what to measure",
    "pairwise (--pairwise)",
    "how to measure",
    "all_to_allv routing (--ops all_to_allv)",
    "where results land",
)


@dataclass
class RunConfig:
    """The options of `commbench run`; each field's doc is its --help (commbench/config_options.py)."""

    ops: tuple[str, ...] = documented(
        "comma-separated ops; also broadcast, pingpong, all_to_allv",
        DEFAULT_OPS,
        group=SWEEP,
        parse=csv_list(MEASURED_OPS),
    )
    min_bytes: int = documented(
        "smallest size, e.g. 8, 1K", 8, flags=("-b", "--min-bytes"), group=SWEEP, parse=size_arg, shown=format_size
    )
    max_bytes: int = documented(
        "largest size, e.g. 4M, 1G",
        64 << 20,
        flags=("-e", "--max-bytes"),
        group=SWEEP,
        parse=size_arg,
        shown=format_size,
    )
    step_factor: int = documented(
        "multiply the size by this each step", 2, flags=("-f", "--step-factor"), group=SWEEP, parse=int
    )
    dtype: str = documented(
        f"element type: {', '.join(MEASURED_DTYPES)}", "float", flags=("-d", "--dtype"), group=SWEEP
    )
    scopes: tuple[str, ...] | None = documented(
        describe(SWEPT_SCOPES), None, group=SWEEP, parse=csv_list(SWEPT_SCOPES), shown="all that apply"
    )
    pairwise: bool = documented(
        "instead of a sweep: ping-pong latency (at --min-bytes) and bandwidth (at --max-bytes) of every pair of "
        "nodes and of ranks inside each node, in rounds that share no link; flags slow or lossy pairs",
        False,
        group=PAIRWISE,
    )
    outlier_ratio: float = documented(
        "flag a pair below this fraction of the best pair of its kind (between nodes, or inside a node) as slow",
        0.75,
        group=PAIRWISE,
        parse=float,
    )
    max_retransmit_pct: float = documented(
        "flag a pair of nodes as lossy when their TCP re-sent more than PCT% of its segments while the pair was "
        "measured: loss that TCP repairs at nearly full bandwidth (gloo, or NCCL over sockets)",
        0.5,
        group=PAIRWISE,
        parse=float,
        metavar="PCT",
    )
    backend: str = documented("auto: NCCL when every rank has a GPU, else gloo", "auto", group=TIMING, choices=BACKENDS)
    iters: int | None = documented(
        "timed iterations per size, fixed as nccl-tests' -n",
        None,
        flags=("-n", "--iters"),
        group=TIMING,
        parse=int,
        shown="time until the median's 95% confidence interval is within --ci-pct, or the budget is "
        "spent; each row's stop_reason says which",
    )
    warmup: int | None = documented(
        "warm-up iterations per size, fixed as nccl-tests' -w",
        None,
        flags=("-w", "--warmup"),
        group=TIMING,
        parse=int,
        shown="until the median of the last 5 ops stops falling, at most 100 ops or --time-budget-ms",
    )
    time_budget_ms: float = documented("timed time per row when adapting iterations", 20.0, group=TIMING, parse=float)
    ci_pct: float = documented(
        "adaptive timing stops when the median's 95% confidence interval is within +-this %",
        2.0,
        group=TIMING,
        parse=float,
    )
    min_iters: int = documented("fewest iterations when adapting", 5, group=TIMING, parse=int)
    max_iters: int = documented("most iterations when adapting", 200, group=TIMING, parse=int)
    check_iters: int = documented(
        "correctness checks per row (0: none)", 1, flags=("-c", "--check-iters"), group=TIMING, parse=int
    )
    cuda_graph: bool = documented(
        "NCCL: capture each op in a CUDA graph", False, flags=("-G", "--cuda-graph"), group=TIMING
    )
    timeout_s: float = documented(
        "seconds before a stuck collective aborts the run",
        300.0,
        flags=("--timeout",),
        metavar="S",
        group=TIMING,
        parse=float,
    )
    # all_to_allv's routing model (commbench.modeling.routing); tokens per rank is its size axis
    routing: str = documented(
        "uniform | zipf:S | dirichlet:ALPHA | file:PATH (JSON/CSV counts, source x destination rank or x expert, "
        "or per expert)",
        "uniform",
        group=ROUTING,
        metavar="SKEW",
    )
    tokens: tuple[int, ...] | None = documented(
        "tokens per rank, e.g. 64,256,1024",
        None,
        group=ROUTING,
        parse=tokens_list,
        metavar="LIST",
        shown="one per size, size / (top-k x hidden x dtype bytes)",
    )
    hidden: int = documented("hidden size: elements per token", 4096, group=ROUTING, parse=int)
    top_k: int = documented("experts per token", 2, group=ROUTING, parse=int)
    experts: int = documented("experts", 8, group=ROUTING, parse=int)
    placement: str = documented("experts over ranks: block | round_robin", "block", group=ROUTING)
    capacity_factor: float = documented(
        "drop copies beyond C x tokens x top-k / experts per expert and source rank (0: dropless)",
        0.0,
        group=ROUTING,
        parse=float,
    )
    routing_seed: int = documented("seed of the routing draws", 0, group=ROUTING, parse=int)
    out_dir: str = documented("results folder", "results", flags=("--out",), group=OUTPUT)
    run_id: str | None = documented(
        "name of the run directory: one name of letters, digits, . _ + -",
        None,
        group=OUTPUT,
        parse=run_id_argument,
        shown="time-host-random",
    )
    node_name: str | None = documented("this node's name in the results", None, group=OUTPUT, shown="hostname")
    cluster: str | None = documented(
        "cluster name recorded in run.json",
        None,
        group=OUTPUT,
        metavar="NAME",
        shown="Slurm's cluster name, else the first host's name without its number (data/cluster_name.py)",
    )
    db: str | None = documented(
        "when the run ends, ingest it into this results database (no FILE: $COMMBENCH_DB, else "
        "results/commbench.duckdb)",
        None,
        group=OUTPUT,
        metavar="FILE",
        argparse={"nargs": "?", "const": ""},
    )
    progress: bool = documented("no progress bar", True, flags=("--no-progress",), group=OUTPUT)
    argv: list[str] = field(default_factory=list)  # the command line, for run.json (not an option)

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
            raise UsageError(
                f"--max-retransmit-pct must be a percentage between 0 and 100 (got {self.max_retransmit_pct})"
            )
        for flag, value, most in (
            ("--time-budget-ms", self.time_budget_ms, 3_600_000),
            ("--timeout", self.timeout_s, 86_400),
        ):
            if not 0 < value <= most:  # also refuses nan, which every comparison fails
                raise UsageError(f"{flag} must be a positive number of at most {most} (got {value})")
        if self.scopes is not None:
            for scope in self.scopes:
                if scope not in SWEPT_SCOPES:
                    raise UsageError(f"unknown scope {scope!r}; choose from {', '.join(SWEPT_SCOPES)}")
        # the routing options are checked even when all_to_allv is not asked for: a typo in them
        # is still a typo, and refusing it costs nothing while measuring for minutes without them does
        _ = self.routing_model
        self.moe_shape(tokens=1, ranks=1)
        return self

    @cached_property
    def routing_model(self) -> Routing:
        """--routing parsed, once per config (a file: routing is read once, not once per row)."""
        from commbench.modeling.routing import parse_routing

        return parse_routing(self.routing)

    def moe_shape(self, tokens: int, ranks: int) -> MoeShape:
        """The routing model's inputs for one all_to_allv row (UsageError if they cannot be)."""
        from commbench.modeling.routing import MoeShape

        if self.tokens is not None and (not self.tokens or min(self.tokens) < 1):
            raise UsageError("--tokens must list whole numbers of at least 1")
        return MoeShape(
            tokens=tokens,
            hidden=self.hidden,
            elt_bytes=DTYPES[self.dtype].bytes,
            top_k=self.top_k,
            experts=self.experts,
            ranks=ranks,
            placement=self.placement,
            capacity_factor=self.capacity_factor or None,
            seed=self.routing_seed,
        )

    def check_moe_ranks(self, world_size: int) -> None:
        """all_to_allv on the world group: experts to place, and a routing file's matrix of that size."""
        if "all_to_allv" not in self.ops:
            return
        from commbench.modeling.routing import token_matrix

        token_matrix(self.routing_model, self.moe_shape(tokens=1, ranks=world_size))

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
# the OverlapConfig fields `commbench overlap` takes from its command line, besides the output ones
OVERLAP_OPTIONS = (
    "ops",
    "min_bytes",
    "max_bytes",
    "step_factor",
    "dtype",
    "gemm_size",
    "backend",
    "iters",
    "warmup",
    "timeout_s",
)


def is_overlap_option(f: Field[Any]) -> bool:
    """Whether `commbench overlap` offers this OverlapConfig field as an option."""
    return f.name in OVERLAP_OPTIONS or f.metadata.get("group") == OUTPUT


@dataclass
class OverlapConfig(RunConfig):
    """The options of `commbench overlap`: RunConfig's, with overlap's own defaults and help where
    they differ; OVERLAP_OPTIONS are the ones its command line offers (the rest keep their defaults)."""

    ops: tuple[str, ...] = documented(
        "comma-separated ops", OVERLAP_OPS, group=SWEEP, parse=csv_list(OVERLAP_OPS), shown=",".join
    )
    min_bytes: int = documented(
        "smallest message size", 1 << 20, flags=("-b", "--min-bytes"), group=SWEEP, parse=size_arg, shown=format_size
    )
    max_bytes: int = documented(
        "largest message size", 64 << 20, flags=("-e", "--max-bytes"), group=SWEEP, parse=size_arg, shown=format_size
    )
    step_factor: int = documented(
        "multiply the size by this each step", 4, flags=("-f", "--step-factor"), group=SWEEP, parse=int
    )
    scopes: tuple[str, ...] | None = ("world",)  # not an option: overlap measures the world group only
    iters: int | None = documented(
        "timed iterations of each phase per size", 10, flags=("-n", "--iters"), group=TIMING, parse=int
    )
    warmup: int | None = documented(
        "untimed iterations of both at once per size", 2, flags=("-w", "--warmup"), group=TIMING, parse=int
    )
    gemm_size: int = documented("M = N = K of the GEMM; bfloat16 on GPU, float32 on CPU", 1024, group=SWEEP, parse=int)

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


CALIBRATE_DEVICES = ("auto", "cpu", "cuda")
# the --help sections of `commbench calibrate`
CALIBRATE_WHAT, CALIBRATE_OUTPUT = "what to measure", "output"


@dataclass(frozen=True)
class CalibrateConfig:
    """The options of `commbench calibrate`; each field's doc is its --help. The list options stay
    text here: commands/calibrate.py checks them against the grid's limits (off the nodes too, for
    `commbench submit --command calibrate`)."""

    device: str = documented(
        "cuda, cpu, or auto: the GPU if there is one", "auto", group=CALIBRATE_WHAT, choices=CALIBRATE_DEVICES
    )
    dtype: str | None = documented(
        "comma-separated GEMM dtypes: fp32, bf16, fp16",
        None,
        group=CALIBRATE_WHAT,
        metavar="LIST",
        shown="bf16,fp16 on CUDA, fp32 on CPU",
    )
    quick: bool = documented(
        "a small grid (about 10 s on an idle 2-core CPU; the full grid takes minutes)", False, group=CALIBRATE_WHAT
    )
    gemm_dims: str | None = documented(
        "values M, N and K each take (the grid is every combination), e.g. 256,1024,4096",
        None,
        group=CALIBRATE_WHAT,
        metavar="LIST",
        shown="the grid's",
    )
    gemm_shapes: str | None = documented(
        "extra GEMM shapes to time", None, group=CALIBRATE_WHAT, metavar="MxNxK,...", shown="none"
    )
    attention: str | None = documented(
        "attention shapes: sequence x heads x head dim, e.g. 2048x16x128",
        None,
        group=CALIBRATE_WHAT,
        metavar="SxHxD,...",
        shown="the grid's",
    )
    repeats: int | None = documented(
        "timed runs per figure (its median is kept)", None, group=CALIBRATE_WHAT, parse=int, shown="the grid's"
    )
    threads: int | None = documented("CPU threads torch uses", None, group=CALIBRATE_WHAT, parse=int, shown="torch's")
    fp8: bool = documented(
        "also time the GEMM grid in FP8 (torch._scaled_mm, E4M3, per-tensor scales): the processor JSON gains "
        "peak_flops_fp8 and an fp8 gemm_surface, which price --compute-precision fp8-*",
        False,
        group=CALIBRATE_WHAT,
    )
    peak_flops: float | None = documented(
        "datasheet peak FLOP/s to take fractions of",
        None,
        group=CALIBRATE_WHAT,
        parse=float,
        shown="the fastest GEMM measured",
    )
    out: str | None = documented(
        "where to write: a file, or a folder (FOLDER/processor-HOST.json)",
        None,
        group=CALIBRATE_OUTPUT,
        metavar="FILE|DIR",
        shown="processor-HOST.json",
    )
    json: bool = documented("print the processor JSON on stdout", False, group=CALIBRATE_OUTPUT)
    progress: bool = documented("no progress bar", True, flags=("--no-progress",), group=CALIBRATE_OUTPUT)
