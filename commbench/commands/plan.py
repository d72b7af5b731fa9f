"""Rank training layouts (DP/TP/PP/VPP/CP/EP, ZeRO stage, micro-batch, recompute) for a model on a cluster.

Every layout that divides the cluster, the model and the global batch is priced at once: a
per-GPU memory ledger (weights, gradients, optimizer states under ZeRO-0..3, activations by
recompute mode with the pipeline's in-flight micro-batches, buffers), and a step time built from
per-layer compute (a GEMM-efficiency curve) and every collective each parallelism issues, priced
at its group's real placement (inside a node, one rank per node, or hierarchical). Layouts that
do not fit are dropped with the reason; the fastest of the rest are scheduled by an event
simulator (1F1B / interleaved pipeline, bucketed gradient reduction, overlap slowdown) and
ranked by tokens/s, each with where its step time goes and what makes the next one slower.

Collectives are priced from a measured bandwidth table (--bandwidth RUN_DIR, a commbench run
or an imported nccl-tests run) or from a hardware preset's documented figures (--hardware).
The preset also supplies the processor (--processor replaces it, e.g. with a measured one from a
JSON file); --inter-network swaps the fabric between nodes. --execution says which collectives the
training framework overlaps with compute: megatron (the default) or torch-eager (DTensor tensor
parallel and FSDP2 on CPU/gloo, where the TP backward all-reduces and ZeRO-3 reduce-scatters block).

Examples:
  commbench plan --model llama3-70b --gpus 64 --hardware dgx-h100 --global-batch 256 --seq-len 4096
  commbench plan --model llama3-70b --gpus 64 --bandwidth results/RUN --global-batch 256 --seq-len 4096 --json
  commbench plan --model llama2-7b --gpus 8 --global-batch 64 --seq-len 4096 --layout "tp=2,dp=4,zero=1"
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from commbench.errors import UsageError

HELP = "rank parallel training layouts by predicted throughput, or evaluate one with --layout"

# compute 10x slower while communication overlaps it is a broken measurement, not a slowdown
MAX_SLOWDOWN = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="preset name (llama3-70b, gpt3-175b, mixtral-8x7b, ...) or a config.json path")
    parser.add_argument("--gpus", type=int, required=True, help="GPUs in the cluster")
    parser.add_argument("--gpus-per-node", type=int, help="GPUs per node (default: the hardware preset's)")
    parser.add_argument("--hardware", default="dgx-h100", help="system preset: dgx-a100, dgx-h100, h200 (default dgx-h100)")
    parser.add_argument("--bandwidth", metavar="RUN_DIR", help="price collectives from this measured run directory")
    parser.add_argument("--inter-network", help="replace the preset's inter-node network (ib-hdr, ib-ndr, roce-400g, eth-25g)")
    parser.add_argument("--global-batch", type=int, required=True, help="sequences per optimizer step")
    parser.add_argument("--seq-len", type=int, required=True, help="tokens per sequence")
    parser.add_argument("--processor", metavar="NAME|FILE.json",
                        help="replace the hardware preset's processor: a processor preset (a100, h100, h200) or a JSON file in its format")
    parser.add_argument("--precision", choices=("16", "12", "18", "fp32"), default="16",
                        help="bytes per parameter variant (default 16); fp32 also means 4-byte activations")
    parser.add_argument("--execution", choices=("megatron", "torch-eager"), default="megatron",
                        help="which collectives overlap compute (default megatron; torch-eager: TP backward all-reduces "
                             "and ZeRO-3 reduce-scatters block)")
    parser.add_argument("--slowdown", type=float, help="measured compute slowdown while communication overlaps (e.g. 0.13); default 15%% NVLink / 2%% inter-node")
    parser.add_argument("--overlap-run", metavar="RUN_DIR", help="take the slowdown from this `commbench overlap` run directory")
    parser.add_argument("--top", type=int, default=5, help="layouts to show (default 5)")
    parser.add_argument("--layout", help='evaluate one layout, e.g. "tp=8,pp=4,dp=2,mbs=1,zero=1,recompute=selective"')
    parser.add_argument("--timeline", metavar="FILE", help="with --layout: write the simulated timeline (JSON list) here")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def build_planner(args):
    from commbench.modeling.hardware import load_network, load_processor, load_system
    from commbench.modeling.job import EXECUTIONS, PRECISIONS, TrainingJob
    from commbench.modeling.limits import (MAX_GLOBAL_BATCH, MAX_GPUS, MAX_GPUS_PER_NODE, MAX_SEQ_LEN, MAX_TOP,
                                           whole_number)
    from commbench.modeling.models import load_model
    from commbench.modeling.network import PresetNetwork
    from commbench.modeling.planner import Planner
    from commbench.modeling.cluster import Cluster

    # bounded, not only positive: a global batch of 1e11 would be simulated micro-batch by micro-batch
    for option, value, high in (("--gpus", args.gpus, MAX_GPUS), ("--global-batch", args.global_batch, MAX_GLOBAL_BATCH),
                                ("--seq-len", args.seq_len, MAX_SEQ_LEN), ("--top", args.top, MAX_TOP)):
        whole_number(option, value, 1, high)
    system = load_system(args.hardware)
    if args.gpus_per_node is not None:
        whole_number("--gpus-per-node", args.gpus_per_node, 1, MAX_GPUS_PER_NODE)
        system = system.with_gpus_per_node(args.gpus_per_node)
    if args.inter_network:
        system = system.with_inter(load_network(args.inter_network))
    if getattr(args, "processor", None):  # callers that build args by hand may leave it out
        system = system.with_processor(load_processor(args.processor))
    if args.gpus > system.gpus_per_node and args.gpus % system.gpus_per_node:
        raise UsageError(f"{args.gpus} GPUs is not a whole number of {system.gpus_per_node}-GPU nodes")
    cost = PresetNetwork(system)
    if args.bandwidth:
        from commbench.modeling.measured import MeasuredNetwork

        cost = MeasuredNetwork(args.bandwidth, fallback=cost)
    factor = _slowdown(args)
    slowdown = {} if factor is None else {"slowdown_intra": factor, "slowdown_inter": factor}
    cluster = Cluster(args.gpus, system, cost, **slowdown)
    job = TrainingJob(load_model(args.model), args.seq_len, args.global_batch, PRECISIONS[args.precision],
                      execution=EXECUTIONS[getattr(args, "execution", "megatron")])
    return Planner(job, cluster)


def _slowdown(args) -> float | None:
    """--slowdown, the factor an overlap run measured, or None for the simulator's defaults."""
    overlap_run = getattr(args, "overlap_run", None)  # callers that build args by hand may leave it out
    if overlap_run is None:
        factor = args.slowdown
    elif args.slowdown is not None:
        raise UsageError("give --slowdown or --overlap-run, not both")
    else:
        from commbench.overlap.slowdown import measured_slowdown

        factor = measured_slowdown(overlap_run)
    # a fraction of extra compute time: NaN or infinity would reach every figure of the plan
    if factor is not None and not (math.isfinite(factor) and 0 <= factor <= MAX_SLOWDOWN):
        raise UsageError(f"the compute slowdown must be between 0 and {MAX_SLOWDOWN:g}, not {factor!r}")
    return factor


def _slowdown_figures(planner) -> dict:
    return {"intra": planner.cluster.slowdown_intra, "inter": planner.cluster.slowdown_inter}


def main(args) -> int:
    planner = build_planner(args)
    warnings = getattr(planner.cluster.cost, "warnings", [])
    if args.layout:
        return _one_layout(planner, args, warnings)
    from commbench.modeling.planner import explain

    ranking = planner.rank(args.top)
    warnings = getattr(planner.cluster.cost, "warnings", [])  # measured lookups warn while pricing
    if args.json:
        print(json.dumps({
            "model": planner.job.model.describe(), "network": planner.cluster.cost.describe(),
            "slowdown": _slowdown_figures(planner), "execution": planner.job.execution.name,
            "screened": ranking.screened, "fitting": ranking.fitting, "layouts_per_second": ranking.layouts_per_second,
            "ranked": [r.to_dict() for r in ranking.ranked], "explanations": explain(ranking.ranked),
            "dropped_examples": [{"layout": l, "reason": r} for l, r in ranking.dropped_examples], "warnings": warnings,
        }, indent=2))
        return 0
    _print_ranking(planner, ranking, warnings)
    return 0


def _one_layout(planner, args, warnings) -> int:
    from commbench.modeling.layout import parse_layout

    layout = parse_layout(args.layout, planner.cluster.gpus)
    result, reason = planner.evaluate_layout(layout)
    warnings = warnings + result.notes
    if args.timeline:
        with open(args.timeline, "w", encoding="utf-8") as handle:
            json.dump(result.timeline, handle)
    if args.json:
        print(json.dumps({**result.to_dict(), "fits": reason is None, "reason": reason,
                          "network": planner.cluster.cost.describe(), "slowdown": _slowdown_figures(planner),
                          "execution": planner.job.execution.name, "warnings": warnings}, indent=2))
    else:
        _print_header(planner, warnings)
        _print_results([result], title=f"Layout {layout}")
        _print_breakdown(result)
        if reason:
            print(f"does not fit: {reason}", file=sys.stderr)
    return 0 if reason is None else 1


def _print_header(planner, warnings) -> None:
    from rich.console import Console

    console = Console()
    console.print(f"model: {planner.job.model.describe()}")
    console.print(f"job: global batch {planner.job.global_batch} x seq {planner.job.seq_len}, {planner.job.precision.name}")
    console.print(f"execution: {planner.job.execution.name}")
    system = planner.cluster.system
    console.print(f"cluster: {planner.cluster.gpus} x {system.processor.name}, {system.gpus_per_node} per node; "
                  f"{planner.cluster.cost.describe()}")
    console.print(f"compute slowdown under overlapping communication: {planner.cluster.slowdown_intra:.1%} "
                  f"intra-node, {planner.cluster.slowdown_inter:.1%} inter-node")
    for warning in warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")


def _print_results(results, title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in ("#", "layout", "tokens/s", "MFU", "step s", "GB/GPU", "largest costs beyond compute"):
        table.add_column(column, justify="left" if column in ("layout", "largest costs beyond compute") else "right",
                         overflow="fold")
    for i, res in enumerate(results, 1):
        extra = sorted(((v, k) for k, v in res.categories.items() if k != "compute" and v > 0), reverse=True)[:3]
        table.add_row(str(i), str(res.layout), f"{res.tokens_per_s:,.0f}", f"{res.mfu:.1%}", f"{res.step_s:.3f}",
                      f"{res.memory['total'] / 1e9:.1f}", ", ".join(f"{k} {v / res.step_s:.1%}" for v, k in extra))
    Console().print(table)


def _print_breakdown(result) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Step time, memory per GPU and bytes sent per step", title_justify="left")
    for column in ("category", "seconds", "share", "memory item", "GB", "parallelism", "GB sent"):
        table.add_column(column, justify="left" if column in ("category", "memory item", "parallelism") else "right")
    cats = list(result.categories.items())
    mem = list(result.memory.items())
    comm = list(result.comm_bytes.items())
    for i in range(max(len(cats), len(mem), len(comm))):
        row = []
        row += [cats[i][0], f"{cats[i][1]:.4f}", f"{cats[i][1] / result.step_s:.1%}"] if i < len(cats) else ["", "", ""]
        row += [mem[i][0], f"{mem[i][1] / 1e9:.2f}"] if i < len(mem) else ["", ""]
        row += [comm[i][0], f"{comm[i][1] / 1e9:.2f}"] if i < len(comm) else ["", ""]
        table.add_row(*row)
    Console().print(table)


def _print_ranking(planner, ranking, warnings) -> None:
    from rich.console import Console

    from commbench.modeling.planner import explain

    _print_header(planner, warnings)
    _print_results(ranking.ranked, title=f"Top {len(ranking.ranked)} of {ranking.fitting} fitting layouts ({ranking.screened} screened)")
    console = Console()
    for line in explain(ranking.ranked):
        console.print(line)
    for layout, reason in ranking.dropped_examples:
        console.print(f"[dim]dropped {layout}: {reason}[/dim]")
    console.print(f"[dim]screened {ranking.screened} layouts in {ranking.screening_seconds * 1e3:.0f} ms "
                  f"({ranking.layouts_per_second:,.0f} layouts/s)[/dim]")
