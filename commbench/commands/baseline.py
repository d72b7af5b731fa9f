"""Make a baseline from healthy runs: the median and spread of each row's time over the runs.

  commbench baseline create RUN [RUN...] -o baseline.json [--db FILE]

Rows that every run measured are kept. Grade later runs with `commbench check RUN --baseline FILE`.
"""

from __future__ import annotations

import argparse

from commbench.analysis.baseline import build_baseline, write_baseline
from commbench.analysis.runs import read_run
from commbench.commands.store_options import add_db_argument
from commbench.data.store_location import db_path
from commbench.errors import UsageError

HELP = "baseline of several runs (median and spread per row) for `commbench check`"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="baseline_command", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="median and spread per row over RUNs")
    create.add_argument("runs", nargs="+", metavar="RUN", help="run directories or run ids")
    create.add_argument("-o", "--output", required=True, metavar="FILE", help="baseline file to write (JSON)")
    add_db_argument(create)


def main(args: argparse.Namespace) -> int:
    db = db_path(args.db)
    baseline = build_baseline([read_run(name, db) for name in args.runs])
    if not baseline["rows"]:
        raise UsageError("the runs share no row: a baseline needs runs of the same command")
    write_baseline(baseline, args.output)
    print(f"# {args.output}: {len(baseline['rows'])} rows from {len(args.runs)} run(s)")
    return 0
