"""`commbench dashboard` served for a team: waitress by default, a login off loopback (401 without
it, 200 with it, in plain HTTP and in headless Chromium), the refusal without one, and no page
writing to the results folder.

The server binds 0.0.0.0 (beyond loopback, so the login is required) and every request goes to
127.0.0.1. Chromium needs Debian's chromium and chromium-driver (a skip fails in CI).
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from cluster.browser_netns import isolated_chromedriver

from commbench.errors import UsageError
from dashboard.server import AuthMiddleware, Credentials, is_loopback, parse_credentials
from tests.conftest import REPO, run_cli

EXAMPLES = REPO / "results" / "examples"
USER, PASSWORD = "team", "s3cret-pass:word"  # a colon in the password: split at the first one only
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(base URL, results folder, its snapshot before): the dashboard on 0.0.0.0 with basic auth."""
    root = tmp_path_factory.mktemp("served")
    results = root / "results"
    shutil.copytree(EXAMPLES, results)
    auth = root / "auth"
    auth.write_text(f"{USER}:{PASSWORD}\n")
    auth.chmod(0o600)
    port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "commbench",
            "dashboard",
            "--results",
            str(results),
            "--host",
            "0.0.0.0",
            "--port",
            str(port),
            "--auth-file",
            str(auth),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "COMMBENCH_DB": str(root / "none.duckdb")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    before = _snapshot(results)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "/", timeout=2)
        except urllib.error.HTTPError:
            break  # the 401: it is up
        except OSError:
            time.sleep(0.3)
    yield url, results, before, process
    process.terminate()
    process.wait(timeout=20)


def _request(url: str, auth: str | None = None, data: bytes | None = None):
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    if auth:
        request.add_header("Authorization", auth)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_login_required_off_loopback_and_waitress_serves(served):
    url, _, _, process = served
    status, headers, body = _request(url + "/")
    assert status == 401 and headers["WWW-Authenticate"].startswith('Basic realm="commbench"') and b"log in" in body
    assert _request(url + "/_dash-layout")[0] == 401
    assert _request(url + "/_dash-update-component", data=b"{}")[0] == 401  # callbacks too
    for wrong in (_basic(USER, "nope"), _basic("other", PASSWORD), "Bearer " + PASSWORD, "Basic !!notbase64"):
        assert _request(url + "/", wrong)[0] == 401, wrong
    status, headers, body = _request(url + "/", _basic(USER, PASSWORD))
    assert status == 200 and b"_dash-config" in body
    assert headers.get("Server") == "commbench"  # waitress (ident), not Werkzeug's development server
    assert _request(url + "/_dash-layout", _basic(USER, PASSWORD))[0] == 200
    assert process.poll() is None


def test_credentials_and_middleware():
    basic = parse_credentials("alice:pw:with:colons\n", "file")
    assert (basic.user, basic.secret) == ("alice", "pw:with:colons")
    token = parse_credentials("0123456789abcdef0123", "env")
    assert token.user is None
    assert token.accepts("Bearer 0123456789abcdef0123") and token.accepts(_basic("anyone", "0123456789abcdef0123"))
    assert not token.accepts("Bearer 0123456789abcdef0124") and not basic.accepts("Bearer pw:with:colons")
    for bad in ("", "short", "a\nb", ":nouser", "nopass:"):
        with pytest.raises(UsageError):
            parse_credentials(bad, "x")
    calls = []
    app = AuthMiddleware(lambda environ, start: calls.append(1) or [b"ok"], Credentials("u", "p", "t"))
    statuses = []
    assert app({}, lambda status, headers: statuses.append(status)) != [b"ok"] and statuses == ["401 Unauthorized"]
    assert app({"HTTP_AUTHORIZATION": _basic("u", "p")}, lambda *a: None) == [b"ok"] and calls == [1]
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("dashboard.example.org")


def test_refuses_to_start_off_loopback_without_a_login(tmp_path):
    env = {"COMMBENCH_DASHBOARD_AUTH": ""}
    refused = run_cli("dashboard", "--results", str(EXAMPLES), "--host", "0.0.0.0", "--port", "1", env=env, timeout=60)
    assert refused.returncode == 2 and "needs a login" in refused.stderr and "--no-auth" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    both = run_cli(
        "dashboard", "--results", str(EXAMPLES), "--no-auth", env={"COMMBENCH_DASHBOARD_AUTH": "u:p"}, timeout=60
    )
    assert both.returncode == 2 and "choose one" in both.stderr
    missing = run_cli("dashboard", "--results", str(EXAMPLES), "--auth-file", str(tmp_path / "none"), timeout=60)
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1


def test_no_auth_says_what_it_means():
    port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "commbench",
            "dashboard",
            "--results",
            str(EXAMPLES),
            "--host",
            "0.0.0.0",
            "--port",
            str(port),
            "--no-auth",
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert "with waitress, no login" in line
        time.sleep(0.5)
        assert _request(f"http://127.0.0.1:{port}/")[0] == 200
    finally:
        process.terminate()
        _, err = process.communicate(timeout=20)
    assert "anyone who can reach 0.0.0.0:" in err and "with no login" in err


@pytest.mark.browser
def test_chromium_needs_the_login_and_every_page_loads_with_it(served, tmp_path):
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("needs Debian's chromium and chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    url, results, before, _ = served
    options = Options()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1360,1000",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    with isolated_chromedriver([int(url.rsplit(":", 1)[1])], tmp_path) as chromedriver:
        driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    try:
        driver.set_page_load_timeout(30)
        driver.execute_cdp_cmd("Network.enable", {})
        driver.get(url + "/")  # no credentials: the server's 401 (no dialog in headless: the body shows)
        assert not driver.find_elements(By.CSS_SELECTOR, "nav.nav")
        statuses = _document_statuses(driver, url + "/")
        assert statuses and statuses[-1] == 401, statuses
        # logged in: Chromium sends the basic-auth header on every request of the page (documents,
        # scripts and Dash's callback POSTs), as it does once a user has answered the login box
        driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": _basic(USER, PASSWORD)}})
        logged_in = url
        for page in ("/", "/topology", "/bandwidth", "/history", "/planner", "/jobs"):
            driver.get(logged_in + page)
            WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "nav.nav .brand"))
            WebDriverWait(driver, 30).until(
                lambda d: d.execute_script(
                    "return document.querySelector('#_dash-app-content, #react-entry-point') !== null"
                )
            )
        assert _document_statuses(driver, logged_in + "/planner")[-1] == 200
    finally:
        driver.quit()
    assert _snapshot(results) == before  # read-only: nothing written or touched in the results folder


def _document_statuses(driver, url: str) -> list[int]:
    """HTTP statuses of the top-level documents Chromium received for url (DevTools network log)."""
    import json

    found = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.responseReceived" and message["params"].get("type") == "Document":
            response = message["params"]["response"]
            if response["url"].split("@")[-1].rstrip("/") == url.split("@")[-1].rstrip("/"):
                found.append(int(response["status"]))
    return found


def test_warmed_app_answers_a_burst_of_first_callbacks(tmp_path):
    """Dash builds its callback map on its first request; warm_up makes that happen before a threaded
    server's first burst (without it 62 of 96 such callbacks failed, measured on this machine)."""
    import json
    import threading

    from dashboard.app import create_app
    from dashboard.server import warm_up

    app = create_app(EXAMPLES)
    warm_up(app)
    body = json.dumps(
        {
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
                {"id": "cmp-a", "property": "value", "value": None},
                {"id": "cmp-b", "property": "value", "value": None},
            ],
            "changedPropIds": ["cmp-a.value"],
            "state": [],
        }
    ).encode()
    statuses = []

    def burst():
        client = app.server.test_client()
        statuses.extend(
            client.post("/_dash-update-component", data=body, content_type="application/json").status_code
            for _ in range(3)
        )

    threads = [threading.Thread(target=burst) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [200] * 48
