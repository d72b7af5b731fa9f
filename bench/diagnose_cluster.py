"""`commbench diagnose` against `commbench run --pairwise` on the same emulated cluster (real ranks).

Builds an emulated cluster (tests/cluster/emulated.py: network namespaces, tc-shaped 1 Gbit/s links;
needs root), one rank per node started with the variables torchrun sets, and measures:
  1. how well this machine drives the cluster: a healthy diagnosis's first group round (every node
     in a ring of 2, all rings at once), each ring's bandwidth against the link's TCP ceiling;
  2. with node 3 at 300 Mbit/s: the wall time of `commbench diagnose` (from starting the ranks to
     rank 0's exit, and the diagnosis's own rounds) and of `commbench run --pairwise -b 8 -e 8M`
     (the same 8 MiB per measurement), and what each names.
Prints a Markdown table for bench/RESULTS-diagnose.md. Usage:

    sudo python bench/diagnose_cluster.py [--nodes 8] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from cluster.emulated import EmulatedCluster, tcp_goodput_ceiling_gbps, wait_procs  # noqa: E402

SLOW_NODE = 3


def launch(cluster, args: list[str], timeout: float = 900) -> tuple[float, str]:
    """Every node's rank of `commbench ARGS`; (seconds until rank 0 exited, rank 0's stdout)."""
    port = random.randint(30000, 39000)
    n = len(cluster.nodes)
    start = time.monotonic()
    procs = [
        cluster.node(i).popen(
            [sys.executable, "-m", "commbench", *args],
            cwd=REPO,
            env={
                "RANK": str(i),
                "WORLD_SIZE": str(n),
                "LOCAL_RANK": "0",
                "PYTHONPATH": str(REPO),
                "MASTER_ADDR": cluster.addr(0),
                "MASTER_PORT": str(port),
                "GLOO_SOCKET_IFNAME": "eth0",
                "COMMBENCH_LAUNCHER": "env",
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    [(code, out, err)] = wait_procs(procs[:1], timeout)
    seconds = time.monotonic() - start
    wait_procs(procs[1:], 30)
    if code != 0:
        raise SystemExit(f"commbench {' '.join(args)} failed ({code}):\n{err[-3000:]}")
    return seconds, out


def diagnose(cluster) -> tuple[float, dict]:
    seconds, out = launch(cluster, ["diagnose", "--size", "8M", "--iters", "5", "--timeout", "30", "--json"])
    return seconds, json.loads(out)


def pairwise(cluster, scratch: Path) -> tuple[float, str]:
    seconds, out = launch(cluster, ["run", "--pairwise", "-b", "8", "-e", "8M", "--no-progress", "--out", str(scratch)])
    flagged = next(
        (line for line in out.splitlines() if "every flagged pair touches" in line),
        "# no node common to the flagged pairs",
    )
    return seconds, flagged.split(":", 1)[-1].strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    ceiling = tcp_goodput_ceiling_gbps("1gbit")
    print(
        f"# {datetime.now(timezone.utc).isoformat(timespec='seconds')} on {socket.gethostname()}, "
        f"{args.nodes} nodes x 1 rank, 1 Gbit/s (TCP ceiling {ceiling:.4f} GB/s)"
    )
    with EmulatedCluster(nodes=args.nodes, rate="1gbit") as cluster:
        for _ in range(args.repeats):
            _, healthy = diagnose(cluster)
            rings = healthy["round_log"][0]["busbw_gbps"]
            print(
                f"healthy fleet, first group round, {len(rings)} rings of 2 at once: "
                + ", ".join(f"{bw:.4f}" for bw in rings)
                + f" GB/s = {min(rings) / ceiling:.0%}-{max(rings) / ceiling:.0%} "
                f"of the ceiling; named: {healthy['exclude'] or 'none'}"
            )
        cluster.shape(SLOW_NODE, rate="300mbit")
        print(f"\nnode {cluster.names[SLOW_NODE]} at 300 Mbit/s\n")
        print("| tool | wall time (s), ranks started to rank 0 done | inside the tool | named |")
        print("|---|---|---|---|")
        scratch = Path(f"/tmp/diagnose-cluster-bench-{random.randint(0, 1 << 30)}")
        for _ in range(args.repeats):
            seconds, report = diagnose(cluster)
            print(
                f"| diagnose | {seconds:.1f} | {report['wall_s']:.1f} s, straggler screen + {report['rounds']} rounds, "
                f"{report['group_tests']} group tests | {report['exclude'] or 'none'} |"
            )
            seconds, named = pairwise(cluster, scratch)
            print(f"| run --pairwise | {seconds:.1f} | {args.nodes - 1} rounds x 2 sizes | {named} |")
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
