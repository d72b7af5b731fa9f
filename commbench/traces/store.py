"""Keep a trace analysis as a run directory, so the dashboard lists it beside measured runs.

Format of `<out>/<run_id>/`:
  run.json       RunInfo with kind "trace" and source "torch.profiler"; `args.traces` names the
                 analysed files, `world_size` counts them (one trace per rank).
  trace.json     `TraceAnalysis.to_dict()`: per-rank and per-iteration figures and the timeline bars.
  records.jsonl  empty (a trace has no benchmark records); kept so every run directory has one.
run.json is written first with `complete: false` and marked complete only once trace.json is in
place, so a reader that finds an incomplete trace run knows trace.json may be missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from commbench.data.rundir import load_document, new_run_id, save_document_run, utc_now
from commbench.data.schema import RunInfo
from commbench.traces.analysis import TraceAnalysis

TRACE_FILE = "trace.json"
TRACE_SOURCE = "torch.profiler"


def save_trace_analysis(
    analysis: TraceAnalysis,
    out_dir: str | Path,
    trace_paths: Sequence[str | Path],
    *,
    run_id: str | None = None,
    backend: str | None = None,
) -> Path:
    """Write the analysis as a new run directory under out_dir and return its path.

    `backend` defaults to what the traces show: nccl when a rank has GPU activity, else gloo.
    """
    result = analysis.to_dict()
    if backend is None:
        backend = "nccl" if any(rank["device"] == "gpu" for rank in result["ranks"]) else "gloo"
    info = RunInfo(
        run_id=run_id or new_run_id("trace-"),
        kind="trace",
        source=TRACE_SOURCE,
        created=utc_now(),
        backend=backend,
        world_size=len(result["ranks"]),
        args={"traces": [Path(path).name for path in trace_paths]},
        warnings=list(result["warnings"]),
    )
    return save_document_run(out_dir, info, TRACE_FILE, result)


def load_trace_analysis(run_dir: str | Path) -> dict[str, Any]:
    """The analysis dict stored in a trace run directory; CommbenchError if it is missing or unreadable."""
    result = load_document(run_dir, TRACE_FILE, "a trace analysis", "ranks")
    result.setdefault("timeline", [])
    return result
