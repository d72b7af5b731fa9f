"""The MoE routing model: how many token copies each rank sends to each rank in expert parallelism.

Owns the skew grammar (`uniform`, `zipf:S`, `dirichlet:ALPHA`, `file:PATH`), the placement of
experts over ranks, capacity-factor dropping, the split matrix one all_to_allv row exchanges
(token copies, source rank x destination rank), its received-bytes statistics, and the expected
max/mean received load the planner prices EP with. Torch-free (numpy), so the planner and the
measuring path (commbench.measure.moe) share it.

Model: every source rank routes `tokens` tokens, each to `top_k` experts, T x k token copies per
rank. Expert popularity p_e is
  uniform        1/E, split exactly evenly (the balanced router, no sampling noise)
  zipf:S         p_e proportional to (e+1)^-S: expert 0 the most popular
  dirichlet:A    p ~ Dirichlet(A, ..., A) drawn once with the seed (small A: few hot experts)
and each source rank's T x k copies are drawn as one multinomial over p with the seed (so a
token's k picks are independent draws: the distinct-expert constraint of a real top-k router is
ignored, which matters only when one expert's p exceeds 1/k). With a capacity factor C an expert
takes at most ceil(C x T x k / E) copies from one source rank (GShard's per-group capacity); the
rest are dropped; dropless routing (no C) sends them all. Copies go to the rank owning the expert:
`block` placement gives rank r the experts r*E/n .. (r+1)*E/n - 1, `round_robin` expert e to e mod n.
A file holds a measured split: counts per source rank x destination rank (n x n), per source rank
x expert (n x E), or per expert (E numbers: the popularity p), in JSON (a list of lists, a list,
or {"counts": ...}) or CSV (one source rank per line).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from commbench.data.safe_read import CONFIG, parse_json, read_text
from commbench.errors import UsageError

KINDS = ("uniform", "zipf", "dirichlet", "file")
PLACEMENTS = ("block", "round_robin")

# The planner's default skew per MoE preset, with where it comes from (README "MoE routing").
# Mixtral of Experts (Jiang et al. 2024, arXiv:2401.04088, section 5 "Routing analysis", fig. 7)
# reports no large per-domain specialisation of expert assignment on the Pile, and publishes no
# max/mean load figure: zipf:0.3 (hottest of 8 experts ~1.5x the mean) is an ASSUMPTION standing
# for "close to balanced". DeepSeekMoE (Dai et al. 2024, arXiv:2401.06066) trains with expert- and
# device-level balance losses and reports no load figure either: zipf:0.2 is an ASSUMPTION too.
DEFAULT_SKEW: dict[str, tuple[str, str]] = {
    "mixtral-8x7b": (
        "zipf:0.3",
        "assumption: Mixtral paper (arXiv:2401.04088 sec. 5) shows near-even expert "
        "assignment but publishes no max/mean load",
    ),
    "deepseek-moe-16b": (
        "zipf:0.2",
        "assumption: DeepSeekMoE (arXiv:2401.06066) balances experts with auxiliary "
        "losses and publishes no max/mean load",
    ),
}


@dataclass(frozen=True)
class Routing:
    """A parsed --routing value: its kind, its exponent or concentration, or its file's counts."""

    text: str
    kind: str
    value: float | None = None  # zipf's S, dirichlet's ALPHA
    counts: np.ndarray | None = None  # file: its matrix (2-D) or per-expert counts (1-D)

    @property
    def key(self) -> str:
        """The name the bandwidth table keys curves by: the text, a file by its name only."""
        return f"file:{Path(self.text[5:]).name}" if self.kind == "file" else self.text

    @property
    def file_counts(self) -> np.ndarray | None:
        """A file's counts; None for the other kinds."""
        return self.counts if self.kind == "file" else None

    @property
    def matrix(self) -> np.ndarray | None:
        """A file's 2-D counts (source rank x destination rank or x expert); None otherwise."""
        counts = self.file_counts
        return counts if counts is not None and counts.ndim == 2 else None

    @property
    def parameter(self) -> float:
        """zipf's S or dirichlet's ALPHA (parse_routing sets it for both)."""
        if self.value is None:
            raise ValueError(f"routing {self.text!r} has no parameter")
        return self.value


def parse_routing(text: str) -> Routing:
    """uniform | zipf:S | dirichlet:ALPHA | file:PATH, or a UsageError naming what is wrong."""
    kind, _, rest = str(text).partition(":")
    if kind not in KINDS:
        raise UsageError(f"--routing {text!r}: choose uniform, zipf:S, dirichlet:ALPHA or file:PATH")
    if kind == "uniform":
        if rest:
            raise UsageError(f"--routing {text!r}: uniform takes no value")
        return Routing("uniform", "uniform")
    if kind == "file":
        return Routing(text, "file", counts=_read_counts(rest))
    try:
        value = float(rest)
    except ValueError:
        raise UsageError(f"--routing {text!r}: {kind} needs a number after the colon") from None
    if not math.isfinite(value):
        raise UsageError(f"--routing {text!r}: the {kind} value must be finite")
    if kind == "zipf" and value < 0:
        raise UsageError(f"--routing {text!r}: the zipf exponent cannot be negative")
    if kind == "dirichlet" and value <= 0:
        raise UsageError(f"--routing {text!r}: the dirichlet concentration must be positive")
    return Routing(f"{kind}:{value:g}", kind, value=value)


def _read_counts(path: str) -> np.ndarray:
    file = Path(path)
    if not path or not file.is_file():
        raise UsageError(f"--routing file:{path}: no such file")
    text = read_text(file, CONFIG)  # safe_read: regular file, size cap, UTF-8
    try:
        if file.suffix.lower() == ".json":
            data = parse_json(text, f"--routing file:{path}")
            rows = data.get("counts") if isinstance(data, dict) else data
        else:
            rows = [[float(x) for x in line if x.strip()] for line in csv.reader(text.splitlines()) if line]
        counts = np.asarray(rows, dtype=float)
    except (ValueError, TypeError, AttributeError):
        raise UsageError(f"--routing file:{path}: not a JSON or CSV matrix of numbers") from None
    if counts.ndim == 2 and counts.shape[0] == 1:
        counts = counts[0]
    if counts.ndim not in (1, 2) or counts.size == 0:
        raise UsageError(f"--routing file:{path}: expected a list or a matrix of counts")
    if not np.isfinite(counts).all():
        raise UsageError(f"--routing file:{path}: counts must be finite numbers")
    if (counts < 0).any():
        raise UsageError(f"--routing file:{path}: negative count {counts.min():g}")
    return counts


@dataclass(frozen=True)
class MoeShape:
    """One expert-parallel exchange: who routes how many tokens of what size to which experts."""

    tokens: int  # tokens per source rank
    hidden: int
    elt_bytes: int
    top_k: int
    experts: int
    ranks: int
    placement: str = "block"
    capacity_factor: float | None = None  # None: dropless
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("tokens", "hidden", "elt_bytes", "top_k", "experts", "ranks"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1 (got {getattr(self, name)})")
        if self.top_k > self.experts:
            raise UsageError(f"--top-k {self.top_k} is more than the {self.experts} experts")
        if self.experts < self.ranks:
            raise UsageError(f"{self.experts} experts cannot be placed on {self.ranks} ranks: every rank needs one")
        if self.placement not in PLACEMENTS:
            raise UsageError(f"--placement {self.placement!r}: choose from {', '.join(PLACEMENTS)}")
        cf = self.capacity_factor
        if cf is not None and not (math.isfinite(cf) and cf > 0):
            raise UsageError(f"--capacity-factor must be a positive number, or 0 for dropless (got {cf})")

    @property
    def token_bytes(self) -> int:
        return self.hidden * self.elt_bytes


def expert_owner(experts: int, ranks: int, placement: str = "block") -> np.ndarray:
    """The rank holding each expert."""
    index = np.arange(experts)
    if placement == "round_robin":
        return index % ranks
    return index * ranks // experts  # contiguous blocks, sizes differing by at most one


def expert_popularity(routing: Routing, experts: int, seed: int = 0) -> np.ndarray:
    """p_e, summing to 1 (a file's per-expert counts normalised)."""
    counts = routing.file_counts
    if routing.kind == "zipf":
        weights = (np.arange(experts) + 1.0) ** -routing.parameter
    elif routing.kind == "dirichlet":
        weights = np.random.default_rng(seed).dirichlet(np.full(experts, routing.parameter))
    elif counts is not None and counts.ndim == 1:
        if counts.size != experts:
            raise UsageError(f"--routing {routing.text}: {counts.size} expert counts for {experts} experts")
        weights = counts
    else:
        weights = np.ones(experts)
    total = weights.sum()
    if not total > 0:
        raise UsageError(f"--routing {routing.text}: every expert count is zero")
    popularity: np.ndarray = weights / total
    return popularity


def token_matrix(routing: Routing, shape: MoeShape) -> np.ndarray:
    """Token copies sent from each source rank (row) to each destination rank (column), int64."""
    owner = expert_owner(shape.experts, shape.ranks, shape.placement)
    matrix = routing.matrix
    if matrix is not None:
        per_expert = _file_matrix(matrix, routing.text, shape)
        if per_expert is None:  # already source rank x destination rank
            return _scaled_rows(matrix, shape.tokens * shape.top_k)
    else:
        per_expert = _sampled(routing, shape)
    return _cap_and_place(per_expert, owner, shape)


def _file_matrix(counts: np.ndarray, text: str, shape: MoeShape) -> np.ndarray | None:
    """A file's n x E matrix (--routing `text`) scaled to the tokens; None for an n x n matrix
    (checked here too)."""
    n = shape.ranks
    if counts.shape not in ((n, n), (n, shape.experts)):
        raise UsageError(
            f"--routing {text}: a {counts.shape[0]}x{counts.shape[1]} matrix, expected "
            f"{n}x{n} (source x destination rank) or {n}x{shape.experts} (source rank x expert)"
        )
    sums = counts.sum(axis=1)
    if not np.allclose(sums, sums[0]) or sums[0] <= 0:
        bad = int(np.argmax(np.abs(sums - sums[0])))
        raise UsageError(
            f"--routing {text}: row {bad} routes {sums[bad]:g} token copies, row 0 {sums[0]:g}: "
            "every source rank routes the same tokens x top-k"
        )
    if abs(sums[0] / shape.top_k - round(sums[0] / shape.top_k)) > 1e-9:
        raise UsageError(
            f"--routing {text}: rows route {sums[0]:g} token copies, not a whole number of tokens x top-k {shape.top_k}"
        )
    if counts.shape == (n, n) and n != shape.experts:
        return None
    return _scaled_rows(counts, shape.tokens * shape.top_k)


def _scaled_rows(counts: np.ndarray, copies: int) -> np.ndarray:
    """Each row scaled to `copies` whole copies, largest remainders rounded up."""
    exact = counts / counts.sum(axis=1, keepdims=True) * copies
    whole: np.ndarray = np.floor(exact).astype(np.int64)
    short = copies - whole.sum(axis=1)
    order = np.argsort(-(exact - whole), axis=1, kind="stable")
    for row, missing in enumerate(short):
        whole[row, order[row, :missing]] += 1
    return whole


def _sampled(routing: Routing, shape: MoeShape) -> np.ndarray:
    """Source rank x expert copies: exactly even for uniform, seeded multinomial draws otherwise."""
    copies = shape.tokens * shape.top_k
    popularity = expert_popularity(routing, shape.experts, shape.seed)
    if routing.kind == "uniform":
        return _scaled_rows(np.ones((shape.ranks, shape.experts)), copies)
    rng = np.random.default_rng(shape.seed + 1)  # not the dirichlet's stream: popularity and draws stay independent
    return rng.multinomial(copies, popularity, size=shape.ranks).astype(np.int64)


def _cap_and_place(per_expert: np.ndarray, owner: np.ndarray, shape: MoeShape) -> np.ndarray:
    if shape.capacity_factor is not None:
        capacity = math.ceil(shape.capacity_factor * shape.tokens * shape.top_k / shape.experts)
        per_expert = np.minimum(per_expert, capacity)
    matrix = np.zeros((shape.ranks, shape.ranks), dtype=np.int64)
    for dst in range(shape.ranks):
        matrix[:, dst] = per_expert[:, owner == dst].sum(axis=1)
    return matrix


@dataclass(frozen=True)
class Received:
    """Bytes each rank receives in one exchange, and the busiest."""

    max_bytes: int
    mean_bytes: float
    hottest_rank: int  # rank in the group
    busiest_bytes: int  # the largest of any rank's send or receive bytes (nccl-tests `size`)

    @property
    def imbalance(self) -> float:
        return self.max_bytes / self.mean_bytes if self.mean_bytes else 1.0


def received(matrix: np.ndarray, token_bytes: int) -> Received:
    into = matrix.sum(axis=0) * token_bytes
    out = matrix.sum(axis=1) * token_bytes
    return Received(int(into.max()), float(into.mean()), int(np.argmax(into)), int(max(into.max(), out.max())))


def expected_shares(routing: Routing, experts: int, ranks: int, placement: str = "block", seed: int = 0) -> np.ndarray:
    """The share of all token copies each rank is expected to receive (dropless routing)."""
    matrix = routing.matrix
    if matrix is not None and matrix.shape == (ranks, ranks) != (ranks, experts):
        into = matrix.sum(axis=0)
        shares: np.ndarray = into / into.sum()
        return shares
    if matrix is not None:
        popularity = matrix.sum(axis=0) / matrix.sum()
    else:
        popularity = expert_popularity(routing, experts, seed)
    return np.bincount(expert_owner(experts, ranks, placement), weights=popularity, minlength=ranks)


def expected_imbalance(routing: Routing, experts: int, ranks: int, placement: str = "block", seed: int = 0) -> float:
    """Expected max / mean received bytes over `ranks` expert-parallel ranks (1 for uniform)."""
    if ranks <= 1:
        return 1.0
    return float(expected_shares(routing, experts, ranks, placement, seed).max() * ranks)


@dataclass(frozen=True)
class ExpertLoad:
    """Expected routed load of one EP group, relative to a perfectly even router (arrays per layout).

    hottest: token copies the busiest EP rank's experts process, over the even share (dropless: the
    imbalance; with a capacity factor C each expert keeps at most C x its even share, or exactly that
    when padded to capacity). kept: the share of token copies not dropped."""

    hottest: np.ndarray
    kept: np.ndarray

    @property
    def dropped(self) -> np.ndarray:
        return 1.0 - self.kept


def _rank_shares(routing: Routing, experts: int, ranks: int, capacity: float | None, padded: bool) -> np.ndarray | None:
    """Each EP rank's expected share of all token copies after the capacity cap (None for a
    rank x rank file: no per-expert view, so no cap either)."""
    matrix = routing.matrix
    if matrix is not None and matrix.shape == (ranks, ranks) != (ranks, experts):
        return None
    popularity = matrix.sum(axis=0) / matrix.sum() if matrix is not None else expert_popularity(routing, experts)
    if capacity is not None:
        popularity = np.full(experts, capacity / experts) if padded else np.minimum(popularity, capacity / experts)
    return np.bincount(expert_owner(experts, ranks), weights=popularity, minlength=ranks)


def _one_group_load(
    routing: Routing, experts: int, ranks: int, capacity: float | None, padded: bool
) -> tuple[float, float]:
    if capacity is None and ranks <= 1:
        return 1.0, 1.0  # one rank computes every copy (exactly: a normalised popularity may sum to 1 - 1e-16)
    per_rank = _rank_shares(routing, experts, ranks, capacity, padded)
    if per_rank is None:
        return expected_imbalance(routing, experts, ranks), 1.0
    return float(per_rank.max() * ranks), float(min(1.0, per_rank.sum()))


def _one_domain_load(
    routing: Routing, experts: int, ranks: int, per_domain: int, capacity: float | None, padded: bool
) -> float:
    """The busiest domain's copies over its even share, `per_domain` consecutive ranks of the group
    in each domain (the hottest rank's load where the group has one domain or one rank in each)."""
    if per_domain <= 1 or per_domain >= ranks or ranks % per_domain:
        return _one_group_load(routing, experts, ranks, capacity, padded)[0]
    per_rank = _rank_shares(routing, experts, ranks, capacity, padded)
    if per_rank is None:
        per_rank = expected_shares(routing, experts, ranks)
    domains = ranks // per_domain
    return float(per_rank.reshape(domains, per_domain).sum(axis=1).max() * domains)


def domain_load(
    routing: str,
    experts: int,
    ep: np.ndarray,
    per_domain: np.ndarray,
    capacity: float | None = None,
    padded: bool = False,
) -> np.ndarray:
    """For each layout, the busiest NVLink domain's share of an EP exchange over its even share (EP
    ranks `per_domain` to a domain): the copies bound for (dispatch) or leaving (combine) the ranks
    of one domain all cross that domain's links to the others. At most the hottest rank's load: a
    domain's colder ranks offset its hot one."""
    parsed = parse_routing(routing)
    pairs = np.stack([np.asarray(ep, dtype=np.int64).reshape(-1), np.asarray(per_domain, dtype=np.int64).reshape(-1)])
    unique, which = np.unique(pairs, axis=1, return_inverse=True)
    loads = np.array([_one_domain_load(parsed, experts, int(n), int(r), capacity, padded) for n, r in unique.T])
    return loads[which.reshape(-1)]


def expert_load(
    routing: str, experts: int, ep: np.ndarray, capacity: float | None = None, padded: bool = False
) -> ExpertLoad:
    """ExpertLoad for each layout's EP size under the routing (one evaluation per distinct size).
    One EP rank holding every expert still pays a capacity factor's padding or drops."""
    parsed = parse_routing(routing)
    sizes, which = np.unique(np.asarray(ep), return_inverse=True)
    stats = np.array([_one_group_load(parsed, experts, int(n), capacity, padded) for n in sizes]).reshape(-1, 2)
    return ExpertLoad(stats[which.reshape(-1), 0], stats[which.reshape(-1), 1])
