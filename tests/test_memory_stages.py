"""The per-stage memory ledger: `plan --json` stages, in-flight activations per schedule, the last
stage's output layer and logits by hand, every ledger item reachable, position tables counted,
Megatron-Core's uneven splits and interleaving rules."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from commbench import cli
from commbench.errors import UsageError
from commbench.modeling.cluster import Cluster
from commbench.modeling.hardware import load_system
from commbench.modeling.job import EXECUTIONS, PRECISIONS, TrainingJob
from commbench.modeling.layout import LayoutBatch, parse_layout
from commbench.modeling.ledger import ALLOCATOR_ITEMS, LEDGER_ITEMS, NOT_MODELLED, OUTSIDE_ITEMS
from commbench.modeling.memory import activation_bytes_per_layer, stage_layers, stage_memory
from commbench.modeling.model_config import load_model
from commbench.modeling.models import PRESETS
from commbench.modeling.network import PresetNetwork
from commbench.modeling.planner import Planner
from commbench.modeling.recipes import RECIPES

REAL_MODELS = Path(__file__).parent / "fixtures" / "models" / "real"
# llama2-7b: h 4096, 32 layers, 32 heads (MHA), ffn 11008, vocab 32000, untied
H, LAYERS, FFN, VOCAB = 4096, 32, 11008, 32000
LAYER_PARAMS = 4 * H * H + 3 * H * FFN + 2 * H  # q, k, v, o + gate, up, down + two RMSNorms


def plan_json(capsys, layout: str, *extra: str, gpus: int = 32, batch: int = 16) -> dict:
    code = cli.main(
        [
            "plan",
            "--model",
            "llama2-7b",
            "--gpus",
            str(gpus),
            "--global-batch",
            str(batch),
            "--seq-len",
            "4096",
            "--layout",
            layout,
            "--json",
            *extra,
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code in (0, 1)
    return out


def test_four_stage_1f1b_stages_in_flight_and_last_stage_by_hand(capsys):
    # tp=2, pp=4, dp=4: 16 sequences / (mbs 1 x dp 4) = 4 micro-batches per pipeline
    out = plan_json(capsys, "tp=2,pp=4,dp=4,mbs=1,zero=1,recompute=selective")
    stages = out["stages"]
    assert [s["stage"] for s in stages] == [0, 1, 2, 3] and [s["layers"] for s in stages] == [8, 8, 8, 8]
    per_mb = stages[3]["memory_bytes"]["activations"]  # the last stage holds one micro-batch
    # 1F1B: stage i holds min(m, p - i) micro-batches: 4, 3, 2, 1
    assert [s["memory_bytes"]["activations"] / per_mb for s in stages] == pytest.approx([4, 3, 2, 1])
    # one micro-batch of one layer by hand (Korthikanti with SP and selective recompute, bf16):
    # s*b*h*(10 + 2(q + k + v + o)/h + 6f/h)/t: 10 for norms and masks, 8 for MHA, 6f/h for SwiGLU
    sbh = 4096 * 1 * H
    per_layer = sbh * (10 + 8 + 6 * FFN / H) / 2
    assert per_mb == pytest.approx(8 * per_layer)
    # the last stage's output layer: vocab x h split over tp=2, 2 bytes each; the first has the embedding
    assert stages[3]["memory_bytes"]["parameters"] == 2 * (8 * LAYER_PARAMS + VOCAB * H) / 2
    assert stages[0]["memory_bytes"]["parameters"] == 2 * (8 * LAYER_PARAMS + VOCAB * H + H) / 2
    # logits: output-layer input (s*h/t with SP, 2 bytes) + s*V/t logits in bf16 and their fp32 copy
    assert stages[3]["memory_bytes"]["logits"] == 4096 * H * 2 / 2 + 4096 * VOCAB / 2 * (2 + 4)
    assert all(s["memory_bytes"]["logits"] == 0 for s in stages[:3])
    # the top level is the largest stage's, and every stage has its own step share and times
    largest = max(stages, key=lambda s: s["memory_bytes"]["total"])
    assert out["memory_bytes"] == largest["memory_bytes"] and out["memory_stage"] == largest["stage"]
    assert out["allocator_peak"] == largest["allocator_peak"]
    for s in stages:
        mem = s["memory_bytes"]
        assert mem["allocator_peak"] == pytest.approx(sum(mem[k] for k in ALLOCATOR_ITEMS))
        assert mem["total"] == pytest.approx(mem["allocator_peak"] + sum(mem[k] for k in OUTSIDE_ITEMS))
        assert 0 < s["step_share"] <= 1 and s["compute_s"] > 0 and s["communication_s"] > 0
    assert out["pacing_stage"] == 3  # the output layer and loss make the last stage the busiest


def test_interleaved_first_stage_holds_megatrons_warmup_plus_one(capsys):
    # pp=4, vpp=2, 8 micro-batches: stage i runs 2(p-i-1) + (v-1)p warm-up chunk forwards, holds one more
    out = plan_json(capsys, "tp=2,pp=4,vpp=2,dp=4,mbs=1,zero=1,recompute=selective", batch=32)
    stages = out["stages"]
    chunk = 4096 * 1 * H * (10 + 8 + 6 * FFN / H) / 2 * 4  # one micro-batch of one 4-layer chunk
    expected = [min(2 * (4 - i - 1) + 4 + 1, 16) for i in range(4)]  # 11, 9, 7, 5
    assert [s["memory_bytes"]["activations"] / chunk for s in stages] == pytest.approx(expected)
    # Narayanan et al.'s first-stage figure: p * (1 + (p-1)/(p*v)) micro-batches of its 8 layers
    assert stages[0]["memory_bytes"]["activations"] == pytest.approx(4 * (1 + 3 / 8) * 2 * chunk)


def test_interleaving_five_micro_batches_on_four_stages_as_megatron_core_accepts(capsys):
    code = cli.main(
        [
            "plan",
            "--model",
            "llama2-7b",
            "--gpus",
            "16",
            "--global-batch",
            "10",
            "--seq-len",
            "4096",
            "--layout",
            "tp=2,pp=4,vpp=2,dp=2,mbs=1",
        ]
    )
    assert code == 2 and "last group of 1 < pp=4" in capsys.readouterr().err
    out = plan_json(capsys, "tp=2,pp=4,vpp=2,dp=2,mbs=1,vpp_group=5", gpus=16, batch=10)
    assert out["micro_batches"] == 5 and len(out["stages"]) == 4 and out["step_s"] > 0
    # the planner's search now screens interleaved layouts whose micro-batches are not a multiple of pp
    planner = _planner("llama2-7b", 16, global_batch=10)
    batch = planner.enumerate()
    m = 10 // (batch.mbs * batch.dp)
    odd = (batch.vpp > 1) & (m % batch.pp != 0)
    assert odd.any() and (batch.vpp_group[odd] == m[odd]).all()


def test_uneven_split_and_embedding_loss_in_split_as_megatron_core_builds_them():
    job = TrainingJob(PRESETS["llama2-7b"], 4096, 16)
    batch = LayoutBatch.from_layouts(
        [
            parse_layout("pp=4,dp=1,pp_first=5,pp_last=9", 4),
            parse_layout("pp=4,dp=1,pp_embedding=1", 4),
            parse_layout("pp=4,dp=1", 4),
        ]
    )
    layers = stage_layers(job, batch, np.arange(4)[:, None])
    assert layers[:, 0].tolist() == [5, 9, 9, 9]  # (32 - 5 - 9) / 2 = 9 in each middle stage
    assert layers[:, 2].tolist() == [8, 8, 8, 8]
    planner = _planner("llama2-7b", 4, global_batch=16)
    with pytest.raises(UsageError, match="left over must divide evenly"):
        planner.check_pipeline(parse_layout("pp=4,dp=1,pp_first=6", 4), 16)
    with pytest.raises(UsageError, match="must be divisible by pp=4"):
        planner.check_pipeline(parse_layout("pp=4,dp=1,pp_embedding=1", 4), 16)
    with pytest.raises(UsageError, match="does not combine"):
        parse_layout("pp=4,dp=1,pp_first=6,pp_loss=1", 4)


def test_embedding_and_loss_counted_in_the_split():
    # 30 layers + embedding + loss = 32 over 4 stages: 7, 8, 8, 7
    model = replace(PRESETS["llama2-7b"], layers=30)
    job = TrainingJob(model, 4096, 16)
    batch = LayoutBatch.from_layouts([parse_layout("pp=4,dp=1,pp_embedding=1,pp_loss=1", 4)])
    assert stage_layers(job, batch, np.arange(4)[:, None])[:, 0].tolist() == [7, 8, 8, 7]


def _planner(
    model: str,
    gpus: int,
    global_batch: int = 16,
    execution: str = "megatron-core",
    precision: str = "16",
    seq: int = 4096,
    compute: str = "bf16",
) -> Planner:
    system = load_system("dgx-h100")
    job = TrainingJob(
        load_model(model),
        seq,
        global_batch,
        PRECISIONS[precision],
        execution=EXECUTIONS[execution],
        compute=RECIPES[compute],
    )
    return Planner(job, Cluster(gpus, system, PresetNetwork(system)))


# each item, and a layout and execution in which it must hold bytes (a test per item: none may drop to zero)
ITEM_CASES = {
    "parameters": ("megatron-core", "tp=2,pp=2,dp=2,mbs=1", 0),
    "quantised weights": ("megatron-core fp8-delayed", "tp=2,pp=2,dp=2,mbs=1", 0),
    "gradients": ("megatron-core", "tp=2,pp=2,dp=2,mbs=1", 0),
    "optimizer": ("megatron-core", "tp=2,pp=2,dp=2,mbs=1", 0),
    "grad_buckets": ("torch-fsdp", "tp=2,pp=2,dp=2,mbs=1,zero=1", 0),
    "param_gather": ("torch-fsdp", "dp=8,mbs=1,zero=3", 0),
    "activations": ("megatron-core", "tp=2,pp=2,dp=2,mbs=1", 0),
    "recompute_buffer": ("megatron-core", "tp=2,pp=2,dp=2,mbs=1,recompute=full", 0),
    "logits": ("megatron-core", "tp=2,pp=2,dp=2,mbs=1", 1),
    "attention_workspace": ("megatron-2021", "tp=2,pp=2,dp=2,mbs=1", 0),
    "moe_dispatch": ("megatron-core", "tp=2,pp=2,dp=2,ep=2,mbs=1", 0),
    "gemm_workspace": ("megatron-core", "tp=2,pp=2,dp=2,mbs=1", 0),
    "cuda_context": ("megatron-core", "tp=2,pp=2,dp=2,mbs=1", 0),
    "nccl_buffers": ("megatron-core", "tp=2,pp=2,dp=2,mbs=1", 0),
    "allocator_reserve": ("megatron-core", "tp=2,pp=2,dp=2,mbs=1", 0),
}
ITEM_MODELS = {"moe_dispatch": "mixtral-8x7b"}  # an item only an MoE model holds; the rest: llama2-7b


def test_every_item_is_a_case_or_named_as_not_modelled():
    assert set(ITEM_CASES) == set(LEDGER_ITEMS)
    from commbench.commands import plan  # its module doc is `plan --help`

    for name in (*LEDGER_ITEMS, *NOT_MODELLED):
        assert name in plan.__doc__


@pytest.mark.parametrize("item", sorted(ITEM_CASES))
def test_item_holds_bytes_where_it_must(item):
    execution, layout, stage = ITEM_CASES[item]
    execution, _, compute = execution.partition(" ")
    planner = _planner(ITEM_MODELS.get(item, "llama2-7b"), 8, execution=execution, compute=compute or "bf16")
    batch = LayoutBatch.from_layouts([parse_layout(layout, 8)])
    ledger, _ = stage_memory(planner.job, batch, np.array([stage]))
    assert set(ledger) == {*LEDGER_ITEMS, "allocator_peak", "outside_allocator", "total"}
    assert ledger[item][0] > 0, f"{item} is zero for {execution} {layout} stage {stage}"


def test_gradients_absent_at_the_activation_peak_until_a_backward_ran():
    """torch DDP creates .grad in backward: with one micro-batch the activation peak comes before
    any gradient exists; with two the second's forward runs beside the first's gradients.
    Megatron's contiguous buffer holds them all step."""
    batch = LayoutBatch.from_layouts([parse_layout("dp=8,mbs=1", 8)])
    one = stage_memory(_planner("llama2-7b", 8, global_batch=8, execution="torch-fsdp").job, batch, np.array([0]))
    two = stage_memory(_planner("llama2-7b", 8, global_batch=16, execution="torch-fsdp").job, batch, np.array([0]))
    megatron = stage_memory(_planner("llama2-7b", 8, global_batch=8).job, batch, np.array([0]))
    assert one[1][0] == two[1][0] == megatron[1][0] == 0  # all peak at the backward start
    assert one[0]["gradients"][0] == 0 and two[0]["gradients"][0] > 0 and megatron[0]["gradients"][0] > 0
    assert two[0]["gradients"][0] == megatron[0]["gradients"][0]


@pytest.mark.parametrize("model", ["gpt2", "opt-350m", "opt-1.3b"])
def test_learned_positions_are_in_the_ledger(model):
    """The ledger's parameter bytes equal 2 x model_figures.total_params, to the parameter."""
    spec = load_model(str(REAL_MODELS / model / "config.json"))
    job = TrainingJob(spec, 1024, 8)
    batch = LayoutBatch.from_layouts([parse_layout("dp=1,mbs=1", 1)])
    ledger, _ = stage_memory(job, batch, np.array([0]))
    assert ledger["parameters"][0] == 2 * spec.total_params


def test_activation_bytes_per_layer_is_what_the_stages_use():
    job = TrainingJob(PRESETS["llama2-7b"], 4096, 16)
    batch = LayoutBatch.from_layouts([parse_layout("tp=2,pp=4,dp=1,mbs=1,recompute=selective", 8)])
    ledger, _ = stage_memory(job, batch, np.array([3]))
    assert ledger["activations"][0] == 8 * activation_bytes_per_layer(job, batch, batch.recompute)[0]


def test_dashboard_draws_each_stage_stacked_against_the_device(capsys):
    from dashboard.figures.planner import stage_memory_figure

    out = plan_json(capsys, "tp=2,pp=4,dp=4,mbs=1,zero=1,recompute=selective")
    figure = stage_memory_figure(out, 80e9)
    assert figure.layout.barmode == "stack" and figure.layout.shapes[0].y0 == pytest.approx(80.0)
    assert {trace.name for trace in figure.data} <= set(LEDGER_ITEMS)
    for i, stage in enumerate(out["stages"]):  # the bars of a stage add up to its total
        assert sum(trace.y[i] for trace in figure.data) == pytest.approx(stage["memory_bytes"]["total"] / 1e9)
    assert len(figure.data[0].x) == 4


def test_recompute_modules_and_block_method_as_megatron_names_them():
    """Selective recompute of Megatron's --recompute-modules drops exactly what each module keeps
    (by hand for llama2-7b, bf16, tp=2 with SP, flash attention), costs the forward share it
    repeats, and the block method keeps full activations in the layers it does not recompute."""
    job = TrainingJob(PRESETS["llama2-7b"], 4096, 16)
    layouts = [
        "tp=2,pp=4,dp=1,mbs=1,recompute=selective",
        "tp=2,pp=4,dp=1,mbs=1,recompute=selective,recompute_modules=core_attn+mlp+layernorm",
        "tp=2,pp=4,dp=1,mbs=1,recompute=full",
        "tp=2,pp=4,dp=1,mbs=1,recompute=full,recompute_layers=3",
        "tp=2,pp=4,dp=1,mbs=1",
    ]
    batch = LayoutBatch.from_layouts([parse_layout(text, 8) for text in layouts])
    assert [str(batch.layout(i)) == str(parse_layout(text, 8)) for i, text in enumerate(layouts)] == [True] * 5
    per_layer = activation_bytes_per_layer(job, batch, batch.recompute)
    sbh = 4096 * H
    assert per_layer[0] - per_layer[1] == pytest.approx(
        sbh * (6 * FFN / H) / 2 + sbh * 4 / 2
    )  # MLP inside, 2 norm outputs
    ledger, _ = stage_memory(job, batch, np.zeros(5, dtype=int))
    full_layer, none_layer = per_layer[2], per_layer[4]
    assert full_layer == pytest.approx(2 * sbh / 2)  # the layer input, 1/t with SP
    assert ledger["activations"][3] == pytest.approx(4 * (3 * full_layer + 5 * none_layer))  # 4 in flight, 8 layers
    planner = _planner("llama2-7b", 8)
    step = planner.step_model.evaluate(batch)
    recompute = step.categories["recompute"]
    assert recompute[4] == 0 and 0 < recompute[0] < recompute[1] < recompute[2]
    assert recompute[3] == pytest.approx(recompute[2] * 3 / 8)
    with pytest.raises(UsageError, match="not one of"):
        parse_layout("tp=2,dp=4,recompute=selective,recompute_modules=attention", 8)
    with pytest.raises(UsageError, match="needs recompute=full"):
        parse_layout("tp=2,dp=4,recompute=selective,recompute_layers=2", 8)


def test_an_explicit_pipeline_layout_string_as_megatron_core_reads_it(capsys):
    """--pipeline-model-parallel-layout: '|' between virtual stages, rank r holds entries r, r+pp, ...;
    each rank's ledger and step share follow its own layers."""
    out = plan_json(capsys, "tp=2,pp=4,vpp=2,dp=2,mbs=1,pp_layout=Et*3|(t*4|)*6t*5L", gpus=16)
    assert [s["layers"] for s in out["stages"]] == [3 + 4, 4 + 4, 4 + 4, 4 + 5]
    assert "pp_layout=Et*3|(t*4|)*6t*5L" in out["layout"]
    out = plan_json(capsys, "tp=2,pp=4,dp=2,mbs=1,pp_layout=Et*6|t*9|t*9|t*8L", gpus=16)
    shares = [s["step_share"] for s in out["stages"]]
    assert [s["layers"] for s in out["stages"]] == [6, 9, 9, 8] and shares[0] < shares[1]
    assert out["stages"][0]["memory_bytes"]["parameters"] < out["stages"][1]["memory_bytes"]["parameters"]
    for bad, message in (
        ("pp=4,dp=4,pp_layout=Et*6|t*9|t*9|t*9L", "places 33 decoder layers"),
        ("pp=4,dp=4,pp_layout=t*8|t*8|t*8|t*8", "must open with the embedding E"),
        ("pp=4,dp=4,pp_layout=Et*8|t*8|t*8L", "3 stages, not pp x vpp = 4"),
        ("pp=4,dp=4,pp_layout=Et*8|t*8|t*8|t*8mL", "places 1 MTP layers, the model has 0"),
        ("pp=4,dp=4,pp_layout=Et*8|t*8|t*7m|t*8L", "MTP layers (m) are modelled only on the last stage"),
    ):
        assert (
            cli.main(
                [
                    "plan",
                    "--model",
                    "llama2-7b",
                    "--gpus",
                    "16",
                    "--global-batch",
                    "16",
                    "--seq-len",
                    "4096",
                    "--layout",
                    bad,
                ]
            )
            == 2
        )
        assert message in capsys.readouterr().err, bad
