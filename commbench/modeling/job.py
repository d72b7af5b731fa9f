"""What is being trained and how: model, batch, sequence, precision, how the framework executes the
step (which collectives it overlaps with compute) and the runtime knobs the costs use."""

from __future__ import annotations

from dataclasses import dataclass, field

from commbench.modeling.models import ModelSpec


@dataclass(frozen=True)
class Precision:
    """Bytes kept per parameter. Adam keeps m and v (4 B each in fp32); mixed precision adds an fp32 master copy."""

    name: str
    param_bytes: int = 2  # bf16 working weights
    grad_bytes: int = 2  # bf16 gradients (also the size the data-parallel reduction moves)
    master_bytes: int = 4  # fp32 master weights, 0 when the optimizer updates bf16 weights directly
    moment_bytes: int = 8  # Adam m + v in fp32
    activation_bytes: int = 2  # bf16 activations and the messages TP/PP/CP/EP move

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
    "fp32": Precision("fp32 + Adam: 4 weights + 4 grads + 8 optimizer (m 4, v 4), fp32 activations",
                      param_bytes=4, grad_bytes=4, master_bytes=0, moment_bytes=8, activation_bytes=4),
}


@dataclass(frozen=True)
class Execution:
    """Which collectives the training framework overlaps with compute: a property of the framework
    and device, not of the layout, so one setting applies to every layout alike.

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
    fused_grad_accumulation
        True: each micro-batch's weight-gradient GEMM accumulates into the gradient buffer
        (Megatron's gradient-accumulation fusion), so micro-batches after the first cost nothing
        extra. False: autograd adds every micro-batch's new gradient into .grad with a separate
        kernel (torch eager): m - 1 passes over the gradients the rank keeps.
    """

    name: str
    tp_backward_overlap: bool = True
    zero3_reduce_scatter_overlap: bool = True
    fused_grad_accumulation: bool = True


EXECUTIONS = {
    "megatron": Execution("Megatron-style: TP backward collectives and ZeRO-3 reduce-scatters overlap compute"),
    "torch-eager": Execution("torch eager (DTensor TP, FSDP2 on CPU/gloo): TP backward all-reduces and ZeRO-3 "
                             "reduce-scatters block, gradients accumulate unfused", tp_backward_overlap=False,
                             zero3_reduce_scatter_overlap=False, fused_grad_accumulation=False),
}


@dataclass(frozen=True)
class TrainingJob:
    model: ModelSpec
    seq_len: int
    global_batch: int  # sequences per optimizer step
    precision: Precision = field(default_factory=lambda: PRECISIONS["16"])
    flash_attention: bool = True  # attention scores are never stored (no s^2 activation term)
    # PyTorch DDP's default bucket_cap_mb=25; buckets let the reduction start during backward
    bucket_bytes: float = 25 * 2**20
    # CUDA context, cuBLAS workspaces, NCCL buffers and allocator slack: a documented default
    reserved_bytes: float = 2e9
    # bytes per activation element; None takes the precision's (2 for bf16 training, 4 for fp32)
    activation_bytes: int | None = None
    # MoE routing: tokens per expert relative to a perfectly even split (capacity factor when
    # tokens are padded to capacity; the measured max/mean load for dropless routing)
    expert_load: float = 1.0
    execution: Execution = field(default_factory=lambda: EXECUTIONS["megatron"])

    def __post_init__(self):
        if self.activation_bytes is None:
            object.__setattr__(self, "activation_bytes", self.precision.activation_bytes)

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len
