"""MoE as Megatron-Core trains it: parallel folding (EP x ETP x EDP = TP x CP x DP), its refusals,
where the expert groups sit, and the MoE layer's parts (grouped-GEMM shapes, dispatch bytes)
against hand calculations for DeepSeek-V3 and Qwen3-235B-A22B."""

import json

import numpy as np
import pytest

from commbench.errors import UsageError
from commbench.modeling.layout import Layout, LayoutBatch, layout_groups, parse_layout
from commbench.modeling.spec import PlanSpec, build_planner

# Published layouts (Megatron-Bridge docs/performance-summary.md across its git history, and the
# Megatron-Core MoE README's folding example); ETP is not in those tables: etp=1 as Bridge's MoE
# recipes set it for fine-grained experts, and etp=tp (Megatron-Core's default) for the rest.
PUBLISHED = [
    ("deepseek-v3", 256, 4096, "tp=1,pp=4,vpp=4,ep=64,etp=1"),  # GB200 row, EP = DP
    ("deepseek-v3", 256, 4096, "tp=1,pp=16,ep=8,etp=1"),  # B200 row
    ("qwen3-235b-a22b", 256, 8192, "tp=2,pp=8,vpp=4,ep=32,etp=1"),  # H100 row: EP 32 > DP 16
    ("qwen3-30b-a3b", 8, 512, "tp=1,pp=1,ep=8"),
    ("gpt-oss-120b", 64, 1280, "tp=1,pp=4,ep=8"),  # H100 BF16 row
    ("gpt-oss-120b", 64, 1280, "tp=1,pp=1,ep=64"),
    ("mixtral-8x7b", 64, 256, "tp=2,pp=4,ep=8,etp=2"),  # ETP > 1
    ("mixtral-8x22b", 256, 256, "tp=4,pp=8,ep=8,etp=1"),
    ("llama4-maverick", 256, 1024, "tp=4,pp=2,ep=128,etp=1"),  # EP 128 > DP 32, spans 16 nodes
]


@pytest.mark.parametrize("model,gpus,batch,layout", PUBLISHED)
def test_published_moe_layouts_are_accepted(model, gpus, batch, layout):
    planner = build_planner(PlanSpec(model=model, gpus=gpus, global_batch=batch, seq_len=4096))
    parsed = parse_layout(layout, gpus)
    result, _ = planner.evaluate_layout(parsed)
    assert result.step_s > 0 and parsed.tp * parsed.cp * parsed.dp % (parsed.ep * parsed.etp) == 0


def test_folding_lets_ep_exceed_dp_and_places_each_group():
    layout = Layout(tp=2, dp=16, ep=32, etp=1)  # the example: EP=32 on TP=2, DP=16
    assert layout.edp == 1
    groups = layout_groups(LayoutBatch.from_layouts([layout]), nvlink_domain=8)
    size, per_node, nodes = (int(g[0]) for g in groups["ep"])
    assert (size, per_node, nodes) == (32, 8, 4)  # 32 neighbouring ranks: the EP group spans 4 NVLink domains
    assert tuple(int(g[0]) for g in groups["dp"]) == (16, 4, 4)  # attention DP strides over tp
    inside = layout_groups(LayoutBatch.from_layouts([Layout(tp=2, dp=16, ep=4, etp=2)]), 8)
    assert tuple(int(g[0]) for g in inside["ep"]) == (4, 4, 1)  # etp apart: 4 EP ranks in one 8-GPU node
    assert tuple(int(g[0]) for g in inside["edp"]) == (4, 1, 4)
    # in a 72-GPU NVLink domain (GB200 NVL72) the same EP=32 group never leaves NVLink
    nvl72 = layout_groups(LayoutBatch.from_layouts([layout]), nvlink_domain=72)
    assert tuple(int(g[0]) for g in nvl72["ep"]) == (32, 32, 1)


def test_plan_json_says_which_expert_groups_stay_in_an_nvlink_domain():
    dgx = _parts("deepseek-v3", 256, 256, "tp=1,pp=4,ep=64,etp=1", routing="uniform")[1]["placement"]
    # Megatron-Bridge's 256-GPU GB200 runs: 64 GPUs of each NVL72 rack (one NVLink domain each)
    nvl72 = _parts(
        "deepseek-v3", 256, 256, "tp=1,pp=4,ep=64,etp=1", routing="uniform", hardware="gb200-nvl72", nvlink_domain=64
    )[1]["placement"]
    assert dgx["nvlink_domain_gpus"] == 8 and not dgx["ep"]["inside_domain"] and dgx["ep"]["domains"] == 8
    assert nvl72["nvlink_domain_gpus"] == 64 and nvl72["ep"]["inside_domain"]


@pytest.mark.parametrize(
    "layout,experts,rule",
    [
        ("tp=2,dp=8,ep=32,etp=1", 64, "ep*etp = 32*1 must divide tp*cp*dp = 16"),
        ("tp=2,dp=16,ep=16,etp=4", 64, "ep*etp = 16*4 must divide tp*cp*dp = 32"),
        ("tp=1,dp=32,ep=32", 8, "ep=32 must divide the 8 experts"),
        ("tp=2,dp=16,ep=8,sp=0", 8, "needs sequence parallelism"),
        ("tp=1,dp=8,ep=2", None, "need an MoE model"),
    ],
)
def test_layouts_megatron_core_rejects_are_refused_naming_the_rule(layout, experts, rule):
    from commbench.modeling.layout import check_moe_rules

    with pytest.raises(UsageError, match=rule.replace("*", r"\*")) as error:
        check_moe_rules(parse_layout(layout), experts)
    assert "\n" not in str(error.value)


def test_plan_refuses_a_folding_violation_in_one_line(cli):
    result = cli(
        "plan",
        "--model",
        "qwen3-30b-a3b",
        "--gpus",
        "16",
        "--global-batch",
        "64",
        "--seq-len",
        "4096",
        "--layout",
        "tp=2,dp=8,ep=32,etp=1",
    )
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "parallel folding" in result.stderr


def _parts(model, gpus, batch, layout, **spec):
    planner = build_planner(PlanSpec(model=model, gpus=gpus, global_batch=batch, seq_len=4096, **spec))
    return planner, planner.moe_parts([parse_layout(layout, gpus)])[0]


def test_deepseek_v3_grouped_gemm_shape_and_dispatch_bytes_by_hand():
    # DeepSeek-V3: h=7168, 256 experts of width 2048, top-8, 1 shared expert, 58 of 61 layers MoE.
    # tp=2, ep=64, etp=1 on 1024 GPUs, mbs=1, seq 4096: each rank's MoE input is 4096/2 = 2048 tokens
    # (sequence parallel); 256/64 = 4 local experts, each fed 2048 * 8 * 64 * 1 / 256 = 4096 copies.
    _, parts = _parts("deepseek-v3", 1024, 1024, "tp=2,pp=16,ep=64,etp=1", routing="uniform")
    layer = parts["moe_layer"]
    gemm = layer["grouped_gemm"]
    assert gemm["local_experts"] == 4 and gemm["tokens_per_expert_mean"] == 4096
    assert gemm["shape_per_expert"] == {"m": 4096, "n_up": 2048, "k_up": 7168, "n_down": 7168, "k_down": 2048}
    # dispatch: 2048 tokens x 8 copies x 7168 x 2 bytes (bf16) per rank; 63/64 of it leaves the rank
    assert layer["dispatch"]["size_bytes"] == 2048 * 8 * 7168 * 2
    assert layer["dispatch"]["sent_bytes"] == pytest.approx(2048 * 8 * 7168 * 2 * 63 / 64)
    # 64 neighbouring ranks on 8-GPU nodes: 7 of 63 peers in the node
    assert layer["dispatch"]["intra_domain_bytes"] == pytest.approx(2048 * 8 * 7168 * 2 * 63 / 64 * 7 / 63)
    assert parts["placement"]["ep"] == {"size": 64, "ranks_per_domain": 8, "domains": 8, "inside_domain": False}
    assert (parts["dense_layers"], parts["moe_layers"]) == (3, 58)
    assert layer["shared_experts"]["forward_s"] > 0
    # fp8 dispatch (DeepSeek-V3's recipe): 1 byte + an fp32 scale per 128 elements; the combine stays bf16
    _, fp8 = _parts("deepseek-v3", 1024, 1024, "tp=2,pp=16,ep=64,etp=1", routing="uniform", dispatch_dtype="fp8")
    assert fp8["moe_layer"]["dispatch"]["size_bytes"] == pytest.approx(2048 * 8 * 7168 * (1 + 4 / 128))
    assert fp8["moe_layer"]["combine"]["size_bytes"] == 2048 * 8 * 7168 * 2


def test_qwen3_235b_grouped_gemm_shape_etp_and_allgather_by_hand():
    # Qwen3-235B-A22B: h=4096, 128 experts of width 1536, top-8, no shared expert.
    # tp=2, ep=8, etp=2 on 256 GPUs: 2048 tokens per rank; 16 local experts, each fed
    # 2048 * 8 * 8 * 2 / 128 = 2048 copies of width 1536 / 2 = 768.
    _, parts = _parts("qwen3-235b-a22b", 256, 512, "tp=2,pp=8,ep=8,etp=2", routing="uniform")
    layer = parts["moe_layer"]
    gemm = layer["grouped_gemm"]
    assert gemm["local_experts"] == 16 and gemm["tokens_per_expert_mean"] == 2048
    assert gemm["shape_per_expert"] == {"m": 2048, "n_up": 768, "k_up": 4096, "n_down": 4096, "k_down": 768}
    assert layer["dispatch"]["size_bytes"] == 2048 * 8 * 4096 * 2
    # ETP: the 2 expert-TP ranks gather what each received (2 x 2048 x 8 tokens), and reduce-scatter back
    assert layer["etp_gather"]["size_bytes"] == 2 * 2048 * 8 * 4096 * 2 and layer["etp_gather"]["seconds"] > 0
    assert layer["etp_scatter"]["size_bytes"] == 2 * 2048 * 8 * 4096 * 2
    assert layer["shared_experts"] == {"forward_s": 0.0, "backward_s": 0.0}
    # the allgather dispatcher gathers the ETP x EP group's tokens (16 ranks x 2048), whatever top-k is
    _, gathered = _parts("qwen3-235b-a22b", 256, 512, "tp=2,pp=8,ep=8,etp=2", routing="uniform", dispatcher="allgather")
    assert gathered["moe_layer"]["dispatch"]["size_bytes"] == 16 * 2048 * 4096 * 2
    assert gathered["moe_layer"]["dispatch"]["group"] == "tpep"


def test_capacity_factor_drops_and_padding_computes_the_capacity():
    _, dropless = _parts("qwen3-30b-a3b", 16, 64, "tp=1,dp=16,ep=16", routing="zipf:1.2")
    _, capped = _parts("qwen3-30b-a3b", 16, 64, "tp=1,dp=16,ep=16", routing="zipf:1.2", capacity_factor=1.0)
    _, padded = _parts(
        "qwen3-30b-a3b", 16, 64, "tp=1,dp=16,ep=16", routing="zipf:1.2", capacity_factor=1.25, pad_to_capacity=True
    )
    assert dropless["moe_layer"]["dropped_token_share"] == 0
    assert 0 < capped["moe_layer"]["dropped_token_share"] < 1
    hot = [p["moe_layer"]["grouped_gemm"]["pacing_load_over_even"] for p in (dropless, capped, padded)]
    assert hot[0] > 1.25 and hot[1] <= 1.0 + 1e-12 and hot[2] == pytest.approx(1.25)
    assert capped["moe_layer"]["dispatch"]["sent_bytes"] < dropless["moe_layer"]["dispatch"]["sent_bytes"]


def test_zipf_routing_raises_ep_time_with_the_hottest_ranks_share():
    """Same layouts, same cluster: under zipf:1.2 the EP exchange and the grouped GEMM are paced by
    the busiest EP rank, so their time rises with that rank's expected share (routing.expert_load)."""
    from commbench.modeling.routing import expected_shares, parse_routing

    spec = {"model": "qwen3-30b-a3b", "gpus": 64, "global_batch": 256, "seq_len": 4096}
    even, skewed = (build_planner(PlanSpec(**spec, routing=r)) for r in ("uniform", "zipf:1.2"))
    layouts = [parse_layout(f"tp=1,dp=64,ep={ep}", 64) for ep in (2, 8, 32)]
    batch = LayoutBatch.from_layouts(layouts)
    base, skew = even.step_model.evaluate(batch), skewed.step_model.evaluate(batch)
    shares = [expected_shares(parse_routing("zipf:1.2"), 128, layout.ep).max() * layout.ep for layout in layouts]
    ratios = skew.categories["ep"] / base.categories["ep"]
    assert np.all(np.diff(shares) > 0) and np.all(np.diff(ratios) > 0)
    # priced at the hottest rank's bytes: the ratio is that share, less the fixed latency of each collective
    assert np.all(ratios <= np.array(shares)) and np.all(ratios > 0.95 * np.array(shares))
    assert np.all(skew.categories["compute"] > base.categories["compute"])


def test_overlap_choices_hide_ep_time(cli):
    args = [
        "plan",
        "--model",
        "deepseek-v3",
        "--gpus",
        "1024",
        "--global-batch",
        "1024",
        "--seq-len",
        "4096",
        "--layout",
        "tp=2,pp=16,ep=64,etp=1",
        "--json",
    ]
    runs = {
        overlap: json.loads(cli(*args, "--moe-overlap", overlap).stdout)
        for overlap in ("none", "shared-expert", "1f1b-a2a")
    }
    ep = {name: run["categories_s"]["ep"] for name, run in runs.items()}
    assert ep["1f1b-a2a"] < ep["shared-expert"] < ep["none"]
    assert runs["1f1b-a2a"]["moe"][0]["execution"]["a2a_overlap_1f1b"] is True


def test_flex_dispatch_sends_a_token_once_per_remote_node():
    # 64 EP ranks over 8 nodes, top-8: a token reaches (8-1)*(1-(7/8)^8) = 4.66 other nodes on average
    _, flex = _parts("deepseek-v3", 1024, 1024, "tp=2,pp=16,ep=64,etp=1", routing="uniform", dispatcher="flex")
    dispatch = flex["moe_layer"]["dispatch"]
    remote = 7 * (1 - (7 / 8) ** 8)
    assert dispatch["inter_domain_bytes"] == pytest.approx(2048 * 7168 * 2 * remote)
    assert dispatch["intra_domain_bytes"] == pytest.approx(2048 * 8 * 7168 * 2)
    assert dispatch["seconds"] == max(dispatch["inter_domain_seconds"], dispatch["intra_domain_seconds"])


def test_the_memory_ledger_holds_one_moe_layers_dispatch_buffers():
    # Qwen3-235B, tp=2, ep=8, etp=2, uniform: 2048 tokens x 8 copies out, 2 x that in after the ETP
    # gather, dispatch and combine each, 4096 wide in bf16
    planner = build_planner(
        PlanSpec(model="qwen3-235b-a22b", gpus=256, global_batch=512, seq_len=4096, routing="uniform")
    )
    result, _ = planner.evaluate_layout(parse_layout("tp=2,pp=8,ep=8,etp=2", 256))
    assert result.memory["moe_dispatch"] == 2 * 2 * 4096 * (2048 * 8 + 2 * 2048 * 8)
    dense = build_planner(PlanSpec(model="llama2-7b", gpus=8, global_batch=64, seq_len=4096))
    assert dense.evaluate_layout(parse_layout("dp=8", 8))[0].memory["moe_dispatch"] == 0


def test_a_layout_batch_declares_exactly_the_columns_it_holds():
    # the class annotations are what mypy checks attribute use against; a column set in __init__
    # but not declared (or declared and never set) would let a typo through or fail at run time
    batch = LayoutBatch.from_layouts([Layout(tp=2, dp=4, ep=2, recompute="selective")])
    declared = {name for name, kind in LayoutBatch.__annotations__.items() if kind == "np.ndarray"}
    assert declared == set(batch.columns)
    assert all(getattr(batch, name) is batch.columns[name] for name in declared)
