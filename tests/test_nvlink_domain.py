"""The NVLink domain is a tier of its own: on an NVL72 rack 72 GPUs over 18 hosts of 4 share NVLink,
so a group inside the rack is priced on NVLink even where it spans hosts. Each test also runs the
same case with the domain set back to the host, where it must come out on the network."""

import subprocess
import sys

import numpy as np
import pytest

from commbench.modeling.hardware import load_system
from commbench.modeling.layout import Layout, LayoutBatch, group_placement, in_one_domain, layout_groups
from commbench.modeling.network import PresetNetwork, price
from commbench.modeling.spec import PlanSpec, build_planner

NVL72 = load_system("gb200-nvl72")
HOST_ONLY = NVL72.with_nvlink_domain(NVL72.gpus_per_host)  # the blind spot: the domain taken for the host


def test_presets_name_host_and_domain():
    assert (NVL72.gpus_per_host, NVL72.nvlink_domain) == (4, 72)
    assert (load_system("gb300-nvl72").gpus_per_host, load_system("gb300-nvl72").nvlink_domain) == (4, 72)
    for name in ("dgx-h100", "h200", "dgx-b200", "dgx-a100"):
        system = load_system(name)
        assert system.gpus_per_host == system.nvlink_domain == 8


def test_placement_helper_says_whether_a_group_stays_in_one_domain():
    # TP=8 (stride 1) and EP=16 folded over the TP x DP ranks (stride 1) in one rack: one domain each
    assert in_one_domain(8, 1, 72) and in_one_domain(16, 1, 72)
    assert in_one_domain(16, 4, 72)  # 16 ranks 4 apart: 64 GPUs, still the rack
    assert not in_one_domain(16, 8, 72)  # 128 GPUs: two racks
    assert not in_one_domain(16, 1, 4)  # the same group on 4-GPU hosts without the rack's NVLink
    assert np.array_equal(in_one_domain(np.array([8, 16, 32]), np.array([1, 4, 4]), 72), [True, True, False])


@pytest.mark.parametrize("op", ["all_to_all", "all_gather", "all_reduce"])
def test_tp8_ep16_inside_the_rack_is_priced_on_nvlink(op):
    """An EP=16 exchange and a TP=8 collective inside one GB200 NVL72 domain cost what NVLink 5
    costs; with the domain set back to the 4-GPU host the same groups cross InfiniBand."""
    size = np.array([64e6])
    rack, hosts = PresetNetwork(NVL72), PresetNetwork(HOST_ONLY)
    for members in (8, 16):
        in_rack = (np.array([members]), *group_placement(np.array([members]), np.array([1]), NVL72.nvlink_domain))
        on_hosts = (np.array([members]), *group_placement(np.array([members]), np.array([1]), HOST_ONLY.nvlink_domain))
        assert (in_rack[1][0], in_rack[2][0]) == (members, 1)
        nvlink = rack.flat(op, size, members, "intra")
        assert price(rack, op, size, in_rack) == pytest.approx(nvlink)
        # across 4-GPU hosts the group is hierarchical: its inter-host phase runs at the NIC rate
        assert price(hosts, op, size, on_hosts)[0] > 2 * nvlink[0]


def _ep_and_tp_seconds(system, layout: Layout) -> tuple[float, float]:
    planner = build_planner(
        PlanSpec(
            model="deepseek-moe-16b",
            gpus=layout.gpus,
            global_batch=256,
            seq_len=4096,
            hardware="gb200-nvl72",
            nvlink_domain=system.nvlink_domain,
        )
    )
    result = planner.step_model.evaluate(LayoutBatch.from_layouts([layout]))
    return float(result.categories["ep"][0]), float(result.categories["tp"][0])


def test_plan_prices_ep_inside_the_rack_on_nvlink_and_fails_on_the_host():
    """A whole plan on 64 GB200s: TP=4 x EP=16 fits one 72-GPU domain. Its EP and TP time on the
    NVL72 preset is several times below the same layout priced with 4-GPU domains."""
    layout = Layout(tp=4, dp=16, ep=16, mbs=1, zero=1)
    groups = layout_groups(LayoutBatch.from_layouts([layout]), NVL72.nvlink_domain)
    assert groups["ep"][2][0] == 1 and groups["tp"][2][0] == 1  # one domain each
    rack_ep, rack_tp = _ep_and_tp_seconds(NVL72, layout)
    host_ep, host_tp = _ep_and_tp_seconds(HOST_ONLY, layout)
    assert rack_ep > 0 and host_ep > 3 * rack_ep
    assert rack_tp == pytest.approx(host_tp)  # TP=4 sits in one tray either way


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--hardware", "gb200-nvl72", "--gpus", "100"], "100 GPUs is not a whole number of 72-GPU NVLink domains"),
        (["--hardware", "dgx-h100", "--gpus", "16", "--nvlink-domain", "12"], "not a whole number of 8-GPU hosts"),
    ],
)
def test_a_domain_that_does_not_divide_is_one_line_exit_2(argv, message):
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "commbench",
            "plan",
            "--model",
            "llama2-7b",
            "--global-batch",
            "64",
            "--seq-len",
            "2048",
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], run.stderr
