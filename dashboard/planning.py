"""The planner as the dashboard calls it: the same planner `commbench plan` builds, results cached.

A choice made on the page is turned into the argument namespace `commbench plan` parses, so
the page and the command line price layouts identically. Plans are cached by choice (and, for a
measured bandwidth source, by the run's file signature) because every control change re-asks.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import SimpleNamespace

from commbench.commands.plan import build_planner
from commbench.modeling.hardware import load_system, preset_names
from commbench.modeling.models import PRESETS
from commbench.modeling.schedule import StepResult

PRESET_SOURCE = "preset"
_CACHE_SIZE = 32


@dataclass(frozen=True)
class PlanChoice:
    model: str
    gpus: int
    gpus_per_node: int | None
    hardware: str
    global_batch: int
    seq_len: int
    top: int = 5
    bandwidth_dir: str | None = None  # a run directory to price collectives from, else the preset
    bandwidth_stamp: object = None  # changes when that run's files change, to refresh the cache


@dataclass
class PlanView:
    ranked: list[StepResult]
    screened: int
    fitting: int
    network: str
    capacity_bytes: float
    warnings: list[str]
    planner: object  # the modeling Planner, kept to simulate a chosen layout's timeline on demand
    _timelines: dict[int, list[dict]] = field(default_factory=dict)

    def timeline(self, index: int) -> list[dict]:
        """The simulated step of the index-th ranked layout (tens of thousands of bars for big jobs)."""
        if index not in self._timelines:
            self._timelines[index] = self.planner.evaluate_layout(self.ranked[index].layout)[0].timeline
        return self._timelines[index]


def model_names() -> list[str]:
    return list(PRESETS)


def hardware_names() -> list[str]:
    return preset_names("system")


def default_gpus_per_node(hardware: str) -> int:
    return load_system(hardware).gpus_per_node


class Planner:
    """Plans per choice, newest kept; raises CommbenchError (UsageError) as `commbench plan` does."""

    def __init__(self):
        self._plans: dict[PlanChoice, PlanView] = {}
        self._lock = threading.Lock()

    def plan(self, choice: PlanChoice) -> PlanView:
        with self._lock:
            if choice in self._plans:
                return self._plans[choice]
        planner = build_planner(SimpleNamespace(
            model=choice.model, gpus=choice.gpus, gpus_per_node=choice.gpus_per_node, hardware=choice.hardware,
            bandwidth=choice.bandwidth_dir, inter_network=None, global_batch=choice.global_batch,
            seq_len=choice.seq_len, precision="16", slowdown=None, top=choice.top,
        ))
        plan = planner.rank(choice.top)
        view = PlanView(
            ranked=plan.ranked, screened=plan.screened, fitting=plan.fitting,
            network=planner.cluster.cost.describe(), capacity_bytes=planner.cluster.system.processor.memory_bytes,
            warnings=list(getattr(planner.cluster.cost, "warnings", [])), planner=planner,
        )
        with self._lock:
            if len(self._plans) >= _CACHE_SIZE:
                self._plans.pop(next(iter(self._plans)))
            self._plans[choice] = view
        return view
