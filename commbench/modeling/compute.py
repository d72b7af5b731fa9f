"""FLOPs and compute time.

Whole-run budget (Kaplan et al. 2020): C = 6 * P * D training FLOPs for P parameters and D
tokens (2 per parameter per token forward, 4 backward). Time on N GPUs at peak F and model FLOPs
utilisation u: C / (N * F * u), the ideal scaling the seeds quote.

Per-layer time for the step model (step.py) prices every GEMM of a layer separately with the
processor's efficiency curve (a small GEMM reaches a smaller fraction of peak than a big one),
attention at the processor's flash-attention efficiency, and elementwise work (norms, residual
adds, activation functions, rotary embeddings) as HBM traffic. Per micro-batch of b sequences,
n = b*s/cp tokens per rank, q/kv the attention widths, f the MLP width, t tensor parallel:
  forward GEMMs   QKV 2n*h*(q+2kv)/t, output 2n*q*h/t, MLP 2 or 3 GEMMs of 2n*h*f/t each; with MLA
                  (DeepSeek-V2/V3) the up-projections from the latents are split over t and the
                  down-projections into them are computed whole on every TP rank (Megatron keeps them whole)
  attention core  per sequence 2*heads*(d_qk + d_v) FLOPs per causal (query, key) pair / (cp*t):
                  s^2/2 pairs (QK^T and AV at half density: 2*b*(s/cp)*s*q/t with plain attention), or
                  s*w - w^2/2 on layers with a sliding window w
  backward        2x the GEMMs (input and weight gradients), 2.5x attention (FlashAttention-2)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commbench.modeling.hardware import Processor
from commbench.modeling.job import TrainingJob
from commbench.modeling.layout import LayoutBatch

SECONDS_PER_YEAR = 365.25 * 86400
BACKWARD_GEMM_FACTOR = 2.0
BACKWARD_ATTENTION_FACTOR = 2.5
BACKWARD_ELEMENTWISE_FACTOR = 2.0  # norm, activation and residual gradients read and write about twice the forward's bytes


def training_flops(params: float, tokens: float) -> float:
    """C = 6PD."""
    return 6.0 * params * tokens


def training_seconds(flops: float, gpus: int, peak_flops: float, mfu: float) -> float:
    return flops / (gpus * peak_flops * mfu)


@dataclass
class LayerCompute:
    """Seconds per layer per micro-batch on one rank (averaged over dense and MoE layers)."""

    fwd_gemm: np.ndarray
    fwd_attention: np.ndarray
    fwd_elementwise: np.ndarray
    head_fwd: np.ndarray  # output projection + loss, last stage only, per micro-batch

    @property
    def forward(self) -> np.ndarray:
        return self.fwd_gemm + self.fwd_attention + self.fwd_elementwise

    @property
    def bwd_gemm(self) -> np.ndarray:
        return BACKWARD_GEMM_FACTOR * self.fwd_gemm

    @property
    def bwd_attention(self) -> np.ndarray:
        return BACKWARD_ATTENTION_FACTOR * self.fwd_attention

    @property
    def backward(self) -> np.ndarray:
        return self.bwd_gemm + self.bwd_attention + BACKWARD_ELEMENTWISE_FACTOR * self.fwd_elementwise

    @property
    def head_bwd(self) -> np.ndarray:
        return BACKWARD_GEMM_FACTOR * self.head_fwd

    def recompute(self, mode: np.ndarray) -> np.ndarray:
        """Extra forward work done in backward: attention core (selective) or the whole layer (full)."""
        return np.select([mode == 1, mode == 2], [self.fwd_attention, self.forward], 0.0)


def _gemms(proc: Processor, count: float, flops) -> np.ndarray:
    return count * proc.gemm_time(np.asarray(flops, dtype=float))


def elementwise_bytes(activation_bytes, hidden, qkv_width, mlp_width, tokens, tp, replicated=1.0):
    """Forward memory traffic of one layer's elementwise work: norms and residual adds (read 2,
    write 1) on the hidden state, rotary on q and k, the activation function over the MLP width
    (mlp_width already divided by tp). The backward moves twice this."""
    return activation_bytes * tokens * (14 * hidden * replicated + 2 * qkv_width / tp + mlp_width)


def _attention_gemms(model, proc: Processor, n, t) -> np.ndarray:
    """Input projections (split over TP, plus MLA's whole down-projections) and the output projection."""
    output = model.attention_out_dim * model.hidden
    replicated = model.tp_replicated_params_per_layer
    split_inputs = model.attention_projection_params - output - replicated
    gemms = _gemms(proc, 1, 2 * n * split_inputs / t) + _gemms(proc, 1, 2 * n * output / t)
    return gemms + _gemms(proc, 1, 2 * n * replicated) if replicated else gemms


def layer_compute(job: TrainingJob, batch: LayoutBatch, proc: Processor) -> LayerCompute:
    model = job.model
    h, t = model.hidden, batch.tp
    seq_local = job.seq_len / batch.cp
    n = batch.mbs * seq_local  # tokens per rank per micro-batch
    replicated = np.where(batch.seq_parallel, 1.0 / t, 1.0)

    attention_gemms = _attention_gemms(model, proc, n, t)
    dense_mlp = _gemms(proc, model.mlp_matrices, 2 * n * h * model.ffn_hidden / t)
    mlp_elementwise = (model.mlp_matrices * model.ffn_hidden) / t
    if model.moe:
        moe = model.moe
        routed_tokens = n * moe.top_k * job.expert_load
        local_experts = moe.num_experts / batch.ep
        # each local expert sees routed_tokens * ep / experts tokens gathered from the ep group
        per_expert_flops = 2 * routed_tokens * batch.ep / moe.num_experts * h * moe.expert_ffn_hidden / t
        moe_mlp = (local_experts * _gemms(proc, model.mlp_matrices, per_expert_flops)
                   + _gemms(proc, model.mlp_matrices, 2 * n * h * moe.shared_ffn_hidden / t)
                   + _gemms(proc, 1, 2 * n * h * moe.num_experts))
        mlp = (model.dense_layers * dense_mlp + model.moe_layers * moe_mlp) / model.layers
        moe_elementwise = (model.mlp_matrices * (moe.top_k * moe.expert_ffn_hidden + moe.shared_ffn_hidden) + 4 * moe.top_k * h) / t
        mlp_elementwise = (model.dense_layers * mlp_elementwise + model.moe_layers * moe_elementwise) / model.layers
    else:
        mlp = dense_mlp
    attention_flops = batch.mbs * model.score_flops_per_pair * model.attention_pairs(job.seq_len) / (batch.cp * t)
    attention = attention_flops / (proc.peak_flops * proc.attention_efficiency)
    head = (_gemms(proc, 1, 2 * n * h * model.vocab / t)
            + n * model.vocab / t * 12 / proc.elementwise_bandwidth)  # softmax + loss over fp32 logits
    return LayerCompute(
        fwd_gemm=attention_gemms + mlp,
        fwd_attention=np.broadcast_to(attention, n.shape).astype(float),
        fwd_elementwise=elementwise_bytes(job.activation_bytes, h, model.q_dim + model.kv_dim, mlp_elementwise,
                                          n, t, replicated) / proc.elementwise_bandwidth,
        head_fwd=head,
    )
