"""In CI a missing piece of infrastructure fails the suite and names itself; elsewhere it skips.

Each case runs pytest on one of the suite's own modules in a child process with the piece taken
away: Chromium (a PATH that holds only the interpreter), or the right to create network
namespaces (a user namespace, where even "root" cannot add a netns). And .ci/setup-system.sh,
which cannot install anything without root, fails in CI instead of passing quietly.
"""

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO


def child_pytest(module: str, env: dict, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", module],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=env,
    )


def without_ci() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("CI", "COMMBENCH_CI")}


@pytest.mark.parametrize("ci", [False, True])
def test_no_chromium_skips_outside_ci_and_fails_in_ci(ci):
    env = {**without_ci(), "PATH": os.path.dirname(sys.executable), **({"CI": "true"} if ci else {})}
    result = child_pytest("tests/test_dashboard_browser.py", env)
    assert "needs chromium and chromedriver on PATH" in result.stdout
    if ci:
        assert result.returncode != 0 and "skipped in CI" in result.stdout
        assert "7 errors" in result.stdout.splitlines()[-1]  # every test failed, none skipped
    else:
        assert result.returncode == 0 and "7 skipped" in result.stdout, result.stdout[-2000:]


def test_no_namespaces_fails_the_cluster_tests_in_ci():
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        pytest.skip("needs root and unshare to take away the right to create namespaces")
    result = child_pytest(
        "tests/test_cluster_infra.py",
        {**without_ci(), "COMMBENCH_CI": "1"},
        prefix=(unshare, "--user", "--map-root-user"),
    )
    assert result.returncode != 0
    assert "skipped in CI" in result.stdout and "kernel cannot build the emulated cluster" in result.stdout


@pytest.mark.parametrize("ci", [False, True])
def test_setup_system_without_root_fails_only_in_ci(ci):
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to run the script as another user")
    script = (REPO / ".ci" / "setup-system.sh").read_text()  # on stdin: the user "nobody" may not read the checkout
    env = {**without_ci(), **({"CI": "true"} if ci else {})}
    result = subprocess.run(
        [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-s"],
        input=script,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd="/",
    )
    assert "needs root" in result.stderr
    assert result.returncode == (1 if ci else 0)
