"""The dashboard's run pickers and the planner's bandwidth sources read the results database when it
exists (no folder walked, no run read), and walk the folder when there is none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import dashboard.data as dashboard_data
from commbench.analysis.synthetic import generate_history, quiet_variant, read_profile
from commbench.data import store
from dashboard.data import SYNTHETIC_BADGE, ResultsStore

PROFILE = quiet_variant(read_profile(Path(__file__).parent / "fixtures" / "history-noise-profile.json"))


@pytest.fixture
def fleet(tmp_path, monkeypatch):
    """Three generated sweeps in tmp_path, the newest marked synthetic in run.json."""
    monkeypatch.delenv("COMMBENCH_DB", raising=False)
    runs = generate_history(tmp_path, PROFILE, 3, cluster="fleet", seed=4)
    info = json.loads((runs[-1] / "run.json").read_text())
    (runs[-1] / "run.json").write_text(json.dumps(info | {"synthetic": True}))
    return tmp_path, [run.name for run in runs]


def no_folder_reads(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("a run folder was walked or read")
    monkeypatch.setattr(dashboard_data, "list_runs", refuse)
    monkeypatch.setattr(dashboard_data, "load_run", refuse)


def test_with_a_database_the_listing_comes_from_it_without_reading_a_run(fleet, monkeypatch):
    root, names = fleet
    store.ingest(root / "commbench.duckdb", [root])
    generate_history(root, PROFILE, 1, seed=9, prefix="later")  # written after the ingest
    no_folder_reads(monkeypatch)
    listed = ResultsStore(root).listing(("sweep",))
    assert [run.key for run in listed] == names[::-1]  # newest first; the later run is not ingested yet
    assert listed[0].label == f"{names[-1]} {SYNTHETIC_BADGE}" and not listed[1].synthetic
    assert {(run.kind, run.world_size, run.records) for run in listed} == {("sweep", PROFILE["group_size"], len(PROFILE["rows"]))}
    assert ResultsStore(root).listing(("overlap",)) == []


def test_with_a_database_the_pickers_load_only_the_listed_runs(fleet, monkeypatch):
    root, names = fleet
    store.ingest(root / "commbench.duckdb", [root])
    monkeypatch.setattr(dashboard_data, "list_runs", lambda _root: pytest.fail("the folder was walked"))
    entries = ResultsStore(root).usable(("sweep",))
    assert [entry.key for entry in entries] == names[::-1] and all(len(entry.records) == len(PROFILE["rows"]) for entry in entries)


def test_without_a_database_the_folder_is_walked(fleet):
    root, names = fleet
    (root / "broken").mkdir()
    (root / "broken" / "run.json").write_text("{")
    listed = ResultsStore(root).listing(("sweep",))
    assert [run.key for run in listed] == names[::-1] and listed[0].synthetic and listed[0].records == len(PROFILE["rows"])


def test_a_database_of_other_folders_or_unreadable_falls_back_to_the_folder(fleet, tmp_path_factory, monkeypatch):
    root, names = fleet
    other = tmp_path_factory.mktemp("other")
    generate_history(other / "runs", PROFILE, 2, seed=2, prefix="other")
    store.ingest(other / "fleet.duckdb", [other / "runs"])
    monkeypatch.setenv("COMMBENCH_DB", str(other / "fleet.duckdb"))
    assert [run.key for run in ResultsStore(root).listing(("sweep",))] == names[::-1]
    (root / "broken.duckdb").write_text("not a database")
    monkeypatch.setenv("COMMBENCH_DB", str(root / "broken.duckdb"))
    assert [run.key for run in ResultsStore(root).listing(("sweep",))] == names[::-1]


def test_a_schema_1_database_is_migrated_and_its_runs_asked_for_the_badge(fleet, monkeypatch):
    root, _names = fleet
    db = root / "commbench.duckdb"
    store.ingest(db, [root])
    con = store.duckdb.connect(str(db))
    con.execute("ALTER TABLE runs DROP COLUMN synthetic")
    con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    con.close()
    assert ResultsStore(root).listing(("sweep",))[0].synthetic  # no synthetic column: the folder is walked
    assert store.ingest(db, [root]).unchanged == 3
    assert store.query(db, "SELECT value FROM meta WHERE key = 'schema_version'")[1] == [(str(store.STORE_SCHEMA_VERSION),)]
    assert store.query(db, "SELECT count(*) FROM runs WHERE synthetic IS NULL")[1] == [(3,)]
    monkeypatch.setattr(dashboard_data, "list_runs", lambda _root: pytest.fail("the folder was walked"))
    listed = ResultsStore(root).listing(("sweep",))  # migrated, the flag still null: each run is asked
    assert [run.synthetic for run in listed] == [True, False, False]


def test_the_planner_page_offers_the_database_runs_as_bandwidth_sources(fleet, monkeypatch):
    from dashboard.app import create_app
    root, names = fleet
    store.ingest(root / "commbench.duckdb", [root])
    app = create_app(root)
    from dashboard.pages import planner
    no_folder_reads(monkeypatch)
    with app.server.app_context():
        controls = planner._cluster_controls()
    (dropdown,) = [box.children[1] for box in controls if getattr(box.children[1], "id", None) == "plan-bandwidth"]
    values = [option["value"] for option in dropdown.options]
    assert values == [planner.PRESET_SOURCE, *names[::-1]]
    assert dropdown.options[1]["label"].startswith(f"synthetic: {names[-1]} {SYNTHETIC_BADGE} (nccl, ")
