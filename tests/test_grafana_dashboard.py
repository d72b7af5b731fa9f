"""dashboards/grafana/commbench.json: valid provisionable Grafana JSON whose every query names a
metric `commbench metrics` exports (the names read from a real exposition, not a list kept here)."""

import json
import re

from commbench.data.metrics import exposition
from commbench.data.store import ingest
from tests.conftest import REPO

DASHBOARD = REPO / "dashboards" / "grafana" / "commbench.json"
METRIC = re.compile(r"\bcommbench_[a-z_]+\b")


def exported_names(tmp_path) -> set[str]:
    db = tmp_path / "db.duckdb"
    ingest(db, [REPO / "results" / "examples"])
    names = set()
    for line in exposition(db).splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name)
            if kind == "counter":
                names.add(name + "_total")  # what a query reads for a counter
    return names


def queries(dashboard: dict) -> list[tuple[str, str]]:
    found = [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel.get("targets", [])]
    found += [
        (f"variable {v['name']}", v["query"]["query"]) for v in dashboard["templating"]["list"] if v["type"] == "query"
    ]
    return found


def test_dashboard_is_provisionable_and_queries_only_exported_metrics(tmp_path):
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and isinstance(dashboard["schemaVersion"], int)
    assert "id" not in dashboard  # provisioning assigns ids; a fixed one collides
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert any(v["type"] == "datasource" and v["query"] == "prometheus" for v in dashboard["templating"]["list"])
    exported = exported_names(tmp_path)
    assert {"commbench_busbw_bytes_per_second", "commbench_node_drain_recommended", "commbench_runs_total"} <= exported
    for where, expr in queries(dashboard):
        named = set(METRIC.findall(expr))
        assert named, f"{where}: its query names no commbench metric: {expr}"
        assert named <= exported, f"{where}: {sorted(named - exported)} not exported"
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}" and panel["gridPos"]["w"] <= 24
