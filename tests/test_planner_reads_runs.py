"""The planner prices collectives from runs: one measured on the emulated cluster and an imported nccl-tests
run (synthetic: a hand-written log)."""

import json

from tests.conftest import REPO

EXAMPLES = REPO / "results" / "examples"


def plan_json(cli, *args):
    result = cli(
        "plan", "--model", "llama3-8b", "--hardware", "dgx-h100", "--seq-len", "1024", "--top", "2", "--json", *args
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_plan_on_an_emulated_two_node_run(cli):
    plan = plan_json(
        cli,
        "--gpus",
        "4",
        "--gpus-per-node",
        "2",
        "--global-batch",
        "16",
        "--bandwidth",
        str(EXAMPLES / "example-emulated-2x2-1gbit"),
    )
    assert "measured" in plan["network"] and "all_reduce@2x2" in plan["network"]
    assert plan["ranked"]


def test_plan_on_an_imported_nccl_tests_run(cli):
    plan = plan_json(
        cli,
        "--gpus",
        "8",
        "--gpus-per-node",
        "8",
        "--global-batch",
        "64",
        "--bandwidth",
        str(EXAMPLES / "example-nccl-tests-h100-synthetic"),
    )
    assert "all_reduce@8x1" in plan["network"]
    # what the import did not measure is priced from the preset, and said so
    assert any("no intra all_gather measured" in warning for warning in plan["warnings"])
    assert any("SYNTHETIC, not a measurement" in warning for warning in plan["warnings"])
    assert plan["ranked"]


def test_a_faster_measured_network_changes_the_prediction(cli):
    """The same job on the 1 Gbit/s emulated table and on the preset's InfiniBand: the slow table is slower."""
    args = ("--gpus", "4", "--gpus-per-node", "2", "--global-batch", "16", "--layout", "dp=4,mbs=4,zero=3")
    measured = plan_json(cli, *args, "--bandwidth", str(EXAMPLES / "example-emulated-2x2-1gbit"))
    preset = plan_json(cli, *args)
    assert measured["categories_s"]["dp"] > 10 * preset["categories_s"]["dp"]
    assert measured["step_s"] > preset["step_s"]
