"""Stragglers from per-process (or per-rank) times: who is consistently slower than the rest.

Input: for each measured size, every process's time (nccl-tests `-I` JSON: the mean over the
iterations of each process's slowest time per iteration). A process is a straggler when its time
is at least `ratio` x the median process's in most sizes: one slow size is noise, a process slow
at every size is a node to look at.

`commbench diagnose` screens with a ring over every node and reads each node's per-iteration times
the same way, iterations in place of sizes, both ways (`ring_stragglers`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

# A process this many times the median process's time (in most sizes or iterations) is a straggler.
# Diagnose reports store the value they screened at (since stop 22), and the dashboard draws it.
STRAGGLER_RATIO = 1.2


@dataclass(frozen=True)
class Straggler:
    process: int
    sizes_slow: int
    sizes: int
    median_ratio: float  # its time / the median process's, median over the sizes


def find_stragglers(times_per_size: list[list[float]], ratio: float = STRAGGLER_RATIO) -> list[Straggler]:
    """Processes at >= ratio x the median process in more than half of the sizes, slowest first."""
    usable = [times for times in times_per_size if len(times) > 1 and statistics.median(times) > 0]
    if not usable:
        return []
    processes = min(len(times) for times in usable)
    ratios = [[times[p] / statistics.median(times) for times in usable] for p in range(processes)]
    found = [Straggler(p, sum(r >= ratio for r in rs), len(rs), statistics.median(rs)) for p, rs in enumerate(ratios)]
    return sorted((s for s in found if 2 * s.sizes_slow > s.sizes), key=lambda s: -s.median_ratio)


def ring_stragglers(
    times_by_node: list[list[float]], ratio: float = STRAGGLER_RATIO
) -> tuple[list[Straggler], list[Straggler]]:
    """From every node's per-iteration times in one ring: the nodes slow themselves (their own time
    >= ratio x the median node's in most iterations), and the nodes the others wait for. A node that
    arrives late to every iteration (busy elsewhere) finds its peers ready: its own time is the
    short one, by >= ratio against the median node's; its `median_ratio` says how many times shorter."""
    per_iteration = [list(times) for times in zip(*times_by_node)]
    slow = find_stragglers(per_iteration, ratio)
    waited_for = find_stragglers([[1.0 / t if t > 0 else 0.0 for t in times] for times in per_iteration], ratio)
    return slow, waited_for
