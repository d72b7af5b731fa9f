"""Liveness and progress of every rank, so a failed or stuck run ends quickly and says who failed.

Each rank runs a small thread that publishes, every second, into the rendezvous store (a TCPStore
hosted by rank 0): a heartbeat counter, its progress step and what it is doing. Counters rather
than clocks, because nodes' clocks disagree. When something goes wrong:
  * a collective raises (a peer closed its connection): `diagnose()` reads every rank's counter
    twice; ranks whose counter did not move are lost — named with their node;
  * nothing progresses for `timeout_s` (a hang: a rank stopped calling, a link went down): the
    thread reports the ranks that are lost or furthest behind, lets the run record why, and
    ends the process, since the main thread may be blocked inside a collective forever.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta

import torch.distributed as dist

BEAT_INTERVAL_S = 1.0
KEY = "commbench/beat/{}"
# diagnose() takes at most the store client's 5 s connect timeout, or two reads 2.5 beats apart
DIAGNOSE_BOUND_S = 10.0


@dataclass(frozen=True)
class Diagnosis:
    culprits: tuple[int, ...]  # ranks lost or behind; empty when every rank looks healthy
    text: str
    store_lost: bool = False  # this rank could not reach rank 0's store: it may be the one cut off


class RankMonitor:
    def __init__(
        self,
        addr: str,
        port: int,
        rank: int,
        world_size: int,
        hosts: dict[int, str],
        timeout_s: float,
        on_hang: Callable[[Diagnosis], None],
    ):
        self.addr, self.port = addr, port
        self.rank, self.world_size, self.hosts = rank, world_size, hosts
        self.timeout_s = timeout_s
        self.on_hang = on_hang
        self.step, self.doing = 0, "starting"
        self._last_progress = time.monotonic()
        self._stop = threading.Event()
        # two threads: the heartbeat must go on while the watchdog spends seconds diagnosing
        self._threads = [
            threading.Thread(target=self._beat, name="commbench-heartbeat", daemon=True),
            threading.Thread(target=self._watch, name="commbench-watchdog", daemon=True),
        ]

    def start(self) -> RankMonitor:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def progress(self, doing: str) -> None:
        self.step += 1
        self.doing = doing
        self._last_progress = time.monotonic()

    def _client(self) -> dist.TCPStore:
        return dist.TCPStore(
            self.addr, self.port, is_master=False, timeout=timedelta(seconds=5), wait_for_workers=False
        )

    def _beat(self) -> None:
        try:
            store = self._client()
        except Exception:  # the store's host is gone before we started: the main thread will fail too
            return
        beat = 0
        while True:  # beat at once: a short run may fail before the first interval is over
            beat += 1
            try:
                store.set(KEY.format(self.rank), f"{beat} {self.step} {self.doing}")
            except Exception:
                pass  # rank 0 (the store) is gone; diagnose() will say so
            if self._stop.wait(BEAT_INTERVAL_S):
                return

    def _watch(self) -> None:
        while not self._stop.wait(BEAT_INTERVAL_S):
            if time.monotonic() - self._last_progress > self.timeout_s:
                stalled = time.monotonic() - self._last_progress
                found = self.diagnose()
                prefix = f"no progress for {stalled:.0f} s (--timeout {self.timeout_s:g}) in {self.doing}: "
                self.on_hang(replace(found, text=prefix + found.text))
                return

    def _read_all(self, store) -> dict[int, tuple[int, int, str]]:
        states = {}
        for rank in range(self.world_size):
            key = KEY.format(rank)
            if not store.check([key]):  # get() would wait for a key a dead rank never wrote
                states[rank] = (-1, -1, "never reported")
                continue
            beat, step, doing = store.get(key).decode().split(" ", 2)
            states[rank] = (int(beat), int(step), doing)
        return states

    def diagnose(self) -> Diagnosis:
        """Which ranks are gone or behind, in one sentence."""
        try:
            store = self._client()
            first = self._read_all(store)
            time.sleep(2.5 * BEAT_INTERVAL_S)
            second = self._read_all(store)
        except Exception:
            here = self.hosts.get(self.rank, "?")
            return Diagnosis(
                (0,),
                f"node {here} cannot reach {self.describe([0])}, which hosts the rendezvous "
                f"store: {here} lost its network link, or rank 0 is gone",
                store_lost=True,
            )
        lost = [rank for rank in range(self.world_size) if second[rank][0] <= first[rank][0]]
        if lost:
            return Diagnosis(tuple(lost), f"lost {self.describe(lost)} (no heartbeat)")
        steps = {rank: second[rank][1] for rank in second}
        behind = [rank for rank, step in steps.items() if step < max(steps.values())]
        if behind:
            where = second[behind[0]][2]
            return Diagnosis(tuple(behind), f"{self.describe(behind)} stopped making progress (last in {where})")
        return Diagnosis((), "every rank is alive and at the same step: the collective itself did not complete")

    def describe(self, ranks: list[int]) -> str:
        by_node: dict[str, list[int]] = {}
        for rank in ranks:
            by_node.setdefault(self.hosts.get(rank, "?"), []).append(rank)
        label = "rank" if len(ranks) == 1 else "ranks"
        return "; ".join(f"{label} {','.join(map(str, rs))} on node {node}" for node, rs in by_node.items())

    def reporter(self, diagnosis: Diagnosis) -> int | None:
        """The lowest rank not named in the diagnosis prints it, so users read it once. A node cut
        off from the store cannot know who else is alive: its own lowest rank tells its side."""
        if diagnosis.store_lost:
            here = self.hosts.get(self.rank)
            neighbours = [rank for rank, host in self.hosts.items() if host == here and rank not in diagnosis.culprits]
            return min(neighbours) if neighbours else None
        healthy = [rank for rank in range(self.world_size) if rank not in diagnosis.culprits]
        return healthy[0] if healthy else None

    def is_reporter(self, diagnosis: Diagnosis) -> bool:
        return self.reporter(diagnosis) == self.rank

    def linger_s(self, diagnosis: Diagnosis) -> float:
        """How long a rank that does not report should stay before leaving. A node's launcher stops
        all of its ranks once one exits, so a reporter on the same node must get to print first: it
        may still be blocked in a collective until its own watchdog fires, then diagnose. Its exit
        ends the wait early (the launcher stops this rank then). A reporter elsewhere is not ours
        to wait for."""
        reporter = self.reporter(diagnosis)
        if reporter is None or reporter == self.rank or self.hosts.get(reporter) != self.hosts.get(self.rank):
            return 0.0
        return self.timeout_s + DIAGNOSE_BOUND_S


def exit_now(code: int) -> None:
    """Leave at once: the main thread may be blocked in a collective that will never return."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
