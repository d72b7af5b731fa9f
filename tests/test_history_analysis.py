"""compare, baseline/check and history on generated runs whose noise was measured on this machine.

The noise profile (tests/fixtures/history-noise-profile.json) comes from 12 repeated sweeps (256 KiB
to 64 MiB) on this machine while it was quiet (its "measured" entry says how); its "quiet" figure is
the 64 MiB row's run-to-run noise, which QUIET applies to every row (small rows are far noisier).
Generated runs are labelled synthetic.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from commbench.analysis.baseline import build_baseline, grade
from commbench.analysis.compare import compare_runs
from commbench.analysis.history import find_change_points
from commbench.analysis.runs import read_run, run_differences
from commbench.analysis.synthetic import Injection, generate_history, generate_rows, quiet_variant, read_profile
from commbench.cli import main as cli_main
from commbench.data import store
from commbench.data.schema import RunInfo

PROFILE = read_profile(Path(__file__).parent / "fixtures" / "history-noise-profile.json")
QUIET = quiet_variant(PROFILE)
SIZE_64M = 64 << 20  # the size of the acceptance's query, `history ... --size 64M`
NCCL_UPGRADE = {"nccl": "2.23.4"}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commbench", *args], capture_output=True, text=True)


# ------------------------------------------------------------------ compare


def test_compare_flags_a_material_slowdown_and_not_noise(tmp_path):
    """Ten pairs of unchanged runs: "mostly no significant change". At the measured 4.8% run-to-run
    noise (applied to every row) 7 of 180 rows are flagged here, at 16-64 MiB (15 of 360 over 20
    other pairs, at 32 and 64 MiB): there 20 iterations pin a run's median far tighter than runs
    agree, and one run's samples cannot see run-to-run noise (`check` against a baseline of several
    runs does)."""
    before = generate_history(tmp_path / "a", QUIET, 20, seed=1, prefix="a")
    after = generate_history(
        tmp_path / "b", QUIET, 1, seed=2, prefix="b", injection=Injection(at=1, drop=0.3, versions=NCCL_UPGRADE)
    )
    pairs = [compare_runs(read_run(str(a)), read_run(str(b))) for a, b in zip(before[::2], before[1::2])]
    rows = [row for same in pairs for row in same.rows]
    assert all(row.p is not None for row in rows)
    assert sum(not row.flagged for row in rows) >= 0.9 * len(rows)

    slower = compare_runs(read_run(str(before[0])), read_run(str(after[0])))
    assert "nccl 2.21.5 -> 2.23.4" in slower.differences
    flagged = [row for row in slower.rows if row.verdict == "slower"]
    large = [row for row in slower.rows if row.key[3] >= 8 << 20]  # per-iteration CV <= 0.27 there, 0.35-1.3 below
    assert all(row.flagged for row in large)
    for row in flagged:
        assert row.q < 0.05 and row.time_change > 0.05 and row.ci_low > 0


def test_compare_command_prints_differences_and_json(tmp_path):
    runs = generate_history(
        tmp_path / "r", QUIET, 2, seed=3, injection=Injection(at=2, drop=0.0, env={"NCCL_IB_QPS_PER_CONNECTION": None})
    )
    text = cli("compare", str(runs[0]), str(runs[1]))
    assert text.returncode == 0, text.stderr
    assert "NCCL_IB_QPS_PER_CONNECTION 4 -> unset" in text.stdout
    result = json.loads(cli("compare", str(runs[0]), str(runs[1]), "--json").stdout)
    assert len(result["rows"]) == len(PROFILE["rows"]) and "ci_low" in result["rows"][0]


def test_run_differences_name_replaced_nodes():
    base = {"run_id": "x", "created": "2026-01-01T00:00:00+00:00", "backend": "nccl", "world_size": 2}
    nodes = [
        {"hostname": name, "node_id": i, "ranks": [i], "local_ranks": [0]} for i, name in enumerate(["node17", "node3"])
    ]
    after = [dict(node, hostname="node41" if node["hostname"] == "node17" else node["hostname"]) for node in nodes]
    changes = run_differences(
        RunInfo.model_validate(base | {"nodes": nodes}), RunInfo.model_validate(base | {"nodes": after})
    )
    assert changes == ["nodes: node17 replaced by node41"]


# ------------------------------------------------------------------ baseline and check


def test_check_fails_the_slow_rows_only_and_says_by_how_much(tmp_path):
    healthy = generate_history(tmp_path / "h", QUIET, 5, seed=4, prefix="h")
    baseline = build_baseline([read_run(str(path)) for path in healthy])
    good = generate_history(tmp_path / "g", QUIET, 1, seed=5, prefix="g")[0]
    assert all(g.passed for g in grade(read_run(str(good)), baseline, 0.10))

    slow = generate_history(tmp_path / "s", QUIET, 1, seed=6, prefix="s", injection=Injection(at=1, drop=0.4))[0]
    grades = grade(read_run(str(slow)), baseline, 0.10)
    assert sum(not g.passed for g in grades) >= 0.9 * len(grades)

    baseline_file = tmp_path / "baseline.json"
    made = cli("baseline", "create", *map(str, healthy), "-o", str(baseline_file))
    assert made.returncode == 0, made.stderr
    assert cli("check", str(good), "--baseline", str(baseline_file)).returncode == 0
    failed = cli("check", str(slow), "--baseline", str(baseline_file), "--tolerance", "10%")
    assert failed.returncode == 1
    (line,) = [line for line in failed.stdout.splitlines() if "8M float out-of-place" in line]
    assert line.split()[0] == "FAIL" and re.search(r"\(\+\d+\.\d%; limit \+\d+\.\d%\)", line), line


def test_check_against_a_single_run_and_bad_baseline_is_one_line(tmp_path):
    runs = generate_history(tmp_path / "r", QUIET, 2, seed=7)
    assert cli("check", str(runs[1]), "--baseline", str(runs[0]), "--tolerance", "50%").returncode == 0
    bogus = tmp_path / "bogus.json"
    bogus.write_text("{}")
    result = cli("check", str(runs[1]), "--baseline", str(bogus))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


def test_check_against_a_hardware_preset_grades_the_largest_sizes():
    examples = Path(__file__).parent.parent / "results" / "examples"
    good = cli("check", str(examples / "example-nccl-tests-h100-synthetic"), "--expect", "dgx-h100")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "against preset NVIDIA DGX H100" in good.stdout and "128M" in good.stdout
    cpu = cli("check", str(examples / "example-cpu-2rank"), "--expect", "dgx-h100")
    assert cpu.returncode == 1
    failed = [line for line in cpu.stdout.splitlines() if line.strip().startswith("FAIL")]
    assert failed and all(" world " in line for line in failed)
    assert len({line.split()[1] for line in failed}) == len(failed) // 2  # one size per op, both variants
    assert cli("check", str(examples / "example-cpu-2rank"), "--expect", "nope").returncode == 2


# ------------------------------------------------------------------ history (the generated-history acceptance)


def test_a_7pct_drop_at_run_200_is_found_and_attributed(tmp_path, capsys):
    """Five histories (seeds 1-5, not chosen) through run directories, one ingest and the command (as a
    process for the first, in this process for the others: the same code, without 1 s of imports each),
    at the noise measured on the quiet machine (64 MiB: 4.8% out-of-place, 3.7% in-place). Over 200
    other histories the detector lands within 2 runs in 194 and within 5, where the version change
    pins it, in 198 (bench/RESULTS-history.md): all five are expected to be found at 200 and attributed."""
    injection = Injection(at=200, drop=0.07, versions=NCCL_UPGRADE)
    seeds = range(1, 6)
    for seed in seeds:
        generate_history(tmp_path / "runs", PROFILE, 300, cluster=f"fleet{seed}", injection=injection, seed=seed)
    db = tmp_path / "r.duckdb"
    store.ingest(db, [tmp_path / "runs"])
    for seed in seeds:
        args = [
            "history",
            "--cluster",
            f"fleet{seed}",
            "--op",
            "all_reduce",
            "--size",
            "64M",
            "--db",
            str(db),
            "--json",
        ]
        if seed == seeds[0]:
            result = cli(*args)
            assert result.returncode == 0, result.stderr
            text = result.stdout
        else:
            assert cli_main(args) == 0
            text = capsys.readouterr().out
        (series,) = json.loads(text)
        assert len(series["points"]) == 300
        assert all(point["in_place_busbw_gbps"] > 0 for point in series["points"])  # the detector's second column
        (change,) = series["change_points"]
        assert abs(change["detected_index"] - 200) <= 2, (seed, change)
        assert change["index"] == 200  # the version change nearby pins it
        assert "nccl 2.21.5 -> 2.23.4" in change["differences"]
        assert -0.10 < change["change"] < -0.04


def drop_errors(seeds: range, with_in_place: bool = True) -> list[int]:
    """Per generated 64 MiB history with a 7% drop at run 200: how far the nearest change point is (300: none)."""
    errors = []
    for seed in seeds:
        out_of_place, in_place = generate_rows(
            PROFILE, [(SIZE_64M, False), (SIZE_64M, True)], 300, injection=Injection(at=200, drop=0.07), seed=seed
        )
        found = [index + 1 for index in find_change_points(out_of_place, companion=in_place if with_in_place else None)]
        errors.append(min((abs(run - 200) for run in found), default=300))
    return errors


def test_injected_drops_are_located_within_2_runs_on_nearly_every_history():
    """50 histories (seeds 2000-2049, apart from those the penalty was chosen on, from 0, and those of
    the bench, from 1000): here 49 within 2 runs, 50 within 5 and found; over the bench's 200, 194,
    198 and 198. The out-of-place row alone does worse (39 within 2, 48 within 5): the in-place row is
    what sharpens the place."""
    errors = drop_errors(range(2000, 2050))
    assert sum(error <= 2 for error in errors) >= 47, errors
    assert sum(error <= 5 for error in errors) >= 48, errors
    alone = drop_errors(range(2000, 2050), with_in_place=False)
    assert sum(error <= 2 for error in alone) < sum(error <= 2 for error in errors), alone


def test_false_alarms_on_20_unchanged_histories():
    """At the default threshold and penalty, 64 MiB with its in-place row and alone, at the measured noise."""
    histories = [
        generate_rows(PROFILE, [(SIZE_64M, False), (SIZE_64M, True)], 300, seed=200 + seed) for seed in range(20)
    ]
    alarms = {
        "with in-place": sum(bool(find_change_points(out, companion=inp)) for out, inp in histories),
        "alone": sum(bool(find_change_points(out)) for out, _ in histories),
    }
    assert alarms["with in-place"] <= 1 and alarms["alone"] <= 1, alarms


def test_change_points_need_a_material_change():
    rng = np.random.default_rng(0)
    values = np.exp(rng.normal(0, 0.005, 200)) * np.r_[np.ones(100), np.full(100, 0.98)]
    assert find_change_points(list(values), threshold=0.05) == []
    assert find_change_points(list(values), threshold=0.01) == [100]
