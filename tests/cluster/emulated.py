"""An emulated multi-node cluster on one Linux machine, for tests.

Each "node" is a network namespace with its own hostname; nodes meet on a Linux bridge; each
node's link is shaped with tc (tbf), so the physical limit of the "network" is known exactly
(see `tcp_goodput_ceiling_gbps`). Ranks on one node talk over that namespace's loopback (fast);
ranks on different nodes cross the shaped link. Recipe: shared/reference/operations.md.

    with EmulatedCluster(nodes=2, rate="1gbit") as c:
        p = c.node(0).popen(["python", "-c", "import socket; print(socket.gethostname())"],
                            stdout=subprocess.PIPE, text=True)
        print(p.communicate(timeout=30)[0], c.addr(0), c.addr(1))

Conventions
- Nodes are indexed from 0. Node i has hostname ``<tag>n<i>`` (or ``names[i]``), address
  ``10.77.<k>.<11+i>`` on a /24 private subnet chosen per instance (k random, checked unused),
  interface ``eth0`` inside its namespace; the host side of the bridge is ``10.77.<k>.1``.
- ``tag`` = ``prefix`` + 4 random hex digits; every resource name starts with it (bridge
  ``<tag>br``, host-side veths ``<tag>v<i>``, namespaces ``<tag>n<i>``), so concurrent instances
  and other engineers' clusters never collide. ``cleanup_stale(prefix)`` removes leftovers of
  instances whose owning process is dead (state is kept in ``/run/commbench-testclusters``).
- Shaping, per node: ``rate`` is applied on the node's eth0 egress (node -> bridge) and, unless
  ``shape_ingress=False``, also on the host-side veth egress (bridge -> node), so a pair of nodes
  talks at min(rate_a, rate_b) in both directions (a "slow node" is slow both ways). tbf is used
  with ``latency`` 50ms and ``burst`` 256kb at 1 Gbit/s as in the verified recipe; by default
  (``burst="auto"``) the burst scales with the rate (2 ms of traffic, at least 16 KiB), so that
  slower links do not let short transfers beat their ceiling.
  ``loss`` (percent, netem convention: ``1`` or ``"1%"``) drops packets arriving at the node's
  eth0, implemented with nftables (netdev ingress hook, ``numgen random``) because the kernel of the CI
  machines has no netem (CONFIG_NET_SCH_NETEM is not set); needs the ``nft`` binary (Debian
  package ``nftables``); without ``nft`` but with netem, netem drops them on the node's egress
  instead (netem reports a drop to TCP as sent, so it is loss on the wire too, and
  ``dropped_packets`` reads 0 there). ``delay`` needs netem and raises `EmulationUnsupported` where the kernel
  lacks it (tests should skip on that exception; `netem_available()` tells in advance).
- Per path: ``shape_path(i, j, rate)`` shapes only the traffic between nodes i and j (both
  directions; a bad cable or switch port rather than a bad node), leaving their other paths at
  the node rate. A node with a shaped path gets an htb tree instead of the plain tbf: one parent
  class at the node rate (so the node's total stays capped), a default class, and per shaped peer
  a class at min(path rate, node rate) chosen by a u32 filter on the peer's address (destination
  on eth0, source on the host-side veth when ingress shaping is on). Nodes without shaped paths
  keep the verified tbf recipe.
- Only addresses inside namespaces created here (and the bridge address) are ever used.

All of this needs root; `prerequisites_missing()` says why it cannot run (the fixtures turn that
into pytest.skip, which fails in CI: tests/conftest.py).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import ipaddress
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REGISTRY = Path("/run/commbench-testclusters")
ETC_HOSTS = Path("/etc/hosts")
HOSTS_MARKER = "# commbench-testcluster"
DEFAULT_PREFIX = "cbt"
GSO_MAX_SEGS = 65535  # the kernel's default for a veth
SUBNET_BASE = "10.77"
NODE_HOST_OFFSET = 11  # node i -> 10.77.k.(11 + i), as in the reference recipe
REQUIRED_TOOLS = ("ip", "tc", "nsenter", "unshare")
_UNSET = object()


class EmulationUnsupported(RuntimeError):
    """The kernel or the machine cannot emulate what was asked (e.g. delay without netem)."""


# --------------------------------------------------------------------------------------------
# arithmetic


def tcp_goodput_ceiling_gbps(rate_bits: float | str, mtu: int = 1500) -> float:
    """TCP payload rate (GB/s, 1 GB = 1e9 bytes) of a link shaped to ``rate_bits`` bits/s.

    Per full-size segment the wire (as tbf counts it: skb length incl. the Ethernet header)
    carries ``mtu + 14`` bytes (14 B Ethernet header; preamble/FCS/IFG are not counted by tc on
    a veth), of which ``mtu - 52`` bytes are TCP payload (20 B IPv4 + 20 B TCP + 12 B TCP
    timestamp option = 52 B). At MTU 1500 that is 1448/1514, the MSS/frame ratio seen in the
    reference, so at 1 Gbit/s: 1e9 / 8 x 1448 / 1514 = 119.55e6 B/s = 0.1196 GB/s.
    """
    rate = parse_rate(rate_bits) if isinstance(rate_bits, str) else float(rate_bits)
    if mtu <= 52:
        raise ValueError(f"mtu {mtu} too small")
    return rate / 8.0 * (mtu - 52) / (mtu + 14) / 1e9


_RATE_UNITS = {
    # tc semantics: "bit" suffixes are bits/s, "bps" suffixes are BYTES/s
    "bit": 1,
    "kbit": 1e3,
    "mbit": 1e6,
    "gbit": 1e9,
    "tbit": 1e12,
    "bps": 8,
    "kbps": 8e3,
    "mbps": 8e6,
    "gbps": 8e9,
    "tbps": 8e12,
}


def parse_rate(rate: str | float | int) -> float:
    """'1gbit' -> 1e9 (bits/s). Numbers are bits/s. tc units ('kbps' = kilobytes/s!)."""
    if isinstance(rate, (int, float)):
        return float(rate)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", rate)
    if not m or m.group(2).lower() not in _RATE_UNITS | {"": 1}:
        raise ValueError(f"bad rate {rate!r}: use e.g. '1gbit', '100mbit' or bits/s")
    return float(m.group(1)) * _RATE_UNITS.get(m.group(2).lower(), 1)


def _tc_rate(rate: str | float | int) -> str:
    return f"{int(parse_rate(rate))}bit"


def _auto_burst_bytes(rate) -> int:
    """256 KiB at 1 Gbit/s (the verified recipe), i.e. ~2 ms of traffic, scaled with the rate: a
    fixed 256 KiB is 21 ms at 100 Mbit/s and lets short transfers beat the ceiling by several
    percent. Floor 16 KiB (> 10 full frames)."""
    return max(16384, int(262144 * parse_rate(rate) / 1e9))


def _percent(loss) -> float:
    if isinstance(loss, str):
        loss = loss.strip().rstrip("%")
    value = float(loss)
    if not 0 <= value <= 100:
        raise ValueError(f"loss {loss!r} must be a percentage in [0, 100]")
    return value


def _delay_ms(delay) -> float:
    if isinstance(delay, (int, float)):
        return float(delay)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(us|ms|s)?\s*", delay)
    if not m:
        raise ValueError(f"bad delay {delay!r}: use e.g. '1ms'")
    return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3, None: 1.0}[m.group(2)]


# --------------------------------------------------------------------------------------------
# small process helpers


def _sh(
    args: Sequence[str], check: bool = True, timeout: float = 20, input: str | None = None
) -> subprocess.CompletedProcess:
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, input=input)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)!r} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def _proc_start(pid: int) -> str | None:
    """Start time of a process (field 22 of /proc/pid/stat), to tell a live owner from pid reuse."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(pid: int, start: str | None) -> bool:
    now = _proc_start(pid)
    return now is not None and (start is None or now == start)


def _kill_pids(pids: Iterable[int], grace: float = 2.0) -> None:
    """SIGTERM, wait up to `grace` s, then SIGKILL. Only the given pids."""
    pids = [p for p in set(pids) if p > 1 and p != os.getpid()]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_proc_start(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _netns_pids(netns: str) -> list[int]:
    p = _sh(["ip", "netns", "pids", netns], check=False)
    return [int(x) for x in p.stdout.split() if x.isdigit()]


def _netns_list() -> list[str]:
    p = _sh(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in p.stdout.splitlines() if line.strip()]


def _link_list() -> list[str]:
    p = _sh(["ip", "-o", "link", "show"], check=False)
    names = []
    for line in p.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return names


def torchrun_command(
    cluster: EmulatedCluster, node_rank: int, port: int, program: Sequence[str], nproc_per_node: int = 1
) -> list[str]:
    """`python -m torch.distributed.run ...` for one node of the cluster, node 0 as the rendezvous."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(len(cluster.nodes)),
        "--nproc-per-node",
        str(nproc_per_node),
        "--node-rank",
        str(node_rank),
        "--master-addr",
        cluster.addr(0),
        "--master-port",
        str(port),
        *program,
    ]


def wait_procs(procs: Sequence[subprocess.Popen], timeout: float) -> list[tuple[int | None, str, str]]:
    """Wait for all processes with one deadline; kill the stragglers' process groups.

    Returns (returncode or None if killed, stdout, stderr) per process (outputs as text if they
    were opened with pipes and text=True, else '').
    """
    deadline = time.monotonic() + timeout
    results = []
    for p in procs:
        left = max(0.1, deadline - time.monotonic())
        try:
            out, err = p.communicate(timeout=left)
            results.append((p.returncode, out or "", err or ""))
        except subprocess.TimeoutExpired:
            _killpg(p)
            out, err = p.communicate()
            results.append((None, out or "", err or ""))
    return results


def _killpg(p: subprocess.Popen, grace: float = 2.0) -> None:
    if p.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=5)


# --------------------------------------------------------------------------------------------
# prerequisites


_PROBE_CACHE: dict[str, str | None] = {}


def prerequisites_missing() -> str | None:
    """None if an emulated cluster can be built here, else the reason (for pytest.skip)."""
    if "base" in _PROBE_CACHE:
        return _PROBE_CACHE["base"]
    reason = None
    if os.geteuid() != 0:
        reason = "emulated cluster needs root (network namespaces, bridge, tc)"
    else:
        missing = [t for t in REQUIRED_TOOLS if shutil.which(t) is None]
        if missing:
            reason = f"emulated cluster needs {', '.join(missing)} (Debian: iproute2, util-linux)"
        else:
            reason = _probe_kernel()
    _PROBE_CACHE["base"] = reason
    return reason


def _probe_kernel() -> str | None:
    """Create and delete a throw-away namespace + veth + tbf: does the kernel support it?"""
    tag = f"cbprobe{os.getpid() % 100000}"
    ns, veth = f"{tag}n", f"{tag}v"
    try:
        _sh(["ip", "netns", "add", ns])
        _sh(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
        _sh(
            [
                "tc",
                "-n",
                ns,
                "qdisc",
                "add",
                "dev",
                "eth0",
                "root",
                "tbf",
                "rate",
                "1gbit",
                "burst",
                "256kb",
                "latency",
                "50ms",
            ]
        )
        return None
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:  # what _sh raises; a bug still raises
        return f"kernel cannot build the emulated cluster: {e}"
    finally:
        _sh(["ip", "link", "del", veth], check=False)
        _sh(["ip", "netns", "del", ns], check=False)


def netem_available() -> bool:
    """Does the kernel have the netem qdisc (needed for `delay`)? Debian CI VMs: no."""
    if "netem" not in _PROBE_CACHE:
        ok = None
        if prerequisites_missing() is None:
            ns = f"cbprobe{os.getpid() % 100000}m"
            try:
                _sh(["ip", "netns", "add", ns])
                _sh(["ip", "-n", ns, "link", "add", "cbqa", "type", "veth", "peer", "name", "cbqb"])
                r = _sh(["tc", "-n", ns, "qdisc", "add", "dev", "cbqa", "root", "netem", "delay", "1ms"], check=False)
                ok = None if r.returncode == 0 else r.stderr.strip()
            finally:
                _sh(["ip", "netns", "del", ns], check=False)
        else:
            ok = "no emulated cluster"
        _PROBE_CACHE["netem"] = ok
    return _PROBE_CACHE["netem"] is None


def loss_available() -> bool:
    """Packet loss needs nftables (`nft`) or netem."""
    return shutil.which("nft") is not None or netem_available()


# --------------------------------------------------------------------------------------------
# registry (crash-safe bookkeeping shared by all instances on the machine)


@contextlib.contextmanager
def _locked():
    REGISTRY.mkdir(mode=0o755, parents=True, exist_ok=True)
    with open(REGISTRY / ".lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _records() -> dict[str, dict]:
    out = {}
    for f in REGISTRY.glob("*.json") if REGISTRY.exists() else []:
        try:
            rec = json.loads(f.read_text())
            out[rec["tag"]] = rec
        except (OSError, ValueError, KeyError):
            continue
    return out


def _write_record(rec: dict) -> None:
    tmp = REGISTRY / f".{rec['tag']}.tmp"
    tmp.write_text(json.dumps(rec, indent=1))
    tmp.replace(REGISTRY / f"{rec['tag']}.json")


def _hosts_remove(tags: Iterable[str]) -> None:
    """Remove our marked lines for `tags` from /etc/hosts (in place; keep everyone else's)."""
    tags = set(tags)
    if not tags or not ETC_HOSTS.exists():
        return
    text = ETC_HOSTS.read_text()
    keep = [ln for ln in text.splitlines(keepends=True) if not (HOSTS_MARKER in ln and ln.rstrip().split()[-1] in tags)]
    new = "".join(keep)
    if new != text:
        with open(ETC_HOSTS, "r+") as fh:  # in place: /etc/hosts may be a bind mount
            fh.seek(0)
            fh.write(new)
            fh.truncate()


def _teardown_record(rec: dict, errors: list[str]) -> None:
    """Remove everything a record lists. Best effort, collects errors."""
    for ns in rec.get("netns", []):
        with contextlib.suppress(Exception):
            _kill_pids(_netns_pids(ns), grace=1.0)
    for pid, start in rec.get("host_pids", []):
        if _alive(pid, start):
            _kill_pids([pid], grace=2.0)
    existing_ns = set(_netns_list())
    for ns in rec.get("netns", []):
        if ns in existing_ns:
            r = _sh(["ip", "netns", "del", ns], check=False)
            if r.returncode:
                errors.append(f"ip netns del {ns}: {r.stderr.strip()}")
    existing_links = set(_link_list())
    for link in rec.get("links", []):
        if link in existing_links:
            r = _sh(["ip", "link", "del", link], check=False)
            if r.returncode and link in _link_list():
                errors.append(f"ip link del {link}: {r.stderr.strip()}")
    try:
        _hosts_remove([rec["tag"]])
    except OSError as e:
        errors.append(f"/etc/hosts: {e}")
    for d in rec.get("dirs", []):
        shutil.rmtree(d, ignore_errors=True)


def cleanup_stale(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Remove leftovers of crashed runs whose names start with `prefix`.

    Only instances whose owning process is dead are touched (live clusters of concurrent tests
    are kept), plus resources starting with `prefix` that no registered instance owns.
    Returns a description of what was removed.
    """
    if prerequisites_missing() is not None:
        return []
    removed: list[str] = []
    errors: list[str] = []
    with _locked():
        recs = _records()
        live_tags = set()
        for tag, rec in recs.items():
            if _alive(rec.get("owner_pid", -1), rec.get("owner_start")):
                live_tags.add(tag)
                continue
            if not tag.startswith(prefix):
                continue
            _teardown_record(rec, errors)
            (REGISTRY / f"{tag}.json").unlink(missing_ok=True)
            removed.append(f"instance {tag}")
        owned = tuple(live_tags) or ("\0",)
        for ns in _netns_list():
            if ns.startswith(prefix) and not ns.startswith(owned):
                _kill_pids(_netns_pids(ns), grace=1.0)
                _sh(["ip", "netns", "del", ns], check=False)
                removed.append(f"netns {ns}")
        for link in _link_list():
            if link.startswith(prefix) and not link.startswith(owned):
                _sh(["ip", "link", "del", link], check=False)
                removed.append(f"link {link}")
        if ETC_HOSTS.exists():
            stale = {ln.rstrip().split()[-1] for ln in ETC_HOSTS.read_text().splitlines() if HOSTS_MARKER in ln}
            stale = {t for t in stale if t.startswith(prefix) and t not in live_tags}
            if stale:
                _hosts_remove(stale)
                removed.append(f"/etc/hosts lines of {sorted(stale)}")
    return removed


# --------------------------------------------------------------------------------------------
# the cluster


@dataclass
class Node:
    cluster: EmulatedCluster
    index: int
    name: str  # hostname (and Slurm node name)
    netns: str
    veth: str  # host-side peer of the node's eth0
    addr: str
    rate: str | float | None = None
    delay: str | float | None = None
    loss: str | float | None = None
    children: list = field(default_factory=list)

    @property
    def netns_path(self) -> str:
        return f"/var/run/netns/{self.netns}"

    def argv(self, cmd: str | Sequence[str], hostname: str | None = None) -> list[str]:
        """The command line that runs `cmd` "on this node": its network namespace, its own
        UTS namespace with the node's hostname, and the host's mounts (so /sys/fs/cgroup stays,
        which slurmd needs; `ip netns exec` would remount /sys)."""
        host = hostname or self.name
        pre = ["nsenter", f"--net={self.netns_path}", "unshare", "--uts", "sh", "-c"]
        if isinstance(cmd, str):
            return pre + ['hostname "$0" && exec sh -c "$1"', host, cmd]
        return pre + ['hostname "$0" && exec "$@"', host, *cmd]

    def popen(
        self,
        cmd: str | Sequence[str],
        env: Mapping[str, str] | None = None,
        hostname: str | None = None,
        inherit_env: bool = True,
        **kwargs,
    ) -> subprocess.Popen:
        """Start `cmd` (argv list, or a shell string) on this node.

        `env` is merged over os.environ (or used alone with inherit_env=False); HOSTNAME is set.
        The process gets its own session (process group), is tracked and killed at teardown.
        Other keyword arguments go to subprocess.Popen (stdout=..., text=True, cwd=...).
        """
        full_env = dict(os.environ) if inherit_env else {"PATH": os.environ.get("PATH", "")}
        full_env.update(env or {})
        full_env["HOSTNAME"] = hostname or self.name
        kwargs.setdefault("start_new_session", True)
        p = subprocess.Popen(self.argv(cmd, hostname), env=full_env, **kwargs)
        self.children.append(p)
        return p

    def run(
        self,
        cmd: str | Sequence[str],
        timeout: float = 60,
        check: bool = False,
        env: Mapping[str, str] | None = None,
        hostname: str | None = None,
        **kwargs,
    ) -> subprocess.CompletedProcess:
        """Run `cmd` on this node to completion (text output captured). On timeout the process
        group is killed and subprocess.TimeoutExpired is raised."""
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        kwargs.setdefault("text", True)
        p = self.popen(cmd, env=env, hostname=hostname, **kwargs)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _killpg(p)
            out, err = p.communicate()
            raise subprocess.TimeoutExpired(p.args, timeout, out, err) from None
        cp = subprocess.CompletedProcess(p.args, p.returncode, out, err)
        if check:
            cp.check_returncode()
        return cp

    def pids(self) -> list[int]:
        """All processes currently in this node's network namespace."""
        return _netns_pids(self.netns)


class EmulatedCluster:
    """N network-namespace "nodes" on a bridge with tc-shaped links. See module docstring."""

    def __init__(
        self,
        nodes: int = 2,
        rate: str | float | None = "1gbit",
        delay: str | float | None = None,
        loss: str | float | None = None,
        per_node_rate: Mapping[int, str | float] | None = None,
        prefix: str = DEFAULT_PREFIX,
        names: Sequence[str] | None = None,
        mtu: int = 1500,
        burst: str = "auto",
        latency: str = "50ms",
        shape_ingress: bool = True,
        etc_hosts: bool = False,
    ):
        if not re.fullmatch(r"[a-z][a-z0-9]{0,5}", prefix):
            raise ValueError(
                "prefix: 1-6 lowercase letters/digits starting with a letter "
                "(interface names are limited to 15 characters)"
            )
        if not 1 <= nodes <= 240:
            raise ValueError("nodes must be in 1..240")
        if names is not None and len(names) != nodes:
            raise ValueError("names must have one entry per node")
        self.n = nodes
        self.prefix = prefix
        self.rate, self.delay, self.loss = rate, delay, loss
        self.per_node_rate = dict(per_node_rate or {})
        self.mtu, self.burst, self.latency = mtu, burst, latency
        self.shape_ingress = shape_ingress
        self.path_rates: dict[tuple[int, int], str | float] = {}  # (i, j) with i < j -> rate
        self._want_hosts = etc_hosts
        self._names = list(names) if names else None
        self.tag = ""
        self.bridge = ""
        self.subnet: ipaddress.IPv4Network | None = None
        self.bridge_addr = ""
        self.nodes: list[Node] = []
        self.hosts_added = False
        self._record: dict = {}
        self._started = False
        self._closed = False
        # validate arguments early (before touching the system)
        for r in [rate, *self.per_node_rate.values()]:
            if r is not None:
                parse_rate(r)
        if delay is not None:
            _delay_ms(delay)
        if loss is not None:
            _percent(loss)

    # ---- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> EmulatedCluster:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close(raise_errors=exc[0] is None)

    def start(self) -> EmulatedCluster:
        if self._started:
            return self
        reason = prerequisites_missing()
        if reason:
            raise EmulationUnsupported(reason)
        if self.delay is not None and not netem_available():
            raise EmulationUnsupported(
                "delay needs the netem qdisc, which this kernel lacks (CONFIG_NET_SCH_NETEM not set)"
            )
        if self.loss and not loss_available():
            raise EmulationUnsupported("loss needs nftables ('nft', Debian package nftables) or the netem qdisc")
        self._started = True
        _INSTANCES.add(self)
        try:
            self._allocate()
            self._build()
            if self._want_hosts:
                self.add_etc_hosts()
        except BaseException:
            self.close(raise_errors=False)
            raise
        return self

    def _allocate(self) -> None:
        with _locked():
            recs = _records()
            taken_tags = set(recs)
            for _ in range(1000):
                tag = f"{self.prefix}{random.getrandbits(16):04x}"
                if tag not in taken_tags and not any(x.startswith(tag) for x in _netns_list() + _link_list()):
                    break
            else:
                raise RuntimeError("could not find a free cluster tag")
            used = {r.get("subnet_k") for r in recs.values()}
            host_addrs = _sh(["ip", "-4", "-o", "addr", "show"], check=False).stdout
            routes = _sh(["ip", "-4", "route", "show", "table", "all"], check=False).stdout
            for m in re.finditer(rf"\b{re.escape(SUBNET_BASE)}\.(\d+)\.", host_addrs + routes):
                used.add(int(m.group(1)))
            # a route covering all of 10.77/16 or more (e.g. 10.0.0.0/8 via a real NIC) is fine:
            # our connected /24 on the bridge is more specific and nodes have no default route.
            free = [k for k in range(1, 255) if k not in used]
            if not free:
                raise RuntimeError(f"no free {SUBNET_BASE}.<k>.0/24 subnet")
            k = random.choice(free)
            self.tag = tag
            self.subnet = ipaddress.ip_network(f"{SUBNET_BASE}.{k}.0/24")
            self.bridge = f"{tag}br"
            self.bridge_addr = f"{SUBNET_BASE}.{k}.1"
            names = self._names or [f"{tag}n{i}" for i in range(self.n)]
            self.nodes = [
                Node(
                    self,
                    i,
                    names[i],
                    f"{tag}n{i}",
                    f"{tag}v{i}",
                    f"{SUBNET_BASE}.{k}.{NODE_HOST_OFFSET + i}",
                    rate=self.per_node_rate.get(i, self.rate),
                    delay=self.delay,
                    loss=self.loss,
                )
                for i in range(self.n)
            ]
            self._record = {
                "tag": tag,
                "owner_pid": os.getpid(),
                "owner_start": _proc_start(os.getpid()),
                "subnet_k": k,
                "netns": [nd.netns for nd in self.nodes],
                "links": [nd.veth for nd in self.nodes] + [self.bridge],
                "host_pids": [],
                "dirs": [],
                "created": time.time(),
            }
            _write_record(self._record)  # claim before creating anything

    def _build(self) -> None:
        br = self.bridge
        _sh(["ip", "link", "add", br, "type", "bridge"])
        _set_sysctl(f"/proc/sys/net/ipv6/conf/{br}/disable_ipv6", "1")
        _sh(["ip", "addr", "add", f"{self.bridge_addr}/24", "dev", br])
        _sh(["ip", "link", "set", br, "up"])
        for nd in self.nodes:
            ns = nd.netns
            _sh(["ip", "netns", "add", ns])
            _sh(
                [
                    "ip",
                    "link",
                    "add",
                    nd.veth,
                    "mtu",
                    str(self.mtu),
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "mtu",
                    str(self.mtu),
                    "netns",
                    ns,
                ]
            )
            _set_sysctl(f"/proc/sys/net/ipv6/conf/{nd.veth}/disable_ipv6", "1")
            _sh(["ip", "link", "set", nd.veth, "master", br, "up"])
            _sh(["ip", "-n", ns, "link", "set", "lo", "up"])
            # IPv4 only on eth0, so tools that pick "the address of eth0" (gloo with
            # GLOO_SOCKET_IFNAME) never get an IPv6 link-local one; lo keeps ::1.
            _sh(
                ["nsenter", f"--net={nd.netns_path}", "sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/eth0/disable_ipv6"],
                check=False,
            )
            _sh(["ip", "-n", ns, "addr", "add", f"{nd.addr}/24", "dev", "eth0"])
            _sh(["ip", "-n", ns, "link", "set", "eth0", "up"])
            self._apply_shaping(nd)

    def close(self, raise_errors: bool = True) -> list[str]:
        """Tear everything down: child processes, processes in the namespaces, /etc/hosts lines,
        namespaces, veths, bridge. Idempotent; always runs to the end. Raises RuntimeError if
        something could not be removed (unless raise_errors=False: then returns the errors)."""
        if self._closed or not self._started:
            self._closed = True
            return []
        self._closed = True
        errors: list[str] = []
        for nd in self.nodes:
            for p in nd.children:
                with contextlib.suppress(Exception):
                    _killpg(p, grace=1.0)
        if self._record:
            with _locked():
                rec = _records().get(self.tag, self._record)
                _teardown_record(rec, errors)
                left = [x for x in _netns_list() + _link_list() if x.startswith(self.tag)]
                if left:
                    errors.append(f"left behind: {left}")
                else:
                    (REGISTRY / f"{self.tag}.json").unlink(missing_ok=True)
        _INSTANCES.discard(self)
        if errors and raise_errors:
            raise RuntimeError("emulated cluster teardown incomplete: " + "; ".join(errors))
        return errors

    # ---- bookkeeping for helpers built on top (Slurm) -------------------------------------

    def adopt(self, pid: int | None = None, directory: str | os.PathLike | None = None) -> None:
        """Record a host process (killed at teardown, or by cleanup_stale after a crash) and/or
        a directory (removed at teardown)."""
        with _locked():
            rec = _records().get(self.tag, self._record)
            if pid is not None:
                rec["host_pids"].append([pid, _proc_start(pid)])
            if directory is not None:
                rec["dirs"].append(str(directory))
            self._record = rec
            _write_record(rec)

    # ---- access -----------------------------------------------------------------------------

    def node(self, i: int) -> Node:
        return self.nodes[i]

    def addr(self, i: int) -> str:
        return self.nodes[i].addr

    @property
    def names(self) -> list[str]:
        return [nd.name for nd in self.nodes]

    def hosts_entries(self) -> str:
        """/etc/hosts lines ("ADDR NAME") for the nodes."""
        return "".join(f"{nd.addr} {nd.name}\n" for nd in self.nodes)

    def add_etc_hosts(self) -> None:
        """Append the nodes' names to /etc/hosts (marked with our tag; removed at teardown, and
        by cleanup_stale after a crash; other lines are never touched). Needed where node names
        must resolve, e.g. torchrun --master-addr <node name> under Slurm."""
        if self.hosts_added:
            return
        with _locked():
            backup = REGISTRY / "hosts.backup"
            if not backup.exists():
                shutil.copy2(ETC_HOSTS, backup)  # for a human, should anything ever go wrong
            text = ETC_HOSTS.read_text()
            if text and not text.endswith("\n"):
                text += "\n"
            text += "".join(f"{nd.addr} {nd.name} {HOSTS_MARKER} {self.tag}\n" for nd in self.nodes)
            with open(ETC_HOSTS, "r+") as fh:
                fh.seek(0)
                fh.write(text)
                fh.truncate()
        self.hosts_added = True

    # ---- faults and shaping --------------------------------------------------------------

    def set_link(self, i: int, up: bool = True) -> None:
        """Bring node i's eth0 down (a cut cable) or back up. Shaping survives."""
        _sh(["ip", "-n", self.nodes[i].netns, "link", "set", "eth0", "up" if up else "down"])

    def shape(self, i: int, rate=_UNSET, delay=_UNSET, loss=_UNSET) -> None:
        """Change node i's shaping live; arguments left out keep their value, None removes."""
        nd = self.nodes[i]
        if rate is not _UNSET:
            if rate is not None:
                parse_rate(rate)
            nd.rate = rate
        if delay is not _UNSET:
            if delay is not None:
                _delay_ms(delay)
                if not netem_available():
                    raise EmulationUnsupported("delay needs netem, which this kernel lacks")
            nd.delay = delay
        if loss is not _UNSET:
            if loss is not None:
                _percent(loss)
                if not loss_available():
                    raise EmulationUnsupported("loss needs nftables ('nft') or netem")
            nd.loss = loss
        self._apply_shaping(nd)

    def shape_path(self, i: int, j: int, rate) -> None:
        """Shape only the traffic between nodes i and j, both directions, to `rate`; their other
        paths keep the node rate. None removes the path's shaping. Composes with `shape`."""
        if i == j or not (0 <= i < self.n and 0 <= j < self.n):
            raise ValueError(f"shape_path needs two different nodes in 0..{self.n - 1} (got {i}, {j})")
        key = (min(i, j), max(i, j))
        if rate is None:
            self.path_rates.pop(key, None)
        else:
            parse_rate(rate)
            self.path_rates[key] = rate
        for k in key:
            self._apply_shaping(self.nodes[k])

    def _shaped_peers(self, nd: Node) -> dict[int, str | float]:
        """peer index -> path rate, for the paths of nd that shape_path shapes."""
        return {b if a == nd.index else a: rate for (a, b), rate in self.path_rates.items() if nd.index in (a, b)}

    def qdiscs(self, i: int) -> str:
        """tc's view of node i (for debugging / assertions)."""
        nd = self.nodes[i]
        a = _sh(["tc", "-n", nd.netns, "qdisc", "show", "dev", "eth0"], check=False).stdout
        b = _sh(["tc", "qdisc", "show", "dev", nd.veth], check=False).stdout
        return f"eth0 (egress):\n{a}{nd.veth} (towards node):\n{b}"

    def dropped_packets(self, i: int) -> int:
        """Packets dropped so far by node i's emulated loss (nftables counter; 0 if none)."""
        nd = self.nodes[i]
        if not shutil.which("nft"):
            return 0
        r = _sh(["nsenter", f"--net={nd.netns_path}", "nft", "list", "table", "netdev", "cbloss"], check=False)
        m = re.search(r"counter packets (\d+)", r.stdout)
        return int(m.group(1)) if m else 0

    def _burst(self, rate) -> str:
        return f"{_auto_burst_bytes(rate)}b" if self.burst == "auto" else self.burst

    def _tbf(self, rate) -> list[str]:
        return ["tbf", "rate", _tc_rate(rate), "burst", self._burst(rate), "latency", self.latency]

    def _add_rate_limit(
        self,
        tc: list[str],
        dev: str,
        place: list[str],
        major: int,
        rate,
        peers: Mapping[str, str | float],
        direction: str,
    ) -> None:
        """Limit `dev` at `rate` (None: unlimited) with a qdisc placed by `place` (root, or under
        netem) with handle `major`. Without shaped peers: tbf, the verified recipe. With them
        (peer address -> path rate): htb, each shaped path in its own class picked by a u32
        filter on the peer's address (`direction` "dst" or "src"), all under a parent class at
        the node rate that caps the node's total as the tbf does."""
        if not peers:
            if rate is not None:
                _sh(tc + ["qdisc", "add", "dev", dev, *place, "handle", f"{major}:"] + self._tbf(rate))
            return
        # unclassified traffic goes to class 2 (the node rate); without a node rate there is no
        # class 2 and htb sends it on unshaped
        _sh(tc + ["qdisc", "add", "dev", dev, *place, "handle", f"{major}:", "htb", "default", "2"])
        ceilings = {
            addr: parse_rate(path) if rate is None else min(parse_rate(path), parse_rate(rate))
            for addr, path in peers.items()
        }
        if rate is None:
            parent, guarantees = f"{major}:", dict(ceilings)
        else:
            parent = f"{major}:1"
            _sh(tc + ["class", "add", "dev", dev, "parent", f"{major}:", "classid", parent] + self._htb(rate, rate))
            # the guarantees add up to the node rate: htb lets a class under its guarantee send
            # whatever its parent has left, so larger guarantees would overrun the node's cap
            share = parse_rate(rate) / (len(peers) + 1)
            guarantees = {addr: min(share, ceiling) for addr, ceiling in ceilings.items()}
            self._add_htb_leaf(tc, dev, parent, f"{major}:2", parse_rate(rate) - sum(guarantees.values()), rate)
        for minor, addr in enumerate(ceilings, start=10):
            self._add_htb_leaf(tc, dev, parent, f"{major}:{minor}", guarantees[addr], ceilings[addr])
            _sh(
                tc
                + [
                    "filter",
                    "add",
                    "dev",
                    dev,
                    "parent",
                    f"{major}:",
                    "protocol",
                    "ip",
                    "prio",
                    "1",
                    "u32",
                    "match",
                    "ip",
                    direction,
                    f"{addr}/32",
                    "flowid",
                    f"{major}:{minor}",
                ]
            )

    def _htb(self, rate, ceil) -> list[str]:
        burst = self._burst(ceil)
        return [
            "htb",
            "rate",
            _tc_rate(rate),
            "ceil",
            _tc_rate(ceil),
            "burst",
            burst,
            "cburst",
            burst,
            "quantum",
            "200000",
        ]  # quantum only splits spare rate among siblings; this silences htb's warning

    def _add_htb_leaf(self, tc: list[str], dev: str, parent: str, classid: str, rate, ceil) -> None:
        """An htb class whose byte fifo holds what a tbf with the same `latency` holds
        (ceil x latency + burst), so a shaped path queues as deep as a shaped node."""
        _sh(tc + ["class", "add", "dev", dev, "parent", parent, "classid", classid] + self._htb(rate, ceil))
        limit = int(parse_rate(ceil) / 8 * _delay_ms(self.latency) / 1e3) + _auto_burst_bytes(ceil)
        _sh(tc + ["qdisc", "add", "dev", dev, "parent", classid, "bfifo", "limit", str(limit)])

    def _apply_shaping(self, nd: Node) -> None:
        ns = nd.netns
        tc_ns = ["tc", "-n", ns, "qdisc"]
        _sh(tc_ns + ["del", "dev", "eth0", "root"], check=False)
        use_nft_loss = bool(nd.loss) and shutil.which("nft") is not None
        peers = {self.nodes[k].addr: rate for k, rate in self._shaped_peers(nd).items()}
        if nd.delay is not None or (nd.loss and not use_nft_loss):
            netem = ["netem"]
            if nd.delay is not None:
                netem += ["delay", f"{_delay_ms(nd.delay)}ms"]
            if nd.loss and not use_nft_loss:
                netem += ["loss", f"{_percent(nd.loss)}%"]
            _sh(tc_ns + ["add", "dev", "eth0", "root", "handle", "1:"] + netem)
            self._add_rate_limit(["tc", "-n", ns], "eth0", ["parent", "1:"], 2, nd.rate, peers, "dst")
        else:
            self._add_rate_limit(["tc", "-n", ns], "eth0", ["root"], 1, nd.rate, peers, "dst")
        # towards the node: the host side of its veth
        _sh(["tc", "qdisc", "del", "dev", nd.veth, "root"], check=False)
        if self.shape_ingress:
            self._add_rate_limit(["tc"], nd.veth, ["root"], 1, nd.rate, peers, "src")
        # loss through nftables in the node's namespace, on eth0's ingress: a drop on egress would
        # be a local transmit failure that TCP quietly re-sends (no retransmission, no loss seen
        # on the wire), while a drop on ingress is a packet the sender must recover from
        nft = ["nsenter", f"--net={nd.netns_path}", "nft"]
        if shutil.which("nft"):
            _sh(nft + ["delete", "table", "netdev", "cbloss"], check=False)
        # TCP hands the veth 64 KiB GSO bursts that travel whole to the node; segmenting them on the
        # way in (one segment per skb) makes the rule drop single packets, as a lossy wire does,
        # instead of a few whole bursts that leave the count of losses to chance
        _sh(["ip", "link", "set", "dev", nd.veth, "gso_max_segs", "1" if use_nft_loss else str(GSO_MAX_SEGS)])
        if use_nft_loss:
            per_million = round(_percent(nd.loss) * 1e4)
            _sh(
                nft + ["-f", "-"],
                input=(
                    "table netdev cbloss {\n"
                    " chain in {\n"
                    '  type filter hook ingress device "eth0" priority 0; policy accept;\n'
                    f"  numgen random mod 1000000 < {per_million} counter drop\n"
                    " }\n}\n"
                ),
            )

    def __repr__(self) -> str:
        return (
            f"EmulatedCluster(tag={self.tag!r}, subnet={self.subnet}, "
            f"nodes={[(n.name, n.addr, n.rate) for n in self.nodes]})"
        )


def _set_sysctl(path: str, value: str) -> None:
    with contextlib.suppress(OSError):
        Path(path).write_text(value)


# Instances still open at interpreter exit (e.g. after KeyboardInterrupt outside a `with`).
_INSTANCES: weakref.WeakSet[EmulatedCluster] = weakref.WeakSet()


@atexit.register
def _close_all_at_exit() -> None:
    for c in list(_INSTANCES):
        with contextlib.suppress(BaseException):
            c.close(raise_errors=False)
