"""Submit a commbench run (or calibrate, or diagnose) to Slurm as a batch job, and optionally follow
it to the end.

The job script is one of the templates in slurm/ (srun: one task per rank; torchrun: one
torchrun per node with a c10d rendezvous) with these options filled in; --dry-run prints it,
and what it prints can be given to sbatch as it is. Everything after `--` goes to
`commbench run` (or the --command) in the job, checked here first, so a typo fails now, not in
the queue.

  commbench submit --nodes 2 --ntasks-per-node 8 --gpus-per-node 8 --exclusive -- --max-bytes 1G
  commbench submit --nodes 4 --ntasks-per-node 8 --launcher torchrun --dry-run > job.sbatch
  commbench submit --nodes 2 --ntasks-per-node 2 --env GLOO_SOCKET_IFNAME=eth0 --wait -- -e 4M
  commbench submit --nodes 2 --ntasks-per-node 8 --db /shared/commbench.duckdb -- -e 1G   ingest at the end

With --command calibrate every node runs `commbench calibrate` instead (use --ntasks-per-node 1):
each writes <out>/slurm-<job id>/processor-<its host>.json, so each node type is calibrated where it runs.
  commbench submit --command calibrate --nodes 4 --ntasks-per-node 1 --gpus-per-node 1 --wait -- --quick

With --diagnose (= --command diagnose) every node runs one rank of `commbench diagnose`, which
finds the nodes to drain and the links to inspect in a few concurrent rounds; the diagnosis run
directory lands in the job's folder, and --wait prints its summary and the `# exclude:` list in
Slurm hostlist syntax.
  commbench submit --diagnose --nodes 64 --time 20 --wait -- --timeout 60

Results and the job log land in <out>/slurm-<job id>/ (job.log, job.sbatch, the run directory).
--wait follows the job (squeue, then scontrol show job, then sacct where accounting is on) with
a progress line on stderr. COMPLETED: the run directory and a summary (nodes x ranks, scopes,
wrong elements, best bus bandwidth per op and scope; for diagnose the diagnosis summary). FAILED,
CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY: the tail of the job log and exit status 1 (after the
diagnosis summary where a diagnose job wrote one before failing, e.g. when the rank of a node that
lost its link exits non-zero).
Every submission is recorded for `commbench jobs` (~/.cache/commbench/jobs.jsonl).

Recurring fleet sweeps: --every 1d (or 12h, 30m, 90s) makes the job queue its own successor with
`sbatch --begin=now+<interval>` as it starts (a self-resubmitting batch script: scrontab is not
on every cluster, and needs its own setup); with --db every run is ingested as it ends, so
`commbench history` and `commbench check` read them. `scancel --name=commbench` ends the chain.
  commbench submit --nodes 16 --ntasks-per-node 8 --every 1d --db /shared/commbench.duckdb -- -e 1G
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import time
from pathlib import Path
from typing import Any

from commbench.data.rundir import utc_now
from commbench.diagnose import report as diagnosis_report
from commbench.errors import CommbenchError, UsageError
from commbench.measure import slurm
from commbench.scopes import in_order

HELP = "submit a run to Slurm (sbatch), print the script (--dry-run) or follow the job to its end (--wait)"

_POLL_S = 1.0
_LOG_TAIL_LINES = 20
_UNSET = object()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    job = parser.add_argument_group("the allocation")
    job.add_argument("--nodes", type=int, required=True, metavar="N", help="nodes to allocate")
    job.add_argument(
        "--ntasks-per-node",
        type=int,
        default=None,
        dest="ranks_per_node",
        metavar="K",
        help="benchmark ranks per node (one per GPU on GPU nodes); needed for run; calibrate and "
        "diagnose run one task per node (the default for them, and the only value they take)",
    )
    job.add_argument(
        "--gpus-per-node", type=int, default=None, metavar="G", help="GPUs to allocate per node (default: none asked)"
    )
    job.add_argument("--cpus-per-rank", type=int, default=1, metavar="C", help="host cores per rank (default 1)")
    job.add_argument("--partition", default=None, metavar="P", help="Slurm partition (default: the cluster's default)")
    job.add_argument("--account", default=None, metavar="A", help="Slurm account to charge")
    job.add_argument(
        "--time",
        dest="time_limit",
        default=None,
        metavar="T",
        help="time limit, e.g. 30, 1:00:00, 1-0 (default: the partition's)",
    )
    job.add_argument("--exclusive", action="store_true", help="whole nodes, no other job beside this one")
    how = parser.add_argument_group("the job")
    how.add_argument(
        "--command",
        choices=slurm.JOB_COMMANDS,
        default="run",
        dest="job_command",
        help="what every task runs: run (default); calibrate (one task per node: each node's "
        "compute into JOB_DIR/processor-HOST.json); diagnose (one task per node: the bad nodes "
        "and links of the allocation)",
    )
    how.add_argument(
        "--diagnose",
        action="store_true",
        help="short for --command diagnose: one task per node runs `commbench diagnose`; --wait prints "
        "the nodes to drain, the links to inspect and the exclude list",
    )
    how.add_argument(
        "--launcher",
        choices=slurm.LAUNCHERS,
        default="srun",
        help="srun: one task per rank (default); torchrun: one torchrun per node, c10d rendezvous",
    )
    how.add_argument(
        "--out",
        default="results",
        metavar="DIR",
        help="results folder; the job writes <out>/slurm-<job id>/ (default results/)",
    )
    how.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="export a variable on every node (NCCL_*, GLOO_*, ...); repeatable",
    )
    how.add_argument(
        "--python",
        default=sys.executable,
        metavar="PATH",
        help="interpreter with commbench installed, the same path on every node (default: this one)",
    )
    how.add_argument(
        "--db",
        default=None,
        metavar="FILE",
        help="ingest the run into this results database when the job ends (a path every node sees)",
    )
    how.add_argument(
        "--every",
        type=interval_arg,
        default=None,
        metavar="INTERVAL",
        help="a recurring sweep: each job queues the next to start this long after it (e.g. 1d, 12h, "
        "30m, 90s); with --db every run lands in the store",
    )
    how.add_argument(
        "--cluster",
        default=None,
        metavar="NAME",
        help="cluster name recorded in run.json (default: Slurm's cluster name)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the job script and submit nothing")
    parser.add_argument("--wait", action="store_true", help="follow the job to its end and report the outcome")
    parser.add_argument(
        "run_args",
        nargs="*",
        metavar="-- RUN OPTIONS",
        help="options for `commbench run` (or calibrate, or diagnose) in the job",
    )


def main(args: argparse.Namespace) -> int:
    options = options_from_args(args)
    script = slurm.render(options)
    if args.dry_run:
        sys.stdout.write(script)
        return 0
    submission = submit(options, script)
    what = "" if options.command == "run" else f"{options.command}, "
    print(
        f"submitted job {submission.job_id} ({what}{options.nodes} nodes x {options.ranks_per_node} ranks, "
        f"{options.launcher})"
    )
    print(f"results and log: {submission.job_dir}/ (job.log)", flush=True)
    if not args.wait:
        return 0
    return report(submission, follow(submission))


def options_from_args(args: argparse.Namespace) -> slurm.JobOptions:
    command = _job_command(args)
    options = slurm.JobOptions(
        nodes=args.nodes,
        ranks_per_node=_ranks_per_node(args, command),
        launcher=args.launcher,
        gpus_per_node=args.gpus_per_node,
        cpus_per_rank=args.cpus_per_rank,
        partition=args.partition,
        account=args.account,
        time_limit=args.time_limit,
        exclusive=args.exclusive,
        results_dir=str(Path(args.out).resolve()),
        python=args.python,
        env=tuple(_env_pairs(args.env)),
        command=command,
        every_s=args.every,
    ).validate()  # the allocation first: the command's options are checked against it
    run_args = checked_command_args(command, args.run_args + _history_args(args, command), options.nodes)
    return dataclasses.replace(options, run_args=run_args)


_INTERVAL_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def interval_arg(text: str) -> int:
    """'1d' -> 86400, '12h', '30m', '90s', '90' (seconds)."""
    match = re.fullmatch(r"\s*(\d+)\s*([smhdw]?)\s*", text.lower())
    if not match or int(match.group(1)) < 1:
        raise argparse.ArgumentTypeError(f"bad interval {text!r}: write e.g. 1d, 12h, 30m or 90s")
    return int(match.group(1)) * _INTERVAL_UNITS[match.group(2)]


def _job_command(args: argparse.Namespace) -> str:
    if args.diagnose and args.job_command not in ("run", "diagnose"):  # run: --command left at its default
        raise UsageError(f"--diagnose is --command diagnose; it cannot go with --command {args.job_command}")
    return "diagnose" if args.diagnose else args.job_command


def _ranks_per_node(args: argparse.Namespace, command: str) -> int:
    """The benchmark needs the ranks per node said; the one-task-per-node commands default to 1."""
    if args.ranks_per_node is not None:
        return args.ranks_per_node
    if command == "run":
        raise UsageError("--ntasks-per-node is needed: benchmark ranks per node (one per GPU on GPU nodes)")
    return 1


def _history_args(args: argparse.Namespace, command: str) -> list[str]:
    """--db and --cluster travel to `commbench run` in the job, which ingests when it ends."""
    extra = ["--db", str(Path(args.db).resolve())] if args.db else []
    extra += ["--cluster", args.cluster] if args.cluster else []
    if extra and command != "run":
        raise UsageError(f"--db and --cluster apply to --command run, not {command}")
    return extra


def submit(options: slurm.JobOptions, script: str) -> slurm.Submission:
    """sbatch the script, keep a copy beside the results, and record the submission."""
    job_id = slurm.sbatch(script)
    job_dir = slurm.job_dir(options.results_dir, job_id)
    job_dir.mkdir(parents=True, exist_ok=True)  # the job makes it too; whoever comes first
    (job_dir / "job.sbatch").write_text(script)
    submission = slurm.Submission(
        job_id=job_id,
        cluster=slurm.cluster_name(),
        submitted=utc_now(),
        launcher=options.launcher,
        nodes=options.nodes,
        ranks_per_node=options.ranks_per_node,
        job_dir=str(job_dir),
        run_args=list(options.run_args),
        command=options.command,
    )
    slurm.remember_submission(submission)
    return submission


def checked_command_args(command: str, args: list[str], nodes: int) -> tuple[str, ...]:
    if command == "diagnose":
        return checked_diagnose_args(args, nodes)
    return checked_calibrate_args(args) if command == "calibrate" else checked_run_args(args)


# diagnose's options that describe a cluster model: they make no sense on the job's real nodes
_MODEL_OPTIONS = {
    "simulate": "--simulate",
    "hosts": "--hosts",
    "faults": "--faults",
    "slow": "--slow",
    "lossy": "--lossy",
    "link": "--link",
}


def checked_diagnose_args(diagnose_args: list[str], nodes: int) -> tuple[str, ...]:
    """The options for `commbench diagnose` on the job's nodes, parsed as diagnose parses them; the
    fleet is the allocation, so no cluster-model option and a screen group that fits in it."""
    from commbench.commands import diagnose as diagnose_command

    parsed = _parse_job_options("diagnose", diagnose_command, diagnose_args)
    if parsed.nproc is not _UNSET:
        raise UsageError("--nproc does not apply under Slurm: diagnose runs one task on each of the --nodes")
    model = [flag for name, flag in _MODEL_OPTIONS.items() if getattr(parsed, name, None)]
    if model:
        raise UsageError(
            f"{model[0]} describes a cluster model (diagnose --simulate, no Slurm needed); "
            "under Slurm the fleet is the job's --nodes"
        )
    diagnose_command.check_real_options(parsed)
    group_size = getattr(parsed, "group_size", None)
    if group_size is not None and not 2 <= group_size <= nodes:
        raise UsageError(f"--group-size {group_size}: must be between 2 and the job's {nodes} nodes")
    return tuple(diagnose_args)


def checked_calibrate_args(calibrate_args: list[str]) -> tuple[str, ...]:
    """The options for `commbench calibrate`, checked as far as they can be off the nodes (no torch)."""
    from commbench.commands import calibrate as calibrate_command

    parsed = _parse_job_options("calibrate", calibrate_command, calibrate_args)
    parsed.out = None  # submit's own --out: the job writes into its folder
    calibrate_command.grid_changes(calibrate_command.config_from_args(parsed))
    return tuple(calibrate_args)


def checked_run_args(run_args: list[str]) -> tuple[str, ...]:
    """The options for `commbench run`, parsed here as run would parse them."""
    from commbench.commands import run as run_command

    parsed = _parse_job_options("run", run_command, run_args)
    if parsed.nproc is not _UNSET:
        raise UsageError("--nproc does not apply under Slurm: the ranks are --nodes x --ntasks-per-node")
    parsed.out, parsed.nproc = "results", None
    run_command.config_from_args(parsed)  # the same checks run makes before starting ranks
    return tuple(run_args)


def _parse_job_options(name: str, command_module, options: list[str]) -> argparse.Namespace:
    """The options after `--`, parsed with the job command's own parser; --out belongs to submit.
    --out and --nproc default to _UNSET, so a caller can tell that the user gave one."""
    parser = _RaisingParser(prog=f"commbench {name}", add_help=False)
    command_module.add_arguments(parser)
    # --out is stored as `out_dir` by the commands whose options come from a config (run, diagnose)
    parser.set_defaults(out=_UNSET, out_dir=_UNSET, nproc=_UNSET)
    parsed = parser.parse_args(options)
    if parsed.out is not _UNSET or parsed.out_dir is not _UNSET:
        raise UsageError(f"give the results folder to submit (--out before --), not to {name}")
    return parsed


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(f"{self.prog.removeprefix('commbench ')} options after --: {message}")


def _env_pairs(items: list[str]):
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--env {item!r}: expected NAME=VALUE")
        yield name, value


# ---- following the job ----------------------------------------------------------------------------


def follow(submission: slurm.Submission) -> slurm.JobStatus:
    """Poll until the job ends; a progress line on stderr meanwhile. Ctrl-C stops following only."""
    job_dir = Path(submission.job_dir)
    with _ProgressLine() as line:
        while True:
            status = slurm.job_status(submission.job_id)
            if status.finished or status.state == slurm.UNKNOWN:
                break
            line.show(status.state, _progress_text(status, job_dir))
            time.sleep(_POLL_S)
    status = slurm.job_status(submission.job_id, detailed=True)  # exit code and output file
    if status.state != slurm.UNKNOWN:
        slurm.remember_state(submission, status)
    return status


def _progress_text(status: slurm.JobStatus, job_dir: Path) -> str:
    text = f"job {status.job_id} {status.state}"
    if status.state == "PENDING":
        return text + (f" ({status.reason})" if status.reason and status.reason != "None" else "")
    text += f" {status.elapsed} on {status.nodes}" if status.nodes else f" {status.elapsed}"
    rows = _rows_measured(job_dir)
    return text + (f", {rows} records written" if rows else "")


def _rows_measured(job_dir: Path) -> int:
    total = 0
    for records in job_dir.glob("*/records.jsonl"):
        try:
            text = records.read_text(errors="replace")
            whole = text[: text.rfind("\n") + 1]  # a last line without its newline is still being written
            total += sum(1 for line in whole.splitlines() if line.strip())
        except OSError:
            continue
    return total


class _ProgressLine:
    """A live status line on a terminal; elsewhere (logs, pipes) one line per state change."""

    def __init__(self):
        from rich.console import Console

        self.console = Console(stderr=True, highlight=False)
        self.live = self.console.status("waiting for Slurm") if self.console.is_terminal else None
        self.last_state = None

    def __enter__(self):
        if self.live:
            self.live.start()
        return self

    def show(self, state: str, text: str) -> None:
        if self.live:
            self.live.update(text)
        elif state != self.last_state:
            self.console.print(text, markup=False, soft_wrap=True)
        self.last_state = state

    def __exit__(self, *exc):
        if self.live:
            self.live.stop()
        return False


# ---- the outcome -------------------------------------------------------------------------------------


def report(submission: slurm.Submission, status: slurm.JobStatus) -> int:
    job_dir = Path(submission.job_dir)
    if status.state == slurm.UNKNOWN:
        _print_log_tail(submission, status)
        raise CommbenchError(f"Slurm no longer knows job {status.job_id} and has no record of how it ended")
    ended = f"job {status.job_id} {status.state} after {status.elapsed or '?'}" + (
        f" (exit code {status.exit_code})" if status.exit_code and status.exit_code != "0:0" else ""
    )
    if not status.succeeded:
        if submission.command == "diagnose":
            _print_diagnosis_if_any(job_dir)
        _print_log_tail(submission, status)
        raise CommbenchError(f"{ended}; log: {job_dir / 'job.log'}")
    if submission.command == "diagnose":
        return _report_diagnosis(job_dir, ended, submission, status)
    if submission.command == "calibrate":
        return _report_processors(job_dir, ended, submission, status)
    run = _latest_run(job_dir)
    if run is None or not run.info.complete:
        _print_log_tail(submission, status)
        raise CommbenchError(f"{ended} but left no complete run directory in {job_dir}")
    print(ended)
    print(f"run directory: {run.path}")
    for line in summary_lines(run):
        print(line)
    return 0


def _report_processors(job_dir: Path, ended: str, submission: slurm.Submission, status: slurm.JobStatus) -> int:
    files = sorted(job_dir.glob("processor-*.json"))
    if len(files) < submission.nodes:
        _print_log_tail(submission, status)
        raise CommbenchError(
            f"{ended} but wrote {len(files)} processor file(s) for {submission.nodes} nodes in {job_dir}"
        )
    print(ended)
    for path in files:
        print(f"processor: {path} (commbench plan --processor {path})")
    return 0


def _report_diagnosis(job_dir: Path, ended: str, submission: slurm.Submission, status: slurm.JobStatus) -> int:
    found = _latest_diagnosis(job_dir)
    if found is None:
        _print_log_tail(submission, status)
        raise CommbenchError(f"{ended} but left no diagnosis run directory in {job_dir}")
    print(ended)
    for line in diagnosis_report.summary_lines(*found):
        print(line)
    return 0


def _print_diagnosis_if_any(job_dir: Path) -> None:
    """A diagnose job can fail after its report is written (a node's rank exits non-zero): show it."""
    found = _latest_diagnosis(job_dir)
    if found is not None:
        print("the job failed, but its diagnosis was written:")
        for line in diagnosis_report.summary_lines(*found):
            print(line)


def _latest_diagnosis(job_dir: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest diagnose run directory in the job's folder and its report (None if there is none)."""
    from commbench.data.rundir import list_runs
    from commbench.diagnose.report import DIAGNOSE_FILE, load_report

    runs = [run for run in list_runs(job_dir) if (run / DIAGNOSE_FILE).is_file()]
    return (runs[-1], load_report(runs[-1])) if runs else None


def _latest_run(job_dir: Path):
    from commbench.data.rundir import list_runs, load_run

    runs = list_runs(job_dir)
    return load_run(runs[-1]) if runs else None


def _print_log_tail(submission: slurm.Submission, status: slurm.JobStatus) -> None:
    candidates = [Path(submission.job_dir) / "job.log"]
    if status.stdout_path:
        candidates.append(Path(status.stdout_path))  # the script failed before job.log existed
    path, lines = slurm.log_tail(candidates, _LOG_TAIL_LINES)
    if path is None:
        print(f"job {status.job_id}: no log found ({', '.join(map(str, candidates))})", file=sys.stderr)
        return
    print(f"--- last {len(lines)} lines of {path}", file=sys.stderr)
    for line in lines:
        print(line, file=sys.stderr)
    print("---", file=sys.stderr, flush=True)


def summary_lines(run) -> list[str]:
    """nodes x ranks, scopes, wrong total and the best bus bandwidth per op and scope."""
    ranks_per_node = sorted({len(node.ranks) for node in run.info.nodes})
    records = run.records
    scopes = in_order({rec["scope"] for rec in records})
    wrong = sum(max(rec["wrong"], 0) for rec in records)
    best: dict[tuple[str, str], float] = {}
    for rec in records:
        key = (rec["op"], rec["scope"])
        best[key] = max(best.get(key, 0.0), rec["busbw_gbps"])
    lines = [
        f"{len(run.info.nodes)} nodes x {'/'.join(map(str, ranks_per_node))} ranks "
        f"(world {run.info.world_size}), backend {run.info.backend}",
        f"scopes: {', '.join(scopes)}; records: {len(records)}; wrong: {wrong}",
        "best busbw (GB/s, one group):",
    ]
    ops = list(dict.fromkeys(rec["op"] for rec in records))
    width = max([len(op) for op in ops] + [2])
    lines.append(f"  {'op':<{width}}" + "".join(f"{scope:>10}" for scope in scopes))
    for op in ops:
        cells = "".join(f"{best[(op, scope)]:>10.4f}" if (op, scope) in best else f"{'-':>10}" for scope in scopes)
        lines.append(f"  {op:<{width}}{cells}")
    return lines
