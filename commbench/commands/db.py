"""The results database: load run directories into DuckDB, query it, export it.

  commbench db ingest results/ [more dirs or run dirs...]   load (idempotent, incremental)
  commbench db sql "SELECT cluster, count(*) FROM runs GROUP BY cluster"   read-only SQL (one SELECT; files, URLs, extensions unreachable)
  commbench db export --parquet DIR                          every table as DIR/<table>.parquet

Tables: runs, records, samples, pairs (see commbench/data/store.py for their columns). Run
directories stay the source of truth: the database can be deleted and rebuilt from them.
Directories that are corrupt or not finished are reported and skipped; a database written by a
newer commbench is refused. Two ingests at once take turns (a lock file beside the database).
The file is --db FILE, else $COMMBENCH_DB, else results/commbench.duckdb.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys

from commbench.commands.store_options import add_db_argument
from commbench.data.store_location import db_path

HELP = "results database (DuckDB): ingest run directories, read-only SQL, Parquet export"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    ingest = actions.add_parser("ingest", help="load run directories (or folders of them) into the database")
    ingest.add_argument("dirs", nargs="+", metavar="DIR", help="a run directory or a results folder")
    ingest.add_argument("--quiet", action="store_true", help="only the summary line and skipped directories")
    sql = actions.add_parser(
        "sql", help="run one read-only SELECT (or WITH ... SELECT) over the tables; nothing else is reachable"
    )
    sql.add_argument("statement", metavar="SQL")
    sql.add_argument("--format", choices=("text", "csv", "json"), default="text", help="output form (default text)")
    export = actions.add_parser("export", help="write every table as Parquet")
    export.add_argument("--parquet", metavar="DIR", required=True, help="folder for <table>.parquet files")
    for action in (ingest, sql, export):
        add_db_argument(action)


def main(args: argparse.Namespace) -> int:
    from commbench.data import (
        store,  # DuckDB loads only when a db command runs: `commbench --help` stays fast
    )

    db = db_path(args.db)
    if args.db_command == "ingest":
        return _ingest(store, db, args)
    if args.db_command == "sql":
        columns, rows = store.query(db, args.statement)
        _print_rows(columns, rows, args.format)
        return 0
    for path in store.export_parquet(db, args.parquet):
        print(path)
    return 0


def _ingest(store, db, args: argparse.Namespace) -> int:
    report = store.ingest(db, args.dirs)
    for path, why in report.skipped:
        print(f"skipped {path}: {why}", file=sys.stderr)
    if not args.quiet:
        for run_id in report.added:
            print(f"added {run_id}")
        for run_id in report.updated:
            print(f"updated {run_id}")
    print(f"# {db}: {report.summary()}")
    return 0


def _print_rows(columns: list[str], rows: list[tuple], form: str) -> None:
    if form == "json":
        print(json.dumps([dict(zip(columns, row)) for row in rows], default=str, indent=1))
        return
    if form == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)
        return
    cells = [columns] + [[_cell(value) for value in row] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        print("  ".join(text.ljust(width) for text, width in zip(line, widths)).rstrip())
    print(f"# {len(rows)} row(s)")


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "" if value is None else str(value)
