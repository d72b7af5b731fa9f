"""The harness every collective runs on: groups, buffers, warm-up, timing, checking, aggregation.

For each scope, op and size (and each variant: out-of-place then in-place, as nccl-tests):
  1. every group of the scope allocates its buffers and fills them with known inputs;
  2. warm-up ops estimate the op time; the slowest estimate anywhere sets the iteration count;
  3. a barrier over all ranks, then one inside the group, so all groups start together;
  4. `iters` back-to-back ops, each timed (CUDA events on NCCL, host clock on gloo);
  5. untimed ops on fresh known inputs are checked on every rank (`wrong` elements);
  6. rank 0 gathers every rank's samples and reports the slowest rank's median.
Control traffic (estimates, barriers, gathers) always runs on a gloo group, so it never
disturbs the NCCL communicators under test.
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from commbench import __version__
from commbench.collectives import get_collective
from commbench.collectives.base import PERIOD, Buffers, Collective, Counts, GroupContext, Variant, pattern
from commbench.config import DTYPES, GLOO_DTYPES, RunConfig
from commbench.data.rundir import RunWriter, new_run_id, utc_now
from commbench.data.records import RowFacts, Stats, build_record
from commbench.data.schema import NodeInfo, Record, RunInfo
from commbench.errors import CommbenchError, RankFailure, UsageError
from commbench.faults import corrupt_if_asked, delayed_if_asked, die_if_asked, hang_if_asked
from commbench.launch import RankEnv
from commbench.placement import applicable_scopes, scope_groups
from commbench.report import TablePrinter
from commbench.timing import CudaEventTimer, HostTimer, choose_iters
from commbench.topology import discover_node, merge_nodes, node_name, place_ranks
from commbench.watchdog import Diagnosis, RankMonitor, exit_now

# gloo's own timeout fires this much after the watchdog's, so the watchdog can name the culprit
GLOO_TIMEOUT_MARGIN_S = 30.0


@dataclass
class Session:
    """One rank's distributed state."""

    cfg: RunConfig
    env: RankEnv
    backend: str
    device: torch.device
    nodes: list[NodeInfo]
    topology: dict | None = None
    monitor: RankMonitor | None = None
    groups: dict[tuple[int, ...], object] = field(default_factory=dict)

    @property
    def rank(self) -> int:
        return self.env.rank

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def group(self, ranks: tuple[int, ...]):
        """The communicator under test for these ranks; every rank creates every group, in order."""
        if ranks not in self.groups:
            self.groups[ranks] = dist.new_group(list(ranks), backend=self.backend)
        return self.groups[ranks]


def open_session(cfg: RunConfig, env: RankEnv) -> Session:
    dist.init_process_group(
        "gloo", init_method=f"tcp://{env.master_addr}:{env.master_port}",
        rank=env.rank, world_size=env.world_size, timeout=timedelta(seconds=cfg.timeout_s + GLOO_TIMEOUT_MARGIN_S),
    )
    backend = _agree_on_backend(cfg, env)
    if backend == "gloo" and cfg.dtype not in GLOO_DTYPES:
        raise UsageError(f"dtype {cfg.dtype} is not supported by gloo; use --dtype float or run on GPUs with NCCL")
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", env.local_rank)
        torch.cuda.set_device(device)
    identity = (env.rank, env.local_rank, node_name(cfg.node_name))
    identities: list = [None] * env.world_size
    dist.all_gather_object(identities, identity)
    nodes = [NodeInfo(**placement.to_dict()) for placement in place_ranks(identities)]
    if device.type == "cpu":
        _share_cores(env, nodes)
    session = Session(cfg=cfg, env=env, backend=backend, device=device, nodes=nodes)
    session.topology = _cluster_topology(identity, identities)
    return session


def _share_cores(env: RankEnv, nodes: list[NodeInfo]) -> None:
    """Give each CPU rank its share of the node's cores: with torch's default (all cores per rank),
    ranks that share a node fight over cores in every copy and reduction, and times balloon."""
    if "OMP_NUM_THREADS" in os.environ:
        return  # the user decided
    ranks_here = next(len(node.ranks) for node in nodes if env.rank in node.ranks)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // ranks_here))


def _cluster_topology(identity, identities) -> dict:
    """Local rank 0 of each node discovers it (all its GPUs are visible there); rank 0 merges."""
    mine = discover_node(identity[2]) if identity[1] == 0 else None
    gathered: list = [None] * len(identities)
    dist.all_gather_object(gathered, mine)
    return merge_nodes([t for t in gathered if t is not None], identities).to_dict()


def _agree_on_backend(cfg: RunConfig, env: RankEnv) -> str:
    has_gpu = torch.cuda.is_available() and dist.is_nccl_available() and env.local_rank < torch.cuda.device_count()
    flag = torch.tensor([1 if has_gpu else 0])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    everyone_has_gpu = bool(flag.item())
    if cfg.backend == "nccl" and not everyone_has_gpu:
        raise UsageError("--backend nccl needs one GPU per rank and a CUDA build of torch; some rank has none")
    if cfg.backend == "auto":
        return "nccl" if everyone_has_gpu else "gloo"
    return cfg.backend


@dataclass(frozen=True)
class Row:
    """One line of the table: an op on every group of a scope at one size."""

    scope: str
    collective: Collective
    groups: tuple[tuple[int, ...], ...]
    size: int
    counts: Counts


def plan_rows(session: Session) -> list[Row]:
    """Every row of the sweep, identical on all ranks (it decides which collectives they call)."""
    cfg = session.cfg
    elt = DTYPES[cfg.dtype][1]
    scopes = cfg.scopes or applicable_scopes(session.nodes)
    rows = []
    for scope in scopes:
        for op in cfg.ops:
            collective = get_collective(op)
            groups = _groups_for(collective, scope_groups(scope, session.nodes))
            if not groups:
                continue
            n = len(groups[0])
            for size in cfg.sizes():
                counts = collective.counts(size // elt, n, elt)
                if counts.param > 0:
                    rows.append(Row(scope, collective, groups, size, counts))
    return rows


def _groups_for(collective: Collective, groups: list[list[int]]) -> tuple[tuple[int, ...], ...]:
    if collective.max_group_size:
        groups = [g[: collective.max_group_size] for g in groups]
    groups = [g for g in groups if len(g) >= collective.min_group_size]
    sizes = {len(g) for g in groups}
    if len(sizes) > 1:  # uneven nodes: keep the groups of the common size so rows stay comparable
        common = max(sizes, key=lambda s: sum(len(g) == s for g in groups))
        groups = [g for g in groups if len(g) == common]
    return tuple(tuple(g) for g in groups)


def my_context(session: Session, row: Row) -> GroupContext | None:
    mine = None
    for ranks in row.groups:
        group = session.group(ranks)  # every rank takes part in creating every group
        if session.rank in ranks:
            mine = GroupContext(group=group, rank=ranks.index(session.rank), size=len(ranks), global_ranks=ranks)
    return mine


def allocate(session: Session, row: Row, variant: Variant, ctx: GroupContext) -> Buffers:
    dtype = getattr(torch, DTYPES[session.cfg.dtype][0])
    counts = row.counts
    if not variant.in_place:
        return Buffers(send=torch.empty(counts.send, dtype=dtype, device=session.device),
                       recv=torch.empty(counts.recv, dtype=dtype, device=session.device))
    whole = torch.empty(max(counts.send, counts.recv), dtype=dtype, device=session.device)
    send_at, recv_at = row.collective.in_place_offsets(counts, ctx.rank)
    return Buffers(send=whole[send_at: send_at + counts.send], recv=whole[recv_at: recv_at + counts.recv])


def fill_known_inputs(buffers: Buffers, ctx: GroupContext) -> None:
    buffers.recv.zero_()  # in-place send views live inside recv's allocation: zero first
    buffers.send.copy_(pattern(ctx.rank, buffers.send.numel(), buffers.send.dtype, buffers.send.device))


def op_callable(session: Session, collective: Collective, buffers: Buffers, ctx: GroupContext, variant: Variant):
    if collective.out_of_place_copies and not variant.in_place:
        def copy_then_op():
            buffers.recv.copy_(buffers.send)
            collective.launch(buffers, ctx, variant)
        return copy_then_op
    if variant.in_place and session.backend in collective.in_place_staged_on:
        scratch = torch.empty_like(buffers.send)

        def staged_op():
            scratch.copy_(buffers.send)
            collective.launch(Buffers(send=scratch, recv=buffers.recv), ctx, variant)
        return staged_op
    return lambda: collective.launch(buffers, ctx, variant)


# largest integer each float type holds exactly: sums of the known inputs up to it compare exactly
_EXACT_UP_TO = {torch.float64: 2 ** 53, torch.float32: 2 ** 24, torch.float16: 2 ** 11, torch.bfloat16: 2 ** 8}


def count_wrong(result: torch.Tensor, expected: torch.Tensor, group_size: int) -> int:
    largest = (PERIOD - 1) * group_size  # the largest value a sum of known inputs can reach
    if not result.dtype.is_floating_point or largest <= _EXACT_UP_TO[result.dtype]:
        return int((result != expected).sum().item())  # NaN != NaN: a NaN counts as wrong
    # beyond the mantissa the collective's summation order rounds differently from ours
    tolerance = expected.float().abs() * torch.finfo(result.dtype).eps * group_size
    ok = (result.float() - expected.float()).abs() <= tolerance
    return int((~ok).sum().item())


def check(session: Session, row: Row, variant: Variant, ctx: GroupContext, buffers: Buffers, run_op) -> int:
    wrong = 0
    for _ in range(session.cfg.check_iters):
        fill_known_inputs(buffers, ctx)
        run_op()
        session.sync()
        corrupt_if_asked(session.rank, row.collective.name, buffers.recv)
        expected = row.collective.expected(ctx, row.counts, buffers.recv.dtype, buffers.recv.device, variant)
        wrong += count_wrong(buffers.recv, expected, ctx.size)
    return wrong


def _timer(session: Session):
    if session.device.type == "cuda":
        return CudaEventTimer(torch)
    return HostTimer(session.sync)


def _graphed(run_op):
    """Capture one op in a CUDA graph, so each iteration is one cheap graph launch."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run_op()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run_op()
    return graph.replay


@dataclass(frozen=True)
class Measured:
    """One variant of one row on this rank: [samples..., wrong] (None outside every group)."""

    values: list[float] | None
    iters: int
    warmups: int


def measure(session: Session, row: Row, variant: Variant) -> Measured:
    cfg = session.cfg
    ctx = my_context(session, row)
    estimate = torch.zeros(1, dtype=torch.float64)
    if ctx is not None:
        hang_if_asked(session.rank, row.collective.name)
        die_if_asked(session.rank, row.collective.name)
        if session.monitor:  # sweeps have one; benchmarks that call measure() directly may not
            session.monitor.progress(f"{row.collective.name} {row.scope} {row.size} B {variant.label}, first call")
        buffers = allocate(session, row, variant, ctx)
        fill_known_inputs(buffers, ctx)
        run_op = op_callable(session, row.collective, buffers, ctx, variant)
        if cfg.cuda_graph and session.device.type == "cuda":
            run_op = _graphed(run_op)
        run_op = delayed_if_asked(session.rank, row.collective.name, run_op)
        estimate[0] = HostTimer(session.sync).time(run_op, 1)[0]
    dist.all_reduce(estimate, op=dist.ReduceOp.MAX)  # every group warms up and times alike
    warmups = 1
    if estimate.item() < cfg.time_budget_ms * 1000 and cfg.warmup > 1:
        # more warm-up only where one op is short: a long op has warmed everything up already
        warmups = cfg.warmup
        more = HostTimer(session.sync).time(run_op, cfg.warmup - 1) if ctx is not None else []
        estimate[0] = min([estimate.item()] + more) if ctx is not None else 0.0
        dist.all_reduce(estimate, op=dist.ReduceOp.MAX)
    iters = cfg.iters or choose_iters(estimate.item(), cfg.time_budget_ms, cfg.min_iters, cfg.max_iters)
    dist.barrier()
    if ctx is None:
        return Measured(None, iters, warmups)
    dist.barrier(group=ctx.group) if session.backend == "gloo" else _device_barrier(session, ctx)
    samples = _timer(session).time(run_op, iters)
    wrong = check(session, row, variant, ctx, buffers, run_op) if cfg.check_iters else -1
    return Measured(samples + [float(wrong)], iters, warmups)


def _device_barrier(session: Session, ctx: GroupContext) -> None:
    token = torch.zeros(1, device=session.device)
    dist.all_reduce(token, group=ctx.group)
    session.sync()


def gather_to_rank0(session: Session, measured: Measured) -> torch.Tensor | None:
    """Every rank's [samples..., wrong] as one (world, iters + 2) tensor on rank 0; column -1 says
    whether the rank took part (ranks outside every group send NaNs)."""
    iters = measured.iters
    mine = torch.full((iters + 2,), float("nan"), dtype=torch.float64)
    if measured.values is not None:
        mine[: iters + 1] = torch.tensor(measured.values, dtype=torch.float64)
        mine[-1] = 1.0
    gathered = [torch.empty_like(mine) for _ in range(session.env.world_size)] if session.rank == 0 else None
    dist.gather(mine, gathered, dst=0)
    return torch.stack(gathered) if gathered is not None else None


def to_record(session: Session, row: Row, variant: Variant, table: torch.Tensor, measured: Measured) -> Record:
    cfg, iters = session.cfg, measured.iters
    members = [rank for group in row.groups for rank in group]
    divisor = 2.0 if variant.round_trip else 1.0
    per_rank = {rank: Stats.of(table[rank, :iters].numpy() / divisor) for rank in members}
    slowest = max(members, key=lambda rank: per_rank[rank].median)
    n = len(row.groups[0])
    wrong_values = table[members, iters]
    wrong = -1 if bool((wrong_values < 0).any()) else int(wrong_values.sum().item())
    return build_record(
        row_facts(session, row, variant, iters, measured.warmups), per_rank[slowest],
        row.collective.busbw_factor(n, variant), wrong=wrong, slowest_rank=slowest,
        time_us_mean_nccl=sum(per_rank[r].mean for r in members) / len(members),
    )


def row_facts(session: Session, row: Row, variant: Variant, iters: int, warmups: int, timer: str | None = None) -> RowFacts:
    """The row's columns left of the times, as nccl-tests prints them."""
    return RowFacts(
        op=row.collective.name, scope=row.scope, group_size=len(row.groups[0]), n_groups=len(row.groups),
        size_bytes=row.counts.size_bytes(DTYPES[session.cfg.dtype][1]), count=row.counts.param,
        dtype=session.cfg.dtype, redop=row.collective.redop, root=0 if row.collective.name == "broadcast" else -1,
        in_place=variant.in_place, direction=variant.direction, iters=iters, warmup=warmups,
        timer=timer or _timer(session).kind,
    )


def run_info(session: Session, run_id: str, kind: str) -> RunInfo:
    return RunInfo(
        run_id=run_id, kind=kind, created=utc_now(), backend=session.backend, world_size=session.env.world_size,
        nodes=session.nodes, args={**_jsonable(session.cfg), "launcher": session.env.launcher},
        versions=software_versions(session.backend), env=captured_env(), topology=session.topology,
    )


def _jsonable(cfg: RunConfig) -> dict:
    import json

    return json.loads(cfg.to_json())


def software_versions(backend: str) -> dict:
    versions = {"commbench": __version__, "torch": torch.__version__, "python": sys.version.split()[0]}
    if torch.cuda.is_available():
        versions["cuda"] = torch.version.cuda
        if backend == "nccl":
            versions["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        versions["gpu"] = torch.cuda.get_device_name(0)
        try:
            import pynvml

            pynvml.nvmlInit()
            versions["driver"] = pynvml.nvmlSystemGetDriverVersion()
        except Exception:  # no NVML on this host: the driver version is simply unknown
            pass
    return versions


def captured_env() -> dict:
    prefixes = ("NCCL_", "GLOO_", "TORCH_", "CUDA_VISIBLE", "MASTER_", "SLURM_JOB", "SLURM_NNODES", "SLURM_NTASKS", "OMP_NUM")
    return {key: value for key, value in sorted(os.environ.items()) if key.startswith(prefixes)}


class Sweep:
    """Drives the rows; rank 0 prints, shows progress and writes the run directory."""

    kind = "sweep"
    command = "run"  # the subcommand, for messages

    def __init__(self, session: Session):
        self.session = session
        self.rows = self.plan()
        self.writer: RunWriter | None = None
        self.printer = TablePrinter() if session.rank == 0 else None
        self.total_wrong = 0

    def run(self) -> int:
        session = self.session
        run_id = _broadcast_str(session.cfg.run_id or new_run_id())
        refusal = ""
        if session.rank == 0:
            try:
                self.writer = RunWriter(session.cfg.out_dir, run_info(session, run_id, self.kind))
            except UsageError as exc:
                refusal = str(exc)
        refusal = _broadcast_str(refusal)  # every rank stops together, before any collective under test
        if refusal:
            raise UsageError(refusal)
        hosts = {rank: node.hostname for node in session.nodes for rank in node.ranks}
        self.monitor = session.monitor = RankMonitor(session.env.master_addr, session.env.master_port, session.rank,
                                   session.env.world_size, hosts, session.cfg.timeout_s, self._on_hang).start()
        try:
            with _progress(session.rank == 0 and session.cfg.progress, len(self.rows)) as progress:
                self._run_rows(progress)
        except (RuntimeError, dist.DistError) as exc:  # a collective failed: find out who is gone
            diagnosis = self.monitor.diagnose()
            reason = f"{diagnosis.text} [{_reason(exc)}]"
            self._finish(False, reason)
            raise RankFailure(reason, self.monitor.is_reporter(diagnosis)) from None
        except BaseException as exc:
            self._finish(False, _reason(exc))
            raise
        finally:
            self.monitor.stop()
        self._finish(True)
        if self.writer:
            self.report()
        if self.total_wrong:
            raise CommbenchError(f"{self.total_wrong} wrong elements: a collective returned bad data (rows marked in #wrong)")
        return 0

    def plan(self) -> list[Row]:
        return plan_rows(self.session)

    def report(self) -> None:
        self.printer.summary(str(self.writer.path))

    def _finish(self, complete: bool, reason: str | None = None) -> None:
        if self.writer:
            self.writer.finish(complete=complete, reason=reason)

    def _on_hang(self, diagnosis: Diagnosis) -> None:
        """Runs on the watchdog thread: record why, say it once, and leave."""
        self._finish(False, diagnosis.text)
        if self.monitor.is_reporter(diagnosis):
            print(f"commbench {self.command}: error: {diagnosis.text}", file=sys.stderr, flush=True)
        else:
            time.sleep(3)  # let the reporter print first: a launcher may stop it once any rank has exited
        exit_now(1)

    def _run_rows(self, progress) -> None:
        block = None
        for row in self.rows:
            if (row.scope, row.collective.name) != block:
                block = (row.scope, row.collective.name)
                self._header(row)
            records = []
            for variant in row.collective.variants:
                self.monitor.progress(f"{row.collective.name} {row.scope} {row.size} B {variant.label}")
                measured = measure(self.session, row, variant)
                table = gather_to_rank0(self.session, measured)
                if table is not None:
                    records.append(to_record(self.session, row, variant, table, measured))
            if records:
                self.total_wrong += sum(max(r.wrong, 0) for r in records)
                self.writer.add_records(records)
                self.printer.row(records)
            progress.advance(f"{row.scope} {row.collective.name} {row.size} B")
        # all ranks learn about bad data, so every rank exits non-zero together
        flag = torch.tensor([self.total_wrong], dtype=torch.int64)
        dist.broadcast(flag, src=0)
        self.total_wrong = int(flag.item())

    def _header(self, row: Row) -> None:
        if not self.printer:
            return
        s = self.session
        labels = tuple(v.label for v in row.collective.variants)
        n = len(row.groups[0])
        title = (f"{row.collective.name}: scope {row.scope}, {len(row.groups)} group(s) of {n} rank(s), "
                 f"backend {s.backend}, dtype {s.cfg.dtype}, timer {_timer(s).kind}")
        self.printer.header(title, labels)


def _broadcast_str(value: str) -> str:
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def _reason(exc: BaseException) -> str:
    """One line: the exception's first sentence, without gloo's source-file prefix."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    text = re.sub(r"^\[[^\]]*\.(cc|cpp|h):\d+\]\s*", "", str(exc).strip())
    text = text.split(". ")[0].splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {text}"


class _progress:
    """A rich progress bar on rank 0's stderr (a no-op elsewhere or when stderr is not a terminal)."""

    def __init__(self, enabled: bool, total: int):
        self.bar = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description:<32}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self.task = self.bar.add_task("starting", total=total)

    def __enter__(self):
        if self.bar:
            self.bar.start()
        return self

    def advance(self, description: str) -> None:
        if self.bar:
            self.bar.update(self.task, advance=1, description=description)

    def __exit__(self, *exc):
        if self.bar:
            self.bar.stop()
        return False


def run_rank(cfg: RunConfig, env: RankEnv, sweep_class: type[Sweep] | None = None) -> int:
    """Everything one rank does; every rank calls this. Errors are printed once, by one rank."""
    if sweep_class is None:
        from commbench.pairwise import PairwiseSweep

        sweep_class = PairwiseSweep if cfg.pairwise else Sweep
    prefix = f"commbench {sweep_class.command}: error:"
    try:
        code = sweep_class(open_session(cfg, env)).run()
    except RankFailure as exc:
        if exc.reporter:
            print(f"{prefix} {exc}", file=sys.stderr, flush=True)
        exit_now(exc.exit_code)  # a peer is gone: tearing the process group down could block
    except CommbenchError as exc:
        if env.rank == 0:
            print(f"{prefix} {exc}", file=sys.stderr, flush=True)
        code = exc.exit_code
    if dist.is_initialized():
        dist.destroy_process_group()
    return code
