"""The cluster a job is planned on: GPU count, system, the cost of every collective, overlap slowdown."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from commbench.data.calculon import PROCESSOR_USAGE
from commbench.modeling.hardware import System
from commbench.modeling.layout import in_one_domain
from commbench.modeling.network import CollectiveCost, Placement, PresetNetwork

# Compute slowdown while communication overlaps it, used when no measured factor is given: Calculon's
# `processor_usage` of its NVLink and InfiniBand networks, a simulator's assumption, not a measurement
# (its source is beside PROCESSOR_USAGE).
DEFAULT_SLOWDOWN_INTRA = PROCESSOR_USAGE["intra"]
DEFAULT_SLOWDOWN_INTER = PROCESSOR_USAGE["inter"]
# how --help and the dashboard name the defaults
DEFAULT_SLOWDOWN_WORDS = f"{DEFAULT_SLOWDOWN_INTRA:.0%} intra-node (NVLink), {DEFAULT_SLOWDOWN_INTER:.0%} inter-node"
# A group with several ranks in each of several nodes runs an NVLink phase and a network phase;
# their shares of its time are read at a size in the bandwidth regime, where the overlapped
# collectives that matter sit (ZeRO-3 weight gathers and gradient buckets: tens to hundreds of MB).
PHASE_REFERENCE_BYTES = 256 * 2**20


@dataclass(frozen=True)
class Cluster:
    gpus: int
    system: System  # processor, gpus_per_host, nvlink_domain, preset networks
    cost: CollectiveCost  # prices every collective (preset or measured)
    slowdown_intra: float = DEFAULT_SLOWDOWN_INTRA
    slowdown_inter: float = DEFAULT_SLOWDOWN_INTER

    @property
    def gpus_per_host(self) -> int:
        return self.system.gpus_per_host

    @property
    def nvlink_domain(self) -> int:
        """GPUs that share one NVLink domain: what every group's placement is counted in."""
        return self.system.nvlink_domain

    def in_one_domain(self, size: ArrayLike, stride: ArrayLike) -> np.ndarray:
        """Whether a group of `size` ranks `stride` apart stays inside one NVLink domain."""
        return in_one_domain(size, stride, self.nvlink_domain)

    def slowdown(self, group: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
        """Extra compute time per second of overlapping communication on each layout's group
        (size, ranks_per_domain, domains, as layout.layout_groups gives them): the NVLink rate inside
        an NVLink domain, the network rate with one rank per domain, and for a group with several
        ranks in each of several domains both rates, each over the share of the collective's time its phase takes. The
        NVLink phase of such a collective keeps the SMs and HBM as busy as any intra-node one; charging
        all of it at the network rate made ZeRO-3 across two nodes overlap almost for free."""
        _, per_node, nodes = group
        nvlink_share = np.where(nodes > 1, 0.0, 1.0)
        if self.slowdown_intra != self.slowdown_inter:
            mixed = (nodes > 1) & (per_node > 1)
            for r, k in set(zip(per_node[mixed].tolist(), nodes[mixed].tolist())):
                nvlink_share[mixed & (per_node == r) & (nodes == k)] = self._nvlink_phase_share(r, k)
        return self.slowdown_inter + (self.slowdown_intra - self.slowdown_inter) * nvlink_share

    def _nvlink_phase_share(self, ranks_per_node: int, nodes: int) -> float:
        """The intra-node phase's share of a hierarchical all-gather's time on the system's preset
        network (the rates are preset figures too; a measured factor is the same for both tiers)."""
        network = PresetNetwork(self.system)
        whole = network.time_s(
            "all_gather", PHASE_REFERENCE_BYTES, ranks_per_node * nodes, Placement(ranks_per_node, nodes)
        )
        return float(network.flat("all_gather", PHASE_REFERENCE_BYTES, ranks_per_node, "intra") / whole)
