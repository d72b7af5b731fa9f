"""What every measuring run does around its rows, whichever driver chose them.

A driver (commbench.measure.sweep, .pairwise, .overlap) says which rows to measure, how to
measure and record each, and what to print at the end. The runner, the same for all:
  - agrees on a run id and creates the run directory on rank 0 (every rank stops together if it
    cannot), then appends each row to it through `MeasuredRun.add`;
  - watches every rank (commbench.measure.watchdog): a rank that dies or hangs ends the run with
    one message naming it, and the run directory says why it is incomplete;
  - shows a progress bar on rank 0, and makes every rank exit non-zero when any record holds
    wrong elements.
Commands choose the driver; `run_rank` is what one rank runs.
"""

from __future__ import annotations

import gc
import os
import re
import signal
import sys
import threading
import time
from typing import Protocol

import torch
import torch.distributed as dist

from commbench.data.rundir import RunWriter, interrupted_reason, new_run_id
from commbench.data.schema import Record
from commbench.errors import WRITE_ERRORS, CommbenchError, RankFailure, UsageError, write_error
from commbench.measure.launch import RankEnv
from commbench.measure.options import RunConfig
from commbench.measure.progress import Progress
from commbench.measure.session import Session, broadcast_str, open_session, run_info
from commbench.measure.watchdog import Diagnosis, RankMonitor, exit_now

TERMINATED_REASON = "terminated"  # run.json's reason when SIGTERM ended the run


class Driver(Protocol):
    """What a measuring driver offers the runner; built with the rank's Session."""

    kind: str  # run.json's kind
    command: str  # the subcommand, for messages
    rows: list  # identical on every rank: they decide which collectives the ranks call

    def __init__(self, session: Session): ...

    def measure_rows(self, run: MeasuredRun, progress: Progress) -> None:
        """Measure every row, on every rank; rank 0 adds the records to `run`."""

    def report(self, run: MeasuredRun) -> None:
        """Rank 0, after a complete run: the summary on stdout."""


class MeasuredRun:
    """One run of one driver on one rank: its run directory (rank 0), watchdog and wrong-element count."""

    def __init__(self, session: Session, driver: Driver):
        self.session = session
        self.driver = driver
        self.writer: RunWriter | None = None
        self.monitor: RankMonitor | None = None
        self.total_wrong = 0
        self.finished = False  # run.json says complete or why not: a late SIGTERM must not rewrite it

    def add(self, records: list[Record], samples: list[str] = ()) -> None:
        """Rank 0: append these records and their samples lines to the run directory and count their
        wrong elements."""
        self.total_wrong += sum(max(r.wrong, 0) for r in records)
        try:
            self.writer.add_records(records, samples)
        except OSError as exc:
            if exc.errno not in WRITE_ERRORS:
                raise
            raise CommbenchError(write_error(exc)) from None

    def execute(self) -> int:
        session = self.session
        self._open_run_directory()
        hosts = {rank: node.hostname for node in session.nodes for rank in node.ranks}
        self.monitor = session.monitor = RankMonitor(
            session.env.master_addr,
            session.env.master_port,
            session.rank,
            session.env.world_size,
            hosts,
            session.cfg.timeout_s,
            self._on_hang,
        ).start()
        try:
            with Progress(session.rank == 0 and session.cfg.progress, len(self.driver.rows)) as progress:
                self.driver.measure_rows(self, progress)
                self._share_wrong_count()
        except (RuntimeError, dist.DistError) as exc:  # a collective failed: find out who is gone
            diagnosis = self.monitor.diagnose()
            reason = f"{diagnosis.text} [{_reason(exc)}]"
            self._finish(False, reason)
            raise RankFailure(reason, self.monitor.is_reporter(diagnosis), self.monitor.linger_s(diagnosis)) from None
        except KeyboardInterrupt:
            kept = len(self.writer.records) if self.writer else 0
            self._finish(False, interrupted_reason(kept, len(self.driver.rows)))
            raise
        except BaseException as exc:
            self._finish(False, _reason(exc))
            raise
        finally:
            self.monitor.stop()
        self._finish(True)
        if self.writer:
            self.driver.report(self)
            self._ingest()
        if self.total_wrong:
            raise CommbenchError(
                f"{self.total_wrong} wrong elements: a collective returned bad data (rows marked in #wrong)"
            )
        return 0

    def _ingest(self) -> None:
        """--db: load the finished run into the results database. A failure is reported, not fatal:
        the run directory is complete and `commbench db ingest` can load it later."""
        if not self.session.cfg.db:
            return
        from commbench.data.store import ingest  # DuckDB loads only on rank 0 of a run asked to ingest

        try:
            report = ingest(self.session.cfg.db, [self.writer.path])
            print(f"# Database: {self.session.cfg.db} ({report.summary()})", flush=True)
        except CommbenchError as exc:
            print(
                f"commbench {self.driver.command}: warning: not ingested into {self.session.cfg.db}: {exc}",
                file=sys.stderr,
                flush=True,
            )

    def _open_run_directory(self) -> None:
        session = self.session
        run_id = broadcast_str(session.cfg.run_id or new_run_id())
        refusal = ""
        if session.rank == 0:
            try:
                self.writer = RunWriter(session.cfg.out_dir, run_info(session, run_id, self.driver.kind))
            except UsageError as exc:
                refusal = str(exc)
            except OSError as exc:  # a full or read-only --out: one line, not a rank blamed on the network
                if exc.errno not in WRITE_ERRORS:
                    raise
                refusal = write_error(exc)
        refusal = broadcast_str(refusal)  # every rank stops together, before any collective under test
        if refusal:
            raise UsageError(refusal)

    def _share_wrong_count(self) -> None:
        """Every rank learns rank 0's count, so all exit non-zero together on bad data."""
        flag = torch.tensor([self.total_wrong], dtype=torch.int64)
        dist.broadcast(flag, src=0)
        self.total_wrong = int(flag.item())

    def _finish(self, complete: bool, reason: str | None = None) -> None:
        if not self.writer:
            return
        self.finished = True
        try:
            self.writer.finish(complete=complete, reason=reason)
        except OSError as exc:  # the disk filled: the run directory keeps its last whole files
            if complete or exc.errno not in WRITE_ERRORS:
                raise

    def _on_hang(self, diagnosis: Diagnosis) -> None:
        """Runs on the watchdog thread: record why, say it once, and leave."""
        self._finish(False, diagnosis.text)
        if self.monitor.is_reporter(diagnosis):
            print(f"commbench {self.driver.command}: error: {diagnosis.text}", file=sys.stderr, flush=True)
        else:
            time.sleep(max(3.0, self.monitor.linger_s(diagnosis)))  # the reporter prints first
        exit_now(1)


def _reason(exc: BaseException) -> str:
    """One line: the exception's first sentence, without gloo's source-file prefix."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    text = re.sub(r"^\[[^\]]*\.(cc|cpp|h):\d+\]\s*", "", str(exc).strip())
    text = text.split(". ")[0].splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {text}"


class _TerminateWatch:
    """SIGTERM (a launcher stopping us, scancel, a job's time limit, the local launcher's death) ends
    the run from a thread of its own: the main thread may sit in a collective that never returns,
    where no Python signal handler would run. Python's C-level handler writes the signal's number to
    the wakeup fd whichever thread the kernel chose; this thread reads it, finishes the run
    directory as `reason: "terminated"` under the writer's lock (so records.jsonl, records.csv and
    samples.jsonl stay the same rows) and leaves."""

    def __init__(self):
        self.run: MeasuredRun | None = None
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        signal.signal(signal.SIGTERM, lambda signum, frame: None)  # the work is the thread's
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        threading.Thread(target=self._wait, args=(read_end,), name="commbench-sigterm", daemon=True).start()

    def _wait(self, read_end: int) -> None:
        while signal.SIGTERM not in os.read(read_end, 64):
            pass
        run = self.run
        if run is not None and not run.finished:  # a run already finished keeps what it says
            run._finish(False, TERMINATED_REASON)
            if run.session.rank == 0 and run.session.env.launcher != "commbench":  # our launcher says it itself
                print(
                    f"commbench {run.driver.command}: terminated (SIGTERM); the run directory keeps the rows "
                    "measured so far",
                    file=sys.stderr,
                    flush=True,
                )
        exit_now(128 + signal.SIGTERM)


def run_rank(cfg: RunConfig, env: RankEnv, driver_class: type[Driver]) -> int:
    """Everything one rank does; every rank calls this. Errors are printed once, by one rank."""
    prefix = f"commbench {driver_class.command}: error:"
    watch = _TerminateWatch()
    try:
        watch.run = MeasuredRun(session := open_session(cfg, env), driver_class(session))
        code = watch.run.execute()
    except RankFailure as exc:
        if exc.reporter:
            print(f"{prefix} {exc}", file=sys.stderr, flush=True)
        else:
            time.sleep(exc.linger_s)  # leaving first would let our launcher stop the reporter unheard
        exit_now(exc.exit_code)  # a peer is gone: tearing the process group down could block
    except CommbenchError as exc:
        if env.rank == 0:
            print(f"{prefix} {exc}", file=sys.stderr, flush=True)
        code = exc.exit_code
    release_process_groups(watch)
    return code


def release_process_groups(watch: _TerminateWatch) -> None:
    """Tear the process groups down while the interpreter is whole. The SIGTERM thread keeps the
    watch alive, and through it the run's session and its groups; a gloo group left to interpreter
    finalization has its worker threads destroyed there, which aborts the rank ("terminate called
    without an active exception", exit 134 after a run that measured every row)."""
    run, watch.run = watch.run, None  # the run is finished: the SIGTERM thread has nothing to keep
    if run is not None:
        run.session.groups.clear()
    del run
    if dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()  # the groups' C++ objects (and their threads) go now, not at finalization
