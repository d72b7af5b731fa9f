"""The diagnosis strategy: which groups to test in each round, and what the results say.

It is written against a `Tester`, which runs one round: disjoint groups of nodes, all at once,
each group a ring in the order given (every member sends to the next, the last to the first),
and returns each group's ring bandwidth, its TCP retransmission share and the nodes that did not
answer within the round's timeout. Real ranks and the cluster model (fleet.py) both implement it,
so the simulation runs this very code.

Steps:
  1. screen     every node in a disjoint group of `group_size`, all groups at once. The fleet's own
                results give the healthy reference (median bandwidth and robust spread of the fast
                cluster of groups, their median retransmission share): no preset rate is needed.
  2. localise   a failing group is split in halves, tested at once; only failing halves go on.
                A group that fails while both of its halves pass has its fault on a ring edge the
                halves do not have (a link): those edges become candidate links. Borderline
                results (between the pass and fail cuts) are tested again, never split.
  3. confirm    each suspect node is paired with two known-good nodes (nodes of passing groups), in
                two rounds: a bad node is slow (or lossy) with every partner; a node that passes with
                good partners is not at fault, and a candidate link between two such nodes is tested
                on its own: failing there, it is a bad link.
  4. recheck    every node that did not answer is tested once more, with a known-good partner only:
                a cut node drags down the partner of its group (the partner's part waits on it until
                the round's time is up), so a healthy node can miss a round's answer too. Answering
                here clears it (a failing pair then marks it slow); a partner's silence in this
                round is never held against the partner.
  5. report     a Diagnosis: nodes to drain with reasons and evidence, links to inspect, nodes that
                did not answer, every round's groups and results, and the good nodes.

Rounds are concurrent: with groups of g, localisation takes about log2(g) rounds whatever the number
of faults d; the group tests it runs (the sequential cost group-testing theory counts, about
d*log2(N/d)) are reported too.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

# a group's outcome in one round; HUNG: a node of the group stopped answering
PASS, BORDERLINE, FAIL, HUNG = "pass", "borderline", "fail", "hung"
OUTCOMES = (PASS, BORDERLINE, FAIL, HUNG)


@dataclass(frozen=True)
class Decision:
    """What the rounds decided about one group: its outcome, why, and the figures it was decided on."""

    outcome: str  # PASS, FAIL or HUNG (a borderline group is tested again until it is one of them)
    reason: str  # "slow", "lossy", "slow+lossy" or ""
    busbw: float  # GB/s; NaN when hung
    retransmit_pct: float  # NaN when hung or unknown


@dataclass(frozen=True)
class RoundResult:
    """What one round measured: per group (in the order asked) and the nodes that hung."""

    busbw: np.ndarray  # ring bandwidth of each group, GB/s; NaN where the group hung
    retransmit_pct: np.ndarray  # share of TCP segments re-sent in each group, %; NaN where unknown
    hung: frozenset[int] = frozenset()


class Tester(Protocol):
    def run_round(self, groups: Sequence[tuple[int, ...]], wait_for_silent: bool = False) -> RoundResult:
        """Test disjoint groups at once, each as a ring in the given order. wait_for_silent: wait the
        round's whole time for nodes that did not answer before (a tester may give up on them early)."""


@dataclass(frozen=True)
class Thresholds:
    """The cuts, relative to the fleet's own healthy results (defaults used by the simulation)."""

    group_size: int = 8  # screen groups; smaller when the fleet is small (see screen_group_size)
    fail_sigmas: float = 4.0  # slower than the median by this many robust sigmas: fail
    pass_sigmas: float = 2.5  # within this many: pass; between the two: borderline, tested again
    min_fail_drop: float = 0.30  # log-bandwidth drop that always fails (74%; small fleets estimate sigma badly)
    min_pass_drop: float = 0.15  # log-bandwidth drop that never fails (86%)
    healthy_window: float = 0.50  # first pass of the reference: groups within this log drop of the upper quartile
    loss_fail_pct: float = 0.25  # retransmissions above the fleet median by this much (percentage points): fail
    loss_pass_pct: float = 0.10  # above by less than this: pass
    retests: int = 2  # how often a borderline group is tested again before the median decides


@dataclass(frozen=True)
class Reference:
    """The fleet's healthy distribution, from the screen round."""

    busbw: float
    sigma: float
    retransmit_pct: float


@dataclass
class RoundLog:
    step: str
    groups: list[tuple[int, ...]]
    busbw: list[float]
    retransmit_pct: list[float]
    outcomes: list[str]
    hung: list[int]


@dataclass
class Verdict:
    reasons: list[str]
    evidence: list[dict[str, Any]]  # what showed it: round, group, bandwidth, share of the median, retransmissions


@dataclass
class Diagnosis:
    n_nodes: int
    bad_nodes: dict[int, Verdict] = field(default_factory=dict)
    bad_links: dict[tuple[int, int], Verdict] = field(default_factory=dict)
    hung: dict[int, str] = field(default_factory=dict)
    rounds: list[RoundLog] = field(default_factory=list)
    reference: Reference | None = None

    @property
    def group_tests(self) -> int:
        return sum(len(r.groups) for r in self.rounds)

    def drained(self) -> set[int]:
        return set(self.bad_nodes) | set(self.hung)

    def good_nodes(self) -> list[int]:
        return [n for n in range(self.n_nodes) if n not in self.drained()]


def screen_group_size(n_nodes: int, wanted: int) -> int:
    """Groups small enough that the screen has at least 4 of them (the median must be a healthy one)."""
    return max(2, min(wanted, n_nodes // 4 if n_nodes >= 8 else 2))


def screen_groups(nodes: Sequence[int], size: int) -> list[tuple[int, ...]]:
    """Consecutive chunks (node order follows the leaf switches, so groups stay under one leaf);
    a lone last node joins the chunk before it."""
    chunks = [tuple(nodes[i : i + size]) for i in range(0, len(nodes), size)]
    if len(chunks) > 1 and len(chunks[-1]) == 1:
        lone = chunks.pop()  # popped first: `chunks[-2] = chunks[-2] + chunks.pop()` assigns one chunk too early
        chunks[-1] = chunks[-1] + lone
    return chunks


def ring_edges(group: Sequence[int]) -> set[tuple[int, int]]:
    if len(group) < 2:
        return set()
    return {(min(a, b), max(a, b)) for a, b in ((group[i], group[(i + 1) % len(group)]) for i in range(len(group)))}


def reference_from(result: RoundResult, t: Thresholds) -> Reference:
    """The healthy groups' median and robust spread (1.4826 x MAD of the log bandwidth).

    Faults only slow groups down, so the healthy ones are the fast cluster: start from the upper
    quartile, keep the groups within `healthy_window` of it, then twice more the groups within the
    fail cut of their median. On a small fleet where a third of the groups hold a fault, a plain
    median would sit between the healthy and the faulty groups and pass them all."""
    bw = result.busbw[np.isfinite(result.busbw) & (result.busbw > 0)]
    loss = result.retransmit_pct[np.isfinite(result.busbw) & (result.busbw > 0)]
    median, window = float(np.quantile(bw, 0.75)), t.healthy_window
    for _ in range(3):
        keep = np.log(bw / median) > -window
        logs = np.log(bw[keep])
        median = float(np.exp(np.median(logs)))
        sigma = 1.4826 * float(np.median(np.abs(logs - np.median(logs))))
        window = max(t.fail_sigmas * sigma, t.min_fail_drop)
    healthy_loss = loss[keep][np.isfinite(loss[keep])]
    if healthy_loss.size:
        return Reference(median, sigma, float(np.median(healthy_loss)))
    # no group's loss measured at all (not TCP, or ranks sharing a host's counters): NaN, nobody lossy
    return Reference(median, sigma, 0.0 if np.isfinite(loss).any() else float("nan"))


def classify(
    busbw: np.ndarray, retransmit_pct: np.ndarray, ref: Reference, t: Thresholds
) -> tuple[np.ndarray, np.ndarray]:
    """Each group's outcome (pass/borderline/fail) and reason ("slow", "lossy", "slow+lossy", "")."""
    with np.errstate(divide="ignore", invalid="ignore"):
        drop = -np.log(busbw / ref.busbw)
    excess = np.nan_to_num(retransmit_pct - ref.retransmit_pct, nan=0.0)
    fail_drop = max(t.fail_sigmas * ref.sigma, t.min_fail_drop)
    pass_drop = max(t.pass_sigmas * ref.sigma, t.min_pass_drop)
    slow_fail, slow_border = drop > fail_drop, drop > pass_drop
    lossy_fail, lossy_border = excess > t.loss_fail_pct, excess > t.loss_pass_pct
    outcome = np.where(slow_fail | lossy_fail, FAIL, np.where(slow_border | lossy_border, BORDERLINE, PASS))
    reason = np.array(
        ["+".join(name for name, on in (("slow", s), ("lossy", lo)) if on) for s, lo in zip(slow_border, lossy_border)],
        dtype=object,
    )
    return outcome, reason


class Diagnoser:
    """One diagnosis: holds the tester, the thresholds and what has been learnt so far."""

    def __init__(self, tester: Tester, n_nodes: int, thresholds: Thresholds = Thresholds()):
        if n_nodes < 2:
            raise ValueError("a diagnosis needs at least 2 nodes")
        self.tester, self.t = tester, thresholds
        self.result = Diagnosis(n_nodes)
        self.good: set[int] = set()
        self.suspects: dict[int, list[dict[str, Any]]] = {}
        self.candidate_links: dict[tuple[int, int], list[dict[str, Any]]] = {}
        self._screened: dict[tuple[int, ...], Decision] = {}  # the screen's groups, decided

    # -- running rounds -------------------------------------------------------------------------
    def _round(
        self, step: str, groups: list[tuple[int, ...]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, RoundResult]:
        measured = self.tester.run_round(groups)
        for node in sorted(measured.hung):
            self.result.hung.setdefault(
                node, f"no answer within the round's timeout ({step}, round {len(self.result.rounds) + 1})"
            )
        if self.result.reference is None:
            self.result.reference = reference_from(measured, self.t)
        outcome, reason = classify(measured.busbw, measured.retransmit_pct, self._reference(), self.t)
        hung_group = np.array([bool(set(g) & measured.hung) for g in groups])
        outcome = np.where(hung_group, HUNG, outcome)
        self.result.rounds.append(
            RoundLog(
                step,
                list(groups),
                measured.busbw.tolist(),
                measured.retransmit_pct.tolist(),
                outcome.tolist(),
                sorted(measured.hung),
            )
        )
        return outcome, reason, measured.busbw, measured

    def _evidence(self, group: tuple[int, ...], decided: Decision, note: str = "") -> dict[str, Any]:
        return {
            "round": len(self.result.rounds),
            "group": list(group),
            "outcome": decided.outcome,
            "busbw_gbps": decided.busbw,
            "of_median": decided.busbw / self._reference().busbw,
            "retransmit_pct": decided.retransmit_pct,
            "reason": decided.reason,
            "note": note,
        }

    def _reference(self) -> Reference:
        """The healthy reference the first round set (every classification after it needs one)."""
        assert self.result.reference is not None, "no round has run yet"
        return self.result.reference

    def _tested_until_decided(self, step: str, groups: Sequence[tuple[int, ...]]) -> dict[tuple[int, ...], Decision]:
        """Outcome of each group, borderline ones tested again (up to `retests` times; then
        a median still outside the pass cut fails)."""
        decided: dict[tuple[int, ...], Decision] = {}
        samples: dict[tuple[int, ...], list[tuple[float, float]]] = {g: [] for g in groups}
        pending, attempt = list(groups), 0
        while pending:
            outcome, reason, bw, measured = self._round(step if attempt == 0 else f"{step} (again)", pending)
            again = []
            for i, group in enumerate(pending):
                samples[group].append((float(bw[i]), float(measured.retransmit_pct[i])))
                if outcome[i] == HUNG:
                    decided[group] = Decision(HUNG, "", float("nan"), float("nan"))
                elif outcome[i] != BORDERLINE:
                    decided[group] = Decision(str(outcome[i]), str(reason[i]), *samples[group][-1])
                elif attempt < self.t.retests:
                    again.append(group)
                else:
                    decided[group] = self._by_median(samples[group])
            pending, attempt = again, attempt + 1
        return decided

    def _by_median(self, samples: list[tuple[float, float]]) -> Decision:
        bw = np.array([float(np.median([s[0] for s in samples]))])
        loss = np.array([float(np.median([s[1] for s in samples]))])
        outcome, reason = classify(bw, loss, self._reference(), self.t)
        # borderline every time is a mild fault, not noise: fail it; confirm clears what is not
        return Decision(PASS if outcome[0] == PASS else FAIL, str(reason[0]), float(bw[0]), float(loss[0]))

    # -- the steps ------------------------------------------------------------------------------
    def run(self) -> Diagnosis:
        self._screen_and_localise(self._screen())
        self._confirm_nodes()
        self._confirm_links()
        self._recheck_silent()
        return self.result

    def _screen(self) -> list[tuple[int, ...]]:
        """The screen's groups, decided. The reference needs a cluster of healthy groups: when more than
        a third fail, the fleet has many faults for its group size, and the screen runs again with
        groups half as large (its reference taken afresh)."""
        size = screen_group_size(self.result.n_nodes, self.t.group_size)
        while True:
            self.result.reference = None
            groups = screen_groups(list(range(self.result.n_nodes)), size)
            self._screened = self._tested_until_decided("screen", groups)
            failing = sum(decision.outcome != PASS for decision in self._screened.values())
            if size <= 2 or 3 * failing <= len(groups):
                return groups
            size //= 2

    def _screen_and_localise(self, groups: list[tuple[int, ...]]) -> None:
        step = "screen"
        parent_of: dict[tuple[int, ...], tuple[int, ...]] = {}  # half -> the failing group it came from
        parent_result: dict[tuple[int, ...], Decision] = {}
        while groups:
            decided = self._screened if step == "screen" else self._tested_until_decided(step, groups)
            self._links_between_passing_halves(decided, parent_of, parent_result)
            children: list[tuple[int, ...]] = []
            parent_of = {}
            for group, decision in decided.items():
                outcome = decision.outcome
                if outcome == HUNG:
                    rest = tuple(n for n in group if n not in self.result.hung)
                    if len(rest) >= 2:
                        children.append(rest)
                    else:
                        self._suspect(
                            rest,
                            {
                                "round": len(self.result.rounds),
                                "group": list(group),
                                "outcome": HUNG,
                                "note": "its group hung on a node that stopped answering",
                            },
                        )
                elif outcome == PASS:
                    self.good.update(group)
                elif len(group) <= 3:
                    self._suspect(group, self._evidence(group, decision), links=ring_edges(group))
                else:
                    half = len(group) // 2
                    for child in (group[:half], group[half:]):
                        children.append(child)
                        parent_of[child] = group
                    parent_result[group] = decision
            groups, step = children, "split"
        self.good -= set(self.suspects) | set(self.result.hung)

    def _links_between_passing_halves(
        self,
        decided: dict[tuple[int, ...], Decision],
        parent_of: dict[tuple[int, ...], tuple[int, ...]],
        parent_result: dict[tuple[int, ...], Decision],
    ) -> None:
        """A group failed, yet both its halves passed: the fault is on an edge only the group's ring had."""
        halves_of: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        for half, parent in parent_of.items():
            halves_of.setdefault(parent, []).append(half)
        for parent, halves in halves_of.items():
            if all(decided[h].outcome == PASS for h in halves):
                cross = ring_edges(parent) - set().union(*(ring_edges(h) for h in halves))
                for a, b in cross:
                    self._suspect(
                        (a, b), self._evidence(parent, parent_result[parent], "both halves passed"), links={(a, b)}
                    )

    def _suspect(
        self, nodes: Sequence[int], evidence: dict[str, Any], links: Collection[tuple[int, int]] = frozenset()
    ) -> None:
        for n in nodes:
            self.suspects.setdefault(n, []).append(evidence)
        for link in links:
            self.candidate_links.setdefault(link, []).append(evidence)

    def _confirm_nodes(self) -> None:
        suspects = sorted(n for n in self.suspects if n not in self.result.hung)
        fails: dict[int, list[dict[str, Any]]] = {s: [] for s in suspects}
        tried: dict[int, int] = {s: 0 for s in suspects}
        todo = {s: 2 for s in suspects}
        while any(todo.values()):
            waiting = [s for s in suspects if todo[s] > 0 and s not in self.result.hung]
            if not waiting:
                break
            pairs = self._fresh_partners(waiting, tried)
            if not pairs:
                break
            decided = self._tested_until_decided("confirm", [tuple(p) for p in pairs])
            for s, partner in pairs:
                outcome = decided[(s, partner)].outcome
                tried[s] += 1
                todo[s] -= 1
                if outcome == HUNG and partner in self.result.hung:
                    todo[s] += 1  # the partner died, not a verdict on s
                elif outcome in (FAIL, HUNG):
                    fails[s].append(self._evidence((s, partner), decided[(s, partner)], "with a known-good partner"))
                if todo[s] == 0 and 0 < len(fails[s]) < tried[s] and tried[s] < 3:
                    todo[s] = 1  # one partner failed, one passed: a third decides
        for s in suspects:
            if s in self.result.hung:
                continue
            if tried[s] and len(fails[s]) * 2 > tried[s]:
                reasons = sorted({r for e in fails[s] for r in e["reason"].split("+") if r}) or ["slow"]
                self.result.bad_nodes[s] = Verdict(reasons, self.suspects[s] + fails[s])

    def _fresh_partners(self, suspects: list[int], tried: dict[int, int]) -> list[tuple[int, int]]:
        """Each suspect with a known-good node, no node twice in the round. Partners are the nearest good
        nodes in node order (same leaf switch), shifted by how often the suspect was tried so repeated
        confirms meet new nodes. With more suspects than good nodes the leftovers wait a round."""
        good = sorted(self.good - set(self.result.hung))
        used, fresh = set(), []
        for s in suspects:
            start = int(np.searchsorted(good, s)) + 3 * tried[s]
            for j in range(len(good)):
                partner = good[(start + j) % len(good)]
                if partner not in used:
                    used.add(partner)
                    fresh.append((s, partner))
                    break
        return fresh

    def _confirm_links(self) -> None:
        """Candidate links between two nodes that are not bad: tested alone, failing there they are bad links."""
        explained = self.result.drained()
        links = sorted(link for link in self.candidate_links if not set(link) & explained)
        while links:
            pairs: list[tuple[int, int]] = []
            busy: set[int] = set()
            later: list[tuple[int, int]] = []
            for link in links:
                if set(link) & busy:
                    later.append(link)
                else:
                    pairs.append(link)
                    busy.update(link)
            decided = self._tested_until_decided("confirm link", pairs)
            for link in pairs:
                outcome, reason = decided[link].outcome, decided[link].reason
                if outcome == FAIL:
                    self.result.bad_links[link] = Verdict(
                        reason.split("+") if reason else ["slow"],
                        self.candidate_links[link] + [self._evidence(link, decided[link], "the two alone")],
                    )
            links = [link for link in later if not set(link) & self.result.drained()]

    def _recheck_silent(self) -> None:
        """Each node named for not answering, once more with a known-good partner (step 4)."""
        silent = sorted(self.result.hung)
        while silent:
            good = sorted(self.good - set(self.result.hung) - set(self.result.bad_nodes))
            pairs = list(zip(silent, good))
            if not pairs:
                return
            measured = self.tester.run_round([tuple(p) for p in pairs], wait_for_silent=True)
            outcome, reason = classify(measured.busbw, measured.retransmit_pct, self._reference(), self.t)
            self.result.rounds.append(
                RoundLog(
                    "recheck",
                    [tuple(p) for p in pairs],
                    measured.busbw.tolist(),
                    measured.retransmit_pct.tolist(),
                    [HUNG if s in measured.hung else o for (s, _), o in zip(pairs, outcome)],
                    sorted(s for s, _ in pairs if s in measured.hung),
                )
            )
            for i, (node, partner) in enumerate(pairs):
                if node in measured.hung:
                    continue  # silent again, with a partner that answers everyone else: it stays named
                del self.result.hung[node]
                decided = Decision(
                    str(outcome[i]), str(reason[i]), float(measured.busbw[i]), float(measured.retransmit_pct[i])
                )
                if outcome[i] == FAIL:
                    self.result.bad_nodes[node] = Verdict(
                        reason[i].split("+") if reason[i] else ["slow"],
                        [self._evidence((node, partner), decided, "answered a recheck with a known-good partner")],
                    )
                elif outcome[i] == PASS:
                    self.good.add(node)
            silent = silent[len(pairs) :]


def diagnose(tester: Tester, n_nodes: int, thresholds: Thresholds = Thresholds()) -> Diagnosis:
    return Diagnoser(tester, n_nodes, thresholds).run()
