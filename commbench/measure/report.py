"""The text rank 0 prints while measuring: nccl-tests' columns, which users already parse, then the run's summary.

NcclTestsPrinter prints the sweep's rows; OverlapPrinter the overlap driver's (compute, communication, both).
"""

from __future__ import annotations

import statistics
import sys

from commbench.data.overlap import OverlapRecord
from commbench.data.schema import Record


def _time(us: float) -> str:
    # nccl-tests prints fewer decimals as times grow
    if us >= 10000:
        return f"{us:7.0f}"
    return f"{us:7.1f}" if us >= 100 else f"{us:7.2f}"


def _wrong(value: int) -> str:
    return "N/A" if value < 0 else str(value)


class NcclTestsPrinter:
    """The sweep's rows as nccl-tests prints them, on rank 0's stdout, then the run's summary."""

    def __init__(self, stream=None):
        self.stream = stream  # None: whatever sys.stdout is at print time (the progress bar redirects it)
        self.rows: list[list[Record]] = []

    def print(self, text: str = "") -> None:
        print(text, file=self.stream or sys.stdout, flush=True)

    def header(self, title: str, labels: tuple[str, ...]) -> None:
        groups = "".join(f"{label:^32s}" for label in labels)
        self.print(f"#\n# {title}\n#")
        self.print(f"# {'':>10s}  {'':>12s}  {'':>8s}  {'':>6s}  {'':>6s}  {groups}")
        cols = "  ".join(f"{'time':>7s}  {'algbw':>6s}  {'busbw':>6s}  {'#wrong':>6s}" for _ in labels)
        units = "  ".join(f"{'(us)':>7s}  {'(GB/s)':>6s}  {'(GB/s)':>6s}  {'':>6s}" for _ in labels)
        self.print(f"# {'size':>10s}  {'count':>12s}  {'type':>8s}  {'redop':>6s}  {'root':>6s}  {cols}")
        self.print(f"# {'(B)':>10s}  {'(elements)':>12s}  {'':>8s}  {'':>6s}  {'':>6s}  {units}")

    def row(self, records: list[Record]) -> None:
        first = records[0]
        cells = "  ".join(
            f"{_time(r.time_us)}  {r.algbw_gbps:6.2f}  {r.busbw_gbps:6.2f}  {_wrong(r.wrong):>6s}" for r in records
        )
        self.print(
            f"{first.size_bytes:12d}  {first.count:12d}  {first.dtype:>8s}  {first.redop:>6s}  {first.root:6d}  {cells}"
        )
        self.rows.append(records)

    def routing_row(self, rec: Record) -> None:
        """all_to_allv: the routing model's figures under the row, as a comment nccl-tests parsers skip."""
        self.print(
            f"#   {rec.routing}, {rec.tokens_per_rank} tokens/rank: received max {rec.recv_bytes_max} B "
            f"(rank {rec.hottest_rank}), mean {rec.recv_bytes_mean:.0f} B, ratio "
            f"{rec.recv_bytes_max / max(rec.recv_bytes_mean, 1):.3f}; uniform all_to_all of the same bytes "
            f"{rec.uniform_time_us:.1f} us, penalty {rec.skew_penalty:.3f}"
        )

    def summary(self, run_dir: str | None) -> None:
        records = [r for row in self.rows for r in row]
        wrong = sum(r.wrong for r in records if r.wrong > 0)
        self.print(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'ERROR'}")
        if records:
            avg = sum(r.busbw_gbps for r in records) / len(records)
            self.print(f"# Avg bus bandwidth    : {avg:.4g}")
        if any(r.group_size == 1 for r in records):
            self.print("# Note: with one rank per group busbw is 0 by definition (nothing crosses a link).")
        self.print("# time = median over iterations of the slowest rank; per-iteration p10/p90/min/max/cv,")
        self.print("# the nccl-tests rank-averaged mean (time_us_mean_nccl) and more are in records.csv/jsonl.")
        if run_dir:
            self.print(f"# Results: {run_dir}")


class OverlapPrinter:
    """The rows of `commbench overlap`, nccl-tests-like, on rank 0's stdout, then the run's summary."""

    def print(self, text: str = "") -> None:
        print(text, file=sys.stdout, flush=True)

    def header(self, title: str) -> None:
        self.print(f"#\n# {title}\n#")
        self.print(
            f"# {'size':>10s}  {'count':>12s}  {'type':>8s}  {'compute':>9s}  {'comm':>9s}  {'both':>9s}  "
            f"{'overlap':>7s}  {'compute':>8s}  {'comm':>8s}  {'#wrong':>6s}"
        )
        self.print(
            f"# {'(B)':>10s}  {'(elements)':>12s}  {'':>8s}  {'(us)':>9s}  {'(us)':>9s}  {'(us)':>9s}  "
            f"{'(%)':>7s}  {'slowdown':>8s}  {'slowdown':>8s}  {'':>6s}"
        )

    def row(self, rec: OverlapRecord) -> None:
        self.print(
            f"{rec.size_bytes:12d}  {rec.count:12d}  {rec.dtype:>8s}  {rec.compute_us:9.1f}  {rec.comm_us:9.1f}  "
            f"{rec.both_us:9.1f}  {100 * rec.overlap:7.1f}  {rec.compute_slowdown:8.3f}  "
            f"{rec.comm_slowdown:8.3f}  {rec.wrong:6d}"
        )

    def summary(self, run_dir: str, records: list[dict]) -> None:
        wrong = sum(max(r["wrong"], 0) for r in records)
        self.print(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'ERROR'}")
        if records:
            self.print(
                f"# GEMM alone: {statistics.median(r['gemm_tflops'] for r in records):.4g} TFLOP/s (median of rows)"
            )
        self.print(
            "# overlap = (compute + comm - both) / min(compute, comm), clamped to [0, 1] (raw: overlap_unclamped);"
        )
        self.print("# slowdown = an operation's duration beside the other / alone. Medians over iterations of the rank")
        self.print("# slowest at both; every figure and the per-iteration spread are in records.csv/jsonl.")
        self.print(f"# Results: {run_dir}")
