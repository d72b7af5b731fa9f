"""Every run under results/examples/ is either re-created by bench/make_examples.py from the command
its run.json names, or says `"synthetic": true` with a note; nothing in between."""

import importlib.util
import json
import sys

import pytest

from tests.conftest import REPO

EXAMPLES_DIR = REPO / "results" / "examples"


def _script():
    spec = importlib.util.spec_from_file_location("make_examples", REPO / "bench" / "make_examples.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


DECLARED = {example.name: example for example in _script().EXAMPLES}
RUN_DIRS = sorted(path.parent for path in EXAMPLES_DIR.glob("*/run.json"))


@pytest.mark.parametrize("run_dir", RUN_DIRS, ids=lambda path: path.name)
def test_example_is_re_created_by_the_script_or_marked_synthetic(run_dir):
    info = json.loads((run_dir / "run.json").read_text())
    if info.get("synthetic") is True:
        assert "synthetic" in run_dir.name, "a synthetic example says so in its name too"
        assert info.get("note"), "a synthetic run says what it imitates"
        assert run_dir.name not in DECLARED
        return
    assert run_dir.name in DECLARED, f"{run_dir.name}: neither made by bench/make_examples.py nor synthetic"
    assert info.get("synthetic") is False
    assert info["run_id"] == run_dir.name
    assert info["note"] == DECLARED[run_dir.name].note()


def test_every_declared_example_is_committed():
    assert {path.name for path in RUN_DIRS} >= set(DECLARED)


def test_topology_files_say_where_they_come_from():
    files = sorted(EXAMPLES_DIR.glob("*.topology.json"))
    assert files
    for path in files:
        topology = json.loads(path.read_text())
        assert isinstance(topology.get("synthetic"), bool) and topology.get("note"), f"{path.name}: no provenance"
