"""`commbench diagnose` without ranks: the strategy against the cluster model, hostlists, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from commbench.cli import main
from commbench.diagnose.fleet import FleetModel, bound_rounds, simulate_diagnose
from commbench.diagnose.hostlist import compress, expand
from commbench.diagnose.strategy import RoundResult, Thresholds, diagnose, ring_edges, screen_groups


def fleet(n=8, seed=0):
    return FleetModel(n, np.random.default_rng(seed))


@pytest.mark.parametrize("seed", range(5))
def test_one_slow_node_is_named_alone_within_the_bound(seed):
    model = fleet(seed=seed)
    model.node_rate[3] = 0.3  # 300 Mbit/s on a 1 Gbit/s fleet
    result = diagnose(model, 8)
    assert set(result.bad_nodes) == {3} and not result.bad_links and not result.hung
    assert result.bad_nodes[3].reasons == ["slow"]
    assert len(result.rounds) <= bound_rounds(8, 1)


@pytest.mark.parametrize("seed", range(5))
def test_a_slow_and_a_lossy_node_are_both_named_with_their_reason(seed):
    model = fleet(seed=seed)
    model.node_rate[2] = 0.3
    model.node_loss_pct[6], model.node_rate[6] = 3.0, 0.95  # TCP repairs it at nearly full speed
    result = diagnose(model, 8)
    assert {n: v.reasons for n, v in result.bad_nodes.items()} == {2: ["slow"], 6: ["lossy"]}
    assert len(result.rounds) <= bound_rounds(8, 2)


@pytest.mark.parametrize("link", [(2, 3), (0, 3), (13, 14)])  # edges of the screen rings (groups of 4)
def test_a_link_on_a_tested_ring_is_a_link_and_neither_node(link):
    model = fleet(16, seed=1)
    model.link_rate[link] = 0.3
    result = diagnose(model, 16)
    assert list(result.bad_links) == [link] and not result.bad_nodes


def test_a_node_that_stops_answering_is_named_and_the_rest_completes():
    model = fleet(16)
    model.node_rate[9] = 0.3
    model.stops_at_round[4] = 2  # answers the screen, then its link is cut
    result = diagnose(model, 16)
    assert set(result.hung) == {4} and set(result.bad_nodes) == {9}
    assert 4 not in result.good_nodes() and 9 not in result.good_nodes() and len(result.good_nodes()) == 14


def test_a_healthy_fleet_accuses_nobody_in_the_screen_and_one_more_round_at_most():
    result = diagnose(fleet(1024), 1024)
    assert not result.drained() and not result.bad_links and len(result.rounds) <= 2


@pytest.mark.parametrize(
    "n, size, groups",
    [
        (3, 2, [(0, 1, 2)]),
        (5, 2, [(0, 1), (2, 3, 4)]),
        (9, 4, [(0, 1, 2, 3), (4, 5, 6, 7, 8)]),
        (8, 2, [(0, 1), (2, 3), (4, 5), (6, 7)]),
    ],
)
def test_screen_groups_cover_every_node_once_a_lone_last_node_joining_the_group_before(n, size, groups):
    assert screen_groups(list(range(n)), size) == groups


def test_ring_edges():
    assert ring_edges((5, 1, 9)) == {(1, 5), (1, 9), (5, 9)}
    assert ring_edges((4, 2)) == {(2, 4)}


def test_at_scale_nothing_is_missed_or_falsely_accused():
    tally = simulate_diagnose(1024, 4, trials=20, seed=3)
    assert tally.missed == 0 and tally.false == 0
    assert max(tally.rounds) <= 12  # concurrent rounds stay near log2(group size) + confirm, far below N - 1


def test_hostlist_round_trip():
    names = ["node07", "node01", "node02", "node03", "gpu5", "login"]
    assert compress(names) == "login,gpu5,node[01-03,07]"
    assert sorted(expand(compress(names))) == sorted(names)
    assert expand("n[8-10]") == ["n8", "n9", "n10"]


@pytest.mark.parametrize("text", ["node[1-", "node[3-1]", "a[[1]]", "a,,b", "n[x]"])
def test_unreadable_hostlists_say_why(text):
    with pytest.raises(ValueError):
        expand(text)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--simulate", "8", "--group-size", "9"], "--group-size 9"),
        (["--simulate", "8", "--faults", "-1"], "--faults -1"),
        (["--hosts", "@/nonexistent/hosts.txt"], "cannot read the host list"),
        (["--hosts", "node[1-"], "cannot read the host list"),
        (["--hosts", "node[1-4]", "--slow", "node9"], "not in the fleet"),
        (["--slow", "node3"], "injects a fault into the cluster model"),
        (["--timeout", "0"], "--timeout 0"),
        (["--iters", "0"], "--iters 0"),
        (["--nproc", "1"], "--nproc 1"),
        (["--group-size", "1"], "--group-size 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, says, capsys):
    assert main(["diagnose", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err


def test_json_report_names_nodes_and_gives_the_exclude_list(capsys):
    assert main(["diagnose", "--hosts", "node[01-08]", "--slow", "node04", "--lossy", "node07", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [d["node"] for d in report["drain"]] == ["node04", "node07"]
    assert report["exclude"] == "node[04,07]" and report["good"] == "node[01-03,05-06,08]"
    assert report["source"].startswith("synthetic")
    assert report["rounds"] == len(report["round_log"])


def test_a_third_of_the_screen_groups_faulty_still_leaves_a_healthy_reference():
    # 16 nodes, screen groups of 4: a slow node and a slow link make 2 of 4 groups slow; a plain
    # median would sit between the two clusters and pass every group
    model = fleet(16)
    model.node_rate[3] = 0.3
    model.link_rate[(12, 13)] = 0.3
    result = diagnose(model, 16)
    assert set(result.bad_nodes) == {3} and list(result.bad_links) == [(12, 13)]
    assert result.reference.busbw > 0.9 * model.line_gbps


def test_out_writes_a_run_directory_the_dashboard_reads(tmp_path, capsys):
    from commbench.data.rundir import list_runs, load_run
    from commbench.diagnose.report import load_report

    assert main(["diagnose", "--simulate", "16", "--slow", "node03", "--out", str(tmp_path)]) == 0
    [path] = list_runs(tmp_path)
    info = load_run(path).info
    assert info.kind == "diagnose" and info.synthetic and info.complete
    assert [d["node"] for d in load_report(path)["drain"]] == ["node03"]


def test_a_ring_names_the_node_slow_itself_and_the_one_the_others_wait_for():
    from commbench.diagnose.stragglers import ring_stragglers

    # node 1 is slow in 4 of 5 iterations; node 3 arrives late, so its own time is the short one
    times = [
        [1.0, 1.0, 1.1, 1.0, 1.0],
        [1.6, 1.7, 1.0, 1.6, 1.8],
        [1.0, 1.1, 1.0, 1.0, 1.0],
        [0.2, 0.3, 0.2, 0.2, 0.25],
    ]
    slow, waited_for = ring_stragglers(times)
    assert [s.process for s in slow] == [1] and [s.process for s in waited_for] == [3]
    assert ring_stragglers([[1.0, 1.0], [1.05, 0.98], [1.0, 1.02]]) == ([], [])


def test_stragglers_are_slow_in_most_sizes_not_once():
    from commbench.diagnose.stragglers import find_stragglers

    steady = [[10.0, 10.5, 30.0, 9.8] for _ in range(5)]
    once = [[10.0, 25.0, 10.0, 10.0]] + [[10.0, 10.0, 10.0, 10.0] for _ in range(4)]
    assert [(s.process, s.sizes_slow, s.sizes) for s in find_stragglers(steady)] == [(2, 5, 5)]
    assert find_stragglers(once) == []
    assert find_stragglers([[5.0]]) == []


def test_import_shows_the_per_process_times_of_nccl_tests_dash_I(tmp_path, capsys):
    from pathlib import Path

    source = Path(__file__).parent / "fixtures" / "nccl_tests" / "synthetic_all_reduce_perf_h100x8.json"
    document = json.loads(source.read_text())
    document["config"]["ngpus"] = 1  # 8 processes of one rank each
    for result in document["results"]:
        iterations = len(result["out_of_place_per_iter"]["times_us"])
        times = [[100.0] * iterations for _ in range(8)]
        times[5] = [180.0] * iterations  # process 5 is slow at every size
        result["out_of_place_per_iter"]["per_process_max_times_us"] = times
    straggling = tmp_path / "straggler.json"
    straggling.write_text(json.dumps(document))
    assert main(["import", "nccl-tests", str(straggling), "--out", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "stragglers (-I per-process times): process 5 1.80x the median process, slow in 11 of 11 rows" in out
    from commbench.data.rundir import list_runs, load_run

    [run] = list_runs(tmp_path / "runs")
    assert load_run(run).records[0]["process_times_us"][5] == pytest.approx(180.0)


def test_a_hung_node_gives_strict_json_and_readable_reports(tmp_path):
    """A hung group has no bandwidth: the JSON says null (jq and browsers refuse NaN), and the text
    report, the stored run and the dashboard's round chart still read it."""
    from commbench.diagnose.report import json_ready, load_report, save_run, text, to_dict
    from dashboard.figures.diagnose import rounds_chart, verdict_rows

    model = FleetModel(16, np.random.default_rng(3))
    model.stops_at_round[5] = 1
    names = [f"n{i:02d}" for i in range(16)]
    report = to_dict(diagnose(model, 16), names, source="synthetic: test")
    assert "n05" in report["exclude"]
    strict = json.loads(json.dumps(json_ready(report), allow_nan=False))
    assert None in [bw for r in strict["round_log"] for bw in r["busbw_gbps"]]
    stored = load_report(save_run(report, tmp_path, {}, synthetic=True, note="test"))
    for readable in (report, strict, stored):
        assert "no answer" in text(readable)
        rounds_chart(readable)
        verdict_rows(readable)


class _CutNodeDragsItsPartner:
    """The cluster model, except that a node sharing a group with the cut node goes silent in that round
    too, as a live partner does whose gloo ring waits on a cut node past the round's time."""

    def __init__(self, model, cut: int):
        self.model, self.cut = model, cut

    def run_round(self, groups, wait_for_silent=False):
        result = self.model.run_round(groups, wait_for_silent)
        dragged = {n for g in groups if self.cut in g and self.cut in result.hung for n in g}
        return RoundResult(result.busbw, result.retransmit_pct, result.hung | frozenset(dragged))


def test_a_healthy_node_silent_beside_a_cut_one_is_rechecked_and_not_drained():
    model = FleetModel(16, np.random.default_rng(3))
    model.node_rate[9] = 0.3
    # node 10 shares the slow node's screen group (8-11), answers the screen, and is cut as the split
    # round tests it with 11: 11 goes silent with it there, and again as 10's partner in the recheck
    model.stops_at_round[10] = 2
    result = diagnose(_CutNodeDragsItsPartner(model, cut=10), 16, Thresholds(group_size=4))
    assert next(sorted(r.hung) for r in result.rounds if r.step == "split") == [10, 11]
    assert set(result.hung) == {10} and set(result.bad_nodes) == {9}, (result.hung, result.bad_nodes)
    (recheck,) = [r for r in result.rounds if r.step == "recheck"]
    assert [list(g) for g in recheck.groups] == [[10, recheck.groups[0][1]], [11, recheck.groups[1][1]]]
    assert recheck.hung == [10] and 11 in result.good_nodes()
