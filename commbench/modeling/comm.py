"""Which collectives each parallelism issues, how big they are, and what they cost on their group.

One function per parallelism prices its collectives; each priced collective carries the bytes one
rank sends in it (the nccl-tests busbw factor times its size), and the bytes per step that `plan`
reports are those summed over the collectives a layer pass, a micro-batch or a step issues.

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
  CP (ring)     forward (cp-1) sendrecv of the local K,V (b*(s/cp)*(k+v)*2 bytes, split by TP; with MLA the
                per-head keys and values rebuilt from the latent: heads*(d_nope+d_rope+d_v)),
                backward twice that (K,V again and dK,dV); overlapped with the attention core
  EP            per MoE layer: all-to-all dispatch + combine forward, the same two backward, of
                k * load * A / t bytes per rank (tokens are sequence-split across TP ranks); under the
                job's routing skew each is paced by the rank receiving most, so it is priced as
                all_to_allv at those bytes times the expected max/mean load (commbench.modeling.routing)
  ZeRO-3/FSDP   per layer: all-gather of its weights forward, again backward, reduce-scatter of
                its gradients; prefetched, so overlapped with the layer's compute (the reduce-scatter
                blocks instead with Execution.zero3_reduce_scatter_overlap False)
Per step:
  DP            all-reduce (ZeRO-0) or reduce-scatter (ZeRO-1, ZeRO-2 per micro-batch) of the
                stage's gradients in buckets; ZeRO-1/2 then all-gather the updated bf16 weights
  PP            one sendrecv of A (A/t with SP) per micro-batch per boundary, forward and backward,
                v times as many with v interleaved chunks
Every collective is priced by the CollectiveCost for its group's size and placement. The bytes per
step count the layers' collectives, the gradient reduction, the weight gathers and the pipeline
sends (not the head's loss all-reduces nor the forward collectives full recompute repeats).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commbench.modeling.job import TrainingJob
from commbench.modeling.layout import LayoutBatch, layout_groups
from commbench.modeling.memory import layers_per_chunk, micro_batches, stage_parameters
from commbench.modeling.network import CollectiveCost, busbw_factor, price
from commbench.modeling.routing import expected_imbalance, parse_routing


@dataclass(frozen=True)
class Traffic:
    """Collectives priced together: the seconds they take and the bytes one rank sends in them."""

    seconds: np.ndarray
    sent: np.ndarray

    __array_ufunc__ = None  # `array * traffic` must reach __rmul__, not broadcast over a Traffic object

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(self.seconds + other.seconds, self.sent + other.sent)

    def __rmul__(self, count) -> Traffic:
        return Traffic(count * self.seconds, count * self.sent)

    @staticmethod
    def choose(condition: np.ndarray, if_true: Traffic, if_false: Traffic) -> Traffic:
        return Traffic(np.where(condition, if_true.seconds, if_false.seconds),
                       np.where(condition, if_true.sent, if_false.sent))


@dataclass(frozen=True)
class _Pricing:
    """What every parallelism's pricing reads: the job, its layouts, their groups and sizes."""

    job: TrainingJob
    batch: LayoutBatch
    cost: CollectiveCost
    groups: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
    micro_batches: np.ndarray
    layers: np.ndarray  # layers one pipeline rank holds, over all its chunks
    seq_local: np.ndarray  # tokens of one sequence on one context-parallel rank
    activation: np.ndarray  # A: bytes of one micro-batch's activation

    @property
    def layer_passes(self) -> np.ndarray:
        """Forward layer passes per step (the backward has as many)."""
        return self.micro_batches * self.layers

    def collective(self, op: str, size, group: str) -> Traffic:
        members = self.groups[group][0]
        sent = np.where(members > 1, busbw_factor(op, members) * size, 0.0)
        return Traffic(price(self.cost, op, size, self.groups[group]), sent)

    def over_replicas(self, op: str, dense_bytes, expert_bytes) -> Traffic:
        """One collective among the ranks holding the same weights: the dense share over the data x
        context parallel group, the experts' share over their expert-data-parallel group."""
        return self.collective(op, dense_bytes, "dp") + self.collective(op, expert_bytes, "edp")

    def zeros(self) -> Traffic:
        none = np.zeros(len(self.batch))
        return Traffic(none, none)


@dataclass
class TensorParallelCosts:
    """Seconds per layer per micro-batch (head: per micro-batch on the last stage)."""

    fwd: np.ndarray  # blocking
    bwd_blocking: np.ndarray
    bwd_overlapped: np.ndarray  # runs alongside the backward GEMMs
    head_fwd: np.ndarray  # blocking
    head_bwd_blocking: np.ndarray
    head_bwd_overlapped: np.ndarray  # runs alongside the head's weight-gradient GEMM
    sent_per_step: np.ndarray  # bytes one rank sends in the layers' TP collectives


@dataclass
class ContextParallelCosts:
    """Seconds of the ring per layer per micro-batch; both run alongside the attention core."""

    fwd: np.ndarray
    bwd: np.ndarray
    sent_per_step: np.ndarray


@dataclass
class ExpertParallelCosts:
    """Seconds of the blocking all-to-alls per layer per micro-batch (averaged over MoE and dense layers)."""

    fwd: np.ndarray
    bwd: np.ndarray
    sent_per_step: np.ndarray
    uniform_fwd: np.ndarray  # what fwd would be with a perfectly even router
    imbalance: np.ndarray  # expected max / mean bytes received per EP rank under the job's routing

    @property
    def skew_share(self) -> np.ndarray:
        """The part of EP time the skew adds (fwd and bwd scale alike): 1 - uniform / skewed."""
        return np.where(self.fwd > 0, 1.0 - self.uniform_fwd / np.where(self.fwd > 0, self.fwd, 1.0), 0.0)


@dataclass
class Zero3Costs:
    """Seconds of ZeRO-3's per-layer weight gathers and gradient reduce-scatters, per micro-batch."""

    fwd: np.ndarray  # prefetched: overlaps the layer compute
    bwd: np.ndarray  # overlapped
    bwd_blocking: np.ndarray  # the reduce-scatter, when the framework does not overlap it
    sent_per_step: np.ndarray


@dataclass
class DataParallelCosts:
    """The per-step gradient reduction in buckets and the ZeRO-1/2 weight gather."""

    bucket: np.ndarray  # seconds of one gradient bucket's reduction
    buckets: np.ndarray  # buckets per reduction
    reductions: np.ndarray  # gradient reductions per step (1, or m with ZeRO-2, 0 with ZeRO-3)
    param_gather: np.ndarray  # seconds of the ZeRO-1/2 all-gather of updated weights after the optimizer
    sent_per_step: np.ndarray

    @property
    def reduction(self) -> np.ndarray:
        """Seconds of one whole gradient reduction."""
        return self.bucket * self.buckets


@dataclass
class PipelineCosts:
    p2p: np.ndarray  # seconds of one boundary crossing of one micro-batch
    sent_per_step: np.ndarray


@dataclass
class CommCosts:
    """Every parallelism's collectives for a batch of layouts."""

    tp: TensorParallelCosts
    cp: ContextParallelCosts
    ep: ExpertParallelCosts
    zero3: Zero3Costs
    dp: DataParallelCosts
    pp: PipelineCosts
    groups: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]  # per group kind: (size, ranks_per_domain, domains)

    @property
    def bytes_per_step(self) -> dict[str, np.ndarray]:
        """Per parallelism, the bytes one rank sends per step; ZeRO-3's gathers count as data parallel."""
        return {"tp": self.tp.sent_per_step, "cp": self.cp.sent_per_step, "ep": self.ep.sent_per_step,
                "dp": self.dp.sent_per_step + self.zero3.sent_per_step, "pp": self.pp.sent_per_step}


def communication(job: TrainingJob, batch: LayoutBatch, cost: CollectiveCost, nvlink_domain: int) -> CommCosts:
    """Every collective of the layouts, each group placed in NVLink domains of `nvlink_domain` GPUs."""
    seq_local = job.seq_len / batch.cp
    pricing = _Pricing(
        job=job, batch=batch, cost=cost, groups=layout_groups(batch, nvlink_domain),
        micro_batches=micro_batches(job, batch), layers=layers_per_chunk(job, batch) * batch.vpp,
        seq_local=seq_local, activation=batch.mbs * seq_local * job.model.hidden * job.activation_bytes,
    )
    return CommCosts(
        tp=tensor_parallel(pricing), cp=context_parallel(pricing), ep=expert_parallel(pricing),
        zero3=zero3_sharding(pricing), dp=data_parallel(pricing), pp=pipeline_parallel(pricing),
        groups=pricing.groups,
    )


def tensor_parallel(p: _Pricing) -> TensorParallelCosts:
    sp = p.batch.seq_parallel
    all_gather = p.collective("all_gather", p.activation, "tp")
    reduce_scatter = p.collective("reduce_scatter", p.activation, "tp")
    all_reduce = p.collective("all_reduce", p.activation, "tp")
    none = p.zeros()
    layer_fwd = Traffic.choose(sp, 2 * all_gather + 2 * reduce_scatter, 2 * all_reduce)
    bwd_critical = Traffic.choose(sp, 2 * all_gather, none)  # the output gradient's all-gathers: the next GEMM needs them
    bwd_hideable = Traffic.choose(sp, 2 * all_gather + 2 * reduce_scatter, 2 * all_reduce)
    loss_reduction = p.collective("all_reduce", p.batch.mbs * p.seq_local * 4.0, "tp")  # one fp32 per token
    head_fwd = Traffic.choose(sp, all_gather, none) + 3 * loss_reduction
    head_bwd_hideable = Traffic.choose(sp, reduce_scatter, all_reduce)
    if p.job.execution.tp_backward_overlap:
        bwd_blocking, bwd_overlapped = bwd_critical, bwd_hideable
        head_bwd_blocking, head_bwd_overlapped = none, head_bwd_hideable
    else:
        bwd_blocking, bwd_overlapped = bwd_critical + bwd_hideable, none
        head_bwd_blocking, head_bwd_overlapped = head_bwd_hideable, none
    return TensorParallelCosts(
        fwd=layer_fwd.seconds, bwd_blocking=bwd_blocking.seconds, bwd_overlapped=bwd_overlapped.seconds,
        head_fwd=head_fwd.seconds, head_bwd_blocking=head_bwd_blocking.seconds,
        head_bwd_overlapped=head_bwd_overlapped.seconds,
        sent_per_step=p.layer_passes * (layer_fwd + bwd_blocking + bwd_overlapped).sent,
    )


def context_parallel(p: _Pricing) -> ContextParallelCosts:
    model = p.job.model
    kv_split = np.minimum(p.batch.tp, model.kv_heads)
    # keys and values as the attention core takes them (MLA: rebuilt per head from the latent)
    kv_chunk = p.batch.mbs * p.seq_local * (model.kv_dim + model.v_dim) / kv_split * p.job.activation_bytes
    fwd = (p.batch.cp - 1) * p.collective("sendrecv", kv_chunk, "cp")
    bwd = 2 * fwd  # K,V again, and dK,dV
    return ContextParallelCosts(fwd=fwd.seconds, bwd=bwd.seconds, sent_per_step=p.layer_passes * (fwd + bwd).sent)


def expert_parallel(p: _Pricing) -> ExpertParallelCosts:
    model = p.job.model
    moe_share = model.moe_layers / model.layers
    a2a_bytes = (model.moe.top_k * p.job.expert_load if model.moe else 0) * p.activation / p.batch.tp
    uniform = moe_share * 2 * p.collective("all_to_all", a2a_bytes, "ep")  # dispatch + combine
    ep = p.groups["ep"][0]
    imbalance = _imbalance(p.job.routing, model.moe.num_experts, ep) if model.moe else np.ones(len(p.batch))
    if p.job.routing == "uniform" and (imbalance == 1).all():
        seconds = uniform.seconds
    else:  # every rank sends the mean; the hottest rank receives imbalance x the mean and sets the pace
        seconds = moe_share * 2 * p.collective("all_to_allv", a2a_bytes * imbalance, "ep").seconds
    return ExpertParallelCosts(fwd=seconds, bwd=seconds, sent_per_step=p.layer_passes * (uniform + uniform).sent,
                               uniform_fwd=uniform.seconds, imbalance=imbalance)


def _imbalance(routing: str, experts: int, ep: np.ndarray) -> np.ndarray:
    """Expected max/mean received load for each layout's EP group size (one model call per size)."""
    parsed = parse_routing(routing)
    sizes, which = np.unique(ep, return_inverse=True)
    return np.array([expected_imbalance(parsed, experts, int(n)) for n in sizes])[which.reshape(-1)]


def zero3_sharding(p: _Pricing) -> Zero3Costs:
    dense, expert = stage_parameters(p.job, p.batch)
    zero3 = p.batch.zero == 3
    prec = p.job.precision

    def per_layer(op: str, bytes_per_param: float) -> Traffic:
        return p.over_replicas(op, np.where(zero3, dense / p.layers * bytes_per_param, 0.0),
                               np.where(zero3, expert / p.layers * bytes_per_param, 0.0))

    gather = per_layer("all_gather", p.job.gathered_param_bytes)
    reduce_scatter = per_layer("reduce_scatter", prec.grad_bytes)
    if p.job.execution.zero3_reduce_scatter_overlap:
        bwd, bwd_blocking = gather + reduce_scatter, p.zeros()
    else:
        bwd, bwd_blocking = gather, reduce_scatter
    return Zero3Costs(fwd=gather.seconds, bwd=bwd.seconds, bwd_blocking=bwd_blocking.seconds,
                      sent_per_step=p.layer_passes * (gather + bwd + bwd_blocking).sent)


def data_parallel(p: _Pricing) -> DataParallelCosts:
    batch, prec = p.batch, p.job.precision
    dense, expert = stage_parameters(p.job, batch)
    grad_bytes = (dense + expert) * prec.grad_bytes
    buckets = np.maximum(np.ceil(grad_bytes / p.job.bucket_bytes), 1)
    bucket_bytes = grad_bytes / buckets
    dense_share = dense / (dense + expert)
    bucket = Traffic.choose(
        batch.zero == 0,
        p.over_replicas("all_reduce", bucket_bytes * dense_share, bucket_bytes * (1 - dense_share)),
        p.over_replicas("reduce_scatter", bucket_bytes * dense_share, bucket_bytes * (1 - dense_share)),
    )
    reductions = np.select([batch.zero <= 1, batch.zero == 2], [1, p.micro_batches], 0)
    gather_weights = (batch.zero == 1) | (batch.zero == 2)
    gathered = p.job.gathered_param_bytes  # in the width sent: FP8 with --fp8-param-gather
    param_gather = p.over_replicas("all_gather", np.where(gather_weights, dense * gathered, 0.0),
                                   np.where(gather_weights, expert * gathered, 0.0))
    return DataParallelCosts(
        bucket=bucket.seconds, buckets=buckets, reductions=reductions, param_gather=param_gather.seconds,
        sent_per_step=reductions * buckets * bucket.sent + param_gather.sent,
    )


def pipeline_parallel(p: _Pricing) -> PipelineCosts:
    batch = p.batch
    p2p_bytes = np.where(batch.seq_parallel, p.activation / batch.tp, p.activation)
    # priced only where there is a boundary: a measured table need not have the pp=1 group's placement
    send = p.collective("sendrecv", np.where(batch.pp > 1, p2p_bytes, 0.0), "pp")
    return PipelineCosts(p2p=send.seconds, sent_per_step=2 * p.micro_batches * batch.vpp * send.sent)
