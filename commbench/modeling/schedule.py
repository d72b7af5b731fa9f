"""The event schedule of one layout's step: per-stage compute, pipeline and gradient streams.

`simulate` takes the per-op costs the closed-form step model (step.py) priced for one layout and
runs them as events: every pipeline stage runs its 1F1B or interleaved order on a compute stream,
sends activations on a pp stream, reduces gradient buckets on a dp stream as they become ready;
the step ends when the last stage finishes its optimizer step. Its timeline is what the
dashboard draws, and its step time is what the planner ranks by.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from commbench.errors import UsageError
from commbench.modeling.layout import Layout, LayoutBatch, pipeline_layout_chunks
from commbench.modeling.limits import MAX_SIMULATED_OPS, MAX_TIMELINE_EVENTS
from commbench.modeling.memory import layers_per_chunk, stage_layers, stages_memory
from commbench.modeling.step import CATEGORIES, Evaluation, StepModel

# one pipeline op: (kind "F" or "B", stage, micro-batch, model chunk)
OpKey = tuple[str, int, int, int]


def simulate(model: StepModel, layout: Layout, timeline: bool = False) -> StepResult:
    """One layout's step as events; with timeline, the events too (cut at MAX_TIMELINE_EVENTS)."""
    evaluation = model.evaluate(LayoutBatch.from_layouts([layout]))
    ops = int(simulated_ops(evaluation.micro_batches[0], layout.pp, layout.vpp))
    if ops > MAX_SIMULATED_OPS:
        raise UsageError(
            f"layout {layout}: one step is {ops:,} pipeline ops ({evaluation.micro_batches[0]} "
            f"micro-batches), more than the {MAX_SIMULATED_OPS:,} the simulator schedules; "
            f"use a larger mbs or fewer pipeline stages"
        )
    return EventSimulation(layout, evaluation, timeline).run()


def simulated_ops(micro_batches: int, pp: int, vpp: int) -> int:
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
    timeline: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the reader should know about the figures
    # first to last pipeline stage: layers, memory ledger at its peak and when, its share of the step,
    # compute and communication seconds (see EventSimulation.stage_summaries)
    stages: list[dict[str, Any]] = field(default_factory=list)
    memory_stage: int = 0  # the stage whose ledger `memory` is (the largest)

    @property
    def pacing_stage(self) -> int:
        """The stage with the most work (compute and its exposed communication) in the step."""
        return max(range(len(self.stages)), key=lambda s: self.stages[s]["busy_s"]) if self.stages else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "layout": str(self.layout),
            "step_s": self.step_s,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "micro_batches": self.micro_batches,
            "categories_s": self.categories,
            "memory_bytes": self.memory,
            "allocator_peak": self.memory["allocator_peak"],
            "memory_stage": self.memory_stage,
            "pacing_stage": self.pacing_stage,
            "stages": self.stages,
            "comm_bytes_per_step": self.comm_bytes,
        }

    def largest_costs(self, count: int = 3) -> str:
        """The `count` largest categories beyond compute with their share of the step, "dp 2.1%, pp 1.0%"."""
        beyond = sorted(((v, k) for k, v in self.categories.items() if k != "compute" and v > 0), reverse=True)
        return ", ".join(f"{k} {v / self.step_s:.1%}" for v, k in beyond[:count])


def pipeline_order(stage: int, p: int, v: int, m: int, group: int = 0) -> list[tuple[str, int, int]]:
    """(kind 'F'/'B', micro-batch, chunk) in the order one stage runs them: Megatron-Core's 1F1B and
    interleaved 1F1B, whose schedule table runs `group` micro-batches (default p) through each
    model chunk in turn, the last group taking what is left (get_schedule_table)."""
    group = group or p
    total = m * v
    table = [
        (mb, chunk) for start in range(0, m, group) for chunk in range(v) for mb in range(start, min(m, start + group))
    ]

    def unit(k: int, backward: bool) -> tuple[int, int]:
        mb, chunk = table[k]
        return mb, (v - 1 - chunk) if backward else chunk

    warmup = min(total, p - stage - 1 if v == 1 else (p - stage - 1) * 2 + (v - 1) * group)
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
        self.p2p = float(cc.pp.p2p[0])
        self.bucket = float(cc.dp.bucket[0])
        self.buckets = int(cc.dp.buckets[0])
        self.m = int(evaluation.micro_batches[0])
        self.events: list[dict[str, Any]] = []
        self.events_dropped = 0  # past MAX_TIMELINE_EVENTS
        p = layout.pp
        one = evaluation.batch
        self.layers = [int(x) for x in stage_layers(evaluation.job, one, np.arange(p)[:, None])[:, 0]]
        chunk = float(layers_per_chunk(evaluation.job, one)[0])
        # an uneven split's stages run ops of their own chunk's layers (ops are priced at the busiest chunk)
        self.scale = [layers / layout.vpp / chunk if chunk else 0.0 for layers in self.layers]
        # an explicit pp_layout names each chunk's layers (chunk c of stage s is its entry c*pp + s): a chunk
        # runs its own, not its stage's average (DeepSeek-V3's last chunk: 1 layer beside the MTP layer and loss)
        named = pipeline_layout_chunks(layout.pp_layout) if layout.pp_layout else None
        self.chunk_scale = [
            [named[c * p + s] / chunk if named and chunk else self.scale[s] for c in range(layout.vpp)]
            for s in range(p)
        ]
        self.busy = [0.0] * p
        self.finished: dict[OpKey, float] = {}  # (kind, stage, mb, chunk) -> compute end
        self.arrived: dict[OpKey, float] = {}  # same key -> when its output reached the next stage
        self.compute_free, self.pp_free, self.dp_free = [0.0] * p, [0.0] * p, [0.0] * p
        self.bubble, self.pp_wait = [0.0] * p, [0.0] * p

    def _emit(self, stream: str, start: float, dur: float, name: str, category: str) -> None:
        if not self.record or dur <= 0:
            return
        if len(self.events) >= MAX_TIMELINE_EVENTS:  # a timeline nobody could draw; the step time is still exact
            self.events_dropped += 1
        else:
            self.events.append(
                {"stream": stream, "start_us": start * 1e6, "dur_us": dur * 1e6, "name": name, "category": category}
            )

    def _duration(self, kind: str, stage: int, chunk: int) -> float:
        base = (self.f if kind == "F" else self.b) * self.chunk_scale[stage][chunk]
        if stage == self.layout.pp - 1 and chunk == self.layout.vpp - 1:
            base += self.head[0] if kind == "F" else self.head[1]
        return base

    def _producer(self, kind: str, s: int, mb: int, chunk: int) -> OpKey | None:
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
        free = self.compute_free[s]
        ready = 0.0
        if producer is not None:
            arrived = self.arrived.get(producer)
            if arrived is None:
                return False
            ready = arrived
            wait = max(0.0, ready - free)
            in_flight = min(wait, ready - self.finished[producer])
            self.pp_wait[s] += in_flight
            self.bubble[s] += wait - in_flight
        start = max(free, ready)
        dur = self._duration(kind, s, chunk)
        end = self.compute_free[s] = start + dur
        self.busy[s] += dur
        key = (kind, s, mb, chunk)
        self.finished[key] = end
        if self.record:  # the planner's search records no timeline: no event names to format
            self._emit(f"pp{s}.compute", start, dur, f"{kind} mb{mb} c{chunk}", "compute")
            for name, seconds in (self.eval.ops.comm_fwd if kind == "F" else self.eval.ops.comm_bwd).items():
                self._emit(f"pp{s}.{name}", start, float(seconds[0]), f"{name} {kind} mb{mb} c{chunk}", name)
        self.arrived[key] = self._send(kind, s, mb, chunk, end)
        if kind == "B":
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
        if self.record:
            self._emit(f"pp{s}.pp", begin, self.p2p, f"send {kind} mb{mb} c{chunk}", "pp")
        return self.pp_free[s]

    def run(self) -> StepResult:
        p, v, m = self.layout.pp, self.layout.vpp, self.m
        orders = [pipeline_order(s, p, v, m, self.layout.vpp_group) for s in range(p)]
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
        gather = float(self.eval.comm.dp.param_gather[0])
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
        return self._result(ends[critical], critical, ends)

    def stage_summaries(self, step: float, ends: list[float]) -> list[dict[str, Any]]:
        """Per stage: its layers, memory ledger (items at the allocator's peak, the peak, what lives
        outside the allocator, and when the peak happens), its work's share of the step (compute
        ops with their exposed collectives) and that work split into compute and communication
        (exposed collectives, waiting on pipeline sends, the gradient reduction's tail)."""
        ops, m, v = self.eval.ops, self.m, self.layout.vpp
        own = ("compute", "recompute", "slowdown")
        per_op = sum(float(np.sum(ops.forward.get(n, 0.0)) + np.sum(ops.backward.get(n, 0.0))) for n in own)
        head = sum(float(np.sum(ops.head_forward.get(n, 0.0)) + np.sum(ops.head_backward.get(n, 0.0))) for n in own)
        gather = float(self.eval.comm.dp.param_gather[0])
        summaries = []
        for s, (memory, moment) in enumerate(stages_memory(self.eval.job, self.eval.batch, 0)):
            compute = m * v * per_op * self.scale[s] + (m * head if s == self.layout.pp - 1 else 0.0)
            tail = max(0.0, self.dp_free[s] - self.compute_free[s]) + gather
            summaries.append(
                {
                    "stage": s,
                    "layers": self.layers[s],
                    "memory_bytes": memory,
                    "allocator_peak": memory["allocator_peak"],
                    "peak_moment": moment,
                    "busy_s": self.busy[s],
                    "step_share": self.busy[s] / step,
                    "compute_s": compute,
                    "communication_s": self.busy[s] - compute + self.pp_wait[s] + tail,
                    "bubble_s": self.bubble[s],
                    "end_s": ends[s],
                }
            )
        return summaries

    def _result(self, step: float, s: int, ends: list[float]) -> StepResult:
        """Categories of the stage that finishes last; they add up to its step time."""
        ev, ops = self.eval, self.eval.ops
        ops_per_stage = self.m * self.layout.vpp
        categories = {
            name: ops_per_stage * float(np.sum(ops.forward.get(name, 0.0)) + np.sum(ops.backward.get(name, 0.0)))
            for name in CATEGORIES
        }
        if s == self.layout.pp - 1:
            for name in CATEGORIES:
                categories[name] += self.m * float(np.sum(ops.head_category(name)))
        categories["pp"] = self.pp_wait[s]
        categories["bubble"] = self.bubble[s]
        categories["dp"] += max(0.0, self.dp_free[s] - self.compute_free[s]) + float(ev.comm.dp.param_gather[0])
        categories["slowdown"] += float(ev.overlap_slowdown[0])
        categories["compute"] += float(ev.accumulation_s[0])
        categories["optimizer"] = float(ev.optimizer_s[0])
        tokens = self.eval.tokens_per_s[0] * self.eval.step_s[0]
        return StepResult(
            layout=self.layout,
            step_s=step,
            tokens_per_s=tokens / step,
            mfu=float(ev.mfu[0] * ev.step_s[0] / step),
            categories=categories,
            memory={name: float(value[0]) for name, value in ev.memory.items()},
            comm_bytes={name: float(value[0]) for name, value in ev.comm.bytes_per_step.items()},
            micro_batches=self.m,
            timeline=sorted(self.events, key=lambda e: (e["stream"], e["start_us"])),
            notes=[
                f"timeline cut at {MAX_TIMELINE_EVENTS:,} events ({self.events_dropped:,} more not kept); "
                f"the step time counts them all"
            ]
            * (self.events_dropped > 0),
            stages=self.stage_summaries(step, ends),
            memory_stage=int(ev.memory_stage[0]),
        )
