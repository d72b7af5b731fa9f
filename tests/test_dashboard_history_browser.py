"""History and Compare pages in a real (headless) Chromium, over a generated fleet in a results database.

The fleet is synthetic (generated runs, labelled so in run.json): 30 runs of one cluster with a 30%
busbw drop and an NCCL upgrade at run 20, beside the imported A100 nccl-tests log (one run, sizes up
to 4 GiB the fleet never measured) and the synthetic DGX H100 topology file. Later tests write a measured CPU run into the folder while the
app is up, without ingesting it. Screenshots (history, compare) go where
test_dashboard_browser.py puts them.
Needs what tests/test_dashboard_browser.py needs; skipped without it, except in CI.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cluster.browser_netns import isolated_chromedriver

pytestmark = pytest.mark.browser

from test_dashboard_browser import (  # noqa: E402 - after its importorskips, which skip this module too
    CHROMEDRIVER,
    CHROMIUM,
    EXAMPLES,
    WAIT_S,
    _chrome_options,
    _free_port,
    _no_console_errors,
    _open,
    _option_labels,
    _screenshot,
    _wait_for_plot,
    application_runners,
    composite,
    wait,
)

from commbench.analysis.synthetic import Injection, generate_history, quiet_variant, read_profile  # noqa: E402
from commbench.data import store  # noqa: E402
from dashboard.app import create_app  # noqa: E402

IMPORT = "example-nccl-tests-a100-2nodes-aws"
LATER = "later/example-cpu-2rank"  # written after the ingest, while the app is up
PROFILE = quiet_variant(read_profile(Path(__file__).parent / "fixtures" / "history-noise-profile.json"))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, monkeypatch_module) -> Path:
    """The results folder: the generated fleet and the A100 import, ingested into its database."""
    root = tmp_path_factory.mktemp("fleet")
    generate_history(
        root, PROFILE, 30, cluster="fleet", seed=3, injection=Injection(at=20, drop=0.3, versions={"nccl": "2.23.4"})
    )
    shutil.copytree(EXAMPLES / IMPORT, root / IMPORT)
    shutil.copy(EXAMPLES / "dgx-h100.topology.json", root)  # synthetic, 8 GPUs: Topology must not open on it
    monkeypatch_module.delenv("COMMBENCH_DB", raising=False)
    store.ingest(root / "commbench.duckdb", [root])
    return root


@pytest.fixture(scope="module")
def fleet_duo(fleet, tmp_path_factory):
    missing = [name for name, path in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)) if not path]
    if missing:
        pytest.skip(f"needs {' and '.join(missing)} on PATH (apt-get install chromium chromium-driver)")
    port = _free_port()
    with (
        isolated_chromedriver([port], tmp_path_factory.mktemp("driver")),
        application_runners.ThreadedRunner() as server,
        composite.DashComposite(
            server=server,
            browser="Chrome",
            headless=True,
            options=[_chrome_options()],
            percy_run=False,
            wait_timeout=WAIT_S,
        ) as browser,
    ):
        browser.start_server(create_app(fleet), port=port)
        yield browser


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_history_page_draws_the_series_and_its_change_point(fleet_duo):
    _open(fleet_duo, "/history")
    plot = _wait_for_plot(
        fleet_duo,
        "hist-figure",
        lambda p: "nccl 2.21.5 -> 2.23.4" in p["annotations"],
        "the change point's annotation never appeared",
    )
    assert plot["names"] == ["world n=2"] and "fleet" in plot["title"]
    fleet_duo.wait_for_contains_text("#hist-change-list", "run 20 (synth-fleet-00020)", timeout=WAIT_S)
    _screenshot(fleet_duo, "history")
    _no_console_errors(fleet_duo)


def test_compare_page_shows_deltas_intervals_and_verdicts(fleet_duo):
    _open(fleet_duo, "/compare?a=synth-fleet-00019&b=synth-fleet-00020")
    plot = _wait_for_plot(fleet_duo, "cmp-figure", lambda p: "slower" in p["names"], "no slower rows were drawn")
    assert "synth-fleet-00020 against synth-fleet-00019" in plot["title"]
    fleet_duo.wait_for_contains_text("#cmp-summary", "nccl 2.21.5 -> 2.23.4", timeout=WAIT_S)
    fleet_duo.wait_for_contains_text("#cmp-table", "slower", timeout=WAIT_S)
    _screenshot(fleet_duo, "compare")
    _no_console_errors(fleet_duo)


def test_history_opens_on_the_row_with_the_most_points_and_offers_only_its_sizes(fleet_duo):
    _open(fleet_duo, "/history")
    plot = _wait_for_plot(fleet_duo, "hist-figure", lambda p: p["names"], "the default view drew no points")
    assert plot["names"] == ["world n=2"] and "fleet: all_reduce 64M" in plot["title"], plot
    sizes = _option_labels(fleet_duo, "#hist-size")
    assert "4G" not in sizes and sizes[-1] == "64M", sizes  # only the import measured 4 GiB


def test_diagnose_without_a_report_is_one_sentence_and_no_figure(fleet_duo):
    _open(fleet_duo, "/diagnose")
    fleet_duo.wait_for_contains_text("#dg-empty", "No diagnose report in this results folder yet", timeout=WAIT_S)
    assert fleet_duo.driver.find_elements("css selector", "#_pages_content .js-plotly-plot") == []
    _no_console_errors(fleet_duo)


def test_a_run_written_after_the_ingest_appears_in_the_pickers_and_opens_bandwidth(fleet_duo, fleet):
    _open(fleet_duo, "/bandwidth")
    _wait_for_plot(fleet_duo, "bw-graph", lambda p: any(" · " in n for n in p["names"]), "curves should be drawn")
    assert not any(LATER in label for label in _option_labels(fleet_duo, "#bw-runs"))
    shutil.copytree(EXAMPLES / "example-cpu-2rank", fleet / LATER)  # no --db, no ingest
    _open(fleet_duo, "/bandwidth")  # a reload: the page is built again from the database and the folder
    shown = _wait_for_plot(
        fleet_duo,
        "bw-graph",
        lambda p: any(n.startswith(LATER + " · ") for n in p["names"]),
        "the newest measured run, written after the ingest, should open the page",
    )
    assert not any("synth-fleet" in name for name in shown["names"])  # it alone: synthetic runs are not measured
    assert "no nominal-rate line" in shown["annotations"]  # a CPU run has no NVLink or NIC rate: said on the figure
    _open(fleet_duo, "/compare")
    assert any(LATER in label for label in _option_labels(fleet_duo, "#cmp-a"))
    _open(fleet_duo, "/topology")  # the newest measured run opens Topology too, not an import or a synthetic run
    fleet_duo.wait_for_contains_text("#topo-source", f"{LATER} (run)", timeout=WAIT_S)
    _no_console_errors(fleet_duo)


def test_compare_opens_on_the_two_newest_runs_that_share_rows(fleet_duo):
    _open(fleet_duo, "/compare")  # the CPU run (gloo, other ops) is the newest: it is not paired with the fleet
    plot = _wait_for_plot(fleet_duo, "cmp-figure", lambda p: p["title"], "the default pair drew no comparison")
    assert "synth-fleet-00030 against synth-fleet-00029" in plot["title"], plot
    wait.until(lambda: " of 0 rows" not in fleet_duo.find_element("#cmp-summary").text, timeout=WAIT_S)
    assert "rows changed significantly" in fleet_duo.find_element("#cmp-summary").text
    _no_console_errors(fleet_duo)
