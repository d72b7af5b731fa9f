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

from commbench.commands.run import add_nproc_argument, database_arg
from commbench.config_options import add_config_arguments, config_values
from commbench.measure.options import OverlapConfig, is_overlap_option
from commbench.measure.worker import launch_driver

HELP = "time a GEMM and a collective alone and at once: overlap achieved and mutual slowdown"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of OverlapConfig that overlap offers, from its field docs, then --nproc."""
    add_config_arguments(parser, OverlapConfig, only=is_overlap_option)
    add_nproc_argument(parser)


def config_from_args(args: argparse.Namespace) -> OverlapConfig:
    values = config_values(args, OverlapConfig)
    values["db"] = database_arg(values["db"])
    return OverlapConfig(**values).validate()


def main(args: argparse.Namespace) -> int:
    return launch_driver("overlap", config_from_args(args), args.nproc)
