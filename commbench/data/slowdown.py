"""The compute slowdown the step model charges, read from a `commbench overlap` run directory.

The step model (commbench/modeling/step.py) charges `slowdown x overlapped seconds` of extra
compute wherever a collective runs beside compute. The measured counterpart of that factor is

    (compute_during_comm_us - compute_us) / min(comm_during_compute_us, compute_during_comm_us)

the GEMM's extra time per second that the collective actually ran beside it. It is taken at
each op's largest measured size, where the collective covers most of the GEMM and the
contention for cores, memory bandwidth or SMs is the steady one that gradient buckets and TP
messages see, and the median over ops is used (one noisy op does not set it). It is floored at 0:
a GEMM measured faster beside a collective is noise, not a speed-up to promise. Rows with wrong
results are left out. Pure Python: no torch.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from commbench.data.rundir import load_run
from commbench.errors import UsageError


def extra_compute_per_overlapped_second(record: dict[str, Any]) -> float:
    overlapped = min(record["comm_during_compute_us"], record["compute_during_comm_us"])
    if overlapped <= 0:
        return 0.0
    return float((record["compute_during_comm_us"] - record["compute_us"]) / overlapped)


def measured_slowdown(run_dir: str | Path) -> float:
    """The fraction of overlapped time added to compute (0.13 = 13%), as `commbench plan --slowdown` takes it."""
    run = load_run(run_dir)
    if run.info.kind != "overlap":
        raise UsageError(
            f"{run_dir}: a {run.info.kind} run; the slowdown comes from an overlap run (commbench overlap)"
        )
    usable = [r for r in run.records if "compute_during_comm_us" in r and r["wrong"] <= 0]
    if not usable:
        raise UsageError(f"{run_dir}: no overlap records with correct results")
    largest: dict[str, int] = {}
    for record in usable:
        largest[record["op"]] = max(largest.get(record["op"], 0), record["size_bytes"])
    per_op = [extra_compute_per_overlapped_second(r) for r in usable if r["size_bytes"] == largest[r["op"]]]
    return max(0.0, statistics.median(per_op))
