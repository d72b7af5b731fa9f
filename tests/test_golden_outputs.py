"""Users see no change: what the commands print (and `import` writes) is compared with stored output.

Written before the code was reorganised (issue 12), so a move that changes any figure fails here.
Each case runs one command in-process and compares its JSON, exactly, with tests/golden/expected/.
The inputs are frozen copies of results/examples runs (tests/golden/runs/, copied at commit
e80ce00) and the test fixtures, so regenerating the examples does not move these outputs.

Only what legitimately varies between two runs is left out: the planner's layouts/s (a speed),
and an import's run id, directory name and creation time (the log's file time when it has no date).

An intended change of output (a new model config, a reader fix) regenerates the files with
    UPDATE_GOLDEN=1 python -m pytest -q tests/test_golden_outputs.py
and the commit says why (see tests/golden/README.md).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from commbench import cli

GOLDEN = Path(__file__).parent / "golden"
RUNS = GOLDEN / "runs"
EXPECTED = GOLDEN / "expected"
FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).parent.parent

TABLE_RUNS = (
    "example-cpu-2rank",
    "example-emulated-2x2-1gbit",
    "example-nccl-tests-h100",
    "example-overlap-cpu",
    "example-pairwise-3nodes-lossy-node3",
)
PRESET_PLAN = (
    "plan",
    "--model",
    "llama3-70b",
    "--gpus",
    "64",
    "--gpus-per-node",
    "8",
    "--hardware",
    "dgx-h100",
    "--global-batch",
    "512",
    "--seq-len",
    "4096",
    "--json",
)
MEASURED_PLAN = (
    "plan",
    "--model",
    "llama2-7b",
    "--gpus",
    "4",
    "--gpus-per-node",
    "2",
    "--bandwidth",
    "tests/golden/runs/example-emulated-2x2-1gbit",
    "--global-batch",
    "16",
    "--seq-len",
    "1024",
    "--top",
    "3",
    "--json",
)
TRACES = ("gloo_cpu.json", "gpu_two_streams.json", "no_communication.json")
NCCL_TESTS_LOGS = tuple(sorted(p.name for p in (FIXTURES / "nccl_tests").iterdir() if p.suffix in (".log", ".json")))

# what differs between two identical runs of a command, never a change of behaviour
PLAN_VARYING = ("layouts_per_second",)
IMPORT_RUN_VARYING = ("run_id", "created", "finished")

CASES = {
    **{f"table-{run}": ("table", f"tests/golden/runs/{run}", "--format", "json") for run in TABLE_RUNS},
    "plan-preset": PRESET_PLAN,
    "plan-bandwidth": MEASURED_PLAN,
    **{f"trace-{Path(name).stem}": ("trace", f"tests/fixtures/traces/{name}", "--json") for name in TRACES},
}


def _command_json(argv, capsys) -> dict:
    assert cli.main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def _without(data: dict, keys) -> dict:
    return {key: value for key, value in data.items() if key not in keys}


def _compare(name: str, actual) -> None:
    """Exact equality with tests/golden/expected/<name>.json (rewritten instead under UPDATE_GOLDEN=1)."""
    path = EXPECTED / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(actual, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        return
    assert path.exists(), f"no golden output {path}; create it with UPDATE_GOLDEN=1 (see tests/golden/README.md)"
    expected = json.loads(path.read_text(encoding="utf-8"))
    difference = _first_difference(expected, actual, name)
    assert difference is None, f"output differs from {path}: {difference}"


def _first_difference(expected, actual, where: str) -> str | None:
    """Where two JSON values first differ (None when equal), so a failure names the field."""
    if type(expected) is not type(actual):
        return f"{where}: {expected!r} became {actual!r}"
    if isinstance(expected, dict):
        if expected.keys() != actual.keys():
            return f"{where}: keys {sorted(expected.keys() ^ actual.keys())} added or removed"
        return next(
            (d for key in expected if (d := _first_difference(expected[key], actual[key], f"{where}.{key}"))), None
        )
    if isinstance(expected, list):
        if len(expected) != len(actual):
            return f"{where}: {len(expected)} items became {len(actual)}"
        return next(
            (d for i, (e, a) in enumerate(zip(expected, actual)) if (d := _first_difference(e, a, f"{where}[{i}]"))),
            None,
        )
    same_nan = isinstance(expected, float) and math.isnan(expected) and math.isnan(actual)
    return None if expected == actual or same_nan else f"{where}: {expected!r} became {actual!r}"


@pytest.fixture(autouse=True)
def _from_repo_root(monkeypatch):
    monkeypatch.chdir(REPO)  # paths in the outputs are relative to the repository, as a user types them


@pytest.mark.parametrize("name", sorted(CASES))
def test_command_output_is_unchanged(name, capsys):
    output = _command_json(CASES[name], capsys)
    if name.startswith("plan-"):
        output = _without(output, PLAN_VARYING)
    _compare(name, output)


@pytest.mark.parametrize("log", NCCL_TESTS_LOGS)
def test_import_writes_unchanged_run(log, tmp_path, capsys):
    assert cli.main(["import", "nccl-tests", f"tests/fixtures/nccl_tests/{log}", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    (run_dir,) = tmp_path.iterdir()
    run = _without(json.loads((run_dir / "run.json").read_text()), IMPORT_RUN_VARYING)
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines() if line.strip()]
    _compare(f"import-{log.replace('.', '-')}", {"run.json": run, "records.jsonl": records})


def test_golden_comparison_names_the_field_that_changed():
    before = {"ranked": [{"step_s": 1.0, "layout": "tp=8"}]}
    after = {"ranked": [{"step_s": 1.0000000001, "layout": "tp=8"}]}
    assert _first_difference(before, after, "plan") == "plan.ranked[0].step_s: 1.0 became 1.0000000001"
    assert _first_difference(before, json.loads(json.dumps(before)), "plan") is None
