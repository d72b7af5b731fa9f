"""Per-GPU memory ledger: static state, activations, in-flight micro-batches, temporary buffers.

Static state per parameter is the precision's bytes (16 by default: 2 + 2 + 12). ZeRO shards it
over the gradient-reduction group (data x context parallel ranks): stage 1 the optimizer
states, stage 2 also the gradients, stage 3 (FSDP full sharding) also the weights. Expert
weights are additionally split over the expert-parallel group.

Activations per layer and micro-batch (Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", generalised to any MLP width f and GQA), in bytes,
with s the per-rank sequence (s/cp), b the micro-batch, h hidden, t tensor parallel:
  s*b*h * (10*r + (4q + 4kv)/h / t + m_f/t)  [+ 5*heads*s*S*b/t attention scores, without flash]
where r = 1/t with sequence parallelism else 1 (norm inputs and dropout masks), m_f = 4f/h for
GELU and 6f/h for SwiGLU (gate, up and their product). These are for 16-bit activations: with
activation_bytes a, every 16-bit term scales by a/2 (fp32 doubles them) and the 1-byte dropout
masks (2 of the 10, 1 of the 5 per score) stay. With MLA the attention term is
2*(q + k + v + o)/h over the per-head widths rebuilt from the latents (k = heads*(d_nope+d_rope),
v = o = heads*d_v), plus 2*s*b*(r_q + r_kv + d_rope) for the latents, kept whole on every TP rank.
Static state: MLA's down-projections are not split by TP either. Selective recompute drops the score term;
full recompute keeps only the layer input, 2*s*b*h (/t with sequence parallelism).
Pipeline ranks hold min(m, p) micro-batches in flight with 1F1B, times 1 + (p-1)/(p*v) when
interleaved (Narayanan et al. 2021).

A quantised compute precision (job.compute, commbench.modeling.recipes) adds and changes items:
  quantised weights  Transformer Engine's cached copies of the linear weights in the recipe's
                     format, row-wise and column-wise (the transposed copy the backward needs):
                     2 x element_bytes per linear weight on the rank (ZeRO-3: of the two layers
                     gathered), one copy where the weights are kept quantised (--fp8-param-gather)
  parameters         with --fp8-param-gather the primary weights are the quantised ones:
                     element_bytes per parameter instead of the precision's 2 (the fp32 master
                     copy in the optimizer item stays)
  activations        the linear layers' saved inputs (QKV and gate/up inputs, the attention output,
                     the MLP down-projection's input) are kept in the recipe's format: element_bytes
                     instead of the activation width, on the recipe's quantised layers
"""

from __future__ import annotations

import math

import numpy as np

from commbench.modeling.job import Precision, TrainingJob
from commbench.modeling.layout import LayoutBatch

LEDGER_ITEMS = ("parameters", "quantised weights", "gradients", "optimizer", "activations", "temporary", "reserved")

# The seeds put static state at "16-20 B/param": the 16 itemised below plus headroom they do not
# itemise. Their "175B needs 3.5 TB, at least 44 x 80 GB GPUs" is this upper bound (175e9 x 20).
SEED_UPPER_BYTES_PER_PARAM = 20


def static_ledger(params: float, precision: Precision) -> dict:
    """The seed-style ledger for `params` parameters, unsharded: bytes per item and per parameter."""
    p = precision
    items = {
        "parameters": p.param_bytes,
        "gradients": p.grad_bytes,
        "optimizer": p.optimizer_bytes,
    }
    optimizer_parts = {"fp32 master": p.master_bytes, "Adam m": p.moment_bytes / 2, "Adam v": p.moment_bytes / 2}
    return {
        "variant": p.name,
        "bytes_per_param": p.bytes_per_param,
        "items": {name: {"bytes_per_param": b, "bytes": b * params} for name, b in items.items()},
        "optimizer_parts": {name: {"bytes_per_param": b, "bytes": b * params}
                            for name, b in optimizer_parts.items() if b},
        "total_bytes": p.bytes_per_param * params,
    }


def min_gpus_to_hold(total_bytes: float, gpu_memory_bytes: float) -> int:
    """GPUs needed just to hold `total_bytes` fully sharded (no activations, no slack)."""
    return math.ceil(total_bytes / gpu_memory_bytes)


def micro_batches(job: TrainingJob, batch: LayoutBatch) -> np.ndarray:
    """Micro-batches per pipeline per step: global batch / (micro-batch * data parallel)."""
    return job.global_batch // (batch.mbs * batch.dp)


def layers_per_chunk(job: TrainingJob, batch: LayoutBatch) -> np.ndarray:
    """Layers of the busiest model chunk; uneven splits pace the pipeline by the larger chunk."""
    return -(-job.model.layers // (batch.pp * batch.vpp))


def stage_parameters(job: TrainingJob, batch: LayoutBatch) -> tuple[np.ndarray, np.ndarray]:
    """(dense, expert) parameters on one rank of the heaviest pipeline stage, after TP and EP splits."""
    model = job.model
    layers = layers_per_chunk(job, batch) * batch.vpp
    dense_per_layer = (model.dense_layers * model.dense_layer_params + model.moe_layers * model.moe_layer_params) / model.layers
    expert_per_layer = model.expert_params / model.layers
    # the first stage holds the embedding, the last the output head (a tied one is copied there)
    edge = np.where(batch.pp == 1, model.embedding_params + model.output_params, model.embedding_params)
    # MLA's down-projections stay whole on every TP rank; everything else dense is split
    replicated = layers * model.tp_replicated_params_per_layer
    dense = (layers * dense_per_layer - replicated + edge) / batch.tp + replicated
    expert = layers * expert_per_layer / (batch.tp * batch.ep)
    return dense, expert


def activation_bytes_per_layer(job: TrainingJob, batch: LayoutBatch, recompute: np.ndarray) -> np.ndarray:
    """Bytes one layer keeps for backward for one micro-batch, per recompute mode code (0/1/2)."""
    model = job.model
    h, t = model.hidden, batch.tp
    s = job.seq_len / batch.cp
    sbh = s * batch.mbs * h
    replicated = np.where(batch.seq_parallel, 1.0 / t, 1.0)
    # Q, K, V into the attention core and its output, 2 bytes each (4q + 4kv with plain attention)
    attention = 2 * (model.q_dim + model.kv_dim + model.v_dim + model.attention_out_dim) / h
    mlp_per_width = 6 if model.mlp == "swiglu" else 4
    dense_mlp = mlp_per_width * model.ffn_hidden / h
    if model.moe:
        moe = model.moe
        routed = moe.top_k * job.expert_load
        moe_mlp = (mlp_per_width * (routed * moe.expert_ffn_hidden + moe.shared_ffn_hidden) + 4 * routed * h) / h
        mlp = (model.dense_layers * dense_mlp + model.moe_layers * moe_mlp) / model.layers
    else:
        mlp = dense_mlp
    wide = job.activation_bytes / 2  # the 16-bit terms scale with the activation dtype; 1-byte dropout masks do not
    kept = (sbh * ((8 * wide + 2) * replicated + wide * (attention + mlp) / t)
            + wide * s * batch.mbs * 2 * _latent_width(model))
    if not job.flash_attention or job.execution.attention == "unfused":
        # softmax output and dropout output (16-bit), and the dropout mask (1 byte), per score
        scores = (4.0 * wide + 1.0) * model.heads * s * job.seq_len * batch.mbs / t
        kept = kept + np.where(recompute == 0, scores, 0.0)
    layer_input = 2 * wide * sbh * replicated
    return np.where(recompute == 2, layer_input, kept)


def _latent_width(model) -> int:
    """MLA's latents (queries', keys' and values' compressed widths): kept whole on every TP rank."""
    mla = model.mla
    return mla.q_lora_rank + mla.kv_lora_rank + mla.qk_rope_head_dim if mla else 0


def in_flight_micro_batches(batch: LayoutBatch, m: np.ndarray) -> np.ndarray:
    """Micro-batches whose activations the first pipeline stage holds at its peak."""
    flight = np.minimum(m, batch.pp).astype(float)
    interleaved = batch.vpp > 1
    return np.where(interleaved, flight * (1 + (batch.pp - 1) / (batch.pp * batch.vpp)), flight)


def memory_per_gpu(job: TrainingJob, batch: LayoutBatch) -> dict[str, np.ndarray]:
    """Peak bytes on one GPU of the heaviest stage, by ledger item, plus 'total'."""
    prec = job.precision
    model = job.model
    dense, expert = stage_parameters(job, batch)
    dp_group = batch.dp * batch.cp
    expert_group = dp_group // batch.ep

    def sharded(nbytes: int, from_stage: int) -> np.ndarray:
        shard = batch.zero >= from_stage
        return nbytes * (dense / np.where(shard, dp_group, 1) + expert / np.where(shard, expert_group, 1))

    m = micro_batches(job, batch)
    n_layers = layers_per_chunk(job, batch) * batch.vpp
    ledger = {
        "parameters": sharded(job.gathered_param_bytes, 3),
        "quantised weights": quantised_weight_bytes(job, batch, n_layers),
        "gradients": sharded(prec.grad_bytes, 2),
        "optimizer": sharded(prec.optimizer_bytes, 1),
    }
    saved_quantised = quantised_activation_saving(job, batch)
    per_layer = activation_bytes_per_layer(job, batch, batch.recompute) - np.where(batch.recompute == 2, 0.0, saved_quantised)
    first_stage = per_layer * n_layers * in_flight_micro_batches(batch, m)
    # full recompute rebuilds one layer's activations at a time during backward
    rebuilt = activation_bytes_per_layer(job, batch, np.zeros_like(batch.recompute)) - saved_quantised
    first_stage = first_stage + np.where(batch.recompute == 2, rebuilt, 0.0)
    # the last stage also holds the logits: bf16 output and fp32 copy for the loss
    tokens = batch.mbs * job.seq_len / batch.cp
    logits = tokens * model.vocab / batch.tp * (job.activation_bytes + 4)
    last_stage = per_layer * n_layers + logits
    ledger["activations"] = np.where(batch.pp == 1, first_stage + logits, np.maximum(first_stage, last_stage))
    ledger["temporary"] = _temporary_buffers(job, batch, dense, expert)
    ledger["reserved"] = np.full(len(batch), job.reserved_bytes)
    ledger["total"] = sum(ledger[item] for item in LEDGER_ITEMS)
    return ledger


def quantised_weight_bytes(job: TrainingJob, batch: LayoutBatch, n_layers) -> np.ndarray:
    """Bytes of the recipe's cached quantised weight copies on one rank (0 in bf16)."""
    recipe = job.compute
    if not recipe.quantised:
        return np.zeros(len(batch))
    from commbench.modeling.compute import quantised_operands  # compute imports this module

    weights_per_layer = quantised_operands(job, batch, 1.0)[2]
    held = np.where(batch.zero == 3, np.minimum(2, n_layers), n_layers)  # ZeRO-3: this layer and the prefetched one
    copies = 1 if job.quantised_param_gather else 2
    return held * weights_per_layer * (1 - recipe.bf16_layer_share) * copies * recipe.element_bytes


def quantised_activation_saving(job: TrainingJob, batch: LayoutBatch) -> np.ndarray:
    """Bytes per layer and micro-batch saved by keeping the linear layers' inputs in the recipe's
    format: the QKV and gate/up inputs (s*b*h each, /t with sequence parallelism), the attention
    output and the down-projection's input (split by TP)."""
    recipe = job.compute
    narrower = job.activation_bytes - recipe.element_bytes
    if not recipe.quantised or narrower <= 0:
        return np.zeros(len(batch))
    model, t = job.model, batch.tp
    tokens = batch.mbs * job.seq_len / batch.cp
    replicated = np.where(batch.seq_parallel, 1.0 / t, 1.0)
    down_input = model.ffn_hidden
    if model.moe:
        moe = model.moe
        routed = moe.top_k * job.expert_load * moe.expert_ffn_hidden + moe.shared_ffn_hidden
        down_input = (model.dense_layers * model.ffn_hidden + model.moe_layers * routed) / model.layers
    elements = tokens * (2 * model.hidden * replicated + (model.attention_out_dim + down_input) / t)
    return (1 - recipe.bf16_layer_share) * narrower * elements


def _temporary_buffers(job: TrainingJob, batch: LayoutBatch, dense, expert) -> np.ndarray:
    """Communication buffers: two gradient buckets in flight; ZeRO-3 also holds the gathered weights
    of the layer being computed and the prefetched next one, and one layer's unsharded gradients."""
    prec = job.precision
    buckets = 2 * np.minimum(job.bucket_bytes, (dense + expert) * prec.grad_bytes)
    layers = layers_per_chunk(job, batch) * batch.vpp
    layer_params = (dense + expert) / np.maximum(layers, 1)
    gathered = layer_params * (2 * job.gathered_param_bytes + prec.grad_bytes)
    return np.where(batch.zero == 3, gathered, 0.0) + np.where(batch.dp * batch.cp > 1, buckets, 0.0)
