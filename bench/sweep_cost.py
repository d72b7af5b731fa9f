"""Sweep cost: the default adaptive sweep against fixed nccl-tests defaults (20 iterations, 1 warm-up).

Both sweeps cover the five default ops, 8 B - 64 MiB, 2 gloo ranks. Each is run REPEATS times,
alternating, so both see the same machine. Reported: median wall time of each, and the
run-to-run spread at large sizes (>= 4 MiB): for each row, (max - min) / median of the reported
time across repeats, then the median over rows. Goal: adaptive wall time <= half of fixed, at
equal or better spread.

    python bench/sweep_cost.py [--repeats 3] [--max-bytes 64M]
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from commbench.data.rundir import list_runs, load_run

MODES = {"adaptive (default)": [], "fixed -n 20 -w 1": ["-n", "20", "-w", "1"]}


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


def large_size_spread(run_dirs: list[Path], min_size: int) -> float:
    times = defaultdict(list)
    for run_dir in run_dirs:
        for r in load_run(run_dir).records:
            if r["size_bytes"] >= min_size:
                times[(r["op"], r["in_place"], r["size_bytes"])].append(r["time_us"])
    spreads = [(max(t) - min(t)) / statistics.median(t) for t in times.values() if len(t) > 1]
    return statistics.median(spreads) if spreads else float("nan")  # one repeat: no spread to show


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-bytes", default="64M")
    args = parser.parse_args()
    walls, dirs = defaultdict(list), defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for mode, extra in MODES.items():
                out = Path(tmp) / f"{repeat}-{len(extra)}"
                walls[mode].append(one_sweep(extra, args.max_bytes, out))
                dirs[mode].extend(list_runs(out))
                print(f"repeat {repeat + 1}: {mode}: {walls[mode][-1]:.1f} s", flush=True)
        print(f"\n{'mode':<20}  {'wall (s), median':>16}  {'spread >= 4 MiB':>16}")
        for mode in MODES:
            spread = large_size_spread(dirs[mode], 4 << 20)
            print(f"{mode:<20}  {statistics.median(walls[mode]):16.1f}  {spread:15.1%}")
    adaptive, fixed = (statistics.median(walls[m]) for m in MODES)
    print(f"\nadaptive / fixed wall time: {adaptive / fixed:.2f} (goal <= 0.50)")


if __name__ == "__main__":
    main()
