"""Sweep cost: the default adaptive sweep against fixed nccl-tests defaults (20 iterations, 1 warm-up).

Both sweeps cover the five default ops, 8 B - 64 MiB, 2 gloo ranks. Each is run REPEATS times,
alternating, who goes first alternating too, so both see the same machine. Reported: each
repeat's wall-time ratio (adaptive / the fixed sweep beside it), the median of those, the median
wall time of each, and the run-to-run spread at large sizes (>= 4 MiB): for each row,
(max - min) / median of the reported time across repeats, then the median over rows. Goal
(issue 31): adaptive wall time <= half of fixed, at equal or better spread; the last line is the
verdict. Per size band, the same spread for both sweeps (the goal looks at >= 4 MiB only; below
it the adaptive sweep's extra ops buy steadier medians than the fixed sweep's 20), and what each
sweep spent its ops on (records, timed and warm-up counts, op-seconds) says where a ratio comes from.

    python bench/sweep_cost.py [--repeats 3] [--max-bytes 64M]     # about 3 min on a quiet machine
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from commbench.data.rundir import list_runs, load_run

MODES = {"adaptive (default)": [], "fixed -n 20 -w 1": ["-n", "20", "-w", "1"]}
GOAL_RATIO = 0.5
LARGE = 4 << 20


def one_sweep(extra: list[str], max_bytes: str, out: Path) -> float:
    cmd = [
        sys.executable,
        "-m",
        "commbench",
        "run",
        "--nproc",
        "2",
        "-b",
        "8",
        "-e",
        max_bytes,
        "--out",
        str(out),
        "--no-progress",
        *extra,
    ]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def large_size_spread(run_dirs: list[Path], min_size: int, max_size: int = 1 << 62) -> float:
    """Per row (op, variant, size in [min_size, max_size)), (max - min) / median of the reported
    time across repeats; the median over rows."""
    times = defaultdict(list)
    for run_dir in run_dirs:
        for r in load_run(run_dir).records:
            if min_size <= r["size_bytes"] < max_size:
                times[(r["op"], r["in_place"], r["size_bytes"])].append(r["time_us"])
    spreads = [(max(t) - min(t)) / statistics.median(t) for t in times.values() if len(t) > 1]
    return statistics.median(spreads) if spreads else float("nan")  # one repeat: no spread to show


BANDS = ((0, 64 << 10, "< 64 KiB"), (64 << 10, LARGE, "64 KiB - 4 MiB"), (LARGE, 1 << 62, ">= 4 MiB"))


def spread_by_band(run_dirs: dict[str, list[Path]]) -> list[str]:
    """The same spread in every band, both sweeps: the goal looks at >= 4 MiB only, where the fixed
    sweep times 20 ops to the adaptive one's few; below it the adaptive sweep times many more, and
    this line shows what its extra cost there buys (the fixed sweep's small-size medians of 20)."""
    return [
        f"{name:>16}: "
        + ", ".join(f"{mode} {large_size_spread(dirs, low, high):.1%}" for mode, dirs in run_dirs.items())
        for low, high, name in BANDS
    ]


def work_by_band(run_dirs: list[Path]) -> list[str]:
    """What each sweep spent its op time on, per size band and repeat: records, timed and warm-up
    ops per record (medians), and op-seconds, each record's mean op time x (timed + warm-up ops),
    the part of the wall time the iteration choice sets (checks, start-up and bookkeeping aside)."""
    lines = []
    for low, high, name in BANDS:
        rows = [r for d in run_dirs for r in load_run(d).records if low <= r["size_bytes"] < high]
        if not rows:
            continue
        seconds = sum(r["time_us_mean_nccl"] * (r["iters"] + r["warmup"]) for r in rows) / 1e6 / len(run_dirs)
        lines.append(
            f"{name:>16}: {len(rows) // len(run_dirs):4} records, timed {statistics.median(r['iters'] for r in rows):5.0f}"
            f" + warm-up {statistics.median(r['warmup'] for r in rows):3.0f} ops a record (medians),"
            f" {seconds:6.1f} op-s a sweep"
        )
    return lines


def verdict(ratio: float, spreads: dict[str, float]) -> str:
    adaptive, fixed = (spreads[mode] for mode in MODES)
    cheap, steady = ratio <= GOAL_RATIO, adaptive <= fixed
    outcome = "PASS" if cheap and steady else "FAIL" if adaptive == adaptive else "NOT SHOWN (one repeat: no spread)"
    return (
        f"VERDICT sweep_cost: adaptive / fixed wall time {ratio:.2f} (goal <= {GOAL_RATIO}), spread >= 4 MiB "
        f"{adaptive:.1%} vs fixed {fixed:.1%} (goal: no worse) -> {outcome}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-bytes", default="64M")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, {args.repeats} repeats", flush=True)
    walls, dirs = defaultdict(list), defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            order = list(MODES) if repeat % 2 == 0 else list(MODES)[::-1]
            for mode in order:
                out = Path(tmp) / f"{repeat}-{len(MODES[mode])}"
                walls[mode].append(one_sweep(MODES[mode], args.max_bytes, out))
                dirs[mode].extend(list_runs(out))
                print(
                    f"repeat {repeat + 1}: {mode}: {walls[mode][-1]:.1f} s, load {os.getloadavg()[0]:.1f}", flush=True
                )
        print(f"\n{'mode':<20}  {'wall (s), median':>16}  {'spread >= 4 MiB':>16}")
        spreads = {mode: large_size_spread(dirs[mode], LARGE) for mode in MODES}
        for mode in MODES:
            print(f"{mode:<20}  {statistics.median(walls[mode]):16.1f}  {spreads[mode]:15.1%}")
        print("\nspread across repeats per band (median over rows):", *spread_by_band(dirs), sep="\n  ")
        for mode in MODES:
            print(f"\n{mode}, mean over repeats:", *work_by_band(dirs[mode]), sep="\n  ")
    ratios = [a / f for a, f in zip(*(walls[mode] for mode in MODES))]
    print(f"\nadaptive / fixed wall time per repeat: {', '.join(f'{r:.2f}' for r in ratios)}")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    print(verdict(statistics.median(ratios), spreads))


if __name__ == "__main__":
    main()
