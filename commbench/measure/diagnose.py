"""The real-rank driver of `commbench diagnose`: the strategy (commbench.diagnose.strategy) run over
live ranks, one rank per node.

It does not open a world process group: a world collective dies with any node, and a diagnosis
must go on without a node that stops answering. Instead:
  control plane  the rendezvous TCPStore, hosted by rank 0. Every rank posts who it is; rank 0
                 runs the strategy and, per round, posts a plan (groups of ranks, size, iterations,
                 timeout). Every rank waits for each plan, runs its part and posts its result;
                 rank 0 collects the results until the round's timeout and calls the members that
                 did not answer `hung`. A last plan, "done", releases every rank.
  data plane     per round, each group opens its own gloo (or NCCL) process group from a
                 PrefixStore over the same store and runs a send/recv ring: every member sends to
                 the next and receives from the previous, warm-up then timed iterations. A group
                 with a dead member times out inside its own ops; only that group is lost.
  link health    each member reads the node's TCP counters around its part (linkhealth.py); with
                 one rank per node and disjoint groups, a node's counters are its group's traffic.
With several ranks on a node, the node's lowest rank represents it and the others wait for "done".
The NCCL path (every rank has a GPU) is written but has not run on a GPU: see the README.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from commbench.analysis.pairwise import retransmit_percent
from commbench.data.rundir import new_run_id, utc_now
from commbench.diagnose import scheduler
from commbench.diagnose.config import DiagnoseConfig
from commbench.diagnose.hostlist import expand
from commbench.diagnose.report import json_ready, save_run, text, to_dict
from commbench.diagnose.stragglers import STRAGGLER_RATIO, Straggler, ring_stragglers
from commbench.diagnose.strategy import RoundResult, Thresholds, diagnose
from commbench.errors import CommbenchError, UsageError
from commbench.measure.faults import delayed_if_asked, die_if_asked, hang_if_asked
from commbench.measure.launch import RankEnv
from commbench.measure.linkhealth import (
    moves_data_over_tcp,
    read_tcp_counters,
)
from commbench.topology import node_name

WHO, PLAN, RESULT, BYE = "diag/who/{}", "diag/plan/{}", "diag/result/{}/{}", "diag/bye/{}"
DATA_SHARE = 0.75  # of the round's timeout, for a member's part: it must answer before rank 0 stops waiting
POLL_S = 0.05
STARTUP_TIMEOUT_S = 300.0  # every rank must have posted who it is by then


@dataclass(frozen=True)
class Node:
    name: str
    rank: int  # the rank that represents the node


# -- every rank -----------------------------------------------------------------------------------


def run_rank(cfg: DiagnoseConfig, env: RankEnv) -> int:
    """What one rank runs; rank 0 prints the report. 0: diagnosis complete, 1: it could not complete."""
    try:
        store = next(
            dist.rendezvous(
                f"tcp://{env.master_addr}:{env.master_port}",
                env.rank,
                env.world_size,
                timeout=timedelta(seconds=STARTUP_TIMEOUT_S),
            )
        )[0]
    except (RuntimeError, ValueError) as exc:
        print(
            f"commbench diagnose: error: rank {env.rank} cannot reach the rendezvous store at "
            f"{env.master_addr}:{env.master_port}: {_first_line(exc)}",
            file=sys.stderr,
            flush=True,
        )
        return 1
    has_gpu = torch.cuda.is_available() and env.local_rank < torch.cuda.device_count()
    store.set(WHO.format(env.rank), json.dumps({"host": rank_node_name(cfg, env), "gpu": has_gpu}))
    if env.rank == 0:
        return Coordinator(store, cfg, env).run()
    return Member(store, cfg, env).follow()


def rank_node_name(cfg: DiagnoseConfig, env: RankEnv) -> str:
    """The node this rank stands for: its host (or --node-name); under the local launcher every rank
    is a node of its own (`<host>-rank<i>`), so `--nproc N` is a smoke test of N "nodes" on one host."""
    if env.launcher == "commbench":
        return f"{node_name(None)}-rank{env.rank}"
    return node_name(cfg.node_name)


class Member:
    """A rank that follows rank 0's plans until "done"."""

    def __init__(self, store, cfg: DiagnoseConfig, env: RankEnv):
        self.store, self.cfg, self.env = store, cfg, env

    def follow(self) -> int:
        round_no = 0
        while True:
            plan = self._next_plan(round_no)
            if plan is None:
                return 1
            if plan.get("done"):
                self._say_bye()
                return 0
            group = next((g for g in plan["groups"] if self.env.rank in g), None)
            if group is not None:
                outcome = run_ring_part(self.store, plan, group, self.env)
                try:
                    self.store.set(RESULT.format(round_no, self.env.rank), json.dumps(outcome))
                except RuntimeError as exc:  # cut off from rank 0: this node is the one that hung
                    return self._lost(exc)
            round_no += 1

    def _next_plan(self, round_no: int) -> dict | None:
        """Rank 0 posts a plan at least every round timeout (the first once every rank has said who it
        is); waiting much longer means it is gone."""
        key = PLAN.format(round_no)
        patience = 3 * self.cfg.timeout_s + 60 + (STARTUP_TIMEOUT_S if round_no == 0 else 0)
        try:
            self.store.wait([key], timedelta(seconds=patience))
            return json.loads(self.store.get(key))
        except RuntimeError as exc:
            self._lost(exc)
            return None

    def _say_bye(self) -> None:
        try:
            self.store.set(BYE.format(self.env.rank), "1")
        except RuntimeError:
            pass  # rank 0 stops waiting for us after a few seconds anyway

    def _lost(self, exc: BaseException) -> int:
        print(
            f"commbench diagnose: error: rank {self.env.rank} on {rank_node_name(self.cfg, self.env)} lost rank 0's "
            f"store ({_first_line(exc)}): this node lost its link, or rank 0 is gone",
            file=sys.stderr,
            flush=True,
        )
        return 1


# -- one group's part in a round ----------------------------------------------------------------------


def run_ring_part(store, plan: dict, group: Sequence[int], env: RankEnv) -> dict:
    """This rank's part of its group's ring: per-iteration seconds and the node's TCP counter deltas,
    or the error that stopped it (a peer gone, the time up)."""
    deadline = time.monotonic() + DATA_SHARE * plan["timeout_s"]
    hang_if_asked(env.rank, plan["label"])
    die_if_asked(env.rank, plan["label"])
    over_tcp = plan["count_tcp"] and moves_data_over_tcp(plan["backend"])
    before = read_tcp_counters() if over_tcp else None
    try:
        times = _ring(store, plan, list(group), env, deadline)
        error = None
    except (RuntimeError, TimeoutError) as exc:  # gloo and the store raise RuntimeError subclasses
        times, error = [], _first_line(exc)
    after = read_tcp_counters() if over_tcp else None
    delta = after - before if before is not None and after is not None else None
    return {
        "times": times,
        "error": error,
        "sent": delta.segments_sent if delta else None,
        "retransmitted": delta.retransmitted if delta else None,
    }


def _ring(store, plan: dict, group: list[int], env: RankEnv, deadline: float) -> list[float]:
    me, n = group.index(env.rank), len(group)
    # gloo moves one pair's two directions one after the other: a ring of 2 on one communicator ran
    # at half the link's rate each way (0.062 against 0.119 GB/s at 1 Gbit/s, emulated cluster), so
    # there each member sends on a communicator of its own
    pgs, device = [], None
    for k in range(2 if n == 2 else 1):
        prefix = dist.PrefixStore(f"diag/{plan['round']}/{group[0]}/{k}", store)
        pg, device = _process_group(prefix, me, n, plan["backend"], env, _left(deadline))
        pgs.append(pg)
    nxt, prev = (me + 1) % n, (me - 1) % n
    elements = max(1, plan["size"] // 4)
    send = torch.ones(elements, dtype=torch.float32, device=device)
    recv = torch.empty(elements, dtype=torch.float32, device=device)
    arrive = delayed_if_asked(env.rank, plan["label"], lambda: None)  # a compute straggler: late to every iteration
    times = []
    for i in range(plan["warmup"] + plan["iters"]):
        arrive()
        start = time.perf_counter()
        works = [pgs[me % len(pgs)].send([send], nxt, 0), pgs[prev % len(pgs)].recv([recv], prev, 0)]
        for work in works:
            work.wait(timedelta(seconds=_left(deadline)))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= plan["warmup"]:
            times.append(time.perf_counter() - start)
    return times


def _process_group(store, rank: int, size: int, backend: str, env: RankEnv, timeout_s: float):
    """The group's own communicator over `store` (no world group: a dead node must not stop the rest)."""
    if backend == "nccl":  # written, not run on a GPU yet
        device = torch.device("cuda", env.local_rank)
        torch.cuda.set_device(device)
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timedelta(seconds=timeout_s)
        return dist.ProcessGroupNCCL(store, rank, size, options), device
    return dist.ProcessGroupGloo(store, rank, size, timedelta(seconds=timeout_s)), torch.device("cpu")


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the round's time for this group is up")
    return left


# -- rank 0 ---------------------------------------------------------------------------------------


class StoreTester:
    """The strategy's Tester over live ranks: one round = one plan posted, every member's result collected."""

    def __init__(self, store, cfg: DiagnoseConfig, env: RankEnv, nodes: list[Node], backend: str):
        self.store, self.cfg, self.env, self.nodes, self.backend = store, cfg, env, nodes, backend
        self.round_no = 0  # plans posted (the screen's included): keys and communicators of each are its own
        self.rounds_done = 0  # the strategy's rounds, numbered as its report numbers them
        self.gone: set[int] = set()  # node indices that did not answer once: never waited for again

    def run_round(self, groups: Sequence[tuple[int, ...]], wait_for_silent: bool = False) -> RoundResult:
        self.rounds_done += 1
        rank_groups = [[self.nodes[n].rank for n in g] for g in groups]
        started = time.monotonic()
        if wait_for_silent:  # a recheck: the nodes asked about are waited for again
            self.gone -= {n for g in groups for n in g}
        answers = self._play(rank_groups, f"round{self.rounds_done}")
        result = self._result(groups, rank_groups, answers)
        self._progress(f"round {self.rounds_done}: {len(groups)} group(s)", result.hung, time.monotonic() - started)
        return result

    def straggler_screen(self) -> dict:
        """Step 1: one ring over every node, every node's per-iteration times; who is slow itself, and
        who the others wait for (commbench.diagnose.stragglers.ring_stragglers)."""
        ranks = [node.rank for node in self.nodes]
        started = time.monotonic()
        answers = self._play([ranks], "screen")
        hung = {i for i, node in enumerate(self.nodes) if node.rank not in answers}
        self.gone |= hung
        self._progress(f"straggler screen: a ring of {len(ranks)}", hung, time.monotonic() - started)
        broken = [answers[rank]["error"] for rank in ranks if rank in answers and answers[rank]["error"]]
        if hung or broken:
            return {
                "note": "the screen's ring did not complete: "
                + (f"no answer from {', '.join(self.nodes[i].name for i in sorted(hung))}" if hung else broken[0])
            }
        slow, waited_for = ring_stragglers([answers[rank]["times"] for rank in ranks])
        return {
            "iterations": self.cfg.iters,
            "size": self.cfg.size,
            "ratio": STRAGGLER_RATIO,  # the threshold used
            "slow": [_straggler(self.nodes[s.process].name, s) for s in slow],
            "waited_for": [_straggler(self.nodes[s.process].name, s) for s in waited_for],
        }

    def _play(self, rank_groups: list[list[int]], label: str) -> dict[int, dict]:
        """Post one plan, run rank 0's own part, collect the others' until the round's timeout."""
        plan = {
            "round": self.round_no,
            "label": label,
            "groups": rank_groups,
            "size": self.cfg.size,
            "iters": self.cfg.iters,
            "warmup": self.cfg.warmup,
            "timeout_s": self.cfg.timeout_s,
            "backend": self.backend,
            # local ranks share one host's counters: they would not be any group's own
            "count_tcp": self.env.launcher != "commbench",
        }
        started = time.monotonic()
        self.store.set(PLAN.format(self.round_no), json.dumps(plan))
        answers: dict[int, dict] = {}
        mine = next((g for g in rank_groups if self.env.rank in g), None)
        if mine is not None:
            answers[self.env.rank] = run_ring_part(self.store, plan, mine, self.env)
        waiting = {rank for g in rank_groups for rank in g} - set(answers)
        answers.update(self._collect(waiting, started + self.cfg.timeout_s))
        self.round_no += 1
        return answers

    def _progress(self, what: str, hung: set[int] | frozenset[int], seconds: float) -> None:
        """One line per round on stderr (stdout is the report): a long diagnosis shows where it is."""
        silent = ", ".join(self.nodes[n].name for n in sorted(hung))
        print(
            f"# {what} in {seconds:.1f} s" + (f"; no answer from {silent}" if silent else ""),
            file=sys.stderr,
            flush=True,
        )

    def _collect(self, waiting: set[int], deadline: float) -> dict[int, dict]:
        """Results as they come in, until every member answered or the round's time is up."""
        answers = {}
        node_of = {node.rank: i for i, node in enumerate(self.nodes)}
        waiting = {rank for rank in waiting if node_of[rank] not in self.gone}
        round_no = self.round_no
        while waiting and time.monotonic() < deadline:
            for rank in sorted(waiting):
                key = RESULT.format(round_no, rank)
                if self.store.check([key]):  # get() would block on a rank that never answers
                    answers[rank] = json.loads(self.store.get(key))
                    waiting.discard(rank)
            time.sleep(POLL_S)
        return answers

    def _result(self, groups, rank_groups, answers: dict[int, dict]) -> RoundResult:
        node_of = {node.rank: i for i, node in enumerate(self.nodes)}
        hung = {node_of[rank] for g in rank_groups for rank in g if rank not in answers}
        self.gone |= hung
        busbw, loss = np.full(len(groups), np.nan), np.full(len(groups), np.nan)
        for i, ranks in enumerate(rank_groups):
            if any(rank not in answers for rank in ranks):
                continue  # the strategy marks the group hung
            parts = [answers[rank] for rank in ranks]
            busbw[i] = group_busbw(parts, self.cfg.size)
            loss[i] = group_retransmit_pct(parts)
        return RoundResult(busbw, loss, frozenset(hung))


def _decisive(item: dict) -> str:
    """The evidence that decided a verdict, short: ' (0.31 of the fleet median, round 4)'."""
    last = item["evidence"][-1] if item.get("evidence") else {}
    share, round_no = last.get("of_median"), last.get("round")
    if share is None or math.isnan(share):
        return ""
    return f" ({share:.2f} of the fleet median, round {round_no})"


def _straggler(name: str, found: Straggler) -> dict:
    return {
        "node": name,
        "iterations_slow": found.sizes_slow,
        "iterations": found.sizes,
        "ratio": round(found.median_ratio, 3),
    }


def group_busbw(parts: list[dict], size: int) -> float:
    """A ring of send/recv moves `size` bytes over every edge per iteration (busbw factor 1): bytes
    over the slowest member's median iteration time, GB/s. A group whose members all answered but
    could not finish within the round's time gets 0: slower than anything measurable."""
    if any(part["error"] or not part["times"] for part in parts):
        return 0.0
    slowest = max(statistics.median(part["times"]) for part in parts)
    return size / slowest / 1e9


def group_retransmit_pct(parts: list[dict]) -> float:
    """Share of the group's TCP segments re-sent, %: every member node's counters summed; NaN when
    some member could not read its counters or the transport is not TCP."""
    if any(part["sent"] is None or part["retransmitted"] is None for part in parts):
        return float("nan")
    share = retransmit_percent(sum(part["sent"] for part in parts), sum(part["retransmitted"] for part in parts))
    return float("nan") if share is None else share


class Coordinator:
    """Rank 0: learns the nodes, runs the strategy over the StoreTester, reports, releases every rank."""

    def __init__(self, store, cfg: DiagnoseConfig, env: RankEnv):
        self.store, self.cfg, self.env = store, cfg, env

    def run(self) -> int:
        tester = None
        try:
            nodes, backend = self._nodes()
            check_group_size(self.cfg.group_size, len(nodes))
            tester = StoreTester(self.store, self.cfg, self.env, nodes, backend)
            started = time.monotonic()
            stragglers = tester.straggler_screen() if self.cfg.straggler_screen else None
            result = diagnose(tester, len(nodes), Thresholds(group_size=self.cfg.group_size or Thresholds.group_size))
            wall_s = time.monotonic() - started
        except CommbenchError as exc:
            self._release(tester)
            print(f"commbench diagnose: error: {exc}", file=sys.stderr, flush=True)
            return exc.exit_code
        except (RuntimeError, ValueError, IndexError) as exc:  # a store failure, or no healthy group to compare with
            self._release(tester)
            print(
                f"commbench diagnose: error: the diagnosis could not complete: {_first_line(exc)}",
                file=sys.stderr,
                flush=True,
            )
            return 1
        self._release(tester)
        report = to_dict(result, [node.name for node in nodes], source=self._source(nodes, backend))
        report["wall_s"] = round(wall_s, 2)
        report["stragglers"] = stragglers
        print(json.dumps(json_ready(report), indent=1) if self.cfg.json else text(report), flush=True)
        run_id = new_run_id("diagnose-") if self.cfg.out_dir else None
        status = self._act(report, run_id)
        if self.cfg.out_dir:
            path = save_run(
                report,
                self.cfg.out_dir,
                {**asdict(self.cfg), "launcher": self.env.launcher},
                synthetic=False,
                note=report["source"],
                backend=backend,
                run_id=run_id,
            )
            print(f"# Results: {path}", file=sys.stderr if self.cfg.json else sys.stdout, flush=True)
        return status

    def _act(self, report: dict, run_id: str | None) -> int:
        """The scheduler actions asked for (--slurm-plan, --drain, --resume), in the report too."""
        if not self.cfg.slurm:
            return 0
        bad = {item["node"]: "diagnose: " + ", ".join(item["reasons"]) + _decisive(item) for item in report["drain"]}
        try:
            status, report["actions"] = scheduler.act(
                scheduler.Choice(**self.cfg.slurm),
                bad,
                expand(report["good"]) if report["good"] else [],
                run_id,
                "diagnose",
                out=sys.stderr if self.cfg.json else sys.stdout,
            )
        except CommbenchError as exc:
            print(f"commbench diagnose: error: {exc}", file=sys.stderr, flush=True)
            report["actions"] = [{"result": f"not carried out: {exc}"}]
            return exc.exit_code
        return status

    def _nodes(self) -> tuple[list[Node], str]:
        """Every node once, represented by its lowest rank, in rank order; the backend every rank can use."""
        keys = [WHO.format(rank) for rank in range(self.env.world_size)]
        self.store.wait(keys, timedelta(seconds=STARTUP_TIMEOUT_S))
        who = [json.loads(self.store.get(key)) for key in keys]
        nodes: dict[str, Node] = {}
        for rank, entry in enumerate(who):
            nodes.setdefault(entry["host"], Node(entry["host"], rank))
        if len(nodes) < 2:
            raise UsageError(
                f"a diagnosis needs at least 2 nodes; all {self.env.world_size} ranks are on {next(iter(nodes))}"
            )
        backend = "nccl" if all(entry["gpu"] for entry in who) and dist.is_nccl_available() else "gloo"
        return list(nodes.values()), backend

    def _source(self, nodes: list[Node], backend: str) -> str:
        cfg = self.cfg
        return (
            f"measured: {backend} send/recv rings of {cfg.size} B, {cfg.warmup} warm-up + {cfg.iters} timed "
            f"iterations per group, on {len(nodes)} nodes ({self.env.launcher}), rank 0 on {nodes[0].name}, "
            f"{utc_now()}; command: {cfg.command}"
        )

    def _release(self, tester: StoreTester | None) -> None:
        """Post "done" and wait a little for every live rank to read it: the store dies with rank 0."""
        round_no = tester.round_no if tester else 0
        self.store.set(PLAN.format(round_no), json.dumps({"done": True}))
        gone = {tester.nodes[n].rank for n in tester.gone} if tester else set()
        waiting = [BYE.format(rank) for rank in range(1, self.env.world_size) if rank not in gone]
        deadline = time.monotonic() + 10.0
        while waiting and time.monotonic() < deadline:
            waiting = [key for key in waiting if not self.store.check([key])]
            time.sleep(POLL_S)


def check_group_size(group_size: int | None, n_nodes: int) -> None:
    if group_size is not None and not 2 <= group_size <= n_nodes:
        raise UsageError(f"--group-size {group_size}: must be between 2 and the fleet's {n_nodes} nodes")


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"
