"""How long a collective takes: the CollectiveCost protocol and its preset implementation.

Sizes follow nccl-tests: all_reduce and sendrecv take the buffer, all_gather and reduce_scatter
the full gathered buffer, all_to_all one rank's whole send buffer. With n ranks a ring moves
  all_reduce 2(n-1)/n * S, all_gather / reduce_scatter / all_to_all (n-1)/n * S, sendrecv S
bytes through each rank (the nccl-tests busbw factors), so time = latency + factor * S / busbw.

The two tiers are the NVLink domain (intra: the scale-up network, NVSwitch) and the network
between domains (inter: the scale-out NICs). A domain is the host on a DGX/HGX and a whole rack
on an NVL72 (System.nvlink_domain); "node" in Placement's names means one domain, so a group of
16 ranks over four 4-GPU trays of one NVL72 rack is intra. A group that spans domains with several
ranks in each (a hierarchical group) is priced as NCCL's hierarchical algorithms run it: an
intra-domain phase at the full size and an inter-domain phase on 1/ranks_per_node of the data,
rather than as if every byte crossed the scale-out network.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, overload

import numpy as np
from numpy.typing import ArrayLike

from commbench import ops
from commbench.modeling.hardware import Network, System
from commbench.modeling.limits import MAX_GPUS

# the collectives training issues, which the cost models price; all_to_allv is EP's exchange under a
# skewed router, priced at the bytes its hottest rank receives
OPS = ops.DEFAULT_OPS + ("all_to_allv",)


@dataclass(frozen=True)
class Placement:
    """How one group sits on NVLink domains: `ranks_per_node` of its ranks in each of `nodes`
    domains (a domain is the host on a DGX, the rack on an NVL72; see the module docstring)."""

    ranks_per_node: int
    nodes: int

    @property
    def scope(self) -> str:
        if self.nodes == 1:
            return "intra"
        return "inter" if self.ranks_per_node == 1 else "hierarchical"


class CollectiveCost(Protocol):
    warnings: list[str]  # what the reader should know about the prices given so far (a measured table's gaps)
    # ranks of a host whose traffic between domains shares one NIC (1: a NIC per GPU, as on a DGX)
    ranks_per_nic: int

    def time_s(
        self, op: str, size_bytes: float | np.ndarray, group_size: int, placement: Placement
    ) -> float | np.ndarray:
        """Seconds one collective of `op` on `group_size` ranks placed as `placement` takes."""
        ...

    def describe(self) -> str:
        """Where the prices come from, in one line."""
        ...

    def has_curve(self, op: str, placement: Placement) -> bool:
        """Whether `op` on this placement is priced from a curve measured for it (an all_to_allv of the
        plan's routing carries its skew; without one the planner composes the skew itself)."""
        ...


@overload
def busbw_factor(op: str, n: int) -> float: ...
@overload
def busbw_factor(op: str, n: np.ndarray) -> np.ndarray: ...
def busbw_factor(op: str, n: int | np.ndarray) -> float | np.ndarray:
    """Bytes through each rank per byte of size (nccl-tests' busbw factor, from commbench.ops);
    per layout for an array of group sizes."""
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")
    # ops' factors are arithmetic in n, so an array of group sizes gives an array of factors
    return ops.busbw_factor(op, n)  # type: ignore[arg-type]


# prices one flat phase: (op, size in bytes, ranks, tier "intra" or "inter") -> seconds
FlatPhase = Callable[[str, np.ndarray, int, str], float | np.ndarray]


def hierarchical_time(flat: FlatPhase, op: str, size: np.ndarray, placement: Placement) -> float | np.ndarray:
    """Compose a hierarchical collective from flat phases; flat(op, size, n, tier) prices one phase."""
    r, k = placement.ranks_per_node, placement.nodes
    n = r * k
    if op == "all_reduce":
        return (
            flat("reduce_scatter", size, r, "intra")
            + flat("all_reduce", size / r, k, "inter")
            + flat("all_gather", size, r, "intra")
        )
    if op in ("all_gather", "reduce_scatter"):
        return flat(op, size / r, k, "inter") + flat(op, size, r, "intra")
    if op == "all_to_all":
        # the intra-node and inter-node shares of the exchange run at the same time
        # (each rank sends size/n to every peer: (r-1)/n of it stays in the node, (n-r)/n leaves it)
        intra = flat("all_to_all", size * r / n, r, "intra")
        return np.maximum(intra, flat("sendrecv", size * (n - r) / n, 2, "inter"))
    raise ValueError(f"no hierarchical form for {op!r}")


class PresetNetwork:
    """CollectiveCost from a system preset: one latency and one bus bandwidth per tier."""

    def __init__(self, system: System):
        self.system = system
        self.warnings: list[str] = []  # a preset's documented figures price every collective
        self.ranks_per_nic = system.inter.ranks_per_link(system.gpus_per_host)
        self._busbw = {
            "intra": system.intra.busbw_per_rank(system.gpus_per_host),
            "inter": system.inter.busbw_per_rank(system.gpus_per_host),
        }
        self._network: dict[str, Network] = {"intra": system.intra, "inter": system.inter}

    def describe(self) -> str:
        return (
            f"preset {self.system.name}: intra {self.system.intra.name} {self._busbw['intra'] / 1e9:.0f} GB/s busbw, "
            f"inter {self.system.inter.name} {self._busbw['inter'] / 1e9:.1f} GB/s busbw per GPU"
        )

    def has_curve(self, op: str, placement: Placement) -> bool:
        return False  # documented figures: no measured curve of any op

    def flat(self, op: str, size: ArrayLike, n: int, tier: str) -> np.ndarray:
        if n <= 1:
            return np.zeros_like(np.asarray(size, dtype=float))
        return self._network[tier].latency + busbw_factor(op, n) * np.asarray(size, dtype=float) / self._busbw[tier]

    def time_s(
        self, op: str, size_bytes: float | np.ndarray, group_size: int, placement: Placement
    ) -> float | np.ndarray:
        if group_size <= 1:
            return np.zeros_like(np.asarray(size_bytes, dtype=float))
        if op == "all_to_allv":  # a preset knows no skew: the hottest rank's bytes carry it
            op = "all_to_all"
        if op == "sendrecv" or placement.scope != "hierarchical":
            tier = "intra" if placement.nodes == 1 else "inter"
            return self.flat(op, size_bytes, group_size, tier)
        return hierarchical_time(self.flat, op, np.asarray(size_bytes, dtype=float), placement)


# a group per layout: (size, ranks_per_domain, domains) arrays, as layout.layout_groups gives them
Group = tuple[np.ndarray, np.ndarray, np.ndarray]


def price(cost: CollectiveCost, op: str, size_bytes: float | np.ndarray, group: Group) -> np.ndarray:
    """Vectorised pricing over layouts: one cost call per distinct (group size, placement).

    group is (size, ranks_per_node, nodes) arrays as layout.layout_groups returns them; a
    collective of zero bytes or on a group of one costs nothing.
    """
    sizes = np.broadcast_to(np.asarray(size_bytes, dtype=float), group[0].shape)
    out = np.zeros(sizes.shape)
    active = (group[0] > 1) & (sizes > 0)
    if not active.any():
        return out
    # one int64 key per (size, ranks_per_node, nodes): a 1-D unique is far faster than a row-wise one
    base = MAX_GPUS + 1
    n, per_node, nodes = (np.asarray(g[active], dtype=np.int64) for g in group)
    unique, inverse = np.unique((n * base + per_node) * base + nodes, return_inverse=True)
    active_idx = np.flatnonzero(active)
    order = np.argsort(inverse.reshape(-1), kind="stable")
    bounds = np.searchsorted(inverse.reshape(-1)[order], np.arange(len(unique) + 1))
    for row, key in enumerate(unique):
        idx = active_idx[order[bounds[row] : bounds[row + 1]]]
        key, nodes_of = divmod(int(key), base)
        size_of, per_node_of = divmod(key, base)
        out[idx] = cost.time_s(op, sizes[idx], size_of, Placement(per_node_of, nodes_of))
    return out
