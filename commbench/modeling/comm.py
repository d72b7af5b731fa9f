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
  EP            per MoE layer, forward and again backward, by the job's dispatcher (MoEExecution):
                alltoall: all-to-all over EP of k * kept * A / t bytes per rank (tokens are
                sequence-split across TP ranks; fp8 dispatch scales the dispatch's bytes), an
                all-gather over ETP of what arrived, and the combine's reduce-scatter + all-to-all;
                under the job's routing skew (or a capacity factor) each all-to-all is an
                all_to_allv: from a measured curve of the routing at the hottest rank's expected
                bytes (routing.expert_load); without one, an EP group spanning domains is paced by
                the busiest NIC's inbound bytes between domains (routing.domain_load over the ranks
                sharing a NIC: the hottest rank's with a NIC per GPU, a whole domain's behind one
                link or under DeepEP) beside the hottest rank's exchange inside its domain.
                allgather: all-gather + reduce-scatter of the ETP x EP group's tokens. flex (DeepEP):
                each token crosses the network once per other NVLink domain holding one of its experts, and
                fans out over NVLink inside it; the slower tier sets the pace
                MoE layers without shared experts have no TP-split MLP: their TP collectives are the
                attention block's only
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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from commbench.modeling.job import DISPATCH_DTYPES, TrainingJob
from commbench.modeling.kernels import Numbers
from commbench.modeling.layout import LayoutBatch, layout_groups
from commbench.modeling.limits import MAX_GPUS
from commbench.modeling.memory import layers_per_chunk, micro_batches, stage_parameters
from commbench.modeling.models import ModelSpec, MoESpec
from commbench.modeling.network import CollectiveCost, Group, Placement, busbw_factor, price
from commbench.modeling.routing import domain_load, expert_load


@dataclass(frozen=True)
class Traffic:
    """Collectives priced together: the seconds they take and the bytes one rank sends in them."""

    seconds: np.ndarray
    sent: np.ndarray

    __array_ufunc__ = None  # `array * traffic` must reach __rmul__, not broadcast over a Traffic object

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(self.seconds + other.seconds, self.sent + other.sent)

    def __rmul__(self, count: Numbers) -> Traffic:
        return Traffic(count * self.seconds, count * self.sent)

    @staticmethod
    def choose(condition: np.ndarray, if_true: Traffic, if_false: Traffic) -> Traffic:
        return Traffic(
            np.where(condition, if_true.seconds, if_false.seconds), np.where(condition, if_true.sent, if_false.sent)
        )


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
        passes: np.ndarray = self.micro_batches * self.layers
        return passes

    def collective(self, op: str, size: Numbers, group: str) -> Traffic:
        members = self.groups[group][0]
        sent = np.where(members > 1, busbw_factor(op, members) * size, 0.0)
        return Traffic(price(self.cost, op, size, self.groups[group]), sent)

    def over_replicas(self, op: str, dense_bytes: Numbers, expert_bytes: Numbers) -> Traffic:
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
    """Seconds of the token dispatch and combine per layer per micro-batch (averaged over MoE and
    dense layers), and what one MoE layer's exchange moves."""

    fwd: np.ndarray
    bwd: np.ndarray
    sent_per_step: np.ndarray
    uniform_fwd: np.ndarray  # what fwd would be with a perfectly even router
    imbalance: np.ndarray  # expected max / mean bytes received per EP rank under the job's routing
    hideable: np.ndarray | None = None  # whether 1F1B A2A overlap can hide it (two micro-batches in flight)
    parts: dict[str, Any] | None = None  # per MoE layer per micro-batch: bytes and seconds of dispatch and combine

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
        seconds: np.ndarray = self.bucket * self.buckets
        return seconds


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
        return {
            "tp": self.tp.sent_per_step,
            "cp": self.cp.sent_per_step,
            "ep": self.ep.sent_per_step,
            "dp": self.dp.sent_per_step + self.zero3.sent_per_step,
            "pp": self.pp.sent_per_step,
        }


def communication(job: TrainingJob, batch: LayoutBatch, cost: CollectiveCost, nvlink_domain: int) -> CommCosts:
    """Every collective of the layouts, each group placed in NVLink domains of `nvlink_domain` GPUs."""
    seq_local = job.seq_len / batch.cp
    pricing = _Pricing(
        job=job,
        batch=batch,
        cost=cost,
        groups=layout_groups(batch, nvlink_domain),
        micro_batches=micro_batches(job, batch),
        layers=layers_per_chunk(job, batch) * batch.vpp,
        seq_local=seq_local,
        activation=batch.mbs * seq_local * job.model.hidden * job.activation_bytes,
    )
    return CommCosts(
        tp=tensor_parallel(pricing),
        cp=context_parallel(pricing),
        ep=expert_parallel(pricing),
        zero3=zero3_sharding(pricing),
        dp=data_parallel(pricing),
        pp=pipeline_parallel(pricing),
        groups=pricing.groups,
    )


def _tp_blocks(model: ModelSpec) -> float:
    """TP-split blocks per layer, averaged over layers: attention, and the MLP where it is a TP MLP
    (dense layers, and MoE layers with shared experts; routed experts gather over ETP instead)."""
    if not model.moe:
        return 2.0
    mlp = (model.dense_layers + model.moe_layers * bool(model.moe.shared_ffn_hidden)) / model.layers
    return 1.0 + mlp


def tensor_parallel(p: _Pricing) -> TensorParallelCosts:
    sp = p.batch.seq_parallel
    blocks = _tp_blocks(p.job.model)
    all_gather = p.collective("all_gather", p.activation, "tp")
    reduce_scatter = p.collective("reduce_scatter", p.activation, "tp")
    all_reduce = p.collective("all_reduce", p.activation, "tp")
    none = p.zeros()
    layer_fwd = Traffic.choose(sp, blocks * all_gather + blocks * reduce_scatter, blocks * all_reduce)
    # the output gradient's all-gathers: the next GEMM needs them
    bwd_critical = Traffic.choose(sp, blocks * all_gather, none)
    bwd_hideable = Traffic.choose(sp, blocks * all_gather + blocks * reduce_scatter, blocks * all_reduce)
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
        fwd=layer_fwd.seconds,
        bwd_blocking=bwd_blocking.seconds,
        bwd_overlapped=bwd_overlapped.seconds,
        head_fwd=head_fwd.seconds,
        head_bwd_blocking=head_bwd_blocking.seconds,
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
    if not model.moe:
        none = np.zeros(len(p.batch))
        return ExpertParallelCosts(none, none, none, none, np.ones(len(p.batch)), none > 0, None)
    moe, options = model.moe, p.job.moe_execution
    load = expert_load(p.job.routing, moe.num_experts, p.batch.ep, p.job.capacity_factor, options.pad_to_capacity)
    tokens = p.activation / p.batch.tp  # bytes of this rank's n_l tokens in the activation dtype
    dispatch_scale = DISPATCH_DTYPES[options.dispatch_dtype] / p.job.activation_bytes
    exchange = _DISPATCHERS[options.dispatcher]
    kept = load.kept * p.job.expert_load
    balanced = np.array_equal(load.hottest, load.kept)
    loads = _Loads(kept, load.hottest * p.job.expert_load, kept)
    if not balanced:
        size, per_domain, _ = p.groups["ep"]
        # DeepEP lands a token on the GPU of its source's rail and forwards it over NVLink, so a
        # domain's NICs share its inbound; NCCL's all-to-all lands it on the destination's own NIC
        pooled = per_domain if options.dispatcher == "flex" else np.minimum(per_domain, p.cost.ranks_per_nic)
        busiest = domain_load(
            p.job.routing, moe.num_experts, size, pooled, p.job.capacity_factor, options.pad_to_capacity
        )
        loads = _Loads(kept, loads.hottest, busiest * p.job.expert_load)
    layer = exchange(p, moe, tokens, dispatch_scale, loads)
    even = layer if balanced else exchange(p, moe, tokens, dispatch_scale, _Loads(kept, kept, kept))
    share = model.moe_layers / model.layers
    seconds = share * layer["seconds"]
    sent = share * (layer["dispatch"]["sent_bytes"] + layer["combine"]["sent_bytes"])
    imbalance = np.where(load.kept > 0, load.hottest / np.where(load.kept > 0, load.kept, 1.0), 1.0)
    return ExpertParallelCosts(
        fwd=seconds,
        bwd=seconds,
        sent_per_step=p.layer_passes * 2 * sent,
        uniform_fwd=share * even["seconds"],
        imbalance=imbalance,
        hideable=p.micro_batches > 1,
        parts=layer,
    )


def _tiers(p: _Pricing, group: str, sent: np.ndarray) -> dict[str, np.ndarray]:
    """Bytes one rank sends inside its NVLink domain and across domains in an even exchange over the group."""
    size, per_node, _ = p.groups[group]
    peers = np.maximum(size - 1, 1)
    return {"intra_domain_bytes": sent * (per_node - 1) / peers, "inter_domain_bytes": sent * (size - per_node) / peers}


def _exchange(p: _Pricing, op: str, size: Numbers, group: str) -> dict[str, Any]:
    traffic = p.collective(op, size, group)
    return {
        "op": op,
        "group": group,
        "size_bytes": np.broadcast_to(size, traffic.seconds.shape) + 0.0,
        "seconds": traffic.seconds,
        "sent_bytes": traffic.sent,
        **_tiers(p, group, traffic.sent),
    }


@dataclass(frozen=True)
class _Loads:
    """Token copies of an EP exchange over a perfectly even router's (arrays per layout): kept (not
    dropped), on the hottest rank, and through the busiest NIC between domains (the ranks sharing
    one NIC pool their bytes: a domain's under DeepEP, the hottest rank's with a NIC per GPU)."""

    kept: np.ndarray
    hottest: np.ndarray
    link: np.ndarray


def uneven_all_to_all_seconds(
    cost: CollectiveCost, copies: Numbers, hottest: np.ndarray, link: np.ndarray, group: Group
) -> np.ndarray:
    """Seconds of an EP all_to_allv of `copies` bytes per rank under an even router, its hottest rank
    and busiest NIC carrying `hottest` and `link` times their even share, on `group` (size,
    ranks_per_domain, domains arrays). From a measured all_to_allv curve of the routing at the
    hottest rank's bytes where the cost has one for the group's placement. Otherwise, on a group
    spanning domains with several ranks in each, as the hierarchical all-to-all runs: the busiest NIC
    between domains carries what the ranks sharing it receive from the other domains (hot and cold
    ranks' bytes together), while the hottest rank's exchange inside its domain runs beside it; the
    slower sets the pace."""
    size, per_domain, domains = group
    direct = price(cost, "all_to_allv", copies * hottest, group)
    spans = (domains > 1) & (per_domain > 1)
    placements = {(int(r), int(k)) for r, k in zip(per_domain[spans], domains[spans])}
    measured = [r * (MAX_GPUS + 1) + k for r, k in placements if cost.has_curve("all_to_allv", Placement(r, k))]
    composed = spans & ~np.isin(per_domain * (MAX_GPUS + 1) + domains, measured)
    if not composed.any():
        return direct
    inter = price(cost, "all_to_all", np.where(composed, copies * link, 0.0), group)
    inside = np.where(composed, copies * hottest * per_domain / size, 0.0)
    intra = price(cost, "all_to_all", inside, (per_domain, per_domain, np.ones_like(domains)))
    return np.where(composed, np.maximum(inter, intra), direct)


def _uneven_exchange(p: _Pricing, copies: Numbers, loads: _Loads) -> dict[str, Any]:
    """An EP all_to_allv at the hottest rank's bytes, timed by uneven_all_to_all_seconds."""
    exchange = _exchange(p, "all_to_allv", copies * loads.hottest, "ep")
    exchange["seconds"] = uneven_all_to_all_seconds(p.cost, copies, loads.hottest, loads.link, p.groups["ep"])
    exchange["link_load_over_even"] = np.broadcast_to(loads.link, exchange["seconds"].shape) + 0.0
    return exchange


def _alltoall_dispatch(
    p: _Pricing, moe: MoESpec, tokens: Numbers, dispatch_scale: float, loads: _Loads
) -> dict[str, Any]:
    """All-to-all over EP of the k copies (under an uneven load the busiest receiver or domain sets
    the pace: _uneven_exchange), then all-gather over ETP of what arrived; combine the reverse."""
    uneven = p.job.routing != "uniform" or p.job.capacity_factor is not None
    copies = moe.top_k * tokens
    if uneven:
        dispatch = _uneven_exchange(p, copies * dispatch_scale, loads)
        combine = _uneven_exchange(p, copies, loads)
    else:
        dispatch = _exchange(p, "all_to_all", copies * dispatch_scale * loads.kept, "ep")
        combine = _exchange(p, "all_to_all", copies * loads.kept, "ep")
    gathered = p.batch.etp * copies * loads.hottest
    gather = _exchange(p, "all_gather", gathered * dispatch_scale, "etp")
    scatter = _exchange(p, "reduce_scatter", gathered, "etp")
    seconds = dispatch["seconds"] + combine["seconds"] + gather["seconds"] + scatter["seconds"]
    return {
        "dispatcher": "alltoall",
        "dispatch": dispatch,
        "combine": combine,
        "etp_gather": gather,
        "etp_scatter": scatter,
        "seconds": seconds,
    }


def _allgather_dispatch(
    p: _Pricing, moe: MoESpec, tokens: Numbers, dispatch_scale: float, loads: _Loads
) -> dict[str, Any]:
    """Every rank gathers the tokens of its ETP x EP group and reduce-scatters the outputs:
    no per-copy traffic, so top-k and routing skew do not change its bytes."""
    gathered = p.batch.ep * p.batch.etp * tokens
    dispatch = _exchange(p, "all_gather", gathered * dispatch_scale, "tpep")
    combine = _exchange(p, "reduce_scatter", gathered, "tpep")
    return {
        "dispatcher": "allgather",
        "dispatch": dispatch,
        "combine": combine,
        "seconds": dispatch["seconds"] + combine["seconds"],
    }


def _flex_dispatch(p: _Pricing, moe: MoESpec, tokens: Numbers, dispatch_scale: float, loads: _Loads) -> dict[str, Any]:
    """DeepEP over the ETP x EP group (top-k expanded etp times): a token crosses the network once
    per other NVLink domain holding one of its experts, (N-1)(1-(1-1/N)^k) on average over N domains
    with experts spread evenly, and is fanned out over NVLink inside each; one fused kernel
    runs both tiers, so the slower one sets the pace. Under skew the network tier carries the
    busiest domain's load, the NVLink tier the hottest rank's."""
    _, per_node, nodes = p.groups["tpep"]
    kept = loads.kept
    copies = moe.top_k * p.batch.etp * kept
    remote = (nodes - 1) * (1 - (1 - 1 / nodes) ** (moe.top_k * p.batch.etp))
    safe = np.where(kept > 0, kept, 1.0)
    scale = np.where(kept > 0, loads.hottest / safe, 1.0)
    domain_scale = np.where(kept > 0, loads.link / safe, 1.0)
    nodes_group = (np.where(nodes > 1, nodes, 1), np.ones_like(nodes), nodes)
    domain_group = (per_node, per_node, np.ones_like(nodes))

    def tiers(element_scale: Numbers) -> dict[str, Any]:
        across = remote * kept * tokens * element_scale * domain_scale
        inside = copies * tokens * element_scale * scale
        inter = price(
            p.cost, "all_to_all", np.where(nodes > 1, across * nodes / np.maximum(nodes - 1, 1), 0.0), nodes_group
        )
        intra = price(p.cost, "all_to_all", inside, domain_group)
        seconds = np.maximum(inter, intra)
        return {
            "op": "deepep",
            "group": "tpep",
            "seconds": seconds,
            "inter_domain_seconds": inter,
            "intra_domain_seconds": intra,
            "inter_domain_bytes": across,
            "intra_domain_bytes": inside,
            "sent_bytes": across + inside * (per_node - 1) / np.maximum(per_node, 1),
        }

    dispatch, combine = tiers(dispatch_scale), tiers(1.0)
    return {
        "dispatcher": "flex",
        "dispatch": dispatch,
        "combine": combine,
        "seconds": dispatch["seconds"] + combine["seconds"],
    }


# a dispatcher's exchange: (pricing, MoE, tokens, dispatch scale, loads) -> its parts
Dispatcher = Callable[[_Pricing, MoESpec, Numbers, float, _Loads], dict[str, Any]]
_DISPATCHERS: dict[str, Dispatcher] = {
    "alltoall": _alltoall_dispatch,
    "allgather": _allgather_dispatch,
    "flex": _flex_dispatch,
}


def zero3_sharding(p: _Pricing) -> Zero3Costs:
    dense, expert = stage_parameters(p.job, p.batch)
    zero3 = p.batch.zero == 3
    prec = p.job.precision

    def per_layer(op: str, bytes_per_param: float) -> Traffic:
        return p.over_replicas(
            op,
            np.where(zero3, dense / p.layers * bytes_per_param, 0.0),
            np.where(zero3, expert / p.layers * bytes_per_param, 0.0),
        )

    gather = per_layer("all_gather", p.job.gathered_param_bytes)
    reduce_scatter = per_layer("reduce_scatter", prec.grad_bytes * p.job.trained_share)
    if p.job.execution.zero3_reduce_scatter_overlap:
        bwd, bwd_blocking = gather + reduce_scatter, p.zeros()
    else:
        bwd, bwd_blocking = gather, reduce_scatter
    return Zero3Costs(
        fwd=gather.seconds,
        bwd=bwd.seconds,
        bwd_blocking=bwd_blocking.seconds,
        sent_per_step=p.layer_passes * (gather + bwd + bwd_blocking).sent,
    )


def data_parallel(p: _Pricing) -> DataParallelCosts:
    batch, prec = p.batch, p.job.precision
    dense, expert = stage_parameters(p.job, batch)
    grad_bytes = (dense + expert) * prec.grad_bytes * p.job.trained_share  # LoRA: the adapters' only
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
    # in the width sent (FP8 with --fp8-param-gather); only what the optimizer updated (LoRA: the adapters)
    gathered = p.job.gathered_param_bytes * p.job.trained_share
    param_gather = p.over_replicas(
        "all_gather", np.where(gather_weights, dense * gathered, 0.0), np.where(gather_weights, expert * gathered, 0.0)
    )
    return DataParallelCosts(
        bucket=bucket.seconds,
        buckets=buckets,
        reductions=reductions,
        param_gather=param_gather.seconds,
        sent_per_step=reductions * buckets * bucket.sent + param_gather.sent,
    )


def pipeline_parallel(p: _Pricing) -> PipelineCosts:
    batch = p.batch
    p2p_bytes = np.where(batch.seq_parallel, p.activation / batch.tp, p.activation)
    # priced only where there is a boundary: a measured table need not have the pp=1 group's placement
    send = p.collective("sendrecv", np.where(batch.pp > 1, p2p_bytes, 0.0), "pp")
    return PipelineCosts(p2p=send.seconds, sent_per_step=2 * p.micro_batches * batch.vpp * send.sent)
