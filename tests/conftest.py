"""Shared fixtures. Multi-node fixtures (emulated cluster, Slurm) live in tests/cluster/."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """`commbench ARGS` in a fresh interpreter, as a user would run it."""
    return subprocess.run(
        [sys.executable, "-m", "commbench", *args], capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})}, cwd=REPO,
    )


@pytest.fixture
def cli():
    return run_cli


# multi-node fixtures: emulated_cluster, emulated_cluster_factory, slurm_cluster, slurm_cluster_factory
from cluster.fixtures import *  # noqa: E402,F401,F403
