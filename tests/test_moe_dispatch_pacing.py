"""Which link paces a skewed EP all_to_allv that spans NVLink domains (comm.uneven_all_to_all_seconds):
the busiest NIC between domains, whose bytes are those of every rank behind it. A NIC per GPU (a DGX
under NCCL's all-to-all) leaves the hottest rank's bytes on its own NIC; one link per host (the
emulated cluster) or DeepEP's forwarding over NVLink pools a domain's ranks, hot and cold together."""

from dataclasses import replace

import numpy as np
import pytest

from commbench.modeling.comm import uneven_all_to_all_seconds
from commbench.modeling.hardware import load_system
from commbench.modeling.layout import LayoutBatch, parse_layout
from commbench.modeling.network import Placement, PresetNetwork
from commbench.modeling.routing import domain_load, expected_shares, parse_routing
from commbench.modeling.spec import PlanSpec, build_planner

SKEW = "zipf:1.2"
EXPERTS = 128


def test_domain_load_pools_the_ranks_behind_one_link():
    shares = expected_shares(parse_routing(SKEW), EXPERTS, 4)
    hottest, pooled = (float(domain_load(SKEW, EXPERTS, np.array([4]), np.array([r]))[0]) for r in (1, 2))
    assert hottest == pytest.approx(4 * shares.max())  # one rank per link: the hottest rank
    assert pooled == pytest.approx(2 * max(shares[:2].sum(), shares[2:].sum()))  # 2 nodes of 2 ranks
    assert 1 < pooled < hottest
    assert float(domain_load("uniform", EXPERTS, np.array([4]), np.array([2]))[0]) == pytest.approx(1.0)


def test_skewed_exchange_across_domains_is_paced_by_the_busiest_link():
    dgx = load_system("dgx-h100").with_gpus_per_host(2)
    shared = PresetNetwork(dgx.with_inter(replace(dgx.inter, links_per_node=1)))
    assert shared.ranks_per_nic == 2 and PresetNetwork(load_system("dgx-h100")).ranks_per_nic == 1
    group = (np.array([4]), np.array([2]), np.array([2]))
    copies = 2**20
    hot = 4 * expected_shares(parse_routing(SKEW), EXPERTS, 4).max()
    link = float(domain_load(SKEW, EXPERTS, group[0], np.array([2]))[0])
    paced = uneven_all_to_all_seconds(shared, copies, hot, link, group)
    old = shared.time_s("all_to_allv", copies * hot, 4, Placement(2, 2))
    assert paced[0] == pytest.approx(shared.time_s("all_to_all", copies * link, 4, Placement(2, 2)))
    assert paced[0] < old / 1.5  # the hottest rank's bytes on every rank: the 2x overestimate it replaces
    # inside one domain the hottest rank still paces
    one = (np.array([4]), np.array([4]), np.array([1]))
    assert uneven_all_to_all_seconds(shared, copies, hot, link, one)[0] == pytest.approx(
        shared.time_s("all_to_all", copies * hot, 4, Placement(4, 1))
    )


def test_nic_per_gpu_keeps_the_hottest_rank_and_deepep_pools_the_domain():
    spec = {"model": "qwen3-30b-a3b", "gpus": 64, "global_batch": 256, "seq_len": 4096, "routing": SKEW}
    batch = LayoutBatch.from_layouts([parse_layout("tp=1,dp=64,ep=32", 64)])
    nccl = build_planner(PlanSpec(**spec)).step_model.evaluate(batch).comm.ep.parts
    deepep = build_planner(PlanSpec(**spec, dispatcher="flex")).step_model.evaluate(batch).comm.ep.parts
    hot = 32 * expected_shares(parse_routing(SKEW), EXPERTS, 32).max()
    per_domain = expected_shares(parse_routing(SKEW), EXPERTS, 32).reshape(4, 8).sum(axis=1).max() * 4
    assert nccl["dispatch"]["link_load_over_even"][0] == pytest.approx(hot)  # 8 NICs per DGX: one per GPU
    scale = deepep["dispatch"]["inter_domain_bytes"][0] / deepep["dispatch"]["intra_domain_bytes"][0]
    even = build_planner(PlanSpec(**{**spec, "routing": "uniform"}, dispatcher="flex"))
    parts = even.step_model.evaluate(batch).comm.ep.parts["dispatch"]
    assert scale == pytest.approx(parts["inter_domain_bytes"][0] / parts["intra_domain_bytes"][0] * per_domain / hot)
