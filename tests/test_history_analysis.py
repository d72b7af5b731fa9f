"""compare, baseline/check and history on generated runs whose noise was measured on this machine.

The noise profile (tests/fixtures/history-noise-profile.json) comes from 10 repeated sweeps on this
machine while it was shared (its "measured" entry says how); "quiet" is the same machine's
run-to-run noise when it was not, with its source. Generated runs are labelled synthetic.
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
from commbench.analysis.synthetic import Injection, generate_history, generate_series, quiet_variant, read_profile
from commbench.data import store
from commbench.data.schema import RunInfo

PROFILE = read_profile(Path(__file__).parent / "fixtures" / "history-noise-profile.json")
QUIET = quiet_variant(PROFILE)
ROW_8M = (8 << 20, False)
NCCL_UPGRADE = {"nccl": "2.23.4"}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commbench", *args], capture_output=True, text=True)


# ------------------------------------------------------------------ compare


def test_compare_flags_a_material_slowdown_and_not_noise(tmp_path):
    before = generate_history(tmp_path / "a", QUIET, 2, seed=1, prefix="a")
    after = generate_history(tmp_path / "b", QUIET, 1, seed=2, prefix="b",
                             injection=Injection(at=1, drop=0.3, versions=NCCL_UPGRADE))
    same = compare_runs(read_run(str(before[0])), read_run(str(before[1])))
    assert all(row.p is not None for row in same.rows)
    quiet_rows = sum(not row.flagged for row in same.rows)
    assert quiet_rows >= 0.95 * len(same.rows)

    slower = compare_runs(read_run(str(before[0])), read_run(str(after[0])))
    assert "nccl 2.21.5 -> 2.23.4" in slower.differences
    flagged = [row for row in slower.rows if row.verdict == "slower"]
    large = [row for row in slower.rows if row.key[3] >= 4 << 20]  # per-iteration CV ~0.3 there, ~1 below
    assert all(row.flagged for row in large)
    for row in flagged:
        assert row.q < 0.05 and row.time_change > 0.05 and row.ci_low > 0


def test_compare_command_prints_differences_and_json(tmp_path):
    runs = generate_history(tmp_path / "r", QUIET, 2, seed=3,
                            injection=Injection(at=2, drop=0.0, env={"NCCL_IB_QPS_PER_CONNECTION": None}))
    text = cli("compare", str(runs[0]), str(runs[1]))
    assert text.returncode == 0, text.stderr
    assert "NCCL_IB_QPS_PER_CONNECTION 4 -> unset" in text.stdout
    result = json.loads(cli("compare", str(runs[0]), str(runs[1]), "--json").stdout)
    assert len(result["rows"]) == len(PROFILE["rows"]) and "ci_low" in result["rows"][0]


def test_run_differences_name_replaced_nodes():
    base = {"run_id": "x", "created": "2026-01-01T00:00:00+00:00", "backend": "nccl", "world_size": 2}
    nodes = [{"hostname": name, "node_id": i, "ranks": [i], "local_ranks": [0]} for i, name in enumerate(["node17", "node3"])]
    after = [dict(node, hostname="node41" if node["hostname"] == "node17" else node["hostname"]) for node in nodes]
    changes = run_differences(RunInfo.model_validate(base | {"nodes": nodes}), RunInfo.model_validate(base | {"nodes": after}))
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


def test_a_7pct_drop_at_run_200_is_found_and_attributed(tmp_path):
    """One history through run directories, ingest and the command. At the noise measured on the quiet
    machine (7.9% at 8 MiB) the detector lands within 5 runs, where the version change pins it, in
    164 of 200 histories (bench/RESULTS-history.md): seeds 11-16 land at 207, 200, 206, 200, 200 and
    none. Seed 12 is one that lands; the rate is guarded by the test below."""
    injection = Injection(at=200, drop=0.07, versions=NCCL_UPGRADE)
    generate_history(tmp_path / "runs", QUIET, 300, cluster="fleet", injection=injection, seed=12)
    db = tmp_path / "r.duckdb"
    store.ingest(db, [tmp_path / "runs"])
    result = cli("history", "--cluster", "fleet", "--op", "all_reduce", "--size", "8M", "--db", str(db), "--json")
    assert result.returncode == 0, result.stderr
    (series,) = json.loads(result.stdout)
    assert len(series["points"]) == 300
    (change,) = series["change_points"]
    assert abs(change["detected_index"] - 200) <= 5  # how often within 2: test_injected_drops_are_located_...
    assert change["index"] == 200  # the version change nearby pins it
    assert "nccl 2.21.5 -> 2.23.4" in change["differences"]
    assert -0.10 < change["change"] < -0.04


def test_injected_drops_are_located_within_2_runs_on_most_histories():
    """50 histories of the 8M row at the quiet machine's measured noise (0.079): where the change point
    lands. Here 32 within 2 runs, 38 within 5, 49 found; over 200 histories 132, 164 and 194 (see
    bench/RESULTS-history.md)."""
    errors = []
    for seed in range(50):
        values = generate_series(QUIET, *ROW_8M, 300, injection=Injection(at=200, drop=0.07), seed=100 + seed)
        found = [index + 1 for index in find_change_points(values)]
        errors.append(min((abs(run - 200) for run in found), default=300))
    assert sum(error <= 2 for error in errors) >= 0.55 * len(errors), errors
    assert sum(error <= 5 for error in errors) >= 0.7 * len(errors), errors
    assert sum(error < 300 for error in errors) >= 0.95 * len(errors), errors


def test_false_alarms_on_20_unchanged_histories():
    """At the default threshold and penalty, with the profile's quiet figure and its per-row noise."""
    alarms = {name: sum(bool(find_change_points(generate_series(profile, *ROW_8M, 300, seed=200 + seed)))
                        for seed in range(20))
              for name, profile in (("quiet", QUIET), ("measured", PROFILE))}
    assert alarms["quiet"] <= 1 and alarms["measured"] <= 1, alarms


def test_change_points_need_a_material_change():
    rng = np.random.default_rng(0)
    values = np.exp(rng.normal(0, 0.005, 200)) * np.r_[np.ones(100), np.full(100, 0.98)]
    assert find_change_points(list(values), threshold=0.05) == []
    assert find_change_points(list(values), threshold=0.01) == [100]
