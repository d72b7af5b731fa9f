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
with `pooled` one processor for all layouts from all their calibrations. Either way it is what
`commbench calibrate` writes from the same timings (commbench/measure/processor_json.py: GEMM
surface and curve, attention rates per SDPA backend, copy bandwidth, elementwise, kernel overhead,
eager autograd op and optimizer rates), each timing the median of the calibrations that have it. `quick` is
the file `commbench calibrate --quick` wrote on a node of the cluster before training, as a user
would have it. `ablate` drops measured inputs by name (ABLATIONS) to show what each one does.
And the compute slowdown while communication runs beside it, measured on the same cluster by
`commbench overlap` (commbench.data.slowdown), when the work directory has that run.
"""

from __future__ import annotations

import json
from pathlib import Path

from layouts import layout_runs

from commbench.measure.processor_json import combine, processor_json
from commbench.modeling.cluster import Cluster
from commbench.modeling.hardware import System, load_network, load_processor
from commbench.modeling.job import EXECUTIONS, PRECISIONS, TrainingJob
from commbench.modeling.layout import parse_layout
from commbench.modeling.measured import MeasuredNetwork
from commbench.modeling.models import ModelSpec
from commbench.modeling.network import PresetNetwork
from commbench.modeling.planner import Planner
from commbench.modeling.schedule import StepResult

TRAINING_EXECUTION = "torch-eager"  # DTensor TP and FSDP2 on CPU/gloo, the same for every layout
# the calibration runs one thread per rank; 16 GB: no layout of this small model is dropped as not fitting
CPU_FACTS = {"memory_bytes": 16e9, "sm_count": 1, "cuda": None}


def gpt_spec(model: dict) -> ModelSpec:
    """bench/validation/gpt.py as a ModelSpec: two LayerNorms (weight and bias) per block, a learned
    position table of seq_len rows and a final LayerNorm, no biases elsewhere."""
    h = model["hidden"]
    return ModelSpec(
        name="validation GPT",
        hidden=h,
        layers=model["layers"],
        heads=model["heads"],
        kv_heads=model["heads"],
        ffn_hidden=4 * h,
        vocab=model["vocab"],
        mlp="gelu",
        tied_embeddings=False,
        max_seq_len=model["seq_len"],
        layer_extra_params=4 * h,
        model_extra_params=model["seq_len"] * h + 2 * h,
    )


# an input of the prediction left out -> what the processor JSON (or the slowdown) becomes without it
ABLATIONS = {
    "slowdown": "the measured compute slowdown under communication (the step model's default instead)",
    "elementwise": "the measured elementwise rate (norms and activations at the copy rate instead)",
    "surface": "the GEMM surface by shape (the curve by FLOPs alone instead)",
    "kernel-overhead": "the per-kernel overhead (0 instead)",
    "autograd-op": "the eager autograd op's cost (the per-kernel overhead instead)",
    "attention-rates": "the per-backend attention rates (one attention efficiency instead)",
}
_ABLATED_FIELDS = {
    "surface": "gemm_surface",
    "kernel-overhead": "kernel_overhead_s",
    "attention-rates": "attention_rates",
    "autograd-op": "autograd_op_s",
}


def calibrated_processor(calibrations: list[dict], ablate: tuple[str, ...] = ()) -> dict:
    """The processor JSON `commbench calibrate` writes, from these calibrations' timings."""
    latest = calibrations[-1]
    description = processor_json(
        combine(calibrations),
        {**CPU_FACTS, "name": "this CPU, 1 thread per rank"},
        latest["host"],
        latest["measured_at"],
        latest["commbench"],
    )
    return ablated(description, ablate)


def ablated(description: dict, ablate: tuple[str, ...]) -> dict:
    description = dict(description)
    for name in ablate:
        if name in _ABLATED_FIELDS:
            description.pop(_ABLATED_FIELDS[name], None)
        elif name == "elementwise":
            description["elementwise_efficiency"] = {"value": 1.0, "source": "ablated: the copy rate"}
    return description


PROCESSOR_CHOICES = ("own", "pooled", "quick")


def predict(
    training: dict,
    bandwidth_run: Path,
    processor_dir: Path,
    processors: str = "own",
    execution: str = TRAINING_EXECUTION,
    slowdown: float | None = None,
    ablate: tuple[str, ...] = (),
    quick: dict | None = None,
) -> tuple[dict[str, dict], dict[str, StepResult], dict[str, list[str]]]:
    """Per trained layout: the processor JSON used, the planner's step result and the measured network's warnings.

    `processors`: "own" (each layout's calibrations), "pooled" (every calibration of the round) or
    "quick" (the `commbench calibrate --quick` JSON given as `quick`). `slowdown` is the measured
    compute slowdown under overlapping communication (what `commbench plan --overlap-run` reads);
    None keeps the step model's defaults. `ablate`: names from ABLATIONS to leave out.

    Each processor is written to processor_dir and read back the way `commbench plan --processor` reads it.
    """
    model = training["model"]
    runs = layout_runs(training["global_batch"], training["pp_micro_batches"])
    layouts = training["layouts"]
    everything = [c for layout in layouts.values() for c in layout["calibrations"]]
    if "slowdown" in ablate:
        slowdown = None
    # the fallback prices only what the bandwidth table lacks, and MeasuredNetwork warns when it does
    ethernet = load_network("eth-25g")
    descriptions, results, warnings = {}, {}, {}
    processor_dir.mkdir(parents=True, exist_ok=True)
    for name, layout in layouts.items():
        if processors == "quick":
            description = ablated(quick, ablate)
        else:
            description = calibrated_processor(everything if processors == "pooled" else layout["calibrations"], ablate)
        processor_file = processor_dir / f"{name}-{processors}{''.join('-without-' + a for a in ablate)}.json"
        processor_file.write_text(json.dumps(description, indent=1))
        descriptions[name] = description
        system = System(
            "emulated cluster: network-namespace nodes, 1 rank each",
            load_processor(str(processor_file)),
            1,
            ethernet,
            ethernet,
        )
        cost = MeasuredNetwork(bandwidth_run, fallback=PresetNetwork(system))
        run = runs[name]
        # DistributedDataParallel(bucket_cap_mb=25) is TrainingJob's default bucket; a CPU run: no CUDA context
        job = TrainingJob(
            gpt_spec(model),
            seq_len=model["seq_len"],
            global_batch=run.global_batch,
            precision=PRECISIONS["fp32"],
            on_gpu=False,
            dropout=False,
            execution=EXECUTIONS[execution],
        )
        overlap = {} if slowdown is None else {"slowdown_intra": slowdown, "slowdown_inter": slowdown}
        planner = Planner(job, Cluster(run.gpus, system, cost, **overlap))
        results[name], _ = planner.evaluate_layout(parse_layout(run.planner, run.gpus))
        warnings[name] = cost.warnings
    return descriptions, results, warnings


def predict_memory(training: dict) -> dict[str, dict]:
    """Per layout measured by train_gpt.py --memory: the ledger's allocator peak for each rank (a
    pipeline's rank r is stage r, every other layout's ranks are alike) and its items, as
    `commbench plan --layout L --precision fp32 --execution torch-eager` computes them for a CPU
    run. The memory ledger needs no compute rates, so the processor is the h100 preset's (only its
    step time would change with a calibrated one)."""
    model = training["model"]
    runs = layout_runs(training["global_batch"], training["pp_micro_batches"])
    ethernet = load_network("eth-25g")
    system = System(
        "emulated cluster: network-namespace nodes, 1 rank each", load_processor("h100"), 1, ethernet, ethernet
    )
    predicted = {}
    for name in training["layouts"]:
        run = runs[name]
        job = TrainingJob(
            gpt_spec(model),
            seq_len=model["seq_len"],
            global_batch=run.global_batch,
            precision=PRECISIONS["fp32"],
            on_gpu=False,
            dropout=False,
            execution=EXECUTIONS[TRAINING_EXECUTION],
        )
        planner = Planner(job, Cluster(run.gpus, system, PresetNetwork(system)))
        result, _ = planner.evaluate_layout(parse_layout(run.planner, run.gpus))
        stages = [stage["memory_bytes"] for stage in result.stages]
        per_rank = [stages[r] if len(stages) > 1 else stages[0] for r in range(training["world_size"])]
        predicted[name] = {
            "ranks": [ledger["allocator_peak"] for ledger in per_rank],
            "ledgers": per_rank,
            "moments": [result.stages[min(r, len(stages) - 1)]["peak_moment"] for r in range(training["world_size"])],
        }
    return predicted
