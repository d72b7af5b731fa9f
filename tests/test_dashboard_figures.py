"""The dashboard without a browser: the results store, figure builders, planner wrapper and command.

Runs come from results/examples (committed) and from small run directories made here; traces
from tests/fixtures/traces.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("dash", reason="needs the dashboard extra: pip install 'commbench[dashboard]'")

from commbench.errors import CommbenchError, UsageError
from commbench.modeling.spec import PlanSpec
from commbench.topology.model import ClusterTopology, NodeTopology
from commbench.topology.rates import nominal_rates
from commbench.traces.analysis import analyse_traces
from commbench.traces.store import TRACE_FILE, load_trace_analysis, save_trace_analysis
from dashboard.data import ResultsStore, safe_path
from dashboard.figures import bandwidth, overlap, planner, topology
from dashboard.figures.common import WEBGL_POINTS
from dashboard.planning import PlanCache, PlanRequest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "results" / "examples"
CPU_RUN = "examples/example-cpu-2rank"
NCCL_TESTS_RUN = "examples/example-nccl-tests-h100-synthetic"
TRACES = REPO / "tests" / "fixtures" / "traces"
DGX_TOPOLOGY = ClusterTopology.from_dict(json.loads((EXAMPLES / "dgx-h100.topology.json").read_text()))


@pytest.fixture
def results_dir(tmp_path) -> Path:
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    return tmp_path


@pytest.fixture
def store(results_dir) -> ResultsStore:
    return ResultsStore(results_dir)


# --- the results store --------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["../secret", "examples/../../x", "/etc", "", "a\\b", "examples/\x00"])
def test_keys_outside_the_results_folder_are_refused(tmp_path, key):
    with pytest.raises(UsageError, match="not a path inside the results folder"):
        safe_path(tmp_path.resolve(), key)


def test_a_link_leading_out_of_the_results_folder_is_refused(tmp_path):
    root = tmp_path / "results"
    root.mkdir()
    (root / "escape").symlink_to(tmp_path)
    with pytest.raises(UsageError):
        safe_path(root.resolve(), "escape")


def test_store_lists_every_example_kind(store):
    kinds = {entry.key: entry.kind for entry in store.entries()}
    assert kinds[CPU_RUN] == "sweep" and kinds[NCCL_TESTS_RUN] == "import"
    assert kinds["examples/example-trace-ddp"] == "trace"
    assert all(entry.ok for entry in store.entries())


def test_a_corrupt_run_is_an_entry_with_its_error_and_the_others_still_load(store, results_dir):
    (results_dir / "corrupt").mkdir()
    (results_dir / "corrupt" / "run.json").write_text("{ half written")
    entries = {entry.key: entry for entry in store.entries()}
    assert entries["corrupt"].state == "error" and "unreadable" in entries["corrupt"].error
    assert entries["corrupt"].summary()["state"] == "error"
    assert entries[CPU_RUN].ok and len(entries[CPU_RUN].records) == 130


def test_a_trace_run_without_its_analysis_says_so(store, results_dir):
    (results_dir / "examples" / "example-trace-ddp" / TRACE_FILE).unlink()
    entry = store.entry("examples/example-trace-ddp")
    assert not entry.ok and "trace.json: missing" in entry.error


def test_runs_added_changed_and_removed_are_seen_without_a_new_store(store, results_dir):
    first = store.entry(CPU_RUN)
    assert store.entry(CPU_RUN) is first  # unchanged files: the cached entry
    records = results_dir / CPU_RUN / "records.jsonl"
    lines = records.read_text().splitlines()
    records.write_text("\n".join(lines[:5]) + "\n")
    os.utime(records, ns=(1, 1))  # a different mtime even on coarse-grained clocks
    assert len(store.entry(CPU_RUN).records) == 5
    shutil.copytree(results_dir / CPU_RUN, results_dir / "new-run")
    assert "new-run" in {entry.key for entry in store.entries()}
    shutil.rmtree(results_dir / "new-run")
    assert "new-run" not in {entry.key for entry in store.entries()}


def test_entries_for_skips_keys_that_name_no_run(store):
    assert [e.key for e in store.entries_for([CPU_RUN, "../x", "nothing-here", ""])] == [CPU_RUN]


def test_synthetic_run_carries_its_badge_wherever_it_is_named(store):
    from dashboard.ui import run_options

    synthetic, measured = store.entry(NCCL_TESTS_RUN), store.entry(CPU_RUN)
    assert synthetic.synthetic and not measured.synthetic
    assert synthetic.summary()["synthetic"] == "[SYNTHETIC]" and measured.summary()["synthetic"] == ""
    labels = {option["value"]: option["label"] for option in run_options([synthetic, measured])}
    assert labels[NCCL_TESTS_RUN].startswith(f"{NCCL_TESTS_RUN} [SYNTHETIC] (")
    assert "[SYNTHETIC]" not in labels[CPU_RUN]
    figure = bandwidth.bandwidth_figure(store.records([NCCL_TESTS_RUN]), fitted=False)
    assert all("[SYNTHETIC]" in trace.name for trace in figure.data if NCCL_TESTS_RUN in (trace.name or ""))
    files = {source.key: source.label for source in store.topology_sources()}
    assert files["file:examples/dgx-h100.topology.json"].endswith("[SYNTHETIC]")


def test_records_of_several_runs_are_told_apart_by_run(store):
    frame = store.records([CPU_RUN, NCCL_TESTS_RUN])
    assert set(frame["run"]) == {CPU_RUN, f"{NCCL_TESTS_RUN} [SYNTHETIC]"}  # the synthetic run keeps its badge


def test_topology_sources_are_runs_and_topology_files(store, results_dir):
    keys = {source.key: source.gpus for source in store.topology_sources()}
    assert keys["file:examples/dgx-h100.topology.json"] == 8
    assert f"run:{CPU_RUN}" in keys
    topology, entry = store.topology("file:examples/dgx-h100.topology.json")
    assert entry is None and topology["nodes"][0]["hostname"] == "dgx-h100"
    (results_dir / "bad.topology.json").write_text("[]")
    with pytest.raises(CommbenchError, match="not a topology"):
        store.topology("file:bad.topology.json")
    with pytest.raises(UsageError):
        store.topology("file:../dgx.topology.json")
    with pytest.raises(CommbenchError, match="recorded no topology"):
        store.topology(f"run:{NCCL_TESTS_RUN}")


# --- trace runs (commbench/traces/store.py) ----------------------------------------------------


def test_a_trace_analysis_round_trips_through_a_run_directory(tmp_path):
    traces = [TRACES / "gpu_two_streams.json", TRACES / "gloo_cpu.json"]
    analysis = analyse_traces([str(p) for p in traces])
    run_dir = save_trace_analysis(analysis, tmp_path, traces, run_id="t1")
    info = json.loads((run_dir / "run.json").read_text())
    assert info["kind"] == "trace" and info["complete"] and info["world_size"] == 2
    assert info["backend"] == "nccl"  # rank 0 has GPU kernels
    assert info["args"]["traces"] == ["gpu_two_streams.json", "gloo_cpu.json"]
    assert load_trace_analysis(run_dir) == json.loads(json.dumps(analysis.to_dict()))
    with pytest.raises(CommbenchError, match="already exists"):
        save_trace_analysis(analysis, tmp_path, traces, run_id="t1")


def test_a_damaged_trace_file_is_a_clear_error(tmp_path):
    (tmp_path / TRACE_FILE).write_text('{"ranks": ')
    with pytest.raises(CommbenchError, match="unreadable"):
        load_trace_analysis(tmp_path)
    (tmp_path / TRACE_FILE).write_text('{"timeline": []}')
    with pytest.raises(CommbenchError, match="not a trace analysis"):
        load_trace_analysis(tmp_path)


# --- bandwidth ----------------------------------------------------------------------------------


def test_bandwidth_figure_overlays_runs_on_log_axes_with_fits_and_reference(store):
    frame = bandwidth.select_records(store.records([CPU_RUN, NCCL_TESTS_RUN]), "all_reduce", ["world"], "out")
    figure = bandwidth.bandwidth_figure(frame, "busbw_gbps", [("NVLink 18 x 25 GB/s", 450.0)])
    curves = [t for t in figure.data if not t.name.startswith(("fit:", "nominal"))]
    fits = [t for t in figure.data if t.name.startswith("fit:")]
    assert [t.name for t in curves] == [f"{CPU_RUN} · world n=2", f"{NCCL_TESTS_RUN} [SYNTHETIC] · world n=8"]
    assert len(fits) == 2 and all(t.line.dash == "dash" for t in fits)
    assert [f.line.color for f in fits] == [c.line.color for c in curves]  # a fit wears its curve's colour
    assert figure.layout.xaxis.type == "log" and figure.layout.yaxis.type == "log"
    assert figure.data[-1].name == "nominal NVLink 18 x 25 GB/s: 450 GB/s" and list(figure.data[-1].y) == [450, 450]
    # nccl-tests prints 0.00 GB/s for its smallest sizes: a log axis cannot draw those points
    nccl = curves[1]
    assert min(nccl.y) > 0 and len(nccl.x) == len(frame[(frame["run"] == f"{NCCL_TESTS_RUN} [SYNTHETIC]")]) - 2


@pytest.fixture
def run_with_means(results_dir) -> str:
    """The CPU example with a mean per-op time unlike its median (what the planner prices) and a row
    with wrong elements (which the table leaves out): a fit of medians over every row differs."""
    source, name = results_dir / CPU_RUN, "examples/with-means"
    shutil.copytree(source, results_dir / name)
    records = [json.loads(line) for line in (source / "records.jsonl").read_text().splitlines() if line.strip()]
    for index, record in enumerate(records):
        record["time_us_mean"] = record["time_us"] * (1.1 + 0.8 * (index % 3)) + 40.0
    records[3]["wrong"] = 5
    (results_dir / name / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (results_dir / name / "records.csv").unlink(missing_ok=True)
    return name


@pytest.mark.parametrize("run", [CPU_RUN, NCCL_TESTS_RUN, "with-means"])
def test_the_dashboard_fit_is_the_one_commbench_table_prints(store, results_dir, capsys, run, request):
    """One fit for one run: the dashboard's dashed curve has the latency and bandwidth `commbench table`
    prints (and the planner prices with), entry for entry."""
    from commbench.cli import main

    run = request.getfixturevalue("run_with_means") if run == "with-means" else run

    assert main(["table", str(results_dir / run), "--format", "json", "--op", "all_reduce"]) == 0
    printed = {
        (e["scope"], e["group_size"]): (e["alpha_us"], e["busbw_gbps"])
        for e in json.loads(capsys.readouterr().out)["entries"]
        if not e["in_place"]
    }
    frame = bandwidth.select_records(store.records([run]), "all_reduce", None, "out")
    drawn = {
        (series["scope"].iloc[0], int(series["group_size"].iloc[0])): (t.meta["alpha_us"], t.meta["busbw_gbps"])
        for (_, series), t in zip(
            frame.groupby(bandwidth.SERIES_KEYS, sort=False),
            (t for t in bandwidth.bandwidth_figure(frame).data if t.name.startswith("fit:")),
        )
    }
    assert drawn and drawn == printed


def test_hover_carries_the_exact_figures(store):
    frame = bandwidth.select_records(store.records([NCCL_TESTS_RUN]), "all_reduce", None, "out")
    trace = bandwidth.bandwidth_figure(frame, fitted=False).data[0]
    largest = frame.iloc[-1]
    row = trace.customdata[-1]
    assert row[0] == "128M" and row[3] == largest["time_us"] and row[8] == largest["busbw_gbps"]
    assert "busbw %{customdata[8]:.3f} GB/s" in trace.hovertemplate


def test_the_fitted_model_matches_a_synthetic_latency_bandwidth_curve():
    import pandas as pd

    sizes = [2**k for k in range(10, 27, 2)]
    times = [5.0 + s * 1.0 / 100e3 for s in sizes]  # 5 us + size / (100 GB/s), factor 1
    frame = pd.DataFrame(
        {
            "run": "r",
            "scope": "world",
            "group_size": 2,
            "n_groups": 1,
            "in_place": False,
            "op": "sendrecv",
            "size_bytes": sizes,
            "time_us": times,
            "busbw_factor": 1.0,
            "busbw_gbps": [s / t / 1e3 for s, t in zip(sizes, times)],
            "count": sizes,
            "dtype": "float",
            "time_us_p10": times,
            "time_us_p90": times,
            "cv": 0.0,
            "algbw_gbps": [s / t / 1e3 for s, t in zip(sizes, times)],
        }
    )
    fit = next(t for t in bandwidth.bandwidth_figure(frame).data if t.name.startswith("fit:"))
    assert fit.name.startswith("fit: 5 us + busbw 100 GB/s")
    assert fit.y[-1] == pytest.approx(frame["busbw_gbps"].iloc[-1], rel=1e-3)


def test_in_place_choice_and_empty_selection(store):
    frame = store.records([NCCL_TESTS_RUN])
    assert set(bandwidth.select_records(frame, "all_reduce", None, "in")["in_place"]) == {True}
    assert len(bandwidth.select_records(frame, "all_reduce", None, "both")) == len(frame)
    empty = bandwidth.select_records(frame, "all_gather", None, "out")
    assert empty.empty and bandwidth.bandwidth_figure(empty).layout.annotations[0].text.startswith("No records")


def test_latency_figure_keeps_small_sizes_with_spread_bars(store):
    frame = bandwidth.select_records(store.records([CPU_RUN]), "all_reduce", None, "out")
    trace = bandwidth.latency_figure(frame).data[0]
    assert max(trace.x) <= bandwidth.LATENCY_MAX_SIZE and min(trace.x) == 1024
    assert trace.error_y.array is not None and trace.error_y.arrayminus is not None


def test_table_rows_hold_the_chosen_records(store):
    frame = bandwidth.select_records(store.records([CPU_RUN]), "sendrecv", None, "out")
    columns, rows = bandwidth.table_rows(frame)
    assert [c["id"] for c in columns][:3] == ["run", "op", "scope"] and len(rows) == len(frame)


def test_many_points_switch_to_webgl(store):
    frame = bandwidth.select_records(store.records([CPU_RUN]), "all_reduce", None, "both")
    big = frame.loc[frame.index.repeat(WEBGL_POINTS // len(frame) + 1)]
    assert bandwidth.bandwidth_figure(big, fitted=False).data[0].type == "scattergl"
    assert bandwidth.bandwidth_figure(frame, fitted=False).data[0].type == "scatter"


# --- topology -----------------------------------------------------------------------------------


def test_dgx_graph_has_gpus_on_an_nvswitch_and_nics_over_their_gpus():
    graph = topology.topology_graph(DGX_TOPOLOGY)
    kinds = [kind for _, kind in graph.nodes(data="kind")]
    assert kinds.count("gpu") == 8 and kinds.count("nic") == 10 and kinds.count("nvswitch") == 1
    assert graph.edges["dgx-h100/GPU0", "dgx-h100/NVSwitch"]["label"] == "NV18"
    assert graph.edges["dgx-h100/mlx5_0", "dgx-h100/GPU0"]["label"] == "PIX"
    assert graph.edges["dgx-h100/mlx5_0", "fabric:network"]["label"] == "400 Gb/s"
    positions = topology.layered_positions(graph)
    assert positions["dgx-h100/mlx5_0"][0] < positions["dgx-h100/mlx5_1"][0]  # NICs sit over their GPUs


def test_topology_figure_colours_by_link_type_or_measurement(store):
    by_type = topology.topology_figure(DGX_TOPOLOGY)
    assert {"NVLink", "PCIe switch (PIX/PXB)", "network"} <= {t.name for t in by_type.data}
    run = store.entry(CPU_RUN)
    measured = topology.measured_by_scope(run.records, node_count=1)
    assert set(measured) == {"intra"} and "all_reduce world busbw" in measured["intra"][1]
    figure = topology.topology_figure(topology.cluster_topology(run.info["topology"]), "measured", measured)
    assert any(t.name and t.name.startswith("intra: all_reduce") for t in figure.data)
    assert any(t.name == "not measured" for t in figure.data)


def test_link_matrix_uses_nvidia_smi_words_with_their_meaning():
    figure = topology.link_matrix_figure(DGX_TOPOLOGY.nodes[0])
    heatmap = figure.data[0]
    assert heatmap.text[0][1] == "NV18" and heatmap.x[8] == "NIC0 (mlx5_0)"
    assert "18 bonded NVLinks" in heatmap.hovertext[0][1]
    assert "no GPU/NIC link matrix" in topology.link_matrix_figure(NodeTopology("h", "test")).layout.annotations[0].text


def test_nominal_rates_follow_the_scope():
    assert nominal_rates(DGX_TOPOLOGY, "world") == [("NVLink 18 x 25 GB/s", 450.0)]
    assert nominal_rates(DGX_TOPOLOGY, "inter") == [("network 400 Gb/s", 50.0)]
    assert nominal_rates(None, "world") == []


def test_a_topology_that_is_not_one_gives_no_typed_view():
    assert topology.cluster_topology(None) is None
    assert topology.cluster_topology({"nodes": [{"gpus": []}]}) is None  # no hostname, no source
    assert topology.cluster_topology({"nodes": "x"}) is None


def test_pairwise_heatmap_shows_the_flagged_pairs():
    import pandas as pd

    nodes = {0: "n0", 1: "n1", 2: "n2"}
    rows = [
        {
            "scope": "pair",
            "size_bytes": size,
            "algbw_gbps": value,
            "pair": [a, b],
            "pair_nodes": [nodes[a], nodes[b]],
            "outlier": size == 4096 and 2 in (a, b),
        }
        for size in (8, 4096)
        for a, b, value in ((0, 1, 0.12), (0, 2, 0.02), (1, 2, 0.021))
    ]
    figure = topology.pairwise_figure(pd.DataFrame(rows))
    flagged = next(t for t in figure.data if t.type == "scatter")
    assert sorted(zip(flagged.x, flagged.y)) == sorted(
        [("2 (n2)", "0 (n0)"), ("0 (n0)", "2 (n2)"), ("2 (n2)", "1 (n1)"), ("1 (n1)", "2 (n2)")]
    )
    assert "4096 B" in figure.layout.title.text
    assert topology.pairwise_figure(pd.DataFrame([{"scope": "world", "busbw_gbps": 1.0}])) is None


def test_pairwise_hover_gives_the_retransmit_share_the_pairwise_run_judged():
    import pandas as pd

    lossy = {
        "scope": "pair",
        "size_bytes": 8,
        "algbw_gbps": 0.1,
        "pair": [0, 1],
        "pair_nodes": ["n0", "n1"],
        "tcp_segments_sent": 2000,
        "tcp_retransmits": 30,
        "outlier": True,
        "outlier_reasons": ["lossy"],
    }
    unread = {
        **lossy,
        "pair": [0, 2],
        "pair_nodes": ["n0", "n2"],
        "tcp_segments_sent": None,
        "tcp_retransmits": None,
        "outlier": False,
        "outlier_reasons": [],
    }
    notes = topology.pairwise_figure(pd.DataFrame([lossy, unread])).data[0].customdata
    assert notes[0][1] == "TCP re-sent 1.50% of segments · flagged: lossy"
    assert notes[0][2] == ""  # counters not read: no share, nothing flagged


# --- overlap ------------------------------------------------------------------------------------


def test_trace_timeline_is_microsecond_bars_on_a_numeric_axis(store):
    analysis = store.entry("examples/example-trace-ddp").trace
    bars, note = overlap.select_bars(analysis["timeline"], [0], None)
    assert note is None and {bar["rank"] for bar in bars} == {0}
    figure = overlap.timeline_figure(bars)
    assert {t.type for t in figure.data} == {"bar"} and figure.layout.xaxis.type == "linear"
    compute = next(t for t in figure.data if t.name == "compute")
    first = next(bar for bar in bars if bar["category"] == "compute")
    assert compute.base[0] == first["start_us"] and compute.x[0] == first["dur_us"]  # not rounded to ms
    assert compute.orientation == "h"


def test_iteration_window_and_bar_limit():
    timeline = [
        {"rank": 0, "lane": "s", "category": "compute", "name": f"k{i}", "start_us": float(i), "dur_us": i / 10}
        for i in range(100)
    ]
    bars, note = overlap.select_bars(timeline, None, (10.0, 20.0))
    assert next(bar["name"] for bar in bars) == "k10" and len(bars) == 10
    bars, note = overlap.select_bars(timeline, None, None, limit=5)
    assert [bar["name"] for bar in bars] == ["k95", "k96", "k97", "k98", "k99"] and "5 longest" in note


def test_iteration_figures_and_tables(store):
    analysis = store.entry("examples/example-trace-ddp").trace
    windows = overlap.iteration_windows(analysis)
    assert len(windows) == 3 and all(end > start for _, start, end in windows)
    figure = overlap.iteration_figure(analysis)
    assert [t.name for t in figure.data] == ["rank 0", "rank 0", "rank 1", "rank 1"]
    assert figure.data[0].marker.color == figure.data[1].marker.color  # a rank keeps its colour
    assert overlap.rank_rows(analysis)[0]["overlap_pct"] is not None
    assert overlap.collective_rows(analysis)[0]["collective"] == "gloo:all_reduce"
    assert "no iterations" in overlap.iteration_figure({"ranks": []}).layout.annotations[0].text


def test_overlap_run_figures(store):
    entries = [e for e in store.entries() if e.kind == "overlap"]
    if not entries:
        pytest.skip("no overlap example run under results/examples")
    frame = entries[0].records
    figure = overlap.measurement_figure(frame)
    assert {t.legendgroup for t in figure.data} == set(frame["op"])
    bars = overlap.measured_pair_bars(entries[0].run.records[0])
    assert [bar["category"] for bar in bars] == ["compute", "communication"] * 2
    assert all(bar["start_us"] == 0.0 for bar in bars)


# --- planner ------------------------------------------------------------------------------------


def test_planner_ranks_layouts_and_its_figures_draw_them():
    view = PlanCache().view(PlanRequest(PlanSpec("llama2-7b", 16, 64, 4096, top=3)))
    results = [r.to_dict() for r in view.ranked]
    assert len(results) == 3 and view.fitting <= view.screened
    rows = planner.ranked_rows(view.ranked)
    assert rows[0]["rank"] == 1 and "tp=" in rows[0]["layout"]
    assert rows[0]["largest_costs"] == view.ranked[0].largest_costs() and "%" in rows[0]["largest_costs"]
    breakdown = planner.breakdown_figure(results)
    assert "compute" in {t.name for t in breakdown.data} and breakdown.layout.barmode == "stack"
    memory = planner.memory_figure(results, view.capacity_bytes)
    assert memory.layout.shapes[0].y0 == pytest.approx(80.0)
    timeline = view.timeline(0)
    figure = planner.step_timeline_figure(timeline, "t")
    assert {t.type for t in figure.data} == {"bar"} and figure.layout.xaxis.type == "linear"


def test_planner_caches_plans_and_caps_big_timelines():
    cache = PlanCache()
    request = PlanRequest(PlanSpec("llama2-7b", 16, 64, 4096, top=2))
    assert cache.view(request) is cache.view(PlanRequest(PlanSpec("llama2-7b", 16, 64, 4096, top=2)))
    timeline = [
        {"stream": "s", "start_us": float(i), "dur_us": 1.0, "name": "x", "category": "compute"}
        for i in range(overlap.MAX_BARS + 10)
    ]
    figure = planner.step_timeline_figure(timeline, "big")
    assert len(figure.data[0].x) == overlap.MAX_BARS and "longest are drawn" in figure.layout.title.text


def test_planner_says_why_a_model_does_not_fit():
    with pytest.raises(CommbenchError, match="does not fit"):
        PlanCache().view(PlanRequest(PlanSpec("llama3.1-405b", 8, 8, 4096)))


@pytest.mark.parametrize(
    "run, origin",
    [("example-cpu-2rank", "measured"), ("example-nccl-tests-h100-synthetic", "SYNTHETIC (not measured)")],
)
def test_planner_prices_from_a_run_and_says_whether_it_was_measured(run, origin):
    view = PlanCache().view(PlanRequest(PlanSpec("llama2-7b", 8, 64, 4096, top=1, bandwidth=str(EXAMPLES / run))))
    assert view.network.startswith(f"{origin} ")


# --- the app and the command --------------------------------------------------------------------


def test_building_the_app_twice_registers_each_page_once(results_dir):
    from dashboard.app import create_app

    first = create_app(results_dir).server.test_client().get("/_dash-dependencies").json
    second = create_app(results_dir).server.test_client().get("/_dash-dependencies").json
    assert len(first) == len(second)
    import dash

    assert [page["name"] for page in dash.page_registry.values()] == [
        "Runs",
        "Topology",
        "Bandwidth",
        "Overlap",
        "Planner",
        "History",
        "Compare",
        "Diagnose",
        "Jobs",
    ]


def _command_args(*argv: str) -> argparse.Namespace:
    from commbench.commands import dashboard as command

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_command_serves_on_localhost_under_waitress_and_the_dev_server_only_with_debug(monkeypatch, results_dir):
    from commbench.commands import dashboard as command

    served = {}

    class FakeApp:
        server = object()

        def run(self, **options):
            served.update(dev_server=options)

    def create_app(path, models_dir=None):
        served["results"] = path
        assert models_dir is None  # no --models: the Planner offers the presets and the folder's configs only
        return FakeApp()

    monkeypatch.setattr("dashboard.app.create_app", create_app)
    monkeypatch.setattr("dashboard.server.serve", lambda app, host, port: served.update(waitress=(app, host, port)))
    monkeypatch.setattr("dashboard.server.warm_up", lambda app: None)
    monkeypatch.delenv("COMMBENCH_DASHBOARD_AUTH", raising=False)
    assert command.main(_command_args("--results", str(results_dir))) == 0
    assert served == {"results": results_dir, "waitress": (FakeApp.server, "127.0.0.1", 8050)}
    served.clear()
    assert command.main(_command_args("--results", str(results_dir), "--debug")) == 0
    assert served == {"results": results_dir, "dev_server": {"host": "127.0.0.1", "port": 8050, "debug": True}}


@pytest.mark.parametrize(
    "argv, message",
    [
        (("--results", "/no/such/folder"), "no such folder"),
        (("--results", ".", "--port", "0"), "between 1 and 65535"),
    ],
)
def test_command_bad_input_is_a_usage_error(argv, message):
    from commbench.commands import dashboard as command

    with pytest.raises(UsageError, match=message):
        command.main(_command_args(*argv))
