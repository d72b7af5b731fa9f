"""The Diagnose page's data and figures: a run directory from `commbench diagnose --out`, drawn."""

from __future__ import annotations

import pytest

pytest.importorskip("dash", reason="needs the dashboard extra: pip install 'commbench[dashboard]'")

from commbench.cli import main
from dashboard.data import ResultsStore
from dashboard.figures.diagnose import OUTCOMES, node_map, node_verdicts, rounds_chart, verdict_rows


@pytest.fixture(scope="module")
def entry(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    assert (
        main(
            [
                "diagnose",
                "--hosts",
                "n[01-16]",
                "--slow",
                "n04",
                "--lossy",
                "n11",
                "--link",
                "n13,n14",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    [found] = ResultsStore(out).usable(("diagnose",))
    return found


def test_the_store_reads_the_diagnosis_and_marks_it_synthetic(entry):
    assert entry.diagnosis is not None and entry.synthetic and "[SYNTHETIC]" in entry.label


def test_nodes_are_coloured_by_verdict(entry):
    verdicts = node_verdicts(entry.diagnosis)
    assert len(verdicts) == 16
    assert {n: v for n, v in verdicts.items() if v != "good"} == {
        "n04": "slow",
        "n11": "lossy",
        "n13": "link end",
        "n14": "link end",
    }
    figure = node_map(entry.diagnosis)
    assert {trace.name: len(trace.x) for trace in figure.data} == {"good": 12, "slow": 1, "lossy": 1, "link end": 2}


def test_every_round_is_a_row_with_each_nodes_group_outcome(entry):
    report = entry.diagnosis
    heat = rounds_chart(report).data[0]
    assert len(heat.z) == report["rounds"] and len(heat.z[0]) == 16
    first = report["round_log"][0]
    n04 = heat.x.index("n04")
    group = next(i for i, g in enumerate(first["groups"]) if "n04" in g)
    assert heat.z[0][n04] == OUTCOMES.index(first["outcomes"][group]) == OUTCOMES.index("fail")


def test_the_verdict_table_lists_drains_and_links(entry):
    rows = verdict_rows(entry.diagnosis)
    assert [(r["what"], r["node or link"]) for r in rows] == [
        ("drain", "n04"),
        ("drain", "n11"),
        ("inspect link", "n13 <-> n14"),
    ]


def test_the_page_draws_a_large_diagnosis_with_only_the_nodes_that_did_not_pass(tmp_path):
    from dashboard.app import create_app, results
    from dashboard.ui import HIDDEN, SHOWN

    assert main(["diagnose", "--simulate", "600", "--faults", "3", "--out", str(tmp_path)]) == 0
    app = create_app(tmp_path)
    import dashboard.pages.diagnose as page  # registers itself: only once an app exists

    with app.server.test_request_context():
        [entry] = results().usable(("diagnose",))
        _, _, rows, nodes, _, rounds, shown = page.draw(entry.key)
        assert len(rows) == 3 and sum(len(trace.x) for trace in nodes.data) == 600
        assert 0 < len(rounds.data[0].x) < 600  # healthy nodes that passed every round are left out
        assert shown == SHOWN
        empty = page.draw(None)  # no report: one sentence, and the figures hidden rather than drawn blank
        assert empty[0].children == page.NO_REPORT and empty[6] == HIDDEN


def test_the_page_lists_the_scheduler_actions_of_the_store(tmp_path):
    from commbench.data.store import record_actions
    from dashboard.app import create_app

    assert main(["diagnose", "--simulate", "8", "--out", str(tmp_path)]) == 0
    app = create_app(tmp_path)
    import dashboard.pages.diagnose as page

    with app.server.test_request_context():
        (_, note, table) = page.actions_section()
        assert table.data == [] and "no results database" in note.children
        record_actions(
            tmp_path / "commbench.duckdb",
            [
                {
                    "when": "2026-12-01T10:00:00+00:00",
                    "node": "n3",
                    "verb": "drain",
                    "verdict": "diagnose: slow",
                    "evidence_run": "diagnose-1",
                    "command": "scontrol update NodeName=n3 State=DRAIN",
                    "result": "done",
                    "source": "diagnose",
                },
                {
                    "when": "2026-12-01T11:00:00+00:00",
                    "node": "n3",
                    "verb": "resume",
                    "verdict": "passes again",
                    "evidence_run": None,
                    "command": "scontrol update NodeName=n3 State=RESUME",
                    "result": "done",
                    "source": "health",
                },
            ],
        )
        (_, note, table) = page.actions_section()
        assert [(row["verb"], row["source"], row["when"]) for row in table.data] == [
            ("resume", "health", "2026-12-01 11:00:00"),
            ("drain", "diagnose", "2026-12-01 10:00:00"),
        ]
        assert "2 scheduler action(s) recorded" in note.children
