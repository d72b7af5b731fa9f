"""How well `history` finds a 7% busbw drop, and how often it raises a false alarm, on generated histories.

    python bench/history/bench_changepoints.py --histories 200 --flat 1000

Generated (synthetic) series of the all_reduce 8 MiB out-of-place row, 300 runs each, from the noise
profile measured on this machine (tests/fixtures/history-noise-profile.json): "measured" is each
row's noise as measured, "quiet" the single quiet-machine figure the profile records with its source
(the two are equal when the profile was itself measured on the quiet machine). Per penalty: how
many drops at run 200 are found within 2 runs, within 5 (where `history` moves a change to a run
whose run.json changed, so a version change recorded at run 200 is attributed there) and at all, and
how many flat histories get any change point (a false alarm).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from commbench.analysis.history import find_change_points
from commbench.analysis.synthetic import Injection, generate_series, quiet_variant, read_profile

PROFILE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "history-noise-profile.json"
ROW = (8 << 20, False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=200, help="histories with a drop at run 200")
    parser.add_argument("--flat", type=int, default=1000, help="histories without a change")
    parser.add_argument("--penalties", default="2,3,6", help="PELT penalties per log(n) to try")
    args = parser.parse_args()
    profile = read_profile(PROFILE)
    print(f"{'noise':<9} {'sigma':>6} {'penalty':>8} {'within 2':>10} {'within 5':>10} {'found':>8} {'false alarms':>14}")
    for name, chosen in (("quiet", quiet_variant(profile)), ("measured", profile)):
        sigma = next(row["run_sigma"] for row in chosen["rows"] if (row["size_bytes"], row["in_place"]) == ROW)
        for penalty in map(float, args.penalties.split(",")):
            errors = []
            for seed in range(args.histories):
                values = generate_series(chosen, *ROW, 300, injection=Injection(at=200, drop=0.07), seed=seed)
                found = [index + 1 for index in find_change_points(values, penalty_per_log_n=penalty)]
                errors.append(min((abs(run - 200) for run in found), default=None))
            alarms = sum(bool(find_change_points(generate_series(chosen, *ROW, 300, seed=10_000 + seed),
                                                 penalty_per_log_n=penalty)) for seed in range(args.flat))
            within_2, within_5 = (sum(error is not None and error <= runs for error in errors) for runs in (2, 5))
            found = sum(error is not None for error in errors)
            print(f"{name:<9} {sigma:6.3f} {penalty:8.1f} {within_2:>5}/{args.histories:<4} {within_5:>5}/{args.histories:<4}"
                  f" {found:>4}/{args.histories:<4} {alarms:>6}/{args.flat}")


if __name__ == "__main__":
    main()
