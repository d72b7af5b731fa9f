"""The dashboard's run pickers and the planner's bandwidth sources read the results database and the
folder together when the database exists (no run the database holds is read; runs it does not hold
yet are read once and appear, newest first), and walk the folder when there is none."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import dashboard.data as dashboard_data
from commbench.analysis.synthetic import generate_history, quiet_variant, read_profile
from commbench.data import store
from dashboard.data import SYNTHETIC_BADGE, ResultsStore

EXAMPLES = Path(__file__).resolve().parents[1] / "results" / "examples"
PROFILE = quiet_variant(read_profile(Path(__file__).parent / "fixtures" / "history-noise-profile.json"))


@pytest.fixture
def fleet(tmp_path, monkeypatch):
    """Three generated sweeps in tmp_path, the newest marked synthetic in run.json."""
    monkeypatch.delenv("COMMBENCH_DB", raising=False)
    runs = generate_history(tmp_path, PROFILE, 3, cluster="fleet", seed=4)
    info = json.loads((runs[-1] / "run.json").read_text())
    (runs[-1] / "run.json").write_text(json.dumps(info | {"synthetic": True}))
    return tmp_path, [run.name for run in runs]


def reads_counted(monkeypatch) -> list[str]:
    """The names of the run directories load_run reads from now on."""
    read: list[str] = []
    real = dashboard_data.load_run

    def counted(path, *args, **kwargs):
        read.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(dashboard_data, "load_run", counted)
    return read


def later_run(root: Path, created: str = "2027-01-01T00:00:00+00:00") -> str:
    """A sweep written after the ingest (no --db), dated after every ingested one."""
    (path,) = generate_history(root, PROFILE, 1, seed=9, prefix="later")
    info = json.loads((path / "run.json").read_text())
    (path / "run.json").write_text(json.dumps(info | {"created": created}))
    return path.name


def test_a_run_written_after_the_ingest_is_listed_first_and_only_it_is_read(fleet, monkeypatch):
    root, names = fleet
    store.ingest(root / "commbench.duckdb", [root])
    later = later_run(root)
    read = reads_counted(monkeypatch)
    results = ResultsStore(root)
    listed = results.listing(("sweep",))
    assert [run.key for run in listed] == [later, *names[::-1]]  # newest first, no re-ingest
    assert read == [later]  # the database's runs are not read
    assert listed[1].label == f"{names[-1]} {SYNTHETIC_BADGE}" and not listed[2].synthetic
    assert {(run.kind, run.world_size, run.records) for run in listed} == {
        ("sweep", PROFILE["group_size"], len(PROFILE["rows"]))
    }
    assert results.listing(("overlap",)) == []
    assert read == [later]  # cached by file signature: not read again
    assert results.usable(("sweep",))[0].key == later


def test_runs_of_unknown_date_are_listed_last(fleet, monkeypatch):
    root, names = fleet
    store.ingest(root / "commbench.duckdb", [root])
    undated = later_run(root, created="unknown")
    listed = [run.key for run in ResultsStore(root).listing(("sweep",))]
    assert listed == [*names[::-1], undated]
    assert [entry.key for entry in ResultsStore(root).entries()][-1] == undated  # the Runs page too


def test_with_a_database_the_pickers_load_only_the_listed_runs(fleet, monkeypatch):
    root, names = fleet
    store.ingest(root / "commbench.duckdb", [root])
    read = reads_counted(monkeypatch)
    entries = ResultsStore(root).usable(("sweep",))
    assert [entry.key for entry in entries] == names[::-1] and all(
        len(entry.records) == len(PROFILE["rows"]) for entry in entries
    )
    assert sorted(read) == sorted(names)  # each run read once, for its records


def test_without_a_database_the_folder_is_walked(fleet):
    root, names = fleet
    (root / "broken").mkdir()
    (root / "broken" / "run.json").write_text("{")
    listed = ResultsStore(root).listing(("sweep",))
    assert (
        [run.key for run in listed] == names[::-1] and listed[0].synthetic and listed[0].records == len(PROFILE["rows"])
    )


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
    assert store.query(db, "SELECT value FROM meta WHERE key = 'schema_version'")[1] == [
        (str(store.STORE_SCHEMA_VERSION),)
    ]
    assert store.query(db, "SELECT count(*) FROM runs WHERE synthetic IS NULL")[1] == [(3,)]
    listed = ResultsStore(root).listing(("sweep",))  # migrated, the flag still null: each run is asked
    assert [run.synthetic for run in listed] == [True, False, False]


def test_the_planner_page_offers_the_database_runs_as_bandwidth_sources(fleet, monkeypatch):
    from dashboard.app import create_app

    root, names = fleet
    store.ingest(root / "commbench.duckdb", [root])
    app = create_app(root)
    from dashboard.pages import planner

    monkeypatch.setattr(dashboard_data, "load_run", lambda *_a, **_k: pytest.fail("a listed run was read"))
    with app.server.app_context():
        controls = planner._cluster_controls()
    (dropdown,) = [box.children[1] for box in controls if getattr(box.children[1], "id", None) == "plan-bandwidth"]
    values = [option["value"] for option in dropdown.options]
    assert values == [planner.PRESET_SOURCE, *names[::-1]]
    assert dropdown.options[1]["label"].startswith(f"synthetic: {names[-1]} {SYNTHETIC_BADGE} (nccl, ")


def test_compare_pairs_the_two_newest_runs_of_one_backend_and_op_set_that_share_rows(fleet):
    from dashboard.fleet import comparable_pair

    root, names = fleet
    shutil.copytree(EXAMPLES / "example-cpu-2rank", root / "cpu")  # the newest: gloo, other ops
    entries = ResultsStore(root).usable(("sweep", "import"))
    assert entries[0].key == "cpu"
    assert comparable_pair(entries) == (names[-2], names[-1])
    assert comparable_pair(entries[:2]) is None  # the CPU run and one fleet run are not comparable


def test_history_opens_on_the_busiest_row_and_offers_only_its_sizes():
    from dashboard.fleet import HistoryRow, busiest_row, scopes_of, sizes_of

    rows = [
        HistoryRow("a-lab", "all_reduce", 4 << 30, "world", 1),
        HistoryRow("fleet", "all_reduce", 1 << 20, "world", 30),
        HistoryRow("fleet", "all_reduce", 64 << 20, "world", 30),
        HistoryRow("fleet", "all_gather", 1 << 20, "world", 30),
        HistoryRow("fleet", "all_reduce", 64 << 20, "intra", 4),
    ]
    assert busiest_row(rows) == rows[2]  # most points; all_reduce, then the larger size, break the tie
    assert busiest_row(rows, "a-lab", "all_reduce") == rows[0] and busiest_row(rows, "a-lab", "all_gather") is None
    assert sizes_of(rows, "fleet", "all_reduce") == [1 << 20, 64 << 20]  # never the other cluster's 4 GiB
    assert scopes_of(rows, "fleet", "all_reduce", 64 << 20) == ["intra", "world"]
