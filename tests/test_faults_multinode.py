"""Degraded links on the emulated cluster: a lossy (or slow-to-answer) node does not stop a run,
and `commbench run --pairwise` should point at it.

Three nodes at 1 Gbit/s, one rank each; the third node's (index 2) link drops 3% of the packets sent to it
(nftables, see tests/cluster/emulated.py), or, where the kernel has netem, answers 20 ms late.
Needs root; skips with the reason otherwise.

What loss does to the figures (measured here, 1 MiB ping-pong): almost nothing to the median
bandwidth (0.148-0.150 GB/s on the lossy node's pairs against 0.153-0.154 on the clean one). On a
sub-millisecond link TCP repairs a lost segment within a round trip (SACK), so bandwidth alone
cannot name a lossy node; the kernel's retransmission counter can (about 1.5% of the segments
re-sent on the lossy pairs, ~0 on the clean one), and pairwise flags those pairs "lossy".
Delay, by contrast, adds to every message and is flagged "slow".
"""

import pytest
from cluster.emulated import EmulationUnsupported, netem_available
from test_multinode import torchrun_per_node

from commbench.data.rundir import list_runs, load_run

pytestmark = pytest.mark.cluster

DEGRADED = 2
THREE_NODES = dict(nodes=3, rate="1gbit")
# 1 MiB messages take ~7 ms on the healthy links, so 20 ms of delay is a robust signal; few
# iterations keep each run near 10 s on two shared cores.
PAIRWISE = ["--pairwise", "-b", "8", "-e", "1M", "-n", "5", "-w", "1"]
SWEEP = ["--ops", "all_reduce,all_gather", "-b", "1K", "-e", "1M", "-n", "5", "-w", "1", "--timeout", "60"]
SIGN_OF = {"loss": "lossy", "delay": "slow"}


def degrade(cluster, how: str) -> None:
    if how == "loss":
        cluster.shape(DEGRADED, loss="3%")
        return
    if not netem_available():
        pytest.skip("delay needs the netem qdisc, which this kernel lacks (CONFIG_NET_SCH_NETEM not set)")
    try:
        cluster.shape(DEGRADED, delay="20ms")
    except EmulationUnsupported as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("emulated_cluster", [THREE_NODES], indirect=True)
@pytest.mark.parametrize("how", ["loss", "delay"])
def test_sweep_completes_over_a_degraded_link(emulated_cluster, tmp_path, how):
    degrade(emulated_cluster, how)
    results = torchrun_per_node(emulated_cluster, 1, SWEEP, tmp_path, timeout=180)
    assert [code for code, _, _ in results] == [0, 0, 0], results[0][2][-3000:]
    run = load_run(list_runs(tmp_path)[0])
    assert run.info.complete and run.records
    assert all(r["wrong"] == 0 for r in run.records)  # TCP repairs the loss: data arrives intact
    if how == "loss":
        assert emulated_cluster.dropped_packets(DEGRADED) > 0, "the loss rule never fired"


@pytest.mark.parametrize("emulated_cluster", [THREE_NODES], indirect=True)
@pytest.mark.parametrize("how", ["loss", "delay"])
def test_pairwise_points_at_the_degraded_node(emulated_cluster, tmp_path, how):
    degrade(emulated_cluster, how)
    results = torchrun_per_node(emulated_cluster, 1, PAIRWISE, tmp_path, timeout=180)
    assert [code for code, _, _ in results] == [0, 0, 0], results[0][2][-3000:]
    run = load_run(list_runs(tmp_path)[0])
    degraded = emulated_cluster.names[DEGRADED]
    bandwidth_rows = [r for r in run.records if r["size_bytes"] == 1 << 20]
    assert len(bandwidth_rows) == 3
    flagged = {tuple(r["pair_nodes"]) for r in bandwidth_rows if r["outlier"]}
    touching = {tuple(r["pair_nodes"]) for r in bandwidth_rows if degraded in r["pair_nodes"]}
    summary = "; ".join(
        f"{'-'.join(r['pair_nodes'])} {r['algbw_gbps']:.4f} GB/s, TCP re-sent "
        f"{r.get('tcp_retransmits')}/{r.get('tcp_segments_sent')} {r['outlier_reasons']}"
        for r in bandwidth_rows
    )
    print(summary)
    assert flagged == touching, summary
    assert all(SIGN_OF[how] in r["outlier_reasons"] for r in bandwidth_rows if r["outlier"]), summary
    assert f"every flagged pair touches: {degraded}" in results[0][1], results[0][1][-3000:]
