"""The sweep driver (`commbench run`): every configured op at every size on every scope, nccl-tests style.

Rows come in blocks of (scope, op); each row is measured out-of-place then in-place (or per
ping-pong direction), and rank 0 prints it as nccl-tests does and adds its records to the run.
"""

from __future__ import annotations

from commbench.measure.harness import (
    Row,
    WarmState,
    gather_to_rank0,
    kept_samples,
    measure,
    scope_rows,
    timer_for,
    to_record,
)
from commbench.measure.moe import uniform_row
from commbench.measure.progress import Progress
from commbench.measure.report import NcclTestsPrinter
from commbench.measure.runner import MeasuredRun
from commbench.measure.session import Session


class SweepDriver:
    kind = "sweep"
    command = "run"

    def __init__(self, session: Session):
        self.session = session
        self.rows = scope_rows(session)
        self.printer = NcclTestsPrinter() if session.rank == 0 else None

    def measure_rows(self, run: MeasuredRun, progress: Progress) -> None:
        block = None
        warm = {variant.label: WarmState() for row in self.rows for variant in row.collective.variants}
        for row in self.rows:
            if (row.scope, row.collective.name) != block:
                block = (row.scope, row.collective.name)
                self._header(row)
            records, kept = [], []
            for variant in row.collective.variants:
                run.monitor.progress(f"{row.collective.name} {row.scope} {row.size} B {variant.label}")
                measured = measure(self.session, row, variant, warm[variant.label])
                samples = gather_to_rank0(self.session, measured)
                if samples is not None:
                    records.append(to_record(self.session, row, variant, samples, measured))
                    kept.append(kept_samples(row, variant, samples, measured, records[-1]))
            if row.exchange:
                records = self._with_uniform_comparison(row, records)
            if records:
                run.add(records, kept)
                self.printer.row(records)
                if row.exchange:
                    self.printer.routing_row(records[0])
            progress.advance(f"{row.scope} {row.collective.name} {row.size} B")

    def _with_uniform_comparison(self, row: Row, records: list) -> list:
        """Measure the uniform all_to_all of the routed row's total bytes; its time goes into the records."""
        uniform = uniform_row(row)
        variant = uniform.collective.variants[0]
        measured = measure(self.session, uniform, variant)
        samples = gather_to_rank0(self.session, measured)
        if samples is None:
            return records
        even = to_record(self.session, uniform, variant, samples, measured)
        return [
            rec.model_copy(
                update={
                    "uniform_time_us": even.time_us,
                    "uniform_time_us_p10": even.time_us_p10,
                    "uniform_time_us_p90": even.time_us_p90,
                    "skew_penalty": rec.time_us / even.time_us,
                }
            )
            for rec in records
        ]

    def report(self, run: MeasuredRun) -> None:
        self.printer.summary(str(run.writer.path))

    def _header(self, row: Row) -> None:
        if not self.printer:
            return
        s = self.session
        labels = tuple(v.label for v in row.collective.variants)
        title = (
            f"{row.collective.name}: scope {row.scope}, {len(row.groups)} group(s) of {len(row.groups[0])} rank(s), "
            f"backend {s.backend}, dtype {s.cfg.dtype}, timer {timer_for(s).kind}"
        )
        self.printer.header(title, labels)
