"""The dashboard's plans: a page's request (a PlanSpec) planned by the modelling Planner, cached.

The planner page turns its controls into a PlanSpec (commbench.modeling.spec), the same spec
`commbench plan` builds from its options, and build_planner turns it into the same Planner, so the
page and the command line price layouts identically. Plans are cached by request, which carries
the file signatures of the measured runs the spec reads, because every control change re-asks.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from commbench.modeling.hardware import load_system, preset_names
from commbench.modeling.job import EXECUTIONS, PRECISIONS
from commbench.modeling.layout import parse_layout
from commbench.modeling.models import PRESETS
from commbench.modeling.planner import Planner
from commbench.modeling.recipes import RECIPES
from commbench.modeling.schedule import StepResult
from commbench.modeling.spec import PlanSpec, build_planner

_CACHE_SIZE = 32


@dataclass(frozen=True)
class PlanRequest:
    spec: PlanSpec
    run_stamps: tuple = ()  # signatures of the measured runs the spec reads; they change when the files do
    layout: str | None = None  # evaluate this one layout instead of ranking (`commbench plan --layout`)


@dataclass
class PlanView:
    ranked: list[StepResult]
    screened: int
    fitting: int
    network: str
    execution: str
    slowdown_intra: float
    slowdown_inter: float
    capacity_bytes: float
    warnings: list[str]
    planner: Planner  # kept to simulate a chosen layout's timeline on demand
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


def processor_names() -> list[str]:
    return preset_names("processor")


def network_names() -> list[str]:
    return preset_names("network")


def precision_names() -> list[str]:
    return list(PRECISIONS)


def compute_precision_names() -> list[str]:
    return list(RECIPES)


def execution_names() -> list[str]:
    return list(EXECUTIONS)


def default_gpus_per_node(hardware: str) -> int:
    return load_system(hardware).gpus_per_host


def default_nvlink_domain(hardware: str) -> int:
    return load_system(hardware).nvlink_domain


class PlanCache:
    """Plans per request, newest kept; raises CommbenchError (UsageError) as `commbench plan` does."""

    def __init__(self):
        self._views: dict[PlanRequest, PlanView] = {}
        self._lock = threading.Lock()

    def view(self, request: PlanRequest) -> PlanView:
        with self._lock:
            if request in self._views:
                return self._views[request]
        view = _plan(request.spec) if request.layout is None else _evaluate(request.spec, request.layout)
        with self._lock:
            if len(self._views) >= _CACHE_SIZE:
                self._views.pop(next(iter(self._views)))
            self._views[request] = view
        return view


def _plan(spec: PlanSpec) -> PlanView:
    planner = build_planner(spec)
    ranking = planner.rank(spec.top)
    return _view(planner, ranking.ranked, ranking.screened, ranking.fitting, planner.warnings())


def _evaluate(spec: PlanSpec, layout_text: str) -> PlanView:
    """One layout as `commbench plan --layout` evaluates it: simulated, with why it does not fit."""
    planner = build_planner(spec)
    result, reason = planner.evaluate_layout(parse_layout(layout_text, spec.gpus))
    warnings = planner.warnings() + result.notes + [f"does not fit: {reason}"] * (reason is not None)
    view = _view(planner, [result], 1, int(reason is None), warnings)
    view._timelines[0] = result.timeline
    return view


def _view(planner: Planner, ranked: list[StepResult], screened: int, fitting: int, warnings: list[str]) -> PlanView:
    return PlanView(
        ranked=ranked,
        screened=screened,
        fitting=fitting,
        network=planner.cluster.cost.describe(),
        execution=planner.job.execution.name,
        slowdown_intra=planner.cluster.slowdown_intra,
        slowdown_inter=planner.cluster.slowdown_inter,
        capacity_bytes=planner.cluster.system.processor.memory_bytes,
        warnings=warnings,
        planner=planner,
    )
