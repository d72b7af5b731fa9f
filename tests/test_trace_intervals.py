"""IntervalSet: the set algebra the overlap figures are measured with."""

import numpy as np
import pytest

from commbench.traces.intervals import IntervalSet


def pairs(interval_set: IntervalSet) -> list[tuple[float, float]]:
    return list(zip(interval_set.starts.tolist(), interval_set.ends.tolist()))


def test_union_merges_overlapping_nested_and_touching_intervals():
    merged = IntervalSet.union_of([30, 0, 5, 10, 50], [40, 10, 8, 20, 50])
    assert pairs(merged) == [(0, 20), (30, 40)]  # [50, 50) is empty and dropped
    assert merged.length == 30


def test_empty_sets_combine_without_error():
    empty = IntervalSet.empty()
    some = IntervalSet.union_of([0], [10])
    assert (empty & some).length == 0
    assert pairs(empty | some) == [(0, 10)]
    assert pairs(some - empty) == [(0, 10)]
    assert len(IntervalSet.union_of([], [])) == 0


def test_intersection_and_difference():
    compute = IntervalSet.union_of([0, 50], [40, 90])
    communication = IntervalSet.union_of([30, 85], [60, 120])
    assert pairs(compute & communication) == [(30, 40), (50, 60), (85, 90)]
    assert pairs(communication - compute) == [(40, 50), (90, 120)]
    assert pairs(compute | communication) == [(0, 120)]


def test_clip_keeps_the_part_inside_the_window():
    spread = IntervalSet.union_of([0, 20, 40], [10, 30, 50])
    assert pairs(spread.clip(5, 45)) == [(5, 10), (20, 30), (40, 45)]
    assert spread.clip(10, 20).length == 0


@pytest.mark.parametrize("seed", range(5))
def test_algebra_matches_a_fine_grid(seed):
    """Random integer intervals: measure each set operation on a 1-unit grid and compare."""
    rng = np.random.default_rng(seed)

    def random_set():
        starts = rng.integers(0, 200, 30)
        return starts, starts + rng.integers(0, 25, 30)

    def on_grid(starts, ends):
        covered = np.zeros(230, dtype=bool)
        for start, end in zip(starts, ends):
            covered[start:end] = True
        return covered

    a_raw, b_raw = random_set(), random_set()
    a, b = IntervalSet.union_of(*a_raw), IntervalSet.union_of(*b_raw)
    in_a, in_b = on_grid(*a_raw), on_grid(*b_raw)
    assert a.length == in_a.sum()
    assert (a & b).length == (in_a & in_b).sum()
    assert (a | b).length == (in_a | in_b).sum()
    assert (a - b).length == (in_a & ~in_b).sum()
    assert a.clip(50, 150).length == in_a[50:150].sum()
