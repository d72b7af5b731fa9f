"""An MoE layer's token dispatch on the emulated 2-node cluster, beside the planner's prediction.

Run (root, Debian 12; tests/cluster/emulated.py builds the cluster):
  python bench/moe_dispatch_cluster.py [--model qwen3-30b-a3b] [--routing zipf:1.2] [--tokens 32,64]

Two network-namespace nodes of two ranks each on a 1 Gbit/s shaped link: EP = 4 across two
"domains". One `commbench run` (gloo, torchrun per node) measures all_to_allv under the model's
routing (its experts and top-k, the hidden size scaled down to --hidden so a step fits the link)
and all_to_all on the same sizes. The planner's prediction is what `plan` does without an
all_to_allv curve of that routing: the routing model's expected max/mean load for the model's
experts over 4 EP ranks (routing.expected_imbalance), and the measured uniform all_to_all curve
priced at the mean bytes times that load (MeasuredNetwork, the planner's own lookup). Prints both
per token count; record them in bench/RESULTS-moe.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from cluster.emulated import EmulatedCluster  # noqa: E402

from commbench.data.rundir import list_runs, load_run  # noqa: E402
from commbench.modeling.hardware import load_system  # noqa: E402
from commbench.modeling.measured import MeasuredNetwork  # noqa: E402
from commbench.modeling.models import PRESETS  # noqa: E402
from commbench.modeling.network import Placement, PresetNetwork  # noqa: E402
from commbench.modeling.routing import expected_imbalance, parse_routing  # noqa: E402
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


def predicted_us(run_dir: Path, model: str, routing: str, mean_bytes: float) -> tuple[float, float]:
    """(expected max/mean load, predicted microseconds) from the run's uniform all_to_all curve."""
    load = expected_imbalance(parse_routing(routing), PRESETS[model].moe.num_experts, EP)
    cost = MeasuredNetwork(run_dir, fallback=PresetNetwork(load_system("dgx-h100")), routing="uniform")
    return load, 1e6 * float(cost.time_s("all_to_allv", mean_bytes * load, EP, Placement(RANKS_PER_NODE, 2)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-30b-a3b", choices=[n for n, m in PRESETS.items() if m.moe])
    parser.add_argument("--routing", default="zipf:1.2")
    parser.add_argument("--tokens", default="32,64", help="tokens per rank")
    parser.add_argument("--hidden", type=int, default=512, help="elements per token (scaled down for a 1 Gbit/s link)")
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
            "| tokens/rank | mean bytes/rank | measured all_to_allv us (p10-p90) | expected max/mean | "
            "predicted us | predicted / measured |"
        )
        print("|---|---|---|---|---|---|")
        for r in records:
            if r["op"] != "all_to_allv":
                continue
            mean_bytes = r["recv_bytes_mean"]
            load, predicted = predicted_us(run_dir, args.model, args.routing, mean_bytes)
            print(
                f"| {r['tokens_per_rank']} | {mean_bytes:,.0f} | {r['time_us']:.0f} ({r['time_us_p10']:.0f}-"
                f"{r['time_us_p90']:.0f}) | {load:.2f} | {predicted:.0f} | {predicted / r['time_us']:.2f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
