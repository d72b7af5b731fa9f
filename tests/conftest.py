"""Shared fixtures, and the CI rule on skips. Multi-node fixtures (emulated cluster, Slurm) live in
tests/cluster/.

Skips: a developer without root, Slurm or Chromium gets the multi-node, Slurm and browser tests
skipped, each with its reason. In CI (`CI=true`, or COMMBENCH_CI=1 which .ci/run sets) a skip
would hide a whole class of tests from a green run, so every skip fails instead, naming what is
missing, except the ones listed in CI_ALLOWED_SKIPS.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# The only skips CI accepts: the netem delay tests, because the CI machines' kernel has no netem
# qdisc (CONFIG_NET_SCH_NETEM is not set) and nothing else emulates delay.
CI_ALLOWED_SKIPS = {
    "tests/test_faults_multinode.py::test_sweep_completes_over_a_degraded_link[delay-emulated_cluster0]": "netem",
    "tests/test_faults_multinode.py::test_pairwise_points_at_the_degraded_node[delay-emulated_cluster0]": "netem",
}


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes") or os.environ.get("COMMBENCH_CI") == "1"


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    return longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


def _allowed_in_ci(nodeid: str, reason: str) -> bool:
    needed = CI_ALLOWED_SKIPS.get(_written_nodeid(nodeid))
    return needed is not None and needed in reason


def _fail_in_ci(report, nodeid: str) -> None:
    reason = _skip_reason(report)
    if _allowed_in_ci(nodeid, reason):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"{nodeid}: skipped in CI, which needs every test to run: {reason.removeprefix('Skipped: ')} "
        f"(the allowed skips are listed in tests/conftest.py)"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and in_ci():
        _fail_in_ci(report, item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A whole module skipped at import (no browser, a missing package) fails in CI too."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and in_ci():
        _fail_in_ci(report, collector.nodeid)


# Modules whose tests mostly wait (emulated clusters, Slurm, a browser) start first: the README's
# test command spreads the suite over pytest-xdist workers, and a long module begun last would run
# alone at the end.
_WAITING_MARKS = ("slow", "slurm", "cluster", "browser")
# Modules of many independent, CPU-bound cases with nothing costly shared between them (no
# module-scoped cluster, server or browser): their tests go one by one to whichever worker is free,
# after every other module, so that they fill the end of the run instead of one worker running a
# long module alone. test_mfu_sanity: 245 planner searches, a third of a worker's time.
SPREAD_MODULES = ("tests/test_mfu_sanity.py",)


def _module_rank(items) -> int:
    marks = {mark.name for item in items for mark in item.iter_markers()}
    return next((rank for rank, name in enumerate(_WAITING_MARKS) if name in marks), len(_WAITING_MARKS))


def _written_nodeid(nodeid: str) -> str:
    """The test's id as written, without the `@group` that `--dist loadgroup` appends on a worker."""
    head, at, group = nodeid.rpartition("@")
    return head if at and group.endswith(".py") and "::" not in group else nodeid


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks on a worker
def pytest_collection_modifyitems(session, config, items):
    """Order whole modules (each module's tests stay together and in their written order), and under
    `--dist loadgroup` keep each module on one worker (its module-scoped cluster, Slurm or browser
    stays one), except SPREAD_MODULES, which go last."""
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    for module, module_items in modules.items():
        if module not in SPREAD_MODULES:
            for item in module_items:
                item.add_marker(pytest.mark.xdist_group(module))
    ordered = sorted(modules.items(), key=lambda entry: (entry[0] in SPREAD_MODULES, _module_rank(entry[1])))
    items[:] = [item for _, module_items in ordered for item in module_items]


def run_cli(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """`commbench ARGS` in a fresh interpreter, as a user would run it."""
    return subprocess.run(
        [sys.executable, "-m", "commbench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=REPO,
    )


@pytest.fixture
def cli():
    return run_cli


# multi-node fixtures: emulated_cluster, emulated_cluster_factory, slurm_cluster, slurm_cluster_factory
from cluster.fixtures import *  # noqa: E402, F403
