"""How well `history` finds a 7% busbw drop, and how often it raises a false alarm, on generated histories.

    python bench/history/bench_changepoints.py --histories 200 --flat 1000

Generated (synthetic) series of the all_reduce 8 MiB out-of-place row, 300 runs each, from the noise
profile measured on this machine (tests/fixtures/history-noise-profile.json): "shared" is the noise
measured while the machine was shared, "quiet" the same machine's quiet figure recorded there with
its source. Per penalty: how many drops at run 200 are found within 2 runs (and at all), and how
many flat histories get any change point (a false alarm).
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
    print(f"{'noise':<8} {'sigma':>6} {'penalty':>8} {'within 2':>10} {'found':>8} {'false alarms':>14}")
    for name, chosen in (("quiet", quiet_variant(profile)), ("shared", profile)):
        sigma = next(row["run_sigma"] for row in chosen["rows"] if (row["size_bytes"], row["in_place"]) == ROW)
        for penalty in map(float, args.penalties.split(",")):
            errors = []
            for seed in range(args.histories):
                values = generate_series(chosen, *ROW, 300, injection=Injection(at=200, drop=0.07), seed=seed)
                found = [index + 1 for index in find_change_points(values, penalty_per_log_n=penalty)]
                errors.append(min((abs(run - 200) for run in found), default=None))
            alarms = sum(bool(find_change_points(generate_series(chosen, *ROW, 300, seed=10_000 + seed),
                                                 penalty_per_log_n=penalty)) for seed in range(args.flat))
            within = sum(error is not None and error <= 2 for error in errors)
            found = sum(error is not None for error in errors)
            print(f"{name:<8} {sigma:6.3f} {penalty:8.1f} {within:>5}/{args.histories:<4} {found:>4}/{args.histories:<4}"
                  f" {alarms:>6}/{args.flat}")


if __name__ == "__main__":
    main()
