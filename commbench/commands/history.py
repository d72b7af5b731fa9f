"""A row's history on one cluster, and the runs where it changed, with what changed there.

  commbench history --cluster NAME --op all_reduce --size 64M [--scope inter] [--json] [--db FILE]

Reads the results database (`commbench db ingest` first). The series is the out-of-place row's
busbw per run, in start order, one series per scope and group size. Change points come from
ruptures' PELT on log(busbw) scaled by the run-to-run noise, kept when the medians on each side
differ by more than --threshold (default 5%). Each names the first run after the change and
what its run.json changed: versions ("nccl 2.21.5 -> 2.23.4"), NCCL_* variables, nodes
replaced, topology, options.
"""

from __future__ import annotations

import argparse
import json

from commbench.commands.store_options import add_db_argument, fraction_arg
from commbench.data.store_location import db_path
from commbench.errors import UsageError
from commbench.scopes import SWEPT_SCOPES
from commbench.units import format_size, parse_size

DEFAULT_THRESHOLD = 0.05  # as commbench.analysis.history, which loads ruptures and DuckDB

HELP = "time series of a row on a cluster, with change points and their run.json differences"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster",
        required=True,
        help='cluster name as recorded (see `commbench db sql "SELECT DISTINCT cluster FROM runs"`)',
    )
    parser.add_argument("--op", required=True, help="collective, e.g. all_reduce")
    parser.add_argument("--size", required=True, help="message size, e.g. 64M")
    parser.add_argument("--scope", choices=SWEPT_SCOPES, default=None, help="only this scope")
    parser.add_argument(
        "--threshold",
        type=fraction_arg,
        default=DEFAULT_THRESHOLD,
        help="smallest change that counts, e.g. 5%% (default 5%%)",
    )
    parser.add_argument("--json", action="store_true", help="the series and change points as JSON")
    add_db_argument(parser)


def main(args: argparse.Namespace) -> int:
    from commbench.analysis.history import attach_change_points, load_series  # ruptures loads only here
    from commbench.data.store import open_read_only

    size = parse_size(args.size)
    con = open_read_only(db_path(args.db))
    try:
        series = load_series(con, args.cluster, args.op, size, args.scope)
    finally:
        con.close()
    if not series:
        raise UsageError(f"no {args.op} {format_size(size)} rows for cluster {args.cluster!r} in the database")
    series = [attach_change_points(one, args.threshold) for one in series]
    if args.json:
        # one line: json's C encoder only runs without indent (10,000 points: 0.02 s instead of 0.3 s)
        print(json.dumps([one.to_dict() for one in series]))
    else:
        for one in series:
            _print(one)
    return 0


def _print(series) -> None:
    print(
        f"# {series.cluster}: {series.op} {format_size(series.size_bytes)} {series.scope} n={series.group_size}, "
        f"{len(series.points)} runs"
    )
    starts = {change.index for change in series.change_points}
    for number, point in enumerate(series.points, 1):
        mark = "  <- change" if number in starts else ""
        print(f"  {number:5d}  {point.created:<19}  {point.run_id:<40} {point.busbw_gbps:10.4f} GB/s{mark}")
    for change in series.change_points:
        detected = f" (detected at run {change.detected_index})" if change.detected_index != change.index else ""
        print(
            f"# change at run {change.index} ({change.run_id}){detected}: busbw {change.before_busbw_gbps:.4g} -> "
            f"{change.after_busbw_gbps:.4g} GB/s ({change.change:+.1%})"
        )
        for difference in change.differences:
            print(f"#   {difference}")
    if not series.change_points:
        print("# no change point")
