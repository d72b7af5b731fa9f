"""Sweep collectives over message sizes, nccl-tests style, and write a run directory.

Each op is timed out-of-place and in-place over sizes min, min*f, ... max (K/M/G are binary),
then checked on known inputs on every rank. The table printed is nccl-tests' (size, count,
type, redop, root, then time/algbw/busbw/#wrong per variant); records.jsonl and records.csv
in <out>/<run_id>/ carry every field (see commbench/data/schema.py).

Definitions (as nccl-tests): size = one rank's larger buffer; algbw = size / time;
busbw = algbw x factor, factor 2(n-1)/n for all_reduce, (n-1)/n for all_gather,
reduce_scatter and all_to_all, 1 for sendrecv and broadcast. GB/s = 1e9 B/s.
time = median over iterations of the slowest rank.

Launching:
  commbench run --nproc 4                 4 local ranks (default: one per GPU, else 2 CPU ranks)
  torchrun --nproc-per-node 8 -m commbench run ...   under torchrun (RANK, WORLD_SIZE, ...)
  srun --ntasks-per-node 8 commbench run ...         under Slurm (SLURM_PROCID, SLURM_NTASKS, ...)
"""

from __future__ import annotations

import argparse

from commbench.data.rundir import run_id_argument
from commbench.data.store_location import db_path
from commbench.dtypes import MEASURED_DTYPES
from commbench.errors import UsageError
from commbench.measure.options import BACKENDS, RunConfig
from commbench.measure.worker import launch_driver
from commbench.ops import DEFAULT_OPS, MEASURED_OPS
from commbench.scopes import SWEPT_SCOPES, describe
from commbench.units import parse_size

HELP = "measure collectives over message sizes (nccl-tests style) and write a run directory"


def csv_list(choices):
    def parse(text: str) -> tuple[str, ...]:
        items = tuple(item.strip() for item in text.split(",") if item.strip())
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        if choices:
            bad = [item for item in items if item not in choices]
            if bad:
                raise argparse.ArgumentTypeError(f"unknown {bad[0]!r}; choose from {', '.join(choices)}")
        return items
    return parse


def size_arg(text: str) -> int:
    try:
        return parse_size(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_argument_group("what to measure")
    what.add_argument("--ops", type=csv_list(MEASURED_OPS), default=DEFAULT_OPS,
                      help=f"comma-separated ops (default: {','.join(DEFAULT_OPS)}; also broadcast, pingpong)")
    what.add_argument("-b", "--min-bytes", type=size_arg, default=8, help="smallest size, e.g. 8, 1K (default 8)")
    what.add_argument("-e", "--max-bytes", type=size_arg, default=64 << 20, help="largest size, e.g. 4M, 1G (default 64M)")
    what.add_argument("-f", "--step-factor", type=int, default=2, help="multiply the size by this each step (default 2)")
    what.add_argument("-d", "--dtype", default="float", help=f"element type: {', '.join(MEASURED_DTYPES)} (default float)")
    what.add_argument("--scopes", type=csv_list(SWEPT_SCOPES), default=None,
                      help=f"{describe(SWEPT_SCOPES)}; default: all that apply")
    what.add_argument("--pairwise", action="store_true",
                      help="instead of a sweep: ping-pong latency (at --min-bytes) and bandwidth (at --max-bytes) of every "
                           "pair of nodes and of ranks inside each node, in rounds that share no link; flags slow or lossy pairs")
    what.add_argument("--outlier-ratio", type=float, default=0.75,
                      help="--pairwise: flag a pair below this fraction of the best pair of its kind (between nodes, or "
                           "inside a node) as slow (default 0.75)")
    what.add_argument("--max-retransmit-pct", type=float, default=0.5, metavar="PCT",
                      help="--pairwise: flag a pair of nodes as lossy when their TCP re-sent more than PCT%% of its "
                           "segments while the pair was measured: loss that TCP repairs at nearly full bandwidth "
                           "(gloo, or NCCL over sockets; default 0.5)")
    how = parser.add_argument_group("how to measure")
    how.add_argument("--backend", choices=BACKENDS, default="auto", help="auto: NCCL when every rank has a GPU, else gloo")
    how.add_argument("-n", "--iters", type=int, default=None,
                     help="timed iterations per size, fixed as nccl-tests' -n (default: time until the median's 95%% "
                          "confidence interval is within --ci-pct, or the budget is spent; each row's stop_reason says which)")
    how.add_argument("-w", "--warmup", type=int, default=None,
                     help="warm-up iterations per size, fixed as nccl-tests' -w (default: until the median of the last "
                          "5 ops stops falling, at most 100 ops or --time-budget-ms)")
    how.add_argument("--time-budget-ms", type=float, default=20.0,
                     help="timed time per row when adapting iterations (default 20)")
    how.add_argument("--ci-pct", type=float, default=2.0,
                     help="adaptive timing stops when the median's 95%% confidence interval is within +-this %% (default 2)")
    how.add_argument("--min-iters", type=int, default=5, help="fewest iterations when adapting (default 5)")
    how.add_argument("--max-iters", type=int, default=200, help="most iterations when adapting (default 200)")
    how.add_argument("-c", "--check-iters", type=int, default=1, help="correctness checks per row (0: none, default 1)")
    how.add_argument("-G", "--cuda-graph", action="store_true", help="NCCL: capture each op in a CUDA graph")
    how.add_argument("--timeout", type=float, default=300.0, help="seconds before a stuck collective aborts the run (default 300)")
    add_moe_arguments(parser)
    add_where_arguments(parser)


def tokens_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(item) for item in text.split(",") if item.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers separated by commas, got {text!r}") from None


def add_moe_arguments(parser: argparse.ArgumentParser) -> None:
    """all_to_allv's routing model (commbench.modeling.routing; README 'MoE all-to-all')."""
    moe = parser.add_argument_group("all_to_allv routing (--ops all_to_allv)")
    moe.add_argument("--routing", default="uniform", metavar="SKEW",
                     help="uniform | zipf:S | dirichlet:ALPHA | file:PATH (JSON/CSV counts, source x destination "
                          "rank or x expert, or per expert) (default uniform)")
    moe.add_argument("--tokens", type=tokens_list, default=None, metavar="LIST",
                     help="tokens per rank, e.g. 64,256,1024 (default: one per size, size / (top-k x hidden x dtype bytes))")
    moe.add_argument("--hidden", type=int, default=4096, help="hidden size: elements per token (default 4096)")
    moe.add_argument("--top-k", type=int, default=2, help="experts per token (default 2)")
    moe.add_argument("--experts", type=int, default=8, help="experts (default 8)")
    moe.add_argument("--placement", default="block", help="experts over ranks: block | round_robin (default block)")
    moe.add_argument("--capacity-factor", type=float, default=0.0,
                     help="drop copies beyond C x tokens x top-k / experts per expert and source rank (default 0: dropless)")
    moe.add_argument("--routing-seed", type=int, default=0, help="seed of the routing draws (default 0)")


def add_where_arguments(parser: argparse.ArgumentParser) -> None:
    """Where ranks start and results land: shared by every command that launches ranks."""
    where = parser.add_argument_group("where")
    where.add_argument("--nproc", type=int, default=None, help="ranks to start on this machine when not under torchrun/srun")
    where.add_argument("--out", default="results", help="results folder (default results/)")
    where.add_argument("--run-id", default=None, type=run_id_argument,
                       help="name of the run directory: one name of letters, digits, . _ + - (default: time-host-random)")
    where.add_argument("--node-name", default=None, help="this node's name in the results (default: hostname)")
    where.add_argument("--cluster", default=None, metavar="NAME",
                       help="cluster name recorded in run.json (default: Slurm's cluster name, else the first "
                            "host's name without its number)")
    where.add_argument("--db", nargs="?", const="", default=None, metavar="FILE",
                       help="when the run ends, ingest it into this results database (no FILE: $COMMBENCH_DB, "
                            "else results/commbench.duckdb)")
    where.add_argument("--no-progress", action="store_true", help="no progress bar")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    return RunConfig(
        ops=args.ops, min_bytes=args.min_bytes, max_bytes=args.max_bytes, step_factor=args.step_factor,
        dtype=args.dtype, backend=args.backend, scopes=args.scopes, iters=args.iters, warmup=args.warmup, ci_pct=args.ci_pct,
        time_budget_ms=args.time_budget_ms, min_iters=args.min_iters, max_iters=args.max_iters,
        check_iters=args.check_iters, cuda_graph=args.cuda_graph, pairwise=args.pairwise,
        outlier_ratio=args.outlier_ratio, max_retransmit_pct=args.max_retransmit_pct, timeout_s=args.timeout,
        out_dir=args.out, run_id=args.run_id, node_name=args.node_name, progress=not args.no_progress,
        routing=args.routing, tokens=args.tokens, hidden=args.hidden, top_k=args.top_k, experts=args.experts,
        placement=args.placement, capacity_factor=args.capacity_factor, routing_seed=args.routing_seed,
        cluster=args.cluster, db=database_arg(args.db),
    ).validate()


def database_arg(value: str | None) -> str | None:
    """--db as an absolute path (ranks may start elsewhere); "" means the default database."""
    return None if value is None else str(db_path(value or None).resolve())


def main(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    return launch_driver("pairwise" if cfg.pairwise else "sweep", cfg, args.nproc)
