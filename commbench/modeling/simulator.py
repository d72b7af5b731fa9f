"""The overlapped training step: per-rank compute and communication streams with dependencies.

Inside one layer (the same for both models below):
  forward   compute + blocking TP + blocking EP all-to-alls + the part of the CP ring the attention
            core does not cover; ZeRO-3's gather of the next layer is prefetched, so the layer takes
            max(that, gather)
  backward  compute (+ recompute) + the blocking TP all-gathers + whatever of the overlappable TP
            collectives the backward GEMMs do not cover + EP + uncovered CP; ZeRO-3 as forward with
            gather + reduce-scatter. Full recompute repeats the forward's blocking communication.
            Collectives the job's Execution says the framework does not overlap are added whole.
  head      (last stage) output GEMM + loss, the TP loss all-reduces, and in backward whatever of
            the input gradient's all-reduce the head's weight-gradient GEMM does not cover
Compute runs slower while a collective overlaps it (SM and HBM contention): the overlapped time
of gradient buckets, overlapped TP collectives and pipeline sends is charged `slowdown` extra, a
measured factor when the caller has one, else the defaults below. Where the execution does not
fuse gradient accumulation into the GEMMs (torch eager), every micro-batch after the first adds
a pass over the kept gradients.

Across layers and micro-batches there are two models sharing those per-layer costs:
  closed_form  vectorised over thousands of layouts, for the planner's screening. Pipeline with
               m micro-batches, p stages, v chunks: m*(F+B) + (p-1)*(F+B)/v bubble (Narayanan
               et al. 2021) + 2*(p*v-1) boundary transfers on the fill/drain path; bucketed
               gradient reduction overlapped with the last backward; optimizer; ZeRO-1/2 gather.
  simulate     one layout as events: every pipeline stage runs its 1F1B or interleaved order on a
               compute stream, sends activations on a pp stream, reduces gradient buckets on a dp
               stream as they become ready; the step ends when the last stage finishes its
               optimizer step. Its timeline is what the dashboard draws.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from commbench.errors import UsageError
from commbench.modeling.comm import CommCosts, communication
from commbench.modeling.compute import LayerCompute, layer_compute
from commbench.modeling.hardware import System
from commbench.modeling.job import TrainingJob
from commbench.modeling.layout import Layout, LayoutBatch
from commbench.modeling.limits import MAX_SIMULATED_OPS, MAX_TIMELINE_EVENTS
from commbench.modeling.memory import layers_per_chunk, memory_per_gpu, micro_batches, stage_parameters
from commbench.modeling.network import CollectiveCost

CATEGORIES = ("compute", "recompute", "slowdown", "tp", "cp", "ep", "dp", "pp", "bubble", "optimizer")
# Compute slowdown while communication overlaps it: one public simulator charges 15% for NVLink
# and 2% for InfiniBand traffic; used when no measured factor is given.
DEFAULT_SLOWDOWN_INTRA = 0.15
DEFAULT_SLOWDOWN_INTER = 0.02


@dataclass(frozen=True)
class Cluster:
    gpus: int
    system: System  # processor, gpus_per_node, preset networks
    cost: CollectiveCost  # prices every collective (preset or measured)
    slowdown_intra: float = DEFAULT_SLOWDOWN_INTRA
    slowdown_inter: float = DEFAULT_SLOWDOWN_INTER

    @property
    def gpus_per_node(self) -> int:
        return self.system.gpus_per_node

    def slowdown(self, inter_node: np.ndarray) -> np.ndarray:
        return np.where(inter_node, self.slowdown_inter, self.slowdown_intra)


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
        return sum(self.forward.values())

    @property
    def b(self) -> np.ndarray:
        return sum(self.backward.values())

    @property
    def head_fwd(self) -> np.ndarray:
        return sum(self.head_forward.values())

    @property
    def head_bwd(self) -> np.ndarray:
        return sum(self.head_backward.values())

    def head_category(self, name: str):
        """Seconds of one category in one micro-batch's head, forward + backward."""
        return self.head_forward.get(name, 0.0) + self.head_backward.get(name, 0.0)


def op_costs(batch: LayoutBatch, lc: LayerCompute, cc: CommCosts, cluster: Cluster, layers: np.ndarray) -> OpCosts:
    slow = {name: cluster.slowdown(inter) for name, inter in cc.inter_node.items()}
    full = batch.recompute == 2

    cp_f_exposed = np.maximum(0.0, cc.cp_fwd - lc.fwd_attention)
    cp_f_slow = slow["cp"] * np.minimum(cc.cp_fwd, lc.fwd_attention)
    fwd = {"compute": lc.forward, "tp": cc.tp_fwd, "ep": cc.ep_fwd, "cp": cp_f_exposed, "slowdown": cp_f_slow}
    fwd_base = sum(fwd.values())
    fwd["dp"] = np.maximum(0.0, cc.zero3_fwd - fwd_base)
    fwd["slowdown"] = fwd["slowdown"] + slow["dp"] * np.minimum(cc.zero3_fwd, lc.forward)

    recompute = lc.recompute(batch.recompute)
    bwd = {
        "compute": lc.backward,
        "recompute": recompute,
        "tp": cc.tp_bwd_blocking + np.maximum(0.0, cc.tp_bwd_overlapped - lc.bwd_gemm) + full * cc.tp_fwd,
        "ep": cc.ep_bwd + full * cc.ep_fwd,
        "cp": np.maximum(0.0, cc.cp_bwd - lc.bwd_attention) + full * cp_f_exposed,
        "slowdown": (slow["tp"] * np.minimum(cc.tp_bwd_overlapped, lc.bwd_gemm)
                     + slow["cp"] * np.minimum(cc.cp_bwd, lc.bwd_attention) + full * cp_f_slow),
    }
    bwd_base = sum(bwd.values())
    bwd["dp"] = np.maximum(0.0, cc.zero3_bwd - bwd_base) + cc.zero3_bwd_blocking
    bwd["slowdown"] = bwd["slowdown"] + slow["dp"] * np.minimum(cc.zero3_bwd, lc.backward + recompute)

    forward = {name: layers * value for name, value in fwd.items()}
    backward = {name: layers * value for name, value in bwd.items()}
    # the first layer's weights cannot be prefetched behind anything in the same op
    forward["dp"] = forward["dp"] + cc.zero3_fwd
    backward["dp"] = backward["dp"] + cc.zero3_fwd
    comm_fwd = {"tp": layers * cc.tp_fwd, "cp": layers * cc.cp_fwd, "ep": layers * cc.ep_fwd, "dp": layers * cc.zero3_fwd}
    comm_bwd = {"tp": layers * (cc.tp_bwd_blocking + cc.tp_bwd_overlapped + full * cc.tp_fwd),
                "cp": layers * (cc.cp_bwd + full * cc.cp_fwd), "ep": layers * (cc.ep_bwd + full * cc.ep_fwd),
                "dp": layers * (cc.zero3_bwd + cc.zero3_bwd_blocking)}
    # the head's weight-gradient GEMM takes as long as its forward GEMM (head_fwd also has the loss, a small share)
    head_wgrad = lc.head_fwd
    head_forward = {"compute": lc.head_fwd, "tp": cc.tp_head_fwd}
    head_backward = {"compute": lc.head_bwd,
                     "tp": cc.tp_head_bwd_blocking + np.maximum(0.0, cc.tp_head_bwd_overlapped - head_wgrad),
                     "slowdown": slow["tp"] * np.minimum(cc.tp_head_bwd_overlapped, head_wgrad)}
    return OpCosts(forward, backward, head_forward, head_backward, comm_fwd, comm_bwd)


@dataclass
class Evaluation:
    """Closed-form results for a batch of layouts (arrays), plus what simulate() reuses."""

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


class StepModel:
    """Prices training steps of one job on one cluster."""

    def __init__(self, job: TrainingJob, cluster: Cluster):
        self.job = job
        self.cluster = cluster

    def evaluate(self, batch: LayoutBatch) -> Evaluation:
        job, cluster = self.job, self.cluster
        proc = cluster.system.processor
        lc = layer_compute(job, batch, proc)
        cc = communication(job, batch, cluster.cost, cluster.gpus_per_node)
        layers = layers_per_chunk(job, batch)
        ops = op_costs(batch, lc, cc, cluster, layers)
        m = micro_batches(job, batch)
        p, v = batch.pp, batch.vpp
        f, b = ops.f, ops.b

        categories = {name: m * v * (ops.forward.get(name, 0.0) + ops.backward.get(name, 0.0)) for name in CATEGORIES}
        for name in CATEGORIES:
            categories[name] = categories[name] + m * ops.head_category(name)
        categories["bubble"] = (p - 1) * (f + b) + (p - 1) * (ops.head_fwd + ops.head_bwd) / v * (p > 1)
        # fill and drain cross every boundary; in steady state a stage's sends (one per op) can
        # outlast its compute, and then the pipeline runs at the pace of its pp stream
        categories["pp"] = np.where(p > 1, 2 * (p * v - 1) * cc.pp_p2p + m * v * np.maximum(0.0, 2 * cc.pp_p2p - (f + b)), 0.0)

        # gradient reduction: buckets become ready during the last backward of each stage
        reduction = cc.dp_reduction
        window = np.where(batch.zero == 2, (m - 1) * v * (f + b), 0.0) + v * b * (1 - 1 / cc.dp_buckets)
        total = cc.dp_reductions * reduction
        exposed = np.where(cc.dp_reductions > 0, np.maximum(cc.dp_bucket, total - window), 0.0)
        categories["dp"] = categories["dp"] + exposed + cc.dp_param_gather
        dp_overlap_slowdown = cluster.slowdown(cc.inter_node["dp"]) * np.minimum(total, window)
        # a stage sends one activation or gradient per op but the first stage's backward and the
        # last stage's forward: 2m(pv - 1)/p sends on average, each beside the next op's compute
        sends = np.where(p > 1, 2 * m * (p * v - 1) / p * cc.pp_p2p, 0.0)
        pp_overlap_slowdown = cluster.slowdown(cc.inter_node["pp"]) * np.minimum(sends, m * v * (f + b))
        overlap_slowdown = dp_overlap_slowdown + pp_overlap_slowdown
        categories["slowdown"] = categories["slowdown"] + overlap_slowdown
        accumulation = self.accumulation_seconds(batch, m)
        categories["compute"] = categories["compute"] + accumulation
        optimizer = self.optimizer_seconds(batch)
        categories["optimizer"] = optimizer

        step = sum(categories.values())
        tokens = job.tokens_per_step
        flops = job.model.model_flops_per_token(job.seq_len) * tokens
        return Evaluation(
            batch=batch, step_s=step, categories=categories, memory=memory_per_gpu(job, batch),
            tokens_per_s=tokens / step, mfu=flops / (step * batch.dp * batch.tp * batch.pp * batch.cp * proc.peak_flops),
            ops=ops, comm=cc, micro_batches=m, optimizer_s=optimizer, overlap_slowdown=overlap_slowdown,
            accumulation_s=accumulation,
        )

    def accumulation_seconds(self, batch: LayoutBatch, m: np.ndarray) -> np.ndarray:
        """Unfused gradient accumulation: m - 1 adds (read 2, write 1) over the gradients the rank
        keeps between micro-batches, sharded from ZeRO-2 on; nothing when the GEMMs accumulate."""
        passes = 0 if self.job.execution.fused_grad_accumulation else np.asarray(m) - 1
        kept = self._parameters_kept(batch, sharded_from_zero=2)
        return passes * 3 * self.job.precision.grad_bytes * kept / self.cluster.system.processor.memory_bandwidth

    def optimizer_seconds(self, batch: LayoutBatch) -> np.ndarray:
        """A fused Adam step is bound by HBM traffic over the parameters this rank updates."""
        owned = self._parameters_kept(batch, sharded_from_zero=1)
        return owned * self.job.precision.optimizer_traffic_bytes / self.cluster.system.processor.memory_bandwidth

    def _parameters_kept(self, batch: LayoutBatch, sharded_from_zero: int) -> np.ndarray:
        """Parameters of this rank's stage, split over its data-parallel (x context-parallel)
        group from the given ZeRO stage on; experts over that group's share outside their EP group."""
        dense, expert = stage_parameters(self.job, batch)
        sharded = batch.zero >= sharded_from_zero
        return dense / np.where(sharded, batch.dp * batch.cp, 1) + expert / np.where(sharded, batch.dp * batch.cp // batch.ep, 1)

    def simulate(self, layout: Layout, timeline: bool = False) -> "StepResult":
        evaluation = self.evaluate(LayoutBatch.from_layouts([layout]))
        ops = int(simulated_ops(evaluation.micro_batches[0], layout.pp, layout.vpp))
        if ops > MAX_SIMULATED_OPS:
            raise UsageError(f"layout {layout}: one step is {ops:,} pipeline ops ({evaluation.micro_batches[0]} "
                             f"micro-batches), more than the {MAX_SIMULATED_OPS:,} the simulator schedules; "
                             f"use a larger mbs or fewer pipeline stages")
        return EventSimulation(layout, evaluation, timeline).run()


def simulated_ops(micro_batches, pp, vpp):
    """Forward and backward ops of all pipeline stages in one step: the event simulator's work."""
    return 2 * micro_batches * vpp * pp


@dataclass
class StepResult:
    layout: Layout
    step_s: float
    tokens_per_s: float
    mfu: float
    categories: dict[str, float]  # seconds on the critical stage; they sum to step_s
    memory: dict[str, float]  # bytes per GPU, ledger items + total
    comm_bytes: dict[str, float]  # bytes one rank sends per step, per parallelism
    micro_batches: int
    timeline: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the reader should know about the figures

    def to_dict(self) -> dict:
        return {
            "layout": str(self.layout), "step_s": self.step_s, "tokens_per_s": self.tokens_per_s, "mfu": self.mfu,
            "micro_batches": self.micro_batches, "categories_s": self.categories, "memory_bytes": self.memory,
            "comm_bytes_per_step": self.comm_bytes,
        }


def pipeline_order(stage: int, p: int, v: int, m: int) -> list[tuple[str, int, int]]:
    """(kind 'F'/'B', micro-batch, chunk) in the order one stage runs them (Megatron's 1F1B and
    interleaved 1F1B; interleaving needs m to be a multiple of p)."""
    total = m * v

    def unit(k: int, backward: bool) -> tuple[int, int]:
        chunk = (k // p) % v
        return (k // (p * v)) * p + k % p, (v - 1 - chunk) if backward else chunk

    warmup = min(total, p - stage - 1 if v == 1 else (p - stage - 1) * 2 + (v - 1) * p)
    order, fwd, bwd = [], 0, 0
    for _ in range(warmup):
        order.append(("F", *unit(fwd, False)))
        fwd += 1
    while fwd < total:
        order.append(("F", *unit(fwd, False)))
        fwd += 1
        order.append(("B", *unit(bwd, True)))
        bwd += 1
    while bwd < total:
        order.append(("B", *unit(bwd, True)))
        bwd += 1
    return order


class EventSimulation:
    """Schedules one layout's step on per-stage compute, pp and dp streams.

    Time a stage's compute stream waits for an input is split into pipeline communication (the
    part after the producing stage finished, while the activation was in flight or queued behind
    earlier sends) and bubble (the rest: the producer had not run yet).
    """

    def __init__(self, layout: Layout, evaluation: Evaluation, timeline: bool):
        self.layout = layout
        self.eval = evaluation
        self.record = timeline
        ops = evaluation.ops
        self.f, self.b = float(ops.f[0]), float(ops.b[0])
        self.head = (float(ops.head_fwd[0]), float(ops.head_bwd[0]))
        cc = evaluation.comm
        self.p2p = float(cc.pp_p2p[0])
        self.bucket = float(cc.dp_bucket[0])
        self.buckets = int(cc.dp_buckets[0])
        self.m = int(evaluation.micro_batches[0])
        self.events: list[dict] = []
        self.events_dropped = 0  # past MAX_TIMELINE_EVENTS
        p = layout.pp
        self.finished: dict[tuple, float] = {}  # (kind, stage, mb, chunk) -> compute end
        self.arrived: dict[tuple, float] = {}  # same key -> when its output reached the next stage
        self.compute_free, self.pp_free, self.dp_free = [0.0] * p, [0.0] * p, [0.0] * p
        self.bubble, self.pp_wait = [0.0] * p, [0.0] * p

    def _emit(self, stream: str, start: float, dur: float, name: str, category: str) -> None:
        if not self.record or dur <= 0:
            return
        if len(self.events) >= MAX_TIMELINE_EVENTS:  # a timeline nobody could draw; the step time is still exact
            self.events_dropped += 1
        else:
            self.events.append({"stream": stream, "start_us": start * 1e6, "dur_us": dur * 1e6, "name": name, "category": category})

    def _duration(self, kind: str, stage: int, chunk: int) -> float:
        base = self.f if kind == "F" else self.b
        if stage == self.layout.pp - 1 and chunk == self.layout.vpp - 1:
            base += self.head[0] if kind == "F" else self.head[1]
        return base

    def _producer(self, kind: str, s: int, mb: int, chunk: int) -> tuple | None:
        """The op whose output this op consumes: the previous chunk forward, the next one backward."""
        p, v = self.layout.pp, self.layout.vpp
        if kind == "F":
            if s > 0:
                return ("F", s - 1, mb, chunk)
            return ("F", p - 1, mb, chunk - 1) if chunk > 0 else None
        if s < p - 1:
            return ("B", s + 1, mb, chunk)
        return ("B", 0, mb, chunk + 1) if chunk < v - 1 else ("F", s, mb, chunk)

    def _buckets_released(self, kind: str, mb: int) -> int:
        """Gradient buckets a backward op makes ready: every op with ZeRO-2, else the last micro-batch's
        (each chunk has exactly one of those); ZeRO-3 reduces inside its layers instead."""
        zero = self.layout.zero
        if kind != "B" or zero == 3 or (zero != 2 and mb != self.m - 1):
            return 0
        return max(1, round(self.buckets / self.layout.vpp))

    def _try_run(self, s: int, op: tuple[str, int, int]) -> bool:
        kind, mb, chunk = op
        producer = self._producer(kind, s, mb, chunk)
        ready = 0.0
        if producer is not None:
            if producer not in self.arrived:
                return False
            ready = self.arrived[producer]
            wait = max(0.0, ready - self.compute_free[s])
            in_flight = min(wait, ready - self.finished[producer])
            self.pp_wait[s] += in_flight
            self.bubble[s] += wait - in_flight
        start = max(self.compute_free[s], ready)
        dur = self._duration(kind, s, chunk)
        end = self.compute_free[s] = start + dur
        key = (kind, s, mb, chunk)
        self.finished[key] = end
        self._emit(f"pp{s}.compute", start, dur, f"{kind} mb{mb} c{chunk}", "compute")
        for name, seconds in (self.eval.ops.comm_fwd if kind == "F" else self.eval.ops.comm_bwd).items():
            self._emit(f"pp{s}.{name}", start, float(seconds[0]), f"{name} {kind} mb{mb} c{chunk}", name)
        self.arrived[key] = self._send(kind, s, mb, chunk, end)
        released = self._buckets_released(kind, mb)
        if released:
            self._reduce_buckets(s, start, dur, released)
        return True

    def _reduce_buckets(self, s: int, start: float, dur: float, count: int) -> None:
        """Queue `count` gradient buckets, ready one by one evenly through the op, on stage s's dp stream.

        The stream is a queue, so its last bucket ends at the latest of: the earlier backlog plus
        all buckets, the first bucket's release plus all buckets, the last release plus one bucket.
        That closed form keeps a model with millions of buckets as quick to simulate as one with a
        few; only a recorded timeline walks the queue bucket by bucket (and stops where it is full).
        """
        first_ready = start + dur / count
        end = max(self.dp_free[s] + count * self.bucket, first_ready + count * self.bucket, start + dur + self.bucket)
        free = self.dp_free[s]
        for j in range(count if self.record else 0):
            if len(self.events) >= MAX_TIMELINE_EVENTS:
                self.events_dropped += count - j
                break
            begin = max(free, start + dur * (j + 1) / count)
            free = begin + self.bucket
            self._emit(f"pp{s}.dp", begin, self.bucket, f"grad bucket {j}", "dp")
        self.dp_free[s] = end

    def _send(self, kind: str, s: int, mb: int, chunk: int, end: float) -> float:
        """Queue the op's output on this stage's pp stream; returns when it arrives (now, if local)."""
        p, v = self.layout.pp, self.layout.vpp
        local = p == 1 or (kind == "F" and s == p - 1 and chunk == v - 1) or (kind == "B" and s == 0 and chunk == 0)
        if local:
            return end
        begin = max(self.pp_free[s], end)
        self.pp_free[s] = begin + self.p2p
        self._emit(f"pp{s}.pp", begin, self.p2p, f"send {kind} mb{mb} c{chunk}", "pp")
        return self.pp_free[s]

    def run(self) -> StepResult:
        p, v, m = self.layout.pp, self.layout.vpp, self.m
        orders = [pipeline_order(s, p, v, m) for s in range(p)]
        cursor = [0] * p
        remaining = sum(len(order) for order in orders)
        while remaining:
            progressed = False
            for s in range(p):
                while cursor[s] < len(orders[s]) and self._try_run(s, orders[s][cursor[s]]):
                    cursor[s] += 1
                    remaining -= 1
                    progressed = True
            if not progressed:
                raise RuntimeError(f"pipeline schedule deadlocked for {self.layout}")
        optimizer = float(self.eval.optimizer_s[0])
        gather = float(self.eval.comm.dp_param_gather[0])
        # compute stretched by overlapping gradient reductions and pipeline sends, and unfused
        # gradient accumulation, push the whole stage back
        stretch = float(self.eval.overlap_slowdown[0]) + float(self.eval.accumulation_s[0])
        ends = []
        for s in range(p):
            opt_start = max(self.compute_free[s], self.dp_free[s])
            self._emit(f"pp{s}.compute", opt_start, optimizer, "optimizer step", "optimizer")
            self._emit(f"pp{s}.dp", opt_start + optimizer, gather, "weight all-gather", "dp")
            ends.append(opt_start + optimizer + gather + stretch)
        critical = max(range(p), key=lambda s: ends[s])
        return self._result(ends[critical], critical)

    def _result(self, step: float, s: int) -> StepResult:
        """Categories of the stage that finishes last; they add up to its step time."""
        ev, ops = self.eval, self.eval.ops
        ops_per_stage = self.m * self.layout.vpp
        categories = {name: ops_per_stage * float(np.sum(ops.forward.get(name, 0.0)) + np.sum(ops.backward.get(name, 0.0)))
                      for name in CATEGORIES}
        if s == self.layout.pp - 1:
            for name in CATEGORIES:
                categories[name] += self.m * float(np.sum(ops.head_category(name)))
        categories["pp"] = self.pp_wait[s]
        categories["bubble"] = self.bubble[s]
        categories["dp"] += max(0.0, self.dp_free[s] - self.compute_free[s]) + float(ev.comm.dp_param_gather[0])
        categories["slowdown"] += float(ev.overlap_slowdown[0])
        categories["compute"] += float(ev.accumulation_s[0])
        categories["optimizer"] = float(ev.optimizer_s[0])
        tokens = self.eval.tokens_per_s[0] * self.eval.step_s[0]
        return StepResult(
            layout=self.layout, step_s=step, tokens_per_s=tokens / step, mfu=float(ev.mfu[0] * ev.step_s[0] / step),
            categories=categories,
            memory={name: float(value[0]) for name, value in ev.memory.items()},
            comm_bytes={name: float(value[0]) for name, value in ev.comm.bytes_per_step.items()},
            micro_batches=self.m, timeline=sorted(self.events, key=lambda e: (e["stream"], e["start_us"])),
            notes=[f"timeline cut at {MAX_TIMELINE_EVENTS:,} events ({self.events_dropped:,} more not kept); "
                   f"the step time counts them all"] * (self.events_dropped > 0),
        )
