"""The scheduler options `check` and `diagnose` share: --slurm-plan, --drain, --resume, --max-drain,
--keep-idle (what they do: commbench.diagnose.scheduler)."""

from __future__ import annotations

import argparse

from commbench.data.store_location import db_path
from commbench.diagnose import scheduler
from commbench.errors import UsageError


def add_scheduler_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    group = parser.add_argument_group("acting on Slurm (nothing is written to Slurm without --drain or --resume)")
    group.add_argument(
        "--slurm-plan",
        action="store_true",
        help=f"a dry run: print the scontrol commands --drain and --resume would run for {what}, write nothing",
    )
    group.add_argument(
        "--drain",
        action="store_true",
        help=f'drain {what} with Reason="{scheduler.REASON_PREFIX}<why>" (scontrol update)',
    )
    group.add_argument(
        "--resume",
        action="store_true",
        help="resume the nodes that pass, only those commbench drained (their reason starts with "
        f"{scheduler.REASON_PREFIX.strip()!r}); a node an admin drained is never resumed",
    )
    group.add_argument(
        "--max-drain",
        type=_cap_arg,
        default=scheduler.DEFAULT_CAP,
        metavar="SHARE",
        help="cap: one action drains at most this share of a partition, rounded down but at least one "
        "node (default 10%%); over it nothing is drained and the command exits 1",
    )
    group.add_argument(
        "--keep-idle",
        type=int,
        default=scheduler.DEFAULT_KEEP_IDLE,
        metavar="N",
        help="never drain one of the last N idle nodes of a partition (default 1; 0 allows it)",
    )


def _cap_arg(text: str) -> float:
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad share {text!r}: write e.g. 10% or 0.1") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: the cap is a share of a partition, between 0% and 100%")
    return value


def choice_from_args(args: argparse.Namespace) -> scheduler.Choice:
    """The options as a Choice; refused here (exit 2): a negative --keep-idle, no Slurm to act on."""
    if args.keep_idle < 0:
        raise UsageError(f"--keep-idle {args.keep_idle}: must be 0 or more")
    choice = scheduler.Choice(
        plan=args.slurm_plan,
        drain=args.drain,
        resume=args.resume,
        cap=args.max_drain,
        keep_idle=args.keep_idle,
        db=str(db_path(getattr(args, "db", None)).resolve()),
    )
    if choice.wanted:
        scheduler.require_slurm()
    return choice
