"""A cluster model that answers the strategy's rounds, and the fleet-scale simulation built on it.

The model (`FleetModel`, a strategy.Tester): N nodes under leaf switches of `leaf_size` (node order
follows the leaves), each node's NIC at `line_gbps` x its rate factor, links between two nodes with
their own factor, inbound packet loss per node or per link, nodes that stop answering from a given
round on. A group's ring bandwidth is its slowest ring edge (an edge runs at the slower NIC of its two
ends, times the link's factor, times `spine_factor` when it leaves the leaf), times one log-normal
noise draw per group test. A group's retransmission share is the loss of the traffic its members
receive (each receives 1/g of the ring's traffic) plus a small healthy background.

Where the figures come from (say so wherever they are shown):
  noise sigma 0.085   the spread of a fixed-iteration sweep at >= 4 MiB on the emulated cluster
                      under load, bench/RESULTS.md (sweep cost row: 8.5%), taken as the log-sigma
  slow node 0.3       300 Mbit/s on a 1 Gbit/s link, the issue's acceptance fault; the simulation
                      draws slow factors from 0.1-0.5
  lossy node 3%       the issue's acceptance fault (1-5% drawn); TCP repairs it at nearly full
                      speed (commbench.measure.linkhealth), modelled as 0.95 x bandwidth
  background 0.02%    healthy retransmission share: an assumption (|normal|, sigma 0.02 points)
  round time          setup + iterations x size / line rate: an estimate, not a measurement
Everything the simulation prints is synthetic and labelled so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from commbench.diagnose.strategy import RoundResult, Thresholds, diagnose

NOISE_SIGMA = 0.085
BACKGROUND_LOSS_PCT = 0.02


@dataclass
class FleetModel:
    n_nodes: int
    rng: np.random.Generator
    line_gbps: float = 0.125  # 1 Gbit/s, the emulated cluster's links
    leaf_size: int = 32
    spine_factor: float = 1.0  # non-blocking fat tree by default
    noise_sigma: float = NOISE_SIGMA
    node_rate: np.ndarray = field(init=False)  # rate factor per node (1: healthy)
    node_loss_pct: np.ndarray = field(init=False)  # inbound loss per node, % (0: healthy)
    link_rate: dict[tuple[int, int], float] = field(default_factory=dict)  # (a, b) sorted -> factor
    link_loss_pct: dict[tuple[int, int], float] = field(default_factory=dict)  # (a, b) sorted -> %
    stops_at_round: dict[int, int] = field(default_factory=dict)  # node -> first round it no longer answers
    rounds_run: int = 0

    def __post_init__(self) -> None:
        self.node_rate = np.ones(self.n_nodes)
        self.node_loss_pct = np.zeros(self.n_nodes)

    def run_round(self, groups: Sequence[tuple[int, ...]], wait_for_silent: bool = False) -> RoundResult:
        """wait_for_silent changes nothing here: a node of the model is silent from its round on."""
        self.rounds_run += 1
        hung = frozenset(n for n, r in self.stops_at_round.items() if self.rounds_run >= r)
        busbw = np.empty(len(groups))
        loss = np.empty(len(groups))
        by_size: dict[int, list[int]] = {}
        for i, g in enumerate(groups):
            by_size.setdefault(len(g), []).append(i)
        for _size, index in by_size.items():
            members = np.array([groups[i] for i in index])
            busbw[index], loss[index] = self._rings(members)
        self._apply_link_faults(groups, busbw, loss)
        busbw *= np.exp(self.rng.normal(0.0, self.noise_sigma, len(groups)))
        loss += np.abs(self.rng.normal(0.0, BACKGROUND_LOSS_PCT, len(groups)))
        if hung:
            dead = np.array([bool(set(g) & hung) for g in groups])
            busbw[dead], loss[dead] = np.nan, np.nan
        return RoundResult(busbw, loss, hung)

    def _rings(self, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Noise-free ring bandwidth and loss of equal-sized groups (rows of `members`)."""
        nxt = np.roll(members, -1, axis=1)
        edge = np.minimum(self.node_rate[members], self.node_rate[nxt])
        leaves_leaf = (members // self.leaf_size) != (nxt // self.leaf_size)
        edge = edge * np.where(leaves_leaf, self.spine_factor, 1.0)
        return self.line_gbps * edge.min(axis=1), self.node_loss_pct[members].mean(axis=1)

    def _apply_link_faults(self, groups: Sequence[tuple[int, ...]], busbw: np.ndarray, loss: np.ndarray) -> None:
        if not self.link_rate and not self.link_loss_pct:
            return
        where: dict[int, tuple[int, int]] = {}
        for i, g in enumerate(groups):
            for position, n in enumerate(g):
                where[n] = (i, position)
        for link in set(self.link_rate) | set(self.link_loss_pct):
            a, b = link
            if a not in where or b not in where or where[a][0] != where[b][0]:
                continue
            i = where[a][0]
            g = groups[i]
            if abs(where[a][1] - where[b][1]) not in (1, len(g) - 1):
                continue  # not ring neighbours: this ring does not use the link
            busbw[i] = min(busbw[i], self.line_gbps * self.link_rate.get(link, 1.0))
            loss[i] += self.link_loss_pct.get(link, 0.0) / len(g)


@dataclass(frozen=True)
class Faults:
    slow: tuple[int, ...]
    lossy: tuple[int, ...]


def inject_node_faults(model: FleetModel, d: int) -> Faults:
    """d faulty nodes at random, alternately slow (0.1-0.5 x rate) and lossy (1-5% inbound loss)."""
    faulty = model.rng.choice(model.n_nodes, size=d, replace=False)
    slow, lossy = faulty[0::2], faulty[1::2]
    model.node_rate[slow] = model.rng.uniform(0.1, 0.5, len(slow))
    model.node_loss_pct[lossy] = model.rng.uniform(1.0, 5.0, len(lossy))
    model.node_rate[lossy] = 0.95
    return Faults(tuple(int(n) for n in slow), tuple(int(n) for n in lossy))


@dataclass
class Tally:
    """Counts over trials of one (N, d)."""

    faults: int = 0
    missed: int = 0
    verdicts: int = 0
    false: int = 0
    rounds: list[int] = field(default_factory=list)
    tests: list[int] = field(default_factory=list)

    def add(self, faulty: set[int], found: set[int], rounds: int, tests: int) -> None:
        self.faults += len(faulty)
        self.missed += len(faulty - found)
        self.verdicts += len(found)
        self.false += len(found - faulty)
        self.rounds.append(rounds)
        self.tests.append(tests)

    def missed_pct(self) -> float:
        return 100.0 * self.missed / self.faults if self.faults else 0.0

    def false_pct(self) -> float:
        return 100.0 * self.false / self.verdicts if self.verdicts else 0.0


def simulate_diagnose(n_nodes: int, d: int, trials: int, seed: int, thresholds: Thresholds = Thresholds()) -> Tally:
    rng, tally = np.random.default_rng(seed), Tally()
    for _ in range(trials):
        model = FleetModel(n_nodes, rng)
        faults = inject_node_faults(model, d)
        result = diagnose(model, n_nodes, thresholds)
        tally.add(set(faults.slow) | set(faults.lossy), result.drained(), len(result.rounds), result.group_tests)
    return tally


def bisect_single_fault(model: FleetModel) -> tuple[int, int]:
    """Single-fault bisection as readiness tools do it: test both halves, follow the slower one down
    to a pair, then test each of the pair's nodes with a node of the other half. Bandwidth only;
    returns (the node it names, rounds)."""
    nodes, rounds = list(range(model.n_nodes)), 0
    other: list[int] = []
    while len(nodes) > 2:
        half = len(nodes) // 2
        low, high = nodes[:half], nodes[half:]
        result = model.run_round([tuple(low), tuple(high)])
        rounds += 1
        nodes, other = (low, high) if result.busbw[0] <= result.busbw[1] else (high, low)
    result = model.run_round([(nodes[0], other[0]), (nodes[-1], other[-1])])
    return (nodes[0] if result.busbw[0] <= result.busbw[1] else nodes[-1]), rounds + 1


def simulate_bisection(n_nodes: int, d: int, trials: int, seed: int) -> Tally:
    rng, tally = np.random.default_rng(seed), Tally()
    for _ in range(trials):
        model = FleetModel(n_nodes, rng)
        faults = inject_node_faults(model, d)
        named, rounds = bisect_single_fault(model)
        tally.add(set(faults.slow) | set(faults.lossy), {named}, rounds, 2 * rounds)
    return tally


def round_seconds(line_gbps: float, size_bytes: int = 4 << 20, iterations: int = 20, setup_s: float = 2.0) -> float:
    """Estimated wall time of one round: a fixed setup (communicators, warm-up: an assumption) plus
    the timed iterations at line rate."""
    return setup_s + iterations * size_bytes / (line_gbps * 1e9)


def pairwise_rounds(n_nodes: int) -> int:
    """Round-robin pairwise: every pair once, N-1 rounds (N even), N rounds (N odd)."""
    return n_nodes - 1 if n_nodes % 2 == 0 else n_nodes


def bound_rounds(n_nodes: int, d: int) -> int:
    """The issue's acceptance bound: 2 d ceil(log2(N/d)) + 2."""
    return 2 * d * math.ceil(math.log2(n_nodes / d)) + 2 if d else 2
