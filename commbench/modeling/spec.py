"""What a plan is asked for: PlanSpec, every planner input typed, documented and validated, and
build_planner(spec), which turns one into the Planner that prices it.

`commbench plan` and the dashboard's planner page each translate their own input (argv, page
controls) into a PlanSpec, so both price layouts from the same inputs in the same way. A PlanSpec
checks what can be checked from the values alone when it is made; what needs a file or a preset
(the model, the hardware, a measured run) is checked when build_planner loads it. Either way a
bad input is a UsageError naming the option, never a traceback.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from commbench.errors import UsageError
from commbench.modeling.cluster import DEFAULT_SLOWDOWN_WORDS
from commbench.modeling.hardware import preset_names
from commbench.modeling.job import (
    EXECUTIONS,
    LORA_BASES,
    LORA_TARGETS,
    PRECISIONS,
    Execution,
    LoRA,
    MoEExecution,
    TrainingJob,
    execution_for_framework,
)
from commbench.modeling.limits import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_GPUS_PER_NODE, MAX_SEQ_LEN, MAX_TOP, whole_number
from commbench.modeling.recipes import RECIPES, checked_recipe

if TYPE_CHECKING:  # the planner pulls in numpy and the step model; `commbench --help` need not
    from commbench.modeling.hardware import System
    from commbench.modeling.network import CollectiveCost
    from commbench.modeling.planner import Planner
    from commbench.modeling.routing import Routing

# compute 10x slower while communication overlaps it is a broken measurement, not a slowdown
MAX_SLOWDOWN = 10.0
# a capacity factor beyond the expert count can only pad: no router sends an expert more than every token
MAX_CAPACITY_FACTOR = 1024.0
MOE_OVERLAPS = ("none", "shared-expert", "1f1b-a2a", "both")
TP_COMM_OVERLAPS = ("on", "off")
FINETUNES = ("full", "lora")


def _required(doc: str) -> Any:
    return field(metadata={"doc": doc})


def _with_default(doc: str, default: Any = None) -> Any:
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class PlanSpec:
    """Every input of one plan. Field docs are the help `commbench plan` shows for its options."""

    model: str = _required("preset name (llama3-70b, gpt3-175b, mixtral-8x7b, ...) or a config.json path")
    gpus: int = _required("GPUs in the cluster")
    global_batch: int = _required("sequences per optimizer step")
    seq_len: int = _required("tokens per sequence")
    hardware: str = _with_default(
        "system preset: dgx-a100, dgx-h100, h200, dgx-b200, dgx-b300, gb200-nvl72, gb300-nvl72 (default dgx-h100)",
        "dgx-h100",
    )
    gpus_per_node: int | None = _with_default(
        "GPUs per host, i.e. per Slurm node or compute tray (default: the "
        "hardware preset's); where the preset's NVLink domain is its host, the "
        "domain follows"
    )
    nvlink_domain: int | None = _with_default(
        "GPUs in one NVLink domain, a whole number of hosts that divides the GPU count (default: the preset's: "
        "8 on DGX/HGX H100, H200 and B200, 72 on GB200/GB300 NVL72). Groups inside one domain run on NVLink"
    )
    bandwidth: str | None = _with_default("price collectives from this measured run directory")
    inter_network: str | None = _with_default(
        f"replace the preset's inter-node network: a network preset ({', '.join(preset_names('network'))})"
    )
    processor: str | None = _with_default(
        f"replace the hardware preset's processor: a processor preset ({', '.join(preset_names('processor'))}) or "
        "a JSON file in its format"
    )
    precision: str = _with_default("bytes per parameter variant (default 16); fp32 also means 4-byte activations", "16")
    compute_precision: str = _with_default(
        "the number format of the linear layers' GEMMs, by Transformer Engine recipe: bf16 (default), fp8-delayed "
        "(DelayedScaling), fp8-current (Float8CurrentScaling), fp8-blockwise (Float8BlockScaling), mxfp8 "
        "(MXFP8BlockScaling, Blackwell), nvfp4 (NVFP4BlockScaling, Blackwell). Priced at the processor's peak in that "
        "format plus the casts, scales and transposed copies; attention core, embedding, output layer and router stay "
        "BF16. Apart from --precision, which says the bytes kept per parameter",
        "bf16",
    )
    fp8_param_gather: bool = _with_default(
        "keep the weights in the compute precision's format and gather them so (Megatron's --fp8-param-gather): "
        "ZeRO/FSDP parameter gathers move 1 byte per parameter instead of 2, and no BF16 weight copy is kept",
        False,
    )
    finetune: str = _with_default(
        "what the step trains: full (every weight, the default) or lora (LoRA fine-tuning, Hu et al. 2021: the "
        "base weights frozen, so their backward computes input gradients only and they keep no gradient, master "
        "copy or Adam state and are not reduced over DP; trained adapters on --lora-targets of rank --lora-rank). "
        "Dense models only",
        "full",
    )
    lora_rank: int = _with_default("LoRA adapter rank (default 16, MLPerf's Llama 2 70B LoRA)", 16)
    lora_targets: str = _with_default(
        "comma-separated projections that get LoRA adapters: qkv, o, mlp (default qkv,o, MLPerf's Llama 2 70B LoRA)",
        "qkv,o",
    )
    lora_dropout: float = _with_default(
        "dropout on each LoRA adapter's input (NeMo's dropout_position pre; default 0.1, MLPerf's Llama 2 70B "
        "LoRA): the adapter keeps the dropped-out input and its 1-byte mask for backward",
        0.1,
    )
    lora_base: str = _with_default(
        "how LoRA's frozen base weights are held: bf16 (the default: a 16-bit copy, plus Transformer Engine's "
        "cached copies under a quantised --compute-precision) or quantised (created in the recipe's format only, "
        "TE's fp8_model_init: NeMo's fp8_params, which MLPerf's LoRA configs set with FP8; their NVFP4 runs "
        "replace the weights in place): element bytes per linear weight, twice where a column-wise copy is held "
        "(Hopper FP8 with the transpose cache, NVFP4, MXFP8); no gradient or optimizer state either way",
        "bf16",
    )
    transpose_cache: str = _with_default(
        "on (default) or off: a quantised LoRA base keeps the transposed FP8 copy Hopper's FP8 GEMMs need for "
        "the input gradient between steps (off: Megatron/NeMo's disable_parameter_transpose_cache, built per "
        "GEMM and freed); Blackwell's FP8 GEMMs take either layout and need none (Transformer Engine's "
        "is_non_tn_fp8_gemm_supported: compute capability 10.x)",
        "on",
    )
    model_dropout: str = _with_default(
        "on (default) or off: the model applies hidden and attention dropout, whose 1-byte masks are kept for "
        "backward (Megatron's GPT does; Llama recipes such as MLPerf's LoRA yaml set hidden_dropout and "
        "attention_dropout to 0.0: off)",
        "on",
    )
    fp8_activation_input: bool = _with_default(
        "keep the MLP activation function's input (the gate/up GEMM's output) for backward in FP8, 1 byte per "
        "element (Megatron-Core's activation_func_fp8_input_store; a quantised --compute-precision only)",
        False,
    )
    execution: str = _with_default(
        "how the framework runs the step (kernels fused, attention, collectives overlapped): "
        "megatron-core, megatron-2021, deepspeed, torch-fsdp, torch-eager; megatron (the "
        "default) is megatron-core; the list with assumptions is at the end of plan --help",
        "megatron",
    )
    tp_comm_overlap: str | None = _with_default(
        "forward TP collectives beside the GEMMs they feed (Transformer Engine's TP communication overlap, "
        "NeMo/Megatron-Bridge's tp_comm_overlap, torchtitan's async TP): on or off; default: what --execution "
        "assumes (on for megatron-core, off for the others). A run launched with it off (MLPerf's NVFP4 configs, "
        "TP_COMM_OVERLAP=False) waits for every forward all-gather and reduce-scatter of TP"
    )
    framework: str | None = _with_default(
        "the training framework and version as the job description names it ('NeMo 25.11', 'Megatron-LM 2021', "
        "'torchtitan', 'Megatron-DeepSpeed', ...): picks --execution by the table at the end of plan --help when "
        "--execution is left at its default, and the plan says what it picked; a framework the table cannot place "
        "is refused"
    )
    slowdown: float | None = _with_default(
        f"measured compute slowdown while communication overlaps (e.g. 0.13); default {DEFAULT_SLOWDOWN_WORDS}"
    )
    overlap_run: str | None = _with_default("take the slowdown from this `commbench overlap` run directory")
    top: int = _with_default("layouts to show (default 5)", 5)
    routing: str | None = _with_default(
        "MoE router skew pricing EP's all-to-alls: uniform | zipf:S | dirichlet:ALPHA | file:PATH "
        "(default: the model preset's documented default, else uniform)"
    )

    dispatcher: str = _with_default(
        "MoE token dispatcher: alltoall (default), allgather, or flex (DeepEP: RDMA across nodes once per "
        "node, NVLink inside)",
        "alltoall",
    )
    dispatch_dtype: str = _with_default(
        "MoE dispatch element type: bf16 (default) or fp8 (DeepSeek-V3's recipe; the combine stays bf16)", "bf16"
    )
    moe_overlap: str = _with_default(
        "MoE communication overlap: none (default), shared-expert (shared experts beside the dispatch), "
        "1f1b-a2a (one micro-batch's all-to-alls behind another's compute), or both",
        "none",
    )
    capacity_factor: float | None = _with_default(
        "MoE expert capacity factor: token copies over it are dropped (default: dropless)"
    )
    pad_to_capacity: bool = _with_default(
        "with --capacity-factor: every expert computes its full capacity (--moe-pad-expert-input-to-capacity)", False
    )
    cuda_graph: bool = _with_default(
        "the step runs as one full-iteration CUDA graph (--cuda-graph-impl full_iteration): no host cost of the "
        "MoE layers; without it the dispatcher's per-layer host synchronisation exposes the host's work",
        False,
    )

    def __post_init__(self) -> None:
        # bounded, not only positive: a global batch of 1e11 would be simulated micro-batch by micro-batch
        for name, high in (
            ("gpus", MAX_GPUS),
            ("global_batch", MAX_GLOBAL_BATCH),
            ("seq_len", MAX_SEQ_LEN),
            ("top", MAX_TOP),
        ):
            object.__setattr__(self, name, whole_number(option(name), getattr(self, name), 1, high))
        for name, high in (("gpus_per_node", MAX_GPUS_PER_NODE), ("nvlink_domain", MAX_GPUS)):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, whole_number(option(name), getattr(self, name), 1, high))
        if self.fp8_param_gather not in (True, False):
            raise UsageError(f"{option('fp8_param_gather')} is on or off, not {self.fp8_param_gather!r}")
        if self.fp8_param_gather and self.compute_precision == "bf16":
            raise UsageError(
                f"{option('fp8_param_gather')} needs a quantised {option('compute_precision')} (fp8-..., "
                "mxfp8 or nvfp4), not bf16"
            )
        if self.precision == "fp32" and self.compute_precision != "bf16":
            raise UsageError(
                f"{option('precision')} fp32 trains without autocast; "
                f"{option('compute_precision')} {self.compute_precision} needs a mixed-precision variant"
            )
        if self.framework is not None and self.execution == PlanSpec.default("execution"):
            object.__setattr__(self, "execution", execution_for_framework(self.framework)[0])
        for name, known in (("precision", PRECISIONS), ("execution", EXECUTIONS), ("compute_precision", RECIPES)):
            if getattr(self, name) not in known:
                raise UsageError(f"{option(name)} must be one of {', '.join(known)}, not {getattr(self, name)!r}")
        self._check_finetune()
        if self.tp_comm_overlap is not None and self.tp_comm_overlap not in TP_COMM_OVERLAPS:
            raise UsageError(f"{option('tp_comm_overlap')} is on or off, not {self.tp_comm_overlap!r}")
        if self.slowdown is not None and self.overlap_run is not None:
            raise UsageError(f"give {option('slowdown')} or {option('overlap_run')}, not both")
        if self.slowdown is not None:
            checked_slowdown(self.slowdown)
        _ = self.routing_model  # --routing parsed (a routing file read) once, here, and kept
        self._check_moe_choices()

    def _check_finetune(self) -> None:
        if self.finetune not in FINETUNES:
            raise UsageError(f"{option('finetune')} is full or lora, not {self.finetune!r}")
        object.__setattr__(self, "lora_rank", whole_number(option("lora_rank"), self.lora_rank, 1, 65536))
        targets = [t.strip() for t in str(self.lora_targets).split(",")]
        if not targets or any(t not in LORA_TARGETS for t in targets) or len(set(targets)) != len(targets):
            raise UsageError(
                f"{option('lora_targets')} is a comma-separated list of {', '.join(LORA_TARGETS)}, not {self.lora_targets!r}"
            )

        try:
            dropout = float(self.lora_dropout)
        except (TypeError, ValueError):
            dropout = -1.0
        if not 0.0 <= dropout < 1.0:
            raise UsageError(f"{option('lora_dropout')} is a probability in [0, 1), not {self.lora_dropout!r}")
        object.__setattr__(self, "lora_dropout", dropout)
        if self.lora_base not in LORA_BASES:
            raise UsageError(f"{option('lora_base')} is {' or '.join(LORA_BASES)}, not {self.lora_base!r}")
        if self.lora_base == "quantised" and self.compute_precision == "bf16":
            raise UsageError(f"{option('lora_base')} quantised needs a quantised {option('compute_precision')}")
        if self.transpose_cache not in TP_COMM_OVERLAPS:
            raise UsageError(f"{option('transpose_cache')} is on or off, not {self.transpose_cache!r}")
        if self.model_dropout not in TP_COMM_OVERLAPS:
            raise UsageError(f"{option('model_dropout')} is on or off, not {self.model_dropout!r}")
        if self.fp8_activation_input not in (True, False):
            raise UsageError(f"{option('fp8_activation_input')} is on or off, not {self.fp8_activation_input!r}")
        if self.fp8_activation_input and self.compute_precision == "bf16":
            raise UsageError(f"{option('fp8_activation_input')} needs a quantised {option('compute_precision')}")

    def lora(self, compute_capability: str | None = None) -> LoRA | None:
        """The LoRA fine-tuning --finetune lora asks for (None: full training); `compute_capability`,
        the GPU's, decides whether a quantised base holds a column-wise copy (LoRA.columnwise_copy)."""
        if self.finetune != "lora":
            return None
        recipe = RECIPES[self.compute_precision]
        per_tensor_fp8 = recipe.peak == "fp8" and recipe.element_bytes == 1.0  # delayed, current scaling
        major = int(compute_capability.split(".")[0]) if compute_capability else 0
        any_layout = 10 <= major < 12 or major >= 13  # TE's is_non_tn_fp8_gemm_supported
        columnwise = (not per_tensor_fp8) or (self.transpose_cache == "on" and not any_layout)
        return LoRA(
            self.lora_rank,
            tuple(t.strip() for t in self.lora_targets.split(",")),
            dropout=self.lora_dropout,
            base=self.lora_base,
            columnwise_copy=columnwise,
        )

    def execution_model(self) -> Execution:
        """The execution preset, with the forward TP overlap --tp-comm-overlap sets where it is given."""
        preset = EXECUTIONS[self.execution]
        if self.tp_comm_overlap is None or (self.tp_comm_overlap == "on") == preset.tp_forward_overlap:
            return preset
        overlapped = self.tp_comm_overlap == "on"
        how = "overlapped with the GEMMs they feed" if overlapped else "blocking (TP communication overlap off)"
        return replace(
            preset,
            tp_forward_overlap=overlapped,
            assumes=f"{preset.assumes}; --tp-comm-overlap {self.tp_comm_overlap}: forward TP collectives {how}",
        )

    def execution_source(self) -> str | None:
        """Where --execution came from when --framework picked it (None: given, or the default)."""
        if self.framework is None:
            return None
        picked, why = execution_for_framework(self.framework)
        if picked != self.execution:
            return None
        return f"picked from --framework {self.framework!r}: {why}"

    def _check_moe_choices(self) -> None:
        from commbench.modeling.job import DISPATCH_DTYPES, DISPATCHERS

        for name, known in (
            ("dispatcher", DISPATCHERS),
            ("dispatch_dtype", tuple(DISPATCH_DTYPES)),
            ("moe_overlap", MOE_OVERLAPS),
        ):
            if getattr(self, name) not in known:
                raise UsageError(f"{option(name)} must be one of {', '.join(known)}, not {getattr(self, name)!r}")
        factor = self.capacity_factor
        if factor is not None and (
            isinstance(factor, bool)
            or not isinstance(factor, (int, float))
            or not (math.isfinite(factor) and 0 < factor <= MAX_CAPACITY_FACTOR)
        ):
            raise UsageError(
                f"{option('capacity_factor')} must be a number above 0 and at most "
                f"{MAX_CAPACITY_FACTOR:g}, not {factor!r}"
            )
        if self.cuda_graph not in (True, False):
            raise UsageError(f"{option('cuda_graph')} is on or off, not {self.cuda_graph!r}")
        if self.pad_to_capacity and factor is None:
            raise UsageError(f"{option('pad_to_capacity')} needs {option('capacity_factor')}")

    def moe_execution(self) -> MoEExecution:
        """The job's MoEExecution from these options."""
        return MoEExecution(
            dispatcher=self.dispatcher,
            dispatch_dtype=self.dispatch_dtype,
            shared_expert_overlap=self.moe_overlap in ("shared-expert", "both"),
            a2a_overlap=self.moe_overlap in ("1f1b-a2a", "both"),
            capacity_factor=self.capacity_factor,
            pad_to_capacity=self.pad_to_capacity,
            cuda_graph=self.cuda_graph,
        )

    @cached_property
    def routing_model(self) -> Routing | None:
        """--routing parsed, once per spec (a file: routing is read once); None when not given."""
        from commbench.modeling.routing import parse_routing

        return None if self.routing is None else parse_routing(self.routing)

    @staticmethod
    def doc(name: str) -> str:
        """What a field means, as `commbench plan --help` and the dashboard's planner page say it."""
        return str(_field(name).metadata["doc"])

    @staticmethod
    def default(name: str) -> Any:
        """A field's default; None where the field has none (it must be given) or defaults to None."""
        default = _field(name).default
        return None if default is MISSING else default


def _field(name: str) -> Field[Any]:
    return next(f for f in fields(PlanSpec) if f.name == name)


def option(name: str) -> str:
    """The command-line option of a PlanSpec field, as error messages name it."""
    return "--" + name.replace("_", "-")


def checked_slowdown(factor: float) -> float:
    """The compute slowdown if it is a fraction of extra compute time in [0, MAX_SLOWDOWN]: NaN or
    infinity would reach every figure of the plan."""
    if (
        isinstance(factor, bool)
        or not isinstance(factor, (int, float))
        or not (math.isfinite(factor) and 0 <= factor <= MAX_SLOWDOWN)
    ):
        raise UsageError(f"the compute slowdown must be between 0 and {MAX_SLOWDOWN:g}, not {factor!r}")
    return factor


def build_planner(spec: PlanSpec) -> Planner:
    """The Planner for a spec: its model, system (with any replaced processor, network or node
    size), collective prices (preset or measured) and compute slowdown."""
    from commbench.modeling.cluster import Cluster
    from commbench.modeling.model_config import load_model
    from commbench.modeling.planner import Planner

    system = _system(spec)
    model = load_model(spec.model)
    if spec.lora() is not None and model.moe:
        raise UsageError(f"{option('finetune')} lora prices dense models; {model.name} is MoE")
    routing = _routing_model(spec, model.name)
    cluster = Cluster(spec.gpus, system, _collective_cost(spec, system, routing.key), **_slowdown_figures(spec))
    job = TrainingJob(
        model,
        spec.seq_len,
        spec.global_batch,
        PRECISIONS[spec.precision],
        execution=spec.execution_model(),
        routing=routing.text,
        compute=checked_recipe(spec.compute_precision, system.processor),
        quantised_param_gather=spec.fp8_param_gather,
        moe_execution=spec.moe_execution(),
        lora=spec.lora(system.processor.compute_capability),
        fp8_activation_input=spec.fp8_activation_input,
        dropout=spec.model_dropout == "on",
    )
    return Planner(job, cluster)


def _system(spec: PlanSpec) -> System:
    from commbench.modeling.hardware import load_network, load_processor, load_system

    system = load_system(spec.hardware)
    if spec.gpus_per_node is not None:
        system = system.with_gpus_per_host(spec.gpus_per_node)
    if spec.nvlink_domain is not None:
        system = system.with_nvlink_domain(spec.nvlink_domain)
    if spec.inter_network:
        system = system.with_inter(load_network(spec.inter_network))
    if spec.processor:
        system = system.with_processor(load_processor(spec.processor))
    for unit, size in (("node", system.gpus_per_host), ("NVLink domain", system.nvlink_domain)):
        if spec.gpus > size and spec.gpus % size:
            raise UsageError(f"{spec.gpus} GPUs is not a whole number of {size}-GPU {unit}s")
    return system


def routing_of(spec: PlanSpec, model_name: str) -> tuple[str, str]:
    """The router skew EP is priced with, and where it comes from."""
    from commbench.modeling.routing import DEFAULT_SKEW

    if spec.routing_model is not None:
        return spec.routing_model.text, "given (--routing)"
    if model_name in DEFAULT_SKEW:
        return DEFAULT_SKEW[model_name]
    return "uniform", "default: no skew known for this model"


def _routing_model(spec: PlanSpec, model_name: str) -> Routing:
    """routing_of's skew as a parsed Routing (the spec's own parse where --routing was given)."""
    from commbench.modeling.routing import parse_routing

    return spec.routing_model or parse_routing(routing_of(spec, model_name)[0])


def _collective_cost(spec: PlanSpec, system: System, routing_key: str) -> CollectiveCost:
    """The preset's documented figures, or a measured run's table falling back on them."""
    from commbench.modeling.network import PresetNetwork

    preset = PresetNetwork(system)
    if not spec.bandwidth:
        return preset
    from commbench.modeling.measured import MeasuredNetwork

    return MeasuredNetwork(spec.bandwidth, fallback=preset, routing=routing_key)


def _slowdown_figures(spec: PlanSpec) -> dict[str, float]:
    """The Cluster's slowdown arguments: the given or measured factor for both tiers, or none
    (the defaults) when neither is given."""
    if spec.overlap_run is None:
        factor = spec.slowdown
    else:
        from commbench.data.slowdown import measured_slowdown

        factor = checked_slowdown(measured_slowdown(spec.overlap_run))
    return {} if factor is None else {"slowdown_intra": factor, "slowdown_inter": factor}
