"""History and Compare pages without a browser: the figure builders, the database readers, the click link."""

from __future__ import annotations

from pathlib import Path

from commbench.analysis.synthetic import Injection, generate_history, quiet_variant, read_profile
from commbench.data import store
from dashboard.figures.history import VERDICT_COLOURS, compare_figure, compare_rows, history_figure
from dashboard.fleet import comparison, database_for, history_choices, history_series, link_for

PROFILE = quiet_variant(read_profile(Path(__file__).parent / "fixtures" / "history-noise-profile.json"))


def make_fleet(root: Path) -> Path:
    generate_history(
        root, PROFILE, 30, cluster="fleet", seed=3, injection=Injection(at=20, drop=0.3, versions={"nccl": "2.23.4"})
    )
    db = root / "commbench.duckdb"
    store.ingest(db, [root])
    return db


def test_history_figure_marks_the_change_point_and_carries_run_ids(tmp_path, monkeypatch):
    monkeypatch.delenv("COMMBENCH_DB", raising=False)
    db = make_fleet(tmp_path)
    assert database_for(tmp_path) == db
    choices = history_choices(db)
    assert choices["cluster"] == ["fleet"] and 8 << 20 in choices["size"]
    series = history_series(db, "fleet", "all_reduce", 8 << 20, None)
    figure = history_figure(series)
    (trace,) = figure.data
    assert len(trace.y) == 30 and trace.customdata[19][0] == series[0]["points"][19]["run_id"]
    (line,) = figure.layout.shapes
    assert line.x0 == 19.5  # between run 19 and run 20
    assert "nccl 2.21.5 -> 2.23.4" in figure.layout.annotations[0].text
    assert "8M" in figure.layout.title.text and "SYNTHETIC" in figure.layout.title.text


def test_history_figure_without_runs_says_so():
    assert "no runs" in history_figure([]).layout.annotations[0].text


def test_click_link_compares_with_the_run_before(tmp_path):
    db = make_fleet(tmp_path)
    points = history_series(db, "fleet", "all_reduce", 8 << 20, None)[0]["points"]
    href, text = link_for(points, 19, tmp_path)
    assert href == f"/compare?a={points[18]['run_id']}&b={points[19]['run_id']}" and "compare" in text
    assert link_for(points, 0, tmp_path)[0] == "/compare"
    assert "outside" in link_for(points, 5, tmp_path / "elsewhere")[1]


def test_compare_figure_colours_rows_by_verdict_with_intervals(tmp_path):
    runs = generate_history(tmp_path, PROFILE, 2, seed=5, injection=Injection(at=2, drop=0.4))
    result = comparison(runs[0], runs[1])
    figure = compare_figure(result)
    slower = [trace for trace in figure.data if trace.name == "slower"]
    assert slower and slower[0].marker.color == VERDICT_COLOURS["slower"]
    assert all(value >= 0 for trace in figure.data for value in trace.error_y.array)
    rows = compare_rows(result)
    assert {row["verdict"] for row in rows} <= set(VERDICT_COLOURS) and rows[0]["95% CI (%)"].startswith("[")
    assert "share no row" in compare_figure({"rows": []}).layout.annotations[0].text
