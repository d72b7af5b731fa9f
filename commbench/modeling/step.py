"""The closed-form step model: per-layer costs with overlap, then a whole step for many layouts at once.

Inside one layer (the event schedule in schedule.py reuses these per-op costs):
  forward   compute + blocking TP (or, with Execution.tp_forward_overlap, the part of the TP
            collectives the forward GEMMs do not cover) + blocking EP all-to-alls + the part of the CP ring the attention
            core does not cover; ZeRO-3's gather of the next layer is prefetched, so the layer takes
            max(that, gather)
  backward  compute (+ recompute) + the blocking TP all-gathers + whatever of the overlappable TP
            collectives the backward GEMMs do not cover + EP + uncovered CP; ZeRO-3 as forward with
            gather + reduce-scatter. Full recompute repeats the forward's blocking communication.
            Collectives the job's Execution says the framework does not overlap are added whole.
  head      (last stage) output GEMM + loss, the TP loss all-reduces, and in backward whatever of
            the input gradient's all-reduce the head's weight-gradient GEMM does not cover
Compute runs slower while a collective overlaps it (SM and HBM contention): the overlapped time
of gradient buckets, overlapped TP collectives and pipeline sends is charged the cluster's
slowdown extra (Cluster.slowdown: by the group's placement, a hierarchical group's NVLink phase at
the intra-node rate). Where the execution does not fuse gradient accumulation into the GEMMs (torch
eager), every micro-batch after the first adds a pass over the kept gradients.

Across layers and micro-batches, `StepModel.evaluate` prices thousands of layouts as arrays, for
the planner's screening. Pipeline with m micro-batches, p stages, v chunks: m*(F+B) + (p-1)*(F+B)/v
bubble (Narayanan et al. 2021) + 2*(p*v-1) boundary transfers on the fill/drain path; bucketed
gradient reduction overlapped with the last backward; optimizer; ZeRO-1/2 gather.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

import numpy as np

from commbench.modeling.cluster import Cluster
from commbench.modeling.comm import CommCosts, communication
from commbench.modeling.compute import LayerCompute, full_recompute_share, layer_compute
from commbench.modeling.job import MoEExecution, TrainingJob
from commbench.modeling.layout import LayoutBatch
from commbench.modeling.memory import (
    expert_data_parallel,
    heaviest_stage_memory,
    layers_per_chunk,
    micro_batches,
    stage_parameters,
)

CATEGORIES = ("compute", "recompute", "slowdown", "tp", "cp", "ep", "dp", "pp", "bubble", "optimizer")


@dataclass
class OpCosts:
    """Seconds per category of one forward (F) and one backward (B) op = one model chunk, one micro-batch."""

    forward: dict[str, np.ndarray]
    backward: dict[str, np.ndarray]
    head_forward: dict[str, np.ndarray]  # output layer + loss, added to the last stage's last chunk
    head_backward: dict[str, np.ndarray]
    comm_fwd: dict[str, np.ndarray]  # total (hidden or not) collective time per op, for the timeline
    comm_bwd: dict[str, np.ndarray]

    @property
    def f(self) -> np.ndarray:
        return summed(self.forward)

    @property
    def b(self) -> np.ndarray:
        return summed(self.backward)

    @property
    def head_fwd(self) -> np.ndarray:
        return summed(self.head_forward)

    @property
    def head_bwd(self) -> np.ndarray:
        return summed(self.head_backward)

    def head_category(self, name: str) -> float | np.ndarray:
        """Seconds of one category in one micro-batch's head, forward + backward."""
        return self.head_forward.get(name, 0.0) + self.head_backward.get(name, 0.0)


# (exposed seconds, slowdown seconds of the hidden part) of one collective, per layout
Exposed = tuple[np.ndarray, np.ndarray]


def summed(parts: Mapping[str, np.ndarray]) -> np.ndarray:
    """The parts' sum, per layout (sum() would also say 0 for no parts; every caller has some)."""
    return cast(np.ndarray, sum(parts.values()))


def op_costs(
    batch: LayoutBatch,
    lc: LayerCompute,
    cc: CommCosts,
    cluster: Cluster,
    layers: np.ndarray,
    tp_forward_overlap: bool = False,
    moe_execution: MoEExecution | None = None,
    moe_share: float = 0.0,
) -> OpCosts:
    slow = {name: cluster.slowdown(group) for name, group in cc.groups.items()}
    ep_fwd, ep_bwd = _exposed_ep(lc, cc, slow, moe_execution or MoEExecution(), moe_share)
    # Transformer Engine's TP communication overlap (userbuffers) runs only inside one NVLink domain:
    # a TP group across hosts on InfiniBand blocks on every layer's forward collectives
    _, _, tp_domains = cc.groups["tp"]
    tp_overlap = np.logical_and(tp_forward_overlap, np.asarray(tp_domains) <= 1)
    fwd = _layer_forward(lc, cc, slow, tp_overlap, ep_fwd)
    bwd = _layer_backward(batch, lc, cc, slow, tp_overlap, layers, ep_bwd)
    forward = {name: layers * value for name, value in fwd.items()}
    backward = {name: layers * value for name, value in bwd.items()}
    # the first layer's weights cannot be prefetched behind anything in the same op
    forward["dp"] = forward["dp"] + cc.zero3.fwd
    backward["dp"] = backward["dp"] + cc.zero3.fwd
    full = full_recompute_share(batch, layers)
    comm_fwd = {
        "tp": layers * cc.tp.fwd,
        "cp": layers * cc.cp.fwd,
        "ep": layers * cc.ep.fwd,
        "dp": layers * cc.zero3.fwd,
    }
    comm_bwd = {
        "tp": layers * (cc.tp.bwd_blocking + cc.tp.bwd_overlapped + full * cc.tp.fwd),
        "cp": layers * (cc.cp.bwd + full * cc.cp.fwd),
        "ep": layers * (cc.ep.bwd + full * cc.ep.fwd),
        "dp": layers * (cc.zero3.bwd + cc.zero3.bwd_blocking),
    }
    head_forward, head_backward = _head(lc, cc, slow)
    return OpCosts(forward, backward, head_forward, head_backward, comm_fwd, comm_bwd)


def _exposed_ring(lc: LayerCompute, cc: CommCosts, slow: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The forward CP ring: the part the attention core does not cover, and the slowdown of the part it does."""
    return np.maximum(0.0, cc.cp.fwd - lc.fwd_attention), slow["cp"] * np.minimum(cc.cp.fwd, lc.fwd_attention)


def _forward_tp(
    lc: LayerCompute, cc: CommCosts, slow: dict[str, np.ndarray], overlap: np.ndarray
) -> tuple[np.ndarray, float | np.ndarray]:
    """The forward TP collectives, per layout: blocking, or where `overlap` (Transformer Engine's TP
    communication overlap, a TP group inside one NVLink domain) hidden behind the forward GEMMs they
    feed, less the slowdown of the part that is hidden."""
    if not np.any(overlap):
        return cc.tp.fwd, 0.0
    hidden = np.minimum(cc.tp.fwd, lc.fwd_gemm)
    return cc.tp.fwd - np.where(overlap, hidden, 0.0), np.where(overlap, slow["tp"] * hidden, 0.0)


def _exposed_ep(
    lc: LayerCompute, cc: CommCosts, slow: dict[str, np.ndarray], options: MoEExecution, moe_share: float
) -> tuple[Exposed, Exposed]:
    """((exposed, slowdown) forward, the same backward) of the EP exchange per layer. Shared-expert
    overlap hides it behind the MoE layer's shared experts; 1F1B A2A overlap (with two micro-batches
    in flight) behind the other micro-batch's pass: the forward's behind a backward, and back."""
    hidden_fwd: float | np.ndarray = 0.0
    hidden_bwd: float | np.ndarray = 0.0
    if options.shared_expert_overlap and lc.moe is not None:
        hidden_fwd, hidden_bwd = moe_share * lc.moe.shared[0], moe_share * lc.moe.shared[1]
    if options.a2a_overlap and cc.ep.hideable is not None:
        hidden_fwd = hidden_fwd + np.where(cc.ep.hideable, lc.backward, 0.0)
        hidden_bwd = hidden_bwd + np.where(cc.ep.hideable, lc.forward, 0.0)
    pairs = []
    for seconds, hidden in ((cc.ep.fwd, hidden_fwd), (cc.ep.bwd, hidden_bwd)):
        covered = np.minimum(seconds, hidden)
        pairs.append((seconds - covered, slow["ep"] * covered))
    return pairs[0], pairs[1]


def _layer_forward(
    lc: LayerCompute, cc: CommCosts, slow: dict[str, np.ndarray], tp_overlap: np.ndarray, ep: Exposed
) -> dict[str, np.ndarray]:
    cp_exposed, cp_slowdown = _exposed_ring(lc, cc, slow)
    tp_exposed, tp_slowdown = _forward_tp(lc, cc, slow, tp_overlap)
    fwd = {
        "compute": lc.forward,
        "tp": tp_exposed,
        "ep": ep[0],
        "cp": cp_exposed,
        "slowdown": cp_slowdown + tp_slowdown + ep[1],
    }
    fwd_base = summed(fwd)
    fwd["dp"] = np.maximum(0.0, cc.zero3.fwd - fwd_base)
    fwd["slowdown"] = fwd["slowdown"] + slow["dp"] * np.minimum(cc.zero3.fwd, lc.forward)
    return fwd


def _layer_backward(
    batch: LayoutBatch,
    lc: LayerCompute,
    cc: CommCosts,
    slow: dict[str, np.ndarray],
    tp_overlap: np.ndarray,
    layers: np.ndarray,
    ep: Exposed,
) -> dict[str, np.ndarray]:
    full = full_recompute_share(batch, layers)  # full recompute repeats the forward's blocking communication
    cp_f_exposed, cp_f_slow = _exposed_ring(lc, cc, slow)
    tp_f_exposed, tp_f_slow = _forward_tp(lc, cc, slow, tp_overlap)
    recompute = lc.recompute(batch, layers)
    bwd = {
        "compute": lc.backward,
        "recompute": recompute,
        "tp": cc.tp.bwd_blocking + np.maximum(0.0, cc.tp.bwd_overlapped - lc.bwd_gemm) + full * tp_f_exposed,
        "ep": ep[0] + full * cc.ep.fwd,
        "cp": np.maximum(0.0, cc.cp.bwd - lc.bwd_attention) + full * cp_f_exposed,
        "slowdown": (
            ep[1]
            + slow["tp"] * np.minimum(cc.tp.bwd_overlapped, lc.bwd_gemm)
            + slow["cp"] * np.minimum(cc.cp.bwd, lc.bwd_attention)
            + full * (cp_f_slow + tp_f_slow)
        ),
    }
    bwd_base = summed(bwd)
    bwd["dp"] = np.maximum(0.0, cc.zero3.bwd - bwd_base) + cc.zero3.bwd_blocking
    bwd["slowdown"] = bwd["slowdown"] + slow["dp"] * np.minimum(cc.zero3.bwd, lc.backward + recompute)
    return bwd


def _head(
    lc: LayerCompute, cc: CommCosts, slow: dict[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    # the head's weight-gradient GEMM takes as long as its forward GEMM (head_fwd also has the loss, a small share)
    head_wgrad = lc.head_fwd
    head_forward = {"compute": lc.head_fwd, "tp": cc.tp.head_fwd}
    head_backward = {
        "compute": lc.head_bwd,
        "tp": cc.tp.head_bwd_blocking + np.maximum(0.0, cc.tp.head_bwd_overlapped - head_wgrad),
        "slowdown": slow["tp"] * np.minimum(cc.tp.head_bwd_overlapped, head_wgrad),
    }
    return head_forward, head_backward


@dataclass
class Evaluation:
    """Closed-form results for a batch of layouts (arrays), plus what the event schedule reuses."""

    batch: LayoutBatch
    step_s: np.ndarray
    categories: dict[str, np.ndarray]
    memory: dict[str, np.ndarray]
    tokens_per_s: np.ndarray
    mfu: np.ndarray
    ops: OpCosts
    comm: CommCosts
    micro_batches: np.ndarray
    optimizer_s: np.ndarray
    overlap_slowdown: np.ndarray  # compute stretched by gradient reductions and pipeline sends beside it
    accumulation_s: np.ndarray  # unfused gradient accumulation over the micro-batches
    memory_stage: np.ndarray  # the pipeline stage whose ledger `memory` is (the largest)
    job: TrainingJob


class StepModel:
    """Prices training steps of one job on one cluster, in closed form over a batch of layouts."""

    def __init__(self, job: TrainingJob, cluster: Cluster):
        self.job = job
        self.cluster = cluster

    def evaluate(self, batch: LayoutBatch) -> Evaluation:
        job, cluster = self.job, self.cluster
        proc = cluster.system.processor
        cc = communication(job, batch, cluster.cost, cluster.nvlink_domain)
        m = micro_batches(job, batch)
        ops = op_costs(
            batch,
            layer_compute(job, batch, proc, m),
            cc,
            cluster,
            layers_per_chunk(job, batch),
            job.execution.tp_forward_overlap,
            job.moe_execution,
            job.model.moe_layers / job.model.layers,
        )
        categories = self._pipeline_categories(batch, ops, cc, m)
        exposed, dp_overlap_slowdown = self._gradient_reduction(batch, ops, cc, m)
        categories["dp"] = categories["dp"] + exposed + cc.dp.param_gather
        overlap_slowdown = dp_overlap_slowdown + self._pipeline_send_slowdown(batch, ops, cc, m)
        categories["slowdown"] = categories["slowdown"] + overlap_slowdown
        accumulation = self.accumulation_seconds(batch, m)
        categories["compute"] = categories["compute"] + accumulation
        optimizer = self.optimizer_seconds(batch)
        categories["optimizer"] = optimizer

        step = summed(categories)
        tokens = job.tokens_per_step
        flops = job.flops_per_token() * tokens
        memory, memory_stage = heaviest_stage_memory(job, batch)
        return Evaluation(
            batch=batch,
            step_s=step,
            categories=categories,
            memory=memory,
            memory_stage=memory_stage,
            job=job,
            tokens_per_s=tokens / step,
            mfu=flops / (step * batch.dp * batch.tp * batch.pp * batch.cp * proc.peak_flops),
            ops=ops,
            comm=cc,
            micro_batches=m,
            optimizer_s=optimizer,
            overlap_slowdown=overlap_slowdown,
            accumulation_s=accumulation,
        )

    @staticmethod
    def _pipeline_categories(batch: LayoutBatch, ops: OpCosts, cc: CommCosts, m: np.ndarray) -> dict[str, np.ndarray]:
        """Every op's categories over the step, with the pipeline's bubble and boundary sends."""
        p, v = batch.pp, batch.vpp
        f, b = ops.f, ops.b
        categories = {name: m * v * (ops.forward.get(name, 0.0) + ops.backward.get(name, 0.0)) for name in CATEGORIES}
        for name in CATEGORIES:
            categories[name] = categories[name] + m * ops.head_category(name)
        categories["bubble"] = (p - 1) * (f + b) + (p - 1) * (ops.head_fwd + ops.head_bwd) / v * (p > 1)
        # fill and drain cross every boundary; in steady state a stage's sends (one per op) can
        # outlast its compute, and then the pipeline runs at the pace of its pp stream
        categories["pp"] = np.where(
            p > 1, 2 * (p * v - 1) * cc.pp.p2p + m * v * np.maximum(0.0, 2 * cc.pp.p2p - (f + b)), 0.0
        )
        return categories

    def _gradient_reduction(
        self, batch: LayoutBatch, ops: OpCosts, cc: CommCosts, m: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exposed gradient reduction and the slowdown of its overlapped part: buckets become ready
        during the last backward of each stage (during every backward with ZeRO-2)."""
        v, f, b = batch.vpp, ops.f, ops.b
        window = np.where(batch.zero == 2, (m - 1) * v * (f + b), 0.0) + v * b * (1 - 1 / cc.dp.buckets)
        total = cc.dp.reductions * cc.dp.reduction
        exposed = np.where(cc.dp.reductions > 0, np.maximum(cc.dp.bucket, total - window), 0.0)
        return exposed, self.cluster.slowdown(cc.groups["dp"]) * np.minimum(total, window)

    def _pipeline_send_slowdown(self, batch: LayoutBatch, ops: OpCosts, cc: CommCosts, m: np.ndarray) -> np.ndarray:
        # a stage sends one activation or gradient per op but the first stage's backward and the
        # last stage's forward: 2m(pv - 1)/p sends on average, each beside the next op's compute
        p, v = batch.pp, batch.vpp
        sends = np.where(p > 1, 2 * m * (p * v - 1) / p * cc.pp.p2p, 0.0)
        slowdown: np.ndarray = self.cluster.slowdown(cc.groups["pp"]) * np.minimum(sends, m * v * (ops.f + ops.b))
        return slowdown

    def accumulation_seconds(self, batch: LayoutBatch, m: np.ndarray) -> np.ndarray:
        """Unfused gradient accumulation: m - 1 adds (read 2, write 1) over the gradients the rank
        keeps between micro-batches, sharded from ZeRO-2 on; nothing when the GEMMs accumulate."""
        passes = 0 if self.job.execution.fused_grad_accumulation else np.asarray(m) - 1
        kept = self._parameters_kept(batch, sharded_from_zero=2)
        grad_bytes = self.job.precision.grad_bytes * self.job.trained_share
        return passes * 3 * grad_bytes * kept / self.cluster.system.processor.memory_bandwidth

    def optimizer_seconds(self, batch: LayoutBatch) -> np.ndarray:
        """A multi-tensor Adam step is bound by HBM traffic over the parameters this rank updates, at
        the processor's optimizer_efficiency; gradient-norm clipping reads their gradients once more."""
        owned = self._parameters_kept(batch, sharded_from_zero=1)
        precision, proc = self.job.precision, self.cluster.system.processor
        traffic = precision.optimizer_traffic_bytes + (precision.grad_bytes if self.job.execution.grad_clipping else 0)
        return owned * self.job.trained_share * traffic / (proc.memory_bandwidth * proc.optimizer_efficiency)

    def _parameters_kept(self, batch: LayoutBatch, sharded_from_zero: int) -> np.ndarray:
        """Parameters of this rank's stage, split over its data-parallel (x context-parallel)
        group from the given ZeRO stage on; experts over their expert-data-parallel group."""
        dense, expert = stage_parameters(self.job, batch)
        sharded = batch.zero >= sharded_from_zero
        return dense / np.where(sharded, batch.dp * batch.cp, 1) + expert / np.where(
            sharded, expert_data_parallel(batch), 1
        )
