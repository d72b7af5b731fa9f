"""An MoE layer's token dispatch on the emulated 2-node cluster, beside the planner's prediction.

Run (root, Debian 12; tests/cluster/emulated.py builds the cluster):
  python bench/moe_dispatch_cluster.py [--model qwen3-30b-a3b] [--routing zipf:1.2] [--tokens 32,64]

Two network-namespace nodes of two ranks each on a 1 Gbit/s shaped link: EP = 4 across two
"domains". One `commbench run` (gloo, torchrun per node) measures all_to_allv under the model's
routing (its experts and top-k, the hidden size scaled down to --hidden so a step fits the link)
and all_to_all on the same sizes. The planner's prediction is what `plan` does without an
all_to_allv curve of that routing (comm.uneven_all_to_all_seconds over the run's measured curves,
MeasuredNetwork): the link between the two nodes, which both ranks of a node share, carries the
busiest node's inbound bytes (routing.domain_load over the 2 ranks behind one link), beside the
hottest rank's exchange inside its node (routing.expected_imbalance). `--hottest-rank` prices it
the old way, every rank at the hottest rank's bytes. Prints both per token count; record them in
bench/RESULTS-moe.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402
from cluster.emulated import EmulatedCluster  # noqa: E402

from commbench.data.rundir import list_runs, load_run  # noqa: E402
from commbench.modeling.comm import uneven_all_to_all_seconds  # noqa: E402
from commbench.modeling.hardware import load_system  # noqa: E402
from commbench.modeling.measured import MeasuredNetwork  # noqa: E402
from commbench.modeling.models import PRESETS  # noqa: E402
from commbench.modeling.network import PresetNetwork  # noqa: E402
from commbench.modeling.routing import domain_load, expected_imbalance, parse_routing  # noqa: E402
from tests.test_multinode import torchrun_per_node  # noqa: E402

EP, RANKS_PER_NODE = 4, 2


def measure(model: str, routing: str, tokens: str, hidden: int, out: Path) -> list[dict]:
    moe = PRESETS[model].moe
    args = [
        "--ops",
        "all_to_allv,all_to_all",
        "-b",
        "128K",
        "-e",
        "8M",
        "--routing",
        routing,
        "--tokens",
        tokens,
        "--hidden",
        str(hidden),
        "--experts",
        str(moe.num_experts),
        "--top-k",
        str(moe.top_k),
        "--scopes",
        "world",
        "-n",
        "10",
        "-w",
        "2",
    ]
    with EmulatedCluster(nodes=2, rate="1gbit") as cluster:
        results = torchrun_per_node(cluster, RANKS_PER_NODE, args, out, timeout=900)
    if [code for code, _, _ in results] != [0, 0]:
        raise SystemExit(f"the run failed: {results[0][2][-2000:]}")
    return load_run(list_runs(out)[0]).records


def emulated_system():
    """The emulated nodes as a system: 2 ranks per host behind one shaped link (the fallback prices
    only what the run did not measure; the NIC count says both ranks' bytes share the link)."""
    dgx = load_system("dgx-h100").with_gpus_per_host(RANKS_PER_NODE)
    return dgx.with_inter(replace(dgx.inter, links_per_node=1))


def predicted_us(
    run_dir: Path, model: str, routing: str, mean_bytes: float, hottest_rank: bool
) -> tuple[float, float, float]:
    """(hottest rank's and busiest link's load over even, predicted microseconds) from the run's
    uniform curves, as the planner prices an EP all_to_allv without a curve of its routing."""
    experts = PRESETS[model].moe.num_experts
    hot = expected_imbalance(parse_routing(routing), experts, EP)
    cost = MeasuredNetwork(run_dir, fallback=PresetNetwork(emulated_system()), routing="uniform")
    group = (np.array([EP]), np.array([RANKS_PER_NODE]), np.array([EP // RANKS_PER_NODE]))
    link = hot if hottest_rank else float(domain_load(routing, experts, group[0], np.array([cost.ranks_per_nic]))[0])
    seconds = uneven_all_to_all_seconds(cost, mean_bytes, hot, link, group)
    return hot, link, 1e6 * float(seconds[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-30b-a3b", choices=[n for n, m in PRESETS.items() if m.moe])
    parser.add_argument("--routing", default="zipf:1.2")
    parser.add_argument("--tokens", default="32,64", help="tokens per rank")
    parser.add_argument("--hidden", type=int, default=512, help="elements per token (scaled down for a 1 Gbit/s link)")
    parser.add_argument(
        "--hottest-rank", action="store_true", help="price every rank at the hottest rank's bytes (the old model)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "run"
        records = measure(args.model, args.routing, args.tokens, args.hidden, out)
        run_dir = list_runs(out)[0]
        print(
            f"{args.model} dispatch, EP={EP} over 2 emulated nodes (1 Gbit/s), routing {args.routing}, "
            f"hidden {args.hidden}, top-{PRESETS[args.model].moe.top_k} of {PRESETS[args.model].moe.num_experts}"
        )
        print(
            "| tokens/rank | mean bytes/rank | measured all_to_allv us (p10-p90) | hottest rank / even | "
            "busiest link / even | predicted us | predicted / measured |"
        )
        print("|---|---|---|---|---|---|---|")
        for r in records:
            if r["op"] != "all_to_allv":
                continue
            mean_bytes = r["recv_bytes_mean"]
            hot, link, predicted = predicted_us(run_dir, args.model, args.routing, mean_bytes, args.hottest_rank)
            print(
                f"| {r['tokens_per_rank']} | {mean_bytes:,.0f} | {r['time_us']:.0f} ({r['time_us_p10']:.0f}-"
                f"{r['time_us_p90']:.0f}) | {hot:.2f} | {link:.2f} | {predicted:.0f} | {predicted / r['time_us']:.2f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
