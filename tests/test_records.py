"""The one Record constructor: the bandwidth arithmetic every driver and the import share."""

import pytest

from commbench.data.overlap import OverlapRecord
from commbench.data.records import RowFacts, Stats, build_record

FACTS = RowFacts(
    op="all_reduce",
    scope="intra",
    group_size=4,
    n_groups=2,
    size_bytes=1_000_000,
    count=250_000,
    dtype="float",
    redop="sum",
    root=-1,
    in_place=False,
    iters=20,
    warmup=2,
    timer="host",
    stop_reason="fixed",
)
STATS = Stats(median=100.0, p10=90.0, p90=120.0, min=80.0, max=150.0, mean=105.0, cv=0.1)


def test_bandwidths_follow_from_size_median_and_factor():
    record = build_record(FACTS, STATS, 1.5, time_us_mean_nccl=104.0, wrong=0, slowest_rank=3)
    assert record.algbw_gbps == pytest.approx(10.0)  # 1e6 B / 100 us = 1e4 B/us = 10 GB/s
    assert record.busbw_gbps == pytest.approx(15.0)
    assert record.aggregate_busbw_gbps == pytest.approx(30.0)  # two groups at once
    assert (record.time_us, record.time_us_p10, record.time_us_max, record.cv) == (100.0, 90.0, 150.0, 0.1)
    assert (record.time_us_mean_nccl, record.slowest_rank, record.group_size) == (104.0, 3, 4)


def test_a_zero_time_gives_zero_bandwidth_not_a_division_error():
    record = build_record(FACTS, Stats(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0), 1.5, time_us_mean_nccl=None, wrong=-1)
    assert (record.algbw_gbps, record.busbw_gbps) == (0.0, 0.0)


def test_reported_bandwidths_are_kept_as_a_log_prints_them():
    record = build_record(FACTS, STATS, 1.5, time_us_mean_nccl=100.0, wrong=0, reported_bandwidth=(9.99, 14.98))
    assert (record.algbw_gbps, record.busbw_gbps, record.aggregate_busbw_gbps) == (9.99, 14.98, 29.96)


def test_a_record_subclass_takes_its_own_fields():
    extra = dict(
        gemm_size=64,
        gemm_dtype="float32",
        gemm_threads=1,
        gemm_tflops=0.1,
        compute_us=50.0,
        comm_us=100.0,
        both_us=120.0,
        compute_during_comm_us=60.0,
        comm_during_compute_us=110.0,
        overlap=0.6,
        overlap_unclamped=0.6,
        compute_slowdown=1.2,
        comm_slowdown=1.1,
    )
    record = build_record(FACTS, STATS, 1.5, time_us_mean_nccl=100.0, wrong=0, record_class=OverlapRecord, **extra)
    assert isinstance(record, OverlapRecord) and record.both_us == 120.0 and record.busbw_gbps == pytest.approx(15.0)


def test_stats_of_samples():
    stats = Stats.of([10, 20, 30, 40, 50])
    assert (stats.median, stats.min, stats.max, stats.mean) == (30.0, 10.0, 50.0, 30.0)
