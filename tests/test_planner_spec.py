"""PlanSpec: every planner input, checked where it is made; the CLI and the dashboard both build one."""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from commbench.commands import plan
from commbench.errors import UsageError
from commbench.modeling.hardware import load_network, load_processor
from commbench.modeling.spec import PlanSpec, build_planner

EXAMPLES = Path(__file__).resolve().parent.parent / "results" / "examples"
BASIC = dict(model="llama2-7b", gpus=8, global_batch=64, seq_len=4096)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    plan.add_arguments(parser)
    return parser.parse_args(
        ["--model", "llama2-7b", "--gpus", "8", "--global-batch", "64", "--seq-len", "4096", *argv]
    )


def test_the_command_line_defaults_are_the_specs():
    assert plan.spec_from_args(parse()) == PlanSpec(**BASIC)


def test_every_option_reaches_the_spec():
    args = parse(
        "--gpus-per-node",
        "4",
        "--hardware",
        "dgx-a100",
        "--inter-network",
        "eth-25g",
        "--processor",
        "h200",
        "--precision",
        "fp32",
        "--execution",
        "torch-eager",
        "--slowdown",
        "0.1",
        "--top",
        "3",
        "--bandwidth",
        "RUN",
    )
    assert plan.spec_from_args(args) == PlanSpec(
        **BASIC,
        gpus_per_node=4,
        hardware="dgx-a100",
        inter_network="eth-25g",
        processor="h200",
        precision="fp32",
        execution="torch-eager",
        slowdown=0.1,
        top=3,
        bandwidth="RUN",
    )


@pytest.mark.parametrize(
    "change, message",
    [
        ({"gpus": 0}, "--gpus must be between 1"),
        ({"global_batch": None}, "--global-batch must be a whole number"),
        ({"seq_len": 4096.5}, "--seq-len must be a whole number"),
        ({"top": 1000}, "--top must be between 1 and 100"),
        ({"gpus_per_node": True}, "--gpus-per-node must be a whole number"),
        ({"precision": "8"}, "--precision must be one of 16, 12, 18, fp32"),
        (
            {"execution": "jax"},
            "--execution must be one of megatron-core, megatron-2021, deepspeed, torch-fsdp, torch-eager, megatron",
        ),
        ({"slowdown": math.nan}, "slowdown must be between 0 and 10"),
        ({"slowdown": -0.1}, "slowdown must be between 0 and 10"),
        ({"slowdown": 0.1, "overlap_run": "RUN"}, "give --slowdown or --overlap-run, not both"),
        ({"tp_comm_overlap": "yes"}, "--tp-comm-overlap is on or off, not 'yes'"),
    ],
)
def test_a_spec_refuses_bad_values_naming_the_option(change, message):
    with pytest.raises(UsageError, match=message):
        PlanSpec(**{**BASIC, **change})


def test_whole_numbers_written_as_floats_become_ints():
    assert PlanSpec(**{**BASIC, "gpus": 8.0}).gpus == 8 and isinstance(PlanSpec(**{**BASIC, "gpus": 8.0}).gpus, int)


def test_build_planner_applies_every_input():
    planner = build_planner(
        PlanSpec(
            **BASIC,
            gpus_per_node=4,
            processor="h200",
            inter_network="eth-25g",
            precision="12",
            execution="torch-eager",
            slowdown=0.25,
        )
    )
    system = planner.cluster.system
    assert system.gpus_per_host == 4 and system.nvlink_domain == 4  # a DGX domain follows its host
    assert system.processor == load_processor("h200") and system.inter == load_network("eth-25g")
    assert planner.job.precision.master_bytes == 0 and not planner.job.execution.tp_backward_overlap
    assert planner.cluster.slowdown_intra == planner.cluster.slowdown_inter == 0.25


def test_build_planner_reads_the_measured_runs():
    overlap = EXAMPLES / "example-overlap-cpu"
    measured = EXAMPLES / "example-nccl-tests-a100-2nodes-aws"  # a real log (the H100 example is synthetic)
    planner = build_planner(PlanSpec(**BASIC, bandwidth=str(measured), overlap_run=str(overlap)))
    assert planner.cluster.cost.describe().startswith("measured")
    assert planner.cluster.slowdown_intra == planner.cluster.slowdown_inter != 0.15


def test_a_cluster_of_part_nodes_is_refused_when_the_planner_is_built():
    with pytest.raises(UsageError, match="not a whole number of 8-GPU nodes"):
        build_planner(PlanSpec(**{**BASIC, "gpus": 12}))


def test_the_dashboard_planner_offers_every_plan_input(tmp_path):
    """Each PlanSpec field has a control on the planner page: the page offers what `commbench plan` does."""
    from dashboard.app import create_app

    app = create_app(tmp_path)
    page = sys.modules["pages.planner"]
    assert sorted(page.SPEC_CONTROLS.values()) == sorted(f.name for f in fields(PlanSpec))
    with app.server.app_context():
        assert set(page.SPEC_CONTROLS) <= set(component_ids(page.layout()))
        request = page._request(
            *[
                {
                    "plan-model": "llama2-7b",
                    "plan-gpus": 8,
                    "plan-batch": 64,
                    "plan-seq": 4096,
                    "plan-bandwidth": page.PRESET_SOURCE,
                    "plan-overlap-run": page.DEFAULTS,
                    "plan-hardware": "dgx-h100",
                    "plan-precision": "16",
                    "plan-execution": "megatron",
                    "plan-top": 5,
                }.get(control)
                for control in page.SPEC_CONTROLS
            ],
            " ",
        )
    assert request.spec == PlanSpec(**BASIC) and request.layout is None


def component_ids(component) -> list[str]:
    """The ids of a Dash layout tree."""
    children = getattr(component, "children", None)
    children = children if isinstance(children, list) else [children] if children is not None else []
    own = [component.id] if getattr(component, "id", None) else []
    return own + [i for child in children for i in component_ids(child)]


def test_the_dashboard_evaluates_one_layout_as_plan_layout_does():
    from dashboard.planning import PlanCache, PlanRequest

    spec = PlanSpec(**BASIC)
    fits = PlanCache().view(PlanRequest(spec, layout="tp=2,dp=4,zero=1"))
    assert [str(r.layout) for r in fits.ranked] == ["tp=2,pp=1,dp=4,mbs=1,zero=1,recompute=none"] and fits.fitting == 1
    assert (
        fits.timeline(0)
        and fits.ranked[0].step_s == build_planner(spec).evaluate_layout(fits.ranked[0].layout)[0].step_s
    )
    too_big = PlanCache().view(PlanRequest(spec, layout="dp=8,mbs=8"))
    assert too_big.fitting == 0 and any(w.startswith("does not fit: each GPU needs") for w in too_big.warnings)
    with pytest.raises(UsageError, match="uses 4 GPUs"):
        PlanCache().view(PlanRequest(spec, layout="tp=2,dp=2"))


@pytest.mark.parametrize(
    "framework, execution",
    [
        ("Megatron-LM (2021)", "megatron-2021"),  # the scorecard's 2021 README rows
        ("Megatron-DeepSpeed (BLOOM)", "megatron-2021"),
        ("NeMo 22.09", "megatron-2021"),
        ("NeMo 24.09 on Megatron-Core", "megatron-core"),
        ("NeMo 25.11 (Megatron-Bridge on Megatron-Core, Transformer Engine)", "megatron-core"),
        ("Megatron-LM 2024", "megatron-core"),
        ("torchtitan", "torch-fsdp"),
        ("MosaicML LLM Foundry", "torch-fsdp"),
        ("DeepSpeed ZeRO-3", "deepspeed"),
    ],
)
def test_a_named_framework_picks_the_execution_and_says_so(framework, execution):
    spec = plan.spec_from_args(parse("--framework", framework))
    assert spec.execution == execution
    assert spec.execution_source().startswith(f"picked from --framework {framework!r}")


def test_an_explicit_execution_wins_over_the_framework_and_an_unknown_framework_is_refused():
    spec = PlanSpec(**BASIC, framework="NeMo 25.11", execution="torch-fsdp")
    assert spec.execution == "torch-fsdp" and spec.execution_source() is None
    with pytest.raises(UsageError, match="cannot tell the execution preset from --framework 'JAX'"):
        PlanSpec(**BASIC, framework="JAX")


def _tp_exposed(**changes) -> tuple[float, str]:
    """The exposed TP seconds of one TP=8 layout and the execution's stated assumptions."""
    from commbench.modeling.layout import LayoutBatch, parse_layout

    planner = build_planner(PlanSpec(**{**BASIC, "gpus": 16, **changes}))
    step = planner.step_model.evaluate(LayoutBatch.from_layouts([parse_layout("tp=8,dp=2,mbs=1,zero=1", 16)]))
    return float(step.categories["tp"][0]), planner.job.execution.assumes


def test_tp_comm_overlap_turns_the_forward_tp_overlap_on_and_off_and_says_so():
    """--tp-comm-overlap off makes megatron-core wait for its forward TP collectives (more TP exposed); on gives
    torch-fsdp Transformer Engine's overlap (less); left out, each execution keeps its own (on for megatron-core)."""
    preset, said = _tp_exposed()
    off, said_off = _tp_exposed(tp_comm_overlap="off")
    assert _tp_exposed(tp_comm_overlap="on")[0] == preset and said == said_off.split("; --tp-comm-overlap")[0]
    assert off > 1.5 * preset and "--tp-comm-overlap off: forward TP collectives blocking" in said_off
    fsdp, fsdp_on = _tp_exposed(execution="torch-fsdp")[0], _tp_exposed(execution="torch-fsdp", tp_comm_overlap="on")[0]
    assert fsdp_on < fsdp
    assert plan.spec_from_args(parse("--tp-comm-overlap", "off")).tp_comm_overlap == "off"


def _lora_pair(layout: str, gpus: int):
    """The same llama2-70b step fully trained and under --finetune lora (rank 16 on qkv and o)."""
    from commbench.modeling.layout import LayoutBatch, parse_layout

    spec = {"model": "llama2-70b", "gpus": gpus, "hardware": "dgx-h100", "global_batch": 8, "seq_len": 8192}
    batch = LayoutBatch.from_layouts([parse_layout(layout, gpus)])
    full, lora = (build_planner(PlanSpec(**spec, finetune=mode)) for mode in ("full", "lora"))
    return full, lora, full.step_model.evaluate(batch), lora.step_model.evaluate(batch)


def test_lora_prices_a_frozen_base_against_a_hand_calculation():
    full, lora, full_step, lora_step = _lora_pair("tp=8,dp=2,mbs=1,zero=1", 16)
    job = lora.job
    # by hand: 80 layers x rank 16 x ((8192 -> 8192 + 2 x 1024) + (8192 -> 8192)) adapter parameters
    adapters = 80 * 16 * ((8192 + 10240) + (8192 + 8192))
    assert job.lora is not None and job.lora.params(job.model) == adapters == 44_564_480
    # FLOPs: 4 per frozen matmul parameter (no weight gradient) + 6 per adapter parameter, against 6PD
    matmul = job.model.total_params - job.model.embedding_params
    assert job.flops_per_token() == pytest.approx(full.job.flops_per_token() - 2 * matmul + 6 * adapters)
    assert job.flops_per_token() / full.job.flops_per_token() == pytest.approx(0.70, abs=0.03)
    # backward GEMMs: input gradients only, about half the full backward (plus the small adapters);
    # the forward GEMMs gain only the adapters'; the step's compute (attention core and the rest kept) falls
    from commbench.modeling.compute import _adapters, layer_compute

    proc = full.cluster.system.processor
    full_layer, lora_layer = (layer_compute(p.job, full_step.batch, proc) for p in (full, lora))
    adapter_fwd, adapter_bwd = _adapters(job, proc, 8192.0, full_step.batch.tp)
    assert 0 < adapter_fwd[0] < 0.1 * full_layer.fwd_gemm[0] and adapter_bwd[0] > 2 * adapter_fwd[0]
    assert (lora_layer.bwd_gemm[0] - adapter_bwd[0]) / full_layer.bwd_gemm[0] == pytest.approx(0.5, abs=0.02)
    assert lora_layer.fwd_gemm[0] - adapter_fwd[0] == pytest.approx(full_layer.fwd_gemm[0])
    assert 0.7 < lora_step.categories["compute"][0] / full_step.categories["compute"][0] < 0.9
    # gradients, optimizer state and the optimizer step only for the adapters
    share = adapters / job.model.total_params
    for item in ("gradients", "optimizer"):
        assert lora_step.memory[item][0] == pytest.approx(full_step.memory[item][0] * share)
    assert lora_step.categories["optimizer"][0] == pytest.approx(full_step.categories["optimizer"][0] * share)
    assert lora_step.memory["parameters"][0] == pytest.approx(full_step.memory["parameters"][0] * (1 + share))
    # activations: the frozen QKV and gate/up inputs (the norms' outputs, s*b*h*2 bytes each, /8 with
    # sequence parallelism) and the down-projection's input (s*b*f*2/8) are not kept; the QKV and O adapters
    # keep their dropped-out inputs (2 bytes + a 1-byte mask, s*b*h each: /8 for QKV's, split by TP for O's)
    # and A's rank-16 outputs (s*b*16*2 bytes each, unsplit), per layer, 80 layers, one micro-batch in flight
    sbh = 8192 * 8192
    per_layer = sbh * ((-2 * 2 + 3) / 8 + (-2 * 28672 / 8192 + 3) / 8) + 8192 * 2 * 16 * 2
    assert lora_step.memory["activations"][0] - full_step.memory["activations"][0] == pytest.approx(80 * per_layer)


def test_lora_reduces_only_the_adapters_gradients_over_data_parallelism():
    _, _, full_step, lora_step = _lora_pair("tp=8,dp=2,mbs=1,zero=0", 16)
    full_dp, lora_dp = (step.comm.dp.bucket[0] * step.comm.dp.buckets[0] for step in (full_step, lora_step))
    assert full_dp > 0.1  # seconds of all-reduce for 69B / 8 gradients of 2 bytes
    assert lora_dp < 0.01 * full_dp


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"finetune": "qlora"}, "--finetune is full or lora, not 'qlora'"),
        ({"finetune": "lora", "lora_targets": "qkv,ffn"}, "--lora-targets is a comma-separated list of"),
        ({"finetune": "lora", "lora_rank": 0}, "--lora-rank"),
    ],
)
def test_a_lora_spec_refuses_bad_values(change, message):
    with pytest.raises(UsageError, match=message):
        PlanSpec(**BASIC, **change)


def test_lora_is_refused_on_moe_models_and_named_in_plan_json(capsys):
    with pytest.raises(UsageError, match="lora prices dense models"):
        build_planner(PlanSpec(**{**BASIC, "model": "mixtral-8x7b", "gpus": 8}, finetune="lora"))
    assert plan.main(parse("--finetune", "lora", "--json", "--top", "1")) == 0

    finetune = json.loads(capsys.readouterr().out)["finetune"]
    assert finetune["mode"] == "lora" and finetune["rank"] == 16 and finetune["targets"] == ["qkv", "o"]
