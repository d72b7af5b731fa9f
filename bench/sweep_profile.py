"""Where a `commbench run` sweep's wall time goes: time per phase per size band, on every rank.

Runs `commbench run --nproc 2 -b 8 -e MAX` (extra flags after `--`) with a sitecustomize on the
ranks' path that wraps the harness's phases in perf_counter (nothing in commbench changes):
  prepare    allocation, known inputs, the op's closure (_prepared_op)
  first      the barrier pair, the first (checked) call and its agreement (_first_call)
  warm-up    the warm-up windows and their agreements (_warm_up)
  timed      the barrier pairs, the timed ops and the per-chunk agreements (_timed); `ops` is the
             sum of the timed samples, the rest is the loop's own cost
  check      the -c N > 1 extra checks
  gather     gather_to_rank0
  record     to_record + kept_samples (rank 0)
  write      MeasuredRun.add and the printed row (rank 0)
  other      the rest of measure() (the barrier after warm-up) and of the row loop
and, outside the rows, start-up (launch to the first row) and the end (last row to exit). Per band
and rank: records, then seconds a sweep in each phase. Figures are for the one host this runs on.

    python bench/sweep_profile.py [--max-bytes 64M] [-- -n 20 -w 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

PHASES = ("prepare", "first", "warm-up", "timed", "ops", "check", "gather", "record", "write", "other")
BANDS = ((0, 64 << 10, "< 64 KiB"), (64 << 10, 4 << 20, "64 KiB - 4 MiB"), (4 << 20, 1 << 62, ">= 4 MiB"))

HOOK = textwrap.dedent(
    """
    import atexit, json, os, time
    _out = os.environ.get("SWEEP_PROFILE_DIR")
    if _out and os.environ.get("RANK") is not None:
        import commbench.measure.harness as h
        import commbench.measure.sweep as s
        import commbench.measure.runner as r
        import commbench.measure.report as p
        clock = time.perf_counter
        rows, cur, marks = [], {}, {"import_done": time.time()}

        def wrap(module, name, phase):
            inner = getattr(module, name)
            def timed(*a, **k):
                t = clock()
                try:
                    return inner(*a, **k)
                finally:
                    cur[phase] = cur.get(phase, 0.0) + clock() - t
            setattr(module, name, timed)

        for name, phase in (("_prepared_op", "prepare"), ("_first_call", "first"), ("_warm_up", "warm-up"),
                            ("_timed", "timed"), ("check", "check")):
            wrap(h, name, phase)
        for name, phase in (("gather_to_rank0", "gather"), ("to_record", "record"), ("kept_samples", "record")):
            wrap(s, name, phase)
        wrap(r.MeasuredRun, "add", "write")
        wrap(p.NcclTestsPrinter, "row", "write")
        inner_measure = s.measure
        def measure(session, row, variant, warm=None):
            marks.setdefault("first_row", time.time())
            if cur:
                rows.append(dict(cur))
            cur.clear()
            cur.update(size=row.size, op=row.collective.name, variant=variant.label, start=clock())
            m = inner_measure(session, row, variant, warm)
            if m.values is not None:
                cur["ops"] = sum(m.values[:-1]) / 1e6
            cur.update(iters=m.iters, warmups=m.warmups, reason=m.stop_reason)
            return m
        s.measure = measure

        def dump():
            if cur:
                cur["end"] = clock()
                rows.append(dict(cur))
            end = clock()
            for i, row in enumerate(rows):  # each row's span runs to the next row's start
                row["span"] = (rows[i + 1]["start"] if i + 1 < len(rows) else row.get("end", end)) - row["start"]
            marks["exit"] = time.time()
            path = os.path.join(_out, f"rank{os.environ['RANK']}.json")
            with open(path, "w") as f:
                json.dump({"marks": marks, "rows": rows}, f)
        atexit.register(dump)
    """
)


def band_of(size: int) -> str:
    return next(name for low, high, name in BANDS if low <= size < high)


def summarise(rank: dict[str, Any], launched: float) -> list[str]:
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for row in rank["rows"]:
        band = band_of(row["size"])
        known = sum(row.get(phase, 0.0) for phase in PHASES if phase not in ("ops", "other"))
        for phase in PHASES:
            totals[band][phase] += row.get(phase, 0.0)
        totals[band]["other"] += row["span"] - known
        totals[band]["span"] += row["span"]
        counts[band].append((row["iters"], row["warmups"], row["reason"]))
    marks = rank["marks"]
    lines = [
        f"  start-up {marks['first_row'] - launched:5.1f} s (imports done {marks['import_done'] - launched:4.1f} s)"
        f", rows {sum(t['span'] for t in totals.values()):5.1f} s"
    ]
    lines.append(
        f"  {'band':>15} {'recs':>4} {'timed':>5} {'warm':>4} " + " ".join(f"{p:>7}" for p in PHASES) + "   span"
    )
    for _, _, band in BANDS:
        if band not in totals:
            continue
        rows = counts[band]
        iters = sorted(c[0] for c in rows)[len(rows) // 2]
        warm = sorted(c[1] for c in rows)[len(rows) // 2]
        cells = " ".join(f"{totals[band][p]:7.2f}" for p in PHASES)
        lines.append(f"  {band:>15} {len(rows):4} {iters:5} {warm:4} {cells} {totals[band]['span']:6.2f}")
        reasons: dict[str, int] = defaultdict(int)
        for c in rows:
            reasons[c[2]] += 1
        lines.append(f"  {'':>15} stop: " + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-bytes", default="64M")
    parser.add_argument("--ops", default=None, help="comma-separated ops (default: commbench's)")
    parser.add_argument("extra", nargs="*", help="flags for commbench run, after --")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        hook_dir = Path(tmp) / "hook"
        hook_dir.mkdir()
        (hook_dir / "sitecustomize.py").write_text(HOOK)
        env = dict(os.environ, SWEEP_PROFILE_DIR=tmp)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(hook_dir), env.get("PYTHONPATH", "")) if p)
        cmd = [sys.executable, "-m", "commbench", "run", "--nproc", "2", "-b", "8", "-e", args.max_bytes]
        cmd += ["--out", str(Path(tmp) / "out"), "--no-progress", *(["--ops", args.ops] if args.ops else [])]
        cmd += args.extra
        print(f"load average {os.getloadavg()[0]:.1f}; {' '.join(cmd[1:])}", flush=True)
        launched = time.time()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        wall = time.time() - launched
        for rank in (0, 1):
            data = json.loads((Path(tmp) / f"rank{rank}.json").read_text())
            print(f"rank {rank}: wall {wall:.1f} s, exit at {data['marks']['exit'] - launched:.1f} s")
            print(*summarise(data, launched), sep="\n")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
