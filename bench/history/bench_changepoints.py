"""How well `history` finds a 7% busbw drop, and how often it raises a false alarm, on generated histories.

    python bench/history/bench_changepoints.py --histories 200 --flat 1000 --first-seed 1000

Generated (synthetic) series of one all_reduce size, 300 runs each, drawn from the noise profile
measured on this machine (tests/fixtures/history-noise-profile.json), each row's run-to-run noise
as measured. Two detectors: "out-of-place" is the row asked for alone; "+ in-place" adds the same
size's in-place row as a second column, as `commbench history` does (commbench/analysis/history.py).
Per size, detector and penalty: how many drops injected at run 200 are found exactly, within 2
runs, within 5 (where `history` moves a change to a run whose run.json changed, so a version
change recorded at run 200 is attributed there) and at all, and how many flat histories get any
change point (a false alarm). Histories use seeds FIRST_SEED.. (drops) and FIRST_SEED+100000..
(flat): the penalty was chosen on seeds from 0, the figures in bench/RESULTS-history.md come from
seeds from 1000, so they are not the ones it was chosen on.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from commbench.analysis.history import find_change_points
from commbench.analysis.synthetic import Injection, generate_rows, read_profile
from commbench.units import format_size, parse_size

PROFILE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "history-noise-profile.json"
RUNS, AT, DROP = 300, 200, 0.07


def detected_runs(
    profile: dict, size: int, with_in_place: bool, penalty: float, seed: int, injection: Injection | None
) -> list[int]:
    """1-based runs where the detector starts a new segment in one generated history."""
    out_of_place, in_place = generate_rows(profile, [(size, False), (size, True)], RUNS, injection=injection, seed=seed)
    starts = find_change_points(out_of_place, penalty_per_log_n=penalty, companion=in_place if with_in_place else None)
    return [start + 1 for start in starts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=200, help="histories with a drop at run 200")
    parser.add_argument("--flat", type=int, default=1000, help="histories without a change")
    parser.add_argument("--sizes", default="64M,8M", help="rows of the profile to try (out-of-place, with in-place)")
    parser.add_argument("--penalties", default="2,3,4", help="PELT penalties per column and log(n) to try")
    parser.add_argument("--first-seed", type=int, default=1000)
    args = parser.parse_args()
    profile = read_profile(PROFILE)
    sigma = {(row["size_bytes"], row["in_place"]): row["run_sigma"] for row in profile["rows"]}
    print(
        f"{'size':>5} {'sigma out/in':>13} {'detector':<13} {'penalty':>7} {'exact':>8} {'within 2':>9} "
        f"{'within 5':>9} {'found':>8} {'false alarms':>13}"
    )
    for size in map(parse_size, args.sizes.split(",")):
        for name, with_in_place in (("out-of-place", False), ("+ in-place", True)):
            for penalty in map(float, args.penalties.split(",")):
                injection = Injection(at=AT, drop=DROP)
                errors = [
                    min(
                        (
                            abs(run - AT)
                            for run in detected_runs(profile, size, with_in_place, penalty, seed, injection)
                        ),
                        default=None,
                    )
                    for seed in range(args.first_seed, args.first_seed + args.histories)
                ]
                alarms = sum(
                    bool(detected_runs(profile, size, with_in_place, penalty, seed, None))
                    for seed in range(args.first_seed + 100_000, args.first_seed + 100_000 + args.flat)
                )
                exact, within_2, within_5 = (
                    sum(error is not None and error <= runs for error in errors) for runs in (0, 2, 5)
                )
                found = sum(error is not None for error in errors)
                n = args.histories
                print(
                    f"{format_size(size):>5} {sigma[(size, False)]:6.3f}/{sigma[(size, True)]:.3f} {name:<13} {penalty:7.1f} "
                    f"{exact:>4}/{n:<3} {within_2:>4}/{n:<3} {within_5:>4}/{n:<3} {found:>4}/{n:<3} {alarms:>6}/{args.flat}"
                )


if __name__ == "__main__":
    main()
