"""The dashboard reads only its results folder and the presets (issue 24). Before: a directory
symlink out of the folder made 6 of 8 pages answer 500, a file symlink bypassed the folder check,
records.jsonl -> /dev/zero grew the server until the OOM killer, a FIFO hung a thread per
request, and the Planner's model and processor fields read any path on the server and echoed
what they found ("hidden_size must be a whole number, not 'TOPSECRET-...'")."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import dash
import pytest

from commbench.errors import CommbenchError

EXAMPLE = Path(__file__).parent.parent / "results" / "examples" / "example-cpu-2rank"
SECRET = "TOPSECRET-4f9c"


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def hostile(tmp_path):
    """A results folder with one good run and every trap the probe used, and secrets outside it."""
    outside = tmp_path / "outside"
    shutil.copytree(EXAMPLE, outside / "run-elsewhere")
    (outside / "secret.json").write_text(json.dumps({"hidden_size": SECRET, "num_hidden_layers": 2}))
    (outside / "model").mkdir()
    (outside / "model" / "config.json").write_text(json.dumps({"hidden_size": SECRET}))
    results = tmp_path / "results"
    shutil.copytree(EXAMPLE, results / "good")
    (results / "linked-dir").symlink_to(outside / "run-elsewhere")
    for name, make in (
        ("linked-records", lambda p: p.symlink_to(outside / "secret.json")),
        ("fifo-records", os.mkfifo),
        ("zero-records", lambda p: p.symlink_to("/dev/zero")),
    ):
        shutil.copytree(EXAMPLE, results / name)
        (results / name / "records.jsonl").unlink()
        make(results / name / "records.jsonl")
    (results / "link-to-secret.topology.json").symlink_to(outside / "secret.json")
    (results / "models" / "tiny").mkdir(parents=True)
    (results / "models" / "tiny" / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 512,
                "num_hidden_layers": 4,
                "num_attention_heads": 8,
                "intermediate_size": 1376,
                "vocab_size": 32000,
                "max_position_embeddings": 2048,
            }
        )
    )
    (results / "models" / "stolen").symlink_to(outside / "model")
    return results, outside


def test_every_page_answers_and_names_the_runs_it_skipped(hostile):
    from dashboard.app import create_app

    results, _ = hostile
    before = _rss_mb()
    app = create_app(results)
    client = app.server.test_client()
    for page in dash.page_registry.values():
        assert client.get(page["relative_path"]).status_code == 200
        with app.server.test_request_context(page["relative_path"]):
            page["layout"]()  # the page's own layout reads the folder: it must not raise
    runs = sys.modules["pages.runs"]
    with app.server.test_request_context("/"):
        rows, _, problems, _ = runs.refresh(0, [])
    by_run = {row["run"]: row for row in rows}
    assert by_run["good"]["state"] == "complete" and by_run["good"]["records"] > 0
    assert "points outside the results folder" in by_run["linked-dir"]["problems"]
    assert "points outside" in by_run["linked-records"]["problems"]
    assert "FIFO" in by_run["fifo-records"]["problems"]
    assert "points outside" in by_run["zero-records"]["problems"]
    assert all(by_run[name]["records"] == 0 for name in ("linked-records", "fifo-records", "zero-records"))
    assert SECRET not in json.dumps(rows, default=str) + str(problems)
    assert _rss_mb() - before < 100


def _planner_request(page, **changes):
    values = {
        "plan-model": "llama2-7b",
        "plan-gpus": 8,
        "plan-batch": 64,
        "plan-seq": 4096,
        "plan-bandwidth": page.PRESET_SOURCE,
        "plan-overlap-run": page.DEFAULTS,
        "plan-hardware": "dgx-h100",
        "plan-precision": "16",
        "plan-execution": "megatron",
        "plan-top": 5,
    } | changes
    return [values.get(control) for control in page.SPEC_CONTROLS] + [None]


@pytest.mark.parametrize(
    "control, value",
    [
        ("plan-model", "{outside}/secret.json"),
        ("plan-model", "{outside}/model"),
        ("plan-model", "../outside/model"),
        ("plan-model", "results/models/stolen/config.json"),
        ("plan-processor", "{outside}/secret.json"),
        ("plan-processor", "/etc/passwd.json"),
        ("plan-routing", "file:{outside}/secret.json"),
        ("plan-routing", "file:../outside/secret.json"),
    ],
)
def test_the_planner_never_reads_a_path_outside_the_results_folder(hostile, control, value):
    from dashboard.app import create_app

    results, outside = hostile
    app = create_app(results)
    page = sys.modules["pages.planner"]
    with app.server.test_request_context("/planner"):
        with pytest.raises(CommbenchError) as refused:
            page._request(*_planner_request(page, **{control: value.format(outside=outside)}))
        assert SECRET not in str(refused.value) and str(outside) not in str(refused.value)
        outputs = page.rank_layouts(*_planner_request(page, **{control: value.format(outside=outside)}))
        assert SECRET not in json.dumps(outputs, default=str)


def test_the_planner_offers_presets_and_the_configs_inside_the_folder(hostile):
    from dashboard.app import create_app

    results, outside = hostile
    app = create_app(results, models_dir=outside / "model")
    page = sys.modules["pages.planner"]
    with app.server.test_request_context("/planner"):
        offered = {option["value"] for option in page._choice_options("plan-model")}
        assert {"llama2-7b", "results/models/tiny/config.json", "models/config.json"} <= offered
        assert "results/models/stolen/config.json" not in offered  # a link out of the folder
        request = page._request(*_planner_request(page, **{"plan-model": "results/models/tiny/config.json"}))
        assert request.spec.model == str((results / "models" / "tiny" / "config.json").resolve())
        refused = page.rank_layouts(*_planner_request(page, **{"plan-model": "models/config.json"}))
        assert SECRET not in json.dumps(refused, default=str)  # --models given: read, but never echoed
