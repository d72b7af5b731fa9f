"""The Diagnose page's straggler screen: its chart (flagged nodes against the threshold line) and its
verdict in words, and what the page says when a report holds no screen.

The measured report is tests/fixtures/diagnose/diagnose-20261201-151410-vm-98f3ec (a real `commbench
diagnose` on 4 local ranks, rank 2 made late to every iteration of the screen: see SOURCES.md there).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

pytest.importorskip("dash", reason="needs the dashboard extra: pip install 'commbench[dashboard]'")

from commbench.cli import main
from commbench.diagnose.stragglers import STRAGGLER_RATIO
from dashboard.data import ResultsStore
from dashboard.figures.diagnose import STRAGGLER_KINDS, node_map, rounds_chart, straggler_chart, straggler_verdict

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "diagnose"


@pytest.fixture(scope="module")
def measured() -> dict:
    [entry] = ResultsStore(FIXTURES).usable(("diagnose",))
    assert not entry.synthetic
    return entry.diagnosis


def title_text(figure) -> str:
    """The title as read: its line breaks (the source wraps) read as spaces."""
    return figure.layout.title.text.replace("<br>", " ")


def threshold_lines(figure) -> list[float]:
    return [shape.y0 for shape in figure.layout.shapes if shape.type == "line" and shape.y0 == shape.y1]


def test_the_late_rank_is_a_bar_over_the_threshold_line(measured):
    figure = straggler_chart(measured)
    [late] = measured["stragglers"]["waited_for"]
    assert threshold_lines(figure) == [STRAGGLER_RATIO]
    assert [(trace.name, list(trace.x), list(trace.y)) for trace in figure.data] == [
        (STRAGGLER_KINDS["waited_for"][0], [late["node"]], [late["ratio"]])
    ]
    assert late["node"].endswith("-rank2") and late["ratio"] > STRAGGLER_RATIO
    assert figure.data[0].marker.color == STRAGGLER_KINDS["waited_for"][1]
    assert f"{late['iterations_slow']} of {late['iterations']} iterations" in figure.data[0].hovertext[0]
    assert "1 of 4 nodes flagged" in title_text(figure) and "the other 3 nodes" in title_text(figure)


def test_every_diagnose_figure_says_where_its_data_came_from(measured):
    source = measured["source"]
    assert source.startswith("measured: gloo") and "rank 0 on " in source and "command: commbench diagnose" in source
    assert all(source in title_text(draw(measured)) for draw in (node_map, straggler_chart, rounds_chart))
    node = measured["stragglers"]["waited_for"][0]["node"]
    assert straggler_verdict(measured).startswith("stragglers (screen ring over every node")
    assert f"{node} made the others wait" in straggler_verdict(measured)


def test_a_node_slow_itself_is_highlighted_apart_from_a_late_one(measured):
    report = copy.deepcopy(measured)  # the same report with a second finding added by hand: colours only
    report["stragglers"]["slow"] = [{"node": "extra-node", "iterations_slow": 4, "iterations": 5, "ratio": 1.5}]
    figure = straggler_chart(report)
    assert {trace.name: (list(trace.x), trace.marker.color) for trace in figure.data} == {
        STRAGGLER_KINDS["slow"][0]: (["extra-node"], STRAGGLER_KINDS["slow"][1]),
        STRAGGLER_KINDS["waited_for"][0]: (
            [report["stragglers"]["waited_for"][0]["node"]],
            STRAGGLER_KINDS["waited_for"][1],
        ),
    }
    assert threshold_lines(figure) == [STRAGGLER_RATIO]


def test_the_line_is_drawn_at_the_threshold_the_report_says_it_screened_at(measured):
    """Reports store the screen's ratio (since stop 22); the fixture predates that, so it is drawn at
    STRAGGLER_RATIO and the line says the value was not stored."""
    assert "ratio" not in measured["stragglers"]
    assert "not stored in this report" in straggler_chart(measured).layout.shapes[0].label.text
    report = copy.deepcopy(measured)
    report["stragglers"]["ratio"] = 1.5
    figure = straggler_chart(report)
    assert threshold_lines(figure) == [1.5]
    assert figure.layout.shapes[0].label.text == "straggler threshold 1.5x"
    assert "at or over 1.5x" in figure.data[0].hovertext[0]


def assert_message_only(figure, words: str) -> None:
    """Nothing drawn, no threshold line: only the message."""
    assert figure.data == () and threshold_lines(figure) == []
    assert words in figure.layout.annotations[0].text


def test_a_screen_that_found_no_straggler_says_so_without_bars(measured):
    report = copy.deepcopy(measured)
    report["stragglers"]["waited_for"] = []
    assert_message_only(straggler_chart(report), "no straggler")
    assert straggler_verdict(report).endswith(": none")


def test_a_screen_that_did_not_complete_or_was_skipped_draws_nothing(measured):
    broken = {**measured, "stragglers": {"note": "the screen's ring did not complete: no answer from h-rank3"}}
    assert_message_only(straggler_chart(broken), "no answer from h-rank3")
    skipped = {**measured, "stragglers": None}
    assert_message_only(straggler_chart(skipped), "skipped (--no-straggler-screen)")
    older = {key: value for key, value in measured.items() if key != "stragglers"}
    assert_message_only(straggler_chart(older), "written before commbench diagnose had one")
    assert measured["source"] in title_text(straggler_chart(older))


def test_a_cluster_model_diagnosis_has_no_screen_and_says_so(tmp_path):
    assert main(["diagnose", "--hosts", "n[01-08]", "--slow", "n03", "--out", str(tmp_path)]) == 0
    [entry] = ResultsStore(tmp_path).usable(("diagnose",))
    assert "stragglers" not in entry.diagnosis
    assert_message_only(straggler_chart(entry.diagnosis), "the cluster model (--simulate/--hosts) does not run one")


def test_the_page_shows_the_straggler_verdict_and_chart():
    from dashboard.app import create_app, results

    app = create_app(FIXTURES)
    import dashboard.pages.diagnose as page  # registers itself: only once an app exists

    with app.server.test_request_context():
        [entry] = results().usable(("diagnose",))
        summary, _, _, _, stragglers, _, _ = page.draw(entry.key)
        verdict = next(p for p in summary.children if getattr(p, "id", None) == "dg-straggler-verdict")
        assert verdict.children == straggler_verdict(entry.diagnosis)
        assert threshold_lines(stragglers) == [STRAGGLER_RATIO] and len(stragglers.data) == 1
