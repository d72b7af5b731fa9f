"""Search training layouts: enumerate, drop what does not fit (with the reason), rank, explain.

Screening prices every candidate at once with the closed-form step model; the best few are then
scheduled by the event simulator, whose step times give the final order. A more complex layout
(each extra parallel dimension, interleaving or ZeRO sharding) must beat a simpler one by
SIMPLICITY_MARGIN per unit of complexity to rank above it: the model's own error is a few
percent, so a 0.3% predicted gain is no reason to take on another dimension (the seeds' decision
path: DDP, then FSDP/ZeRO, then TP inside a node, PP across nodes, SP/CP, 3D last).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from commbench.errors import UsageError
from commbench.modeling.cluster import Cluster
from commbench.modeling.comm import communication
from commbench.modeling.compute import layer_compute
from commbench.modeling.job import TrainingJob
from commbench.modeling.layout import (
    RECOMPUTE_MODES,
    Layout,
    LayoutBatch,
    check_moe_rules,
    layout_groups,
    pipeline_layout_mtp,
)
from commbench.modeling.ledger import LEDGER_ITEMS
from commbench.modeling.limits import MAX_SIMULATED_OPS
from commbench.modeling.memory import stage_layers
from commbench.modeling.schedule import StepResult, simulate, simulated_ops
from commbench.modeling.step import CATEGORIES, Evaluation, StepModel

SIMPLICITY_MARGIN = 0.005
GB = 1e9


@dataclass(frozen=True)
class SearchSpace:
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    recompute: tuple[str, ...] = RECOMPUTE_MODES
    max_micro_batch: int = 16
    max_vpp: int = 8
    shortlist: int = 12  # layouts the event simulator re-ranks


@dataclass
class Screening:
    """Every candidate's closed-form evaluation, whether it fits, and the throughput it would give."""

    evaluation: Evaluation
    fits: np.ndarray
    capacity: float
    seconds: float

    def __len__(self) -> int:
        return len(self.evaluation.batch)

    def memory_reason(self, i: int) -> str:
        """Which stage does not fit, by how much, and its items largest first."""
        mem = self.evaluation.memory
        items = sorted(((mem[item][i], item) for item in LEDGER_ITEMS if mem[item][i] >= 0.05 * GB), reverse=True)
        parts = ", ".join(f"{item} {value / GB:.1f}" for value, item in items)
        stage = int(self.evaluation.memory_stage[i])
        where = (
            f"pipeline stage {stage} of {int(self.evaluation.batch.pp[i])}"
            if self.evaluation.batch.pp[i] > 1
            else "each GPU"
        )
        over = (mem["total"][i] - self.capacity) / GB
        return (
            f"{where} needs {mem['total'][i] / GB:.1f} GB > {self.capacity / GB:.0f} GB per GPU, {over:.1f} GB "
            f"over; largest item {items[0][1] if items else 'none'} ({parts})"
        )


@dataclass
class Ranking:
    """The outcome of a layout search: the best layouts simulated and ranked, and what was screened."""

    ranked: list[StepResult]
    screened: int
    fitting: int
    dropped_examples: list[tuple[str, str]]  # (layout, reason) for the fastest ones that do not fit
    screening_seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def layouts_per_second(self) -> float:
        return self.screened / self.screening_seconds if self.screening_seconds else float("inf")


def complexity(layout: Layout) -> float:
    dims = sum(x > 1 for x in (layout.tp, layout.pp, layout.cp, layout.ep, layout.vpp))
    return dims + (layout.zero > 0) + 0.5 * (layout.zero == 3)


def ranking_key(result: StepResult) -> tuple[float, float]:
    """Throughput discounted for complexity; the smaller memory footprint breaks ties."""
    return (result.tokens_per_s * (1 - SIMPLICITY_MARGIN * complexity(result.layout)), -result.memory["total"])


def _divisors(n: int) -> list[int]:
    """Divisors of n in ascending order, found up to sqrt(n) (n is at most MAX_GPUS or MAX_LAYERS)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


class Planner:
    """Searches the layouts of one job on one cluster: enumerate, screen, simulate the best, rank."""

    def __init__(self, job: TrainingJob, cluster: Cluster, space: SearchSpace | None = None):
        self.job = job
        self.cluster = cluster
        self.space = space or SearchSpace()
        self.step_model = StepModel(job, cluster)

    def warnings(self) -> list[str]:
        """What the model leaves out, then what the collective prices said so far (a measured
        table's gaps show while pricing: ask after ranking or evaluating)."""
        return list(self.job.model.notes) + list(self.cluster.cost.warnings)

    # enumeration ---------------------------------------------------------------------------
    def _shapes(self) -> list[tuple[int, ...]]:
        """(tp, pp, cp, dp, ep, etp, vpp) combinations that divide the model and the cluster."""
        model, gpus = self.job.model, self.cluster.gpus
        experts = model.moe.num_experts if model.moe else 1
        shapes = []
        # pp and cp range over what tp leaves, not over all divisors again: with many divisors (720720
        # GPUs has 240) a cube of them would be millions of combinations that do not divide the cluster
        for tp in _divisors(gpus):
            for pp in _divisors(gpus // tp):
                for cp in _divisors(gpus // (tp * pp)):
                    shapes += self._shape(tp, pp, cp, experts)
        return shapes

    def _shape(self, tp: int, pp: int, cp: int, experts: int) -> list[tuple[int, ...]]:
        """The (tp, pp, cp, dp, ep, etp, vpp) shapes with these tp, pp, cp that the model and batch allow."""
        model = self.job.model
        dp = self.cluster.gpus // (tp * pp * cp)
        if self.shape_refusal(tp, pp, cp, dp) is not None:
            return []
        chunks = model.layers // pp if model.layers % pp == 0 else 1
        vpps = [v for v in _divisors(chunks) if v <= self.space.max_vpp] if pp > 1 else [1]
        folds = self._expert_folds(tp * cp * dp, tp, experts) if model.moe else [(1, tp)]
        return [(tp, pp, cp, dp, ep, etp, vpp) for ep, etp in folds for vpp in vpps]

    def shape_refusal(self, tp: int, pp: int, cp: int, dp: int) -> str | None:
        """Why the model and batch cannot take this tp, pp, cp, dp, or None: the one check the search
        and evaluate_layout (--layout) share, so --layout refuses what the search never produces."""
        model, job = self.job.model, self.job
        if model.heads % tp:
            return f"tp={tp} does not divide the {model.heads} attention heads"
        if model.kv_heads % tp and tp % model.kv_heads:
            return f"tp={tp} neither divides the {model.kv_heads} KV heads nor is a multiple of them"
        if pp > model.layers:
            return f"pp={pp} is more stages than the model's {model.layers} layers"
        if cp > 1 and job.seq_len % (2 * cp):  # the load-balanced ring splits the sequence in 2*cp
            return f"cp={cp}: the sequence of {job.seq_len} does not split into 2*cp = {2 * cp} equal chunks"
        if job.global_batch % dp:
            return f"global batch {job.global_batch} is not a multiple of dp={dp}"
        return None

    def _expert_folds(self, folded: int, tp: int, experts: int) -> list[tuple[int, int]]:
        """(ep, etp) pairs folded over tp*cp*dp ranks (parallel folding): ep divides the experts,
        etp the expert width, and etp stays inside an NVLink domain (and a host: NVL72's 4)."""
        moe = self.job.model.moe
        assert moe is not None, "expert folds are searched for MoE models only"
        width = moe.expert_ffn_hidden
        limit = min(self.cluster.nvlink_domain, self.cluster.gpus_per_host)
        etps = [e for e in _divisors(folded) if e <= limit and width % e == 0] or [1]
        return [(ep, etp) for etp in etps for ep in _divisors(folded // etp) if experts % ep == 0]

    def enumerate(self) -> LayoutBatch:
        shapes = np.array(self._shapes(), dtype=np.int64).reshape(-1, 7)
        mbs_values = [2**k for k in range(int(math.log2(self.space.max_micro_batch)) + 1)]
        knobs = np.array(
            list(
                itertools.product(
                    self.space.zero_stages, mbs_values, [RECOMPUTE_MODES.index(r) for r in self.space.recompute]
                )
            ),
            dtype=np.int64,
        )
        rows = np.repeat(shapes, len(knobs), axis=0)
        tiled = np.tile(knobs, (len(shapes), 1))
        tp, pp, cp, dp, ep, etp, vpp = rows.T
        zero, mbs, recompute = tiled.T
        per_step = self.job.global_batch // dp
        ok = per_step % mbs == 0
        m = per_step // np.maximum(mbs, 1)
        # interleaving runs groups of pp micro-batches (Megatron-Core's default); where m is not a
        # multiple of pp, one group of all m of them (its rule: pp <= group <= m, m % group = 0 or >= pp)
        ok &= (vpp == 1) | (m >= pp)
        group = np.where((vpp > 1) & (m % np.maximum(pp, 1) != 0), m, 0)
        ok &= simulated_ops(m, pp, vpp) <= MAX_SIMULATED_OPS  # a shortlisted layout is simulated op by op
        cols = dict(
            dp=dp,
            tp=tp,
            pp=pp,
            vpp=vpp,
            cp=cp,
            ep=ep,
            etp=etp,
            zero=zero,
            mbs=mbs,
            recompute=recompute,
            sp=np.ones_like(tp),
            vpp_group=group,
        )
        return LayoutBatch({name: col[ok] for name, col in cols.items()})

    # screening and ranking ------------------------------------------------------------------
    def screen(self, batch: LayoutBatch | None = None) -> Screening:
        start = time.perf_counter()
        batch = self.enumerate() if batch is None else batch
        evaluation = self.step_model.evaluate(batch)
        capacity = self.cluster.system.processor.memory_bytes
        fits = evaluation.memory["total"] <= capacity
        return Screening(evaluation, fits, capacity, time.perf_counter() - start)

    def rank(self, top: int = 5) -> Ranking:
        """Screen every layout, simulate the fastest that fit, and rank them (the `top` best kept)."""
        screening = self.screen()
        if len(screening) == 0:
            raise UsageError(self._no_shape_reason())
        ev = screening.evaluation
        if not screening.fits.any():
            raise UsageError(self._too_big_reason(screening))
        order = np.argsort(-ev.tokens_per_s)
        fitting = order[screening.fits[order]]
        shortlist = fitting[: max(self.space.shortlist, top)]
        results = [simulate(self.step_model, ev.batch.layout(i)) for i in shortlist]
        results.sort(key=ranking_key, reverse=True)
        dropped = order[~screening.fits[order]][:3]
        best = results[0].tokens_per_s
        dropped_examples = [
            (str(ev.batch.layout(i)), screening.memory_reason(i)) for i in dropped if ev.tokens_per_s[i] > best
        ]
        return Ranking(results[:top], len(screening), int(screening.fits.sum()), dropped_examples, screening.seconds)

    def evaluate_layout(self, layout: Layout) -> tuple[StepResult, str | None]:
        """Simulate one layout; the second value says why it does not fit, or is None."""
        if layout.gpus != self.cluster.gpus:
            raise UsageError(f"layout {layout} uses {layout.gpus} GPUs, the cluster has {self.cluster.gpus}")
        if self.job.global_batch % (layout.dp * layout.mbs):
            raise UsageError(
                f"global batch {self.job.global_batch} is not a multiple of dp*mbs = {layout.dp * layout.mbs}"
            )
        self.check_pipeline(layout, self.job.global_batch // (layout.dp * layout.mbs))
        refusal = self.shape_refusal(layout.tp, layout.pp, layout.cp, layout.dp)
        if refusal is not None:
            raise UsageError(f"layout {layout}: {refusal}")
        check_moe_rules(layout, self.job.model.moe.num_experts if self.job.model.moe else None)
        screening = self.screen(LayoutBatch.from_layouts([layout]))
        result = simulate(self.step_model, layout, timeline=True)
        return result, None if screening.fits[0] else screening.memory_reason(0)

    def check_pipeline(self, layout: Layout, m: int) -> None:
        """Megatron-Core's rules on the pipeline split and the interleaved schedule, each refusal naming
        its rule (transformer_block.get_num_layers_to_build, schedules.py)."""
        layers, p, v = self.job.model.layers, layout.pp, layout.vpp
        if layout.pp_layout:
            counted = sum(layout.stage_layer_counts())
            if counted != layers:
                raise UsageError(
                    f"layout {layout}: pp_layout places {counted} decoder layers, the model has {layers} "
                    f"(Megatron-Core's rule)"
                )
            mtp = pipeline_layout_mtp(layout.pp_layout)
            if mtp and mtp != self.job.model.mtp_layers:
                raise UsageError(
                    f"layout {layout}: pp_layout places {mtp} MTP layers, the model has {self.job.model.mtp_layers} "
                    f"(Megatron-Core's rule)"
                )
        elif layout.pp_first or layout.pp_last:
            left = p - bool(layout.pp_first) - bool(layout.pp_last)
            rest = layers - layout.pp_first - layout.pp_last
            if rest < 0 or (left == 0 and rest) or (left and rest % left):
                raise UsageError(
                    f"layout {layout}: with uneven pipelining the {rest} layers left over must divide "
                    f"evenly over the {left} other stages (Megatron-Core's rule)"
                )
        elif layout.pp_embedding or layout.pp_loss:
            counted = layers + layout.pp_embedding + layout.pp_loss
            if counted % p:
                raise UsageError(
                    f"layout {layout}: {layers} layers plus the embedding/loss counted in the split "
                    f"({counted}) must be divisible by pp={p} (Megatron-Core's rule)"
                )
        if v == 1:
            return
        batch = LayoutBatch.from_layouts([layout])
        stage_counts = {int(n) for n in stage_layers(self.job, batch, np.arange(p)[:, None])[:, 0]}
        if (
            not layout.pp_layout
            and any(n % v for n in stage_counts)
            and (layout.pp_first or layout.pp_last or layers % p == 0)
        ):
            raise UsageError(
                f"layout {layout}: every stage's layers ({sorted(stage_counts)}) must be divisible by "
                f"vpp={v} (Megatron-Core's rule)"
            )
        group = layout.vpp_group or p
        if not p <= group <= m:
            raise UsageError(
                f"layout {layout}: the interleaved schedule's micro-batch group ({group}) must lie in "
                f"[pp={p}, micro-batches={m}] (Megatron-Core's rule)"
            )
        if 0 < m % group < p:
            raise UsageError(
                f"layout {layout}: interleaving {m} micro-batches in groups of {group} leaves a last group "
                f"of {m % group} < pp={p}, which Megatron-Core refuses; set vpp_group to {m} (or a "
                f"group size that divides {m} or leaves at least {p})"
            )

    def ep_skew(self, results: list[StepResult]) -> list[dict[str, Any]]:
        """Per result: the expected max/mean EP load under the job's routing, and how much of its EP
        time that skew costs against a uniform router (the EP category scaled by the skewed share)."""
        if not results:
            return []
        ep = communication(
            self.job,
            LayoutBatch.from_layouts([r.layout for r in results]),
            self.cluster.cost,
            self.cluster.nvlink_domain,
        ).ep
        return [
            {
                "layout": str(r.layout),
                "max_over_mean": float(ep.imbalance[i]),
                "ep_s": float(r.categories["ep"]),
                "ep_uniform_s": float(r.categories["ep"] * (1 - ep.skew_share[i])),
                "skew_cost_s": float(r.categories["ep"] * ep.skew_share[i]),
            }
            for i, r in enumerate(results)
        ]

    def moe_parts(self, layouts: list[Layout]) -> list[dict[str, Any]]:
        """Per layout, the MoE layers' parts per micro-batch (router, permute, grouped GEMM and its
        per-expert shape, shared experts, dropped tokens, dispatch and combine bytes and seconds per
        tier) and where the expert groups sit; [] for a dense model."""
        if not self.job.model.moe or not layouts:
            return []
        batch = LayoutBatch.from_layouts(layouts)
        parts = layer_compute(self.job, batch, self.cluster.system.processor).moe
        ep = communication(self.job, batch, self.cluster.cost, self.cluster.nvlink_domain).ep
        assert parts is not None and ep.parts is not None, "an MoE model has MoE parts and an exchange"
        model, options = self.job.model, self.job.moe_execution
        return [
            {
                "layout": str(layout),
                "dense_layers": model.dense_layers,
                "moe_layers": model.moe_layers,
                "moe_layer": {**parts.to_dict(i, model.hidden), **_exchange_dict(ep.parts, i)},
                "execution": {
                    "dispatcher": options.dispatcher,
                    "dispatch_dtype": options.dispatch_dtype,
                    "shared_expert_overlap": options.shared_expert_overlap,
                    "a2a_overlap_1f1b": options.a2a_overlap,
                    "capacity_factor": self.job.capacity_factor,
                    "pad_to_capacity": options.pad_to_capacity,
                    "cuda_graph": options.cuda_graph,
                    "host_s_per_moe_layer": 0.0
                    if options.cuda_graph
                    else {"fixed": options.host_layer_s, "per_local_expert": options.host_expert_s},
                },
                "placement": expert_placement(batch, self.cluster, i),
            }
            for i, layout in enumerate(layouts)
        ]

    # reasons -----------------------------------------------------------------------------
    def _no_shape_reason(self) -> str:
        return (
            f"no layout of {self.cluster.gpus} GPUs divides global batch {self.job.global_batch}, "
            f"{self.job.model.heads} heads and {self.job.model.layers} layers; pick a global batch that is a "
            f"multiple of the data-parallel size"
        )

    def _too_big_reason(self, screening: Screening) -> str:
        ev = screening.evaluation
        leanest = int(np.argmin(ev.memory["total"]))
        static = self.job.model.total_params * self.job.precision.bytes_per_param
        gpus = math.ceil(static / (screening.capacity - ev.memory["outside_allocator"][leanest]))
        return (
            f"{self.job.model.name} does not fit on {self.cluster.gpus} GPUs of {screening.capacity / GB:.0f} GB: "
            f"the leanest layout ({ev.batch.layout(leanest)}) {screening.memory_reason(leanest)}; its static "
            f"state alone is {static / GB:.0f} GB, so even fully sharded it needs at least {gpus} GPUs"
        )


def _exchange_dict(parts: dict[str, Any], i: int) -> dict[str, Any]:
    """One layout's dispatch/combine entries (arrays over layouts picked at i; names kept)."""

    def pick(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: pick(v) for key, v in value.items()}
        if isinstance(value, str):
            return value
        return float(value[i]) if np.ndim(value) else float(value)

    picked = {key: pick(value) for key, value in parts.items() if key != "seconds"}
    return {**picked, "exchange_s": pick(parts["seconds"])}


def expert_placement(batch: LayoutBatch, cluster: Cluster, i: int) -> dict[str, Any]:
    """Where one layout's expert groups sit: ranks per NVLink domain, domains spanned, and whether
    the group stays inside one domain (the EP all-to-all then never leaves NVLink)."""
    domain = cluster.nvlink_domain
    groups = layout_groups(batch, domain)
    out: dict[str, Any] = {"nvlink_domain_gpus": domain}
    for name in ("ep", "etp", "edp", "tpep"):
        size, per_domain, domains = (int(g[i]) for g in groups[name])
        out[name] = {"size": size, "ranks_per_domain": per_domain, "domains": domains, "inside_domain": domains == 1}
    return out


def explain(results: list[StepResult]) -> list[str]:
    """One line per ranked layout: where its step goes, and what makes the next one slower."""
    lines = []
    for i, res in enumerate(results):
        parts = sorted(((v, k) for k, v in res.categories.items() if v > 0.005 * res.step_s), reverse=True)
        where = ", ".join(f"{name} {100 * v / res.step_s:.0f}%" for v, name in parts)
        line = f"#{i + 1} {res.layout}: {where}"
        if i + 1 < len(results):
            nxt = results[i + 1]
            diffs = sorted(((nxt.categories[c] - res.categories[c], c) for c in CATEGORIES), reverse=True)
            worse = ", ".join(f"+{d * 1e3:.0f} ms {c}" for d, c in diffs[:2] if d > 0)
            slower = 100 * (res.tokens_per_s / nxt.tokens_per_s - 1)
            if slower >= 0:
                line += f"; #{i + 2} is {slower:.1f}% slower ({worse or 'same costs'})"
            else:
                line += f"; #{i + 2} is {-slower:.1f}% faster but more complex (ranked within the simplicity margin)"
        lines.append(line)
    return lines
