"""The results database as Prometheus metrics: the newest benchmark of each node set, and what the
newest diagnosis of each cluster says to drain.

Metrics (names follow prometheus.io/docs/practices/naming: base units, a unit suffix, _total for
counters; every family is read from the store at scrape time, so a scrape never sees half an ingest):

  commbench_busbw_bytes_per_second{cluster, nodes, op, scope, group_size, size_bucket}   gauge
      bus bandwidth (nccl-tests' busbw, in bytes/s) of the newest complete commbench sweep of that
      node set, out-of-place rows, at the largest size measured in the bucket
  commbench_collective_time_seconds{same labels}                                        gauge
      that row's per-op time (the slowest rank's median), in seconds
  commbench_sweep_timestamp_seconds{cluster, nodes}                                      gauge
      when that sweep started (Unix time): how old the figures above are
  commbench_runs_total{cluster, kind}                                                    counter
      run directories of each kind the store holds (ingests only add runs)
  commbench_node_drain_recommended{cluster, node}                                        gauge
      1 for each node the newest diagnosis of the cluster says to drain (absent: none)
  commbench_diagnosis_timestamp_seconds{cluster}                                         gauge
      when that diagnosis ran

Cardinality is bounded: size_bucket takes the SIZE_BUCKETS labels only (six ranges, not every size);
nodes is one label per node set (the node names joined by commas, or `first..last (N nodes)` above
NODES_SPELLED_OUT); at most max_node_sets node sets per cluster are exported, the newest first; op,
scope and group_size come from what was measured (a handful of each); node in the drain family is
at most the cluster's node count. So the busbw family has at most
clusters x max_node_sets x ops x scopes x group sizes x 6 series.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from commbench.errors import CommbenchError

# upper edge (bytes, inclusive) -> label; sizes above the last edge are ">256MiB"
SIZE_BUCKETS = (
    (4 << 10, "<=4KiB"),
    (64 << 10, "<=64KiB"),
    (1 << 20, "<=1MiB"),
    (16 << 20, "<=16MiB"),
    (256 << 20, "<=256MiB"),
)
LARGEST_BUCKET = ">256MiB"
NODES_SPELLED_OUT = 8
MAX_NODE_SETS = 20
BUSBW_LABELS = ["cluster", "nodes", "op", "scope", "group_size", "size_bucket"]


def size_bucket_label(size_bytes: int) -> str:
    return next((label for edge, label in SIZE_BUCKETS if size_bytes <= edge), LARGEST_BUCKET)


def nodes_label(nodes: list[str]) -> str:
    names = sorted(nodes)
    if len(names) <= NODES_SPELLED_OUT:
        return ",".join(names)
    return f"{names[0]}..{names[-1]} ({len(names)} nodes)"


_NEWEST_SWEEPS = """
SELECT run_id, cluster, nodes, epoch(created) FROM (
  SELECT run_id, cluster, nodes, created,
         row_number() OVER (PARTITION BY cluster, nodeset_digest ORDER BY created DESC NULLS LAST, run_id DESC) AS newest
  FROM runs WHERE kind = 'sweep' AND source = 'commbench' AND complete AND NOT coalesce(synthetic, false))
WHERE newest = 1 ORDER BY cluster, created DESC
"""
_ROWS = """
SELECT op, scope, group_size, size_bytes, busbw_gbps, time_us FROM records
WHERE run_id = ? AND NOT in_place AND scope <> 'pair' AND wrong <= 0 AND time_us > 0 ORDER BY size_bytes
"""


class StoreCollector(Collector):
    """Reads the database at db on every collect (a read-only connection each scrape)."""

    def __init__(self, db: str | Path, max_node_sets: int = MAX_NODE_SETS):
        self.db = Path(db)
        self.max_node_sets = max_node_sets

    def collect(self) -> Iterator[Metric]:
        from commbench.data.store import open_read_only

        con = open_read_only(self.db)
        try:
            yield from self._sweeps(con)
            yield from self._runs(con)
            yield from self._diagnoses(con)
        finally:
            con.close()

    def _sweeps(self, con: duckdb.DuckDBPyConnection) -> Iterator[Metric]:
        busbw = GaugeMetricFamily(
            "commbench_busbw_bytes_per_second",
            "Bus bandwidth of the newest commbench sweep of the node set (out-of-place, largest size in the bucket)",
            labels=BUSBW_LABELS,
        )
        times = GaugeMetricFamily(
            "commbench_collective_time_seconds", "Per-op time (slowest rank median) of that row", labels=BUSBW_LABELS
        )
        stamps = GaugeMetricFamily(
            "commbench_sweep_timestamp_seconds",
            "Start time of the newest sweep of the node set",
            labels=["cluster", "nodes"],
        )
        per_cluster: dict[str, int] = {}
        for run_id, cluster, nodes, created in con.execute(_NEWEST_SWEEPS).fetchall():
            per_cluster[cluster] = per_cluster.get(cluster, 0) + 1
            if per_cluster[cluster] > self.max_node_sets:
                continue
            label = nodes_label(list(nodes or []))
            if created is not None:
                stamps.add_metric([cluster, label], float(created))
            for labels, row in _bucket_rows(con.execute(_ROWS, [run_id]).fetchall()).items():
                values = [cluster, label, *labels]
                busbw.add_metric(values, row[4] * 1e9)
                times.add_metric(values, row[5] / 1e6)
        yield from (busbw, times, stamps)

    def _runs(self, con: duckdb.DuckDBPyConnection) -> Iterator[Metric]:
        runs = CounterMetricFamily(
            "commbench_runs", "Run directories of each kind in the results database", labels=["cluster", "kind"]
        )
        for cluster, kind, count in con.execute(
            "SELECT cluster, kind, count(*) FROM runs GROUP BY ALL ORDER BY ALL"
        ).fetchall():
            runs.add_metric([cluster or "unknown", kind], float(count))
        yield runs

    def _diagnoses(self, con: duckdb.DuckDBPyConnection) -> Iterator[Metric]:
        from commbench.diagnose.report import load_report

        drain = GaugeMetricFamily(
            "commbench_node_drain_recommended",
            "1 for each node the newest diagnosis of the cluster says to drain",
            labels=["cluster", "node"],
        )
        stamps = GaugeMetricFamily(
            "commbench_diagnosis_timestamp_seconds", "Start time of the newest diagnosis", labels=["cluster"]
        )
        newest = con.execute(
            "SELECT cluster, path, epoch(created) FROM runs WHERE kind = 'diagnose' AND complete "
            "QUALIFY row_number() OVER (PARTITION BY cluster ORDER BY created DESC NULLS LAST) = 1"
        ).fetchall()
        for cluster, path, created in newest:
            try:
                report = load_report(path)
            except CommbenchError:
                continue
            if created is not None:
                stamps.add_metric([cluster], float(created))
            for item in report.get("drain") or []:
                drain.add_metric([cluster, str(item.get("node"))], 1.0)
        yield from (drain, stamps)


def _bucket_rows(rows: list[tuple[Any, ...]]) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """(op, scope, group_size, bucket) -> the row of the largest size in the bucket (rows ascend by size)."""
    found: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for row in rows:
        op, scope, group_size, size = row[0], row[1], row[2], int(row[3])
        found[(op, scope, str(group_size), size_bucket_label(size))] = row
    return found


def registry_for(db: str | Path, max_node_sets: int = MAX_NODE_SETS) -> CollectorRegistry:
    """A fresh registry holding only commbench's families (no process or Python collectors)."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(db, max_node_sets))
    return registry


def exposition(db: str | Path, max_node_sets: int = MAX_NODE_SETS) -> str:
    from prometheus_client import generate_latest

    return generate_latest(registry_for(db, max_node_sets)).decode("utf-8")
