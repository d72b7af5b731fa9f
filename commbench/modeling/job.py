"""What is being trained and how: model, batch, sequence, precision, how the framework executes the
step (which collectives it overlaps with compute) and the runtime knobs the costs use."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from commbench.errors import UsageError
from commbench.modeling.models import ModelSpec
from commbench.modeling.recipes import RECIPES, ComputeRecipe


@dataclass(frozen=True)
class Precision:
    """Bytes kept per parameter. Adam keeps m and v (4 B each in fp32); mixed precision adds an fp32 master copy."""

    name: str
    param_bytes: int = 2  # bf16 working weights
    grad_bytes: int = 2  # bf16 gradients (also the size the data-parallel reduction moves)
    master_bytes: int = 4  # fp32 master weights, 0 when the optimizer updates bf16 weights directly
    moment_bytes: int = 8  # Adam m + v in fp32
    activation_bytes: int = 2  # bf16 activations and the messages TP/PP/CP/EP move
    compute_dtype: str = "bf16"  # the GEMMs' dtype: which of a processor's gemm_surface points price them

    @property
    def optimizer_bytes(self) -> int:
        return self.master_bytes + self.moment_bytes

    @property
    def bytes_per_param(self) -> int:
        return self.param_bytes + self.grad_bytes + self.optimizer_bytes

    @property
    def optimizer_traffic_bytes(self) -> int:
        """HBM bytes a fused Adam step moves per parameter: read+write master, m, v; read grad; write bf16 weight."""
        return 2 * self.optimizer_bytes + self.grad_bytes + self.param_bytes


PRECISIONS = {
    # the seeds' 16 B/param: 2 (bf16 weights) + 2 (bf16 grads) + 12 (fp32 master, m, v)
    "16": Precision("bf16 mixed precision + Adam: 2 weights + 2 grads + 12 optimizer (fp32 master 4, m 4, v 4)"),
    # one seed's 12 B/param variant: no fp32 master copy
    "12": Precision("bf16 + Adam without fp32 master: 2 weights + 2 grads + 8 optimizer (m 4, v 4)", master_bytes=0),
    # Megatron with fp32 main gradients: 2 + 4 + 12; its distributed optimizer shards only the 12
    "18": Precision("bf16 + fp32 main grads + Adam (Megatron): 2 weights + 4 grads + 12 optimizer", grad_bytes=4),
    # plain fp32 training (no autocast): fp32 weights, gradients and activations, Adam m and v, no master copy
    "fp32": Precision(
        "fp32 + Adam: 4 weights + 4 grads + 8 optimizer (m 4, v 4), fp32 activations",
        param_bytes=4,
        grad_bytes=4,
        master_bytes=0,
        moment_bytes=8,
        activation_bytes=4,
        compute_dtype="fp32",
    ),
}


@dataclass(frozen=True)
class Execution:
    """How the training framework runs the step: which collectives it overlaps with compute, which
    kernels it fuses, which attention it uses. A property of the framework, not of the layout, so
    one setting applies to every layout alike. `plan --help` lists the presets with `assumes`.

    tp_backward_overlap
        True: the backward TP collectives that Megatron overlaps (without SP the input-gradient
        all-reduce of each column-parallel GEMM, with SP the re-gather and the reduce-scatters)
        run during the weight-gradient GEMM. False: they run after the GEMM's whole backward and
        the next op waits for them, as torch's ColwiseParallel/RowwiseParallel do (the all-reduce
        is issued when the autograd node of the matmul has computed both gradients).
    zero3_reduce_scatter_overlap
        True: ZeRO-3's per-layer gradient reduce-scatter runs on its own stream during the
        backward of the previous layer (Megatron, DeepSpeed, FSDP on GPU). False: it blocks the
        backward where it is issued, as FSDP2 does on CPU/gloo (no stream to put it on).
    tp_forward_overlap
        True: the forward TP collectives run beside the GEMMs they feed or drain (Transformer
        Engine's TP communication overlap, chunked all-gather/reduce-scatter GEMMs; torchtitan's
        async TP): only the part the forward GEMMs do not cover is exposed. False: they block.
    fused_grad_accumulation
        True: each micro-batch's weight-gradient GEMM accumulates into the gradient buffer
        (Megatron's gradient-accumulation fusion), so micro-batches after the first cost nothing
        extra. False: autograd adds every micro-batch's new gradient into .grad with a separate
        kernel (torch eager): m - 1 passes over the gradients the rank keeps.
    attention
        the attention implementation (kernels.py): "unfused" (2021-2022 Megatron: batched QK^T and
        AV GEMMs, softmax and dropout over the scores), or a fused one priced at the processor's
        rate for it: "flash2", "flash3", "cudnn", "sdpa" (torch's scaled_dot_product_attention)
    fused_norm_residual
        True: dropout + residual add is one kernel beside the norm (Megatron's bias-dropout-add,
        Transformer Engine's fused LayerNorm). False: dropout, residual add and norm each read and
        write the hidden state.
    fused_bias_activation
        True: the MLP's bias add is fused into the activation (bias-GeLU) or into the GEMM's
        epilogue (torch's addmm); False: a separate bias pass over the up-projection's output.
    grad_clipping
        the step computes the gradient norm (one read of the gradients the rank owns) before the
        optimizer.
    loss_bytes
        (forward, backward) HBM bytes per logit (per token per vocabulary entry on this rank) of
        the cross-entropy after the output layer. (12, 12): a fused softmax + loss over fp32
        logits. Megatron's vocab-parallel cross entropy (Megatron-LM 2021 and Megatron-Core
        without --cross-entropy-loss-fusion) runs it as separate passes over fp32 logits: the
        fp32 cast (read 2, write 4), max (read 4), subtract the max (read 4, write 4), exp in
        place (4 + 4), sum (4), divide in place to keep the softmax (4 + 4) = 38 forward; the
        backward multiplies the saved softmax by the loss gradient in place (4 + 4) and casts
        it back to bf16 (4 + 2) = 14.
    grad_buffer
        where gradient reduction keeps its buckets (memory.py, item grad_buckets): "contiguous"
        (Megatron: the gradients live in one buffer allocated at start and are reduced in place,
        so they exist all step), "bucket-copies" (PyTorch DDP's default: flat bucket tensors beside
        every .grad, created in backward), "in-flight" (DeepSpeed: two buckets in flight)
    eager_autograd
        True: every op is dispatched and recorded by autograd on the same thread that computes
        it (torch eager on CPU), so each op's framework cost (the processor's autograd_op_s,
        forward and backward) adds to the step. False: the per-kernel cost is kernel_overhead_s
        (on a GPU the host's dispatch runs ahead of the device and only the launch shows).
    """

    name: str
    assumes: str
    tp_backward_overlap: bool = True
    zero3_reduce_scatter_overlap: bool = True
    tp_forward_overlap: bool = False
    fused_grad_accumulation: bool = True
    attention: str = "flash2"
    fused_norm_residual: bool = True
    fused_bias_activation: bool = True
    grad_clipping: bool = True
    loss_bytes: tuple[float, float] = (12.0, 12.0)
    eager_autograd: bool = False
    grad_buffer: str = "contiguous"


# Megatron's unfused vocab-parallel cross entropy, bytes per logit (see Execution.loss_bytes)
MEGATRON_LOSS_BYTES = (38.0, 14.0)


def _megatron_2021() -> Execution:
    return Execution(
        "megatron-2021",
        "Megatron-LM of 2021-2022 (SC21, BLOOM's Megatron-DeepSpeed): unfused "
        "attention (batched QK^T/AV GEMMs, fused scale-mask-softmax, dropout), fused bias-GeLU and "
        "bias-dropout-add, 1F1B/interleaved pipeline, fused gradient accumulation, TP backward "
        "all-reduce overlapped, gradient clipping, unfused vocab-parallel cross entropy over fp32 logits",
        attention="unfused",
        loss_bytes=MEGATRON_LOSS_BYTES,
    )


EXECUTIONS = {
    "megatron-core": Execution(
        "megatron-core",
        "Megatron-Core with Transformer Engine (2023-): FlashAttention-2 "
        "(flash3 is not assumed), TE fused LayerNorm/RMSNorm + bias-dropout-add, fused "
        "SwiGLU/bias-GeLU, TP backward collectives overlapped with the weight-gradient "
        "GEMMs and forward TP collectives overlapped with the GEMMs they feed (TE TP communication overlap), fused "
        "gradient accumulation, distributed optimizer, gradient clipping, vocab-parallel cross entropy "
        "over fp32 logits (--cross-entropy-loss-fusion not assumed)",
        tp_forward_overlap=True,
        loss_bytes=MEGATRON_LOSS_BYTES,
    ),
    "megatron-2021": _megatron_2021(),
    "deepspeed": Execution(
        "deepspeed",
        "DeepSpeed ZeRO (Megatron-DeepSpeed models): FlashAttention-2, unfused "
        "dropout/residual/norm, fused bias-GeLU, ZeRO-3 reduce-scatters on their own stream, "
        "gradients accumulated by autograd (unfused), gradient clipping",
        fused_norm_residual=False,
        fused_grad_accumulation=False,
        grad_buffer="in-flight",
    ),
    "torch-fsdp": Execution(
        "torch-fsdp",
        "PyTorch FSDP/FSDP2 on GPU (MosaicML LLM Foundry, torchtitan): SDPA "
        "flash attention (FlashAttention-2 kernels), eager elementwise kernels (dropout, "
        "residual, norm each a kernel; bias in the GEMM epilogue), TP backward collectives "
        "after the GEMM, ZeRO-3 reduce-scatters on their own stream, gradients accumulated "
        "by autograd, gradient clipping",
        tp_backward_overlap=False,
        fused_norm_residual=False,
        fused_grad_accumulation=False,
        grad_buffer="bucket-copies",
    ),
    "torch-eager": Execution(
        "torch-eager",
        "torch eager on CPU/gloo (DTensor TP, FSDP2; commbench's validation "
        "GPT): TP backward all-reduces and ZeRO-3 reduce-scatters block, gradients "
        "accumulate unfused, SDPA attention, eager elementwise kernels, each op's "
        "autograd cost on the computing thread, no clipping",
        tp_backward_overlap=False,
        zero3_reduce_scatter_overlap=False,
        fused_grad_accumulation=False,
        attention="sdpa",
        fused_norm_residual=False,
        grad_clipping=False,
        eager_autograd=True,
        grad_buffer="bucket-copies",
    ),
}
# `plan --execution megatron` predates the presets above and meant Megatron with flash attention and
# overlapped collectives: it stays, as another name for megatron-core
EXECUTIONS["megatron"] = EXECUTIONS["megatron-core"]


DISPATCHERS = ("alltoall", "allgather", "flex")
DISPATCH_DTYPES = {"bf16": 2.0, "fp8": 1.0 + 4.0 / 128}  # fp8: one byte per element + an fp32 scale per 128


# The host's exposed work per MoE layer forward without a full-iteration CUDA graph (MoEExecution):
# FITTED on the calibration half of bench/RESULTS-moe.md only (bench/fit_moe_host.py lists the rows
# and the figures), the cause from public sources: Megatron-Core's MoE guide names the CPU-overhead
# bottleneck and CUDA graphs as its cure, and Megatron-Bridge's recipes switched the MXFP8 MoE runs on
# GB200/GB300 to full-iteration graphs in 26.06, where the published steps fall to the model's GPU time.
MOE_HOST_LAYER_S = 0.125e-3
MOE_HOST_EXPERT_S = 42.5e-6


@dataclass(frozen=True)
class MoEExecution:
    """How the MoE layers run: execution choices of Megatron-Core's MoE stack, one per job.

    dispatcher
        "alltoall" (--moe-token-dispatcher-type alltoall): each rank sends its k routed copies of
        every token over the EP group, then all-gathers them over the expert-TP group (combine:
        reduce-scatter, then all-to-all back). "allgather": every rank gathers all tokens of its
        ETP x EP group and reduce-scatters the outputs (no per-expert traffic: its bytes do not grow
        with top-k). "flex" (DeepEP): one fused kernel over the ETP x EP group that sends a token
        once to each other NVLink domain holding one of its experts (RDMA) and fans it out to
        the experts inside the domain over NVLink.
    dispatch_dtype
        the dispatch's element type: "bf16", or "fp8" (1 byte + one fp32 scale per 128 elements),
        as DeepSeek-V3 dispatches (arXiv:2412.19437 sec. 3.3: activations quantised to FP8 before
        dispatch, combine kept in BF16). The combine always moves the activation dtype.
    shared_expert_overlap
        --moe-shared-expert-overlap: the shared experts run on another stream while the routed
        tokens are dispatched and combined, hiding that much of the EP time.
    a2a_overlap
        --overlap-moe-expert-parallel-comm (1F1B A2A overlap): the forward of one micro-batch and
        the backward of another are merged, so one's EP all-to-alls run behind the other's
        compute; needs two micro-batches in flight (m > 1).
    capacity_factor, pad_to_capacity
        --moe-expert-capacity-factor (None: dropless; else the model preset's) and
        --moe-pad-expert-input-to-capacity (every expert computes its full capacity).
    cuda_graph
        --cuda-graph-impl full_iteration: the whole step is replayed from one CUDA graph (its MoE
        layers made static for it), so the host neither launches their kernels nor waits on them.
        False: Megatron-Core's dropless dispatchers copy the tokens-per-expert counts to the host
        every MoE layer (the grouped GEMM's split sizes live there), so the GPU cannot run ahead of
        the host and the layer's host work shows on the step: host_layer_s per MoE layer plus
        host_expert_s per local expert (the grouped GEMM launches one GEMM, and under a quantised
        recipe its casts, per expert), per forward, the backward twice that like its kernels.
    """

    dispatcher: str = "alltoall"
    dispatch_dtype: str = "bf16"
    shared_expert_overlap: bool = False
    a2a_overlap: bool = False
    capacity_factor: float | None = None
    pad_to_capacity: bool = False
    cuda_graph: bool = False
    host_layer_s: float = MOE_HOST_LAYER_S
    host_expert_s: float = MOE_HOST_EXPERT_S


LORA_TARGETS = ("qkv", "o", "mlp")
LORA_BASES = ("bf16", "quantised")


@dataclass(frozen=True)
class LoRA:
    """LoRA fine-tuning (Hu et al. 2021): the base weights are frozen and each targeted projection
    k -> n gains a trained pair A (k -> rank) and B (rank -> n). Frozen weights compute only input
    gradients in backward and keep no gradient, master copy or Adam state; only the adapters'
    gradients are reduced over data parallelism. MLPerf's Llama 2 70B LoRA: rank 16 on qkv and o."""

    rank: int = 16
    targets: tuple[str, ...] = ("qkv", "o")
    # dropout on each adapter's input (NeMo's dropout_position "pre"; MLPerf's train.py: 0.1): the adapter
    # keeps the dropped-out input for its A's weight gradient and the dropout's 1-byte mask
    dropout: float = 0.1
    # how the frozen base weights are held: "bf16" (a 16-bit copy, plus Transformer Engine's cached
    # quantised copies under a quantised recipe) or "quantised" (created in the recipe's format only:
    # TE's fp8_model_init, NeMo's fp8_params; MLPerf v5.1's NVFP4 runs replace them in place)
    base: str = "bf16"
    # a quantised base also holds a column-wise copy of each weight for the input-gradient GEMM: the
    # transposed FP8 copy Hopper's TN-only FP8 GEMMs need, kept between steps unless the transpose cache
    # is off (Megatron/NeMo's disable_parameter_transpose_cache); block-scaled formats (NVFP4, MXFP8)
    # quantise both ways and hold both. spec.build_planner decides it from the recipe and the GPU
    columnwise_copy: bool = True

    def __post_init__(self) -> None:
        if self.base not in LORA_BASES:
            raise ValueError(f"LoRA base is one of {', '.join(LORA_BASES)}, not {self.base!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoRA dropout is in [0, 1), not {self.dropout!r}")

    def projections(self, model: ModelSpec) -> list[tuple[float, float]]:
        """(k, n) of every adapted projection of one layer, unsplit."""
        h = model.hidden
        shapes: dict[str, list[tuple[float, float]]] = {
            "qkv": [(h, (model.attention_projection_params - model.attention_out_dim * h) / h)],
            "o": [(float(model.attention_out_dim), float(h))],
            "mlp": [(float(h), float(model.ffn_hidden))] * (model.mlp_matrices - 1)
            + [(float(model.ffn_hidden), float(h))],
        }
        return [shape for target in self.targets for shape in shapes[target]]

    def params(self, model: ModelSpec) -> int:
        """Trained adapter parameters of the whole model."""
        return model.layers * round(sum(self.rank * (k + n) for k, n in self.projections(model)))


@dataclass(frozen=True)
class TrainingJob:
    model: ModelSpec
    seq_len: int
    global_batch: int  # sequences per optimizer step
    precision: Precision = field(default_factory=lambda: PRECISIONS["16"])
    flash_attention: bool = True  # attention scores are never stored (no s^2 activation term)
    # PyTorch DDP's default bucket_cap_mb=25; buckets let the reduction start during backward
    bucket_bytes: float = 25 * 2**20
    # the job runs on CUDA devices: the ledger adds what lives there beside the tensors (CUDA
    # context, NCCL buffers, allocator reserve, GEMM workspaces); False for CPU runs
    on_gpu: bool = True
    # the model applies dropout (Megatron's GPT does): its 1-byte masks are kept for backward
    dropout: bool = True
    # bytes per activation element; 0 (or None) takes the precision's (2 for bf16 training, 4 for fp32)
    activation_bytes: int = 0
    # MoE routing: tokens per expert relative to a perfectly even split (capacity factor when
    # tokens are padded to capacity; the measured max/mean load for dropless routing)
    expert_load: float = 1.0
    # the router's skew over experts (commbench.modeling.routing): EP's all-to-alls are paced by the
    # rank receiving most, so they are priced at its bytes
    routing: str = "uniform"
    execution: Execution = field(default_factory=lambda: EXECUTIONS["megatron-core"])
    # the number format of the linear layers' GEMMs (a Transformer Engine recipe; bf16: none)
    compute: ComputeRecipe = field(default_factory=lambda: RECIPES["bf16"])
    # the weights are kept in the recipe's format and ZeRO/FSDP gather them so (Megatron's
    # --fp8-param-gather): the quantised copy replaces the BF16 one and the gathers move its bytes
    quantised_param_gather: bool = False
    moe_execution: MoEExecution = field(default_factory=MoEExecution)
    # None: every weight is trained; else LoRA fine-tuning of a frozen base
    lora: LoRA | None = None
    # Megatron's activation_func_fp8_input_store: the MLP activation function's input (the gate/up
    # GEMM's output) is kept for backward in FP8, 1 byte per element (a quantised recipe only)
    fp8_activation_input: bool = False

    @property
    def capacity_factor(self) -> float | None:
        """The MoE capacity factor: the job's, else the model's (None: dropless)."""
        if self.moe_execution.capacity_factor is not None:
            return self.moe_execution.capacity_factor
        return self.model.moe.capacity_factor if self.model.moe else None

    def __post_init__(self) -> None:
        if not self.activation_bytes:
            object.__setattr__(self, "activation_bytes", self.precision.activation_bytes)

    @property
    def gathered_param_bytes(self) -> float:
        """Bytes per parameter the ZeRO-1/2 weight gather and ZeRO-3/FSDP gathers move."""
        if self.quantised_param_gather and self.compute.quantised:
            return self.compute.element_bytes
        return float(self.precision.param_bytes)

    @property
    def trained_share(self) -> float:
        """Trained parameters per base parameter: 1 for full training, adapters / base under LoRA.
        Gradients, optimizer state, their traffic and the DP reduction scale by it (the adapters are
        taken as spread over ranks like the base weights they sit beside)."""
        return self.lora.params(self.model) / self.model.total_params if self.lora else 1.0

    @property
    def weight_bytes_per_param(self) -> float:
        """Bytes of kept weights per base parameter: the base's, plus the adapters' under LoRA."""
        extra = self.trained_share * self.precision.param_bytes if self.lora else 0.0
        return self.gathered_param_bytes + extra

    def flops_per_token(self) -> float:
        """Training FLOPs per token: the model's 6 per matmul parameter, or under LoRA 4 per frozen
        one (forward and input gradient, no weight gradient) plus 6 per adapter parameter."""
        full = self.model.model_flops_per_token(self.seq_len)
        if not self.lora:
            return full
        m = self.model
        matmul = m.active_params - m.embedding_params + m.embedding_params * m.tied_embeddings
        return full - 2.0 * matmul + 6.0 * self.lora.params(m)

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len


# A job description's framework (and version) -> the execution preset that prices it, first match
# wins; the same table as `plan --help`'s "Which execution preset fits which framework and year".
# NeMo moved its GPT models onto Megatron-Core with the 23.x containers (NeMo 1.20+); Megatron-LM's
# own releases carry Megatron-Core from 2023 (core_r0.x); before that both ran the 2021-22 code.
_FRAMEWORK_RULES: tuple[tuple[str, str, str], ...] = (
    (r"torchtitan|llm[- ]?foundry|mosaic|composer|fsdp", "torch-fsdp", "a PyTorch FSDP stack"),
    (r"megatron[- ]?deepspeed|bloom", "megatron-2021", "Megatron-DeepSpeed runs the 2021-22 Megatron kernels"),
    (r"deepspeed", "deepspeed", "DeepSpeed ZeRO"),
    (r"megatron[- ]?bridge|megatron[- ]?core|mcore|dgxc|dgx cloud", "megatron-core", "Megatron-Core"),
    (r"nemo\D*(2[3-9]|[3-9]\d)\.\d", "megatron-core", "NeMo 23.x on is Megatron-Core"),
    (
        r"nemo\D*(1\.(1\d|20)|2[0-2])\D",
        "megatron-2021",
        "NeMo before its 23.x containers ran the 2021-22 Megatron code",
    ),
    (r"megatron(-lm)?\D*(20(19|20|21|22)|v?[1-3]\.\d)", "megatron-2021", "Megatron-LM up to 2022"),
    (r"megatron(-lm)?\D*(20(2[3-9])|core_r|v?0\.\d)", "megatron-core", "Megatron-LM 2023 on carries Megatron-Core"),
)


def execution_for_framework(framework: str) -> tuple[str, str]:
    """(execution preset, why) for a framework as a job description names it ("NeMo 25.11",
    "Megatron-LM 2021", "torchtitan"); a UsageError where the table cannot tell."""
    text = f" {framework.strip().lower()} "
    for pattern, execution, why in _FRAMEWORK_RULES:
        if re.search(pattern, text):
            return execution, why
    raise UsageError(
        f"cannot tell the execution preset from --framework {framework!r}: name one with --execution "
        f"({', '.join(n for n, e in EXECUTIONS.items() if n == e.name)})"
    )
