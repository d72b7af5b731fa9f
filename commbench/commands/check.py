"""Grade a run against a baseline: pass or fail per row and overall (exit 0 all pass, 1 any fail).

  commbench check RUN --baseline baseline.json [--tolerance 10%] [--json]
  commbench check RUN --baseline OTHER_RUN ...     a single healthy run as the baseline
  commbench check RUN --expect dgx-h100            the largest size per op and scope against a
                                                   hardware preset's bus bandwidth (its efficiency
                                                   included), within the tolerance

A row fails when its time exceeds the baseline's by more than the tolerance plus three times the
baseline's own spread over its runs (see commbench/analysis/baseline.py), or when the run lacks
it. The report names the failed rows and by how much they missed. For CI and node acceptance.

On Slurm, the verdict can go to the run's nodes (every node the run ran on: grade single-node runs
to name one node): --drain drains them when the run fails (Reason="commbench: check: ..."), --resume
resumes them when it passes, only where commbench drained them; --slurm-plan prints the commands
and writes nothing. The cap (--max-drain) and --keep-idle hold as for diagnose
(commbench/diagnose/scheduler.py); actions go to the store's actions table.
  commbench check results/node17-health --baseline node.json --resume
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from commbench.analysis.baseline import (
    build_baseline,
    expected_baseline,
    grade,
    grades_to_dict,
    read_baseline,
)
from commbench.analysis.runs import name_width, read_run
from commbench.commands.scheduler_options import (
    add_scheduler_arguments,
    choice_from_args,
)
from commbench.commands.store_options import add_db_argument, fraction_arg
from commbench.data.rundir import RUN_FILE
from commbench.data.store_location import db_path

HELP = "grade a run against a baseline: pass/fail per row; exit 1 if any row fails"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="the run to grade (directory or run id)")
    against = parser.add_mutually_exclusive_group(required=True)
    against.add_argument(
        "--baseline", metavar="FILE|RUN", help="a file from `commbench baseline create`, or a run directory or id"
    )
    against.add_argument(
        "--expect",
        metavar="SYSTEM",
        help="a hardware preset's nominal rates (e.g. dgx-h100): the run's largest size per op "
        "and scope against the preset's bus bandwidth",
    )
    parser.add_argument(
        "--tolerance", type=fraction_arg, default=0.10, help="allowed slowdown, e.g. 10%% (default 10%%)"
    )
    parser.add_argument("--json", action="store_true", help="the grades as JSON")
    add_db_argument(parser)
    add_scheduler_arguments(parser, "the run's nodes when it fails")


def main(args: argparse.Namespace) -> int:
    choice = choice_from_args(args)
    db = db_path(args.db)
    run = read_run(args.run, db)
    baseline = _baseline(args, run, db)
    grades = grade(run, baseline, args.tolerance)
    result = grades_to_dict(run.run_id, grades, args.tolerance)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        _print(result, baseline)
    status = 0 if result["passed"] else 1
    if choice.wanted:
        acted = _act(choice, run, result, out=sys.stderr if args.json else sys.stdout)
        status = max(status, acted)
    return status


def _act(choice, run, result: dict, out) -> int:
    from commbench.diagnose import scheduler

    nodes = list(dict.fromkeys(node.hostname for node in run.info.nodes))
    if result["passed"]:
        return scheduler.act(choice, {}, nodes, run.run_id, "check", out=out)[0]
    worst = max((row for row in result["rows"] if not row["passed"]), key=lambda row: row.get("change") or 0.0)
    why = f"check: {run.run_id} failed {result['failed']} of {len(result['rows'])} rows, worst {worst['row']} " + (
        "not measured" if worst["why"] == "missing" else f"{worst['change']:+.0%}"
    )
    return scheduler.act(choice, {node: why for node in nodes}, [], run.run_id, "check", out=out)[0]


def _baseline(args: argparse.Namespace, run, db) -> dict:
    if args.expect:
        from commbench.modeling.hardware import load_system

        return expected_baseline(run, load_system(args.expect))
    source = Path(args.baseline)
    if source.is_file() and not (source / RUN_FILE).exists():
        return read_baseline(source)
    return build_baseline([read_run(args.baseline, db)])


def _print(result: dict, baseline: dict) -> None:
    runs = baseline["runs"]
    against = runs[0] if len(runs) == 1 and runs[0].startswith("preset ") else f"a baseline of {len(runs)} run(s)"
    print(f"# {result['run']} against {against}, tolerance {result['tolerance']:.0%}")
    width = name_width(row["row"] for row in result["rows"])
    for row in result["rows"]:
        if row["why"] == "missing":
            print(f"  FAIL {row['row']:<{width}} not measured (baseline {row['baseline_us']:.1f} us)")
            continue
        mark = "pass" if row["passed"] else "FAIL"
        print(
            f"  {mark} {row['row']:<{width}} {row['time_us']:10.1f} us vs {row['baseline_us']:10.1f} us "
            f"({row['change']:+.1%}; limit {row['limit_us'] / row['baseline_us'] - 1:+.1%})"
        )
    verdict = "PASS" if result["passed"] else f"FAIL: {result['failed']} of {len(result['rows'])} rows"
    print(f"# {verdict}")
