"""Collective pricing (preset and measured) and the step simulator's bookkeeping."""

import numpy as np
import pytest

from commbench.modeling.cluster import Cluster
from commbench.modeling.hardware import load_system
from commbench.modeling.job import TrainingJob
from commbench.modeling.layout import LayoutBatch, group_placement, parse_layout
from commbench.modeling.measured import MeasuredNetwork
from commbench.modeling.memory import memory_per_gpu, stage_parameters
from commbench.modeling.models import PRESETS
from commbench.modeling.network import Placement, PresetNetwork, price
from commbench.modeling.schedule import pipeline_order, simulate
from commbench.modeling.step import CATEGORIES, StepModel
from tests.test_modeling_planner import write_run

DGX = load_system("dgx-h100")


def test_preset_ring_factors_and_tiers():
    net = PresetNetwork(DGX)
    size = 1e9
    intra = Placement(8, 1)
    ar = net.time_s("all_reduce", size, 8, intra)
    ag = net.time_s("all_gather", size, 8, intra)
    assert ar - DGX.intra.latency == pytest.approx(2 * (ag - DGX.intra.latency))
    inter = net.time_s("all_gather", size, 8, Placement(1, 8))
    assert inter > 5 * ag  # NDR per GPU is far below NVLink


def test_hierarchical_group_is_cheaper_than_all_inter_node():
    net = PresetNetwork(DGX)
    hierarchical = net.time_s("all_reduce", 1e9, 64, Placement(8, 8))
    all_inter = net.flat("all_reduce", 1e9, 64, "inter")
    assert hierarchical < all_inter


def test_overlap_slowdown_charges_a_hierarchical_groups_nvlink_phase_at_the_nvlink_rate():
    """ZeRO-3's gathers on 16 ranks over two nodes spend most of their time in the NVLink phase, which
    contends for SMs and HBM like any intra-node collective: charged at the network's 2% alone, the
    overlap went almost free once a layout crossed a node (what let a 7B on 16 H100s rank above
    every published H100 run's MFU)."""
    cluster = Cluster(16, DGX, PresetNetwork(DGX))
    group = (np.array([8, 16, 8, 16]), np.array([8, 8, 1, 1]), np.array([1, 2, 8, 16]))
    intra, mixed, inter, inter16 = cluster.slowdown(group)
    net, size = PresetNetwork(DGX), 256 * 2**20
    nvlink_share = net.flat("all_gather", size, 8, "intra") / net.time_s("all_gather", size, 16, Placement(8, 2))
    assert (intra, inter, inter16) == (0.15, 0.02, 0.02)
    assert 0.5 < nvlink_share < 1
    assert mixed == pytest.approx(0.02 + 0.13 * nvlink_share)
    measured = Cluster(16, DGX, net, slowdown_intra=0.07, slowdown_inter=0.07)  # one measured factor: no split
    assert measured.slowdown(group).tolist() == [0.07] * 4


def test_vectorised_price_matches_scalar_calls():
    net = PresetNetwork(DGX)
    sizes = np.array([1e6, 1e8, 1e9])
    group = (np.array([8, 16, 1]), np.array([8, 8, 1]), np.array([1, 2, 1]))
    got = price(net, "all_gather", sizes, group)
    assert got[0] == pytest.approx(net.time_s("all_gather", 1e6, 8, Placement(8, 1)))
    assert got[1] == pytest.approx(net.time_s("all_gather", 1e8, 16, Placement(8, 2)))
    assert got[2] == 0.0


def test_group_placement_follows_megatron_rank_order():
    per_node, nodes = group_placement(np.array([8, 16, 4, 8]), np.array([1, 1, 8, 2]), 8)
    assert per_node.tolist() == [8, 8, 1, 4] and nodes.tolist() == [1, 2, 4, 2]


def test_measured_network_interpolates_and_falls_back(tmp_path):
    run = write_run(tmp_path / "run", intra_gbps=200, inter_gbps=20)
    net = MeasuredNetwork(run, PresetNetwork(DGX))
    # on a measured point: exactly the record; between points: log-log interpolation
    measured = 8e-6 + 2**20 * 2 * 7 / 8 / 200e9
    assert net.time_s("all_reduce", 2**20, 8, Placement(8, 1)) == pytest.approx(measured)
    between = net.time_s("all_reduce", 2**21, 8, Placement(8, 1))
    assert (
        net.time_s("all_reduce", 2**20, 8, Placement(8, 1))
        < between
        < net.time_s("all_reduce", 2**22, 8, Placement(8, 1))
    )
    # a group size that was not measured is rescaled from the nearest one through busbw
    four = net.time_s("all_gather", 2**30, 4, Placement(4, 1))
    assert four == pytest.approx(2**30 * 3 / 4 / 200e9, rel=0.01)
    assert net.warnings == []


def test_measured_network_warns_when_a_scope_is_missing(tmp_path):
    run = write_run(tmp_path / "run", intra_gbps=200, inter_gbps=20)
    lines = [line for line in (run / "records.jsonl").read_text().splitlines() if '"inter"' not in line]
    (run / "records.jsonl").write_text("\n".join(lines) + "\n")
    net = MeasuredNetwork(run, PresetNetwork(DGX))
    got = net.time_s("all_gather", 1e9, 8, Placement(1, 8))
    assert got == pytest.approx(PresetNetwork(DGX).time_s("all_gather", 1e9, 8, Placement(1, 8)))
    assert any("no inter all_gather measured" in w for w in net.warnings)


def step_model(model="llama3-70b", gpus=64, batch=256, seq=4096):
    return StepModel(TrainingJob(PRESETS[model], seq, batch), Cluster(gpus, DGX, PresetNetwork(DGX)))


@pytest.mark.parametrize(
    "text",
    [
        "tp=8,pp=4,dp=2,mbs=1,zero=1,recompute=selective",
        "tp=8,pp=4,vpp=5,dp=2,zero=1",
        "dp=64,zero=3,recompute=full",
        "tp=4,cp=2,dp=8,zero=2",
    ],
)
def test_simulated_categories_add_up_and_agree_with_the_closed_form(text):
    model = step_model()
    layout = parse_layout(text, 64)
    result = simulate(model, layout, timeline=True)
    assert set(result.categories) == set(CATEGORIES)
    assert sum(result.categories.values()) == pytest.approx(result.step_s, rel=1e-9)
    closed = model.evaluate(LayoutBatch.from_layouts([layout])).step_s[0]
    assert result.step_s == pytest.approx(closed, rel=0.05)
    assert 0 < result.mfu < 1
    streams = {event["stream"] for event in result.timeline}
    assert "pp0.compute" in streams and all(event["dur_us"] > 0 for event in result.timeline)


def test_moe_layout_prices_expert_all_to_all_forward_and_backward():
    model = step_model("mixtral-8x7b", 64, 256, 4096)
    result = simulate(model, parse_layout("tp=2,pp=2,dp=16,ep=8,zero=1,recompute=selective", 64))
    assert result.categories["ep"] > 0 and result.comm_bytes["ep"] > 0


def test_data_parallel_bytes_count_each_weight_share_on_the_group_that_reduces_it():
    """Expert gradients and weights move over their expert-data-parallel group (dp*cp/ep ranks),
    not the dense weights' dp*cp group: the bytes per step are summed from what was priced."""
    model = step_model("mixtral-8x7b", 8, 64, 4096)
    layout = parse_layout("dp=8,ep=4,mbs=1,zero=1", 8)
    result = simulate(model, layout)
    dense, expert = stage_parameters(model.job, LayoutBatch.from_layouts([layout]))
    prec = model.job.precision
    per_byte = prec.grad_bytes + prec.param_bytes  # reduce-scatter the gradients, all-gather the weights
    dense_ranks, expert_ranks = 8, 8 // 4
    expected = per_byte * (dense[0] * (dense_ranks - 1) / dense_ranks + expert[0] * (expert_ranks - 1) / expert_ranks)
    assert result.comm_bytes["dp"] == pytest.approx(expected, rel=1e-12)


def test_pipeline_orders_run_every_op_once():
    for p, v, m in ((4, 1, 8), (4, 2, 8), (2, 4, 4)):
        for stage in range(p):
            order = pipeline_order(stage, p, v, m)
            assert sorted(order) == sorted({(k, mb, c) for k in "FB" for mb in range(m) for c in range(v)})


def test_recompute_and_zero_shrink_memory():
    job = TrainingJob(PRESETS["llama2-7b"], 4096, 64)
    batch = LayoutBatch.from_layouts(
        [
            parse_layout(f"dp=8,zero={z},recompute={r}", 8)
            for z, r in ((0, "none"), (1, "none"), (3, "none"), (3, "full"))
        ]
    )
    total = memory_per_gpu(job, batch)["total"]
    assert total[0] > total[1] > total[2] > total[3]
    assert memory_per_gpu(job, batch)["optimizer"][1] == pytest.approx(PRESETS["llama2-7b"].total_params * 12 / 8)


def test_largest_costs_name_the_biggest_shares_beyond_compute():
    from commbench.modeling.layout import Layout
    from commbench.modeling.schedule import StepResult

    result = StepResult(
        layout=Layout(),
        step_s=2.0,
        tokens_per_s=1.0,
        mfu=0.5,
        memory={},
        comm_bytes={},
        micro_batches=1,
        categories={"compute": 1.5, "dp": 0.3, "pp": 0.1, "tp": 0.05, "ep": 0.0},
    )
    assert result.largest_costs() == "dp 15.0%, pp 5.0%, tp 2.5%"
    assert result.largest_costs(1) == "dp 15.0%"
