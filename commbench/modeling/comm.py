"""Which collectives each parallelism issues, how big they are, and what they cost on their group.

Per layer and micro-batch, with A = b*(s/cp)*h*2 bytes the activation of one micro-batch:
  TP, no SP     forward 2 all-reduce(A); backward 2 all-reduce(A), hidden behind the weight-gradient GEMM
  TP with SP    forward 2 all-gather(A) + 2 reduce-scatter(A); backward 4 all-gather + 2 reduce-scatter:
                2 all-gathers of the output gradient are on the critical path, the re-gather of the
                layer input (for the weight gradient) and the 2 reduce-scatters overlap the GEMMs
                (with Execution.tp_backward_overlap False every backward TP collective blocks)
  TP head       (last stage, per micro-batch) vocab-parallel cross entropy: 3 all-reduces of one fp32
                per token (max, target logit, sum of exponentials), blocking; with SP the head's input
                is all-gathered forward. Backward: all-reduce(A) of the input gradient (reduce-scatter
                with SP), hidden behind the head's weight-gradient GEMM like the layers' (or blocking)
  CP (ring)     forward (cp-1) sendrecv of the local K,V (2*b*(s/cp)*kv*2 bytes, kv split by TP),
                backward twice that (K,V again and dK,dV); overlapped with the attention core
  EP            per MoE layer: all-to-all dispatch + combine forward, the same two backward, of
                k * load * A / t bytes per rank (tokens are sequence-split across TP ranks)
  ZeRO-3/FSDP   per layer: all-gather of its weights forward, again backward, reduce-scatter of
                its gradients; prefetched, so overlapped with the layer's compute (the reduce-scatter
                blocks instead with Execution.zero3_reduce_scatter_overlap False)
Per step:
  DP            all-reduce (ZeRO-0) or reduce-scatter (ZeRO-1, ZeRO-2 per micro-batch) of the
                stage's gradients in buckets; ZeRO-1/2 then all-gather the updated bf16 weights
  PP            one sendrecv of A (A/t with SP) per micro-batch per boundary, forward and backward,
                v times as many with v interleaved chunks
Every collective is priced by the CollectiveCost for its group's size and placement.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commbench.modeling.job import TrainingJob
from commbench.modeling.layout import LayoutBatch, layout_groups
from commbench.modeling.memory import layers_per_chunk, micro_batches, stage_parameters
from commbench.modeling.network import CollectiveCost, price


@dataclass
class CommCosts:
    """Seconds (and bytes) per layout. Per-layer figures are per layer per micro-batch."""

    tp_fwd: np.ndarray  # blocking
    tp_bwd_blocking: np.ndarray
    tp_bwd_overlapped: np.ndarray  # runs alongside the backward GEMMs
    tp_head_fwd: np.ndarray  # blocking, per micro-batch on the last stage
    tp_head_bwd_blocking: np.ndarray
    tp_head_bwd_overlapped: np.ndarray  # runs alongside the head's weight-gradient GEMM
    cp_fwd: np.ndarray  # runs alongside the attention core
    cp_bwd: np.ndarray
    ep_fwd: np.ndarray  # blocking
    ep_bwd: np.ndarray
    zero3_fwd: np.ndarray  # prefetched: overlaps the layer compute
    zero3_bwd: np.ndarray
    zero3_bwd_blocking: np.ndarray  # the reduce-scatter, when the framework does not overlap it
    pp_p2p: np.ndarray  # one boundary crossing of one micro-batch
    dp_bucket: np.ndarray  # one gradient bucket's reduction
    dp_buckets: np.ndarray  # buckets per reduction
    dp_reductions: np.ndarray  # gradient reductions per step (1, or m with ZeRO-2, 0 with ZeRO-3)
    dp_param_gather: np.ndarray  # ZeRO-1/2 all-gather of updated weights after the optimizer
    inter_node: dict[str, np.ndarray]  # per group kind: does it cross nodes
    bytes_per_step: dict[str, np.ndarray]  # per parallelism, bytes one rank sends per step

    @property
    def dp_reduction(self) -> np.ndarray:
        return self.dp_bucket * self.dp_buckets


def communication(job: TrainingJob, batch: LayoutBatch, cost: CollectiveCost, gpus_per_node: int) -> CommCosts:
    model = job.model
    groups = layout_groups(batch, gpus_per_node)
    t = batch.tp
    m = micro_batches(job, batch)
    seq_local = job.seq_len / batch.cp
    act = batch.mbs * seq_local * model.hidden * job.activation_bytes
    sp = batch.seq_parallel
    moe_share = model.moe_layers / model.layers
    execution = job.execution

    # tensor parallel
    ag = price(cost, "all_gather", act, groups["tp"])
    rs = price(cost, "reduce_scatter", act, groups["tp"])
    ar = price(cost, "all_reduce", act, groups["tp"])
    tp_fwd = np.where(sp, 2 * ag + 2 * rs, 2 * ar)
    tp_bwd_critical = np.where(sp, 2 * ag, 0.0)  # the output gradient's all-gathers: the next GEMM needs them
    tp_bwd_hideable = np.where(sp, 2 * ag + 2 * rs, 2 * ar)
    loss_reduction = price(cost, "all_reduce", batch.mbs * seq_local * 4.0, groups["tp"])
    tp_head_fwd = np.where(sp, ag, 0.0) + 3 * loss_reduction
    tp_head_bwd_hideable = np.where(sp, rs, ar)
    none = np.zeros_like(tp_fwd)
    if execution.tp_backward_overlap:
        tp_bwd_blocking, tp_bwd_overlapped = tp_bwd_critical, tp_bwd_hideable
        tp_head_bwd_blocking, tp_head_bwd_overlapped = none, tp_head_bwd_hideable
    else:
        tp_bwd_blocking, tp_bwd_overlapped = tp_bwd_critical + tp_bwd_hideable, none
        tp_head_bwd_blocking, tp_head_bwd_overlapped = tp_head_bwd_hideable, none

    # context parallel ring
    kv_split = np.minimum(t, model.kv_heads)
    kv_chunk = 2 * batch.mbs * seq_local * model.kv_dim / kv_split * job.activation_bytes
    cp_fwd = (batch.cp - 1) * price(cost, "sendrecv", kv_chunk, groups["cp"])

    # expert parallel
    a2a_bytes = (model.moe.top_k * job.expert_load if model.moe else 0) * act / t
    ep_fwd = moe_share * 2 * price(cost, "all_to_all", a2a_bytes, groups["ep"])

    # ZeRO-3 per-layer gathers, dense weights over dp x cp, expert weights over their own group
    dense, expert = stage_parameters(job, batch)
    layers = layers_per_chunk(job, batch) * batch.vpp
    prec = job.precision
    zero3 = batch.zero == 3

    def per_layer(op, nbytes):
        return (price(cost, op, np.where(zero3, dense / layers * nbytes, 0.0), groups["dp"])
                + price(cost, op, np.where(zero3, expert / layers * nbytes, 0.0), groups["edp"]))

    zero3_fwd = per_layer("all_gather", prec.param_bytes)
    zero3_reduce_scatter = per_layer("reduce_scatter", prec.grad_bytes)
    if execution.zero3_reduce_scatter_overlap:
        zero3_bwd, zero3_bwd_blocking = zero3_fwd + zero3_reduce_scatter, np.zeros_like(zero3_fwd)
    else:
        zero3_bwd, zero3_bwd_blocking = zero3_fwd, zero3_reduce_scatter

    # data parallel gradient reduction in buckets, and the ZeRO-1/2 weight gather
    grad_bytes = (dense + expert) * prec.grad_bytes
    buckets = np.maximum(np.ceil(grad_bytes / job.bucket_bytes), 1)
    bucket_bytes = grad_bytes / buckets
    dense_share = dense / (dense + expert)
    reduce_op_cost = np.where(
        batch.zero == 0,
        price(cost, "all_reduce", bucket_bytes * dense_share, groups["dp"])
        + price(cost, "all_reduce", bucket_bytes * (1 - dense_share), groups["edp"]),
        price(cost, "reduce_scatter", bucket_bytes * dense_share, groups["dp"])
        + price(cost, "reduce_scatter", bucket_bytes * (1 - dense_share), groups["edp"]),
    )
    reductions = np.select([batch.zero <= 1, batch.zero == 2], [1, m], 0)
    gather_weights = (batch.zero == 1) | (batch.zero == 2)
    param_gather = (price(cost, "all_gather", np.where(gather_weights, dense * prec.param_bytes, 0.0), groups["dp"])
                    + price(cost, "all_gather", np.where(gather_weights, expert * prec.param_bytes, 0.0), groups["edp"]))

    # pipeline boundary
    p2p_bytes = np.where(sp, act / t, act)
    # priced only where there is a boundary: a measured table need not have the pp=1 group's placement
    pp_p2p = price(cost, "sendrecv", np.where(batch.pp > 1, p2p_bytes, 0.0), groups["pp"])

    passes = m * layers  # layer passes per step, forward (backward has as many)
    bytes_per_step = {
        "tp": np.where(t > 1, passes * act * (t - 1) / t * np.where(sp, 10, 8), 0.0),
        "cp": passes * (batch.cp - 1) * kv_chunk * 3,
        "ep": passes * moe_share * 4 * a2a_bytes * (batch.ep - 1) / batch.ep,
        "dp": (reductions * grad_bytes * np.where(batch.zero == 0, 2, 1)
               + np.where(gather_weights, dense * prec.param_bytes, 0.0)
               + np.where(zero3, m * (dense + expert) * (2 * prec.param_bytes + prec.grad_bytes), 0.0))
        * (batch.dp * batch.cp - 1) / (batch.dp * batch.cp),
        "pp": np.where(batch.pp > 1, 2 * m * batch.vpp * p2p_bytes, 0.0),
    }
    return CommCosts(
        tp_fwd=tp_fwd, tp_bwd_blocking=tp_bwd_blocking, tp_bwd_overlapped=tp_bwd_overlapped,
        tp_head_fwd=tp_head_fwd, tp_head_bwd_blocking=tp_head_bwd_blocking, tp_head_bwd_overlapped=tp_head_bwd_overlapped,
        cp_fwd=cp_fwd, cp_bwd=2 * cp_fwd, ep_fwd=ep_fwd, ep_bwd=ep_fwd,
        zero3_fwd=zero3_fwd, zero3_bwd=zero3_bwd, zero3_bwd_blocking=zero3_bwd_blocking, pp_p2p=pp_p2p,
        dp_bucket=reduce_op_cost, dp_buckets=buckets, dp_reductions=reductions, dp_param_gather=param_gather,
        inter_node={name: group[2] > 1 for name, group in groups.items()},
        bytes_per_step=bytes_per_step,
    )
