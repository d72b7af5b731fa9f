"""`EmulatedCluster.shape_path`: a slow link between two given nodes that is neither node's fault.

The fault `commbench diagnose` must report as a link, not a node: only the traffic between nodes
i and j, both ways, runs at the path rate, while i and j still talk to everyone else at the node
rate. Checked with single TCP streams (tests/cluster/tcp_probe.py), one at a time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster.emulated import EmulatedCluster, tcp_goodput_ceiling_gbps, wait_procs

TCP = str(Path(__file__).parent / "cluster" / "tcp_probe.py")
PATH_RATE = "300mbit"
NBYTES = 24 << 20  # 0.2 s at 1 Gbit/s, 0.7 s at 300 Mbit/s: long enough to be past the burst


def goodput(c: EmulatedCluster, src: int, dst: int, port: int) -> float:
    """GB/s of one TCP stream src -> dst, timed by the receiver."""
    return goodputs(c, [(src, dst)], port)[0]


def wait_connected(c: EmulatedCluster, node: int, port: int, timeout_s: float = 30) -> None:
    """Until node has an established TCP connection on its local port (a receiver's accepted stream)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if c.node(node).run(["ss", "-Htn", "state", "established", f"( sport = :{port} )"], timeout=10).stdout.strip():
            return
        time.sleep(0.05)
    raise AssertionError(f"no stream reached node {node} port {port} within {timeout_s} s")


def goodputs(
    c: EmulatedCluster, pairs: list[tuple[int, int]], port: int, nbytes: list[int] | None = None, stagger_s: float = 0.0
) -> list[float]:
    """GB/s of one TCP stream per (src, dst) pair, each timed by its receiver; each stream starts
    `stagger_s` after the one before is connected (0: all at once)."""
    procs = []
    for k, (src, dst) in enumerate(pairs):
        size = str(nbytes[k] if nbytes else NBYTES)
        if k and stagger_s:
            # from the earlier stream's connection, not its process start: beside busy xdist workers a
            # sender's Python took longer than the stagger to start, and the streams did not overlap
            wait_connected(c, pairs[k - 1][1], port + k - 1)
            time.sleep(stagger_s)
        procs.append(
            c.node(dst).popen(
                [sys.executable, TCP, "recv", str(port + k), size],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
        procs.append(
            c.node(src).popen(
                [sys.executable, TCP, "send", c.addr(dst), str(port + k), size],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = wait_procs(procs, timeout=60)
    assert all(rc == 0 for rc, _, _ in results), f"transfers {pairs} failed: {[err for _, _, err in results]}"
    return [json.loads(out)["GBps"] for _, out, _ in results[::2]]


@pytest.mark.cluster
@pytest.mark.parametrize("emulated_cluster", [dict(nodes=3, rate="1gbit")], indirect=True)
def test_shape_path_slows_only_that_path_both_ways(emulated_cluster):
    c = emulated_cluster
    line, path = tcp_goodput_ceiling_gbps("1gbit"), tcp_goodput_ceiling_gbps(PATH_RATE)
    c.shape_path(0, 1, PATH_RATE)
    shaped = {
        (0, 1): goodput(c, 0, 1, 29610),
        (1, 0): goodput(c, 1, 0, 29611),
        (0, 2): goodput(c, 0, 2, 29612),
        (2, 1): goodput(c, 2, 1, 29613),
    }
    # node 0's total stays at its line rate: 0->2 starts once 0->1 runs and ends well before it (0->1
    # sends 3x as much at under a third of the rate), so 0->2's average is taken while both share the link
    together = goodputs(c, [(0, 1), (0, 2)], 29615, nbytes=[3 * NBYTES, NBYTES], stagger_s=0.5)
    c.shape_path(1, 0, None)
    restored = goodput(c, 0, 1, 29614)
    print(
        f"\nceilings: line {line:.4f} GB/s, path {path:.4f} GB/s; shaped {shaped}; 0->1 and 0->2 at once "
        f"{together}; 0->1 after removal {restored:.4f}"
    )
    for pair in ((0, 1), (1, 0)):
        assert 0.85 * path <= shaped[pair] <= 1.05 * path, (pair, shaped[pair], path)
    for pair in ((0, 2), (2, 1)):  # the ends of the slow path still reach the others at line rate
        assert 0.85 * line <= shaped[pair] <= 1.05 * line, (pair, shaped[pair], line)
    assert together[1] <= 1.05 * (line - path) and together[0] <= 1.05 * path, together
    assert 0.85 * line <= restored <= 1.05 * line, restored
    assert "htb" not in c.qdiscs(0) + c.qdiscs(1)  # back to the plain tbf of the verified recipe


@pytest.mark.cluster
@pytest.mark.parametrize("emulated_cluster", [dict(nodes=3, rate="1gbit")], indirect=True)
def test_shape_path_composes_with_node_shaping(emulated_cluster):
    """A node made slower keeps its slow path at the lower of the two rates; shaping it back
    leaves the path shaped."""
    c = emulated_cluster
    c.shape_path(0, 1, PATH_RATE)
    c.shape(1, rate="100mbit")
    slower = goodput(c, 0, 1, 29620)
    c.shape(1, rate="1gbit")
    back = goodput(c, 1, 0, 29621)
    print(f"\n0->1 with node 1 at 100mbit {slower:.4f} GB/s; 1->0 with node 1 back at 1gbit {back:.4f} GB/s")
    assert slower <= 1.05 * tcp_goodput_ceiling_gbps("100mbit"), slower
    assert 0.85 * tcp_goodput_ceiling_gbps(PATH_RATE) <= back <= 1.05 * tcp_goodput_ceiling_gbps(PATH_RATE), back


def test_shape_path_refuses_a_node_with_itself():
    c = EmulatedCluster(nodes=2)  # not started: the argument check comes first
    with pytest.raises(ValueError, match="two different nodes"):
        c.shape_path(1, 1, PATH_RATE)
    with pytest.raises(ValueError, match="bad rate"):
        c.shape_path(0, 1, "fast")
