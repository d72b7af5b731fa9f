"""A job's collectives against the benchmark: achieved busbw as a fraction of the benchmark curve.

For every row of an imported job (communicator, op, size bucket; commbench/data/nccl_inspector.py)
the benchmark's bandwidth table (commbench/data/bandwidth_table.py) is read at each call's exact
size, for the communicator's op, scope and group size:

    efficiency = median over calls of (benchmark time at the call's size / the call's time)

with the benchmark's table priced by its rows' median per-op time (time_us: the slowest rank's
median, as a job call's time is its slowest rank's). 1.0 = the typical call moved its bytes as fast
as the benchmark did; 0.5 = at half the benchmark's rate. Medians, not means: a job's calls have a
long tail from everything else the host does (on two shared cores the mean call took up to 1.5x
the median, cv 0.9), which would otherwise decide the figure; the mean-based busbw is kept beside
it (job_busbw_mean_gbps). The 95% interval is a percentile bootstrap of that median over the calls
(BOOTSTRAP_RESAMPLES, fixed seed, so a rerun prints the same).

Which benchmark entry: the table's (op, scope, group size), in place for the ops PyTorch runs in
place (IN_PLACE_OPS: its all_reduce, broadcast and reduce overwrite their tensor; its all_gather
and reduce_scatter write a separate output), out of place for the others (Inspector does not log
which; on gloo the two variants of all_reduce differ several-fold); where the table has no entry of that
scope, one of the same op and group size placed alike (ranks per node x nodes, BandwidthTable.placement).
A row with no such entry is skipped, saying why. Sizes outside the benchmark's measured range are
read from its fitted model and flagged `extrapolated`.

Rows below FAR_BELOW (or --below) name their communicator, its hosts, and the ranks of it whose own
median time is furthest above the communicator's (a rank that enters late shows as the others
waiting, so per-rank figures point at stragglers, not at the link).
Torch-free.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from commbench.data.bandwidth_table import BandwidthTable, Entry
from commbench.data.rundir import Run

FAR_BELOW = 0.7
IN_PLACE_OPS = frozenset({"all_reduce", "broadcast", "reduce"})
BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95


@dataclass
class RowEfficiency:
    comm_id: str
    comm_name: str
    hosts: list[str]
    op: str
    scope: str
    group_size: int
    size_bytes: int
    size_bucket: list[int]
    calls: int
    job_busbw_gbps: float
    benchmark_busbw_gbps: float
    job_busbw_mean_gbps: float  # total bytes over total time: what the calls' tail costs on average
    efficiency: float
    ci_low: float
    ci_high: float
    benchmark_entry: str
    extrapolated: bool
    slow_ranks: list[dict[str, Any]] = field(default_factory=list)  # {"rank", "host", "median_us", "vs_comm_median"}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Skipped:
    comm_id: str
    op: str
    size_bytes: int
    why: str


def benchmark_entry(table: BandwidthTable, op: str, scope: str, group_size: int, placement: tuple[int, int]) -> Entry:
    """The table's entry for a communicator of this op, scope, size and placement; LookupError if none."""
    try:
        return table.entry(op, scope, group_size)
    except LookupError as exc:
        alike = [
            e
            for e in table.entries(op)
            if e.group_size == group_size and table.placement(e.scope, e.group_size) == placement
        ]
        if not alike:
            raise exc from None
        return max(alike, key=lambda e: e.fit.busbw_gbps)


def row_efficiency(
    record: dict[str, Any], samples: dict[str, Any], entry: Entry, rank_hosts: dict[str, str], seed: int = 0
) -> RowEfficiency:
    sizes = np.asarray(samples["size_bytes"], dtype=float)
    times = np.asarray(samples["time_us"], dtype=float)
    expected = np.asarray(entry.time_us(sizes), dtype=float).reshape(sizes.shape)
    ratios = expected / times
    efficiency = float(np.median(ratios))
    low, high = _bootstrap(ratios, seed)
    moved = sizes * float(record["busbw_factor"])
    return RowEfficiency(
        comm_id=record["comm_id"],
        comm_name=record.get("comm_name") or "unknown",
        hosts=list(record.get("hosts") or []),
        op=record["op"],
        scope=record["scope"],
        group_size=int(record["group_size"]),
        size_bytes=int(record["size_bytes"]),
        size_bucket=list(record.get("size_bucket") or [record["size_bytes"], record["size_bytes"]]),
        calls=len(times),
        job_busbw_gbps=float(np.median(moved / times) / 1e3),
        benchmark_busbw_gbps=float(np.median(moved / expected) / 1e3),
        job_busbw_mean_gbps=float(moved.sum() / times.sum() / 1e3),
        efficiency=efficiency,
        ci_low=low,
        ci_high=high,
        benchmark_entry=entry.label,
        extrapolated=bool(sizes.min() < entry.sizes[0] or sizes.max() > entry.sizes[-1]),
        slow_ranks=_slow_ranks(samples, rank_hosts),
    )


def _bootstrap(ratios: np.ndarray, seed: int) -> tuple[float, float]:
    if len(ratios) < 2:
        point = float(np.median(ratios))
        return point, point
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(ratios), size=(BOOTSTRAP_RESAMPLES, len(ratios)))
    medians = np.median(ratios[picks], axis=1)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return float(low), float(high)


def _slow_ranks(samples: dict[str, Any], rank_hosts: dict[str, str], top: int = 3) -> list[dict[str, Any]]:
    """The ranks whose own median time is furthest above the communicator's median rank, slowest first."""
    ranks, medians = samples.get("ranks") or [], samples.get("rank_median_us") or []
    if len(ranks) < 2 or len(ranks) != len(medians):
        return []
    typical = float(np.median(medians))
    ordered = sorted(zip(ranks, medians), key=lambda pair: -pair[1])[:top]
    return [
        {
            "rank": int(rank),
            "host": rank_hosts.get(str(rank), "?"),
            "median_us": float(median),
            "vs_comm_median": float(median / typical) if typical > 0 else 1.0,
        }
        for rank, median in ordered
    ]


@dataclass
class JobEfficiency:
    rows: list[RowEfficiency]
    skipped: list[Skipped]
    below: float

    @property
    def far_below(self) -> list[RowEfficiency]:
        return [row for row in self.rows if row.efficiency < self.below]

    def far_below_communicators(self) -> list[dict[str, Any]]:
        """Each communicator with a row below the threshold, its worst row first."""
        found: dict[str, dict[str, Any]] = {}
        for row in sorted(self.far_below, key=lambda r: r.efficiency):
            comm = found.setdefault(
                row.comm_id,
                {
                    "comm_id": row.comm_id,
                    "comm_name": row.comm_name,
                    "hosts": row.hosts,
                    "worst_efficiency": row.efficiency,
                    "rows": 0,
                    "slow_ranks": row.slow_ranks,
                },
            )
            comm["rows"] += 1
        return list(found.values())


def job_efficiency(
    records: list[dict[str, Any]],
    samples: dict[tuple[Any, ...], dict[str, Any]],
    communicators: list[dict[str, Any]],
    tables: dict[bool, BandwidthTable],
    below: float = FAR_BELOW,
) -> JobEfficiency:
    """Every row of an imported job against the benchmark. tables: the benchmark's bandwidth table
    preferring in-place rows (True) and out-of-place rows (False); samples: read_job_samples' dict."""
    comms = {comm["id"]: comm for comm in communicators}
    rows, skipped = [], []
    for record in records:
        comm = comms.get(record.get("comm_id"), {})
        where = Skipped(str(record.get("comm_id")), record["op"], int(record["size_bytes"]), "")
        bucket = record.get("size_bucket") or [record["size_bytes"]]
        kept = samples.get((record.get("comm_id"), record["op"], int(bucket[0])))
        if not kept:
            skipped.append(_why(where, "no samples kept for this row"))
            continue
        if float(record.get("busbw_factor") or 0) <= 0:
            skipped.append(_why(where, f"a communicator of {record['group_size']} moves no bytes between ranks"))
            continue
        nnodes = int(comm.get("nnodes") or 1)
        placement = (max(1, int(record["group_size"]) // nnodes), nnodes)
        try:
            table = tables[record["op"] in IN_PLACE_OPS]
            entry = benchmark_entry(table, record["op"], record["scope"], int(record["group_size"]), placement)
        except LookupError as exc:
            skipped.append(_why(where, str(exc)))
            continue
        rows.append(row_efficiency(record, kept, entry, comm.get("rank_hosts") or {}))
    return JobEfficiency(rows, skipped, below)


def _why(skipped: Skipped, why: str) -> Skipped:
    skipped.why = why
    return skipped


def tables_of_run(run: Run) -> dict[bool, BandwidthTable]:
    """A benchmark run's bandwidth table, priced by each row's median per-op time (time_us), preferring
    in-place rows (True) and out-of-place rows (False)."""
    records = [{**record, "time_us_mean": None} for record in run.records]  # the table then reads time_us
    tables = {}
    for variant in (True, False):
        table = BandwidthTable.from_records(
            records,
            source=str(run.path),
            world_size=run.info.world_size,
            nodes=max(1, len(run.info.nodes)),
            in_place=variant,
        )
        for entry in table.items:
            entry.time_stat = "median per op"
        table.warnings[:0] = list(run.warnings)
        if run.info.synthetic:
            table.synthetic = True
            table.warnings.insert(0, f"{run.path}: SYNTHETIC, not a measurement: {run.info.note or 'no note given'}")
        tables[variant] = table
    return tables


def efficiency_of_runs(job_run: Run, tables: dict[bool, BandwidthTable], below: float = FAR_BELOW) -> JobEfficiency:
    """An imported job (a loaded commbench.data.rundir.Run) against a benchmark's tables."""
    from commbench.data.nccl_inspector import read_job_samples

    return job_efficiency(
        job_run.records,
        read_job_samples(job_run.path),
        job_run.info.args.get("communicators") or [],
        tables,
        below=below,
    )
