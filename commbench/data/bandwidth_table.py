"""The bandwidth table: how long a collective of S bytes takes on a group, from a measured run.

One entry per (op, scope, group size, dtype, direction) holds the measured points (size, time,
busbw) and a fitted latency-bandwidth model

    time_us(S) = alpha_us + S * busbw_factor / (busbw_gbps * 1e3)        (1 GB/s = 1e3 B/us)

alpha is the latency (us) and busbw the asymptotic bus bandwidth (GB/s); busbw_factor is the
op's nccl-tests factor for the group size (2(n-1)/n for all_reduce ...), taken from the records,
and 1 (busbw = algbw) where that factor is 0, as for a group of one rank.

Which records make an entry:
  - out-of-place rows; in-place rows only where the run has no out-of-place row for that
    entry (BandwidthTable.from_run(..., in_place=True) prefers in-place instead). The entry
    says which variant it holds.
  - rows with wrong elements (wrong > 0) or a non-positive time or size are left out.
  - each row counts by its mean time per op (Record.time_us_mean: what a training step pays on
    average, the slowest rank's for commbench's rows, the rank-averaged one nccl-tests prints);
    rows of older runs without a mean count by their time_us (a median). The entry's time_stat
    says which, and its label shows it.
  - several rows of one size (pairs of a pairwise run, runs merged together) count as one
    point: the median of those times.

Answering time_us(op, scope, group_size, S), vectorised over S: the fitted model times the
measured/model ratio, that ratio interpolated log-log between the measured sizes and held at
its end values outside them. So a measured size answers its own measurement; between two
sizes the model's shape carries the curve (plain log-log interpolation of the times would bow
by up to 6% at the latency-bandwidth knee when points are a factor 4 apart), kept between
the two neighbouring measurements so that a rising curve keeps rising; below and above
the measured range the fitted model continues the curve, scaled to meet the end point, so the
answer is continuous, stays positive and flattens towards the latency for small sizes.

The fit minimises relative error (each point counts by its percentage miss, so 8-byte and
1-GiB points weigh alike), with Huber weights recomputed a few times so that a single noisy
row does not pull the line; alpha and the cost per byte are kept non-negative. Its error is
reported as the RMS and the largest relative miss over the measured points.

No torch and no pydantic on import: the planner loads this module on its fast path.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

if TYPE_CHECKING:
    from commbench.data.rundir import Run
    from commbench.data.schema import Record

from commbench.scopes import nvlink_domain_of

FORMAT = "commbench.bandwidth_table/1"
MODEL = "time_us = alpha_us + size_bytes * busbw_factor / (busbw_gbps * 1e3)"
BYTES_PER_US_PER_GBPS = 1e3

_HUBER_K = 1.345  # the usual Huber tuning constant, in units of the residuals' robust spread
_REWEIGHT_ROUNDS = 8


@dataclass(frozen=True)
class Fit:
    """A fitted latency-bandwidth model and how well it matches the points it was fitted to."""

    alpha_us: float
    busbw_gbps: float
    rms_rel_error: float
    max_rel_error: float


def model_time_us(fit: Fit, size_bytes: ArrayLike, busbw_factor: float) -> np.ndarray:
    return fit.alpha_us + np.asarray(size_bytes, dtype=float) * busbw_factor / (fit.busbw_gbps * BYTES_PER_US_PER_GBPS)


def fit_latency_bandwidth(sizes: ArrayLike, times_us: ArrayLike, busbw_factor: float) -> Fit:
    """Robust fit of time = alpha + S * factor / busbw to measured points, in relative error."""
    sizes = np.asarray(sizes, dtype=float)
    times = np.asarray(times_us, dtype=float)
    moved = sizes * busbw_factor  # bytes through each rank
    if len(np.unique(sizes)) < 2:
        # one size cannot separate latency from bandwidth: call all of it bandwidth
        alpha, per_byte = 0.0, float(np.min(times / moved))
    else:
        weights = np.ones_like(times)
        for _ in range(_REWEIGHT_ROUNDS):
            alpha, per_byte = _weighted_relative_fit(moved, times, weights)
            residuals = (alpha + per_byte * moved - times) / times
            weights = _huber_weights(residuals)
    fit_rel = (alpha + per_byte * moved - times) / times
    return Fit(
        alpha_us=float(alpha),
        busbw_gbps=float(1.0 / (per_byte * BYTES_PER_US_PER_GBPS)),
        rms_rel_error=float(np.sqrt(np.mean(fit_rel**2))),
        max_rel_error=float(np.max(np.abs(fit_rel))),
    )


def _weighted_relative_fit(moved: np.ndarray, times: np.ndarray, weights: np.ndarray) -> tuple[float, float]:
    """Least squares of (alpha + b * moved) / t = 1, with alpha >= 0 and b > 0."""
    sqrt_w = np.sqrt(weights)
    design = np.stack([sqrt_w / times, sqrt_w * moved / times], axis=1)
    (alpha, per_byte), *_ = np.linalg.lstsq(design, sqrt_w, rcond=None)
    if per_byte <= 0:
        # times that do not grow with size carry no bandwidth information; the fastest point
        # bounds the cost per byte from above, which keeps the answer finite and conservative
        per_byte = float(np.min(times / moved))
        alpha = _best_alpha(moved, times, weights, per_byte)
    elif alpha < 0:
        alpha = 0.0
        column = sqrt_w * moved / times
        per_byte = float(column @ sqrt_w / (column @ column))
    return max(float(alpha), 0.0), float(per_byte)


def _best_alpha(moved: np.ndarray, times: np.ndarray, weights: np.ndarray, per_byte: float) -> float:
    inverse = weights / times**2
    return float(np.sum(inverse * (times - per_byte * moved)) / np.sum(inverse))


def _huber_weights(residuals: np.ndarray) -> np.ndarray:
    spread = 1.4826 * np.median(np.abs(residuals - np.median(residuals)))
    if spread <= 1e-12:
        return np.ones_like(residuals)
    scaled = np.abs(residuals) / (_HUBER_K * spread)
    return np.where(scaled <= 1.0, 1.0, 1.0 / np.maximum(scaled, 1e-12))


@dataclass
class Entry:
    """The measured curve and fitted model of one (op, scope, group size, dtype, direction, routing)."""

    op: str
    scope: str
    group_size: int
    dtype: str
    in_place: bool
    busbw_factor: float
    sizes: np.ndarray  # bytes, ascending, distinct
    times_us: np.ndarray
    fit: Fit
    n_groups: int = 1
    direction: str | None = None
    time_stat: str = "mean per op"
    routing: str | None = None  # all_to_allv: its skew (uniform, zipf:S, ...), one curve per routing
    _log_sizes: np.ndarray = field(init=False, repr=False)
    _log_ratio: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # computed once: the planner prices thousands of layouts through time_us
        self._log_sizes = np.log(self.sizes)
        self._log_ratio = np.log(self.times_us / model_time_us(self.fit, self.sizes, self.busbw_factor))

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.op, self.scope, self.group_size, self.dtype, self.direction, self.routing)

    @property
    def label(self) -> str:
        parts = [self.op, self.scope, f"{self.group_size} ranks", self.dtype]
        if self.direction:
            parts.append(self.direction)
        if self.routing:
            parts.append(self.routing)
        parts.append("in-place" if self.in_place else "out-of-place")
        parts.append(self.time_stat)
        return " / ".join(parts)

    @property
    def measured_busbw_gbps(self) -> np.ndarray:
        return self.sizes * self.busbw_factor / (self.times_us * BYTES_PER_US_PER_GBPS)

    def time_us(self, size_bytes: ArrayLike) -> Any:
        """Microseconds for a collective of size_bytes (scalar or array) on this group."""
        size = np.maximum(np.asarray(size_bytes, dtype=float), 1.0)
        log_ratio = np.interp(np.log(size), self._log_sizes, self._log_ratio)
        out = model_time_us(self.fit, size, self.busbw_factor) * np.exp(log_ratio)
        if len(self.sizes) > 1:
            # the model bows (it is convex in log-log) and could dip below a flat measured
            # segment; keeping the answer between the segment's two measurements keeps a
            # non-decreasing curve non-decreasing
            right = np.clip(np.searchsorted(self.sizes, size), 1, len(self.sizes) - 1)
            before, after = self.times_us[right - 1], self.times_us[right]
            inside = (size >= self.sizes[0]) & (size <= self.sizes[-1])
            out = np.where(inside, np.clip(out, np.minimum(before, after), np.maximum(before, after)), out)
        return float(out) if out.ndim == 0 else out

    def busbw_gbps(self, size_bytes: ArrayLike) -> Any:
        """Bus bandwidth (GB/s) at size_bytes, from time_us."""
        size = np.asarray(size_bytes, dtype=float)
        busbw = size * self.busbw_factor / (np.asarray(self.time_us(size)) * BYTES_PER_US_PER_GBPS)
        return float(busbw) if np.ndim(busbw) == 0 else busbw

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "scope": self.scope,
            "group_size": self.group_size,
            "n_groups": self.n_groups,
            "dtype": self.dtype,
            "in_place": self.in_place,
            "direction": self.direction,
            "time_stat": self.time_stat,
            **({"routing": self.routing} if self.routing else {}),  # all_to_allv only: other tables keep their keys
            "busbw_factor": self.busbw_factor,
            "alpha_us": self.fit.alpha_us,
            "busbw_gbps": self.fit.busbw_gbps,
            "fit_rms_rel_error": self.fit.rms_rel_error,
            "fit_max_rel_error": self.fit.max_rel_error,
            "points": {
                "size_bytes": [int(s) for s in self.sizes],
                "time_us": [float(t) for t in self.times_us],
                "busbw_gbps": [float(b) for b in self.measured_busbw_gbps],
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Entry:
        points = data["points"]
        fit = Fit(data["alpha_us"], data["busbw_gbps"], data["fit_rms_rel_error"], data["fit_max_rel_error"])
        return cls(
            op=data["op"],
            scope=data["scope"],
            group_size=int(data["group_size"]),
            dtype=data["dtype"],
            in_place=bool(data["in_place"]),
            busbw_factor=float(data["busbw_factor"]),
            sizes=np.asarray(points["size_bytes"], dtype=float),
            times_us=np.asarray(points["time_us"], dtype=float),
            fit=fit,
            n_groups=int(data.get("n_groups", 1)),
            direction=data.get("direction"),
            time_stat=data.get("time_stat", "median per op (no mean recorded)"),
            routing=data.get("routing"),
        )


@dataclass
class BandwidthTable:
    """Every measured curve of a run, keyed by (op, scope, group size, dtype, direction, routing).

    world_size and nodes describe the run's layout, so a "world" entry can be placed:
    placement() turns a scope and group size into (ranks per node, nodes).
    """

    items: list[Entry]
    source: str = ""
    world_size: int = 0
    nodes: int = 1
    warnings: list[str] = field(default_factory=list)
    synthetic: bool = False  # the run's run.json says no machine measured it

    @classmethod
    def from_run(cls, run_or_path: str | Path | Run, in_place: bool = False) -> BandwidthTable:
        """From a run directory (path) or a loaded commbench.data.rundir.Run."""
        if isinstance(run_or_path, (str, Path)):
            from commbench.data.rundir import load_run  # pydantic only when a run is read from disk

            run = load_run(run_or_path)
        else:
            run = run_or_path
        # "nodes" of the table are NVLink domains: hosts on a DGX, racks on an NVL72 run
        domains = {nvlink_domain_of(node) for node in run.info.nodes}
        table = cls.from_records(
            run.records,
            source=str(run.path),
            world_size=run.info.world_size,
            nodes=max(1, len(domains)),
            in_place=in_place,
        )
        table.warnings[:0] = list(run.warnings)
        if run.info.synthetic:  # whoever prices or prints from it must see that no machine measured it
            table.synthetic = True
            table.warnings.insert(0, f"{run.path}: SYNTHETIC, not a measurement: {run.info.note or 'no note given'}")
        return table

    @classmethod
    def from_records(
        cls,
        records: Iterable[dict[str, Any] | Record],
        source: str = "",
        world_size: int = 0,
        nodes: int = 1,
        in_place: bool = False,
    ) -> BandwidthTable:
        """From record dicts (or Record models) in the results schema."""
        rows = [rec if isinstance(rec, dict) else rec.model_dump() for rec in records]
        usable = [rec for rec in rows if rec.get("wrong", 0) <= 0 and rec["time_us"] > 0 and rec["size_bytes"] > 0]
        groups: dict[tuple[Any, ...], dict[bool, list[dict[str, Any]]]] = {}
        for rec in usable:
            key = (
                rec["op"],
                rec["scope"],
                int(rec["group_size"]),
                rec["dtype"],
                rec.get("direction"),
                rec.get("routing"),
            )
            variants = groups.setdefault(key, {True: [], False: []})
            variants[bool(rec["in_place"])].append(rec)
        items = [_entry_of(key, variants[in_place] or variants[not in_place]) for key, variants in groups.items()]
        items.sort(key=lambda e: (e.op, e.scope, e.group_size, e.dtype, e.direction or "", e.routing or ""))
        world = world_size or max((e.group_size for e in items if e.scope == "world"), default=0)
        warnings = (
            []
            if items
            else [f"{source or 'records'}: no usable records (none with a positive time and no wrong elements)"]
        )
        return cls(items=items, source=source, world_size=world, nodes=nodes, warnings=warnings)

    def entries(self, op: str | None = None, scope: str | None = None) -> list[Entry]:
        return [e for e in self.items if (op is None or e.op == op) and (scope is None or e.scope == scope)]

    def entry(
        self,
        op: str,
        scope: str,
        group_size: int,
        dtype: str | None = None,
        direction: str | None = None,
        routing: str | None = None,
    ) -> Entry:
        """The entry for a query; where several dtypes, directions or routings match, the fastest (highest fitted busbw)."""
        matches = [
            e
            for e in self.items
            if e.op == op
            and e.scope == scope
            and e.group_size == group_size
            and (dtype is None or e.dtype == dtype)
            and (direction is None or e.direction == direction)
            and (routing is None or e.routing == routing)
        ]
        if not matches:
            measured = ", ".join(sorted({f"{e.op}/{e.scope}/{e.group_size}" for e in self.items})) or "nothing"
            raise LookupError(
                f"no {op} measured on {scope} groups of {group_size}"
                f"{f' in {dtype}' if dtype else ''}; measured: {measured}"
            )
        return max(matches, key=lambda e: e.fit.busbw_gbps)

    def time_us(self, op: str, scope: str, group_size: int, size_bytes: ArrayLike, dtype: str | None = None) -> Any:
        return self.entry(op, scope, group_size, dtype).time_us(size_bytes)

    def busbw_gbps(self, op: str, scope: str, group_size: int, size_bytes: ArrayLike, dtype: str | None = None) -> Any:
        return self.entry(op, scope, group_size, dtype).busbw_gbps(size_bytes)

    def placement(self, scope: str, group_size: int) -> tuple[int, int] | None:
        """(ranks per domain, NVLink domains) of a group of this scope; None for pairs, which have no
        one placement. A host group sits inside one domain (it is measured where a domain spans hosts)."""
        if scope in ("intra", "host"):
            return group_size, 1
        if scope == "inter":
            return 1, group_size
        if scope == "world":
            return max(1, self.world_size // self.nodes), self.nodes
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "model": MODEL,
            "source": self.source,
            "world_size": self.world_size,
            "nodes": self.nodes,
            "entries": [e.to_dict() for e in self.items],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BandwidthTable:
        if data.get("format") != FORMAT:
            raise ValueError(f"not a bandwidth table (format {data.get('format')!r}, expected {FORMAT!r})")
        return cls(
            items=[Entry.from_dict(e) for e in data["entries"]],
            source=data.get("source", ""),
            world_size=int(data.get("world_size", 0)),
            nodes=int(data.get("nodes", 1)),
        )

    def to_rows(self) -> list[dict[str, Any]]:
        """One flat row per measured point, with its entry's fit and the model's time there (for CSV)."""
        rows = []
        keyed_by_routing = any(e.routing for e in self.items)  # the column appears where all_to_allv was measured
        for e in self.items:
            model = model_time_us(e.fit, e.sizes, e.busbw_factor)
            for size, time, busbw, fitted in zip(e.sizes, e.times_us, e.measured_busbw_gbps, model):
                rows.append(
                    {
                        "op": e.op,
                        "scope": e.scope,
                        "group_size": e.group_size,
                        "n_groups": e.n_groups,
                        "dtype": e.dtype,
                        "in_place": e.in_place,
                        "direction": e.direction or "",
                        **({"routing": e.routing or ""} if keyed_by_routing else {}),
                        "busbw_factor": e.busbw_factor,
                        "alpha_us": e.fit.alpha_us,
                        "fit_busbw_gbps": e.fit.busbw_gbps,
                        "fit_rms_rel_error": e.fit.rms_rel_error,
                        "size_bytes": int(size),
                        "time_us": float(time),
                        "busbw_gbps": float(busbw),
                        "model_time_us": float(fitted),
                    }
                )
        return rows


def _mean_time(rec: dict[str, Any]) -> float:
    """The mean per-op time (what a step pays); older records without one give their median."""
    mean = rec.get("time_us_mean")
    return float(rec["time_us"] if mean is None else mean)


def _entry_of(key: tuple[Any, ...], records: list[dict[str, Any]]) -> Entry:
    op, scope, group_size, dtype, direction, routing = key
    points: dict[int, list[float]] = {}
    for rec in records:
        points.setdefault(int(rec["size_bytes"]), []).append(_mean_time(rec))
    sizes = np.array(sorted(points), dtype=float)
    times = np.array([float(np.median(points[size])) for size in sorted(points)])
    factor = float(records[0].get("busbw_factor") or 0.0) or 1.0
    return Entry(
        op=op,
        scope=scope,
        group_size=group_size,
        dtype=dtype,
        in_place=bool(records[0]["in_place"]),
        busbw_factor=factor,
        sizes=sizes,
        times_us=times,
        fit=fit_latency_bandwidth(sizes, times, factor),
        n_groups=max(int(rec.get("n_groups") or 1) for rec in records),
        direction=direction,
        routing=routing,
        time_stat="mean per op"
        if all(rec.get("time_us_mean") is not None for rec in records)
        else "median per op (no mean recorded)",
    )
