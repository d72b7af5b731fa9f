"""NICs and PCIe placement read from sysfs.

The sysfs root is a parameter so that tests can point at a fake tree. Paths used:
  class/infiniband/<dev>/ports/<n>/{state,phys_state,rate,link_layer}, gid_attrs/types/<i>
  class/infiniband/<dev>/{node_guid, device -> the PCI function, device/net/<netdev>}
  class/net/<if>/{type,operstate,speed,address,mtu,ifindex,iflink,device,bridge,brport,bonding}
  bus/pci/devices/<bus id> -> devices/pci<host bridge>/<root port>/.../<bus id>, and its numa_node
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from commbench.topology.links import pcie_word_from_numa
from commbench.topology.model import PCI_ADDRESS, UNKNOWN_LINK, Nic

RATE = re.compile(r"([\d.]+)\s*Gb/sec(?:\s*\((.+)\))?")
ARPHRD_LOOPBACK = "772"


def read_rdma_ports(sysfs: Path) -> list[Nic]:
    """One Nic per port of each RDMA device: InfiniBand, or RoCE when the link layer is Ethernet."""
    nics = []
    for device in _sorted_dir(sysfs / "class" / "infiniband"):
        for port in _sorted_dir(device / "ports"):
            nics.append(_rdma_port(device, port))
    return nics


def _rdma_port(device: Path, port: Path) -> Nic:
    state = _after_colon(_read(port / "state"))  # "4: ACTIVE"
    physical_state = _after_colon(_read(port / "phys_state"))  # "5: LinkUp"
    rate = RATE.match(_read(port / "rate") or "")  # "400 Gb/sec (4X NDR)"
    roce = _read(port / "link_layer") == "Ethernet"
    netdevs = [path.name for path in _sorted_dir(device / "device" / "net")]
    netdev = netdevs[0] if netdevs else None
    net = device.parent.parent / "net" / netdev if netdev else None
    return Nic(
        name=device.name,
        kind="RoCE" if roce else "InfiniBand",
        port=int(port.name),
        up=state == "ACTIVE",
        state=" / ".join(word for word in (state, physical_state) if word) or None,
        rate_gbps=float(rate.group(1)) if rate else None,
        rate_detail=rate.group(2) if rate else None,
        roce_version=_roce_version(port) if roce else None,
        pci_bus_id=_pci_address(device / "device"),
        numa_node=_numa_node(device / "device"),
        netdev=netdev,
        address=_read(net / "address") if roce and net else _read(device / "node_guid"),
        mtu=_int(_read(net / "mtu")) if net else None,
    )


def _roce_version(port: Path) -> str | None:
    """The newest RoCE version among the port's GIDs ("RoCE v2" or "IB/RoCE v1")."""
    types = {_read(path) for path in _sorted_dir(port / "gid_attrs" / "types")}
    if "RoCE v2" in types:
        return "RoCE v2"
    return "RoCE v1" if "IB/RoCE v1" in types else None


def read_ethernet(sysfs: Path, skip: set[str]) -> list[Nic]:
    """Interfaces under class/net worth listing, less `skip` (netdevs of RDMA ports)."""
    return [
        _ethernet(path)
        for path in _sorted_dir(sysfs / "class" / "net")
        if path.name not in skip and _worth_listing(path)
    ]


def interface_names(sysfs: Path) -> set[str]:
    return {path.name for path in _sorted_dir(sysfs / "class" / "net")}


def _worth_listing(interface: Path) -> bool:
    """Physical ports, bonds, and the veth/VLAN ends that a namespace or container talks through.

    Skipped: loopback, bridges and the ports enslaved to them (host-side plumbing of a virtual
    network), and devices that are virtual only (ifb, dummy, tun ...).
    """
    if _read(interface / "type") == ARPHRD_LOOPBACK:
        return False
    if (interface / "bridge").exists() or (interface / "brport").exists():
        return False
    if (interface / "device").exists() or (interface / "bonding").exists():
        return True
    # veth, VLAN and macvlan devices name a peer or parent link other than themselves
    return _read(interface / "iflink") != _read(interface / "ifindex")


def _ethernet(interface: Path) -> Nic:
    operstate = _read(interface / "operstate")
    speed_mbps = _int(_read(interface / "speed"))  # -1, or unreadable, while the link is down
    return Nic(
        name=interface.name,
        kind="Ethernet",
        up=operstate == "up",
        state=operstate,
        rate_gbps=speed_mbps / 1000 if speed_mbps and speed_mbps > 0 else None,
        pci_bus_id=_pci_address(interface / "device"),
        numa_node=_numa_node(interface / "device"),
        address=_read(interface / "address"),
        mtu=_int(_read(interface / "mtu")),
    )


def pci_numa_node(sysfs: Path, bus_id: str) -> int | None:
    return _numa_node(sysfs / "bus" / "pci" / "devices" / bus_id)


def pcie_word(sysfs: Path, bus_a: str, bus_b: str) -> str:
    """How two PCI devices connect, from their paths below the host bridge (PIX .. SYS, or ?)."""
    path_a, path_b = _pci_path(sysfs, bus_a), _pci_path(sysfs, bus_b)
    if not path_a or not path_b:
        return UNKNOWN_LINK
    if path_a[0] != path_b[0]:  # different host bridges (root complexes)
        return pcie_word_from_numa(pci_numa_node(sysfs, bus_a), pci_numa_node(sysfs, bus_b))
    shared = len(os.path.commonprefix([path_a, path_b]))  # noqa: RUF071 (lists: compared item by item)
    if shared == 1:  # only the host bridge in common: different root ports
        return "PHB"
    # Below one PCIe switch's upstream port a device sits two steps down (downstream port, device).
    return "PIX" if max(len(path_a), len(path_b)) - shared <= 2 else "PXB"


def _pci_path(sysfs: Path, bus_id: str) -> list[str] | None:
    """["pci0000:15", "0000:15:01.0", ..., bus_id]: the host bridge, then each bridge down to it."""
    link = sysfs / "bus" / "pci" / "devices" / bus_id
    if not link.exists():
        return None
    parts = Path(os.path.realpath(link)).parts
    host_bridge = next((i for i, part in enumerate(parts) if part.startswith("pci")), None)
    return list(parts[host_bridge:]) if host_bridge is not None else None


def _pci_address(device_link: Path) -> str | None:
    """The PCI function a device link leads to, or its nearest PCI ancestor (virtio, auxiliary)."""
    if not device_link.exists():
        return None
    for part in reversed(Path(os.path.realpath(device_link)).parts):
        if PCI_ADDRESS.match(part):
            return part
    return None


def _numa_node(device: Path) -> int | None:
    node = _int(_read(device / "numa_node"))
    return node if node is not None and node >= 0 else None


def _sorted_dir(path: Path) -> list[Path]:
    """Entries in natural order (mlx5_2 before mlx5_10); none when the directory is absent."""
    try:
        return sorted(path.iterdir(), key=_natural_key)
    except OSError:
        return []


def _natural_key(path: Path) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def _read(path: Path) -> str | None:
    """A sysfs attribute, stripped; None when absent or unreadable (some raise EINVAL when down)."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _after_colon(text: str | None) -> str | None:
    return text.split(":", 1)[-1].strip() if text else None


def _int(text: str | None) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None
