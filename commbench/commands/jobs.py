"""List the jobs `commbench submit` sent to Slurm, newest last, with their state now.

States come from Slurm (squeue, then scontrol show job, then sacct where accounting is on) for
jobs of the cluster this machine talks to; a job Slurm has forgotten (without accounting it keeps
ended jobs for MinJobAge, 5 minutes by default) shows the last state commbench saw, and a job of
another cluster its recorded state only. The record is ~/.cache/commbench/jobs.jsonl
($XDG_CACHE_HOME honoured, $COMMBENCH_JOBS_FILE overrides).
"""

from __future__ import annotations

import argparse
import json
import sys

from commbench.errors import CommbenchError, UsageError
from commbench.measure import slurm

HELP = "list recent Slurm submissions (commbench submit) and their state"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the jobs as a JSON list")
    parser.add_argument("--limit", type=int, default=20, help="the most recent N submissions (default 20)")


def main(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise UsageError(f"--limit must be at least 1 (got {args.limit})")
    subs = slurm.submissions(args.limit)
    rows = [_row(sub, status) for sub, status in zip(subs, _current_statuses(subs))]
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print(f"no submissions recorded in {slurm.registry_path()}")
    else:
        _print_jobs(rows)
    return 0


def _current_statuses(subs: list[slurm.Submission]) -> list[slurm.JobStatus | None]:
    """Slurm's word on each job still open in the record (None: keep the recorded state)."""
    try:
        cluster = slurm.cluster_name()
        open_ids = [sub.job_id for sub in subs if sub.cluster == cluster and sub.state not in slurm.TERMINAL_STATES]
        live = slurm.statuses(open_ids)
    except CommbenchError as exc:  # no Slurm here: the record is all there is
        print(f"commbench jobs: warning: states as last seen ({exc})", file=sys.stderr)
        return [None] * len(subs)
    found = []
    for sub in subs:
        status = live.get(sub.job_id) if sub.cluster == cluster else None
        if status is not None and status.finished:
            slurm.remember_state(sub, status)
        found.append(status)
    return found


def _row(sub: slurm.Submission, status: slurm.JobStatus | None) -> dict:
    if status is not None:
        state, source, elapsed = status.state, status.source, status.elapsed
    else:
        state, source, elapsed = sub.state or slurm.UNKNOWN, "registry", sub.elapsed
    return {
        "job_id": sub.job_id,
        "cluster": sub.cluster,
        "state": state,
        "state_source": source,
        "elapsed": elapsed,
        "submitted": sub.submitted,
        "command": sub.command,
        "launcher": sub.launcher,
        "nodes": sub.nodes,
        "ranks_per_node": sub.ranks_per_node,
        "job_dir": sub.job_dir,
        "run_args": sub.run_args,
    }


def _print_jobs(rows: list[dict]) -> None:
    header = ("JOB", "STATE", "ELAPSED", "SUBMITTED (UTC)", "COMMAND", "NODES x RANKS", "LAUNCHER", "RESULTS")
    lines = [header] + [
        (
            str(row["job_id"]),
            row["state"],
            row["elapsed"] or "-",
            row["submitted"].replace("+00:00", ""),
            row["command"],
            f"{row['nodes']} x {row['ranks_per_node']}",
            row["launcher"],
            row["job_dir"],
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    for line in lines:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)) + "  " + line[-1])
