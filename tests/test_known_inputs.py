"""The correctness check's known inputs: pattern_sum (a cached periodic view) must equal the plain
sum of every rank's pattern, and count_wrong (an equality fast path) must still count each wrong
element, NaNs included."""

import pytest
import torch

from commbench.collectives.base import pattern, pattern_sum
from commbench.measure.harness import count_wrong

DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32, torch.int8, torch.uint8)


def plain_sum(ranks: int, numel: int, dtype: torch.dtype, start: int) -> torch.Tensor:
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    return sum(pattern(rank, numel, wide, "cpu", start) for rank in range(ranks)).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ranks", [1, 2, 3, 8, 13, 14, 40])
def test_pattern_sum_is_the_sum_of_every_ranks_pattern(dtype, ranks):
    for numel, start in ((1, 0), (12, 1), (1000, 0), (777, 5 * 777), (5000, 3)):
        got = pattern_sum(ranks, numel, dtype, "cpu", start)
        assert got.dtype == dtype and got.shape == (numel,)
        assert torch.equal(got, plain_sum(ranks, numel, dtype, start)), (numel, start)


def test_pattern_sum_follows_a_change_of_group_size_and_growth():
    small = pattern_sum(2, 10, torch.float32, "cpu").clone()
    assert torch.equal(
        pattern_sum(4, 100_000, torch.float32, "cpu")[-10:], plain_sum(4, 100_000, torch.float32, 0)[-10:]
    )
    assert torch.equal(pattern_sum(2, 10, torch.float32, "cpu"), small)


def test_count_wrong_counts_every_wrong_element_and_nans():
    expected = pattern_sum(2, 1000, torch.float32, "cpu")
    result = expected.clone()
    assert count_wrong(result, expected, 2) == 0
    result[[3, 500, 999]] = torch.tensor([-1.0, float("nan"), 1e6])
    assert count_wrong(result, expected, 2) == 3
