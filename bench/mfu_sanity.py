"""Where the MFU sanity line stands (issue 13): the planner's best MFU per preset against the best
published run on that GPU, and what the published Megatron-Core rows say about compute alone.

Run: python bench/mfu_sanity.py [--grid]

Part 1 ranks the jobs of tests/test_mfu_sanity.py (JOBS, or with --grid the wider GRID the test
also ranks) on each preset and prints the best layout's MFU
and how its step divides (compute = kernels incl. recompute; the rest = communication, bubble,
optimizer), next to the bound: the highest MFU a published run on that GPU reached (PaLM's FLOP
count over the preset's peak, as the planner counts).

Part 2 reads each published row of one GPU and execution and prints its published MFU, the
model's error, the share of the model's step that is compute, and two compute-only MFUs: the
model's (model FLOPs over the model's compute seconds) and the one the published step implies if
the model's non-compute seconds are right (published step minus them). A compute-bound ranking
can only be checked against the second: it is what a run with no exposed communication would
reach, if the model prices communication right.

Predictions only (deterministic); no timing on this machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scorecard import (
    HARDWARE,
    RUNS,
    compute_precision_of,
    layout_of,
    load_runs,
    model_argument,
    palm_flops,
    peak_flops,
    published_step_seconds,
    scored,
    split_halves,
)

from commbench.errors import UsageError
from commbench.modeling.cluster import Cluster
from commbench.modeling.hardware import load_system
from commbench.modeling.job import EXECUTIONS, TrainingJob
from commbench.modeling.models import PRESETS
from commbench.modeling.network import PresetNetwork
from commbench.modeling.planner import Planner
from commbench.modeling.recipes import checked_recipe
from commbench.modeling.spec import PlanSpec, build_planner

# the jobs tests/test_mfu_sanity.py ranks on every preset: the 7B on 32 GPUs is the issue's own example
JOBS = [
    ("llama3.2-1b", 8, 256, 2048),
    ("llama2-7b", 8, 64, 4096),
    ("llama2-7b", 16, 64, 4096),
    ("llama2-7b", 32, 64, 4096),
    ("llama3-70b", 64, 512, 4096),
]
# and a wider sweep: every dense model preset on one node and on eight, at a global batch of 1024
# (many micro-batches per GPU: the compute-bound end, where MFU peaks) and a short and a long sequence
DENSE_MODELS = tuple(name for name, model in PRESETS.items() if model.moe is None)
GRID = [(model, gpus, 1024, seq) for model in DENSE_MODELS for gpus in (8, 64) for seq in (2048, 8192)]
# MoE presets, trained with Megatron-Core's MoE stack (so ranked with megatron-core only) at sizes a
# published run of theirs used (Megatron-Bridge's performance summaries: Qwen3-30B-A3B on 8-16 GPUs,
# GPT-OSS-120B on 64) or their smallest EP-filling cluster
MOE_JOBS = [
    ("qwen3-30b-a3b", 16, 256, 4096),
    ("mixtral-8x7b", 64, 256, 4096),
    ("gpt-oss-120b", 64, 1280, 4096),
    ("deepseek-moe-16b", 16, 256, 4096),
]
COMPUTE = ("compute", "recompute", "slowdown")  # kernels, their repetition, and their stretching


def published_mfu(row: dict) -> float:
    return palm_flops(row) / (row["gpus"] * peak_flops(row) * published_step_seconds(row))


def compute_share(categories: dict[str, float], step_s: float) -> float:
    return sum(categories.get(name, 0.0) for name in COMPUTE) / step_s


def best_ranking(system: str, execution: str, job: tuple[str, int, int, int], compute: str = "bf16"):
    """The planner's best layout for (model, GPUs, global batch, sequence) on a system preset, its
    GEMMs in the `compute` recipe, or None where no layout fits in memory (a 175B on 8 GPUs)."""
    model, gpus, global_batch, seq_len = job
    hardware = load_system(system)
    training = TrainingJob(
        PRESETS[model],
        seq_len,
        global_batch,
        execution=EXECUTIONS[execution],
        compute=checked_recipe(compute, hardware.processor),
    )
    try:
        return Planner(training, Cluster(gpus, hardware, PresetNetwork(hardware))).rank(1).ranked[0]
    except UsageError:
        return None


def rankings(systems: list[str], executions: list[str], rows: list[dict], jobs: list[tuple]) -> list[str]:
    lines = [
        "| system | execution | job (GPUs, global batch, sequence) | best layout | MFU | compute share "
        "| published best on the GPU |",
        "|---|---|---|---|---|---|---|",
    ]
    for system in systems:
        gpu = next(g for g, s in HARDWARE.items() if s == system)
        bf16 = [published_mfu(r) for r in rows if r["gpu"] == gpu and compute_precision_of(r) == "bf16"]
        if not bf16:  # no BF16 run published on this GPU (H200: FP8 rows only): no bound to rank against
            continue
        bound = max(bf16)
        for execution in executions:
            for job in jobs:
                best = best_ranking(system, execution, job)
                if best is not None:
                    model, gpus, global_batch, seq_len = job
                    lines.append(
                        f"| {system} | {execution} | {model} ({gpus}, {global_batch}, {seq_len}) | {best.layout} "
                        f"| {best.mfu:.2%}{' **above**' if best.mfu > bound else ''} "
                        f"| {compute_share(best.categories, best.step_s):.0%} | {bound:.2%} |"
                    )
    return lines


def published_rows(rows: list[dict], gpu: str, execution: str) -> list[str]:
    half = split_halves(rows)
    rows = scored(rows)
    lines = [
        "| row | half | layout | published MFU | model error | model compute share | compute-only MFU: model "
        "| compute-only MFU: published step less the model's non-compute |",
        "|---|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as folder:
        for row in rows:
            if row["gpu"] != gpu or row["execution"] != execution or "flops_convention" in row["assumed"]:
                continue
            spec = PlanSpec(
                model=model_argument(row, Path(folder)),
                gpus=row["gpus"],
                global_batch=row["global_batch"],
                seq_len=row["seq_len"],
                hardware=HARDWARE[gpu],
                gpus_per_node=row["gpus_per_node"],
                execution=execution,
            )
            result, _ = build_planner(spec).evaluate_layout(layout_of(row))
            share = compute_share(result.categories, result.step_s)
            published = published_step_seconds(row)
            implied = published_mfu(row) * published / (published - (1 - share) * result.step_s)
            lines.append(
                f"| {row['id']} | {half[row['id']]} | {layout_of(row)} | {published_mfu(row):.1%} "
                f"| {result.step_s / published - 1:+.1%} | {share:.0%} | {result.mfu / share:.1%} | {implied:.1%} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="H100", choices=sorted(HARDWARE))
    parser.add_argument(
        "--execution", default="megatron-core", choices=("megatron-core", "megatron-2021", "torch-fsdp")
    )
    parser.add_argument("--grid", action="store_true", help="rank the wider sweep (GRID, about 40 s) instead of JOBS")
    args = parser.parse_args(argv)
    every_row = load_runs(RUNS)  # the split's positions count superseded rows too
    rows = scored(every_row)
    print(
        "\n".join(
            rankings(
                sorted(HARDWARE.values()),
                ["megatron-core", "torch-fsdp", "megatron-2021"],
                rows,
                GRID if args.grid else JOBS,
            )
        )
    )
    print()
    print("\n".join(rankings(sorted(HARDWARE.values()), ["megatron-core"], rows, MOE_JOBS)))
    print()
    print("\n".join(published_rows(every_row, args.gpu, args.execution)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
