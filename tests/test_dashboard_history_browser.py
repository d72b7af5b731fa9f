"""History and Compare pages in a real (headless) Chromium, over a generated fleet in a results database.

The fleet is synthetic (generated runs, labelled so in run.json): 30 runs of one cluster with a 30%
busbw drop and an NCCL upgrade at run 20. Screenshots go to docs/screenshots/{history,compare}.png.
Needs what tests/test_dashboard_browser.py needs; skipped without it, except in CI.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

from test_dashboard_browser import (  # noqa: E402 - after its importorskips, which skip this module too
    CHROMEDRIVER,
    CHROMIUM,
    WAIT_S,
    _chrome_options,
    _free_port,
    _no_console_errors,
    _open,
    _screenshot,
    _wait_for_plot,
    application_runners,
    composite,
)

from commbench.analysis.synthetic import Injection, generate_history, quiet_variant, read_profile  # noqa: E402
from commbench.data import store  # noqa: E402
from dashboard.app import create_app  # noqa: E402

PROFILE = quiet_variant(read_profile(Path(__file__).parent / "fixtures" / "history-noise-profile.json"))


@pytest.fixture(scope="module")
def fleet_duo(tmp_path_factory, monkeypatch_module):
    missing = [name for name, path in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)) if not path]
    if missing:
        pytest.skip(f"needs {' and '.join(missing)} on PATH (apt-get install chromium chromium-driver)")
    root = tmp_path_factory.mktemp("fleet")
    generate_history(root, PROFILE, 30, cluster="fleet", seed=3,
                     injection=Injection(at=20, drop=0.3, versions={"nccl": "2.23.4"}))
    monkeypatch_module.delenv("COMMBENCH_DB", raising=False)
    store.ingest(root / "commbench.duckdb", [root])
    with application_runners.ThreadedRunner() as server, composite.DashComposite(
        server=server, browser="Chrome", headless=True, options=[_chrome_options()], percy_run=False,
        wait_timeout=WAIT_S,
    ) as browser:
        browser.start_server(create_app(root), port=_free_port())
        yield browser


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_history_page_draws_the_series_and_its_change_point(fleet_duo):
    _open(fleet_duo, "/history")
    plot = _wait_for_plot(fleet_duo, "hist-figure", lambda p: "nccl 2.21.5 -> 2.23.4" in p["annotations"],
                          "the change point's annotation never appeared")
    assert plot["names"] == ["world n=2"] and "fleet" in plot["title"]
    fleet_duo.wait_for_contains_text("#hist-change-list", "run 20 (synth-fleet-00020)", timeout=WAIT_S)
    _screenshot(fleet_duo, "history")
    _no_console_errors(fleet_duo)


def test_compare_page_shows_deltas_intervals_and_verdicts(fleet_duo):
    _open(fleet_duo, "/compare?a=synth-fleet-00019&b=synth-fleet-00020")
    plot = _wait_for_plot(fleet_duo, "cmp-figure", lambda p: "slower" in p["names"],
                          "no slower rows were drawn")
    assert "synth-fleet-00020 against synth-fleet-00019" in plot["title"]
    fleet_duo.wait_for_contains_text("#cmp-summary", "nccl 2.21.5 -> 2.23.4", timeout=WAIT_S)
    fleet_duo.wait_for_contains_text("#cmp-table", "slower", timeout=WAIT_S)
    _screenshot(fleet_duo, "compare")
    _no_console_errors(fleet_duo)
