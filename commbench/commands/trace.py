"""Analyse PyTorch profiler (Kineto) chrome traces: how much communication hides behind compute.

Give one trace per rank (.json or .json.gz, as torch.profiler's export_chrome_trace writes them);
large traces are streamed, not loaded whole. For each rank and each iteration (ProfilerStep#N):

  compute        time covered by compute: non-NCCL GPU kernels, or on a CPU-only rank the
                 operators of the training thread(s) except those that only issue a collective
  communication  time covered by NCCL kernels (ncclKernel_*, ncclDevKernel_*) or gloo collectives
  overlap %      time when compute and communication both run / communication time
                 (Holistic Trace Analysis definition; n/a when there is no communication)
  exposed comm.  communication time with no compute beside it: what overlap failed to hide
  idle           time with neither compute, communication nor memory copies

Intervals are merged across streams and threads before measuring, so two kernels at once count
once. The busiest collectives (by total time) follow, with bytes when the trace records them.

--demo OUTDIR trains a small model with DDP on 2 gloo CPU ranks under the profiler, writes
OUTDIR/rank0.json and rank1.json and analyses them: a look at the output before tracing a job.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from commbench.errors import UsageError

HELP = "overlap of compute and communication in PyTorch profiler traces (one per rank)"

_BUSIEST_SHOWN = 5


def add_arguments(parser) -> None:
    parser.add_argument("traces", nargs="*", metavar="TRACE.json", help="chrome trace of one rank (.json or .json.gz)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON (without the timeline)")
    parser.add_argument("--timeline-out", metavar="FILE", help="write the timeline bars for the dashboard as JSON")
    parser.add_argument(
        "--timeline-limit", type=int, default=None, metavar="N",
        help="at most N bars in the timeline, the longest events kept (default 50000)",
    )  # fmt: skip
    parser.add_argument(
        "--demo", metavar="OUTDIR", help="trace a 2-rank DDP (gloo, CPU) run into OUTDIR and analyse it"
    )


def main(args) -> int:
    from commbench.traces.analysis import DEFAULT_TIMELINE_LIMIT, analyse_traces

    traces = _trace_paths(args)
    limit = DEFAULT_TIMELINE_LIMIT if args.timeline_limit is None else args.timeline_limit
    if limit < 1:
        raise UsageError("--timeline-limit must be at least 1")
    analysis = analyse_traces(traces, timeline_limit=limit)
    for warning in analysis.warnings:
        print(f"commbench trace: warning: {warning}", file=sys.stderr)
    result = analysis.to_dict()
    if args.timeline_out:
        timeline = {"timeline": result["timeline"], "note": result["timeline_note"]}
        try:
            Path(args.timeline_out).write_text(json.dumps(timeline) + "\n")
        except OSError as exc:
            raise UsageError(f"cannot write the timeline to {args.timeline_out}: {exc.strerror}") from None
    del result["timeline"]
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_figures(result)
    return 0


def _trace_paths(args) -> list[str]:
    if args.demo and args.traces:
        raise UsageError("give trace files or --demo, not both")
    if args.demo:
        from commbench.data.rundir import prepare_output_folder
        from commbench.traces.demo import generate_demo_traces

        prepare_output_folder(args.demo, "--demo")
        return [str(path) for path in generate_demo_traces(args.demo)]
    if not args.traces:
        raise UsageError("give at least one trace file (or --demo OUTDIR)")
    return args.traces


def _print_figures(result: dict) -> None:
    from rich.table import Table

    from commbench import terminal

    console = terminal.console()
    for rank in result["ranks"]:
        truncated = " (truncated)" if rank["truncated"] else ""
        grid = Table(title=f"rank {rank['rank']} ({rank['device']}): {rank['path']}{truncated}")
        for heading in ("step", "span ms", "compute ms", "comm ms", "overlap", "exposed comm ms", "idle ms"):
            grid.add_column(heading, justify="right")
        for window in rank["iterations"]:
            grid.add_row(*_figure_cells(str(window["step"]), window))
        grid.add_row(*_figure_cells("total", rank["total"]), style="bold")
        console.print(grid)
        if rank["collectives"]:
            console.print(_collectives_grid(rank["collectives"]))


def _figure_cells(label: str, window: dict) -> list[str]:
    pct = window["overlap_pct"]
    return [
        label,
        _ms(window["duration_us"]),
        _ms(window["compute_us"]),
        _ms(window["communication_us"]),
        "n/a" if pct is None else f"{pct:.1f}%",
        _ms(window["exposed_communication_us"]),
        _ms(window["idle_us"]),
    ]


def _collectives_grid(collectives: list[dict]):
    from rich.table import Table

    from commbench.units import format_size

    grid = Table(title="busiest collectives")
    grid.add_column("collective")
    for heading in ("count", "total ms", "bytes"):
        grid.add_column(heading, justify="right")
    for stat in collectives[:_BUSIEST_SHOWN]:
        size = "-" if stat["bytes"] is None else format_size(stat["bytes"])
        grid.add_row(stat["name"], str(stat["count"]), _ms(stat["total_us"]), size)
    return grid


def _ms(microseconds: float) -> str:
    return f"{microseconds / 1000:.3f}"
