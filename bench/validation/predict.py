"""The planner's prediction for each trained layout, from the measured bandwidth table and compute rates.

No torch: this is the adapter between the training script's measurements and the modelling API
(commbench/modeling). It writes the measured processor as a JSON file and prices each layout as
  commbench plan --layout L --processor FILE.json --precision fp32 --execution torch-eager
                 --bandwidth WORK/bandwidth --overlap-run WORK/overlap
does (Planner.evaluate_layout: closed form, then the event simulator), with the validation GPT
built as a ModelSpec (the CLI would take it as a config.json). The execution is torch-eager for
every layout: that is how the training script's torch APIs run on CPU/gloo (DTensor TP
all-reduces after the matmul's whole backward, FSDP2 reduce-scatters block); `execution` selects
megatron instead, to show what the Megatron-style overlap assumption predicts.

A processor is built from calibrations: by default each layout's own, taken right before and after
its timed steps (the machine's speed changes from minute to minute with other work on it), or
with `pooled` one processor for all layouts from all their calibrations. Either way:
  gemm curve        every measured GEMM shape gives a point (forward FLOPs 2*n*k*out, fraction of
                    peak = 3 x forward FLOPs / (seconds for forward + both gradients) / peak), the
                    layout the step model uses for a GEMM: forward time from the curve, backward 2x;
                    shapes of equal FLOPs share one point (the median of their rates), since the
                    curve is indexed by FLOPs only; peak = the fastest point
  attention         the step model's attention FLOPs (causal: 2*b*s*s*q/t forward, 2.5x that
                    backward) over the measured forward + backward time, as a fraction of peak;
                    one figure for all shapes (median), as the processor description has one
  memory bandwidth  the median copy rate (read + write bytes / seconds): the optimizer is priced
                    as memory traffic at this rate
  elementwise       the bytes the step model counts for one block's elementwise work (norms,
                    residual adds, activation, 3x forward for forward + backward) over the
                    measured time of that work, as a fraction of the copy rate: on this CPU GELU
                    is bound by computing erf, not by memory, so a copy overstates its speed
And the compute slowdown while communication runs beside it, measured on the same cluster by
`commbench overlap` (commbench.data.slowdown), when the work directory has that run.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

from commbench.modeling.compute import (BACKWARD_ATTENTION_FACTOR, BACKWARD_ELEMENTWISE_FACTOR, BACKWARD_GEMM_FACTOR,
                                        elementwise_bytes)
from commbench.modeling.hardware import Processor, System, load_network, load_processor
from commbench.modeling.job import EXECUTIONS, PRECISIONS, TrainingJob
from commbench.modeling.layout import parse_layout
from commbench.modeling.measured import MeasuredNetwork
from commbench.modeling.models import ModelSpec
from commbench.modeling.network import PresetNetwork
from commbench.modeling.planner import Planner
from commbench.modeling.cluster import Cluster
from commbench.modeling.schedule import StepResult

from layouts import layout_runs

TRAINING_EXECUTION = "torch-eager"  # DTensor TP and FSDP2 on CPU/gloo, the same for every layout
# the machine's memory, so that no layout of this small model is dropped as not fitting
MACHINE_MEMORY_BYTES = 16e9


def gpt_spec(model: dict) -> ModelSpec:
    return ModelSpec(name="validation GPT", hidden=model["hidden"], layers=model["layers"], heads=model["heads"],
                     kv_heads=model["heads"], ffn_hidden=4 * model["hidden"], vocab=model["vocab"], mlp="gelu",
                     tied_embeddings=False, max_seq_len=model["seq_len"])


def cpu_processor(calibrations: list[dict], model: dict) -> Processor:
    rates = defaultdict(list)
    for calibration in calibrations:
        for tokens, k, out, seconds in calibration["gemm"]:
            forward_flops = 2.0 * tokens * k * out
            rates[forward_flops].append((1 + BACKWARD_GEMM_FACTOR) * forward_flops / seconds)
    curve_rates = {flops: statistics.median(values) for flops, values in sorted(rates.items())}
    peak = max(curve_rates.values())

    attention = []
    for calibration in calibrations:
        att = calibration["attention"]
        forward_flops = 2.0 * att["batch"] * model["seq_len"] ** 2 * att["heads"] * model["hidden"] / model["heads"]
        attention.append((1 + BACKWARD_ATTENTION_FACTOR) * forward_flops / att["seconds"] / peak)
    copy_rate = statistics.median(c["copy"]["bytes"] / c["copy"]["seconds"] for c in calibrations)
    return Processor(
        name="this CPU, 1 thread per rank, 2 ranks on 2 cores", peak_flops=peak, memory_bytes=MACHINE_MEMORY_BYTES,
        memory_bandwidth=copy_rate, gemm_curve=tuple((flops, rate / peak) for flops, rate in curve_rates.items()),
        attention_efficiency=statistics.median(attention),
        elementwise_efficiency=elementwise_efficiency(calibrations, model, copy_rate),
        sources={"peak_flops_bf16": "fastest measured fp32 GEMM (forward + gradients), not a datasheet figure",
                 "gemm_efficiency": "measured at the validation GPT's own GEMM shapes",
                 "attention_efficiency": "measured: scaled_dot_product_attention, causal, forward + backward",
                 "memory_bandwidth_bytes_per_s": "measured: 16 MiB copy, read + write",
                 "elementwise_efficiency": "measured: one block's norms, residual adds, GELU and head split/merge, "
                                           "forward + backward, as bytes the step model counts for them / copy rate"},
    )


def elementwise_efficiency(calibrations: list[dict], model: dict, copy_rate: float) -> float:
    """The rate at which the block's elementwise work moves the bytes the step model counts for
    it, as a fraction of the copy rate (1.0 for calibrations taken before it was measured)."""
    rates = []
    for calibration in calibrations:
        measured = calibration.get("elementwise")
        if measured is None:
            continue
        spec, t = gpt_spec(model), measured["tp"]
        forward = elementwise_bytes(PRECISIONS["fp32"].activation_bytes, spec.hidden, spec.q_dim + spec.kv_dim,
                                    spec.mlp_matrices * spec.ffn_hidden / t, measured["tokens"], t)
        rates.append((1 + BACKWARD_ELEMENTWISE_FACTOR) * forward / measured["seconds"])
    return min(1.0, statistics.median(rates) / copy_rate) if rates else 1.0


def processor_preset_json(processor: Processor) -> dict:
    """The processor in the presets' format (commbench/modeling/presets/processor-*.json), for the record."""
    def figure(key, value):
        return {"value": value, "source": processor.sources.get(key, "")}

    return {
        "name": processor.name,
        "peak_flops_bf16": figure("peak_flops_bf16", processor.peak_flops),
        "memory_bytes": {"value": processor.memory_bytes, "source": "large enough for every layout here"},
        "memory_bandwidth_bytes_per_s": figure("memory_bandwidth_bytes_per_s", processor.memory_bandwidth),
        "gemm_efficiency": figure("gemm_efficiency", [list(point) for point in processor.gemm_curve]),
        "attention_efficiency": figure("attention_efficiency", processor.attention_efficiency),
        "elementwise_efficiency": figure("elementwise_efficiency", processor.elementwise_efficiency),
    }


def predict(training: dict, bandwidth_run: Path, processor_dir: Path, pooled: bool = False,
            execution: str = TRAINING_EXECUTION, slowdown: float | None = None,
            ) -> tuple[dict[str, Processor], dict[str, StepResult], dict[str, list[str]]]:
    """Per trained layout: the processor used, the planner's step result and the measured network's warnings.

    `slowdown` is the measured compute slowdown under overlapping communication (what `commbench
    plan --overlap-run` reads); None keeps the step model's defaults.

    Each layout's processor is written to processor_dir/<layout>[-pooled].json and read back the way
    `commbench plan --processor` reads it.
    """
    model = training["model"]
    runs = layout_runs(training["global_batch"], training["pp_micro_batches"])
    layouts = training["layouts"]
    everything = [c for layout in layouts.values() for c in layout["calibrations"]]
    # the fallback prices only what the bandwidth table lacks, and MeasuredNetwork warns when it does
    ethernet = load_network("eth-25g")
    processors, results, warnings = {}, {}, {}
    processor_dir.mkdir(parents=True, exist_ok=True)
    for name, layout in layouts.items():
        processor_file = processor_dir / f"{name}{'-pooled' if pooled else ''}.json"
        measured = cpu_processor(everything if pooled else layout["calibrations"], model)
        processor_file.write_text(json.dumps(processor_preset_json(measured), indent=1))
        processor = processors[name] = load_processor(str(processor_file))
        system = System("emulated cluster: network-namespace nodes, 1 rank each", processor, 1, ethernet, ethernet)
        cost = MeasuredNetwork(bandwidth_run, fallback=PresetNetwork(system))
        run = runs[name]
        # DistributedDataParallel(bucket_cap_mb=25) is TrainingJob's default bucket; no CUDA context to reserve
        job = TrainingJob(gpt_spec(model), seq_len=model["seq_len"], global_batch=run.global_batch,
                          precision=PRECISIONS["fp32"], reserved_bytes=0.0, execution=EXECUTIONS[execution])
        overlap = {} if slowdown is None else {"slowdown_intra": slowdown, "slowdown_inter": slowdown}
        planner = Planner(job, Cluster(run.gpus, system, cost, **overlap))
        results[name], _ = planner.evaluate_layout(parse_layout(run.planner, run.gpus))
        warnings[name] = cost.warnings
    return processors, results, warnings
