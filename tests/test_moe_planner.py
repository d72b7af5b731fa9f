"""The planner prices EP's all-to-alls under the router's skew: from a measured all_to_allv curve of
that routing, at the bytes the hottest EP rank receives (commbench.modeling.routing's expectation)."""

import json

import numpy as np
import pytest

from commbench.modeling.routing import expected_imbalance, parse_routing
from commbench.modeling.spec import PlanSpec, build_planner
from tests.test_modeling_planner import write_run

SKEW = "zipf:1.2"


def skewed_run(path):
    """SYNTHETIC: the uniform curves of test_modeling_planner's run, plus all_to_allv curves keyed by
    routing whose time at the busiest rank's bytes is 5% above all_to_all's (labelled synthetic)."""
    write_run(path, intra_gbps=360, inter_gbps=12)
    info = json.loads((path / "run.json").read_text())
    (path / "run.json").write_text(
        json.dumps({**info, "synthetic": True, "note": "tests/test_moe_planner.py: made up"})
    )
    records = [json.loads(line) for line in (path / "records.jsonl").read_text().splitlines()]
    routed = [
        {**r, "op": "all_to_allv", "routing": SKEW, "time_us": r["time_us"] * 1.05}
        for r in records
        if r["op"] == "all_to_all"
    ]
    (path / "records.jsonl").write_text("\n".join(json.dumps(r) for r in records + routed) + "\n")
    return path


@pytest.fixture(scope="module")
def planners(tmp_path_factory):
    run = skewed_run(tmp_path_factory.mktemp("moe") / "run")
    spec = dict(model="mixtral-8x7b", gpus=64, global_batch=256, seq_len=4096, bandwidth=str(run))
    return build_planner(PlanSpec(**spec, routing="uniform")), build_planner(PlanSpec(**spec, routing=SKEW))


def test_skew_raises_ep_cost_and_reorders_layouts_by_it(planners):
    uniform, skewed = planners
    batch = uniform.enumerate()
    even, skew = uniform.step_model.evaluate(batch), skewed.step_model.evaluate(batch)
    ep = batch.ep
    expected = {n: expected_imbalance(parse_routing(SKEW), 8, n) for n in np.unique(ep)}
    assert expected[1] == 1 and expected[2] < expected[4] < expected[8]
    assert np.allclose(skew.comm.ep.imbalance, [expected[n] for n in ep])
    added = skew.categories["ep"] - even.categories["ep"]
    assert (added[ep == 1] == 0).all()
    assert (added[ep > 1] > 0).all()  # the EP cost rises wherever tokens leave the rank
    # only EP changed: layouts without EP keep their step, the others do not get faster (the added EP
    # time shows, give or take a pipeline bubble repeating it and gradient reduction or ZeRO-3
    # traffic it now hides), and those with wider EP (a hotter hottest rank) fall behind
    longer = skew.step_s - even.step_s
    assert (longer[ep == 1] == 0).all() and (longer >= -1e-12).all() and (longer[ep > 1] > 0).mean() > 0.8
    fast = np.argsort(-even.tokens_per_s)[:300]
    before, after = even.tokens_per_s[fast], skew.tokens_per_s[fast]
    i, j = np.triu_indices(len(fast), 1)
    fell = np.where(before[i] > before[j], i, j)
    rose = np.where(before[i] > before[j], j, i)
    flipped = (before[fell] > before[rose]) & (after[fell] < after[rose])
    assert flipped.any(), "the skew changes no ranking"
    assert (ep[fast][fell[flipped]] > 1).all()  # only a layout with EP can fall behind
    # at equal EP, folded layouts differ in ETP, whose gather of the received tokens grows with the skew too
    assert (ep[fast][fell[flipped]] >= ep[fast][rose[flipped]]).mean() > 0.9, "mostly wider EP falls behind narrower"
    best = [planner.rank(1).ranked[0].layout for planner in planners]
    assert best[0] != best[1] and best[1].ep < best[0].ep


def test_measured_all_to_allv_curve_of_the_routing_prices_ep(planners):
    _, skewed = planners
    cost = skewed.cluster.cost
    assert cost.routing == SKEW and any(op == "all_to_allv" for op, _, _ in cost.curves)
    from commbench.modeling.network import Placement

    size = 64 * 2**20
    ratio = cost.time_s("all_to_allv", size, 8, Placement(8, 1)) / cost.time_s("all_to_all", size, 8, Placement(8, 1))
    assert ratio == pytest.approx(1.05, rel=1e-3)  # the routed curve, not the uniform one


def test_plan_json_reports_the_skew_cost(cli, tmp_path):
    run = skewed_run(tmp_path / "run")
    result = cli(
        "plan",
        "--model",
        "mixtral-8x7b",
        "--gpus",
        "64",
        "--global-batch",
        "256",
        "--seq-len",
        "4096",
        "--bandwidth",
        str(run),
        "--routing",
        SKEW,
        "--top",
        "3",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    skew = json.loads(result.stdout)["ep_skew"]
    assert skew["routing"] == SKEW and skew["source"] == "given (--routing)"
    for row in skew["layouts"]:
        assert row["ep_s"] == pytest.approx(row["ep_uniform_s"] + row["skew_cost_s"])
        assert (row["skew_cost_s"] > 0) == ("ep=" in row["layout"]) and row["max_over_mean"] >= 1
    default = cli(
        "plan",
        "--model",
        "mixtral-8x7b",
        "--gpus",
        "64",
        "--global-batch",
        "256",
        "--seq-len",
        "4096",
        "--top",
        "1",
        "--json",
    )
    assert json.loads(default.stdout)["ep_skew"]["routing"] == "zipf:0.3"
    assert "assumption" in json.loads(default.stdout)["ep_skew"]["source"]
    bad = cli(
        "plan",
        "--model",
        "mixtral-8x7b",
        "--gpus",
        "64",
        "--global-batch",
        "256",
        "--seq-len",
        "4096",
        "--routing",
        "zipf:nan",
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "finite" in bad.stderr


def test_an_imported_alltoallv_curve_prices_the_uniform_routing(tmp_path):
    """nccl-tests' alltoallv_perf splits evenly and its import has no routing: it is the uniform curve."""
    from commbench.modeling.hardware import load_system
    from commbench.modeling.measured import MeasuredNetwork
    from commbench.modeling.network import Placement, PresetNetwork

    run = skewed_run(tmp_path / "run")
    records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
    for r in records:
        if r["op"] == "all_to_allv":
            r["routing"] = None
    (run / "records.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    preset = PresetNetwork(load_system("dgx-h100"))
    uniform, skewed = MeasuredNetwork(run, preset), MeasuredNetwork(run, preset, routing=SKEW)
    args = (64 * 2**20, 8, Placement(8, 1))
    assert uniform.time_s("all_to_allv", *args) / uniform.time_s("all_to_all", *args) == pytest.approx(1.05, rel=1e-3)
    assert skewed.time_s("all_to_allv", *args) == pytest.approx(skewed.time_s("all_to_all", *args))
