"""Network interfaces of the current network namespace, asked of the kernel rather than sysfs.

sysfs shows the interfaces of the namespace it was mounted in: a process entered into a node of
the emulated cluster with `nsenter --net` still sees the host's /sys/class/net (and Slurm jobs of a
slurmd started that way inherit it). Then the interface names of this namespace differ from
sysfs's, and the few facts needed are read with ioctls on a socket instead.
"""

from __future__ import annotations

import fcntl
import socket
import struct

from commbench.topology.model import Nic

SIOCGIFFLAGS = 0x8913
SIOCGIFMTU = 0x8921
SIOCGIFHWADDR = 0x8927
IFF_LOOPBACK = 0x8
IFF_RUNNING = 0x40  # the link is up and carrying traffic


def namespace_interfaces() -> set[str]:
    return {name for _, name in socket.if_nameindex()}


def read_interfaces() -> list[Nic]:
    """This namespace's interfaces except loopback. Link speed is not known this way."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        nics = [_interface(sock, name) for name in sorted(namespace_interfaces())]
    return [nic for nic in nics if nic is not None]


def _interface(sock: socket.socket, name: str) -> Nic | None:
    flags = struct.unpack_from("H", _ifreq(sock, SIOCGIFFLAGS, name), 16)[0]
    if flags & IFF_LOOPBACK:
        return None
    mtu = struct.unpack_from("i", _ifreq(sock, SIOCGIFMTU, name), 16)[0]
    mac = _ifreq(sock, SIOCGIFHWADDR, name)[18:24]  # after the sockaddr's 2-byte family
    running = bool(flags & IFF_RUNNING)
    return Nic(
        name=name,
        kind="Ethernet",
        up=running,
        state="up" if running else "down",
        address=":".join(f"{byte:02x}" for byte in mac),
        mtu=mtu,
    )


def _ifreq(sock: socket.socket, request: int, name: str) -> bytes:
    """struct ifreq: a 16-byte name, then a 24-byte union the kernel fills in."""
    return fcntl.ioctl(sock.fileno(), request, struct.pack("16s24x", name.encode()))
