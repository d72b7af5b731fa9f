"""CollectiveCost from a commbench run directory (a sweep or an imported nccl-tests run).

Each record's scope gives its group's placement: intra = one node (ranks_per_node = group_size),
inter = one rank per node, world = the run's own layout (its nodes and ranks per node). A query
is answered, in order of preference, by:
  1. the measured curve of the same op and placement: log-log interpolation of time vs size;
     above the largest size the time grows linearly at the largest size's bandwidth, below the
     smallest it stays at the smallest size's time (latency-bound)
  2. for a hierarchical group, the intra-node and inter-node phases (network.hierarchical_time),
     each priced from its own measured curve
  3. the nearest measured group size of the same op and scope, rescaled through busbw: time =
     size * busbw_factor(op, n) / busbw_measured(size)
  4. the preset network, with a warning naming the op and scope that were missing.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from commbench.modeling.network import CollectiveCost, Placement, busbw_factor, hierarchical_time


class MeasuredCurve:
    """time_s(size) and busbw(size) of one (op, placement), from the fastest record per size."""

    def __init__(self, sizes: list[float], times_s: list[float]):
        order = np.argsort(sizes)
        self.sizes = np.asarray(sizes, dtype=float)[order]
        self.times = np.asarray(times_s, dtype=float)[order]
        self._log_sizes = np.log(self.sizes)
        self._log_times = np.log(self.times)

    def time_s(self, size) -> np.ndarray:
        size = np.maximum(np.asarray(size, dtype=float), 1.0)
        inside = np.exp(np.interp(np.log(size), self._log_sizes, self._log_times))
        beyond = self.times[-1] * size / self.sizes[-1]
        return np.where(size > self.sizes[-1], beyond, inside)

    def algbw(self, size) -> np.ndarray:
        size = np.maximum(np.asarray(size, dtype=float), 1.0)
        return size / self.time_s(size)


class MeasuredNetwork:
    """Prices collectives from measured curves; `fallback` prices what the run did not measure."""

    def __init__(self, run_dir: str | Path, fallback: CollectiveCost):
        from commbench.data.rundir import load_run  # pydantic only when a run is read

        run = load_run(run_dir)
        self.source = str(run.path)
        self.fallback = fallback
        self.warnings: list[str] = list(run.warnings)
        self._warned: set[tuple[str, str]] = set()
        nodes = max(1, len(run.info.nodes))
        world_placement = (max(1, run.info.world_size // nodes), nodes)
        samples: dict[tuple[str, int, int], dict[float, float]] = defaultdict(dict)
        for rec in run.records:
            if rec.get("wrong", 0) > 0 or rec["time_us"] <= 0 or rec["size_bytes"] <= 0:
                continue
            n = rec["group_size"]
            placement = {"intra": (n, 1), "inter": (1, n), "world": world_placement}.get(rec["scope"])
            if placement is None:
                continue
            curve = samples[(rec["op"], *placement)]
            size, seconds = float(rec["size_bytes"]), rec["time_us"] * 1e-6
            curve[size] = min(seconds, curve.get(size, float("inf")))  # best of dtypes / in-place variants
        self.curves = {key: MeasuredCurve(list(c), list(c.values())) for key, c in samples.items()}
        if not self.curves:
            self.warnings.append(f"{run.path}: no usable records; every collective is priced from the preset")

    def describe(self) -> str:
        scopes = sorted({f"{op}@{r}x{k}" for op, r, k in self.curves})
        return f"measured {self.source}: {len(self.curves)} curves ({', '.join(scopes[:8])}{' ...' if len(scopes) > 8 else ''})"

    def time_s(self, op, size_bytes, group_size, placement):
        if group_size <= 1:
            return np.zeros_like(np.asarray(size_bytes, dtype=float))
        if op == "sendrecv":  # a ring of sendrecvs is paced by its slowest hop: within a node or between two
            group_size, placement = 2, Placement(2, 1) if placement.nodes == 1 else Placement(1, 2)
        key = (op, placement.ranks_per_node, placement.nodes)
        if key in self.curves:
            return self.curves[key].time_s(size_bytes)
        if placement.scope == "hierarchical" and op != "sendrecv" and self._has_phases(op, placement):
            return hierarchical_time(self._phase, op, np.asarray(size_bytes, dtype=float), placement)
        nearest = self._nearest(op, placement)
        if nearest is not None:
            n_measured, curve = nearest
            return np.asarray(size_bytes, dtype=float) * busbw_factor(op, group_size) / (
                curve.algbw(size_bytes) * busbw_factor(op, n_measured))
        self._warn(op, placement.scope)
        return self.fallback.time_s(op, size_bytes, group_size, placement)

    def _phase(self, op: str, size, n: int, tier: str):
        placement = Placement(n, 1) if tier == "intra" else Placement(1, n)
        return self.time_s(op, size, n, placement)

    def _has_phases(self, op: str, placement: Placement) -> bool:
        ops = {"all_reduce": ("reduce_scatter", "all_reduce", "all_gather"), "all_to_all": ("all_to_all", "sendrecv")}.get(op, (op,))
        # a phase whose exact group size was not measured is rescaled from the nearest one
        have_intra = any(o in ops and k == 1 and r > 1 for o, r, k in self.curves)
        have_inter = any(o in ops and r == 1 and k > 1 for o, r, k in self.curves)
        return have_intra and have_inter

    def _nearest(self, op: str, placement: Placement) -> tuple[int, MeasuredCurve] | None:
        """The measured curve of the same op and scope whose group size is closest (in ratio)."""
        n = placement.ranks_per_node * placement.nodes
        candidates = [(r * k, curve) for (o, r, k), curve in self.curves.items()
                      if o == op and Placement(r, k).scope == placement.scope and r * k > 1]
        if not candidates:
            return None
        return min(candidates, key=lambda item: abs(np.log(item[0] / n)))

    def _warn(self, op: str, scope: str) -> None:
        if (op, scope) not in self._warned:
            self._warned.add((op, scope))
            self.warnings.append(f"{self.source}: no {scope} {op} measured; priced from the preset network")
