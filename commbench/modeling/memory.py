"""Per-GPU memory ledger, stage by stage: what the allocator holds at its peak, and what lives outside it.

Static state per parameter is the precision's bytes (16 by default: 2 + 2 + 12). ZeRO shards it
over the gradient-reduction group (data x context parallel ranks): stage 1 the optimizer
states, stage 2 also the gradients, stage 3 (FSDP full sharding) also the weights. Expert
weights are split over the expert-parallel x expert-tensor-parallel ranks and sharded over the
expert-data-parallel group (tp*cp*dp / (ep*etp), Megatron-Core's parallel folding).

Pipeline stages differ (stage_layers): Megatron-Core's even split, its uneven one
(--decoder-first/last-pipeline-num-layers: the first and last stages hold the layers named, the
rest share what is left evenly) and the embedding and loss counted as one layer each
(--account-for-embedding/loss-in-pipeline-split). The first stage holds the token embedding
(and the model's other extras: learned positions, final norm, head bias, put there), the last the
output layer (a tied one copied there when pp > 1).

Activations per layer and micro-batch (Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", generalised to any MLP width f and GQA), in bytes,
with s the per-rank sequence (s/cp), b the micro-batch, h hidden, t tensor parallel:
  s*b*h * (10*r + (4q + 4kv)/h / t + m_f/t)  [+ 5*heads*s*S*b/t attention scores, without flash]
where r = 1/t with sequence parallelism else 1 (norm inputs and dropout masks), m_f = 4f/h for
GELU and 6f/h for SwiGLU (gate, up and their product). These are for 16-bit activations: with
activation_bytes a, every 16-bit term scales by a/2 (fp32 doubles them) and the 1-byte dropout
masks (2 of the 10, 1 of the 5 per score) stay, and go where the model has no dropout. With MLA the attention term is
2*(q + k + v + o)/h over the per-head widths rebuilt from the latents (k = heads*(d_nope+d_rope),
v = o = heads*d_v), plus 2*s*b*(r_q + r_kv + d_rope) for the latents, kept whole on every TP rank.
Static state: MLA's down-projections are not split by TP either. Selective recompute drops the score term;
full recompute keeps only the layer input, 2*s*b*h (/t with sequence parallelism).

In-flight micro-batches per stage (Megatron-Core's schedules, get_pp_rank_microbatches): with
1F1B stage i holds min(m, p - i); interleaved, it runs 2(p - i - 1) + (v - 1)N warm-up forwards
of model chunks (N micro-batches per group, --microbatch-group-size-per-virtual-pipeline-stage,
default p) and holds one more in steady state, capped at m*v chunks of its layers / v each. For
the first stage at N = p that is Narayanan et al. 2021's min(m, p) * (1 + (p-1)/(p*v)).

The allocator's peak is the larger of two moments (PEAK_MOMENTS): the backward's start of the
last micro-batch in flight (weights, optimizer state after the first step, the gradients where
they already exist, activations, logits, workspaces, gathered weights), and the optimizer step
(weights, gradients, optimizer state, bucket copies). LEDGER_ITEMS names each item with what it
is and where its figure comes from; NOT_MODELLED names what the ledger leaves out.

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

LoRA (job.lora): the frozen base keeps no gradient, master copy or Adam state (trained_share: the
adapters' only), and as MLPerf's Llama 2 70B LoRA recipes run it:
  parameters         with LoRA.base "quantised" (TE's fp8_model_init: NeMo's fp8_params follows FP8 in
                     the MLPerf configs; v5.1's NVFP4 runs replace the weights in place) the linear
                     weights are the recipe's elements only, no 16-bit copy and no cached copies:
                     element_bytes each, twice with a column-wise copy (LoRA.columnwise_copy: Hopper's
                     TN-only FP8 GEMMs need the transposed copy, kept unless the transpose cache is off;
                     Blackwell's take either layout, TE's is_non_tn_fp8_gemm_supported; NVFP4 and MXFP8
                     quantise both ways). Embedding, output layer and norms stay 16-bit.
  activations        a frozen linear layer keeps no input (TE saves it only when the weight requires
                     grad): the QKV and gate/up inputs (the norms' outputs) and the down-projection's
                     input (f per token) go; each adapter keeps its dropped-out input (the activation
                     width plus a 1-byte mask with dropout "pre") and its rank-wide A output.
  fp8_activation_input  Megatron-Core's activation_func_fp8_input_store: the MLP activation function's
                     input (the gate/up output, (mlp_matrices - 1) * f per token) at 1 byte.
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike

from commbench.modeling.job import Precision, TrainingJob
from commbench.modeling.layout import FULL_RECOMPUTE, SELECTIVE_RECOMPUTE, LayoutBatch
from commbench.modeling.ledger import (
    ALLOCATOR_ITEMS,
    CUBLAS_WORKSPACE,
    CUDA_CONTEXT_BYTES,
    FRAGMENTATION,
    NCCL_BUFFSIZE,
    NCCL_P2P_CHANNELS,
    NCCL_RING_CHANNELS,
    NCCL_RING_PEERS,
    OUTSIDE_ITEMS,
    PEAK_MOMENTS,
    TE_WORKSPACE,
)
from commbench.modeling.models import ModelSpec
from commbench.modeling.routing import expert_load

# The seeds put static state at "16-20 B/param": the 16 itemised below plus headroom they do not
# itemise. Their "175B needs 3.5 TB, at least 44 x 80 GB GPUs" is this upper bound (175e9 x 20).
SEED_UPPER_BYTES_PER_PARAM = 20


def static_ledger(params: float, precision: Precision) -> dict[str, Any]:
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
        "optimizer_parts": {
            name: {"bytes_per_param": b, "bytes": b * params} for name, b in optimizer_parts.items() if b
        },
        "total_bytes": p.bytes_per_param * params,
    }


def min_gpus_to_hold(total_bytes: float, gpu_memory_bytes: float) -> int:
    """GPUs needed just to hold `total_bytes` fully sharded (no activations, no slack)."""
    return math.ceil(total_bytes / gpu_memory_bytes)


def micro_batches(job: TrainingJob, batch: LayoutBatch) -> np.ndarray:
    """Micro-batches per pipeline per step: global batch / (micro-batch * data parallel)."""
    result: np.ndarray = job.global_batch // (batch.mbs * batch.dp)
    return result


def stage_layers(job: TrainingJob, batch: LayoutBatch, stage: ArrayLike) -> np.ndarray:
    """Transformer layers on pipeline stage `stage` (an array, one per layout), as Megatron-Core
    splits them (get_num_layers_to_build). An even split that does not divide gives the first
    stages one layer more (Megatron refuses it; the planner prices it paced by the larger stage)."""
    layers, p, stage = job.model.layers, batch.pp, np.asarray(stage)
    first, last = batch.pp_first, batch.pp_last
    is_first, is_last = stage == 0, stage == p - 1
    left = p - (first > 0) - (last > 0)
    middle = (layers - first - last) // np.maximum(left, 1)
    uneven = np.where(is_first & (first > 0), first, np.where(is_last & (last > 0), last, middle))
    counted = layers + batch.pp_embedding + batch.pp_loss
    even = counted // p + (stage < counted % p)
    even = even - batch.pp_embedding * is_first - batch.pp_loss * is_last
    split = np.where((first > 0) | (last > 0), uneven, even)
    if batch.stage_counts is None:
        return split
    explicit = batch.stage_counts[np.arange(len(batch)), np.clip(stage, 0, batch.stage_counts.shape[1] - 1)]
    return np.where(explicit >= 0, explicit, split)


def layers_per_chunk(job: TrainingJob, batch: LayoutBatch) -> np.ndarray:
    """Layers of the busiest model chunk; uneven splits pace the pipeline by the larger chunk."""
    busiest = np.maximum(
        np.maximum(stage_layers(job, batch, 0), stage_layers(job, batch, batch.pp - 1)),
        stage_layers(job, batch, np.minimum(1, batch.pp - 1)),
    )
    if batch.stage_counts is not None:  # an explicit layout: its largest stage and its largest chunk
        busiest = np.where(batch.pp_layout_chunk > 0, batch.stage_counts.max(axis=1), busiest)
        return np.where(batch.pp_layout_chunk > 0, batch.pp_layout_chunk, -(-busiest // batch.vpp))
    result: np.ndarray = -(-busiest // batch.vpp)
    return result


def _stage_parameters(job: TrainingJob, batch: LayoutBatch, stage: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    model = job.model
    stage = np.asarray(stage)
    layers = stage_layers(job, batch, stage)
    dense_per_layer = (
        model.dense_layers * model.dense_layer_params + model.moe_layers * model.moe_layer_params
    ) / model.layers
    expert_per_layer = model.expert_params / model.layers
    # the first stage holds the embedding and the model's extras, the last the output layer (tied: a copy)
    head = model.output_params if not model.tied_embeddings else np.where(batch.pp > 1, model.embedding_params, 0)
    edge = (stage == 0) * (model.embedding_params + model.model_extras) + (stage == batch.pp - 1) * head
    # MLA's down-projections stay whole on every TP rank; everything else dense is split
    replicated = layers * model.tp_replicated_params_per_layer
    dense = (layers * dense_per_layer - replicated + edge) / batch.tp + replicated
    expert = layers * expert_per_layer / (batch.etp * batch.ep)
    return dense, expert


def stage_parameters(
    job: TrainingJob, batch: LayoutBatch, stage: ArrayLike | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(dense, expert) parameters on one rank of pipeline stage `stage`, after TP and EP splits;
    stage None: the stage holding the most (first, second or last)."""
    if stage is not None:
        return _stage_parameters(job, batch, stage)
    candidates = [_stage_parameters(job, batch, s) for s in (0, np.minimum(1, batch.pp - 1), batch.pp - 1)]
    totals = np.array([dense + expert for dense, expert in candidates])
    pick = np.argmax(totals, axis=0)
    dense = np.choose(pick, [np.broadcast_to(c[0], pick.shape) for c in candidates])
    expert = np.choose(pick, [np.broadcast_to(c[1], pick.shape) for c in candidates])
    return dense, expert


def expert_data_parallel(batch: LayoutBatch) -> np.ndarray:
    """Ranks holding the same expert shard: tp*cp*dp / (ep*etp) (parallel folding)."""
    result: np.ndarray = batch.tp * batch.cp * batch.dp // (batch.ep * batch.etp)
    return result


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
    masks = 2 if job.dropout else 0
    kept = sbh * (
        (8 * wide + masks) * replicated + wide * (attention + mlp) / t
    ) + wide * s * batch.mbs * 2 * _latent_width(model)
    # what FP8 activation-function inputs and LoRA's frozen layers change, bytes per s*b*h (before /t)
    lora = _lora_activation_terms(job)
    mlp_change = lora["mlp"] - _fp8_activation_input_saving(job)
    if mlp_change or lora["adapter_ranks"]:
        kept = kept + sbh * (lora["norm_outputs"] * replicated + (mlp_change + lora["o"]) / t)
        kept = kept + s * batch.mbs * lora["adapter_ranks"]
    # what each of Megatron's --recompute-modules leaves out (RECOMPUTE_MODULES order)
    dropped = (
        # core_attn: softmax output and dropout output (16-bit), and the dropout mask (1 byte), per score
        _score_bytes(job, batch, 4.0 * wide + masks / 2) if _unfused_attention(job) else 0.0,
        sbh * wide * mlp / t + sbh * mlp_change / t,  # mlp: everything inside the MLP but its input
        # layernorm: the two norms' outputs (QKV and MLP inputs); under LoRA none are kept (the adapters
        # keep their own dropped-out inputs, which norm recompute does not rebuild)
        sbh * 4 * wide * replicated * (job.lora is None),
        sbh * wide * 2 * _expert_activation_width(job) / h / t,  # moe_act: the experts' activation outputs
        sbh * wide * 2 * (model.q_dim + model.kv_dim + model.v_dim) / h / t if model.mla else 0.0,  # mla_up_proj
    )
    mask = np.where(recompute == SELECTIVE_RECOMPUTE, batch.recompute_mask, 0)
    selective = kept + dropped[0] - sum((mask >> bit & 1) * part for bit, part in enumerate(dropped))
    layer_input = 2 * wide * sbh * replicated
    result: np.ndarray = np.where(recompute == FULL_RECOMPUTE, layer_input, selective)
    return result


def _fp8_activation_input_saving(job: TrainingJob) -> float:
    """Bytes per s*b*h saved by keeping the MLP activation function's input (the gate/up GEMM's
    output: (mlp_matrices - 1) * f per token, dense layers) in FP8 (Megatron-Core's
    activation_func_fp8_input_store): 1 byte per element instead of the activation width."""
    model = job.model
    if not job.fp8_activation_input or model.moe:
        return 0.0
    return (job.activation_bytes - 1.0) * (model.mlp_matrices - 1) * model.ffn_hidden / model.hidden


def _lora_activation_terms(job: TrainingJob) -> dict[str, float]:
    """What LoRA changes in one layer's kept activations, in bytes per s*b*h (before the TP split, as
    the terms they adjust) and, for `adapter_ranks`, bytes per token.

    A frozen linear layer needs its input only for the weight gradient it does not compute, and does
    not keep it (Transformer Engine's Linear and LayerNormLinear save their input only when
    backward_needs_input, i.e. the weight requires grad): the QKV and gate/up inputs (the norms'
    outputs) and the down-projection's input (the activation function's output, f per token) go.
    Still kept: the norms' inputs, Q, K, V and the attention output (the attention kernel's own backward
    needs them) and the activation function's input. Each adapter keeps its own input for its A's
    weight gradient: with dropout before the adapter (NeMo's dropout_position "pre") the dropped-out
    copy at the activation width plus PyTorch's 1-byte mask (the width alone without dropout), and
    A's rank-wide output for B's weight gradient."""
    terms = {"norm_outputs": 0.0, "mlp": 0.0, "o": 0.0, "adapter_ranks": 0.0}
    lora = job.lora
    if lora is None:
        return terms
    model, a = job.model, float(job.activation_bytes)
    adapter_input = a + (1.0 if lora.dropout > 0 else 0.0)
    targets = set(lora.targets)
    terms["norm_outputs"] = -2 * a + adapter_input * (("qkv" in targets) + ("mlp" in targets))
    down_input = model.ffn_hidden / model.hidden
    terms["mlp"] = (-a + (adapter_input if "mlp" in targets else 0.0)) * down_input
    terms["o"] = adapter_input * model.attention_out_dim / model.hidden if "o" in targets else 0.0
    adapters = ("qkv" in targets) + ("o" in targets) + 2 * ("mlp" in targets)
    terms["adapter_ranks"] = a * lora.rank * adapters
    return terms


def _expert_activation_width(job: TrainingJob) -> float:
    """Width per token of the MoE layers' activation-function outputs, averaged over all layers."""
    model = job.model
    if not model.moe:
        return 0.0
    moe = model.moe
    return (
        (moe.top_k * job.expert_load * moe.expert_ffn_hidden + moe.shared_ffn_hidden) * model.moe_layers / model.layers
    )


def _unfused_attention(job: TrainingJob) -> bool:
    return not job.flash_attention or job.execution.attention == "unfused"


def _score_bytes(job: TrainingJob, batch: LayoutBatch, bytes_per_score: float) -> np.ndarray:
    """Bytes of one layer's attention scores for one micro-batch on one rank, at `bytes_per_score`."""
    result: np.ndarray = (
        bytes_per_score * job.model.heads * (job.seq_len / batch.cp) * job.seq_len * batch.mbs / batch.tp
    )
    return result


def _latent_width(model: ModelSpec) -> int:
    """MLA's latents (queries', keys' and values' compressed widths): kept whole on every TP rank."""
    mla = model.mla
    return mla.q_lora_rank + mla.kv_lora_rank + mla.qk_rope_head_dim if mla else 0


def vpp_group(batch: LayoutBatch, m: np.ndarray) -> np.ndarray:
    """Micro-batches per group of the interleaved schedule (Megatron's default: pp)."""
    return np.where(batch.vpp_group > 0, batch.vpp_group, batch.pp)


def in_flight_chunks(batch: LayoutBatch, m: np.ndarray, stage: ArrayLike) -> np.ndarray:
    """Model-chunk forwards whose activations stage `stage` holds at its peak (Megatron-Core's
    warm-up count plus the one steady-state forward, capped at all m*v of them)."""
    p, v, stage = batch.pp, batch.vpp, np.asarray(stage)
    warmup = np.where(v > 1, 2 * (p - stage - 1) + (v - 1) * vpp_group(batch, m), p - stage - 1)
    result: np.ndarray = np.minimum(warmup + 1, m * v)
    return result


def in_flight_micro_batches(batch: LayoutBatch, m: np.ndarray) -> np.ndarray:
    """Micro-batches' worth of activations the first pipeline stage holds at its peak."""
    result: np.ndarray = in_flight_chunks(batch, m, 0) / batch.vpp
    return result


def per_layout_terms(job: TrainingJob, batch: LayoutBatch) -> dict[str, np.ndarray]:
    """The ledger's terms that do not depend on the stage, computed once for all stages priced."""
    # a quantised recipe keeps the linear layers' inputs in its narrower format (under LoRA the frozen
    # layers keep none: _lora_activation_terms)
    saved_quantised = quantised_activation_saving(job, batch) * (job.lora is None)
    kept = activation_bytes_per_layer(job, batch, batch.recompute) - np.where(
        batch.recompute == FULL_RECOMPUTE, 0.0, saved_quantised
    )
    return {
        "micro_batches": micro_batches(job, batch),
        "per_layer": kept,
        # full recompute rebuilds one layer's activations at a time during backward
        "rebuilt": activation_bytes_per_layer(job, batch, np.zeros_like(batch.recompute)) - saved_quantised,
        "logits": logits_bytes(job, batch),
        "attention_workspace": _attention_workspace(job, batch),
        "moe_dispatch": moe_dispatch_bytes(job, batch),
    }


def moe_dispatch_bytes(job: TrainingJob, batch: LayoutBatch) -> np.ndarray:
    """One MoE layer's dispatch and combine buffers on the busiest rank (ledger item moe_dispatch)."""
    model = job.model
    if not model.moe:
        return np.zeros(len(batch))
    load = expert_load(
        job.routing, model.moe.num_experts, batch.ep, job.capacity_factor, job.moe_execution.pad_to_capacity
    )
    local = batch.mbs * job.seq_len / (batch.cp * batch.tp)
    copies = model.moe.top_k * job.expert_load * local
    sent, received = copies * load.kept, copies * batch.etp * load.hottest
    result: np.ndarray = 2.0 * job.activation_bytes * model.hidden * (sent + received)
    return result


def stage_memory(
    job: TrainingJob, batch: LayoutBatch, stage: ArrayLike, terms: dict[str, np.ndarray] | None = None
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Stage `stage`'s ledger (bytes per item at the allocator's peak, 'allocator_peak',
    'outside_allocator', 'total') and the index into PEAK_MOMENTS of when that peak happens.
    `terms`: per_layout_terms(job, batch), when several stages of one batch are priced."""
    prec = job.precision
    stage = np.asarray(stage)
    terms = terms or per_layout_terms(job, batch)
    dense, expert = _stage_parameters(job, batch, stage)
    dp_group = batch.dp * batch.cp
    expert_group = expert_data_parallel(batch)

    def sharded(nbytes: float, from_stage: int) -> np.ndarray:
        shard = batch.zero >= from_stage
        return nbytes * (dense / np.where(shard, dp_group, 1) + expert / np.where(shard, expert_group, 1))

    m = terms["micro_batches"]
    layers = stage_layers(job, batch, stage)
    chunks = in_flight_chunks(batch, m, stage)
    items = {name: np.zeros(len(batch)) for name in ALLOCATOR_ITEMS}
    items["parameters"] = sharded(job.weight_bytes_per_param, 3) - quantised_base_saving(job, batch, layers, dp_group)
    items["quantised weights"] = quantised_weight_bytes(job, batch, layers) * (not quantised_base(job))
    items["gradients"] = sharded(prec.grad_bytes * job.trained_share, 2)
    items["optimizer"] = sharded(prec.optimizer_bytes * job.trained_share, 1)
    items["grad_buckets"] = _grad_buckets(job, batch, dense, expert)
    items["param_gather"] = _param_gather(job, batch, dense, expert, layers)
    chunk_layers = layers / batch.vpp
    # Megatron's block method recomputes the first recompute_layers layers of each chunk; the rest keep everything
    block = (batch.recompute == FULL_RECOMPUTE) & (batch.recompute_layers > 0)
    recomputed = np.where(block, np.minimum(batch.recompute_layers, chunk_layers), chunk_layers)
    per_chunk = recomputed * terms["per_layer"] + (chunk_layers - recomputed) * terms["rebuilt"]
    items["activations"] = per_chunk * chunks
    items["recompute_buffer"] = np.where((batch.recompute == FULL_RECOMPUTE) & (layers > 0), terms["rebuilt"], 0.0)
    items["logits"] = np.where(stage == batch.pp - 1, terms["logits"], 0.0)
    items["attention_workspace"] = np.where(layers > 0, terms["attention_workspace"], 0.0)
    items["moe_dispatch"] = np.where(layers > 0, terms["moe_dispatch"], 0.0)
    items["gemm_workspace"] = np.full(len(batch), _gemm_workspace(job))
    return _at_peak(job, batch, items, chunks < m * batch.vpp)


def quantised_base(job: TrainingJob) -> bool:
    """The frozen LoRA base is held in the recipe's format only (no 16-bit copy, no cached copies)."""
    return job.lora is not None and job.lora.base == "quantised" and job.compute.quantised


def quantised_linear_weights(job: TrainingJob, batch: LayoutBatch, n_layers: np.ndarray) -> np.ndarray:
    """Linear weights of `n_layers` layers on one rank that the recipe quantises (not its BF16 layers)."""
    from commbench.modeling.compute import quantised_operands  # compute imports this module

    result: np.ndarray = n_layers * quantised_operands(job, batch, 1.0)[2] * (1 - job.compute.bf16_layer_share)
    return result


def quantised_base_bytes_per_weight(job: TrainingJob) -> float:
    """Bytes per frozen linear weight of a quantised LoRA base: the recipe's element bytes (scales
    included), twice where a column-wise copy is held too (LoRA.columnwise_copy)."""
    return job.compute.element_bytes * (2 if job.lora is not None and job.lora.columnwise_copy else 1)


def quantised_base_saving(
    job: TrainingJob, batch: LayoutBatch, n_layers: np.ndarray, dp_group: np.ndarray
) -> np.ndarray:
    """Bytes a quantised LoRA base saves on the `parameters` item against its 16-bit copy: the
    quantised linear weights at quantised_base_bytes_per_weight instead of the kept width (embedding,
    output layer, norms and the recipe's BF16 layers stay 16-bit). ZeRO-3 shards it as the weights."""
    if not quantised_base(job):
        return np.zeros(len(batch))
    per_weight = job.gathered_param_bytes - quantised_base_bytes_per_weight(job)
    result: np.ndarray = (
        per_weight * quantised_linear_weights(job, batch, n_layers) / np.where(batch.zero >= 3, dp_group, 1)
    )
    return result


def lora_memory_parts(job: TrainingJob, batch: LayoutBatch, stage: ArrayLike) -> dict[str, np.ndarray]:
    """LoRA's parts of stage `stage`'s ledger items, bytes on one rank (`plan --json`'s
    finetune.memory): the frozen base weights and the adapters' weights, gradients and optimizer
    state (the `parameters`, `gradients` and `optimizer` items), and per layer and micro-batch what
    the adapters keep for backward (inside `activations`). Empty for full training."""
    if job.lora is None:
        return {}
    prec, stage = job.precision, np.asarray(stage)
    dense, expert = _stage_parameters(job, batch, stage)
    layers = stage_layers(job, batch, stage)
    dp_group = batch.dp * batch.cp

    def sharded(nbytes: float, from_stage: int) -> np.ndarray:
        result: np.ndarray = nbytes * (dense + expert) / np.where(batch.zero >= from_stage, dp_group, 1)
        return result

    adapters = job.trained_share
    base = sharded(job.gathered_param_bytes, 3) - quantised_base_saving(job, batch, layers, dp_group)
    terms = _lora_activation_terms(job)
    sbh = job.seq_len / batch.cp * batch.mbs * job.model.hidden
    replicated = np.where(batch.seq_parallel, 1.0 / batch.tp, 1.0)
    adapter_input = job.activation_bytes + (1.0 if job.lora.dropout > 0 else 0.0)
    targets = set(job.lora.targets)
    kept_inputs = (
        sbh
        * adapter_input
        * (
            (("qkv" in targets) + ("mlp" in targets)) * replicated
            + (("o" in targets) * job.model.attention_out_dim + ("mlp" in targets) * job.model.ffn_hidden)
            / job.model.hidden
            / batch.tp
        )
    )
    return {
        "frozen_base_weights": base,
        "frozen_base_bytes_per_linear_weight": np.full(
            len(batch),
            quantised_base_bytes_per_weight(job) if quantised_base(job) else job.gathered_param_bytes,
        ),
        "adapter_weights": sharded(prec.param_bytes * adapters, 3),
        "adapter_gradients": sharded(prec.grad_bytes * adapters, 2),
        "adapter_optimizer": sharded(prec.optimizer_bytes * adapters, 1),
        "adapter_activations_per_layer": kept_inputs + job.seq_len / batch.cp * batch.mbs * terms["adapter_ranks"],
    }


def quantised_weight_bytes(job: TrainingJob, batch: LayoutBatch, n_layers: np.ndarray) -> np.ndarray:
    """Bytes of the recipe's cached quantised weight copies on one rank (0 in bf16)."""
    recipe = job.compute
    if not recipe.quantised:
        return np.zeros(len(batch))
    from commbench.modeling.compute import quantised_operands  # compute imports this module

    weights_per_layer = quantised_operands(job, batch, 1.0)[2]
    held = np.where(batch.zero == 3, np.minimum(2, n_layers), n_layers)  # ZeRO-3: this layer and the prefetched one
    copies = 1 if job.quantised_param_gather else 2
    result: np.ndarray = held * weights_per_layer * (1 - recipe.bf16_layer_share) * copies * recipe.element_bytes
    return result


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
    down_input: float = model.ffn_hidden
    if model.moe:
        moe = model.moe
        routed = moe.top_k * job.expert_load * moe.expert_ffn_hidden + moe.shared_ffn_hidden
        down_input = (model.dense_layers * model.ffn_hidden + model.moe_layers * routed) / model.layers
    elements = tokens * (2 * model.hidden * replicated + (model.attention_out_dim + down_input) / t)
    result: np.ndarray = (1 - recipe.bf16_layer_share) * narrower * elements
    return result


def logits_bytes(job: TrainingJob, batch: LayoutBatch) -> np.ndarray:
    """The last stage's output layer for one micro-batch: its input (kept for the weight gradient,
    1/t with sequence parallelism) and its logits in the activation dtype plus their fp32 copy."""
    tokens = batch.mbs * job.seq_len / batch.cp
    head_input = tokens * job.model.hidden * job.activation_bytes * np.where(batch.seq_parallel, 1.0 / batch.tp, 1.0)
    result: np.ndarray = head_input + tokens * job.model.vocab / batch.tp * (job.activation_bytes + 4)
    return result


def _attention_workspace(job: TrainingJob, batch: LayoutBatch) -> np.ndarray:
    if _unfused_attention(job):
        return _score_bytes(job, batch, job.activation_bytes)
    result: np.ndarray = 4.0 * batch.mbs * job.seq_len / batch.cp * job.model.q_dim / batch.tp
    return result


def _gemm_workspace(job: TrainingJob) -> float:
    if not job.on_gpu:
        return 0.0
    return CUBLAS_WORKSPACE + (TE_WORKSPACE if job.execution.name == "megatron-core" else 0.0)


def _grad_buckets(job: TrainingJob, batch: LayoutBatch, dense: np.ndarray, expert: np.ndarray) -> np.ndarray:
    grads = (dense + expert) * job.precision.grad_bytes * job.trained_share
    replicated = (batch.dp * batch.cp > 1) & (batch.zero < 3)
    if job.execution.grad_buffer == "contiguous":
        return np.zeros(len(batch))
    if job.execution.grad_buffer == "bucket-copies":
        return np.where(replicated & (batch.zero < 2), grads, 0.0)
    return np.where(batch.dp * batch.cp > 1, 2 * np.minimum(job.bucket_bytes, grads), 0.0)


def _param_gather(
    job: TrainingJob, batch: LayoutBatch, dense: np.ndarray, expert: np.ndarray, layers: np.ndarray
) -> np.ndarray:
    prec = job.precision
    layer_params = (dense + expert) / np.maximum(layers, 1)
    gathered = layer_params * (2 * job.gathered_param_bytes + prec.grad_bytes * job.trained_share)
    return np.where(batch.zero == 3, gathered, 0.0)


def _at_peak(
    job: TrainingJob, batch: LayoutBatch, items: dict[str, np.ndarray], ran_backward: np.ndarray
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The allocator's peak: the larger of the activation peak and the optimizer step, with the
    items held at that moment, and what lives outside the allocator beside it."""
    persistent = job.execution.grad_buffer == "contiguous"
    grads_then = np.where(persistent | ran_backward, items["gradients"], 0.0)
    at_activations = {**items, "gradients": grads_then}
    step_items = ("parameters", "quantised weights", "gradients", "optimizer", "grad_buckets", "gemm_workspace")
    at_step = {name: (value if name in step_items else np.zeros(len(batch))) for name, value in items.items()}
    activation_peak = sum(at_activations.values())
    step_peak = sum(at_step.values())
    moment = np.where(step_peak > activation_peak, 1, 0)
    ledger = {name: np.where(moment == 1, at_step[name], at_activations[name]) for name in items}
    ledger["allocator_peak"] = np.maximum(activation_peak, step_peak)
    ledger.update(_outside_allocator(job, batch, ledger["allocator_peak"]))
    ledger["outside_allocator"] = cast(np.ndarray, sum(ledger[name] for name in OUTSIDE_ITEMS))  # never empty
    ledger["total"] = ledger["allocator_peak"] + ledger["outside_allocator"]
    return ledger, moment


def _outside_allocator(job: TrainingJob, batch: LayoutBatch, allocator_peak: np.ndarray) -> dict[str, np.ndarray]:
    n = len(batch)
    if not job.on_gpu:
        return {name: np.zeros(n) for name in OUTSIDE_ITEMS}
    ring = NCCL_RING_CHANNELS * NCCL_RING_PEERS
    edp = expert_data_parallel(batch)
    buffers = ring * ((batch.tp > 1) + (batch.dp * batch.cp > 1) + ((batch.ep > 1) & (edp > 1)))
    buffers = buffers + NCCL_P2P_CHANNELS * (2 * (batch.pp > 1) + 2 * (batch.cp > 1) + (batch.ep - 1))
    return {
        "cuda_context": np.full(n, CUDA_CONTEXT_BYTES),
        "nccl_buffers": NCCL_BUFFSIZE * buffers.astype(float),
        "allocator_reserve": FRAGMENTATION * allocator_peak,
    }


def heaviest_stage_memory(job: TrainingJob, batch: LayoutBatch) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The ledger of each layout's heaviest stage and that stage's index. Only the first, second
    and last stages can be the heaviest: later middle stages hold the second's layers with fewer
    micro-batches in flight."""
    candidates = (np.zeros_like(batch.pp), np.minimum(1, batch.pp - 1), batch.pp - 1)
    terms = per_layout_terms(job, batch)
    ledgers = [stage_memory(job, batch, stage, terms)[0] for stage in candidates]
    pick = np.argmax(np.stack([ledger["total"] for ledger in ledgers]), axis=0)
    return {name: np.choose(pick, [ledger[name] for ledger in ledgers]) for name in ledgers[0]}, np.choose(
        pick, candidates
    )


def memory_per_gpu(job: TrainingJob, batch: LayoutBatch) -> dict[str, np.ndarray]:
    """Peak bytes on one GPU of the heaviest stage, by ledger item, plus the totals."""
    return heaviest_stage_memory(job, batch)[0]


def stages_memory(job: TrainingJob, batch: LayoutBatch, row: int) -> list[tuple[dict[str, float], str]]:
    """Every pipeline stage of layout `row`, first to last: its ledger and the moment of its peak."""
    p = int(batch.pp[row])
    one = batch.repeat_row(row, p)
    ledger, moment = stage_memory(job, one, np.arange(p))
    return [({name: float(value[i]) for name, value in ledger.items()}, PEAK_MOMENTS[int(moment[i])]) for i in range(p)]
