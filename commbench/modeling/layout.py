"""A parallel layout, a batch of layouts as arrays, and where each parallel group sits on nodes.

Ranks are numbered Megatron-style, tensor parallel fastest: rank = tp + t*(cp + c*(dp + d*pp)).
MoE layers fold their own grid over the same ranks (Megatron-Core's parallel folding, Liu et al.
2025, arXiv:2504.14960; megatron/core/parallel_state.py builds a second rank generator for it):
expert tensor parallel fastest, then expert parallel, then expert data parallel, so
ETP x EP x EDP = TP x CP x DP on every pipeline stage. EP need not divide DP: ep=32 on tp=2, dp=16 is
one EP group of 32 neighbouring ranks. Megatron-Core's own rules, checked where the values allow:
  - tp*cp*dp (the world over pp) a multiple of etp*ep (parallel_state.initialize_model_parallel)
  - the experts a multiple of ep (training/arguments.py; checked against the model by the planner)
  - an MoE model with tp > 1 trains with sequence parallelism (transformer/moe/moe_layer.py)
  - etp defaults to tp (--expert-tensor-parallel-size)
A group of `size` ranks `stride` apart in NVLink domains of G GPUs therefore puts
min(size, G // stride) of its ranks in each domain (1 when stride >= G) and spans the rest.
The unit is the NVLink domain (System.nvlink_domain), not the host: on a DGX they are the same
8 GPUs, on an NVL72 rack a domain is 72 GPUs over 18 hosts of 4, and a group inside it runs on NVLink.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from commbench.errors import UsageError
from commbench.modeling.limits import MAX_GPUS, MAX_LAYERS, whole_number

RECOMPUTE_MODES = ("none", "selective", "full")
# a batch of layouts holds the mode as its index in RECOMPUTE_MODES (LayoutBatch.recompute)
SELECTIVE_RECOMPUTE, FULL_RECOMPUTE = RECOMPUTE_MODES.index("selective"), RECOMPUTE_MODES.index("full")
# Megatron-Core's --recompute-modules for selective recompute (bit i of the batch's recompute_mask);
# selective with none named is its default, core_attn
RECOMPUTE_MODULES = ("core_attn", "mlp", "layernorm", "moe_act", "mla_up_proj")
_INT_FIELDS = ("dp", "tp", "pp", "vpp", "cp", "ep", "etp", "zero", "mbs")
FOLDING_RULE = "Megatron-Core parallel folding: ETP x EP x EDP = TP x CP x DP"
# pipeline split fields (0 or off: Megatron-Core's default even split), kept as int columns too
_SPLIT_FIELDS = ("pp_first", "pp_last", "vpp_group", "recompute_layers")
_SPLIT_FLAGS = ("pp_embedding", "pp_loss")


@dataclass(frozen=True)
class Layout:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    vpp: int = 1  # virtual stages (model chunks) per pipeline rank; > 1 is interleaved 1F1B
    cp: int = 1
    ep: int = 1  # expert parallel, folded over tp x cp x dp
    etp: int | None = None  # expert tensor parallel; None: tp, Megatron-Core's default
    zero: int = 0  # 0 plain DDP, 1 optimizer sharded, 2 + gradients, 3 + parameters (FSDP)
    mbs: int = 1
    recompute: str = "none"
    sp: bool = True  # sequence parallelism; only meaningful when tp > 1
    # uneven pipeline: layers of the first / last stage (--decoder-first/last-pipeline-num-layers), 0: even
    pp_first: int = 0
    pp_last: int = 0
    # the embedding / the loss counted as one layer in the split (--account-for-embedding/loss-in-pipeline-split)
    pp_embedding: bool = False
    pp_loss: bool = False
    # micro-batches per group of the interleaved schedule
    # (--microbatch-group-size-per-virtual-pipeline-stage), 0: pp (Megatron-Core's default)
    vpp_group: int = 0
    # selective recompute: the modules recomputed, "+"-joined (--recompute-modules), "": core_attn
    recompute_modules: str = ""
    # full recompute by Megatron's block method: layers of each model chunk recomputed
    # (--recompute-method block --recompute-num-layers N); 0: every layer (uniform)
    recompute_layers: int = 0
    # an explicit split (--pipeline-model-parallel-layout, without commas): "Et*3|t*4|t*4|t*3L"
    pp_layout: str = ""

    def __post_init__(self) -> None:
        if self.etp is None:
            object.__setattr__(self, "etp", self.tp)
        for name in _INT_FIELDS:
            whole_number(f"layout: {name}", getattr(self, name), 0 if name == "zero" else 1, MAX_GPUS)
        for name in _SPLIT_FIELDS:
            whole_number(f"layout: {name}", getattr(self, name), 0, MAX_LAYERS)
        self._check_split()
        self._check_recompute()
        if self.pp_layout:
            self._check_pp_layout()
        if self.zero > 3:
            raise UsageError("layout: zero must be 0, 1, 2 or 3")
        if self.recompute not in RECOMPUTE_MODES:
            raise UsageError(f"layout: recompute must be one of {', '.join(RECOMPUTE_MODES)}")
        if self.vpp > 1 and self.pp == 1:
            raise UsageError("layout: vpp > 1 needs pp > 1")
        folded = self.tp * self.cp * self.dp
        if folded % (self.ep * self.expert_tp):
            raise UsageError(
                f"layout: ep*etp = {self.ep}*{self.expert_tp} must divide tp*cp*dp = {folded} ({FOLDING_RULE})"
            )

    @property
    def edp(self) -> int:
        """Expert data parallel: the ranks holding the same expert shard."""
        return self.tp * self.cp * self.dp // (self.ep * self.expert_tp)

    @property
    def expert_tp(self) -> int:
        """etp as an int: __post_init__ has replaced None (tp, the default) by then."""
        return self.tp if self.etp is None else self.etp

    def _check_split(self) -> None:
        """Megatron-Core's rules on uneven splits that need no model (the rest: Planner.check_layout)."""
        uneven = self.pp_first or self.pp_last
        if (uneven or self.pp_embedding or self.pp_loss) and self.pp == 1:
            raise UsageError("layout: pp_first, pp_last, pp_embedding and pp_loss need pp > 1")
        if uneven and (self.pp_embedding or self.pp_loss):
            raise UsageError(
                "layout: Megatron-Core does not combine an uneven split (pp_first/pp_last) with pp_embedding/pp_loss"
            )
        if self.vpp_group and self.vpp == 1:
            raise UsageError("layout: vpp_group needs vpp > 1 (it groups the interleaved schedule's micro-batches)")
        if self.vpp_group and self.vpp_group < self.pp:
            raise UsageError(
                f"layout: vpp_group={self.vpp_group} must be at least pp={self.pp} (Megatron-Core's "
                f"microbatch group per virtual stage ranges over [pp, micro-batches])"
            )

    def _check_pp_layout(self) -> None:
        chunks = pipeline_layout_chunks(self.pp_layout)
        if len(chunks) != self.pp * self.vpp:
            raise UsageError(
                f"layout: pp_layout has {len(chunks)} stages, not pp x vpp = {self.pp * self.vpp} "
                f"(Megatron-Core derives vpp from its length over pp)"
            )
        if self.pp_first or self.pp_last or self.pp_embedding or self.pp_loss:
            raise UsageError("layout: pp_layout names every stage; leave out pp_first, pp_last, pp_embedding, pp_loss")

    def stage_layer_counts(self) -> list[int]:
        """Decoder layers of each pipeline rank under pp_layout (its chunks are entries r, r+pp, ...)."""
        chunks = pipeline_layout_chunks(self.pp_layout)
        return [sum(chunks[r :: self.pp]) for r in range(self.pp)]

    def _check_recompute(self) -> None:
        unknown = [name for name in self.recompute_modules.split("+") if name and name not in RECOMPUTE_MODULES]
        if unknown:
            raise UsageError(f"layout: recompute module {unknown[0]!r} is not one of {', '.join(RECOMPUTE_MODULES)}")
        if self.recompute_modules and self.recompute != "selective":
            raise UsageError("layout: recompute_modules needs recompute=selective (Megatron's selective granularity)")
        if self.recompute_layers and self.recompute != "full":
            raise UsageError("layout: recompute_layers (the block method) needs recompute=full")

    @property
    def recompute_mask(self) -> int:
        """Bit i set where RECOMPUTE_MODULES[i] is recomputed (selective; none named: core_attn)."""
        if self.recompute != "selective":
            return 0
        names = [name for name in self.recompute_modules.split("+") if name] or ["core_attn"]
        return sum(1 << RECOMPUTE_MODULES.index(name) for name in set(names))

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def __str__(self) -> str:
        parts = [f"tp={self.tp}", f"pp={self.pp}"]
        parts += [f"vpp={self.vpp}"] * (self.vpp > 1) + [f"cp={self.cp}"] * (self.cp > 1)
        parts += [f"ep={self.ep}"] * (self.ep > 1) + [f"etp={self.etp}"] * (self.etp != self.tp)
        parts += [f"dp={self.dp}", f"mbs={self.mbs}", f"zero={self.zero}", f"recompute={self.recompute}"]
        parts += [f"{name}={getattr(self, name)}" for name in _SPLIT_FIELDS if getattr(self, name)]
        parts += [f"{name}=1" for name in _SPLIT_FLAGS if getattr(self, name)]
        parts += [f"recompute_modules={self.recompute_modules}"] * bool(self.recompute_modules)
        parts += [f"pp_layout={self.pp_layout}"] * bool(self.pp_layout)
        return ",".join(parts + ["sp=0"] * (self.tp > 1 and not self.sp))


def check_moe_rules(layout: Layout, experts: int | None) -> None:
    """Megatron-Core's rules that need the model: expert parallelism needs experts, as many as a
    multiple of ep; an MoE model with tp > 1 trains with sequence parallelism."""
    if experts is None:
        if layout.ep > 1 or layout.etp != layout.tp:
            raise UsageError(
                f"layout {layout}: ep and etp need an MoE model (Megatron-Core: num_moe_experts must be set "
                f"to use expert parallelism)"
            )
        return
    if experts % layout.ep:
        raise UsageError(
            f"layout {layout}: ep={layout.ep} must divide the {experts} experts (Megatron-Core: num_experts "
            f"a multiple of expert_model_parallel_size)"
        )
    if layout.tp > 1 and not layout.sp:
        raise UsageError(
            f"layout {layout}: an MoE model with tp={layout.tp} needs sequence parallelism (Megatron-Core's "
            f"MoELayer refuses to train with tensor parallelism without it)"
        )


def pipeline_layout_chunks(text: str) -> list[int]:
    """Decoder layers of each virtual stage of a Megatron-Core --pipeline-model-parallel-layout string
    ('|' between stages; E embedding, t decoder layer, m multi-token-prediction layer, L loss; x*n and
    (...)*n repeat), checked by its rules: E opens the first stage and L closes the last, each exactly
    once. MTP layers (m) are understood only where the model prices them, on the last stage just
    before the loss (DeepSeek-V3's recipes put them there); Planner.check_pipeline checks their count."""
    expanded = _expanded_layout(text)
    if set(expanded) - set("EtmL|"):
        bad = sorted(set(expanded) - set("EtmL|"))
        raise UsageError(
            f"layout: pp_layout {text!r}: only E, t, m, L, '|', x*n and (...)*n are understood (not {', '.join(bad)})"
        )
    flat = expanded.replace("|", "")
    if not flat.startswith("E") or not flat.endswith("L") or flat.count("E") != 1 or flat.count("L") != 1:
        raise UsageError(
            f"layout: pp_layout {text!r} must open with the embedding E and close with the loss L, "
            f"each once (Megatron-Core's rule)"
        )
    stages = expanded.split("|")
    if "m" in "".join(stages[:-1]) + stages[-1].rstrip("L").rstrip("m"):
        raise UsageError(
            f"layout: pp_layout {text!r}: MTP layers (m) are modelled only on the last stage, just before "
            f"the loss L, where the output head is"
        )
    return [stage.count("t") for stage in stages]


def pipeline_layout_mtp(text: str) -> int:
    """MTP layers (m) a pipeline layout string names (pipeline_layout_chunks checks where)."""
    return _expanded_layout(text).count("m")


def _expanded_layout(text: str) -> str:
    """The layout string with its x*n and (...)*n repeats unrolled."""
    expanded = text
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        # bounded before it is built: a typo's repeat count must not fill the memory
        grown = sum(len(m.group(1)) * int(m.group(2)) for m in re.finditer(pattern, expanded))
        if grown > 4 * MAX_LAYERS:
            raise UsageError(f"layout: pp_layout {text!r} unrolls to more than {4 * MAX_LAYERS:,} symbols")
        expanded = re.sub(pattern, lambda match: match.group(1) * int(match.group(2)), expanded)
    return expanded


def parse_layout(text: str, gpus: int | None = None) -> Layout:
    """'tp=8,pp=4,dp=2,mbs=1,zero=1,recompute=selective' -> Layout; dp may be left out when gpus is known."""
    values: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep or key not in {f.name for f in fields(Layout)}:
            raise UsageError(
                f"bad layout item {item!r}: use key=value with keys {', '.join(f.name for f in fields(Layout))}"
            )
        value = value.strip().lower()
        if key in ("recompute", "recompute_modules"):
            values[key] = value
        elif key == "pp_layout":
            values[key] = item.partition("=")[2].strip()  # its letters are case-sensitive (E, t, L)
        elif key in ("sp", *_SPLIT_FLAGS):
            values[key] = value in ("1", "true", "yes", "on")
        else:
            # ASCII digits only: str.isdigit() also takes '²' and other scripts' digits, which int() refuses
            if not (value.isascii() and value.isdigit()) or len(value) > len(str(MAX_GPUS)):
                raise UsageError(f"bad layout item {item!r}: {key} takes a whole number up to {MAX_GPUS}")
            values[key] = int(value)
    if "dp" not in values and gpus:
        others = values.get("tp", 1) * values.get("pp", 1) * values.get("cp", 1)
        if gpus % others:
            raise UsageError(f"layout {text!r}: tp*pp*cp = {others} does not divide {gpus} GPUs")
        values["dp"] = gpus // others
    layout = Layout(**values)
    if gpus and layout.gpus != gpus:
        raise UsageError(f"layout {text!r} uses {layout.gpus} GPUs (dp*tp*pp*cp), not the {gpus} asked for")
    return layout


class LayoutBatch:
    """Many layouts as parallel int arrays (recompute as 0/1/2), so costs are computed at once."""

    # one int64 array per Layout field (sp and the split flags as 0/1, recompute as its mode's index),
    # set from `columns` in __init__
    dp: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    vpp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    zero: np.ndarray
    mbs: np.ndarray
    recompute: np.ndarray
    recompute_mask: np.ndarray  # bit i: RECOMPUTE_MODULES[i] recomputed
    sp: np.ndarray
    pp_first: np.ndarray
    pp_last: np.ndarray
    vpp_group: np.ndarray
    recompute_layers: np.ndarray
    pp_embedding: np.ndarray
    pp_loss: np.ndarray
    pp_layout_chunk: np.ndarray  # the largest chunk of an explicit pp_layout, 0: none

    def __init__(self, columns: Mapping[str, ArrayLike], pp_layouts: list[str] | None = None) -> None:
        self.columns = {name: np.asarray(col, dtype=np.int64) for name, col in columns.items()}
        rows = len(self.columns["dp"])
        # explicit pipeline layouts (Layout.pp_layout), one per row ("" where none)
        self.pp_layouts = list(pp_layouts) if pp_layouts is not None else [""] * rows
        self.stage_counts = self._stage_counts() if any(self.pp_layouts) else None
        for name in (*_SPLIT_FIELDS, *_SPLIT_FLAGS):  # an even split unless the columns say otherwise
            self.columns.setdefault(name, np.zeros(rows, dtype=np.int64))
        # selective recompute without modules named: Megatron's default, the attention core
        self.columns.setdefault("recompute_mask", np.where(self.columns["recompute"] == 1, 1, 0))
        self.columns.setdefault("etp", self.columns["tp"])  # Megatron-Core's default: etp = tp
        self.columns.setdefault("pp_layout_chunk", np.zeros(rows, dtype=np.int64))
        for name, col in self.columns.items():
            setattr(self, name, col)

    @classmethod
    def from_layouts(cls, layouts: list[Layout]) -> LayoutBatch:
        rows = [asdict(layout) for layout in layouts]
        columns = {name: [row[name] for row in rows] for name in _INT_FIELDS}
        columns["recompute"] = [RECOMPUTE_MODES.index(row["recompute"]) for row in rows]
        columns["sp"] = [int(row["sp"]) for row in rows]
        for name in (*_SPLIT_FIELDS, *_SPLIT_FLAGS):
            columns[name] = [int(row[name]) for row in rows]
        columns["recompute_mask"] = [layout.recompute_mask for layout in layouts]
        columns["pp_layout_chunk"] = [
            max(pipeline_layout_chunks(layout.pp_layout)) if layout.pp_layout else 0 for layout in layouts
        ]
        return cls(columns, [layout.pp_layout for layout in layouts])

    def _stage_counts(self) -> np.ndarray:
        """(rows, largest pp) decoder layers of each stage under the rows' explicit layouts (-1: none)."""
        counts = np.full((len(self.pp_layouts), int(self.columns["pp"].max())), -1, dtype=np.int64)
        for row, text in enumerate(self.pp_layouts):
            if text:
                pp = int(self.columns["pp"][row])
                chunks = pipeline_layout_chunks(text)
                counts[row, :pp] = [sum(chunks[r::pp]) for r in range(pp)]
        return counts

    def repeat_row(self, row: int, times: int) -> LayoutBatch:
        """Layout `row` `times` over (to price its stages side by side)."""
        return LayoutBatch(
            {name: np.repeat(col[row : row + 1], times) for name, col in self.columns.items()},
            [self.pp_layouts[row]] * times,
        )

    def __len__(self) -> int:
        return len(self.dp)

    def layout(self, i: int) -> Layout:
        values: dict[str, Any] = {name: int(self.columns[name][i]) for name in (*_INT_FIELDS, *_SPLIT_FIELDS)}
        flags = {name: bool(self.columns[name][i]) for name in _SPLIT_FLAGS}
        mask = int(self.recompute_mask[i])
        modules = "+".join(name for bit, name in enumerate(RECOMPUTE_MODULES) if mask >> bit & 1)
        return Layout(
            **values,
            **flags,
            recompute=RECOMPUTE_MODES[int(self.recompute[i])],
            sp=bool(self.sp[i]),
            recompute_modules="" if modules in ("", "core_attn") else modules,
            pp_layout=self.pp_layouts[i],
        )

    @property
    def seq_parallel(self) -> np.ndarray:
        on: np.ndarray = (self.sp == 1) & (self.tp > 1)
        return on


def group_placement(size: ArrayLike, stride: ArrayLike, nvlink_domain: int) -> tuple[np.ndarray, np.ndarray]:
    """(ranks_per_domain, domains) of a group of `size` ranks `stride` apart."""
    size = np.asarray(size)
    per_domain = np.clip(nvlink_domain // np.asarray(stride), 1, size)
    return per_domain, -(-size // per_domain)


def in_one_domain(size: ArrayLike, stride: ArrayLike, nvlink_domain: int) -> np.ndarray:
    """Whether a group of `size` ranks `stride` apart stays inside one NVLink domain (its
    collectives then run on the scale-up network only), for EP, TP or any other group."""
    inside: np.ndarray = group_placement(size, stride, nvlink_domain)[1] == 1
    return inside


def layout_groups(batch: LayoutBatch, nvlink_domain: int) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """For each kind of group: (size, ranks_per_domain, domains), one entry per layout.

    tp: the tensor-parallel group. cp: the context-parallel ring. dp: the gradient-reduction
    group (data x context parallel ranks hold the same weights). On the folded expert grid: etp the
    expert tensor-parallel group (neighbours), ep the dispatch group (etp apart), edp the ranks
    holding the same expert shard (etp*ep apart), tpep the ETP x EP group (the allgather and flex
    dispatchers' group). pp: one pipeline boundary; it crosses domains as soon as
    any boundary of the pipeline does, because the slowest boundary paces the pipeline.
    """
    t, c, d, e, et = batch.tp, batch.cp, batch.dp, batch.ep, batch.etp
    groups = {}
    for name, size, stride in (
        ("tp", t, np.ones_like(t)),
        ("cp", c, t),
        ("dp", d * c, t),
        ("etp", et, np.ones_like(t)),
        ("ep", e, et),
        ("tpep", e * et, np.ones_like(t)),
        ("edp", t * c * d // (e * et), e * et),
    ):
        groups[name] = (size, *group_placement(size, stride, nvlink_domain))
    pp_stride = t * c * d
    pp_domains = np.where(pp_stride * batch.pp <= nvlink_domain, 1, 2)
    groups["pp"] = (np.full_like(t, 2), 3 - pp_domains, pp_domains)
    return groups
