"""The bandwidth table: fit recovery, held-out prediction on a synthetic nccl-tests run, its forms, its command,
Calculon export."""

import csv
import io
import json
import subprocess
import sys
from argparse import Namespace

import numpy as np
import pytest

from commbench import cli
from commbench.commands import table as table_command
from commbench.data.bandwidth_table import BandwidthTable, fit_latency_bandwidth
from commbench.data.calculon import calculon_networks
from commbench.data.rundir import load_run
from commbench.modeling.hardware import load_system
from commbench.modeling.measured import MeasuredNetwork
from commbench.modeling.network import Placement, PresetNetwork
from tests.conftest import REPO
from tests.test_modeling_planner import write_run

NCCL_TESTS_RUN = REPO / "results" / "examples" / "example-nccl-tests-h100-synthetic"
SIZES = 2.0 ** np.arange(3, 31)  # 8 B .. 1 GiB


def alpha_beta_us(size, alpha_us, busbw_gbps, factor):
    return alpha_us + np.asarray(size, dtype=float) * factor / (busbw_gbps * 1e3)


def record(op="all_reduce", size=1 << 20, time_us=100.0, factor=1.75, **extra):
    row = {
        "op": op,
        "scope": "world",
        "group_size": 8,
        "n_groups": 1,
        "size_bytes": size,
        "count": size // 4,
        "dtype": "float",
        "in_place": False,
        "iters": 20,
        "time_us": time_us,
        "time_us_p10": time_us,
        "time_us_p90": time_us,
        "time_us_min": time_us,
        "time_us_max": time_us,
        "cv": 0.0,
        "algbw_gbps": size / time_us / 1e3,
        "busbw_gbps": size / time_us / 1e3 * factor,
        "busbw_factor": factor,
    }
    return {**row, **extra}


def alpha_beta_records(alpha_us, busbw_gbps, factor=1.75, sizes=SIZES, **extra):
    return [
        record(size=int(s), time_us=float(alpha_beta_us(s, alpha_us, busbw_gbps, factor)), factor=factor, **extra)
        for s in sizes
    ]


# --- the fit --------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha_us,busbw_gbps,factor", [(8.0, 200.0, 1.75), (25.0, 12.5, 0.5), (0.5, 900.0, 1.0)])
def test_fit_recovers_alpha_and_busbw_of_exact_data_to_1_percent(alpha_us, busbw_gbps, factor):
    fit = fit_latency_bandwidth(SIZES, alpha_beta_us(SIZES, alpha_us, busbw_gbps, factor), factor)
    assert fit.alpha_us == pytest.approx(alpha_us, rel=0.01)
    assert fit.busbw_gbps == pytest.approx(busbw_gbps, rel=0.01)
    assert fit.max_rel_error < 1e-6


def test_fit_shrugs_off_noise_and_one_wild_point():
    rng = np.random.default_rng(7)
    times = alpha_beta_us(SIZES, 10.0, 100.0, 1.75) * (1 + 0.02 * rng.standard_normal(len(SIZES)))
    times[12] *= 4  # one row measured while something else ran
    fit = fit_latency_bandwidth(SIZES, times, 1.75)
    assert fit.alpha_us == pytest.approx(10.0, rel=0.05)
    assert fit.busbw_gbps == pytest.approx(100.0, rel=0.05)
    assert fit.max_rel_error > 0.7  # the wild point (model 4x below it) is reported, not hidden


def test_times_that_do_not_grow_keep_a_finite_conservative_bandwidth():
    sizes = np.array([8.0, 16, 32, 64])
    times = np.array([11.0, 10.9, 11.1, 10.8])
    fit = fit_latency_bandwidth(sizes, times, 1.0)
    # no bandwidth information: the busbw is the highest one measured (the data allow no lower)
    assert fit.busbw_gbps == pytest.approx(np.max(sizes / times) / 1e3)
    assert fit.alpha_us >= 0


# --- the table's answers --------------------------------------------------------------------


def test_time_at_any_size_follows_exact_alpha_beta_data_inside_and_beyond_the_points():
    table = BandwidthTable.from_records(alpha_beta_records(8.0, 200.0, sizes=2.0 ** np.arange(10, 27, 2)))
    queries = np.array([1.0, 100, 1000, 3000, 2**19 + 5, 2**26, 2**32])
    got = table.time_us("all_reduce", "world", 8, queries)
    assert got.shape == queries.shape
    np.testing.assert_allclose(got, alpha_beta_us(queries, 8.0, 200.0, 1.75), rtol=1e-9)
    assert isinstance(table.time_us("all_reduce", "world", 8, 4096), float)
    assert table.busbw_gbps("all_reduce", "world", 8, 2**40) == pytest.approx(200.0, rel=1e-3)


def test_measured_sizes_answer_their_measurement_and_curves_stay_monotonic():
    times = [12.0, 13.0, 30.0, 31.0, 90.0, 400.0]
    sizes = [2**10, 2**12, 2**14, 2**16, 2**18, 2**20]
    table = BandwidthTable.from_records([record(size=s, time_us=t) for s, t in zip(sizes, times)])
    entry = table.entry("all_reduce", "world", 8)
    np.testing.assert_allclose(entry.time_us(np.array(sizes, dtype=float)), times)
    curve = entry.time_us(np.logspace(0, 8, 400))
    assert np.all(np.diff(curve) >= -1e-9) and curve[0] > 0


def test_variant_choice_wrong_rows_and_duplicate_sizes():
    rows = alpha_beta_records(5.0, 50.0, sizes=[2**k for k in (10, 12, 14)])
    rows += [{**r, "in_place": True, "time_us": r["time_us"] * 2} for r in rows]
    rows += [record(size=2**12, time_us=1.0, wrong=3)]  # a wrong result never counts
    rows += [record(op="sendrecv", size=2**12, time_us=t, factor=1.0, in_place=True) for t in (10.0, 11.0, 30.0)]
    rows += [record(op="sendrecv", size=2**14, time_us=40.0, factor=1.0, in_place=True)]
    table = BandwidthTable.from_records(rows)
    ar = table.entry("all_reduce", "world", 8)
    assert not ar.in_place and ar.time_us(2**12) == pytest.approx(alpha_beta_us(2**12, 5.0, 50.0, 1.75))
    assert BandwidthTable.from_records(rows, in_place=True).entry("all_reduce", "world", 8).in_place
    sr = table.entry("sendrecv", "world", 8)
    assert sr.in_place and sr.time_us(2**12) == 11.0  # only in-place rows: used, their median per size
    with pytest.raises(LookupError, match="no all_gather measured on world groups of 8"):
        table.entry("all_gather", "world", 8)


def test_json_round_trip_keeps_points_fit_and_answers(tmp_path):
    table = BandwidthTable.from_run(write_run(tmp_path / "run", intra_gbps=200, inter_gbps=20))
    again = BandwidthTable.from_dict(json.loads(json.dumps(table.to_dict())))
    assert again.to_dict() == table.to_dict()
    assert (again.world_size, again.nodes) == (64, 8)
    queries = np.logspace(2, 11, 17)
    for a, b in zip(table.entries(), again.entries()):
        np.testing.assert_array_equal(a.time_us(queries), b.time_us(queries))
    with pytest.raises(ValueError, match="not a bandwidth table"):
        BandwidthTable.from_dict({"entries": []})


def test_rows_for_csv_have_one_row_per_point_with_the_fit(tmp_path):
    table = BandwidthTable.from_run(write_run(tmp_path / "run", intra_gbps=200, inter_gbps=20))
    rows = table.to_rows()
    assert len(rows) == sum(len(e.sizes) for e in table.entries())
    first = rows[0]
    assert {
        "op",
        "scope",
        "group_size",
        "size_bytes",
        "time_us",
        "busbw_gbps",
        "alpha_us",
        "fit_busbw_gbps",
        "model_time_us",
    } <= set(first)
    assert first["model_time_us"] == pytest.approx(first["time_us"], rel=1e-9)


def test_module_imports_neither_torch_nor_pydantic():
    code = "import sys, commbench.data.bandwidth_table; print('torch' in sys.modules, 'pydantic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.split() == ["False", "False"]


# Held-out prediction on a measured run is tested on the emulated cluster, where the link sets the
# time (tests/test_multinode.py::test_fitted_table_predicts_sizes_left_out_of_the_fit): over
# loopback on two shared cores, gloo's medians move by 20-100% from run to run.


# --- the planner reads the same table -------------------------------------------------------


def test_measured_network_prices_from_the_table(tmp_path):
    run = write_run(tmp_path / "run", intra_gbps=200, inter_gbps=20)
    net = MeasuredNetwork(run, PresetNetwork(load_system("dgx-h100")))
    assert isinstance(net.table, BandwidthTable)
    size = np.array([3e3, 7e5, 5e9])  # between points and beyond the largest
    got = net.time_s("all_gather", size, 8, Placement(8, 1))
    np.testing.assert_allclose(got, net.table.time_us("all_gather", "intra", 8, size) * 1e-6)
    np.testing.assert_allclose(got, alpha_beta_us(size, 8.0, 200.0, 7 / 8) * 1e-6, rtol=1e-9)


def test_one_node_world_and_intra_curves_share_a_placement_and_intra_wins(tmp_path):
    run = tmp_path / "one-node"
    run.mkdir()
    info = {
        "schema_version": 1,
        "run_id": "one-node",
        "created": "2025-01-01T00:00:00+00:00",
        "backend": "nccl",
        "world_size": 8,
        "complete": True,
        "nodes": [{"hostname": "n0", "node_id": 0, "ranks": list(range(8)), "local_ranks": list(range(8))}],
    }
    (run / "run.json").write_text(json.dumps(info))
    rows = alpha_beta_records(10.0, 100.0) + alpha_beta_records(10.0, 300.0, scope="intra")
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    net = MeasuredNetwork(run, PresetNetwork(load_system("dgx-h100")))
    assert net.curves[("all_reduce", 8, 1)].scope == "intra"
    assert net.time_s("all_reduce", 2**30, 8, Placement(8, 1)) == pytest.approx(
        alpha_beta_us(2**30, 10.0, 300.0, 1.75) * 1e-6
    )


# --- imported nccl-tests runs ---------------------------------------------------------------


def test_an_imported_nccl_tests_run_makes_a_table():
    table = BandwidthTable.from_run(NCCL_TESTS_RUN)
    entry = table.entry("all_reduce", "world", 8)
    run = load_run(NCCL_TESTS_RUN)
    out_of_place = {r["size_bytes"]: r["time_us"] for r in run.records if not r["in_place"]}
    assert len(entry.sizes) == len(out_of_place) and not entry.in_place
    biggest = max(out_of_place)
    assert entry.time_us(biggest) == pytest.approx(out_of_place[biggest])
    # latency of a few us and an asymptote near the largest measured busbw of an 8-GPU NVLink node
    assert 5 < entry.fit.alpha_us < 30
    assert entry.fit.busbw_gbps == pytest.approx(entry.measured_busbw_gbps.max(), rel=0.15)
    assert entry.fit.rms_rel_error < 0.2


@pytest.mark.parametrize("kept_parity", [0, 1])
def test_left_out_sizes_of_the_h100_nccl_tests_run_are_predicted_within_10_percent(kept_parity):
    """Fit every other size, predict the others above 64 KiB. The run is SYNTHETIC (a hand-written
    nccl-tests log, no GPU measured it): this checks the fit on a GPU-shaped curve, not on GPU data."""
    records = [r for r in load_run(NCCL_TESTS_RUN).records if not r["in_place"]]
    sizes = sorted({r["size_bytes"] for r in records})
    kept = set(sizes[kept_parity::2])
    table = BandwidthTable.from_records([r for r in records if r["size_bytes"] in kept])
    measured = {r["size_bytes"]: r["time_us"] for r in records}
    left_out = [s for s in sizes if s not in kept and s > 64 * 1024 and min(kept) < s < max(kept)]
    errors = {s: table.time_us("all_reduce", "world", 8, s) / measured[s] - 1 for s in left_out}
    assert len(errors) == 5
    assert all(abs(e) <= 0.10 for e in errors.values()), errors


# --- the command ----------------------------------------------------------------------------


@pytest.fixture
def commbench(monkeypatch, capsys):
    """`commbench table ...` in-process, registered the way cli.COMMANDS will register it."""
    monkeypatch.setitem(cli.COMMANDS, "table", "table")
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps at the terminal width; keep each entry on one line

    def invoke(*args):
        code = cli.main(["table", *map(str, args)])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return invoke


def test_command_text_json_csv_and_at(commbench, tmp_path):
    run = write_run(tmp_path / "run", intra_gbps=200, inter_gbps=20)
    code, out, _ = commbench(run, "--op", "all_reduce", "--scope", "intra")
    assert code == 0 and "all_reduce / intra / 8 ranks" in out and "alpha 8.00 us" in out and "busbw 200 GB/s" in out
    code, out, _ = commbench(run, "--format", "json")
    data = json.loads(out)
    assert code == 0 and len(data["entries"]) == 20 and data["entries"][0]["points"]["size_bytes"][0] == 1024
    code, out, _ = commbench(run, "--format", "csv", "--op", "sendrecv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and {r["op"] for r in rows} == {"sendrecv"} and len(rows) == 4 * 11
    code, out, _ = commbench(run, "--at", "4M,3G", "--op", "all_gather", "--scope", "inter", "--format", "json")
    answers = json.loads(out)["answers"]
    assert code == 0 and len(answers) == 6
    by = {(a["group_size"], a["size_bytes"]): a for a in answers}
    assert by[(8, 4 << 20)]["how"] == "measured"
    assert by[(8, 3 << 30)]["how"] == "extrapolated"
    assert by[(8, 3 << 30)]["time_us"] == pytest.approx(alpha_beta_us(3 << 30, 20.0, 20.0, 7 / 8))
    code, out, _ = commbench(run, "--at", "3M", "--op", "all_gather", "--scope", "intra")
    assert code == 0 and "interpolated" in out


def test_command_on_an_imported_nccl_tests_run(commbench, tmp_path):
    code, out, _ = commbench(NCCL_TESTS_RUN, "--at", "1G")
    assert code == 0 and "all_reduce" in out and "extrapolated" in out
    target = tmp_path / "calculon.json"
    code, _, err = commbench(NCCL_TESTS_RUN, "--format", "json", "--calculon", target)
    assert code == 0 and "lost in the export" in err
    tiers = json.loads(target.read_text())["networks"]
    assert len(tiers) == 1 and tiers[0]["size"] == 8 and tiers[0]["must_be_filled"] is True


CALCULON_KEYS = {"bandwidth", "efficiency", "size", "latency", "ops", "must_be_filled", "processor_usage"}


def calculon_time_s(tier, op, size, n):
    """Calculon's network time, as its Network.time prices it (latency + scaled size / (bw * eff))."""
    scalar, offset = tier["ops"][op]
    moved = size * scalar * (1 + (offset or 0) / n)
    return tier["latency"] + moved / (tier["bandwidth"] * 1e9 * tier["efficiency"])


def test_calculon_export_reproduces_the_asymptotes_and_says_what_is_lost(tmp_path):
    run = write_run(tmp_path / "run", intra_gbps=200, inter_gbps=20)
    table = BandwidthTable.from_run(run)
    exported = calculon_networks(table)
    intra, inter = exported["networks"]
    assert set(intra) == CALCULON_KEYS and set(inter) == CALCULON_KEYS
    assert set(intra["ops"]) == {"p2p", "reduce_scatter", "all_gather", "all_reduce"}
    assert (intra["size"], inter["size"]) == (8, 64)
    assert intra["latency"] == pytest.approx(8e-6) and inter["latency"] == pytest.approx(20e-6)
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        for tier, scope in ((intra, "intra"), (inter, "inter")):
            ours = table.time_us(op, scope, 8, 2**30) * 1e-6
            assert calculon_time_s(tier, op, 2**30, 8) == pytest.approx(ours, rel=1e-6)
    assert calculon_time_s(intra, "p2p", 2**30, 2) == pytest.approx(table.time_us("sendrecv", "intra", 8, 2**30) * 1e-6)
    assert any("hierarchical" in line for line in exported["commbench"]["lost"])
    assert any("all_to_all" in line for line in exported["commbench"]["lost"])
    assert exported["commbench"]["tiers"][1]["from"]["all_reduce"].startswith("all_reduce / inter / 8 ranks")


def test_calculon_export_keeps_each_ops_own_bandwidth(tmp_path):
    rows = alpha_beta_records(10.0, 300.0, scope="intra") + alpha_beta_records(
        10.0, 150.0, op="all_gather", factor=7 / 8, scope="intra"
    )
    table = BandwidthTable.from_records(rows, world_size=8, nodes=1)
    tier = calculon_networks(table)["networks"][0]
    assert tier["bandwidth"] == pytest.approx(300.0)
    assert tier["ops"]["all_gather"][0] == pytest.approx(2.0)  # half the bandwidth: twice the scalar
    assert calculon_time_s(tier, "all_gather", 2**30, 8) == pytest.approx(
        alpha_beta_us(2**30, 10.0, 150.0, 7 / 8) * 1e-6, rel=1e-6
    )


def test_bad_input_exits_2_with_one_line(commbench, tmp_path):
    run = write_run(tmp_path / "run", intra_gbps=200, inter_gbps=20)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "run.json").write_text((run / "run.json").read_text())
    (empty / "records.jsonl").write_text("")
    pair_only = tmp_path / "pair"
    pair_only.mkdir()
    (pair_only / "run.json").write_text((run / "run.json").read_text())
    (pair_only / "records.jsonl").write_text(json.dumps(record(op="pingpong", scope="pair", factor=1.0)) + "\n")
    cases = [
        ((tmp_path / "missing",), "no such run directory"),
        ((tmp_path,), "not a run directory"),
        ((empty,), "no usable records"),
        ((run, "--op", "bogus"), "nothing measured for bogus"),
        ((run, "--scope", "pair"), "nothing measured for scope pair"),
        ((run, "--at", "12Q"), "bad size"),
        ((pair_only, "--calculon", tmp_path / "c.json"), "--calculon"),
    ]
    for args, needle in cases:
        code, _out, err = commbench(*args)
        lines = err.strip().splitlines()
        assert code == 2, (args, err)
        assert len(lines) == 1 and needle in lines[0], (args, err)


def test_command_module_follows_the_convention():
    assert table_command.__doc__ and len(table_command.HELP.splitlines()) == 1
    args = Namespace(run=str(NCCL_TESTS_RUN), format="csv", op=None, scope=None, at="1M", calculon=None)
    assert table_command.main(args) == 0
