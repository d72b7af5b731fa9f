"""`commbench metrics`: the exposition passes `promtool check metrics`, and a real Prometheus server
(Debian's `prometheus` package, .ci/setup-system.sh) scraping `commbench metrics serve` on
127.0.0.1 reads back through its HTTP query API the values the store holds."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

from commbench.data.metrics import BUSBW_LABELS, exposition, size_bucket_label
from commbench.data.store import ingest, query
from tests.conftest import REPO, run_cli

EXAMPLES = REPO / "results" / "examples"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("metrics") / "db.duckdb"
    ingest(path, [EXAMPLES])
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _need(tool: str) -> str:
    found = shutil.which(tool)
    if not found:
        pytest.skip(f"{tool} not installed (Debian package prometheus; .ci/setup-system.sh installs it)")
    return found


def expected_busbw(db) -> dict[tuple, float]:
    """(cluster, nodes, op, scope, group_size, size_bucket) -> busbw (bytes/s) of the store's newest
    non-synthetic sweep of each node set, at the largest size of each bucket, computed here apart
    from the exporter (Python over all runs, not its window query)."""
    _, runs = query(
        db,
        "SELECT run_id, cluster, nodes, created FROM runs WHERE kind = 'sweep' AND source = 'commbench' "
        "AND complete AND NOT coalesce(synthetic, false)",
    )
    newest: dict[tuple, tuple] = {}
    for run_id, cluster, nodes, created in runs:
        key = (cluster, ",".join(sorted(nodes)))
        if key not in newest or created > newest[key][1]:
            newest[key] = (run_id, created)
    largest: dict[tuple, tuple[int, float]] = {}
    for (cluster, nodes), (run_id, _) in newest.items():
        _, rows = query(
            db,
            "SELECT op, scope, group_size, size_bytes, busbw_gbps FROM records WHERE run_id = ? "
            "AND NOT in_place AND scope <> 'pair' AND wrong <= 0 AND time_us > 0",
            [run_id],
        )
        for op, scope, group_size, size, busbw in rows:
            key = (cluster, nodes, op, scope, str(group_size), size_bucket_label(size))
            if key not in largest or size > largest[key][0]:
                largest[key] = (size, busbw * 1e9)
    return {key: value for key, (_, value) in largest.items()}


def test_exposition_passes_promtool_and_is_bounded(db):
    promtool = _need("promtool")
    text = exposition(db)
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip() == "" and checked.stderr.strip() == "", (
        checked.stdout + checked.stderr
    )  # no lint warnings
    lines = [line for line in text.splitlines() if line.startswith("commbench_busbw_bytes_per_second{")]
    assert len(lines) == len(expected_busbw(db)) > 0
    assert {line.split('size_bucket="')[1].split('"')[0] for line in lines} <= {
        "<=4KiB",
        "<=64KiB",
        "<=1MiB",
        "<=16MiB",
        "<=256MiB",
        ">256MiB",
    }
    assert "# TYPE commbench_runs_total counter" in text or "# TYPE commbench_runs counter" in text


def test_textfile_for_node_exporter(db, tmp_path):
    result = run_cli("metrics", "textfile", str(tmp_path), "--db", str(db), timeout=120)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "commbench.prom").read_text() == exposition(db)
    assert [p.name for p in tmp_path.iterdir()] == ["commbench.prom"]  # no temporary left behind
    bad = run_cli("metrics", "textfile", str(tmp_path / "missing"), "--db", str(db), timeout=120)
    assert bad.returncode == 2 and "no such folder" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    nodb = run_cli("metrics", "show", "--db", str(tmp_path / "none.duckdb"), timeout=120)
    assert nodb.returncode == 2 and "no database" in nodb.stderr and len(nodb.stderr.strip().splitlines()) == 1


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def test_real_prometheus_scrapes_serve_and_reads_back_the_stores_values(db, tmp_path):
    prometheus = _need("prometheus")
    metrics_port, prom_port = _free_port(), _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    server = subprocess.Popen(
        [sys.executable, "-m", "commbench", "metrics", "serve", "--db", str(db), "--port", str(metrics_port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
        f"  - job_name: commbench\n    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
    )
    prom = subprocess.Popen(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        api = f"http://127.0.0.1:{prom_port}/api/v1/query?query="
        deadline, found = time.monotonic() + 60, []
        while time.monotonic() < deadline and not found:
            time.sleep(0.5)
            try:
                found = _get(api + urllib.parse.quote("commbench_busbw_bytes_per_second"))["data"]["result"]
            except OSError:
                continue
        assert found, f"Prometheus read nothing in 60 s: {prom.stderr.read() if prom.poll() is not None else 'running'}"
        read_back = {tuple(m["metric"][name] for name in BUSBW_LABELS): float(m["value"][1]) for m in found}
        expected = expected_busbw(db)
        assert read_back.keys() == expected.keys()
        for key, value in expected.items():
            assert read_back[key] == pytest.approx(value, rel=1e-12), key
        assert all(m["metric"]["job"] == "commbench" for m in found)
        up = _get(api + urllib.parse.quote('up{job="commbench"}'))["data"]["result"]
        assert [r["value"][1] for r in up] == ["1"]
        runs = _get(api + urllib.parse.quote("sum(commbench_runs_total)"))["data"]["result"]
        assert float(runs[0]["value"][1]) == query(db, "SELECT count(*) FROM runs")[1][0][0]
    finally:
        for process in (prom, server):
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
