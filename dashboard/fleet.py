"""What the History and Compare pages read: the results database beside the results folder, and
run comparisons. Plain data in and out (dicts and lists), so the pages stay thin and testable.

The database is $COMMBENCH_DB, else <results folder>/commbench.duckdb (where `commbench db
ingest <results folder>` puts it by default when run from the folder above).
"""

from __future__ import annotations

from pathlib import Path

from commbench.analysis.compare import compare_runs
from commbench.analysis.history import attach_change_points, load_series
from commbench.analysis.runs import read_run
from commbench.data.store import open_read_only, query, read_actions
from dashboard.data import database_for  # the History pages find the database here too

CHOICES_SQL = """
SELECT DISTINCT r.cluster, rec.op, rec.size_bytes, rec.scope
FROM runs r JOIN records rec USING (run_id)
WHERE r.kind IN ('sweep', 'import') AND NOT rec.in_place
ORDER BY 1, 2, 3, 4
"""


def history_choices(db: Path) -> dict[str, list]:
    """Clusters, ops, sizes and scopes present in the database (each sorted)."""
    _, rows = query(db, CHOICES_SQL)
    return {"cluster": sorted({row[0] for row in rows}), "op": sorted({row[1] for row in rows}),
            "size": sorted({row[2] for row in rows}), "scope": sorted({row[3] for row in rows})}


def history_series(db: Path, cluster: str, op: str, size_bytes: int, scope: str | None) -> list[dict]:
    con = open_read_only(db)
    try:
        series = load_series(con, cluster, op, size_bytes, scope)
    finally:
        con.close()
    return [attach_change_points(one).to_dict() for one in series]


def comparison(path_a: Path, path_b: Path) -> dict:
    return compare_runs(read_run(str(path_a)), read_run(str(path_b))).to_dict()


def run_key(results_root: Path, run_path: str) -> str | None:
    """The results-folder key of a run directory the database names; None if it lies elsewhere."""
    try:
        return Path(run_path).resolve().relative_to(results_root.resolve()).as_posix()
    except ValueError:
        return None


def link_for(points: list[dict], index: int, root: Path) -> tuple[str, str]:
    """href and text of the Compare page for points[index] of a history series and the run before it."""
    if index == 0:
        return "/compare", f"{points[0]['run_id']} is the first run: nothing before it"
    before, after = (run_key(root, points[i]["path"]) for i in (index - 1, index))
    if before is None or after is None:
        return "/compare", "these runs lie outside the results folder the dashboard reads"
    return f"/compare?a={before}&b={after}", f"compare {points[index - 1]['run_id']} with {points[index]['run_id']}"


ACTION_FIELDS = ("when", "node", "verb", "verdict", "evidence_run", "command", "result", "source")


def scheduler_actions(results_root: Path, limit: int = 500) -> tuple[list[dict], str]:
    """The store's scheduler actions (drains and resumes check, diagnose and health carried out or
    refused), newest first, and a line saying where they come from."""
    db = database_for(results_root)
    if db is None:
        return [], ("no results database beside this results folder: scheduler actions are recorded in the one "
                    "--db (or $COMMBENCH_DB) names")
    rows = [{name: str(row[name]) if row[name] is not None else "" for name in ACTION_FIELDS}
            for row in read_actions(db, limit)]
    return rows, f"{len(rows)} scheduler action(s) recorded in {db} (newest first)"
