"""CollectiveCost from a commbench run directory (a sweep or an imported nccl-tests run).

Collectives are priced from the mean time per op (what a step pays; Record.time_us_mean, the median
in older runs without one), from in-place rows where the run measured them.

The curves come from the run's bandwidth table (commbench.data.bandwidth_table, the object
`commbench table` prints): one per (op, scope, group size), with its fitted latency-bandwidth
model. Each entry's scope gives its group's placement (BandwidthTable.placement): intra = one
NVLink domain (a node, or an NVL72 rack of nodes), host = one host inside a domain, inter = one
rank per domain, world = the run's own layout. Where two entries land on one
placement (a one-node run's world and intra groups) the explicit scope is used; where several
dtypes were measured, the fastest. A query is answered, in order of preference, by:
  1. the table entry of the same op and placement: its measured curve inside the measured
     sizes, its fitted model (continued from the end points) outside them
  2. for a hierarchical group, the intra-node and inter-node phases (network.hierarchical_time),
     each priced from its own entry
  3. the nearest measured group size of the same op and scope, rescaled through busbw: time =
     time_measured(size) * busbw_factor(op, n) / busbw_factor(op, n_measured)
  4. the preset network, with a warning naming the op and scope that were missing.
all_to_allv (EP under a skewed router, sized by the hottest rank's bytes) is answered from the
all_to_allv curves measured with the plan's routing only; without one, from all_to_all at those bytes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from commbench.data.bandwidth_table import BandwidthTable, Entry
from commbench.modeling.network import CollectiveCost, Placement, busbw_factor, hierarchical_time

MEASURED = "measured rows"
PRESET = "the preset network (not in the run)"


class MeasuredNetwork:
    """Prices collectives from measured curves; `fallback` prices what the run did not measure."""

    def __init__(self, run_dir: str | Path, fallback: CollectiveCost, routing: str = "uniform"):
        # in-place rows where measured: frameworks reduce, broadcast and gather in place, and torch's
        # out-of-place rows include a copy
        self.table = BandwidthTable.from_run(run_dir, in_place=True)
        self.routing = routing
        self.source = self.table.source
        self.fallback = fallback
        # the run's curves do not say how its hosts share NICs: the plan's system does
        self.ranks_per_nic = fallback.ranks_per_nic
        self.warnings: list[str] = list(self.table.warnings)
        self._warned: set[tuple[str, str]] = set()
        self.answered: dict[tuple[str, str], str] = {}  # (op, scope) -> how it was priced, for the summary
        self.curves = self._curves_by_placement(self.table, routing)
        if not self.curves:
            self.warnings.append(
                f"{self.source}: no group with a known placement measured; every collective is priced from the preset"
            )

    @staticmethod
    def _curves_by_placement(table: BandwidthTable, routing: str) -> dict[tuple[str, int, int], Entry]:
        curves: dict[tuple[str, int, int], Entry] = {}
        # an imported alltoallv_perf row has no routing: nccl-tests splits evenly, so it is the uniform curve
        items = [e for e in table.items if e.op != "all_to_allv" or (e.routing or "uniform") == routing]
        groups = sorted({(e.op, e.scope, e.group_size) for e in items}, key=lambda g: g[1] != "world")
        for op, scope, group_size in groups:  # world first, so an explicit scope on the same placement wins
            placement = table.placement(scope, group_size)
            if placement is not None:
                same = [e for e in items if (e.op, e.scope, e.group_size) == (op, scope, group_size)]
                key = (op, *placement)
                curves[key] = max(same, key=lambda e: e.fit.busbw_gbps)  # as table.entry: the fastest
        return curves

    def describe(self) -> str:
        scopes = sorted({f"{op}@{r}x{k}" for op, r, k in self.curves})
        origin = "SYNTHETIC (not measured)" if self.table.synthetic else "measured"
        return f"{origin} {self.source}: {len(self.curves)} curves ({', '.join(scopes[:8])}{' ...' if len(scopes) > 8 else ''})"

    def has_curve(self, op: str, placement: Placement) -> bool:
        return (op, placement.ranks_per_node, placement.nodes) in self.curves

    def time_s(
        self, op: str, size_bytes: float | np.ndarray, group_size: int, placement: Placement
    ) -> float | np.ndarray:
        if group_size <= 1:
            return np.zeros_like(np.asarray(size_bytes, dtype=float))
        if op == "sendrecv":  # a ring of sendrecvs is paced by its slowest hop: within a node or between two
            group_size, placement = 2, Placement(2, 1) if placement.nodes == 1 else Placement(1, 2)
        key = (op, placement.ranks_per_node, placement.nodes)
        if key in self.curves:
            self._answer(op, placement, MEASURED)
            return self._seconds(self.curves[key], size_bytes)
        if op == "all_to_allv":  # no curve of this routing here: the uniform exchange at the hottest rank's bytes
            self._answer(op, placement, "all_to_all's curve")
            return self.time_s("all_to_all", size_bytes, group_size, placement)
        if placement.scope == "hierarchical" and op != "sendrecv" and self._has_phases(op, placement):
            self._answer(op, placement, "its intra and inter phases")
            return hierarchical_time(self._phase, op, np.asarray(size_bytes, dtype=float), placement)
        nearest = self._nearest(op, placement)
        if nearest is not None:
            n_measured, curve = nearest
            self._answer(op, placement, "another group size, rescaled")
            return self._seconds(curve, size_bytes) * busbw_factor(op, group_size) / busbw_factor(op, n_measured)
        self._warn(op, placement.scope)
        self._answer(op, placement, PRESET)
        return self.fallback.time_s(op, size_bytes, group_size, placement)

    def _answer(self, op: str, placement: Placement, how: str) -> None:
        self.answered.setdefault((op, placement.scope), how)

    def pricing_summary(self) -> str:
        """One line: which (op, scope) groups the plan priced from measured rows, which otherwise, and why."""
        by_how: dict[str, list[str]] = {}
        for (op, scope), how in sorted(self.answered.items()):
            by_how.setdefault(how, []).append(f"{op} {scope}")
        order = [MEASURED, "its intra and inter phases", "another group size, rescaled", "all_to_all's curve", PRESET]
        parts = [f"{how}: {', '.join(by_how[how])}" for how in order if how in by_how]
        return f"bandwidth from {self.source}: " + ("; ".join(parts) if parts else "no collective was priced")

    def _phase(self, op: str, size: np.ndarray, n: int, tier: str) -> float | np.ndarray:
        placement = Placement(n, 1) if tier == "intra" else Placement(1, n)
        return self.time_s(op, size, n, placement)

    def _has_phases(self, op: str, placement: Placement) -> bool:
        ops = {
            "all_reduce": ("reduce_scatter", "all_reduce", "all_gather"),
            "all_to_all": ("all_to_all", "sendrecv"),
        }.get(op, (op,))
        # a phase whose exact group size was not measured is rescaled from the nearest one
        have_intra = any(o in ops and k == 1 and r > 1 for o, r, k in self.curves)
        have_inter = any(o in ops and r == 1 and k > 1 for o, r, k in self.curves)
        return have_intra and have_inter

    @staticmethod
    def _seconds(entry: Entry, size_bytes: ArrayLike) -> np.ndarray:
        return np.asarray(entry.time_us(size_bytes)) * 1e-6

    def _nearest(self, op: str, placement: Placement) -> tuple[int, Entry] | None:
        """The measured curve of the same op and scope whose group size is closest (in ratio)."""
        n = placement.ranks_per_node * placement.nodes
        candidates = [
            (r * k, curve)
            for (o, r, k), curve in self.curves.items()
            if o == op and Placement(r, k).scope == placement.scope and r * k > 1
        ]
        if not candidates:
            return None
        return min(candidates, key=lambda item: abs(np.log(item[0] / n)))

    def _warn(self, op: str, scope: str) -> None:
        if (op, scope) not in self._warned:
            self._warned.add((op, scope))
            self.warnings.append(f"{self.source}: no {scope} {op} measured; priced from the preset network")
