"""Smoke test of the planner validation (bench/validate_planner.py) on the emulated cluster.

A small model, one round, few steps: it checks that every layout trains with torch's own APIs
over gloo between two emulated nodes, that the planner predicts each one from the measured
bandwidth table and compute rates without falling back to a preset network, and that the table
and its MAPE are written. It does not hold the model to the 10% goal: at this size and step
count the machine's other load decides the error (bench/RESULTS-validation.md has the real run).
"""

import json
import math
import subprocess
import sys

import pytest

from cluster.fixtures import require_cluster
from tests.conftest import REPO

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SMALL = ["--hidden", "256", "--layers", "2", "--heads", "4", "--vocab", "1024", "--seq-len", "128",
         "--global-batch", "4", "--pp-micro-batches", "2", "--steps", "2", "--warmup", "1", "--repeats", "2"]


def test_validation_trains_every_layout_and_predicts_it(tmp_path):
    require_cluster()
    result = subprocess.run([sys.executable, str(REPO / "bench" / "validate_planner.py"), "--rounds", "1",
                             "--max-bytes", "4M", "--work", str(tmp_path), *SMALL],
                            capture_output=True, text=True, timeout=240, cwd=REPO)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    summary = json.loads((tmp_path / "validation.json").read_text())
    assert set(summary["rows"]) == {"ddp", "fsdp", "tp", "pp", "local"}
    assert summary["layouts_in_mape"] == ["ddp", "fsdp", "tp", "pp"]
    for name, row in summary["rows"].items():
        assert row["measured"] > 0 and row["predicted"] > 0, name
        # a gross mistake (a unit, a missing factor of the layout) is off by far more than noise is
        assert 0.2 < row["predicted"] / row["measured"] < 5, (name, row["measured"], row["predicted"])
    assert math.isfinite(summary["mape_pct"]["predicted"])
    # the processor `commbench calibrate --quick` wrote on the cluster predicts too, and every
    # processor used is calibrate's JSON (its measured sources)
    assert math.isfinite(summary["mape_pct"]["predicted_quick"])
    assert len(summary["mape_per_round_pct"]) == 1
    for processor in (tmp_path / "processors" / "0").glob("*.json"):
        assert json.loads(processor.read_text())["gemm_surface"]["source"].startswith("measured on "), processor
    # every collective of the four layouts was priced from the measured table
    assert not any(summary["warnings"].get(name) for name in summary["layouts_in_mape"]), summary["warnings"]
    assert "MAPE over ddp, fsdp, tp, pp" in (tmp_path / "validation.md").read_text()
