"""What `commbench health` measures on one node, alone, in a few seconds: intra-node bandwidth and
each NIC's egress.

  intra  GPUs: a copy from every GPU to every other (one direction per ordered pair, a path each:
         NVLink or PCIe as the node has it, named from NVML in the figure's note), GB/s. Without two GPUs, the gloo equivalent: send/recv
         between two ranks of this process over loopback (two threads, one communicator), GB/s.
         The GPU path is written but has not run on a machine with two GPUs (see the README).
  nic    every interface that is up and has an IPv4 address, loopback left out (or those named):
         UDP datagrams sent through it to a peer on its link (--nic-peer: a neighbour, the switch's
         or gateway's address; always named by the user, never guessed, since the traffic lands
         there) for a fixed time, the rate read from the interface's own transmit counter
         (/proc/net/dev, this network namespace's), Gbit/s. The peer only has to exist: no program
         runs there (the datagrams hit the discard port, closed). What limited the rate is
         measured too: after every send the socket's unsent bytes (SIOCOUTQ: datagrams still
         queued at the NIC) are read; when a queue stood there for most of the sends, or the
         counter moved less than 90% of what the socket took (the NIC dropped the rest), the NIC
         was the limit and the figure is its rate ("link"); otherwise the sender was (a busy or
         slow host: "sender"), and the figure is only a lower bound of the NIC's rate, which
         cannot fail a check by being low.
Every figure is a Figure (name, value, unit); health.py in commands grades them against a stored
baseline (`--write-baseline`) or a hardware preset.
"""

from __future__ import annotations

import fcntl
import socket
import statistics
import struct
import threading
import time
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

PROC_NET = Path("/proc/net")
_SIOCGIFADDR = 0x8915
_DATAGRAM = 65000  # bytes per UDP send: fragments on the wire, few system calls per second
_PORT = 9  # discard: nobody listens on the peer, the datagrams are dropped there
_SEND_BUFFER = 4 << 20  # room to queue at the NIC: without it the socket, not the NIC, holds the backlog
_LINK_BOUND = 0.90  # counter / offered below this: the NIC queued or dropped the rest
_QUEUED_SHARE = 0.5  # sends after which a datagram or more still waited at the NIC: this share or more, link-bound
_SIOCOUTQ = 0x5411
_WIRE_OVERHEAD = 1.03  # Ethernet + IP headers of a 65000 B datagram's 45 fragments, as the counter counts them


@dataclass(frozen=True)
class Figure:
    name: str  # "intra gloo loopback", "intra gpu0->gpu1", "nic eth0 egress"
    value: float | None  # None: not measured (why in note)
    unit: str  # GB/s or Gbit/s
    note: str = ""
    bound: str = ""  # nic figures: "link" (the NIC was the limit) or "sender" (a lower bound)


# ---- NICs ------------------------------------------------------------------------------------------


def interfaces(named: list[str] | None = None) -> list[str]:
    """Interfaces of this network namespace that are up and have an IPv4 address, loopback left out;
    or the ones named (as named: one that is missing is reported as not measured)."""
    if named:
        return list(named)
    return [name for name in _tx_bytes_all() if name != "lo" and _is_up(name) and address_of(name) is not None]


def _is_up(name: str) -> bool:
    """IFF_UP from the interface flags (ioctl: /sys may be another namespace's under nsenter --net)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            flags = fcntl.ioctl(sock.fileno(), 0x8913, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return False
    return bool(struct.unpack("H", flags[16:18])[0] & 1)


def _tx_bytes_all() -> dict[str, int]:
    counters = {}
    for line in (PROC_NET / "dev").read_text().splitlines()[2:]:
        name, _, rest = line.partition(":")
        fields = rest.split()
        if len(fields) >= 9:
            counters[name.strip()] = int(fields[8])
    return counters


def address_of(name: str) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def nic_egress(name: str, target: str, seconds: float = 1.0) -> Figure:
    """Gbit/s the interface sent while datagrams to `target` were queued on it."""
    label = f"nic {name} egress"
    source = address_of(name)
    if source is None or name not in _tx_bytes_all():
        return Figure(label, None, "Gbit/s", f"{name} has no IPv4 address (or no such interface)")
    payload = bytes(_DATAGRAM)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SEND_BUFFER)
        sock.bind((source, 0))
        sock.setsockopt(socket.SOL_SOCKET, 25, name.encode())  # SO_BINDTODEVICE: out through this NIC only
        _blast(sock, payload, target, 0.2)  # fill the queue first: the counter then moves at the NIC's rate
        before, start = _tx_bytes_all()[name], time.perf_counter()
        offered, queued = _blast(sock, payload, target, seconds)
        sent, elapsed = _tx_bytes_all()[name] - before, time.perf_counter() - start
    link_bound = queued >= _QUEUED_SHARE or sent < _LINK_BOUND * offered * _WIRE_OVERHEAD
    return Figure(
        label,
        sent * 8 / elapsed / 1e9,
        "Gbit/s",
        f"UDP to {target} for {elapsed:.2f} s: {offered} B offered, {sent} B on the counter, a queue "
        f"at the NIC after {queued:.0%} of the sends",
        "link" if link_bound else "sender",
    )


def _blast(sock: socket.socket, payload: bytes, target: str, seconds: float) -> tuple[int, float]:
    """Send for `seconds`: the bytes the socket took, and the share of sends after which a datagram
    or more was still queued at the NIC."""
    end, offered, sends, queued = time.perf_counter() + seconds, 0, 0, 0
    probe = bytearray(4)
    while time.perf_counter() < end:
        try:
            offered += sock.sendto(payload, (target, _PORT))
        except OSError:  # ENOBUFS: the queue is full
            time.sleep(0.0005)
            continue
        fcntl.ioctl(sock.fileno(), _SIOCOUTQ, probe)
        sends += 1
        queued += int.from_bytes(probe, "little") >= len(payload)
    return offered, queued / max(sends, 1)


# ---- intra-node -------------------------------------------------------------------------------------


def intra(size: int = 8 << 20, iters: int = 5) -> list[Figure]:
    """GPU pairs when the node has two or more GPUs, else gloo over loopback."""
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        return gpu_pairs(size, iters)
    return [gloo_loopback(size, iters)]


def gpu_pairs(size: int, iters: int) -> list[Figure]:
    import torch

    figures = []
    count = torch.cuda.device_count()
    paths = pair_paths()
    for src in range(count):
        for dst in range(count):
            if src != dst:
                figure = _copy(torch, src, dst, size, iters)
                figures.append(replace(figure, note=f"{figure.note}, over {paths.get((src, dst), '? (NVML silent)')}"))
    return figures


def pair_paths() -> dict[tuple[int, int], str]:
    """(GPU, GPU) -> the path between them in nvidia-smi's words (NV18, PIX, SYS, ...), from NVML; NVML
    numbers GPUs in PCI order, as CUDA does with CUDA_DEVICE_ORDER=PCI_BUS_ID (set it for these labels)."""
    from commbench.topology.links import nvlink_count
    from commbench.topology.nvml import read_gpus

    view = read_gpus()
    paths = {}
    for a in view.gpus:
        for b in view.gpus:
            if a.index != b.index:
                links = nvlink_count(a, b)
                pcie = view.pcie_words.get((a.pci_bus_id or "", b.pci_bus_id or ""), "PCIe (level unknown)")
                paths[(a.index, b.index)] = f"NV{links}" if links else pcie
    return paths


def _copy(torch, src: int, dst: int, size: int, iters: int) -> Figure:
    a = torch.empty(size, dtype=torch.uint8, device=f"cuda:{src}")
    b = torch.empty(size, dtype=torch.uint8, device=f"cuda:{dst}")
    times = []
    for i in range(iters + 1):
        torch.cuda.synchronize(src)
        start = time.perf_counter()
        b.copy_(a, non_blocking=True)
        torch.cuda.synchronize(dst)
        if i:
            times.append(time.perf_counter() - start)
    return Figure(
        f"intra gpu{src}->gpu{dst}",
        size / statistics.median(times) / 1e9,
        "GB/s",
        f"copy of {size} B, median of {iters}",
    )


def gloo_loopback(size: int, iters: int, timeout_s: float = 30.0) -> Figure:
    """Two gloo ranks of this process (threads) over loopback: rank 0 sends, rank 1 receives."""
    import torch
    import torch.distributed as dist

    store = dist.HashStore()
    device = dist.ProcessGroupGloo.create_device(interface="lo")
    times: list[float] = []
    errors: list[str] = []

    def rank(me: int) -> None:
        try:
            # torch's type stubs lack _Options and a process group's send/recv: both exist at run time
            options = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
            options._devices, options._timeout = [device], timedelta(seconds=timeout_s)
            group: Any = dist.ProcessGroupGloo(store, me, 2, options)
            tensor = torch.ones(size // 4, dtype=torch.float32)
            for i in range(iters + 1):
                start = time.perf_counter()
                (group.send([tensor], 1, 0) if me == 0 else group.recv([tensor], 0, 0)).wait()
                if me == 1 and i:
                    times.append(time.perf_counter() - start)
        except RuntimeError as exc:
            errors.append(str(exc).splitlines()[0])

    threads = [threading.Thread(target=rank, args=(me,), daemon=True) for me in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s + 5)
    if errors or len(times) < iters:
        return Figure("intra gloo loopback", None, "GB/s", errors[0] if errors else "did not finish in time")
    return Figure(
        "intra gloo loopback",
        size / statistics.median(times) / 1e9,
        "GB/s",
        f"send/recv of {size} B between two gloo ranks, median of {iters}",
    )
