"""all_to_allv on the emulated 2 x 2 cluster (two nodes of two ranks, 1 Gbit/s shaped links;
tests/cluster/emulated.py): uniform routing matches all_to_all of the same bytes, and under zipf
skew the inter-node exchange is paced by the hottest rank's received bytes.

One run, kept short: the machine is shared. Needs root; skips with the reason otherwise.
"""

import pytest

from commbench.data.rundir import list_runs, load_run
from tests.test_multinode import torchrun_per_node

pytestmark = pytest.mark.cluster

# 512 and 1024 tokens x top-2 x 1024 floats: 4 and 8 MiB per rank, above the 1 MiB the acceptance asks
ARGS = ["--ops", "all_to_allv", "--hidden", "1024", "--tokens", "512,1024", "-n", "10", "-w", "1"]
# uniform: the 4-rank world group and the two inter-node pairs; zipf: the pairs, whose one link
# carries what the hottest rank receives from the other node
SCOPES = {"uniform": "world,inter", "zipf:1.2": "inter"}


# alone: a skew penalty measured against a uniform exchange, which CPU contention moves. Beside
# busy workers zipf:1.2's penalty came out 1.18 (load average 19 on 2 cores) and 1.30 (11, beside
# tests/test_multinode.py and two busy loops) against max/mean 1.62 (2026-12-02). A slower link
# does not help: at 200 Mbit/s the penalty was 1.02, as if the link carried the pair's total
# bytes rather than the hottest rank's (commbench's sendrecv then moved each direction at half
# the link's rate, because it posted its send before its receive: bench/RESULTS.md, "gloo
# point-to-point"; gloo's own all_to_all_single was not re-measured).
@pytest.mark.alone
def test_all_to_allv_over_emulated_inter_node_links(emulated_cluster, tmp_path):
    rows = {}
    for routing in ("uniform", "zipf:1.2"):
        out = tmp_path / routing.replace(":", "-")
        results = torchrun_per_node(
            emulated_cluster, 2, [*ARGS, "--routing", routing, "--scopes", SCOPES[routing]], out, timeout=300
        )
        assert [code for code, _, _ in results] == [0, 0], results[0][2][-3000:]
        rows[routing] = load_run(list_runs(out)[0]).records
    for r in rows["uniform"]:
        print(
            f"uniform {r['scope']} {r['tokens_per_rank']} tokens: all_to_allv {r['time_us']:.0f} us (p10 {r['time_us_p10']:.0f}, "
            f"p90 {r['time_us_p90']:.0f}), all_to_all of the same bytes {r['uniform_time_us']:.0f} us "
            f"(p10 {r['uniform_time_us_p10']:.0f}, p90 {r['uniform_time_us_p90']:.0f})"
        )
        assert r["wrong"] == 0 and (r["group_size"], r["n_groups"]) == ((4, 1) if r["scope"] == "world" else (2, 2))
        if r["scope"] == "inter":
            # within noise: the two rows' p10..p90 spreads overlap (the shaped link paces both)
            assert r["time_us_p10"] <= r["uniform_time_us_p90"] and r["uniform_time_us_p10"] <= r["time_us_p90"]
        else:
            # world: four ranks on two shared cores are paced by CPU contention, whose p10..p90 from
            # 10 iterations moves by more than its width between runs (CI: 94 ms p10 vs 85 ms p90 once,
            # medians 99 vs 83 ms; the next run 114 vs 105 ms; another, medians 53 vs 42 ms with spreads
            # 36-58 and 32-52 ms): alike when the medians are within 25% or the spreads overlap; a real
            # skew cost (uniform routing paying 2x) fails both
            medians_close = r["time_us"] == pytest.approx(r["uniform_time_us"], rel=0.25)
            spreads_overlap = (
                r["time_us_p10"] <= r["uniform_time_us_p90"] and r["uniform_time_us_p10"] <= r["time_us_p90"]
            )
            assert medians_close or spreads_overlap, r
    for r in rows["zipf:1.2"]:
        ratio = r["recv_bytes_max"] / r["recv_bytes_mean"]
        print(
            f"zipf:1.2 {r['tokens_per_rank']} tokens: max/mean received {ratio:.3f}, penalty {r['skew_penalty']:.3f} "
            f"({r['time_us']:.0f} us / {r['uniform_time_us']:.0f} us)"
        )
        assert r["wrong"] == 0 and r["hottest_rank"] == 0 and r["group_size"] == 2 and ratio > 1.4
        # the hottest rank's inbound link carries max/mean times the uniform exchange's bytes
        assert r["skew_penalty"] == pytest.approx(ratio, rel=0.15)
