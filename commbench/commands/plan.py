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
JSON file); --inter-network swaps the fabric between nodes. --execution says how the training
framework runs the step: which kernels it fuses, which attention it uses, which collectives it
overlaps with compute (the presets are listed below with what each assumes).

Examples:
  commbench plan --model llama3-70b --gpus 64 --hardware dgx-h100 --global-batch 256 --seq-len 4096
  commbench plan --model llama3-70b --gpus 64 --bandwidth results/RUN --global-batch 256 --seq-len 4096 --json
  commbench plan --model llama2-7b --gpus 8 --global-batch 64 --seq-len 4096 --layout "tp=2,dp=4,zero=1"
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from dataclasses import fields

from commbench.modeling.job import DISPATCH_DTYPES, DISPATCHERS, EXECUTIONS, LORA_BASES, PRECISIONS
from commbench.modeling.ledger import LEDGER, NOT_MODELLED
from commbench.modeling.recipes import RECIPES
from commbench.modeling.spec import FINETUNES, MOE_OVERLAPS, TP_COMM_OVERLAPS, PlanSpec

LEDGER_NAMES = tuple(item.name for item in LEDGER)

__doc__ += """
Which execution preset fits which framework and year (the scorecard's rows use these):
  Megatron-LM 2021-2022 (SC21 Megatron, BLOOM's Megatron-DeepSpeed)           megatron-2021
  Megatron-Core with Transformer Engine, 2023 on (Megatron-LM 2023-, NeMo 23.x-26.x,
      Megatron-Bridge, NVIDIA DGX Cloud Benchmarking recipes)                  megatron-core
  DeepSpeed ZeRO-2/3 on models without Megatron's fused kernels              deepspeed
  PyTorch FSDP/FSDP2 on GPUs (torchtitan, MosaicML LLM Foundry)                torch-fsdp
  torch eager on CPU/gloo (commbench's validation GPT)                         torch-eager
Say it with --execution (the default, megatron, is megatron-core), or name the framework and version
with --framework ("NeMo 25.11", "Megatron-LM 2021", "torchtitan"): the planner then picks the
preset by this table and says so. Older Megatron runs priced as megatron-core come out too fast.

Compute precision (--compute-precision) is the GEMMs' number format by Transformer Engine recipe;
--precision is the bytes kept per parameter (16, 12, 18, fp32). FP8 recipes need FP8 tensor cores
(Hopper, Blackwell), MXFP8 and NVFP4 data-centre Blackwell (dgx-b200, dgx-b300, gb200-nvl72, gb300-nvl72).
On NVL72 presets a host holds 4 GPUs and an NVLink domain 72 (--nvlink-domain): groups inside one
domain run on NVLink even where they span hosts.
"""
__doc__ += "\nExecution presets (--execution; megatron is another name for megatron-core):\n" + "\n".join(
    textwrap.fill(
        f"{name}: {execution.assumes}",
        width=100,
        initial_indent="  ",
        subsequent_indent="      ",
        break_on_hyphens=False,
    )
    for name, execution in EXECUTIONS.items()
    if name == execution.name
)

__doc__ += (
    """
Memory (plan --json: memory_bytes is the largest pipeline stage's, stages lists every stage's): the
allocator's peak item by item at the moment it happens, which torch.cuda.max_memory_allocated
would read (allocator_peak), and beside it what lives outside the allocator; a layout fits when
their sum is at most the device memory. Items:
"""
    + "\n".join(
        textwrap.fill(
            f"{item.name} ({'allocator' if item.inside_allocator else 'outside the allocator'}): {item.what}",
            width=100,
            initial_indent="  ",
            subsequent_indent="      ",
        )
        for item in LEDGER
    )
    + """
Not modelled:
"""
    + "\n".join(
        textwrap.fill(f"{name}: {what}", width=100, initial_indent="  ", subsequent_indent="      ")
        for name, what in NOT_MODELLED.items()
    )
    + """
Pipeline splits (--layout keys): pp_first=N / pp_last=N (Megatron's --decoder-first/last-pipeline-num-layers),
pp_embedding=1 / pp_loss=1 (--account-for-embedding/loss-in-pipeline-split), vpp_group=N
(--microbatch-group-size-per-virtual-pipeline-stage: interleaving micro-batch counts that are not a multiple of pp),
pp_layout=Et*3|(t*4|)*6t*5L (--pipeline-model-parallel-layout written without its cosmetic commas: E, t, m, L, x*n,
(...)*n; pp x vpp stages, rank r holding entries r, r+pp, ...; MTP layers m only just before L, with the output head).
Recompute (--layout keys): recompute=selective with recompute_modules=mlp+layernorm (Megatron's --recompute-modules:
core_attn, mlp, layernorm, moe_act, mla_up_proj; default core_attn), recompute=full with recompute_layers=N
(--recompute-method block --recompute-num-layers N; default uniform: every layer).
"""
)

HELP = "rank parallel training layouts by predicted throughput, or evaluate one with --layout"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _spec_option(parser, "--model", required=True)
    parser.add_argument(
        "--name", help="name the model in the output (default: the preset, or the folder holding the config.json)"
    )
    _spec_option(parser, "--gpus", type=int, required=True)
    _spec_option(parser, "--gpus-per-node", type=int)
    _spec_option(parser, "--nvlink-domain", type=int)
    _spec_option(parser, "--hardware")
    _spec_option(parser, "--bandwidth", metavar="RUN_DIR")
    _spec_option(parser, "--inter-network")
    _spec_option(parser, "--global-batch", type=int, required=True)
    _spec_option(parser, "--seq-len", type=int, required=True)
    _spec_option(parser, "--processor", metavar="NAME|FILE.json")
    _spec_option(parser, "--precision", choices=tuple(PRECISIONS))
    _spec_option(parser, "--compute-precision", choices=tuple(RECIPES))
    _spec_option(parser, "--fp8-param-gather", action="store_true")
    _spec_option(parser, "--execution", choices=tuple(EXECUTIONS))
    _spec_option(parser, "--framework", metavar="TEXT")
    _spec_option(parser, "--slowdown", type=float)
    _spec_option(parser, "--overlap-run", metavar="RUN_DIR")
    _spec_option(parser, "--top", type=int)
    _spec_option(parser, "--routing", metavar="SKEW")
    _spec_option(parser, "--dispatcher", choices=DISPATCHERS)
    _spec_option(parser, "--dispatch-dtype", choices=tuple(DISPATCH_DTYPES))
    _spec_option(parser, "--moe-overlap", choices=MOE_OVERLAPS)
    _spec_option(parser, "--capacity-factor", type=float)
    _spec_option(parser, "--pad-to-capacity", action="store_true")
    _spec_option(parser, "--cuda-graph", action="store_true")
    _spec_option(parser, "--tp-comm-overlap", choices=TP_COMM_OVERLAPS)
    _spec_option(parser, "--finetune", choices=FINETUNES)
    _spec_option(parser, "--lora-rank", type=int)
    _spec_option(parser, "--lora-targets")
    _spec_option(parser, "--lora-dropout", type=float)
    _spec_option(parser, "--lora-base", choices=LORA_BASES)
    _spec_option(parser, "--transpose-cache", choices=TP_COMM_OVERLAPS)
    _spec_option(parser, "--fp8-activation-input", action="store_true")
    _spec_option(parser, "--model-dropout", choices=TP_COMM_OVERLAPS)
    parser.add_argument(
        "--layout",
        help='evaluate one layout, e.g. "tp=8,pp=4,dp=2,mbs=1,zero=1,recompute=selective"; '
        'MoE layouts fold ep and etp over tp*cp*dp (Megatron-Core), e.g. "tp=2,dp=16,ep=32,etp=1"',
    )
    parser.add_argument(
        "--timeline", metavar="FILE", help="with --layout: write the simulated timeline (JSON list) here"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def _spec_option(parser: argparse.ArgumentParser, flag: str, **kwargs) -> None:
    """An option for one PlanSpec field, with the field's documentation and default."""
    name = flag.removeprefix("--").replace("-", "_")
    default = PlanSpec.default(name)
    parser.add_argument(
        flag,
        help=PlanSpec.doc(name).replace("%", "%%"),  # argparse formats help with %
        **({} if default is None else {"default": default}),
        **kwargs,
    )


def spec_from_args(args: argparse.Namespace) -> PlanSpec:
    """The plan the command line asks for (the options are named after PlanSpec's fields)."""
    return PlanSpec(**{field.name: getattr(args, field.name) for field in fields(PlanSpec)})


def _slowdown_figures(planner) -> dict:
    return {"intra": planner.cluster.slowdown_intra, "inter": planner.cluster.slowdown_inter}


def model_figures(job) -> dict:
    """Total and active parameters, and the forward attention FLOPs per token at the job's sequence:
    the core (QK^T and AV over the causal keys each layer sees) and the projections (2 per weight)."""
    model = job.model
    return {
        "total_params": model.total_params,
        "active_params": model.active_params,
        "attention_flops_per_token": {
            "seq_len": job.seq_len,
            "scores": model.attention_score_flops_per_token(job.seq_len),
            "projections": 2.0 * model.layers * model.attention_projection_params,
        },
    }


def _named(planner, name: str | None):
    """The planner with its model called `name` (the plan's inputs are the same either way)."""
    if not name:
        return planner
    from dataclasses import replace

    from commbench.modeling.planner import Planner

    job = replace(planner.job, model=replace(planner.job.model, name=name))
    return Planner(job, planner.cluster, planner.space)


def main(args) -> int:
    from commbench.modeling.spec import build_planner, routing_of

    spec = spec_from_args(args)
    planner = build_planner(spec)
    args.ep_routing = dict(zip(("routing", "source"), routing_of(spec, planner.job.model.name)))
    args.execution_source = spec.execution_source()
    planner = _named(planner, args.name)
    if args.layout:
        return _one_layout(planner, args)
    from commbench.modeling.planner import explain

    ranking = planner.rank(spec.top)
    warnings = planner.warnings()  # after ranking: measured lookups warn while pricing
    if args.json:
        print(
            json.dumps(
                {
                    "model": planner.job.model.describe(),
                    "model_figures": model_figures(planner.job),
                    "network": planner.cluster.cost.describe(),
                    "slowdown": _slowdown_figures(planner),
                    "execution": planner.job.execution.name,
                    "execution_picked_from": args.execution_source,
                    "execution_assumes": planner.job.execution.assumes,
                    "compute": compute_figures(planner),
                    "finetune": finetune_figures(planner.job, ranking.ranked[0] if ranking.ranked else None),
                    "screened": ranking.screened,
                    "fitting": ranking.fitting,
                    "layouts_per_second": ranking.layouts_per_second,
                    "ranked": [r.to_dict() for r in ranking.ranked],
                    "explanations": explain(ranking.ranked),
                    "dropped_examples": [{"layout": layout, "reason": why} for layout, why in ranking.dropped_examples],
                    "warnings": warnings,
                    "bandwidth_pricing": pricing_summary(planner),
                    **_ep_skew_json(planner, args, ranking.ranked),
                },
                indent=2,
            )
        )
        return 0
    _print_ranking(planner, ranking, warnings, args.execution_source)
    _print_ep_skew(planner, args, ranking.ranked)
    return 0


def _one_layout(planner, args) -> int:
    from commbench.modeling.layout import parse_layout

    layout = parse_layout(args.layout, planner.cluster.gpus)
    result, reason = planner.evaluate_layout(layout)
    warnings = planner.warnings() + result.notes  # after pricing: measured lookups warn while pricing
    if args.timeline:
        with open(args.timeline, "w", encoding="utf-8") as handle:
            json.dump(result.timeline, handle)
    if args.json:
        print(
            json.dumps(
                {
                    **result.to_dict(),
                    "model_figures": model_figures(planner.job),
                    "fits": reason is None,
                    "reason": reason,
                    "network": planner.cluster.cost.describe(),
                    "slowdown": _slowdown_figures(planner),
                    "execution": planner.job.execution.name,
                    "execution_picked_from": args.execution_source,
                    "compute": compute_figures(planner),
                    "finetune": finetune_figures(planner.job, result),
                    "warnings": warnings,
                    "bandwidth_pricing": pricing_summary(planner),
                    **_ep_skew_json(planner, args, [result]),
                },
                indent=2,
            )
        )
    else:
        _print_header(planner, warnings, args.execution_source)
        _print_results([result], title=f"Layout {layout}")
        _print_breakdown(result)
        _print_stages(result)
        _print_ep_skew(planner, args, [result])
        _print_pricing(planner)
        if reason:
            print(f"does not fit: {reason}", file=sys.stderr)
    return 0 if reason is None else 1


def compute_figures(planner) -> dict:
    """The compute precision: the recipe, what stays in BF16, the GEMM peak it runs at and the
    parameter-gather width (plan --json's `compute`)."""
    job, processor = planner.job, planner.cluster.system.processor
    return {
        **job.compute.describe(),
        "fp8_param_gather": job.quantised_param_gather,
        "gathered_param_bytes": job.gathered_param_bytes,
        "gemm_peak_flops": processor.for_recipe(job.compute).peak_flops,
        "bf16_peak_flops": processor.peak_flops,
        **_quantised_gemm_factor(processor, job.compute),
        "bytes_per_param_variant": job.precision.name,
    }


def finetune_figures(job, result=None) -> dict:
    """What the step trains (plan --json's `finetune`): full training, or LoRA with its adapters and,
    for `result`'s layout, LoRA's parts of the memory ledger (`memory`, bytes on one GPU of the
    stage the ledger reports)."""
    if job.lora is None:
        return {"mode": "full", "trained_params": job.model.total_params}
    figures = {
        "mode": "lora",
        "rank": job.lora.rank,
        "targets": list(job.lora.targets),
        "dropout": job.lora.dropout,
        "trained_params": job.lora.params(job.model),
        "trained_share": job.trained_share,
        "frozen": "base weights: forward and input gradients only; no weight gradients, optimizer state, "
        "master weights, gradient buffers or DP gradient reduction; a frozen linear layer keeps no input",
        "base": job.lora.base,
        "base_columnwise_copy": job.lora.columnwise_copy,
        "fp8_activation_input": job.fp8_activation_input,
    }
    if result is not None:
        from commbench.modeling.layout import LayoutBatch
        from commbench.modeling.memory import lora_memory_parts

        parts = lora_memory_parts(job, LayoutBatch.from_layouts([result.layout]), [result.memory_stage])
        figures["memory"] = {
            "layout": str(result.layout),
            "stage": result.memory_stage,
            **{name: float(value[0]) for name, value in parts.items()},
            "parts_of": "frozen_base_weights + adapter_weights = parameters; adapter_gradients = gradients; "
            "adapter_optimizer = optimizer; adapter_activations_per_layer: inside activations, per layer "
            "and micro-batch",
        }
    return figures


def _quantised_gemm_factor(processor, recipe) -> dict:
    """The factor on the GEMM curve in the recipe's format and where it came from (fitted on the
    scorecard's calibration half, or 1.0 where no row in that format on that GPU was there to fit)."""
    if not recipe.quantised:
        return {"quantised_gemm_efficiency": None, "quantised_gemm_efficiency_source": None}
    factors = dict(processor.quantised_gemm_efficiency)
    if recipe.peak not in factors:
        return {
            "quantised_gemm_efficiency": 1.0,
            "quantised_gemm_efficiency_source": f"not fitted: no {recipe.peak} factor in the processor's description",
        }
    return {
        "quantised_gemm_efficiency": factors[recipe.peak],
        "quantised_gemm_efficiency_source": processor.sources.get("quantised_gemm_efficiency", ""),
    }


def _ep_skew_json(planner, args, results) -> dict:
    """MoE models: the router skew EP is priced with, its source, what it costs each layout, and
    each layout's MoE parts per layer type (Planner.moe_parts)."""
    if not planner.job.model.moe:
        return {}
    return {
        "ep_skew": {**args.ep_routing, "layouts": planner.ep_skew(results)},
        "moe": planner.moe_parts([r.layout for r in results]),
    }


def _print_ep_skew(planner, args, results) -> None:
    rows = _ep_skew_json(planner, args, results).get("ep_skew", {}).get("layouts", [])
    if rows:
        print(f"EP all-to-alls priced under routing {args.ep_routing['routing']} ({args.ep_routing['source']}):")
    for row in rows:
        print(
            f"  {row['layout']}: max/mean load {row['max_over_mean']:.2f}; EP {row['ep_s']:.4f} s per step, "
            f"{row['skew_cost_s']:.4f} s of it the skew's (uniform router: {row['ep_uniform_s']:.4f} s)"
        )


def _print_header(planner, warnings, execution_source: str | None = None) -> None:
    from commbench import terminal

    console = terminal.console()
    model = planner.job.model
    console.print(f"model: {model.describe()}")
    console.print(f"parameters: {model.total_params:,} total, {model.active_params:,} active per token")
    console.print(
        f"job: global batch {planner.job.global_batch} x seq {planner.job.seq_len}, {planner.job.precision.name}"
    )
    compute = planner.job.compute
    console.print(
        f"compute precision: {compute.name} ({compute.te_recipe}); BF16: {', '.join(compute.bf16_parts())}"
        + ("; parameters gathered quantised" if planner.job.quantised_param_gather else "")
    )
    lora = planner.job.lora
    if lora is not None:
        console.print(
            f"finetune: LoRA rank {lora.rank} on {','.join(lora.targets)}: {lora.params(model):,} trained "
            "parameters; base frozen (no weight gradients, optimizer state or DP reduction for it)"
        )
    console.print(f"execution: {planner.job.execution.name}" + (f" ({execution_source})" if execution_source else ""))
    system = planner.cluster.system
    console.print(
        f"cluster: {planner.cluster.gpus} x {system.processor.name}, {system.gpus_per_host} per host, "
        f"NVLink domain {system.nvlink_domain}; {planner.cluster.cost.describe()}"
    )
    console.print(
        f"compute slowdown under overlapping communication: {planner.cluster.slowdown_intra:.1%} "
        f"inside an NVLink domain, {planner.cluster.slowdown_inter:.1%} across domains"
        + (
            " (a group with several ranks in each of several domains: each rate over its phase's share)"
            if planner.cluster.slowdown_intra != planner.cluster.slowdown_inter
            else ""
        )
    )
    for warning in warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")


def _print_results(results, title: str) -> None:
    from rich.table import Table

    from commbench import terminal

    table = Table(title=title, title_justify="left")
    for column in ("#", "layout", "tokens/s", "MFU", "step s", "GB/GPU", "largest costs beyond compute"):
        table.add_column(
            column, justify="left" if column in ("layout", "largest costs beyond compute") else "right", overflow="fold"
        )
    for i, res in enumerate(results, 1):
        stage = ""
        if res.layout.pp > 1 and res.stages:  # the largest stage, and the first and last beside it
            ends = [
                f"{name} {res.stages[s]['memory_bytes']['total'] / 1e9:.1f}"
                for name, s in (("first", 0), ("last", len(res.stages) - 1))
                if s != res.memory_stage
            ]
            stage = f" (stage {res.memory_stage}{'; ' if ends else ''}{', '.join(ends)})"
        table.add_row(
            str(i),
            str(res.layout),
            f"{res.tokens_per_s:,.0f}",
            f"{res.mfu:.1%}",
            f"{res.step_s:.3f}",
            f"{res.memory['total'] / 1e9:.1f}{stage}",
            res.largest_costs(),
        )
    terminal.console().print(table)


def shown_stages(result) -> list[int]:
    """The largest stage, and the first and last where they differ from it."""
    last = len(result.stages) - 1
    return sorted({result.memory_stage, 0, last}) if result.stages else []


def _print_stages(result) -> None:
    """Pipelines: the largest stage's memory and the first and last stage's beside it, with each
    stage's share of the step."""
    if result.layout.pp == 1:
        return
    from rich.table import Table

    from commbench import terminal

    table = Table(
        title=f"Pipeline stages (largest memory: stage {result.memory_stage}; most work: stage "
        f"{result.pacing_stage}). GB: total per GPU; GB alloc: the allocator's peak; share: of the "
        f"step; comm: exposed communication",
        title_justify="left",
    )
    for column in ("stage", "layers", "GB", "GB alloc", "largest items, GB", "peak at", "share", "compute s", "comm s"):
        table.add_column(column, justify="left" if column in ("largest items, GB", "peak at") else "right")
    for s in shown_stages(result):
        stage = result.stages[s]
        memory = stage["memory_bytes"]
        items = sorted(((memory[k], k) for k in LEDGER_NAMES if memory[k] >= 0.05e9), reverse=True)[:3]
        table.add_row(
            str(s),
            str(stage["layers"]),
            f"{memory['total'] / 1e9:.1f}",
            f"{stage['allocator_peak'] / 1e9:.1f}",
            ", ".join(f"{k} {v / 1e9:.1f}" for v, k in items),
            stage["peak_moment"],
            f"{stage['step_share']:.1%}",
            f"{stage['compute_s']:.3f}",
            f"{stage['communication_s']:.3f}",
        )
    terminal.console().print(table)


def _print_breakdown(result) -> None:
    from rich.table import Table

    from commbench import terminal

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
    terminal.console().print(table)


def _print_ranking(planner, ranking, warnings, execution_source: str | None = None) -> None:
    from commbench import terminal
    from commbench.modeling.planner import explain

    _print_header(planner, warnings, execution_source)
    _print_results(
        ranking.ranked,
        title=f"Top {len(ranking.ranked)} of {ranking.fitting} fitting layouts ({ranking.screened} screened)",
    )
    console = terminal.console()
    for line in explain(ranking.ranked):
        console.print(line)
    for layout, reason in ranking.dropped_examples:
        console.print(f"[dim]dropped {layout}: {reason}[/dim]")
    console.print(
        f"[dim]screened {ranking.screened} layouts in {ranking.screening_seconds * 1e3:.0f} ms "
        f"({ranking.layouts_per_second:,.0f} layouts/s)[/dim]"
    )
    _print_pricing(planner)


def pricing_summary(planner) -> str | None:
    """--bandwidth: which groups were priced from the run's rows and which from the preset (None without one)."""
    summary = getattr(planner.cluster.cost, "pricing_summary", None)
    return summary() if summary else None


def _print_pricing(planner) -> None:
    from commbench import terminal

    line = pricing_summary(planner)
    if line:
        terminal.console(highlight=False).print(line, markup=False)
