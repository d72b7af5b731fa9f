"""The host's exposed work of an MoE layer without a full-iteration CUDA graph (MoEExecution):
a fixed part per layer and one per local expert, forward, twice that backward; none with a graph."""

import json

import pytest

from commbench.modeling.job import MOE_HOST_EXPERT_S, MOE_HOST_LAYER_S
from commbench.modeling.layout import LayoutBatch, parse_layout
from commbench.modeling.spec import PlanSpec, build_planner

SPEC = {"model": "qwen3-30b-a3b", "gpus": 8, "global_batch": 64, "seq_len": 4096, "routing": "uniform"}
LAYOUT = "tp=1,dp=8,ep=8,mbs=1"


def _planner(**extra):
    return build_planner(PlanSpec(**SPEC, **extra))


def test_host_work_per_moe_layer_by_hand_and_gone_with_a_cuda_graph():
    eager, graphed = _planner(), _planner(cuda_graph=True)
    layout = parse_layout(LAYOUT, 8)
    host = eager.moe_parts([layout])[0]["moe_layer"]["host_sync"]
    local_experts = 128 / 8
    assert host["forward_s"] == pytest.approx(MOE_HOST_LAYER_S + MOE_HOST_EXPERT_S * local_experts)
    assert host["backward_s"] == pytest.approx(2 * host["forward_s"])
    assert graphed.moe_parts([layout])[0]["moe_layer"]["host_sync"] == {"forward_s": 0.0, "backward_s": 0.0}
    batch = LayoutBatch.from_layouts([layout])
    slow, fast = (p.step_model.evaluate(batch) for p in (eager, graphed))
    # every MoE layer pass of the step (48 layers, 8 micro-batches, forward and backward) pays it
    passes = 48 * 8
    added = float(slow.categories["compute"][0] - fast.categories["compute"][0])
    assert added == pytest.approx(passes * 3 * host["forward_s"], rel=1e-6)


def test_plan_cli_takes_cuda_graph(cli):
    args = ["plan", *(word for k, v in SPEC.items() for word in (f"--{k.replace('_', '-')}", str(v)))]
    result = cli(*args, "--layout", LAYOUT, "--cuda-graph", "--json")
    assert result.returncode in (0, 1), result.stderr  # 1: the layout does not fit; it is still priced
    moe = json.loads(result.stdout)["moe"][0]
    assert moe["execution"]["cuda_graph"] is True
    assert moe["moe_layer"]["host_sync"] == {"forward_s": 0.0, "backward_s": 0.0}
