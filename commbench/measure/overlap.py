"""The overlap driver (`commbench overlap`): a GEMM and a collective, alone and at once.

For each op and size (world scope, the sweep's declarations and out-of-place buffers):
  1. warm-up: `warmup` iterations of both at once, untimed;
  2. the GEMM alone, the collective alone, then both started together, `iters` iterations each,
     every phase behind a barrier on the gloo control group;
  3. one more iteration of both at once, on fresh known inputs, is checked on every rank
     (`wrong`, by the harness's check): a collective must still return the right data while a
     kernel runs beside it;
  4. rank 0 gathers every rank's medians (the harness's gather_rows) and reports the rank whose both-at-once time is largest.

How "at once" is arranged:
  GPU  the GEMM on its own CUDA stream, the collective issued from a second stream (NCCL's stream
       waits on that one, and that one on NCCL's completion); both wait on one start event, the
       current stream waits on both and records the end event. CUDA events on each stream time
       each operation's own duration. Iterations run back to back, as in the sweep.
  CPU  the GEMM in a worker thread (torch releases the GIL inside matmul), the collective in the
       calling thread (gloo runs it on its own threads and waits without the GIL); each thread
       times itself with the host clock. A control barrier precedes every iteration so that the
       ranks start each one together. The GEMM gets (cores / ranks on this node) threads.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch
import torch.distributed as dist

from commbench.collectives.base import Variant
from commbench.data.overlap import OverlapRecord, overlap_achieved
from commbench.data.records import Stats, build_record
from commbench.data.samples import samples_line
from commbench.measure.cores import usable_cores
from commbench.measure.harness import (
    Row,
    allocate,
    check,
    fill_known_inputs,
    gather_rows,
    my_context,
    op_callable,
    row_facts,
    scope_rows,
)
from commbench.measure.progress import Progress
from commbench.measure.report import OverlapPrinter
from commbench.measure.runner import MeasuredRun
from commbench.measure.session import Session


class Gemm:
    """out = A @ B with M = N = K = size, into a preallocated output: nothing is allocated while timed."""

    def __init__(self, size: int, device: torch.device):
        # tensor-core precision on GPU; CPUs multiply float32 far faster than bfloat16
        self.dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        generator = torch.Generator().manual_seed(0)
        self.a = torch.randn(size, size, generator=generator).to(device, self.dtype)
        self.b = torch.randn(size, size, generator=generator).to(device, self.dtype)
        self.out = torch.empty(size, size, device=device, dtype=self.dtype)
        self.size = size
        self.flops = 2.0 * size**3

    def __call__(self) -> None:
        torch.matmul(self.a, self.b, out=self.out)


def _us(seconds: float) -> float:
    return seconds * 1e6


class ThreadedOverlap:
    """CPU: the GEMM in one persistent worker thread, the collective in the calling thread."""

    kind = "host"

    def __init__(self, gemm: Gemm, threads: int, align_ranks):
        self.gemm = gemm
        self.align_ranks = align_ranks
        # OpenMP keeps its thread count per OS thread: a new thread would use every core and, with
        # several ranks per machine, oversubscribe them (a 256^3 GEMM then runs 30x slower)
        self.pool = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="commbench-gemm", initializer=torch.set_num_threads, initargs=(threads,)
        )

    def _timed_gemm(self) -> tuple[float, float]:
        start = time.perf_counter()
        self.gemm()
        return start, time.perf_counter()

    def compute_alone(self, iters: int) -> list[float]:
        samples = []
        for _ in range(iters):
            self.align_ranks()
            start, end = self.pool.submit(self._timed_gemm).result()
            samples.append(_us(end - start))
        return samples

    def comm_alone(self, run_op, iters: int) -> list[float]:
        samples = []
        for _ in range(iters):
            self.align_ranks()
            start = time.perf_counter()
            run_op()
            samples.append(_us(time.perf_counter() - start))
        return samples

    def together(self, run_op, iters: int) -> list[tuple[float, float, float]]:
        """(both, GEMM, collective) durations per iteration."""
        samples = []
        for _ in range(iters):
            self.align_ranks()
            begin = time.perf_counter()
            gemm = self.pool.submit(self._timed_gemm)
            comm_start = time.perf_counter()
            run_op()
            comm_end = time.perf_counter()
            gemm_start, gemm_end = gemm.result()
            samples.append(
                (_us(max(comm_end, gemm_end) - begin), _us(gemm_end - gemm_start), _us(comm_end - comm_start))
            )
        return samples


def _timed_event() -> torch.cuda.Event:
    return torch.cuda.Event(enable_timing=True)


def _elapsed_us(start: torch.cuda.Event, end: torch.cuda.Event) -> float:
    return start.elapsed_time(end) * 1000.0


class StreamOverlap:
    """GPU: the GEMM on one CUDA stream, the collective issued from another, timed by events."""

    kind = "cuda_event"

    def __init__(self, gemm: Gemm, device: torch.device):
        self.gemm = gemm
        self.compute_stream = torch.cuda.Stream(device)
        self.comm_stream = torch.cuda.Stream(device)

    def _alone(self, stream: torch.cuda.Stream, op, iters: int) -> list[float]:
        marks = [(_timed_event(), _timed_event()) for _ in range(iters)]
        stream.wait_stream(torch.cuda.current_stream())  # inputs were written on the current stream
        with torch.cuda.stream(stream):
            for start, end in marks:
                start.record()
                op()
                end.record()
        torch.cuda.synchronize()
        return [_elapsed_us(start, end) for start, end in marks]

    def compute_alone(self, iters: int) -> list[float]:
        return self._alone(self.compute_stream, self.gemm, iters)

    def comm_alone(self, run_op, iters: int) -> list[float]:
        return self._alone(self.comm_stream, run_op, iters)

    def together(self, run_op, iters: int) -> list[tuple[float, float, float]]:
        """(both, GEMM, collective) durations per iteration; iteration i+1 starts when both of i ended."""
        main = torch.cuda.current_stream()
        marks = []
        for _ in range(iters):
            begin, end = _timed_event(), _timed_event()
            spans = []
            begin.record(main)
            for stream, op in ((self.compute_stream, self.gemm), (self.comm_stream, run_op)):
                start, stop = _timed_event(), _timed_event()
                stream.wait_event(begin)
                with torch.cuda.stream(stream):
                    start.record()
                    op()
                    stop.record()
                spans.append((start, stop))
            main.wait_stream(self.compute_stream)
            main.wait_stream(self.comm_stream)
            end.record(main)
            marks.append((begin, end, spans))
        torch.cuda.synchronize()
        return [
            (_elapsed_us(begin, end), _elapsed_us(*spans[0]), _elapsed_us(*spans[1])) for begin, end, spans in marks
        ]


@dataclass
class RankFigures:
    """One rank's medians (us) for one row, and the wrong elements it found."""

    compute: float
    comm: Stats
    comm_samples: list[float]  # per iteration, the collective alone: kept in samples.jsonl
    both: float
    compute_during_comm: float
    comm_during_compute: float
    wrong: int

    def as_row(self) -> torch.Tensor:
        """The figures as one float64 row, the shape the harness gathers (gather_rows)."""
        head = [self.compute, self.both, self.compute_during_comm, self.comm_during_compute, float(self.wrong)]
        return torch.tensor(head + self.comm_samples, dtype=torch.float64)

    @classmethod
    def from_row(cls, row: torch.Tensor) -> RankFigures:
        compute, both, compute_during, comm_during, wrong, *samples = row.tolist()
        return cls(
            compute=compute,
            comm=Stats.of(samples),
            comm_samples=samples,
            both=both,
            compute_during_comm=compute_during,
            comm_during_compute=comm_during,
            wrong=int(wrong),
        )


def gemm_threads(session: Session) -> int:
    """CPU threads for this rank's GEMM: the cores shared evenly among the ranks of this node."""
    if session.device.type == "cuda":
        return 0
    return max(1, usable_cores() // session.ranks_on_my_node())


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


class OverlapDriver:
    """Overlap rows: the configured ops at every size on the world group, each beside a GEMM."""

    kind = "overlap"
    command = "overlap"

    def __init__(self, session: Session):
        self.session = session
        self.rows = scope_rows(session)
        self.printer = OverlapPrinter() if session.rank == 0 else None
        self.threads = gemm_threads(session)
        if self.threads:
            torch.set_num_threads(self.threads)
        self.gemm = Gemm(session.cfg.gemm_size, session.device)
        if session.device.type == "cuda":
            self.overlap = StreamOverlap(self.gemm, session.device)
        else:
            self.overlap = ThreadedOverlap(self.gemm, self.threads, dist.barrier)

    def report(self, run: MeasuredRun) -> None:
        self.printer.summary(str(run.writer.path), run.writer.records)

    def measure_rows(self, run: MeasuredRun, progress: Progress) -> None:
        op = None
        for row in self.rows:
            if self.printer and row.collective.name != op:
                op = row.collective.name
                self.printer.header(self._title(row))
            run.monitor.progress(f"overlap {row.collective.name} {row.size} B")
            variant = row.collective.variants[0]
            gathered = self._gather(self._measure(row, variant))
            if gathered is not None:
                record = self._record(row, variant, gathered)
                run.add([record], [_kept_samples(record, gathered)])
                self.printer.row(record)
            progress.advance(f"overlap {row.collective.name} {row.size} B")

    def _phase_start(self) -> None:
        self.session.sync()
        dist.barrier()

    def _measure(self, row: Row, variant: Variant) -> RankFigures:
        session, cfg, overlap = self.session, self.session.cfg, self.overlap
        ctx = my_context(session, row)  # the world group: every rank is in it
        buffers = allocate(session, row, variant, ctx)
        fill_known_inputs(buffers, ctx)
        run_op = op_callable(session, row.collective, buffers, ctx, variant)
        self._phase_start()
        overlap.together(run_op, cfg.warmup)
        self._phase_start()
        compute = overlap.compute_alone(cfg.iters)
        self._phase_start()
        comm = overlap.comm_alone(run_op, cfg.iters)
        self._phase_start()
        both, compute_during, comm_during = zip(*overlap.together(run_op, cfg.iters))
        # checked under overlap: fresh known inputs, one more iteration of both at once, per check

        def op_beside_gemm() -> None:
            self._phase_start()
            overlap.together(run_op, 1)

        wrong = check(session, row, variant, ctx, buffers, op_beside_gemm) if cfg.check_iters else -1
        return RankFigures(
            compute=statistics.median(compute),
            comm=Stats.of(comm),
            comm_samples=list(comm),
            both=statistics.median(both),
            compute_during_comm=statistics.median(compute_during),
            comm_during_compute=statistics.median(comm_during),
            wrong=wrong,
        )

    def _gather(self, mine: RankFigures) -> list[RankFigures] | None:
        rows = gather_rows(self.session, mine.as_row())
        return None if rows is None else [RankFigures.from_row(row) for row in rows]

    def _record(self, row: Row, variant: Variant, ranks: list[RankFigures]) -> OverlapRecord:
        cfg = self.session.cfg
        slowest = max(range(len(ranks)), key=lambda rank: ranks[rank].both)
        figures = ranks[slowest]
        comm = figures.comm
        raw_overlap = overlap_achieved(figures.compute, comm.median, figures.both)
        facts = row_facts(self.session, row, variant, cfg.iters, cfg.warmup, self.overlap.kind)
        wrong = -1 if any(r.wrong < 0 for r in ranks) else sum(r.wrong for r in ranks)  # -1: not checked
        return build_record(
            facts,
            comm,
            row.collective.busbw_factor(len(row.groups[0]), variant),
            record_class=OverlapRecord,
            time_us_mean_nccl=sum(r.comm.mean for r in ranks) / len(ranks),
            wrong=wrong,
            slowest_rank=slowest,
            gemm_size=self.gemm.size,
            gemm_dtype=_dtype_name(self.gemm.dtype),
            gemm_threads=self.threads,
            gemm_tflops=_ratio(self.gemm.flops, figures.compute) / 1e6,
            compute_us=figures.compute,
            comm_us=comm.median,
            both_us=figures.both,
            compute_during_comm_us=figures.compute_during_comm,
            comm_during_compute_us=figures.comm_during_compute,
            overlap=min(1.0, max(0.0, raw_overlap)),
            overlap_unclamped=raw_overlap,
            compute_slowdown=_ratio(figures.compute_during_comm, figures.compute),
            comm_slowdown=_ratio(figures.comm_during_compute, comm.median),
        )

    def _title(self, row: Row) -> str:
        s, size = self.session, self.gemm.size
        threads = f", {self.threads} thread(s)" if self.threads else ""
        return (
            f"{row.collective.name} beside a {size}x{size}x{size} {_dtype_name(self.gemm.dtype)} GEMM{threads}: "
            f"{len(row.groups[0])} rank(s), backend {s.backend}, dtype {s.cfg.dtype}, timer {self.overlap.kind}"
        )


def _kept_samples(record: OverlapRecord, ranks: list[RankFigures]) -> str:
    """The row's samples.jsonl line: the reported rank's collective-alone times and every rank's median."""
    return samples_line(
        record.model_dump(),
        record.slowest_rank,
        ranks[record.slowest_rank].comm_samples,
        list(range(len(ranks))),
        [figures.comm.median for figures in ranks],
    )


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
