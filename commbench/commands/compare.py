"""Compare two runs row by row: the change in time and busbw, with a confidence interval, and a verdict.

  commbench compare RUN_A RUN_B [--threshold 5%] [--alpha 0.05] [--json] [--db FILE]

RUN is a run directory or, with a database, a run id. Rows are matched on (op, scope, group
size, size, dtype, in/out-of-place) and, in pairwise runs, the pair of ranks, which the row
names. Per row: time_B / time_A - 1 on the reported medians, a 95% bootstrap interval of that
ratio from the per-iteration samples, a Mann-Whitney p value, and Benjamini-Hochberg control
over all rows. A row is flagged "slower"/"faster" only when it is significant (q < alpha) *and*
material (|change| > threshold). Rows of runs that kept no samples show the change without a test.
The report starts with what differed between the two runs' run.json: versions, NCCL_* and other
environment, nodes, topology, options.
Exit 0 either way: compare reports, `commbench check` grades.
"""

from __future__ import annotations

import argparse
import json

from commbench.commands.store_options import add_db_argument, fraction_arg
from commbench.data.store_location import db_path

DEFAULT_THRESHOLD = 0.05  # the same defaults as commbench.analysis.compare, which loads scipy
DEFAULT_ALPHA = 0.05

HELP = "compare two runs per row with confidence intervals and multiple-testing control"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_a", metavar="RUN_A", help="the reference run (directory or run id)")
    parser.add_argument("run_b", metavar="RUN_B", help="the run compared with it")
    parser.add_argument(
        "--threshold",
        type=fraction_arg,
        default=DEFAULT_THRESHOLD,
        help="smallest change that matters, e.g. 5%% (default 5%%)",
    )
    parser.add_argument(
        "--alpha",
        type=fraction_arg,
        default=DEFAULT_ALPHA,
        help="false discovery rate for Benjamini-Hochberg (default 0.05)",
    )
    parser.add_argument("--json", action="store_true", help="the comparison as JSON")
    add_db_argument(parser)


def main(args: argparse.Namespace) -> int:
    from commbench.analysis.compare import compare_runs  # scipy loads only when compare runs
    from commbench.analysis.runs import read_run

    db = db_path(args.db)
    comparison = compare_runs(read_run(args.run_a, db), read_run(args.run_b, db), args.alpha, args.threshold)
    if args.json:
        print(json.dumps(comparison.to_dict(), indent=1))
    else:
        print_comparison(comparison)
    return 0


def print_comparison(comparison) -> None:
    from commbench.analysis.runs import name_width

    print(f"# A = {comparison.run_a}")
    print(f"# B = {comparison.run_b}")
    print("# what differs: " + ("; ".join(comparison.differences) or "nothing recorded in run.json"))
    width = name_width(row.row for row in comparison.rows)
    print(
        f"# {'row':<{width}} {'time A (us)':>12} {'time B (us)':>12} {'time':>8} {'95% CI':>17} {'busbw':>8} {'q':>8}  verdict"
    )
    for row in comparison.rows:
        interval = f"[{row.ci_low:+.1%},{row.ci_high:+.1%}]" if row.ci_low is not None else "-"
        q = f"{row.q:.2g}" if row.q is not None else "-"
        print(
            f"  {row.row:<{width}} {row.time_a_us:12.1f} {row.time_b_us:12.1f} {row.time_change:+8.1%} {interval:>17} "
            f"{row.busbw_change:+8.1%} {q:>8}  {row.verdict}"
        )
    flagged = [row for row in comparison.rows if row.flagged]
    print(
        f"# {len(flagged)} of {len(comparison.rows)} rows changed significantly (q < {comparison.alpha:g}) and "
        f"materially (> {comparison.threshold:.0%})" + _unmatched(comparison)
    )


def _unmatched(comparison) -> str:
    if not comparison.only_in_a and not comparison.only_in_b:
        return ""
    return f"; rows only in A: {comparison.only_in_a}, only in B: {comparison.only_in_b}"
