"""Baselines (what a healthy machine measures, per row) and grading a run against one.

A baseline file is JSON:
  {"format": "commbench-baseline", "version": 1, "created": ..., "runs": [run ids],
   "rows": [{"key": [...], "row": "...", "n_runs": k, "time_us": median over runs,
             "time_us_mad": median absolute deviation over runs, "busbw_gbps": median over runs}]}
where "key" is the row's key (commbench.data.samples.row_key; a pairwise row's ends with its pair).
Each run contributes its reported time (the slowest rank's median) per row.

Grading: a row fails when the run's time exceeds the baseline's by more than the tolerance, after
allowing for the baseline's own spread: limit = time x (1 + tolerance) + 3 x 1.4826 x MAD (MAD x
1.4826 estimates a standard deviation; with one baseline run the spread is 0). Faster never fails.
A row the baseline has and the run lacks fails as "missing": a node set that skipped a row has
not shown it is fit. `expected_baseline` makes a baseline from a hardware preset instead.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from commbench.analysis.runs import RunRows, describe_key
from commbench.data.rundir import atomic_write_text, utc_now
from commbench.data.samples import key_from_json
from commbench.errors import UsageError

BASELINE_FORMAT = "commbench-baseline"
BASELINE_VERSION = 1
MAD_TO_SIGMA = 1.4826
SPREAD_SIGMAS = 3.0


def build_baseline(runs: list[RunRows]) -> dict[str, Any]:
    keys = [key for key in runs[0].rows if all(key in run.rows for run in runs)]
    rows = []
    for key in keys:
        times = np.array([run.rows[key]["time_us"] for run in runs], dtype=float)
        busbw = np.array([run.rows[key]["busbw_gbps"] for run in runs], dtype=float)
        median = float(np.median(times))
        rows.append(
            {
                "key": list(key),
                "row": describe_key(key),
                "n_runs": len(runs),
                "time_us": median,
                "time_us_mad": float(np.median(np.abs(times - median))),
                "busbw_gbps": float(np.median(busbw)),
            }
        )
    return {
        "format": BASELINE_FORMAT,
        "version": BASELINE_VERSION,
        "created": utc_now(),
        "runs": [run.run_id for run in runs],
        "rows": rows,
    }


def expected_baseline(run: RunRows, system: Any) -> dict[str, Any]:
    """A baseline from a hardware preset's nominal rates (`check --expect SYSTEM`): per (op, scope,
    variant), the run's largest size only (nominal rates are approached by large messages alone),
    at the time that size takes at the preset's per-rank bus bandwidth, which carries the preset's
    efficiency (what large collectives reach of the link rate) and its NIC sharing. Scope intra
    uses the preset's intra-node network; inter, and world on more than one node, its inter-node one."""
    nodes = max(len(run.info.nodes), 1)
    largest: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for key, record in run.rows.items():
        if record["scope"] == "pair" or record["busbw_factor"] <= 0:
            continue
        group = (record["op"], record["scope"], record["in_place"], record.get("direction"))
        if group not in largest or record["size_bytes"] > largest[group][3]:
            largest[group] = key
    rows = []
    for key in largest.values():
        record = run.rows[key]
        tier = (
            system.intra if record["scope"] == "intra" or (record["scope"] == "world" and nodes == 1) else system.inter
        )
        busbw = tier.busbw_per_rank(system.gpus_per_host)  # bytes/s
        time_us = record["size_bytes"] * record["busbw_factor"] / busbw * 1e6
        rows.append(
            {
                "key": list(key),
                "row": describe_key(key),
                "n_runs": 0,
                "time_us": time_us,
                "time_us_mad": 0.0,
                "busbw_gbps": busbw / 1e9,
                "source": f"{system.name}: {tier.name}",
            }
        )
    return {
        "format": BASELINE_FORMAT,
        "version": BASELINE_VERSION,
        "created": utc_now(),
        "runs": [f"preset {system.name}"],
        "rows": rows,
    }


def write_baseline(baseline: dict[str, Any], path: str | Path) -> None:
    atomic_write_text(Path(path), json.dumps(baseline, indent=1) + "\n")


def read_baseline(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        baseline = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: not a readable baseline ({str(exc).splitlines()[0]})") from None
    if not isinstance(baseline, dict) or baseline.get("format") != BASELINE_FORMAT:
        raise UsageError(f"{path}: not a commbench baseline (make one with `commbench baseline create`)")
    if baseline.get("version", 0) > BASELINE_VERSION:
        raise UsageError(
            f"{path}: baseline version {baseline['version']} is newer than this commbench reads ({BASELINE_VERSION})"
        )
    return baseline


@dataclass
class RowGrade:
    row: str
    key: list[Any]
    baseline_us: float
    limit_us: float
    time_us: float | None
    change: float | None  # time / baseline - 1
    passed: bool
    why: str  # pass, slower, missing


def grade(run: RunRows, baseline: dict[str, Any], tolerance: float) -> list[RowGrade]:
    grades = []
    for entry in baseline["rows"]:
        key = key_from_json(entry["key"])
        limit = entry["time_us"] * (1 + tolerance) + SPREAD_SIGMAS * MAD_TO_SIGMA * entry.get("time_us_mad", 0.0)
        record = run.rows.get(key)
        if record is None:
            grades.append(RowGrade(entry["row"], entry["key"], entry["time_us"], limit, None, None, False, "missing"))
            continue
        time_us = record["time_us"]
        passed = time_us <= limit
        grades.append(
            RowGrade(
                entry["row"],
                entry["key"],
                entry["time_us"],
                limit,
                time_us,
                time_us / entry["time_us"] - 1,
                passed,
                "pass" if passed else "slower",
            )
        )
    return grades


def grades_to_dict(run_id: str, grades: list[RowGrade], tolerance: float) -> dict[str, Any]:
    failed = [g for g in grades if not g.passed]
    return {
        "run": run_id,
        "tolerance": tolerance,
        "passed": not failed,
        "rows": [asdict(g) for g in grades],
        "failed": len(failed),
    }
