"""The cluster a job is planned on: GPU count, system, the cost of every collective, overlap slowdown."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commbench.modeling.hardware import System
from commbench.modeling.network import CollectiveCost

# Compute slowdown while communication overlaps it: one public simulator charges 15% for NVLink
# and 2% for InfiniBand traffic; used when no measured factor is given.
DEFAULT_SLOWDOWN_INTRA = 0.15
DEFAULT_SLOWDOWN_INTER = 0.02


@dataclass(frozen=True)
class Cluster:
    gpus: int
    system: System  # processor, gpus_per_node, preset networks
    cost: CollectiveCost  # prices every collective (preset or measured)
    slowdown_intra: float = DEFAULT_SLOWDOWN_INTRA
    slowdown_inter: float = DEFAULT_SLOWDOWN_INTER

    @property
    def gpus_per_node(self) -> int:
        return self.system.gpus_per_node

    def slowdown(self, inter_node: np.ndarray) -> np.ndarray:
        """Extra compute time per second of overlapping communication, by whether it crosses nodes."""
        return np.where(inter_node, self.slowdown_inter, self.slowdown_intra)
