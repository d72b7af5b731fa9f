"""The device-to-device matrix in `nvidia-smi topo -m` words, built from any topology source."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from commbench.topology.model import UNKNOWN_LINK, Gpu, Nic

# How two PCI devices (given by bus id) connect over PCIe: PIX .. SYS, or "?".
PcieWord = Callable[[str, str], str]


class LinkMatrix(NamedTuple):
    devices: list[str]
    links: list[list[str]]
    nic_legend: dict[str, str]


def nvlink_count(gpu: Gpu, peer: Gpu) -> int:
    """Active NVLinks between two GPUs, counting both direct links and links through NVSwitches.

    The NVSwitches of one node form one fabric that every GPU reaches with all its switch links,
    so a switched pair gets as many links as the less-connected of the two has (NV18 on an
    H100 HGX board), which is what nvidia-smi reports.
    """
    direct = sum(1 for link in gpu.active_nvlinks("GPU") if link.remote_pci_bus_id == peer.pci_bus_id)
    switched = min(len(gpu.active_nvlinks("NVSwitch")), len(peer.active_nvlinks("NVSwitch")))
    return direct + switched


def link_matrix(gpus: list[Gpu], nics: list[Nic], pcie_word: PcieWord) -> LinkMatrix:
    """Labels (GPU<index>.., NIC0..), the square matrix of link words, and the NIC legend."""
    devices: list[tuple[str, Gpu | Nic]] = [(f"GPU{gpu.index}", gpu) for gpu in gpus]
    devices += [(f"NIC{position}", nic) for position, nic in enumerate(nics)]
    matrix = [[_link_word(a, b, pcie_word) if a is not b else "X" for _, b in devices] for _, a in devices]
    legend = {f"NIC{position}": nic.name for position, nic in enumerate(nics)}
    return LinkMatrix([label for label, _ in devices], matrix, legend)


def _link_word(a: Gpu | Nic, b: Gpu | Nic, pcie_word: PcieWord) -> str:
    if isinstance(a, Gpu) and isinstance(b, Gpu):
        links = nvlink_count(a, b)
        if links:
            return f"NV{links}"
    if not (a.pci_bus_id and b.pci_bus_id):
        return UNKNOWN_LINK
    return pcie_word(a.pci_bus_id, b.pci_bus_id)


def pcie_word_from_numa(numa_a: int | None, numa_b: int | None) -> str:
    """Devices under different host bridges: NODE inside one NUMA node, SYS across."""
    if numa_a is None or numa_b is None:
        return UNKNOWN_LINK
    return "NODE" if numa_a == numa_b else "SYS"


def matrix_nics(nics: list[Nic]) -> list[Nic]:
    """The NICs nvidia-smi puts in its matrix: one per RDMA device (not plain Ethernet) on PCI."""
    first_ports: dict[str, Nic] = {}
    for nic in nics:
        if nic.kind != "Ethernet" and nic.pci_bus_id:
            first_ports.setdefault(nic.name, nic)
    return list(first_ports.values())
