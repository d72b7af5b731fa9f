"""Fit the host's exposed MoE work (MoEExecution.host_layer_s, host_expert_s) on the calibration half
of the MoE scorecard only, and say on which rows.

Run: python bench/fit_moe_host.py

The step is linear in the two figures (they add to every MoE layer's forward and, twice, backward
of the rows without a full-iteration CUDA graph), so each calibration row is priced three times (both
zero, each at a probe value) and the pair minimising the calibration half's MAPE is found on a grid
of the linear prediction, then checked by pricing the rows again at it. The held-out half is never
read here: bench/scorecard_moe.py scores it with the figures frozen in commbench/modeling/job.py.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scorecard_moe

from commbench.modeling.planner import Planner
from commbench.modeling.spec import build_planner

PROBE_LAYER_S, PROBE_EXPERT_S = 1e-3, 1e-4


def step_at(row: dict, layer_s: float, expert_s: float) -> float:
    planner = build_planner(scorecard_moe.spec_of(row))
    job = planner.job
    job = replace(job, moe_execution=replace(job.moe_execution, host_layer_s=layer_s, host_expert_s=expert_s))
    result, _ = Planner(job, planner.cluster).evaluate_layout(scorecard_moe.layout_of(row))
    return result.step_s


def calibration_rows() -> list[dict]:
    rows = [r for r in scorecard_moe.load_rows() if r["system"] in scorecard_moe.HARDWARE]
    half = scorecard_moe.halves(scorecard_moe.load_rows())
    return [r for r in rows if half[r["id"]] == "calibration"]


def linear_terms(rows: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(published, step at zero, d step / d layer_s, d step / d expert_s) per row."""
    published = np.array([scorecard_moe.published_step(r) for r in rows])
    base = np.array([step_at(r, 0.0, 0.0) for r in rows])
    per_layer = (np.array([step_at(r, PROBE_LAYER_S, 0.0) for r in rows]) - base) / PROBE_LAYER_S
    per_expert = (np.array([step_at(r, 0.0, PROBE_EXPERT_S) for r in rows]) - base) / PROBE_EXPERT_S
    return published, base, per_layer, per_expert


def fit(published, base, per_layer, per_expert) -> tuple[float, float, float]:
    """(layer_s, expert_s, calibration MAPE) on a grid of non-negative figures."""
    layers = np.linspace(0.0, 3e-3, 121)
    experts = np.linspace(0.0, 3e-4, 121)
    a, b = np.meshgrid(layers, experts, indexing="ij")
    predicted = base + per_layer * a[..., None] + per_expert * b[..., None]
    mape = np.abs(predicted / published - 1).mean(axis=-1)
    i, j = np.unravel_index(np.argmin(mape), mape.shape)
    return float(layers[i]), float(experts[j]), float(mape[i, j])


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    rows = calibration_rows()
    terms = linear_terms(rows)
    layer_s, expert_s, mape = fit(*terms)
    checked = np.array([step_at(r, layer_s, expert_s) for r in rows]) / terms[0] - 1
    print(f"fitted on {len(rows)} calibration rows (the held-out half not read):")
    for row, graphed in zip(rows, (scorecard_moe.full_iteration_graph(r) for r in rows)):
        print(f"  {row['id']}{'  (full-iteration CUDA graph: no host term)' if graphed else ''}")
    print(f"host_layer_s = {layer_s:.6g} s, host_expert_s = {expert_s:.6g} s per MoE layer forward")
    print(
        f"calibration MAPE {mape:.1%} (linear), {np.abs(checked).mean():.1%} priced again, "
        f"mean signed {checked.mean():+.1%}; at zero: MAPE {np.abs(terms[1] / terms[0] - 1).mean():.1%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
