"""README's "Run it" command, as written (less its install step, which the suite's own install is):
the sweep runs, and the dashboard it ends with serves the run on 127.0.0.1.

CI runs the README's test command itself (.ci/run reads it from README.md); this covers the other one.
"""

from __future__ import annotations

import shlex
import socket
import subprocess
import sys
import time
import urllib.request

from tests.conftest import REPO


def _run_command() -> list[list[str]]:
    text = (REPO / "README.md").read_text()
    block = text[text.index("<!-- run-command -->") :].split("```")[1]
    line = next(row for row in block.splitlines() if row.strip() and not row.startswith("bash"))
    return [shlex.split(part) for part in line.split("&&")]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_run_command_sweeps_and_serves_the_run(tmp_path):
    install, sweep, dashboard = _run_command()
    assert install[:3] == ["pip", "install", "-e"] and install[3].startswith(".[")
    assert sweep[0] == dashboard[0] == "commbench" and sweep[1] == "run" and dashboard[1] == "dashboard"
    done = subprocess.run([sys.executable, "-m", *sweep], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    (run_dir,) = (tmp_path / "results").iterdir()
    assert (run_dir / "records.jsonl").stat().st_size > 0
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", *dashboard, "--port", str(port)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline, page = time.monotonic() + 90, None
        while time.monotonic() < deadline and page is None:
            try:
                page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read().decode()
            except OSError:
                assert server.poll() is None, server.communicate()
                time.sleep(0.5)
        assert page is not None and "commbench" in page.lower()
    finally:
        server.terminate()
        server.wait(timeout=30)
