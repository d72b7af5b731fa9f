"""Measure this machine's run-to-run noise from repeated sweeps and write a noise profile.

    python bench/history/measure_noise.py RUNS_DIR --command "..." --load "..." -o PROFILE.json

RUNS_DIR holds repeated `commbench run`s of one command (one op, world scope). Per (size,
in-place) row: the median busbw over runs, the robust standard deviation of log(busbw) over runs
(1.4826 x median absolute deviation) and the median per-iteration coefficient of variation. The
generator (commbench/analysis/synthetic.py) draws synthetic runs from this profile.
"""

from __future__ import annotations

import argparse
import json
import socket
from collections import defaultdict
from datetime import datetime, timezone

import numpy as np

from commbench.data.rundir import list_runs, load_run


def profile_of(runs_dir: str, command: str, load: str) -> dict:
    runs = [load_run(path) for path in list_runs(runs_dir)]
    busbw, cvs = defaultdict(list), defaultdict(list)
    ops = {record["op"] for run in runs for record in run.records}
    if len(ops) != 1:
        raise SystemExit(f"expected runs of one op, found {sorted(ops)}")
    for run in runs:
        for record in run.records:
            key = (record["size_bytes"], record["in_place"])
            busbw[key].append(record["busbw_gbps"])
            cvs[key].append(record["cv"])
    rows = []
    for (size, in_place), values in sorted(busbw.items()):
        logs = np.log(values)
        rows.append(
            {
                "size_bytes": size,
                "in_place": in_place,
                "busbw_gbps": float(np.median(values)),
                "run_sigma": float(1.4826 * np.median(np.abs(logs - np.median(logs)))),
                "iter_cv": float(np.median(cvs[(size, in_place)])),
            }
        )
    return {
        "measured": {
            "host": socket.gethostname(),
            "date": datetime.now(timezone.utc).isoformat(timespec="minutes"),
            "command": command,
            "runs": len(runs),
            "load": load,
        },
        "op": ops.pop(),
        "group_size": runs[0].records[0]["group_size"],
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs_dir")
    parser.add_argument("--command", required=True, help="the repeated command, recorded in the profile")
    parser.add_argument("--load", required=True, help="the machine's load while it ran, recorded in the profile")
    parser.add_argument("--quiet-run-sigma", type=float, help="the same machine's run-to-run noise when quiet ...")
    parser.add_argument("--quiet-source", help="... and where that figure comes from (both or neither)")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    profile = profile_of(args.runs_dir, args.command, args.load)
    if args.quiet_run_sigma is not None:
        if not args.quiet_source:
            raise SystemExit("--quiet-run-sigma needs --quiet-source")
        profile["quiet"] = {"run_sigma": args.quiet_run_sigma, "source": args.quiet_source}
    with open(args.output, "w", encoding="utf-8") as handle:
        json.dump(profile, handle, indent=1)
        handle.write("\n")
    for row in profile["rows"]:
        print(
            f"{row['size_bytes']:>10} {'in ' if row['in_place'] else 'out'}  busbw {row['busbw_gbps']:.3f} GB/s  "
            f"run sigma {row['run_sigma']:.3f}  iter cv {row['iter_cv']:.3f}"
        )


if __name__ == "__main__":
    main()
