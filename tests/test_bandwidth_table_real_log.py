"""The bandwidth table's held-out prediction on real GPU output: a published nccl-tests all_reduce log
(2 nodes x 8 A100 over EFA, results/examples/example-nccl-tests-a100-2nodes-aws; source and licence in
results/examples/SOURCES.md).

Fit every other size, predict the sizes left out above 64 KiB. On this log the fit is looser than on
the synthetic H100 curve (tests/test_bandwidth_table.py, 10% everywhere): 12 of the 15 left-out sizes
are within 10%, the worst is 14.2% (256 KiB, where the protocol changes). The bounds pin that.
"""

from commbench.data.bandwidth_table import BandwidthTable
from commbench.data.rundir import load_run
from tests.conftest import REPO

REAL_RUN = REPO / "results" / "examples" / "example-nccl-tests-a100-2nodes-aws"


def left_out_errors() -> list[float]:
    run = load_run(REAL_RUN)
    assert not run.info.synthetic and run.info.world_size == 16
    records = [r for r in run.records if not r["in_place"]]
    measured = {r["size_bytes"]: r["time_us"] for r in records}
    sizes = sorted(measured)
    errors = []
    for parity in (0, 1):
        kept = set(sizes[parity::2])
        table = BandwidthTable.from_records([r for r in records if r["size_bytes"] in kept])
        left_out = [s for s in sizes if s not in kept and s > 64 * 1024 and min(kept) < s < max(kept)]
        errors += [table.time_us("all_reduce", "world", 16, s) / measured[s] - 1 for s in left_out]
    return errors


def test_left_out_sizes_of_a_real_log_are_predicted_within_15_percent_most_within_10():
    errors = left_out_errors()
    assert len(errors) == 15
    assert max(abs(e) for e in errors) <= 0.15, errors
    assert sum(abs(e) <= 0.10 for e in errors) >= 12, errors
