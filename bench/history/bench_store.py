"""Speed of the results database on generated run directories (labelled synthetic).

    python bench/history/bench_store.py --runs 10000 --work /tmp/commbench-bench-store

Writes RUNS generated run directories (one row per profile row: 18 with the committed profile, 256 KiB
to 64 MiB out-of-place and in-place; 20 samples per row; from the noise profile in
tests/fixtures/history-noise-profile.json) under WORK, then times: the first ingest, a second
ingest with nothing changed, and a history query (series + change points) over all of them, in
this process and as the command (a new interpreter: its imports, ruptures' scipy among them, count).
Goals (issue 15): first ingest <= 60 s, unchanged re-ingest <= 5 s, history query <= 1 s (for 10,000
runs; the issue asks the store to handle 100,000, without a goal: `--runs 100000` reports what it takes).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from commbench.analysis.history import attach_change_points, load_series
from commbench.analysis.synthetic import Injection, generate_history, read_profile
from commbench.data import store

SIZE = 64 << 20  # `commbench history ... --size 64M`, as issue 15 asks
PROFILE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "history-noise-profile.json"


def timed(label: str, action):
    start = time.perf_counter()
    result = action()
    print(f"{label:<36} {time.perf_counter() - start:8.2f} s")
    return result


def series_only(db: Path):
    """The series query alone (one SQL join), without change points."""
    con = store.open_read_only(db)
    try:
        return load_series(con, "bench", "all_reduce", SIZE, None)
    finally:
        con.close()


def history(db: Path):
    """The series of the 64 MiB row (the issue's query) and its change points, as `commbench history` computes them."""
    con = store.open_read_only(db)
    try:
        return [attach_change_points(series) for series in load_series(con, "bench", "all_reduce", SIZE, None)]
    finally:
        con.close()


def history_command(db: Path) -> None:
    """`commbench history ... --size 64M --json` as a user runs it: a fresh interpreter, imports included."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "commbench",
            "history",
            "--cluster",
            "bench",
            "--op",
            "all_reduce",
            "--size",
            "64M",
            "--db",
            str(db),
            "--json",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10000)
    parser.add_argument("--work", default="/tmp/commbench-bench-store")
    parser.add_argument(
        "--history-only", action="store_true", help="reuse WORK's database and time the history query three times"
    )
    args = parser.parse_args()
    work = Path(args.work)
    runs_dir, db = work / "runs", work / "bench.duckdb"
    if args.history_only:
        for attempt in range(1, 4):
            timed(f"history query, call {attempt} (load {os.getloadavg()[0]:.1f})", lambda: history(db))
        for attempt in range(1, 4):
            timed(f"history command, call {attempt} (load {os.getloadavg()[0]:.1f})", lambda: history_command(db))
        return
    shutil.rmtree(work, ignore_errors=True)
    profile = read_profile(PROFILE)
    print(f"# {args.runs} generated runs of {len(profile['rows'])} rows, load average before: {os.getloadavg()[0]:.2f}")
    timed(
        "generate run directories",
        lambda: generate_history(
            runs_dir,
            profile,
            args.runs,
            cluster="bench",
            seed=1,
            injection=Injection(at=args.runs * 2 // 3, drop=0.07, versions={"nccl": "2.23.4"}),
        ),
    )
    report = timed("first ingest", lambda: store.ingest(db, [runs_dir]))
    print(f"#   {report.summary()}")
    report = timed("re-ingest, nothing changed", lambda: store.ingest(db, [runs_dir]))
    print(f"#   {report.summary()}")

    timed("series query alone (SQL join)", lambda: series_only(db))
    series = timed("history query (64M, with change points)", lambda: history(db))
    print(f"#   {len(series[0].points)} points, change points at {[c.index for c in series[0].change_points]}")
    timed("history command (new process)", lambda: history_command(db))
    print(f"# load average after: {os.getloadavg()[0]:.2f}; database {db.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
