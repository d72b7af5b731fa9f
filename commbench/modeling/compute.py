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
With a quantised compute precision (job.compute, commbench.modeling.recipes) the linear layers'
GEMMs run at the processor's peak in the recipe's format, their casts, scales and transposed copies
are priced as HBM traffic (quantise_seconds), and the attention core, the output layer, the router
and the recipe's BF16 layers stay at the BF16 rate.
  MoE layers      commbench.modeling.moe: router, permutes, the grouped GEMM at its per-expert shape on
                  the busiest rank, shared experts; the layer's figures average dense and MoE layers
  MTP             each multi-token-prediction module (DeepSeek-V3) adds, on the last stage, a 2h -> h
                  projection, one (average) layer and another output head + loss, per micro-batch
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from commbench.modeling.hardware import Processor
from commbench.modeling.job import Execution, TrainingJob
from commbench.modeling.kernels import (
    FLASH_BACKWARD_FLOPS,
    UNFUSED_SCORE_BYTES_BACKWARD,
    UNFUSED_SCORE_BYTES_FORWARD,
    Numbers,
    Pair,
    gemm_forward_backward,
    gemm_seconds,
)
from commbench.modeling.layout import FULL_RECOMPUTE, SELECTIVE_RECOMPUTE, LayoutBatch
from commbench.modeling.models import ModelSpec
from commbench.modeling.moe import MoECompute, moe_compute
from commbench.modeling.recipes import cast_bytes_per_element

SECONDS_PER_YEAR = 365.25 * 86400
BACKWARD_GEMM_FACTOR = 2.0  # input and weight gradients, each the forward's FLOPs
BACKWARD_ATTENTION_FACTOR = FLASH_BACKWARD_FLOPS
BACKWARD_ELEMENTWISE_FACTOR = (
    2.0  # norm, activation and residual gradients read and write about twice the forward's bytes
)


def training_flops(params: float, tokens: float) -> float:
    """C = 6PD."""
    return 6.0 * params * tokens


def training_seconds(flops: float, gpus: int, peak_flops: float, mfu: float) -> float:
    return flops / (gpus * peak_flops * mfu)


ATTENTION_IMPLEMENTATIONS = ("unfused", "flash2", "flash3", "cudnn", "sdpa")


@dataclass
class LayerCompute:
    """Seconds per layer per micro-batch on one rank (averaged over dense and MoE layers)."""

    fwd_gemm: np.ndarray
    bwd_gemm: np.ndarray
    fwd_attention: np.ndarray
    bwd_attention: np.ndarray
    fwd_elementwise: np.ndarray
    fwd_kernels: np.ndarray  # per-kernel launch and framework cost of the forward's kernels
    head_fwd: np.ndarray  # output projection + loss, last stage only, per micro-batch
    head_bwd: np.ndarray
    # the backward's framework cost where it is measured apart (eager autograd ops); None: the
    # backward's kernels cost BACKWARD_ELEMENTWISE_FACTOR times the forward's
    bwd_kernels: np.ndarray | None = None
    # a quantised recipe's casts, amax reads, transposed copies and Hadamard transforms (0 in bf16)
    fwd_quantise: np.ndarray | float = 0.0
    bwd_quantise: np.ndarray | float = 0.0
    # shares of the forward that Megatron's selective --recompute-modules repeat (recompute_shares)
    shares: dict[str, float | np.ndarray] = field(default_factory=dict)
    moe: MoECompute | None = None  # one MoE layer's parts (router, permute, grouped GEMM, shared experts)

    @property
    def forward(self) -> np.ndarray:
        seconds: np.ndarray = (
            self.fwd_gemm + self.fwd_attention + self.fwd_elementwise + self.fwd_kernels + self.fwd_quantise
        )
        return seconds

    @property
    def backward(self) -> np.ndarray:
        seconds: np.ndarray
        if self.bwd_kernels is not None:
            seconds = (
                self.bwd_gemm
                + self.bwd_attention
                + BACKWARD_ELEMENTWISE_FACTOR * self.fwd_elementwise
                + self.bwd_kernels
                + self.bwd_quantise
            )
        else:
            seconds = (
                self.bwd_gemm
                + self.bwd_attention
                + self.bwd_quantise
                + BACKWARD_ELEMENTWISE_FACTOR * (self.fwd_elementwise + self.fwd_kernels)
            )
        return seconds

    def recompute(self, batch: LayoutBatch, chunk_layers: np.ndarray) -> np.ndarray:
        """Extra forward work done in backward per layer: the modules selective recompute names
        (core_attn: the attention core; mlp: the MLP's GEMMs; layernorm: the norms' passes; moe_act:
        the experts' activation function; mla_up_proj: MLA's up-projections), or the whole layer
        (full; Megatron's block method: recompute_layers of each chunk's chunk_layers)."""
        mask = np.where(batch.recompute == SELECTIVE_RECOMPUTE, batch.recompute_mask, 0)
        share = self.shares
        parts = (
            self.fwd_attention,
            self.fwd_gemm * share.get("mlp", 0.0),
            self.fwd_elementwise * share.get("layernorm", 0.0),
            self.fwd_elementwise * share.get("moe_act", 0.0),
            self.fwd_gemm * share.get("mla_up_proj", 0.0),
        )
        selective = sum((mask >> bit & 1) * part for bit, part in enumerate(parts))
        return np.select(
            [batch.recompute == SELECTIVE_RECOMPUTE, batch.recompute == FULL_RECOMPUTE],
            [selective, self.forward * full_recompute_share(batch, chunk_layers)],
            0.0,
        )


def full_recompute_share(batch: LayoutBatch, chunk_layers: np.ndarray) -> np.ndarray:
    """Share of a chunk's layers full recompute repeats: all (uniform), or Megatron's block method's
    recompute_layers of them; 0 without full recompute."""
    block = np.where(
        batch.recompute_layers > 0, np.minimum(batch.recompute_layers, chunk_layers) / np.maximum(chunk_layers, 1), 1.0
    )
    return np.where(batch.recompute == FULL_RECOMPUTE, block, 0.0)


def recompute_shares(
    job: TrainingJob, batch: LayoutBatch, hidden_passes: float, mlp_width: Numbers
) -> dict[str, float | np.ndarray]:
    """Shares of a layer's forward GEMM time (by FLOPs, i.e. by the weights a token multiplies) and
    elementwise time (by bytes, as elementwise_bytes counts them) that each recompute module repeats."""
    model, t = job.model, batch.tp
    h = model.hidden
    replicated = np.where(batch.seq_parallel, 1.0 / t, 1.0)
    mlp: float = model.mlp_params(model.ffn_hidden) * model.dense_layers
    if model.moe:
        moe = model.moe
        mlp = mlp + model.moe_layers * (
            moe.top_k * job.expert_load * model.mlp_params(moe.expert_ffn_hidden)
            + model.mlp_params(moe.shared_ffn_hidden)
        )
    mlp = mlp / model.layers
    gemm = model.attention_projection_params + mlp
    up = 0.0
    if model.mla:
        mla = model.mla
        up = mla.q_lora_rank * model.q_dim + mla.kv_lora_rank * model.heads * (mla.qk_nope_head_dim + mla.v_head_dim)
    passes = hidden_passes * h * replicated + 2 * (model.q_dim + model.kv_dim) / t + mlp_width
    return {
        "mlp": mlp / gemm,
        "mla_up_proj": up / gemm,
        "layernorm": 4 * h * replicated / passes,
        "moe_act": mlp_width / passes * model.moe_layers / model.layers,
    }


def elementwise_bytes(
    activation_bytes: float,
    hidden: int,
    qkv_width: int,
    mlp_width: Numbers,
    tokens: Numbers,
    tp: Numbers,
    replicated: Numbers = 1.0,
    hidden_passes: float = 14.0,
) -> Numbers:
    """Forward memory traffic of one layer's elementwise work: norms, dropout and residual adds
    (`hidden_passes` reads and writes of the hidden state: 14 when each is its own kernel, 10 with
    dropout and residual add fused beside the norm), rotary on q and k, the activation function over
    the MLP width (mlp_width already divided by tp). The backward moves twice this."""
    traffic: Numbers = (
        activation_bytes * tokens * (hidden_passes * hidden * replicated + 2 * qkv_width / tp + mlp_width)
    )
    return traffic


def _linear(proc: Processor, tokens: Numbers, n: Numbers, k: Numbers, count: float = 1.0, frozen: bool = False) -> Pair:
    """(forward, backward) seconds of `count` linear layers of tokens x k -> tokens x n (frozen: no weight gradient)."""
    forward, backward = gemm_forward_backward(proc, tokens, n, k, frozen)
    return count * forward, count * backward


def _attention_projections(model: ModelSpec, proc: Processor, n: Numbers, t: np.ndarray, frozen: bool = False) -> Pair:
    """Input projections (split over TP, plus MLA's whole down-projections) and the output projection."""
    h = model.hidden
    output = model.attention_out_dim * h
    replicated = model.tp_replicated_params_per_layer
    split_inputs = model.attention_projection_params - output - replicated
    parts = [
        _linear(proc, n, split_inputs / h / t, h, frozen=frozen),
        _linear(proc, n, h, output / h / t, frozen=frozen),
    ]
    if replicated:
        parts.append(_linear(proc, n, replicated / h, h, frozen=frozen))
    forward, backward = parts[0]
    for f, b in parts[1:]:
        forward, backward = forward + f, backward + b
    return forward, backward


# a layer's linear GEMMs: (forward, backward) seconds, the MLP's activation width per token (/tp),
# the MoE layers' other HBM traffic in seconds, and the MoE parts (None for a dense model)
LinearParts = tuple[np.ndarray, np.ndarray, Numbers, Numbers, MoECompute | None]


def _mlp(
    job: TrainingJob, batch: LayoutBatch, proc: Processor, n: Numbers, router_proc: Processor | None = None
) -> LinearParts:
    """(forward, backward) GEMM seconds, the activation width (per token, /tp), the MoE layers'
    other HBM traffic (router scores, permutes) in seconds, and the MoE parts (None for a dense
    model) of one layer's MLP, averaged over dense and MoE layers; the router runs on `router_proc`
    (BF16 under every recipe)."""
    model, t = job.model, batch.tp
    h, matrices = model.hidden, model.mlp_matrices
    up = matrices - 1  # GeLU: one up-projection; SwiGLU: gate and up
    dense = _mlp_block(proc, n, h, model.ffn_hidden / t, up, frozen=job.lora is not None)
    width = matrices * model.ffn_hidden / t
    if not model.moe:
        return (*dense, width, 0.0, None)
    parts = moe_compute(job, batch, proc, n, router_proc)
    moe_fwd, moe_bwd = parts.gemm
    # the activation function over every computed expert width, and over the shared experts'
    moe_width = parts.received_tokens * matrices * parts.expert_width / n + matrices * model.moe.shared_ffn_hidden / t
    dense_share, moe_share = model.dense_layers / model.layers, model.moe_layers / model.layers
    return (
        dense_share * dense[0] + moe_share * moe_fwd,
        dense_share * dense[1] + moe_share * moe_bwd,
        dense_share * width + moe_share * moe_width,
        moe_share * parts.traffic[0],
        parts,
    )


def _mlp_block(proc: Processor, tokens: Numbers, h: int, ffn_local: Numbers, up: int, frozen: bool = False) -> Pair:
    ups = _linear(proc, tokens, ffn_local, h, up, frozen=frozen)
    down = _linear(proc, tokens, h, ffn_local, frozen=frozen)
    return ups[0] + down[0], ups[1] + down[1]


def _attention_core(job: TrainingJob, batch: LayoutBatch, proc: Processor, n: Numbers) -> Pair:
    """(forward, backward) seconds of the attention core on one rank, by the execution's implementation."""
    model, t = job.model, batch.tp
    implementation = job.execution.attention
    if implementation == "unfused":
        return _unfused_attention(job, batch, proc)
    flops = batch.mbs * model.score_flops_per_pair * model.attention_pairs(job.seq_len) / (batch.cp * t)
    forward_rate, backward_rate = proc.attention_rate(implementation)
    forward = np.broadcast_to(flops / (proc.peak_flops * forward_rate), np.shape(n)).astype(float)
    return forward, FLASH_BACKWARD_FLOPS * forward * forward_rate / backward_rate


def _unfused_attention(job: TrainingJob, batch: LayoutBatch, proc: Processor) -> tuple[np.ndarray, np.ndarray]:
    """Megatron's 2021-2022 path: per head, QK^T (s x S x d_qk) and AV (s x d_v x S) as batched GEMMs
    over every pair, and the score elements' softmax + dropout traffic."""
    model = job.model
    queries, keys = job.seq_len / batch.cp, job.seq_len
    heads = batch.mbs * model.heads / batch.tp  # batched GEMMs: one matrix per (sequence, head)
    score_bytes = job.activation_bytes / 2  # the per-element figures are for 2-byte scores
    fwd = gemm_seconds(proc, queries, keys, model.qk_head_dim, heads) + gemm_seconds(
        proc, queries, model.v_head_dim, keys, heads
    )
    # backward: dQ = dS K, dK = dS^T Q (s x S x d_qk each); dV = P^T dO, dP = dO V^T (over d_v)
    bwd = (
        gemm_seconds(proc, queries, model.qk_head_dim, keys, heads)
        + gemm_seconds(proc, keys, model.qk_head_dim, queries, heads)
        + gemm_seconds(proc, keys, model.v_head_dim, queries, heads)
        + gemm_seconds(proc, queries, keys, model.v_head_dim, heads)
    )
    elements = heads * queries * keys
    fwd = fwd + elements * UNFUSED_SCORE_BYTES_FORWARD * score_bytes / proc.elementwise_bandwidth
    bwd = bwd + elements * UNFUSED_SCORE_BYTES_BACKWARD * score_bytes / proc.elementwise_bandwidth
    return np.broadcast_to(fwd, np.shape(batch.tp)).astype(float), np.broadcast_to(bwd, np.shape(batch.tp)).astype(
        float
    )


def kernels_per_layer(model: ModelSpec, execution: Execution) -> float:
    """Kernels one layer's forward launches per micro-batch (the backward launches about twice as
    many): its GEMMs, the attention core's, norms, dropout and residual adds, activation, rotary."""
    gemms = 2 + (1 if model.tp_replicated_params_per_layer else 0) + model.mlp_matrices
    attention = 1 if execution.attention != "unfused" else 6  # 2 batched GEMMs, softmax, dropout, 2 head permutes
    hidden = 4 if execution.fused_norm_residual else 8  # 2 norms + 2 bias-dropout-adds, or norm/dropout/add/bias apart
    activation = 1 + (0 if execution.fused_bias_activation else model.mlp_matrices - 1)
    return gemms + attention + hidden + activation + 1


def framework_costs(
    model: ModelSpec, execution: Execution, proc: Processor, n: Numbers
) -> tuple[np.ndarray, np.ndarray | None]:
    """(forward, backward or None) framework seconds of one layer per micro-batch: each kernel an
    eager autograd op at the processor's measured cost where the execution runs them so, else
    kernels times the per-kernel overhead (the backward then BACKWARD_ELEMENTWISE_FACTOR times it)."""
    kernels = kernels_per_layer(model, execution)
    if execution.eager_autograd and any(proc.autograd_op_s):
        forward, backward = proc.autograd_op_s
        return (
            np.broadcast_to(kernels * forward, np.shape(n)).astype(float),
            np.broadcast_to(kernels * backward, np.shape(n)).astype(float),
        )
    return np.broadcast_to(kernels * proc.kernel_overhead_s, np.shape(n)).astype(float), None


def _linear_layers(job: TrainingJob, batch: LayoutBatch, proc: Processor, n: Numbers) -> LinearParts:
    """(forward, backward) seconds of a layer's linear GEMMs, its MLP activation width, the MoE
    layers' other traffic and parts (see _mlp), in the job's compute precision: the recipe's share
    of BF16 layers at the BF16 rate, the rest quantised."""
    model, t = job.model, batch.tp
    quantised = proc.for_recipe(job.compute)
    frozen = job.lora is not None
    attention_fwd, attention_bwd = _attention_projections(model, quantised, n, t, frozen)
    mlp_fwd, mlp_bwd, mlp_width, moe_traffic, moe_parts = _mlp(job, batch, quantised, n, router_proc=proc)
    share = job.compute.bf16_layer_share if job.compute.quantised else 0.0
    if share:
        bf16_attention, bf16_mlp = _attention_projections(model, proc, n, t, frozen), _mlp(job, batch, proc, n)
        attention_fwd, attention_bwd = (
            (1 - share) * q + share * b for q, b in zip((attention_fwd, attention_bwd), bf16_attention)
        )
        mlp_fwd, mlp_bwd = ((1 - share) * q + share * b for q, b in zip((mlp_fwd, mlp_bwd), bf16_mlp[:2]))
    adapter_fwd, adapter_bwd = _adapters(job, proc, n, t)
    return (
        attention_fwd + mlp_fwd + adapter_fwd,
        attention_bwd + mlp_bwd + adapter_bwd,
        mlp_width,
        moe_traffic,
        moe_parts,
    )


def _adapters(job: TrainingJob, proc: Processor, n: Numbers, t: np.ndarray) -> tuple[Numbers, Numbers]:
    """(forward, backward) seconds of one layer's LoRA adapters, fully trained, in BF16: per adapted
    projection k -> n, A (k -> rank) on the input this rank holds and B (rank -> n) on its output
    share, the split side following the projection's TP split (column: n / tp, row: k / tp)."""
    if job.lora is None:
        return 0.0, 0.0
    rank, h = job.lora.rank, job.model.hidden
    forward: Numbers = 0.0
    backward: Numbers = 0.0
    for k, out in job.lora.projections(job.model):
        k_local, n_local = (k, out / t) if k == h else (k / t, out)
        for pair in (_linear(proc, n, rank, k_local), _linear(proc, n, n_local, rank)):
            forward, backward = forward + pair[0], backward + pair[1]
    return forward, backward


def quantised_operands(job: TrainingJob, batch: LayoutBatch, n: Numbers) -> tuple[Numbers, Numbers, Numbers]:
    """Elements of one layer's quantised GEMM operands on one rank per micro-batch, averaged over
    dense and MoE layers: (activations x, output gradients dy, weights). The inputs of the fused
    QKV and gate/up GEMMs are cast once; MLA's down-projections and the router stay in BF16."""
    model, t = job.model, batch.tp
    h, up = model.hidden, model.mlp_matrices - 1
    attention_out = model.attention_out_dim
    split_inputs = (model.attention_projection_params - attention_out * h - model.tp_replicated_params_per_layer) / h
    x_attention, dy_attention = n * (h + attention_out / t), n * (split_inputs / t + h)
    dense_mlp = (n * (h + model.ffn_hidden / t), n * (up * model.ffn_hidden / t + h))
    if model.moe:
        moe = model.moe
        routed = n * moe.top_k * job.expert_load
        ffn = (routed * moe.expert_ffn_hidden + n * moe.shared_ffn_hidden) / t
        moe_mlp = (
            (routed + n * bool(moe.shared_ffn_hidden)) * h + ffn,
            up * ffn + (routed + n * bool(moe.shared_ffn_hidden)) * h,
        )
        dense_share, moe_share = model.dense_layers / model.layers, model.moe_layers / model.layers
        x_mlp, dy_mlp = (dense_share * d + moe_share * m for d, m in zip(dense_mlp, moe_mlp))
    else:
        x_mlp, dy_mlp = dense_mlp
    dense_weights = (
        model.dense_layers * model.dense_layer_params + model.moe_layers * model.moe_layer_params
    ) / model.layers
    weights = (dense_weights - model.tp_replicated_params_per_layer) / t + model.expert_params / model.layers / (
        batch.etp * batch.ep
    )
    return x_attention + x_mlp, dy_attention + dy_mlp, weights


def quantise_seconds(
    job: TrainingJob, batch: LayoutBatch, proc: Processor, n: Numbers, micro_batches: Numbers
) -> tuple[Numbers, Numbers]:
    """(forward, backward) seconds per layer per micro-batch of the recipe's casts: activations
    every micro-batch, weights once per step (cached over its micro-batches), output gradients in
    backward, NVFP4's Hadamard transform of the weight gradient's inputs (see recipes.py)."""
    recipe = job.compute
    if not recipe.quantised:
        return 0.0, 0.0
    x, dy, weights = quantised_operands(job, batch, n)
    cast = cast_bytes_per_element(recipe)
    quantised = 1.0 - recipe.bf16_layer_share
    forward = quantised * cast * (x + weights / np.maximum(micro_batches, 1)) / proc.elementwise_bandwidth
    backward = quantised * (cast * dy + recipe.hadamard_passes * 4.0 * (x + dy)) / proc.elementwise_bandwidth
    return forward, backward


def layer_compute(job: TrainingJob, batch: LayoutBatch, proc: Processor, micro_batches: Numbers = 1) -> LayerCompute:
    model, execution = job.model, job.execution
    proc = proc.for_execution(execution.name).for_dtype(job.precision.compute_dtype)
    h, t = model.hidden, batch.tp
    n = batch.mbs * job.seq_len / batch.cp  # tokens per rank per micro-batch
    replicated = np.where(batch.seq_parallel, 1.0 / t, 1.0)

    linear_fwd, linear_bwd, mlp_width, moe_traffic, moe_parts = _linear_layers(job, batch, proc, n)
    if not execution.fused_bias_activation:  # a bias pass over each up-projection's output
        mlp_width = mlp_width + 2 * (model.mlp_matrices - 1) * model.ffn_hidden / t
    core_fwd, core_bwd = _attention_core(job, batch, proc, n)
    hidden_passes = 10.0 if execution.fused_norm_residual else 14.0
    elementwise = np.asarray(  # an array already (n is one per layout); asarray tells mypy so
        elementwise_bytes(
            job.activation_bytes, h, model.q_dim + model.kv_dim, mlp_width, n, t, replicated, hidden_passes
        )
        / proc.elementwise_bandwidth
        + moe_traffic
    )
    head_fwd, head_bwd = _linear(proc, n, model.vocab / t, h, frozen=job.lora is not None)
    logits = n * model.vocab / t  # on this rank, per micro-batch
    loss_fwd, loss_bwd = (logits * per_logit / proc.elementwise_bandwidth for per_logit in execution.loss_bytes)
    fwd_kernels, bwd_kernels = framework_costs(model, execution, proc, n)
    if moe_parts is not None:  # the host's exposed work of the MoE layers (moe.py), beside the kernels'
        moe_share = model.moe_layers / model.layers
        fwd_kernels = fwd_kernels + moe_share * moe_parts.host[0]
        if bwd_kernels is not None:
            bwd_kernels = bwd_kernels + moe_share * moe_parts.host[1]
    fwd_quantise, bwd_quantise = quantise_seconds(job, batch, proc, n, micro_batches)
    layer = LayerCompute(
        fwd_gemm=linear_fwd,
        bwd_gemm=linear_bwd,
        fwd_attention=core_fwd,
        bwd_attention=core_bwd,
        fwd_elementwise=elementwise,
        fwd_kernels=fwd_kernels,
        head_fwd=head_fwd + loss_fwd,
        head_bwd=head_bwd + loss_bwd,
        bwd_kernels=bwd_kernels,
        fwd_quantise=fwd_quantise,
        bwd_quantise=bwd_quantise,
        moe=moe_parts,
        shares=recompute_shares(job, batch, hidden_passes, mlp_width),
    )
    if model.mtp_layers:  # DeepSeek-V3's MTP modules run after the main head, on the last stage
        projection = _linear(proc, n, h / t, 2 * h)
        layer.head_fwd = layer.head_fwd * (1 + model.mtp_layers) + model.mtp_layers * (layer.forward + projection[0])
        layer.head_bwd = layer.head_bwd * (1 + model.mtp_layers) + model.mtp_layers * (layer.backward + projection[1])
    return layer
