"""Measure how well a GEMM and a collective overlap, and how much each slows the other.

For each op (all_reduce, all_gather, reduce_scatter, all_to_all over all ranks) and message size
(min, min*f, ... max; K/M/G binary), every rank times a square GEMM (M = N = K = --gemm-size)
alone, the collective alone, and both started together: on GPU the GEMM on its own CUDA stream
beside the NCCL collective (CUDA events), on CPU the GEMM in a thread beside the gloo
collective (host clock). After timing, one more overlapped iteration on known inputs is checked.

Columns of the table (medians over --iters iterations of the rank slowest at both at once):
  compute            the GEMM alone (us)
  comm               the collective alone (us)
  both               both started together, until the later one ends (us)
  overlap            (compute + comm - both) / min(compute, comm), clamped to [0, 1]: 100% means
                     the shorter one hid completely behind the longer, 0% that they might as well
                     have run one after the other
  compute slowdown   the GEMM's own duration beside the collective / alone (1.000 = unaffected)
  comm slowdown      the collective's own duration beside the GEMM / alone
  #wrong             wrong elements of the collective run beside the GEMM, over all ranks

records.jsonl and records.csv in <out>/<run_id>/ (run kind "overlap") carry every figure and the
collective's own timing fields as a sweep writes them; the fields are documented in
commbench/data/overlap.py. `commbench plan --overlap-run <out>/<run_id>` charges the step
model the slowdown measured here instead of the default (Calculon's, modeling/cluster.py): the GEMM's extra time per
second the collective ran beside it, at each op's largest size, median over the ops
(commbench/data/slowdown.py).

Launching: --nproc N ranks on this machine, or one rank per process under torchrun or srun.
"""

from __future__ import annotations

import argparse

from commbench.commands.run import add_where_arguments, database_arg
from commbench.config_options import config_values, csv_list, size_arg
from commbench.dtypes import MEASURED_DTYPES
from commbench.measure.options import BACKENDS, OVERLAP_OPS, OverlapConfig, RunConfig
from commbench.measure.worker import launch_driver

HELP = "time a GEMM and a collective alone and at once: overlap achieved and mutual slowdown"

_DEFAULTS = OverlapConfig()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_argument_group("what to measure")
    what.add_argument(
        "--ops",
        type=csv_list(OVERLAP_OPS),
        default=OVERLAP_OPS,
        help=f"comma-separated ops (default: {','.join(OVERLAP_OPS)})",
    )
    what.add_argument(
        "-b", "--min-bytes", type=size_arg, default=_DEFAULTS.min_bytes, help="smallest message size (default 1M)"
    )
    what.add_argument(
        "-e", "--max-bytes", type=size_arg, default=_DEFAULTS.max_bytes, help="largest message size (default 64M)"
    )
    what.add_argument(
        "-f",
        "--step-factor",
        type=int,
        default=_DEFAULTS.step_factor,
        help=f"multiply the size by this each step (default {_DEFAULTS.step_factor})",
    )
    what.add_argument(
        "-d", "--dtype", default="float", help=f"collective element type: {', '.join(MEASURED_DTYPES)} (default float)"
    )
    what.add_argument(
        "--gemm-size",
        type=int,
        default=_DEFAULTS.gemm_size,
        help=f"M = N = K of the GEMM (default {_DEFAULTS.gemm_size}); bfloat16 on GPU, float32 on CPU",
    )
    how = parser.add_argument_group("how to measure")
    how.add_argument(
        "--backend", choices=BACKENDS, default="auto", help="auto: NCCL when every rank has a GPU, else gloo"
    )
    how.add_argument(
        "-n",
        "--iters",
        type=int,
        default=_DEFAULTS.iters,
        help=f"timed iterations of each phase per size (default {_DEFAULTS.iters})",
    )
    how.add_argument(
        "-w",
        "--warmup",
        type=int,
        default=_DEFAULTS.warmup,
        help=f"untimed iterations of both at once per size (default {_DEFAULTS.warmup})",
    )
    how.add_argument(
        "--timeout",
        type=float,
        default=_DEFAULTS.timeout_s,
        help="seconds before a stuck collective aborts the run (default 300)",
    )
    add_where_arguments(parser)


def config_from_args(args: argparse.Namespace) -> OverlapConfig:
    values = config_values(args, RunConfig)  # the options overlap shares with run, by their field names
    values.update(db=database_arg(values["db"]), timeout_s=args.timeout, gemm_size=args.gemm_size)
    return OverlapConfig(**values).validate()


def main(args: argparse.Namespace) -> int:
    return launch_driver("overlap", config_from_args(args), args.nproc)
