"""What is being trained and how: model, batch, sequence, precision and the runtime knobs the costs use."""

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
    activation_bytes: int = 2  # bf16 activations and the messages TP/PP/CP/EP move
    # MoE routing: tokens per expert relative to a perfectly even split (capacity factor when
    # tokens are padded to capacity; the measured max/mean load for dropless routing)
    expert_load: float = 1.0

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len
