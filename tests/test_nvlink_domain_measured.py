"""A measured NVL72-shaped run on the emulated cluster: four hosts of two ranks in two NVLink domains
(hosts 0-1 "rack-a", hosts 2-3 "rack-b", labelled through $COMMBENCH_NVLINK_DOMAIN as NVML's fabric
clique would on a real rack). The sweep measures intra (one group per domain, spanning two hosts),
inter (one rank per domain) and host scopes, run.json records each host's domain, and the planner
prices a TP group inside one domain from the intra rows (and, with the domain set back to the
host, from the host and inter rows instead).

The emulated links between hosts of one "domain" are the same shaped links as between domains:
this checks the bookkeeping (who is in which domain, which rows price which group), not NVLink's speed."""

import subprocess

import numpy as np
import pytest
from cluster.emulated import torchrun_command, wait_procs

from commbench.data.bandwidth_table import BandwidthTable
from commbench.data.rundir import list_runs, load_run
from commbench.modeling.layout import Layout, LayoutBatch
from commbench.modeling.spec import PlanSpec, build_planner
from tests.conftest import REPO

# slow: eight ranks over four network namespaces sweep three ops at all four scopes (about 90 s on
# two shared cores); it is the one end-to-end check that a domain spanning hosts is measured and priced
pytestmark = [pytest.mark.cluster, pytest.mark.slow]

DOMAINS = ("rack-a", "rack-a", "rack-b", "rack-b")


def _sweep(cluster, out, port=29671):
    procs = []
    for i, domain in enumerate(DOMAINS):
        cmd = torchrun_command(
            cluster,
            i,
            port,
            [
                "-m",
                "commbench",
                "run",
                "--out",
                str(out),
                "--no-progress",
                "--ops",
                "all_reduce,all_gather,reduce_scatter",
                "-b",
                "64K",
                "-e",
                "1M",
            ],
            nproc_per_node=2,
        )
        procs.append(
            cluster.node(i).popen(
                cmd,
                env={"GLOO_SOCKET_IFNAME": "eth0", "COMMBENCH_NVLINK_DOMAIN": domain},
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return wait_procs(procs, 900)


@pytest.mark.parametrize("emulated_cluster", [dict(nodes=4)], indirect=True)
def test_two_domain_run_gives_intra_and_inter_rows_the_planner_uses(emulated_cluster, tmp_path):
    results = _sweep(emulated_cluster, tmp_path)
    assert [code for code, _, _ in results] == [0] * 4, results[0][2][-3000:]
    run = load_run(list_runs(tmp_path)[0])
    assert [getattr(node, "nvlink_domain", None) for node in run.info.nodes] == list(DOMAINS)
    shapes = {(r["scope"], r["group_size"], r["n_groups"]) for r in run.records}
    assert {("intra", 4, 2), ("inter", 2, 4), ("host", 2, 4), ("world", 8, 1)} <= shapes
    table = BandwidthTable.from_run(run.path)
    assert table.nodes == 2 and table.placement("intra", 4) == (4, 1) and table.placement("world", 8) == (4, 2)

    spec = dict(model="llama3.2-1b", gpus=8, gpus_per_node=2, global_batch=16, seq_len=1024, bandwidth=str(run.path))
    layout = LayoutBatch.from_layouts([Layout(tp=4, dp=2, mbs=1, zero=1)])
    in_domain = build_planner(PlanSpec(**spec, nvlink_domain=4))
    hosts_only = build_planner(PlanSpec(**spec))
    size = np.array([1 << 20])
    intra = in_domain.cluster.cost.curves[("reduce_scatter", 4, 1)]  # the curve a 4-rank, one-domain group reads
    assert intra.scope == "intra" and intra.group_size == 4
    assert in_domain.cluster.cost.time_s("reduce_scatter", size, 4, in_domain_placement(in_domain)) == pytest.approx(
        intra.time_us(size) * 1e-6
    )
    tp_in_domain = in_domain.step_model.evaluate(layout).comm.tp.fwd[0]
    tp_across_hosts = hosts_only.step_model.evaluate(layout).comm.tp.fwd[0]
    assert tp_in_domain != pytest.approx(tp_across_hosts)  # priced from other rows
    assert not [w for w in in_domain.warnings() if "intra" in w and "priced from the preset" in w]


def in_domain_placement(planner):
    from commbench.modeling.network import Placement

    groups = planner.step_model.evaluate(LayoutBatch.from_layouts([Layout(tp=4, dp=2, zero=1)])).comm.groups["tp"]
    assert (int(groups[1][0]), int(groups[2][0])) == (4, 1)  # the TP group sits in one domain of two hosts
    return Placement(4, 1)
