"""Import results of other tools as commbench run directories, so they work everywhere ours do.

  commbench import nccl-tests all_reduce_perf.log ar.json --out results/
  commbench import nccl-inspector nccl-inspector-4711/ --out results/

nccl-inspector: the JSON logs NVIDIA's NCCL Inspector profiler plugin writes for a running job
(`<hostname>-pid<pid>.log` in NCCL_INSPECTOR_DUMP_DIR; .log, .jsonl and their .gz; directories are
searched). All files of one job become one run directory `<out>/inspector-<job>-<id>/` (kind
"import", source "nccl-inspector"): per communicator its id, name, size, ranks, hosts and scope
(run.json args.communicators); per communicator, op and power-of-two size bucket one record (the
slowest rank's time per call, medians over calls) and its samples (every call's size, time and
busbw) in samples.jsonl. The job id is --job-id, else the `nccl-inspector-<id>` folder name.
Compare the job with a benchmark run: `commbench efficiency RUN_DIR --against BENCHMARK_RUN`.

Reads NVIDIA nccl-tests output: the table it prints (save stdout, e.g. `all_reduce_perf -b 8
-e 8G -f 2 -g 8 | tee ar.log`, or a log pasted into markdown, mpirun-tagged, mixed with
NCCL_DEBUG=INFO lines) or the report written with `-J FILE`. Each run found becomes one run
directory `<out>/nccl-tests-<op>-<file>-run<i>of<n>-<id>/` (kind "import", source "nccl-tests",
timer "imported"), one record per size and per out-of-place / in-place column; run.json says
which lines of which file it came from. A log that stops before its `# Avg bus bandwidth`
line (a crash) keeps its rows and is marked incomplete; one that printed no rows is refused,
quoting the log's failure line.

nccl-tests reports one time per size, averaged over ranks; it becomes time_us and
time_us_mean_nccl, and the percentiles too unless per-iteration figures (-I) exist.
The collective comes from the log (command line, `Collective test starting:`), else from the
table itself; --op is needed only when the table fits two collectives, and an --op that
contradicts the log is refused. Every file is read before anything is written, so a bad file
leaves no partial import behind.
"""

from __future__ import annotations

import sys

from commbench.data.nccl_tests import ImportedRun, parse_file, write_run
from commbench.data.rundir import run_id_argument
from commbench.diagnose.stragglers import STRAGGLER_RATIO, find_stragglers
from commbench.errors import UsageError

HELP = "turn nccl-tests output or NCCL Inspector job logs into commbench run directories"

FORMATS = ["nccl-tests", "nccl-inspector"]


def add_arguments(parser) -> None:
    parser.add_argument("format", choices=FORMATS, help="what wrote the files")
    parser.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="nccl-tests stdout logs or -J JSON reports; NCCL Inspector logs or folders of them",
    )
    parser.add_argument("--out", default="results", metavar="DIR", help="where run directories go (default: results/)")
    parser.add_argument(
        "--op",
        metavar="NAME",
        help="the collective, for logs whose table fits two (all_reduce, all_gather, reduce_scatter, alltoall, "
        "alltoallv, sendrecv, ...); must agree with the log",
    )
    parser.add_argument(
        "--run-id",
        metavar="ID",
        type=run_id_argument,
        help="name the run directory ID instead of a fresh id (one run only)",
    )
    parser.add_argument(
        "--job-id",
        metavar="ID",
        help="nccl-inspector: the job's id (default: from the "
        "nccl-inspector-<id> folder Inspector writes into, else unknown)",
    )


def main(args) -> int:
    if args.format == "nccl-inspector":
        return _import_inspector(args)
    if args.job_id:
        raise UsageError("--job-id is for nccl-inspector logs; nccl-tests runs carry no job")
    runs = [(path, run) for path in args.files for run in parse_file(path, op=args.op)]
    if args.run_id and len(runs) > 1:
        raise UsageError(f"--run-id names one run, but the files hold {len(runs)}")
    for path, run in runs:
        directory = write_run(run, args.out, run_id=args.run_id)
        print(f"{path}: {_summary(run)} -> {directory}")
        straggler_line = _stragglers(run)
        if straggler_line:
            print(straggler_line)
        for warning in run.info.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    return 0


def _import_inspector(args) -> int:
    from commbench.data.nccl_inspector import read_job, write_job

    if args.op:
        raise UsageError("--op is for nccl-tests logs; Inspector names every call's collective")
    job = read_job(args.files, job_id=args.job_id)
    directory = write_job(job, args.out, run_id=args.run_id)
    comms = job.info.args["communicators"]
    print(
        f"job {job.info.args['job_id']}: {job.info.args['calls_logged']} calls logged by {job.info.world_size} "
        f"processes on {len(job.info.nodes)} node(s), {len(comms)} communicator(s), {len(job.records)} records -> {directory}"
    )
    for comm in comms:
        print(
            f"  communicator {comm['id']} ({comm['name']}): {comm['n_ranks']} ranks on {comm['nnodes']} node(s), "
            f"scope {comm['scope']}, hosts {', '.join(comm['hosts'])}"
        )
    for warning in job.info.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def _stragglers(run: ImportedRun) -> str | None:
    """nccl-tests -I per-process times: the processes consistently slower than the median one."""
    times = run.records.process_times()
    if not times:
        return None
    found = find_stragglers(times)
    if not found:
        return (
            f"  per-process times (-I) of {len(times[0])} processes: no straggler "
            f"(none >= {STRAGGLER_RATIO:g}x the median process in most sizes)"
        )
    return "  stragglers (-I per-process times): " + "; ".join(
        f"process {s.process} {s.median_ratio:.2f}x the median process, slow in {s.sizes_slow} of {s.sizes} rows"
        for s in found
    )


def _summary(run: ImportedRun) -> str:
    first = run.records[0]
    sizes = run.records.sizes()
    hosts = len(run.info.nodes) or 1
    text = (
        f"{len(run.records)} records ({sizes} sizes), {first.op} on {run.info.world_size} rank{'s' if run.info.world_size != 1 else ''}"
        f" / {hosts} node{'s' if hosts > 1 else ''}"
    )
    if run.info.args.get("run") and not run.info.args["run"].endswith(" of 1"):
        text = f"{run.info.args['run']} (lines {run.info.args['lines']}): {text}"
    return text if run.info.complete else f"{text} (incomplete: {run.info.reason})"
