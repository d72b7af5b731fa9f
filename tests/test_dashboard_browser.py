"""The dashboard in a real (headless) Chromium: every page opens, draws, reacts, and logs no errors.

One app and one browser serve the whole module (starting Chromium costs seconds); the tests run
in page order and share the browser tab, as a person clicking through would. The results folder
is a copy of results/examples plus a corrupt run, a half-written run, and a run added while the
app is up. Screenshots of each page go to a temporary folder, so a test run leaves the checkout as
it was; `COMMBENCH_SCREENSHOTS=docs/screenshots python -m pytest tests/test_dashboard*browser.py`
refreshes the ones docs/dashboard.md and README.md show.

Needs dash[testing], selenium>=4, Debian's chromium and chromium-driver; skipped without them,
except in CI, where a skip fails (tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHROMEDRIVER = shutil.which("chromedriver")
pytest.importorskip("selenium", reason="needs selenium>=4 (pip install 'dash[testing]' 'selenium>=4')")
application_runners = pytest.importorskip("dash.testing.application_runners", reason="needs dash[testing]")
composite = pytest.importorskip("dash.testing.composite", reason="needs dash[testing]")
wait = pytest.importorskip("dash.testing.wait", reason="needs dash[testing]")

from cluster.browser_netns import isolated_chromedriver  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402

from commbench.modeling.hardware import load_network  # noqa: E402
from dashboard.app import create_app  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "results" / "examples"
# a temporary folder unless asked: the tracked images change only when someone means to refresh them
SCREENSHOTS = Path(os.environ.get("COMMBENCH_SCREENSHOTS") or tempfile.mkdtemp(prefix="commbench-screenshots-"))
WAIT_S = 30


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _chrome_options() -> Options:
    options = Options()
    options.binary_location = CHROMIUM
    # The closed test network: no update checks, sync or field trials reaching out and failing.
    for argument in (
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1360,1300",
        "--force-device-scale-factor=1",
        "--hide-scrollbars",
    ):
        options.add_argument(argument)
    return options


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("results")
    # a fixed set of examples, so runs added to results/examples later do not change what the pages show
    for name in ("example-cpu-2rank", "example-nccl-tests-h100-synthetic", "example-overlap-cpu", "example-trace-ddp"):
        shutil.copytree(EXAMPLES / name, root / "examples" / name)
    shutil.copy(EXAMPLES / "dgx-h100.topology.json", root / "examples")
    broken = root / "broken-run"
    broken.mkdir()
    (broken / "run.json").write_text('{"run_id": "broken-run", "kind": ')  # cut off mid-write
    half = root / "half-written"
    shutil.copytree(EXAMPLES / "example-cpu-2rank", half)
    info = json.loads((half / "run.json").read_text())
    (half / "run.json").write_text(
        json.dumps({**info, "run_id": "half-written", "complete": False, "created": "2001-01-01T00:00:00+00:00"})
    )
    lines = (half / "records.jsonl").read_text().splitlines()
    (half / "records.jsonl").write_text("\n".join(lines[:10]) + "\n" + lines[10][:40])
    return root


@pytest.fixture(scope="module")
def duo(results_dir, tmp_path_factory):
    # a skip per test rather than for the module, so that CI fails each test instead of stopping collection
    missing = [name for name, path in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)) if not path]
    if missing:
        pytest.skip(f"needs {' and '.join(missing)} on PATH (apt-get install chromium chromium-driver)")
    app = create_app(results_dir)
    downloads = tmp_path_factory.mktemp("downloads")
    port = _free_port()
    with (
        isolated_chromedriver([port], tmp_path_factory.mktemp("driver")),
        application_runners.ThreadedRunner() as server,
        composite.DashComposite(
            server=server,
            browser="Chrome",
            headless=True,
            options=[_chrome_options()],
            download_path=str(downloads),
            percy_run=False,
            wait_timeout=WAIT_S,
        ) as browser,
    ):
        browser.start_server(app, port=port)
        browser.download_dir = downloads
        yield browser


def _open(duo, path: str) -> None:
    duo.driver.get(duo.server_url + path)
    duo.wait_for_element("#_pages_content", timeout=WAIT_S)


def _plot(duo, graph_id: str) -> dict:
    """Trace names and layout title of a rendered graph, once plotly has drawn it."""
    duo.wait_for_element(f"#{graph_id} .main-svg", timeout=WAIT_S)
    return duo.driver.execute_script(
        "const plot = document.querySelector(arguments[0] + ' .js-plotly-plot');"
        "return {names: plot.data.map(t => t.name || ''), title: (plot.layout.title || {}).text || '',"
        " xrange: (plot.layout.xaxis || {}).range || null,"
        " texts: plot.data.map(t => JSON.stringify(t.text || '')).join(' '),"
        " annotations: (plot.layout.annotations || []).map(a => a.text).join(' ')};",
        f"#{graph_id}",
    )


def _wait_for_plot(duo, graph_id: str, condition, message: str) -> dict:
    duo.wait_for_element(f"#{graph_id} .main-svg", timeout=WAIT_S)
    try:
        wait.until(lambda: condition(_plot(duo, graph_id)), timeout=WAIT_S)
    except Exception:
        pytest.fail(f"{message}; graph {graph_id} shows {_plot(duo, graph_id)}")
    return _plot(duo, graph_id)


def _screenshot(duo, page: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    duo.driver.save_screenshot(str(SCREENSHOTS / f"{page}.png"))


def _no_console_errors(duo) -> None:
    assert duo.get_logs() == [], "the browser console reported errors"


def test_runs_page_lists_runs_and_shows_broken_ones(duo):
    _open(duo, "/")
    duo.wait_for_contains_text("#runs-table", "examples/example-cpu-2rank", timeout=WAIT_S)
    table = duo.find_element("#runs-table").text
    for run in ("example-nccl-tests-h100-synthetic", "example-trace-ddp", "half-written"):
        assert run in table
    duo.wait_for_contains_text("#runs-problems", "broken-run", timeout=WAIT_S)
    problems = duo.find_element("#runs-problems").text
    assert "run.json: unreadable" in problems
    assert "half-written: run not complete" in problems
    assert "incomplete" in table
    rows = {row.text.split()[0]: row.text for row in duo.find_elements("#runs-table tbody tr") if row.text}
    badged = [name for name, text in rows.items() if "[SYNTHETIC]" in text]
    assert badged == ["examples/example-nccl-tests-h100-synthetic"], rows  # the badge, and only on it
    _no_console_errors(duo)


def test_runs_added_while_running_appear(duo, results_dir):
    _open(duo, "/")
    duo.wait_for_contains_text("#runs-table", "examples/example-cpu-2rank", timeout=WAIT_S)
    shutil.copytree(results_dir / "examples" / "example-nccl-tests-h100-synthetic", results_dir / "added-later")
    duo.wait_for_contains_text("#runs-table", "added-later", timeout=WAIT_S)
    shutil.rmtree(results_dir / "added-later")
    _no_console_errors(duo)


def test_runs_selection_carries_to_bandwidth_page(duo):
    _open(duo, "/")
    duo.wait_for_contains_text("#runs-table", "examples/example-cpu-2rank", timeout=WAIT_S)
    rows = duo.find_elements("#runs-table tbody tr")
    for row in rows:
        if "example-cpu-2rank" in row.text or "example-nccl-tests-h100-synthetic" in row.text:
            row.find_element("css selector", "input[type=checkbox]").click()
    _screenshot(duo, "runs")
    duo.find_element("#nav-bandwidth").click()
    shown = _wait_for_plot(
        duo,
        "bw-graph",
        lambda plot: len({n.split(" · ")[0] for n in plot["names"] if " · " in n}) == 2,
        "both ticked runs should be overlaid",
    )
    assert any("examples/example-cpu-2rank · world n=2" in name for name in shown["names"])
    assert any("examples/example-nccl-tests-h100-synthetic [SYNTHETIC] · world n=8" in name for name in shown["names"])
    assert not any("example-cpu-2rank [SYNTHETIC]" in name for name in shown["names"])
    assert any(name.startswith("fit:") for name in shown["names"])
    duo.wait_for_contains_text(
        "#bw-notices", "example-nccl-tests-h100-synthetic is SYNTHETIC, not a measurement", timeout=WAIT_S
    )
    _no_console_errors(duo)


def test_bandwidth_page_controls_table_and_download(duo):
    _open(duo, "/bandwidth")
    _wait_for_plot(duo, "bw-graph", lambda plot: any(" · " in n for n in plot["names"]), "curves should be drawn")
    _plot(duo, "bw-latency")
    duo.select_dcc_dropdown("#bw-op", value="all_gather")
    shown = _wait_for_plot(
        duo,
        "bw-graph",
        lambda plot: plot["names"] and "nccl-tests" not in " ".join(plot["names"]),
        "all_gather exists only in the CPU run, so only it should remain",
    )
    assert all("example-cpu-2rank" in name or name.startswith("fit:") for name in shown["names"])
    duo.select_dcc_dropdown("#bw-op", value="all_reduce")
    _wait_for_plot(
        duo,
        "bw-graph",
        lambda plot: any("nccl-tests" in n for n in plot["names"]),
        "all_reduce brings the nccl-tests run back",
    )
    duo.select_dcc_dropdown("#bw-reference", value=f"preset: {load_network('nvlink4').name}")
    _wait_for_plot(duo, "bw-graph", lambda plot: any("450 GB/s" in n for n in plot["names"]), "the NVLink 4 rate line")
    _screenshot(duo, "bandwidth")
    duo.find_element("#bw-view .tab:nth-child(2)").click()
    duo.wait_for_contains_text("#bw-table", "all_reduce", timeout=WAIT_S)
    duo.find_element("#bw-download-button").click()
    wait.until(lambda: list(duo.download_dir.glob("*.csv")), timeout=WAIT_S)
    csv_text = next(duo.download_dir.glob("*.csv")).read_text()
    assert csv_text.startswith("run,op,scope") and "example-cpu-2rank" in csv_text
    _no_console_errors(duo)


def test_topology_page_draws_network_matrix_and_measured_links(duo):
    _open(duo, "/topology")
    # the CPU run ticked on the Runs page has a topology, so the page starts from it
    _wait_for_plot(duo, "topo-graph", lambda plot: "eth0" in plot["texts"], "the ticked run's topology")
    duo.select_dcc_dropdown("#topo-source", value="examples/dgx-h100.topology.json (topology file) [SYNTHETIC], 8 GPUs")
    shown = _wait_for_plot(duo, "topo-graph", lambda plot: "NVLink" in plot["names"], "DGX H100 links by type")
    assert "NV18" in shown["texts"]
    duo.wait_for_element("#topo-matrices .main-svg", timeout=WAIT_S)
    _screenshot(duo, "topology")
    duo.select_dcc_dropdown("#topo-source", value="examples/example-cpu-2rank (run), 0 GPUs")
    duo.find_element("#topo-colour input[value=measured]").click()
    _wait_for_plot(
        duo,
        "topo-graph",
        lambda plot: any("busbw" in n for n in plot["names"]),
        "the CPU run's measured busbw should colour its links",
    )
    _no_console_errors(duo)


def test_overlap_page_trace_timeline_and_overlap_run(duo):
    _open(duo, "/overlap")
    duo.select_dcc_dropdown("#ov-source", index=_option_index(duo, "#ov-source", "example-trace-ddp"))
    shown = _wait_for_plot(duo, "ov-timeline", lambda plot: "communication" in plot["names"], "trace timeline")
    assert "compute" in shown["names"]
    _wait_for_plot(duo, "ov-figures", lambda plot: "rank 1" in plot["names"], "per-iteration overlap per rank")
    duo.wait_for_contains_text("#ov-table", "overlap", timeout=WAIT_S)
    whole = _plot(duo, "ov-timeline")["xrange"]
    duo.select_dcc_dropdown("#ov-window", index=1)
    _wait_for_plot(
        duo,
        "ov-timeline",
        lambda plot: plot["xrange"] and plot["xrange"][1] - plot["xrange"][0] < 0.6 * (whole[1] - whole[0]),
        "one iteration zooms the timeline in",
    )
    _screenshot(duo, "overlap")
    duo.select_dcc_dropdown("#ov-source", index=_option_index(duo, "#ov-source", "example-overlap-cpu"))
    _wait_for_plot(
        duo, "ov-figures", lambda plot: "overlap achieved" in plot["annotations"], "overlap measurement figure"
    )
    shown = _wait_for_plot(duo, "ov-timeline", lambda plot: "beside" in plot["title"], "GEMM and collective bars")
    assert {"compute", "communication"} <= set(shown["names"])
    _no_console_errors(duo)


def _option_labels(duo, dropdown: str) -> list[str]:
    # the page's layout arrives after its container: under load the dropdown can be a moment late
    duo.wait_for_element(dropdown, timeout=WAIT_S).click()
    options = [o.text for o in duo.find_elements(".dash-dropdown-option")]
    duo.find_element(dropdown).click()  # close it again
    return options


def _option_index(duo, dropdown: str, text: str) -> int:
    return next(i for i, label in enumerate(_option_labels(duo, dropdown)) if text in label)


def test_planner_page_ranks_layouts_and_simulates_the_chosen_one(duo):
    _open(duo, "/planner")
    sources = _option_labels(duo, "#plan-bandwidth")
    assert any(
        label.startswith("synthetic: examples/example-nccl-tests-h100-synthetic [SYNTHETIC]") for label in sources
    )
    assert any(label.startswith("measured: examples/example-cpu-2rank (") for label in sources), sources
    duo.wait_for_contains_text("#plan-table", "tp=", timeout=WAIT_S)
    _wait_for_plot(duo, "plan-breakdown", lambda plot: "compute" in plot["names"], "breakdown bars")
    _wait_for_plot(duo, "plan-memory", lambda plot: "parameters" in plot["names"], "memory ledger")
    _wait_for_plot(duo, "plan-timeline", lambda plot: "simulated step of #1" in plot["title"], "step timeline")
    # no processor given: the bottom of the page is one sentence, not a blank plot frame
    duo.wait_for_contains_text("#plan-gemm-empty", "Give a processor above", timeout=WAIT_S)
    assert not duo.find_element("#plan-gemm").is_displayed()
    duo.find_elements("#plan-table input[type=radio]")[1].click()
    _wait_for_plot(duo, "plan-timeline", lambda plot: "simulated step of #2" in plot["title"], "second layout")
    summary = duo.find_element("#plan-summary").text
    gpus = duo.find_element("#plan-gpus")
    gpus.clear()
    gpus.send_keys("32\n")
    wait.until(lambda: duo.find_element("#plan-summary").text not in ("", summary), timeout=WAIT_S)
    _wait_for_plot(duo, "plan-timeline", lambda plot: "simulated step of #1" in plot["title"], "new plan's timeline")
    _screenshot(duo, "planner")
    _no_console_errors(duo)
