"""compare and check match a pairwise run's rows pair by pair, and name the pair.

Every pair of a pairwise run shares the row fields (op, scope, group size, size, dtype, variant),
so rows must be matched on the pair too (commbench.data.samples.row_key). The two runs here are
synthetic (labelled so in run.json): four one-rank nodes, every pair at a latency and a bandwidth
size, 20 per-iteration samples each with 2% lognormal spread; in run B pair 0<->3 is 30% slower
and B's records come in the reverse order.
"""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import numpy as np

from commbench.analysis.baseline import build_baseline, grade, read_baseline, write_baseline
from commbench.analysis.compare import compare_runs
from commbench.analysis.runs import read_run
from commbench.cli import main as cli_main
from commbench.data.records import RowFacts, Stats, build_record
from commbench.data.rundir import RunWriter
from commbench.data.samples import samples_line
from commbench.data.schema import RunInfo

RANKS = 4
SIZES = (8, 4 << 20)
ITERS = 20
SLOW_PAIR = (0, 3)
BASE_US = {8: 40.0, 4 << 20: 33000.0}


def pairwise_run(
    out: Path, run_id: str, seed: int, slow_pair: tuple[int, int] | None = None, reverse: bool = False
) -> Path:
    """A synthetic pairwise run directory: records and samples as the pairwise driver writes them."""
    info = RunInfo(
        run_id=run_id,
        kind="pairwise",
        created="2026-12-01T00:00:00+00:00",
        backend="gloo",
        world_size=RANKS,
        synthetic=True,
        note="synthetic: tests/test_compare_pairwise.py",
        nodes=[{"hostname": f"node{r}", "node_id": r, "ranks": [r], "local_ranks": [0]} for r in range(RANKS)],
    )
    writer = RunWriter(out, info)
    rng = np.random.default_rng(seed)
    rows = [(size, pair) for size in SIZES for pair in combinations(range(RANKS), 2)]
    for size, pair in reversed(rows) if reverse else rows:
        level = BASE_US[size] * (1.3 if pair == slow_pair else 1.0)
        times = level * np.exp(rng.normal(0.0, 0.02, ITERS))
        facts = RowFacts(
            op="pingpong",
            scope="pair",
            group_size=2,
            n_groups=1,
            size_bytes=size,
            count=size // 4,
            dtype="float",
            redop="none",
            root=-1,
            in_place=False,
            iters=ITERS,
            warmup=2,
            timer="host",
            stop_reason="fixed",
            direction="uni",
        )
        record = build_record(
            facts,
            Stats.of(times),
            1.0,
            time_us_mean_nccl=None,
            wrong=0,
            slowest_rank=pair[1],
            pair=list(pair),
            pair_nodes=[f"node{pair[0]}", f"node{pair[1]}"],
        )
        writer.add_records(
            [record], [samples_line(record.model_dump(), pair[1], times.tolist(), list(pair), [record.time_us] * 2)]
        )
    writer.finish(True)
    return writer.path


def two_runs(tmp_path: Path) -> tuple[Path, Path]:
    return (
        pairwise_run(tmp_path, "pw-a", seed=1),
        pairwise_run(tmp_path, "pw-b", seed=2, slow_pair=SLOW_PAIR, reverse=True),
    )


def test_compare_flags_exactly_the_slower_pair_and_names_it(tmp_path, capsys):
    a, b = two_runs(tmp_path)
    comparison = compare_runs(read_run(str(a)), read_run(str(b)))
    assert len(comparison.rows) == len(SIZES) * 6 and comparison.only_in_a == comparison.only_in_b == 0
    changed = {(row.key[3], row.key[-1]) for row in comparison.rows if row.flagged}
    assert changed == {(size, SLOW_PAIR) for size in SIZES}
    for row in comparison.rows:
        assert row.p is not None  # each pair found its own samples
        same_pair = row.key[-1] == SLOW_PAIR
        assert row.verdict == ("slower" if same_pair else "no significant change"), row
        assert abs(row.time_change - (0.3 if same_pair else 0.0)) < 0.05, row

    assert cli_main(["compare", str(a), str(b)]) == 0
    slower = [line for line in capsys.readouterr().out.splitlines() if line.endswith(" slower")]
    assert len(slower) == len(SIZES) and all("pair ranks 0<->3 " in line for line in slower), slower


def test_check_fails_only_the_slower_pair_through_a_baseline_file(tmp_path):
    a, b = two_runs(tmp_path)
    baseline_file = tmp_path / "baseline.json"
    write_baseline(build_baseline([read_run(str(a))]), baseline_file)
    grades = grade(read_run(str(b)), read_baseline(baseline_file), 0.10)
    assert len(grades) == len(SIZES) * 6
    assert sorted(g.row for g in grades if not g.passed) == [
        "pingpong uni pair ranks 0<->3 n=2 4M float out-of-place",
        "pingpong uni pair ranks 0<->3 n=2 8 float out-of-place",
    ]


def test_check_prints_pairwise_rows_in_one_aligned_column(tmp_path, capsys):
    """A pairwise row's name (it names the pair) is longer than the 52 characters the column had:
    every row's figures must still start at the same place."""
    a, b = two_runs(tmp_path)
    assert cli_main(["check", str(b), "--baseline", str(a), "--tolerance", "10%"]) == 1
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("  pass ", "  FAIL "))]
    assert len(rows) == len(SIZES) * 6 and max(len(line.split(" us vs ")[0].rsplit(None, 1)[0]) for line in rows) > 58
    assert len({line.index(" us vs ") for line in rows}) == 1  # the time column (right-aligned) ends in one place
