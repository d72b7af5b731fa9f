"""Fleet-scale simulation of `commbench diagnose` (synthetic): the strategy's own code driven by the
cluster model of commbench.diagnose.fleet, against round-robin pairwise and single-fault bisection.

    python bench/diagnose_sim.py [--trials 1000] [--trials-at-16384 1000] [--seed 0]

Prints a markdown table for bench/RESULTS-diagnose.md. Every figure is synthetic: the model's
noise, fault sizes and round time are listed in commbench/diagnose/fleet.py with their sources.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from commbench.diagnose.fleet import bound_rounds, pairwise_rounds, round_seconds, simulate_bisection, simulate_diagnose

SIZES = (64, 1024, 4096, 16384)
FAULTS = (1, 4, 16)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--trials-at-16384", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--line-gbps", type=float, default=0.125, help="link rate for the wall-time estimate (GB/s)")
    args = parser.parse_args()
    per_round = round_seconds(args.line_gbps)
    print(
        "| N | d | trials | missed faults | false accusations | rounds mean (max) | bound 2d⌈log2(N/d)⌉+2 "
        "| group tests mean | est. wall (s) | pairwise rounds (est. s) | bisection rounds, missed, false | sim (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in SIZES:
        for d in FAULTS:
            trials = args.trials_at_16384 if n == 16384 else args.trials
            start = time.perf_counter()
            ours = simulate_diagnose(n, d, trials, seed=args.seed + 7919 * n + d)
            bisect = simulate_bisection(n, d, trials, seed=args.seed + 104729 * n + d)
            took = time.perf_counter() - start
            rounds = np.array(ours.rounds)
            print(
                f"| {n:,} | {d} | {trials} | {ours.missed_pct():.2f}% ({ours.missed}/{ours.faults}) "
                f"| {ours.false_pct():.2f}% ({ours.false}/{ours.verdicts}) | {rounds.mean():.1f} ({rounds.max()}) "
                f"| {bound_rounds(n, d)} | {np.mean(ours.tests):.0f} | {rounds.mean() * per_round:.0f} "
                f"| {pairwise_rounds(n):,} ({2 * pairwise_rounds(n) * per_round:,.0f}) "
                f"| {np.mean(bisect.rounds):.0f}, {bisect.missed_pct():.1f}%, {bisect.false_pct():.1f}% | {took:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
