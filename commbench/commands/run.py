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

from commbench.config_options import add_config_arguments, config_values
from commbench.data.store_location import db_path
from commbench.measure.options import RunConfig
from commbench.measure.worker import launch_driver

HELP = "measure collectives over message sizes (nccl-tests style) and write a run directory"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of RunConfig, from its field docs, then --nproc (the launcher's, not the run's)."""
    add_config_arguments(parser, RunConfig)
    add_nproc_argument(parser)


def add_nproc_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--nproc",
        type=int,
        default=None,
        help="ranks to start on this machine when not under torchrun/srun (default: one per GPU, else 2)",
    )


def config_from_args(args: argparse.Namespace) -> RunConfig:
    values = config_values(args, RunConfig)
    values["db"] = database_arg(values["db"])
    return RunConfig(**values).validate()


def database_arg(value: str | None) -> str | None:
    """--db as an absolute path (ranks may start elsewhere); "" means the default database."""
    return None if value is None else str(db_path(value or None).resolve())


def main(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    return launch_driver("pairwise" if cfg.pairwise else "sweep", cfg, args.nproc)
