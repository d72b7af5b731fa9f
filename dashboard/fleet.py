"""What the History and Compare pages read: the results database beside the results folder, and
run comparisons. Plain data in and out (dicts and lists), so the pages stay thin and testable.

The database is $COMMBENCH_DB, else <results folder>/commbench.duckdb (where `commbench db
ingest <results folder>` puts it by default when run from the folder above).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from commbench.analysis.compare import compare_runs
from commbench.analysis.history import attach_change_points, load_series
from commbench.analysis.runs import read_run
from commbench.data.samples import row_key
from commbench.data.store import open_read_only, query, read_actions
from dashboard.data import RunEntry, database_for  # the History pages find the database here too

# the points History could draw: one per run and row, counted per (cluster, op, size, scope), as load_series reads them
CHOICES_SQL = """
SELECT r.cluster, rec.op, rec.size_bytes, rec.scope, count(*) AS points
FROM runs r JOIN records rec USING (run_id)
WHERE r.kind IN ('sweep', 'import') AND NOT rec.in_place
GROUP BY 1, 2, 3, 4
ORDER BY 1, 2, 3, 4
"""
# Compare's default pair is looked for among this many newest runs (each is read to match rows)
PAIR_SEARCH_RUNS = 12


class HistoryRow(NamedTuple):
    cluster: str
    op: str
    size: int
    scope: str
    points: int


def history_rows(db: Path) -> list[HistoryRow]:
    """Every (cluster, op, size, scope) the database has a history of, with its number of points."""
    return [HistoryRow(*row) for row in query(db, CHOICES_SQL)[1]]


def history_choices(db: Path) -> dict[str, list]:
    """Clusters, ops, sizes and scopes present in the database (each sorted)."""
    rows = history_rows(db)
    return {
        "cluster": sorted({row.cluster for row in rows}),
        "op": sorted({row.op for row in rows}),
        "size": sorted({row.size for row in rows}),
        "scope": sorted({row.scope for row in rows}),
    }


def busiest_row(rows: list[HistoryRow], cluster: str | None = None, op: str | None = None) -> HistoryRow | None:
    """The row with the most points (of this cluster and op, when given); ties go to all_reduce, then the
    larger size: the view History opens on, so that it always has points."""
    chosen = [row for row in rows if cluster in (None, row.cluster) and op in (None, row.op)]
    return max(chosen, key=lambda row: (row.points, row.op == "all_reduce", row.size), default=None)


def sizes_of(rows: list[HistoryRow], cluster: str | None, op: str | None) -> list[int]:
    """The sizes some run of this cluster measured for this op: the only ones History offers."""
    return sorted({row.size for row in rows if row.cluster == cluster and row.op == op})


def scopes_of(rows: list[HistoryRow], cluster: str | None, op: str | None, size: int | None) -> list[str]:
    return sorted({row.scope for row in rows if (row.cluster, row.op, row.size) == (cluster, op, size)})


def comparable_pair(entries: list[RunEntry]) -> tuple[str, str] | None:
    """(A, B) keys of the two newest runs that can be compared: same backend, same set of ops, and at
    least one row in common; B is the newer. entries: newest first. None when no such pair exists."""
    shapes = [(entry, _shape(entry)) for entry in entries[:PAIR_SEARCH_RUNS] if entry.ok]
    for position, (newer, (backend, ops, rows)) in enumerate(shapes):
        for older, (other_backend, other_ops, other_rows) in shapes[position + 1 :]:
            if backend == other_backend and ops == other_ops and rows & other_rows:
                return older.key, newer.key
    return None


def _shape(entry: RunEntry) -> tuple[str | None, frozenset, frozenset]:
    records = entry.run.records if entry.run else []
    return (
        entry.info.get("backend"),
        frozenset(record.get("op") for record in records),
        frozenset(row_key(record) for record in records),
    )


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
        return [], (
            "no results database beside this results folder: scheduler actions are recorded in the one "
            "--db (or $COMMBENCH_DB) names"
        )
    rows = [
        {name: str(row[name]) if row[name] is not None else "" for name in ACTION_FIELDS}
        for row in read_actions(db, limit)
    ]
    return rows, f"{len(rows)} scheduler action(s) recorded in {db} (newest first)"
