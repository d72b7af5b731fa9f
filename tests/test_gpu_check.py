"""bench/gpu_check.sh cannot rot: its dry run (a stand-in CPU device, gloo, tiny shapes) runs every
step's command in CI, and the folder it writes has every file a real GPU run commits to bench/gpu/.

Slow (about a minute on an idle 2-core machine, several under load): it is nine real steps, each
starting Python and torch (three launch commbench ranks, one trains a GPT at four layouts); it
runs once, and every test here reads the one folder.
"""

import json
import os
import re
import subprocess
import tarfile

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "bench" / "gpu_check.sh"
STEPS = ("environment", "topo", "nccl-sweep", "cuda-graphs", "overlap", "calibrate", "fp8", "train", "timers")


def header_budgets() -> dict[str, int]:
    """The step table in the script's header: `#   step   budget  what`."""
    rows = re.findall(r"^#   ([a-z0-9-]+) +(\d+)  ", SCRIPT.read_text(), flags=re.M)
    return {name: int(budget) for name, budget in rows}


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-check") / "dry"
    tar = out.parent / "dry.tgz"
    env = {**os.environ, "OUT": str(out), "TAR": str(tar), "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run"], cwd=REPO, env=env, capture_output=True, text=True, timeout=1500
    )
    return result, out, tar


def test_the_header_plans_every_step_within_eight_minutes():
    budgets = header_budgets()
    assert tuple(budgets)[: len(STEPS)] == STEPS and "summary" in budgets
    assert sum(budgets.values()) <= 480


@pytest.mark.slow
def test_every_step_runs_and_is_recorded_with_its_budget(dry_run):
    result, out, tar = dry_run
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dry_run"] and summary["all_ok"]
    budgets = header_budgets()
    assert [(s["step"], s["status"], s["budget_s"]) for s in summary["steps"]] == [
        (name, "ok", 5 * budgets[name]) for name in STEPS
    ]  # the dry run's budgets are scaled by 5
    with tarfile.open(tar) as packed:
        assert f"{out.name}/summary.json" in packed.getnames()


@pytest.mark.slow
def test_each_step_writes_its_output_labelled_as_a_dry_run(dry_run):
    _, out, _ = dry_run
    assert json.loads((out / "topo.json").read_text())["nodes"]
    for run_id in ("nccl-sweep", "nccl-graph", "overlap"):
        records = [json.loads(line) for line in (out / run_id / "records.jsonl").read_text().splitlines()]
        assert records and all(r["stop_reason"] in ("converged", "budget", "fixed") for r in records), run_id
    assert json.loads((out / "processor.json").read_text())["name"]
    for name in ("fp8.json", "train.json", "timers.json", "train-predicted.json"):
        data = json.loads((out / name).read_text())
        assert data["dry_run"] is True and data["device"].startswith("stand-in"), name
    assert json.loads((out / "fp8.json").read_text())["available"] is False


@pytest.mark.slow
def test_training_step_sets_prediction_beside_measurement(dry_run):
    _, out, _ = dry_run
    predicted = json.loads((out / "train-predicted.json").read_text())["layouts"]
    trained = json.loads((out / "train.json").read_text())["layouts"]
    assert len(trained) == 4 and set(predicted) == set(trained)
    for name, entry in trained.items():
        assert entry["predicted_step_s"] == predicted[name]["predicted_step_s"] > 0  # frozen before measuring
        assert entry["measured_step_s"] > 0 and entry["measured_over_predicted"] > 0
        assert entry["max_memory_allocated_bytes"] is None  # the CPU stand-in has no CUDA allocator
    assert [trained[name]["micro_batches"] for name in trained] == [1, 2, 4, 1]
