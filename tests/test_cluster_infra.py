"""Tests of the multi-node test infrastructure itself (tests/cluster/): the emulated cluster of
network namespaces with tc-shaped links, and the real Slurm cluster on top of it.

Figures measured on the 2-core CI kind of machine are in the docstrings; see
shared/reference/operations.md for the recipe these helpers implement.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from cluster.emulated import (
    REGISTRY,
    EmulatedCluster,
    EmulationUnsupported,
    _link_list,
    _netns_list,
    cleanup_stale,
    netem_available,
    parse_rate,
    tcp_goodput_ceiling_gbps,
    wait_procs,
)
from cluster.fixtures import require_cluster

HERE = Path(__file__).parent / "cluster"
ALLREDUCE = str(HERE / "allreduce_probe.py")
TCP = str(HERE / "tcp_probe.py")
PY = sys.executable


# ------------------------------------------------------------------------------ pure arithmetic


def test_goodput_ceiling_arithmetic():
    # 1e9/8 x 1448/1514: MSS 1448 (1500 - 20 IP - 20 TCP - 12 timestamps) per 1514 B frame
    assert tcp_goodput_ceiling_gbps(1e9) == pytest.approx(1e9 / 8 * 1448 / 1514 / 1e9)
    assert tcp_goodput_ceiling_gbps("1gbit") == pytest.approx(0.1196, abs=5e-5)
    assert tcp_goodput_ceiling_gbps("100mbit") == pytest.approx(0.01196, abs=5e-6)
    assert tcp_goodput_ceiling_gbps(1e9, mtu=9000) == pytest.approx(1e9 / 8 * 8948 / 9014 / 1e9)
    assert parse_rate("1gbit") == 1e9 and parse_rate("10mbit") == 1e7
    assert parse_rate("1mbps") == 8e6  # tc: "bps" is bytes per second
    with pytest.raises(ValueError):
        parse_rate("fast")


# ------------------------------------------------------------------------------ helpers


def _probe_env(master: str, port: int, rank: int, world: int, ifname: str) -> dict:
    return dict(
        MASTER_ADDR=master,
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        GLOO_SOCKET_IFNAME=ifname,
        OMP_NUM_THREADS="1",
    )


def _records(out: str) -> dict[int, float]:
    return {r["bytes"]: r["busbw_GBps"] for r in map(json.loads, out.split("\n")) if r} if out.strip() else {}


def _allreduce(procs) -> dict[int, float]:
    res = wait_procs(procs, timeout=180)
    for rc, _out, err in res:
        assert rc == 0, f"probe failed ({rc}): {err[-2000:]}"
    return _records(res[0][1].strip())


def _tcp_transfer(c: EmulatedCluster, src: int, dst: int, nbytes: int, port: int) -> float:
    """GB/s of one TCP stream src -> dst (receiver-timed)."""
    recv = c.node(dst).popen(
        [PY, TCP, "recv", str(port), str(nbytes)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    send = c.node(src).popen(
        [PY, TCP, "send", c.addr(dst), str(port), str(nbytes)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    (rc_r, out, err_r), (rc_s, _, err_s) = wait_procs([recv, send], timeout=60)
    assert rc_r == 0 and rc_s == 0, f"transfer failed: {err_r} {err_s}"
    return json.loads(out)["GBps"]


def _leftovers(tag: str) -> list[str]:
    return [x for x in _netns_list() + _link_list() if x.startswith(tag)]


# ------------------------------------------------------------------------------ (a) two nodes


@pytest.mark.cluster
def test_two_nodes_gloo_allreduce_reaches_link_ceiling(emulated_cluster):
    """Measured on the 2-core dev machine over 5 runs: 0.1190-0.1199 GB/s at 16 MiB and
    0.1165-0.1196 GB/s at 64 MiB (97.5-100.3% of the 0.1196 ceiling; the lower end with other
    tests running at the same time); loopback inside one node 0.43-1.03 GB/s."""
    c = emulated_cluster
    # each node has its own hostname and address; the host is untouched
    for i in range(2):
        out = c.node(i).run("hostname; ip -4 -o addr show dev eth0", check=True).stdout
        assert out.split()[0] == c.names[i] and c.addr(i) in out
    assert c.names[0] != c.names[1]

    ceiling = tcp_goodput_ceiling_gbps(c.rate)
    sizes = "16M,64M"
    cross = _allreduce(
        [
            c.node(i).popen(
                [PY, ALLREDUCE, "--sizes", sizes, "--iters", "3"],
                env=_probe_env(c.addr(0), 29500, i, 2, "eth0"),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(2)
        ]
    )
    loop = _allreduce(
        [
            c.node(0).popen(
                [PY, ALLREDUCE, "--sizes", sizes, "--iters", "3"],
                env=_probe_env("127.0.0.1", 29501, i, 2, "lo"),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(2)
        ]
    )
    print(f"\nceiling {ceiling:.4f} GB/s; across the link {cross}; loopback {loop}")
    assert set(cross) == {16 << 20, 64 << 20}
    for size, bw in cross.items():
        assert 0.90 * ceiling <= bw <= 1.02 * ceiling, (size, bw, ceiling)
    assert max(loop.values()) > 2 * ceiling, (loop, ceiling)


# ------------------------------------------------------------------------------ (b) teardown


@pytest.mark.cluster
@pytest.mark.parametrize("exc", [ZeroDivisionError, KeyboardInterrupt])
def test_teardown_leaves_nothing_when_body_raises(exc):
    require_cluster()
    c = EmulatedCluster(nodes=2, rate="1gbit", etc_hosts=True)
    with pytest.raises(exc), c:
        tag = c.tag
        sleeper = c.node(1).popen(["sleep", "600"])
        # a grandchild in its own session: only the namespace sweep finds it
        c.node(0).run("setsid sleep 600 >/dev/null 2>&1 < /dev/null &", check=True)
        assert _leftovers(tag) and len(c.node(0).pids()) == 1
        assert c.names[0] in Path("/etc/hosts").read_text()
        raise exc()
    assert _leftovers(tag) == []
    assert sleeper.poll() is not None
    assert tag not in Path("/etc/hosts").read_text()
    assert not (REGISTRY / f"{tag}.json").exists()
    assert not any(ln.split()[0].startswith(tag) for ln in _ip(["netns", "list"]).splitlines() if ln.strip())


def _ip(args: list[str]) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True).stdout


@pytest.mark.cluster
def test_cleanup_stale_removes_a_crashed_runs_leftovers():
    """A process that built a cluster and died by SIGKILL (no teardown) leaves namespaces, veths,
    a bridge, /etc/hosts lines and processes; cleanup_stale(prefix) removes them all, and leaves
    live clusters of the same prefix alone."""
    require_cluster()
    code = textwrap.dedent(f"""
        import sys, time; sys.path.insert(0, {str(HERE.parent)!r})
        from cluster.emulated import EmulatedCluster
        c = EmulatedCluster(nodes=2, prefix="cbz", etc_hosts=True).start()
        c.node(0).popen(["sleep", "600"])
        print(c.tag, flush=True)
        time.sleep(600)
    """)
    with EmulatedCluster(nodes=1, prefix="cbz") as alive:
        p = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True)
        try:
            tag = p.stdout.readline().strip()
            assert tag.startswith("cbz") and _leftovers(tag)
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=10)
        assert _leftovers(tag) and tag in Path("/etc/hosts").read_text()
        removed = cleanup_stale("cbz")
        assert removed and _leftovers(tag) == []
        assert tag not in Path("/etc/hosts").read_text()
        assert _leftovers(alive.tag), "a live cluster must survive cleanup_stale"
    assert _leftovers(alive.tag) == []


@pytest.mark.cluster
def test_two_clusters_at_once_are_isolated(emulated_cluster_factory):
    """Concurrent tests each get their own names and subnet, and cannot reach each other."""
    a = emulated_cluster_factory(nodes=2)
    b = emulated_cluster_factory(nodes=2)
    assert a.tag != b.tag and a.subnet != b.subnet and set(a.names).isdisjoint(b.names)
    ok = a.node(0).run([PY, TCP, "connect", a.addr(1), "22", "2"], timeout=30)
    assert "refused" in ok.stdout  # same cluster: reachable (nobody listens, RST)
    cross = a.node(0).run([PY, TCP, "connect", b.addr(1), "22", "2"], timeout=30)
    assert "unreachable" in cross.stdout.lower(), cross.stdout  # no route out of a cluster


# ------------------------------------------------------------------------------ (c) shaping, faults


@pytest.mark.cluster
@pytest.mark.parametrize("emulated_cluster", [dict(nodes=3, per_node_rate={2: "100mbit"})], indirect=True)
def test_per_node_rate_and_live_shape(emulated_cluster):
    """Node 2 is at 100 Mbit/s, both directions; the others at 1 Gbit/s. Then reshape live."""
    c = emulated_cluster
    fast, slow = tcp_goodput_ceiling_gbps("1gbit"), tcp_goodput_ceiling_gbps("100mbit")
    to_fast = _tcp_transfer(c, 0, 1, 24 << 20, 5001)
    to_slow = _tcp_transfer(c, 0, 2, 4 << 20, 5002)
    from_slow = _tcp_transfer(c, 2, 0, 4 << 20, 5003)
    print(
        f"\n0->1 {to_fast:.4f} (ceiling {fast:.4f}); 0->2 {to_slow:.5f}, 2->0 {from_slow:.5f} (ceiling {slow:.5f}) GB/s"
    )
    assert 0.85 * fast <= to_fast <= 1.05 * fast
    assert 0.85 * slow <= to_slow <= 1.05 * slow
    assert 0.85 * slow <= from_slow <= 1.05 * slow
    c.shape(2, rate="1gbit")
    again = _tcp_transfer(c, 0, 2, 24 << 20, 5004)
    assert again > 5 * slow, again
    assert "rate 1Gbit" in c.qdiscs(2)


@pytest.mark.cluster
def test_set_link_down_makes_connections_fail_fast_and_up_restores(emulated_cluster):
    c = emulated_cluster
    listener = c.node(1).popen([PY, TCP, "listen", "6000"])
    deadline = time.monotonic() + 30  # the listener's interpreter may take a while to start under load
    while True:
        ok = c.node(0).run([PY, TCP, "connect", c.addr(1), "6000", "5"], timeout=30)
        if ok.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert ok.returncode == 0, ok.stdout + ok.stderr

    c.set_link(1, up=False)
    t0 = time.monotonic()
    bad = c.node(0).run([PY, TCP, "connect", c.addr(1), "6000", "2"], timeout=30)
    assert bad.returncode == 1 and not json.loads(bad.stdout)["ok"]
    assert time.monotonic() - t0 < 10
    # from the cut node itself the network is unreachable at once
    bad = c.node(1).run([PY, TCP, "connect", c.addr(0), "6000", "2"], timeout=30)
    assert bad.returncode == 1

    c.set_link(1, up=True)
    ok = c.node(0).run([PY, TCP, "connect", c.addr(1), "6000", "5"], timeout=30)
    assert ok.returncode == 0, ok.stdout
    assert listener.poll() is None


@pytest.mark.cluster
def test_loss_drops_packets_and_delay_needs_netem(emulated_cluster):
    c = emulated_cluster
    c.shape(1, loss=5)
    bw = _tcp_transfer(c, 0, 1, 2 << 20, 5005)  # into the lossy node; TCP still completes
    assert bw > 0 and c.dropped_packets(1) > 0
    c.shape(1, loss=None)
    assert c.dropped_packets(1) == 0
    if netem_available():
        c.shape(0, delay="1ms")
        assert "netem" in c.qdiscs(0)
    else:
        with pytest.raises(EmulationUnsupported, match="netem"):
            c.shape(0, delay="1ms")


# ------------------------------------------------------------------------------ (d) Slurm


@pytest.mark.cluster
@pytest.mark.slurm
def test_slurm_nodes_idle_and_srun_runs_on_each_node(slurm_cluster):
    sc = slurm_cluster
    assert sc.node_states() == {n: "idle" for n in sc.ec.names}
    p = sc.run(["srun", "-N2", "--ntasks-per-node=2", "hostname"], timeout=60, check=True)
    assert sorted(p.stdout.split()) == sorted(sc.ec.names * 2)


@pytest.mark.cluster
@pytest.mark.slurm
def test_slurm_sbatch_completed_and_names_resolve(slurm_cluster):
    sc = slurm_cluster
    job = sc.submit(
        textwrap.dedent("""\
        #!/bin/sh
        srun hostname
        first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
        echo "first=$first"
        getent hosts "$first"
        """),
        ["-N2", "--ntasks-per-node=1"],
    )
    assert sc.wait(job, timeout=60) == "COMPLETED", sc.output(job)
    out = sc.output(job)
    for name in sc.ec.names:
        assert name in out
    assert f"{sc.ec.addr(0)} " in out  # node names resolve (for torchrun --master-addr)
    assert sc.job_info(job)["ExitCode"] == "0:0"


@pytest.mark.cluster
@pytest.mark.slurm
def test_slurm_sbatch_exit_3_is_failed(slurm_cluster):
    sc = slurm_cluster
    job = sc.submit("#!/bin/sh\necho about to fail\nexit 3\n")
    assert sc.wait(job, timeout=60) == "FAILED"
    assert sc.job_info(job)["ExitCode"] == "3:0"
    assert "about to fail" in sc.output(job)


@pytest.mark.cluster
@pytest.mark.slurm
@pytest.mark.slow
def test_slurm_time_limit_is_timeout(slurm_cluster):
    """Slurm's time limits are whole minutes and slurmctld checks them every 30 s, so this takes
    60-90 s (measured: 83 s). `test_slurm_expire_is_timeout_fast` is the quick variant."""
    sc = slurm_cluster
    t0 = time.monotonic()
    job = sc.submit("#!/bin/sh\nsleep 300\n", ["--time=1"])
    assert sc.wait(job, timeout=180) == "TIMEOUT"
    print(f"\nTIMEOUT after {time.monotonic() - t0:.0f} s")


@pytest.mark.cluster
@pytest.mark.slurm
@pytest.mark.slow
def test_slurm_torchrun_per_node_gloo_across_link(slurm_cluster):
    """The launch pattern the benchmark uses: one torchrun per node (2 x 2 ranks), rendezvous at
    the first node's name. Only 1 MiB: this checks wiring, not bandwidth.
    Allocate one task per node (-c for the ranks): inside an allocation made with
    --ntasks-per-node=2, `srun --ntasks-per-node=1` still starts SLURM_NTASKS=4 tasks."""
    sc = slurm_cluster
    job = sc.submit(
        textwrap.dedent(f"""\
        #!/bin/sh
        export MASTER=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
        export GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1
        srun sh -c '{PY} -m torch.distributed.run --nnodes 2 \\
            --nproc-per-node 2 --node-rank $SLURM_NODEID --master-addr $MASTER \\
            --master-port 29500 {ALLREDUCE} --sizes 1M --iters 2'
        """),
        ["-N2", "--ntasks-per-node=1", "--cpus-per-task=2", "--time=5"],
    )
    state = sc.wait(job, timeout=240)
    out = sc.output(job)
    assert state == "COMPLETED", out[-3000:]
    rec = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(rec) == 1 and rec[0]["world"] == 4 and rec[0]["host"] == sc.ec.names[0]


@pytest.mark.cluster
@pytest.mark.slurm
def test_slurm_expire_is_timeout_fast(slurm_cluster):
    """SlurmCluster.expire: the job's end time moved to now -> TIMEOUT within ~30 s."""
    sc = slurm_cluster
    job = sc.submit("#!/bin/sh\nsleep 300\n", ["--time=10"])
    deadline = time.monotonic() + 30
    while sc.state(job) != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.2)
    sc.expire(job)
    assert sc.wait(job, timeout=60) == "TIMEOUT"


@pytest.mark.cluster
@pytest.mark.slurm
def test_slurm_killed_node_is_node_fail_and_restart_restores(slurm_cluster_factory):
    sc = slurm_cluster_factory(nodes=2)
    # the batch script outlives its srun, so only slurmctld's node-failure handling can end the job:
    # with `srun sleep 300` alone, srun exiting on the lost step sometimes ended it first, as FAILED
    job = sc.submit("#!/bin/sh\nsrun sleep 300\nsleep 300\n", ["-N2", "--ntasks-per-node=1"])
    deadline = time.monotonic() + 30
    while sc.state(job) != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.2)
    t0 = time.monotonic()
    sc.kill_node(1)
    assert sc.wait(job, timeout=90) == "NODE_FAIL"
    print(f"\nNODE_FAIL {time.monotonic() - t0:.0f} s after the kill")
    assert sc.node_states()[sc.ec.names[1]].startswith("down")
    sc.restart_node(1)
    p = sc.run(["srun", "-N2", "hostname"], timeout=60, check=True)
    assert sorted(p.stdout.split()) == sorted(sc.ec.names)
