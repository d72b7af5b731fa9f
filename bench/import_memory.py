"""Peak memory and wall time of `commbench import nccl-tests` on a big synthetic log.

Generates an all_reduce log of --rows table rows (the rows of
tests/fixtures/nccl_tests/synthetic_all_reduce_perf_h100x8.log repeated, so the figures are
synthetic input, measured here), imports it in a child process and prints the child's peak RSS
(resource.getrusage of the children), wall time and CPU time (user + system: on a shared machine
the wall time is mostly waiting for a core), with the host, the date and `uptime`.
Issue 24 asks for 10^6 rows under 500 MB; see bench/RESULTS.md for what has been measured.

    PYTHONPATH=$PWD python bench/import_memory.py --rows 100000
"""

from __future__ import annotations

import argparse
import resource
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

FIXTURE = (
    Path(__file__).resolve().parent.parent
    / "tests"
    / "fixtures"
    / "nccl_tests"
    / "synthetic_all_reduce_perf_h100x8.log"
)


def write_log(path: Path, rows: int) -> None:
    """The fixture's header, `rows` of its table rows in turn, then its footer."""
    lines = FIXTURE.read_text().split("\n")
    first_row = next(i for i, line in enumerate(lines) if line.strip()[:1].isdigit())
    table = [line for line in lines if line.strip()[:1].isdigit()]
    footer = lines[first_row + len(table) :]
    with open(path, "w") as handle:
        handle.write("\n".join(lines[:first_row]) + "\n")
        for index in range(rows):
            handle.write(table[index % len(table)] + "\n")
        handle.write("\n".join(footer))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000, help="table rows in the generated log (default 100000)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="commbench-import-memory-") as folder:
        log = Path(folder) / "all_reduce_perf.log"
        write_log(log, args.rows)
        command = [
            sys.executable,
            "-m",
            "commbench",
            "import",
            "nccl-tests",
            str(log),
            "--out",
            str(Path(folder) / "out"),
        ]
        before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        start = time.monotonic()
        # cwd: the temp folder, so `-m` takes commbench from PYTHONPATH, not from the caller's folder
        done = subprocess.run(command, capture_output=True, text=True, cwd=folder)
        wall = time.monotonic() - start
        after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        size_mb = log.stat().st_size / 1e6
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # the import, and the two `uptime`s (a few ms)
    peak_mb = usage.ru_maxrss / 1024  # KiB on Linux
    print(
        f"{datetime.now(timezone.utc).isoformat(timespec='seconds')} on {socket.gethostname()}: "
        f"{args.rows} rows ({size_mb:.1f} MB log), exit {done.returncode}, peak RSS {peak_mb:.0f} MiB, "
        f"wall {wall:.1f} s, CPU {usage.ru_utime + usage.ru_stime:.1f} s"
    )
    print(f"uptime before: {before}\nuptime after:  {after}")
    if done.returncode:
        print(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "(no stderr)", file=sys.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
