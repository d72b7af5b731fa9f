"""Load test of `commbench dashboard`: 50 concurrent clients x 20 requests each over the pages and
their callbacks, on 127.0.0.1, against waitress (what `commbench dashboard` serves with, login on)
and against Flask's development server (what it served with before). Prints errors and latency
percentiles per server; bench/RESULTS-dashboard.md records a run.

    python bench/dashboard_load.py [--clients 50] [--requests 20]

The results folder is results/examples plus the synthetic NCCL Inspector job of
tests/fixtures/nccl_inspector, so the Jobs page has a job. Each client cycles through: the page
documents (/, /bandwidth, /topology, /compare, /jobs), Dash's /_dash-layout and
/_dash-dependencies, and two callbacks (Jobs' figure for the job against the emulated 2x2 sweep,
Compare's two runs). A request counts as an error unless it answers 200 within 60 s.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOKEN = "load-test-token-0123456789"
PAGES = ["/", "/bandwidth", "/topology", "/compare", "/jobs", "/_dash-layout", "/_dash-dependencies"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def results_folder(root: Path) -> tuple[Path, str, str, str]:
    """The folder, the job's key, and two sweeps' keys (the last: the 2-node x 2-rank emulated sweep,
    whose world groups of 4 the job's DP communicator is priced by)."""
    sys.path.insert(0, str(REPO))
    from commbench.data.nccl_inspector import read_job, write_job
    from commbench.data.rundir import list_runs, load_run

    folder = root / "results"
    shutil.copytree(REPO / "results" / "examples", folder)
    job = write_job(read_job([REPO / "tests" / "fixtures" / "nccl_inspector" / "synthetic"]), folder)
    sweeps = sorted(p.name for p in list_runs(folder) if load_run(p).info.kind == "sweep")
    return folder, job.name, sweeps[0], sweeps[-1]


def callback_bodies(job: str, sweep_a: str, sweep_b: str) -> list[bytes]:
    jobs = {
        "output": "..jobs-figure.figure...jobs-table.data...jobs-table.columns...jobs-far-below.children..."
        "jobs-notices.children..",
        "outputs": [
            {"id": i, "property": p}
            for i, p in [
                ("jobs-figure", "figure"),
                ("jobs-table", "data"),
                ("jobs-table", "columns"),
                ("jobs-far-below", "children"),
                ("jobs-notices", "children"),
            ]
        ],
        "inputs": [
            {"id": "jobs-job", "property": "value", "value": job},
            {"id": "jobs-against", "property": "value", "value": sweep_b},
        ],
        "changedPropIds": ["jobs-job.value"],
        "state": [],
    }
    compare = {
        "output": "..cmp-figure.figure...cmp-table.data...cmp-table.columns...cmp-differences.children..",
        "outputs": [
            {"id": i, "property": p}
            for i, p in [
                ("cmp-figure", "figure"),
                ("cmp-table", "data"),
                ("cmp-table", "columns"),
                ("cmp-differences", "children"),
            ]
        ],
        "inputs": [
            {"id": "cmp-a", "property": "value", "value": sweep_a},
            {"id": "cmp-b", "property": "value", "value": sweep_b},
        ],
        "changedPropIds": ["cmp-a.value"],
        "state": [],
    }
    return [json.dumps(jobs).encode(), json.dumps(compare).encode()]


def start(kind: str, folder: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COMMBENCH_DB": str(folder / "none.duckdb")}
    if kind == "waitress":
        env["COMMBENCH_DASHBOARD_AUTH"] = TOKEN
        argv = [sys.executable, "-m", "commbench", "dashboard", "--results", str(folder), "--port", str(port)]
    else:  # Flask's development server, threaded (its default), no debugger: what `app.run` gave before
        argv = [
            sys.executable,
            "-c",
            "import sys; from dashboard.app import create_app; "
            f"create_app(sys.argv[1]).run(host='127.0.0.1', port={port}, debug=False)",
            str(folder),
        ]
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/_dash-layout", timeout=5)
            return process
        except urllib.error.HTTPError:
            return process  # 401: up, and asking for the login
        except OSError:
            time.sleep(0.3)
    process.kill()
    raise SystemExit(f"{kind} did not start in 90 s")


def client(base: str, plan: list, auth: str | None, latencies: list, errors: list) -> None:
    for path, body in plan:
        request = urllib.request.Request(
            base + path, data=body, headers={"Content-Type": "application/json"} if body else {}
        )
        if auth:
            request.add_header("Authorization", auth)
        start = time.perf_counter()
        why = None
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                response.read()
        except OSError as exc:  # HTTPError (a status other than 2xx) is an OSError too
            why = f"{path}: {exc!r}"[:160]
        latencies.append(time.perf_counter() - start)
        if why:
            errors.append(why)


def load(kind: str, folder: Path, bodies: list[bytes], clients: int, requests: int) -> dict:
    port = _free_port()
    process = start(kind, folder, port)
    auth = "Basic " + base64.b64encode(f"team:{TOKEN}".encode()).decode() if kind == "waitress" else None
    work = [(page, None) for page in PAGES] + [("/_dash-update-component", body) for body in bodies]
    latencies: list[float] = []
    errors: list[str] = []
    threads = [
        threading.Thread(
            target=client,
            args=(
                f"http://127.0.0.1:{port}",
                [work[(c + i) % len(work)] for i in range(requests)],
                auth,
                latencies,
                errors,
            ),
        )
        for c in range(clients)
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    process.terminate()
    process.wait(timeout=30)
    ordered = sorted(latencies)
    return {
        "server": kind,
        "requests": len(latencies),
        "errors": len(errors),
        "first_errors": errors[:3],
        "p50_s": statistics.median(ordered),
        "p95_s": ordered[int(0.95 * (len(ordered) - 1))],
        "max_s": ordered[-1],
        "wall_s": wall,
        "requests_per_s": len(latencies) / wall,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="commbench-load-") as tmp:
        folder, job, sweep_a, sweep_b = results_folder(Path(tmp))
        bodies = callback_bodies(job, sweep_a, sweep_b)
        rows = [load(kind, folder, bodies, args.clients, args.requests) for kind in ("waitress", "flask-dev")]
    print(f"{'server':<10} {'requests':>8} {'errors':>6} {'p50 s':>7} {'p95 s':>7} {'max s':>7} {'req/s':>7}")
    for row in rows:
        print(
            f"{row['server']:<10} {row['requests']:>8} {row['errors']:>6} {row['p50_s']:>7.3f} {row['p95_s']:>7.3f} "
            f"{row['max_s']:>7.3f} {row['requests_per_s']:>7.1f}"
            + (f"  {row['first_errors']}" if row["errors"] else "")
        )
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
