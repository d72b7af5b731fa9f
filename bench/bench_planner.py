"""How many layouts per second the planner screens (enumerate + memory ledger + closed-form step).

Run: python bench/bench_planner.py [--repeats 5]
Prints one line per scenario and the overall figure (total layouts / total screening seconds,
best of the repeats per scenario); record it in bench/RESULTS-planner.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from commbench.modeling.cluster import Cluster
from commbench.modeling.hardware import load_system
from commbench.modeling.job import TrainingJob
from commbench.modeling.models import PRESETS
from commbench.modeling.network import PresetNetwork
from commbench.modeling.planner import Planner

SCENARIOS = (  # model, GPUs, global batch, sequence length
    ("llama3.2-1b", 8, 256, 2048),
    ("llama3-70b", 64, 256, 4096),
    ("mixtral-8x7b", 128, 512, 4096),
    ("deepseek-v3", 1024, 1024, 4096),  # MoE at 1,024 GPUs: the issue-26 target (>= 10,000 layouts/s)
    ("qwen3-235b-a22b", 1024, 2048, 4096),
    ("gpt3-175b", 1024, 1536, 2048),
    ("llama3.1-405b", 2048, 2048, 8192),
)


def _unfolded(screening) -> str:
    """For an MoE model: how many of the screened layouts the search had before parallel folding
    (ep dividing dp, etp = tp)."""
    batch = screening.evaluation.batch
    unfolded = int(((batch.dp % batch.ep == 0) & (batch.etp == batch.tp)).sum())
    if (batch.ep == 1).all():
        return ""
    return f"; {unfolded} of them without folding ({len(batch) / max(unfolded, 1):.1f}x more now)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    system = load_system("dgx-h100")
    total_layouts, total_seconds = 0, 0.0
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs")
    for name, gpus, batch, seq in SCENARIOS:
        planner = Planner(TrainingJob(PRESETS[name], seq, batch), Cluster(gpus, system, PresetNetwork(system)))
        best = min((planner.screen() for _ in range(args.repeats)), key=lambda s: s.seconds)
        start = time.perf_counter()
        planner.rank(5)
        plan_seconds = time.perf_counter() - start
        total_layouts += len(best)
        total_seconds += best.seconds
        print(
            f"{name:>15} on {gpus:>5} GPUs: {len(best):>6} layouts screened in {best.seconds * 1e3:7.1f} ms "
            f"= {len(best) / best.seconds:>9,.0f} layouts/s; full plan with event-simulated shortlist {plan_seconds:.2f} s"
            + _unfolded(best)
        )
    print(f"overall: {total_layouts / total_seconds:,.0f} layouts/s ({total_layouts} layouts in {total_seconds:.3f} s)")


if __name__ == "__main__":
    main()
