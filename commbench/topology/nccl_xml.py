"""Import NCCL's own view of a node: the XML it writes with NCCL_TOPO_DUMP_FILE=<file>.

    <system version="1">
      <cpu numaid="0" affinity="ffff...,..." arch="x86_64" vendor="GenuineIntel">
        <pci busid="0000:17:00.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
          <pci busid="0000:18:00.0" class="0x030200" ...>
            <gpu dev="0" sm="90" rank="0" gdr="1">
              <nvlink target="0000:c3:00.0" count="5" tclass="0x068000"/>   (0x068000: NVSwitch)
          <pci busid="0000:19:00.0" class="0x020700" ...>
            <nic><net name="mlx5_0" dev="0" speed="400000" port="1" guid="0x..." maxconn gdr/>

NCCL keeps one <pci> element per PCIe switch, so devices that are children of one element share
a switch (PIX). It does not record host bridges: devices under one CPU without a common switch
are read as NODE (nvidia-smi would say PHB when they share a root complex). It does not say
InfiniBand or RoCE, nor GPU names and memory; net speed is in Mbit/s.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

from commbench.topology.links import link_matrix, matrix_nics, pcie_word_from_numa
from commbench.topology.model import Gpu, Nic, NodeTopology, NvLink, PcieLink, compact_ranges, pci_bus_id

NVSWITCH_CLASS = 0x068000
DISPLAY_CLASS = 0x03  # PCI base class of GPUs (VGA 0x0300xx, 3D controller 0x0302xx)
PCIE_GENERATION_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


@dataclass
class _Placement:
    """Where a PCI device sits: under which CPU element, and below which <pci> elements."""

    cpu: int
    numa_node: int | None
    chain: list[str]  # bus ids of the enclosing <pci> elements, outermost first, then its own


def read_nccl_xml(path: str | Path, hostname: str | None = None) -> NodeTopology:
    """Raises OSError when the file cannot be read and ValueError when it is not NCCL's XML."""
    path = Path(path)
    try:
        system = ElementTree.fromstring(path.read_text())
    except ElementTree.ParseError as exc:
        raise ValueError(f"{path} is not XML ({exc})") from None
    if system.tag != "system":
        raise ValueError(f"{path} is not an NCCL topology dump: the root element is <{system.tag}>, not <system>")
    gpus: list[Gpu] = []
    nics: list[Nic] = []
    placements: dict[str, _Placement] = {}
    for cpu_position, cpu in enumerate(system.iter("cpu")):
        _walk(cpu, _Placement(cpu_position, _int(cpu.get("numaid")), []), cpu, gpus, nics, placements)
    matrix = link_matrix(gpus, matrix_nics(nics), lambda a, b: _pcie_word(placements[a], placements[b]))
    return NodeTopology(
        hostname=hostname or path.stem,
        source=f"nccl-xml:{path.name}",
        gpus=sorted(gpus, key=lambda gpu: gpu.index),
        nics=nics,
        devices=matrix.devices,
        links=matrix.links,
        nic_legend=matrix.nic_legend,
        notes=["imported from NCCL's topology dump: no GPU names, memory or P2P status; NIC link layer unknown"],
    )


def _walk(element, placement: _Placement, cpu, gpus: list[Gpu], nics: list[Nic], placements: dict) -> None:
    """Collect the GPUs and NICs below `element`, remembering where each PCI device sits."""
    for child in element:
        if child.tag == "pci":
            bus = pci_bus_id(child.get("busid", ""))
            inner = _Placement(placement.cpu, placement.numa_node, placement.chain + [bus])
            placements[bus] = inner
            _walk(child, inner, cpu, gpus, nics, placements)
        elif child.tag == "gpu":
            gpus.append(_gpu(child, element, placement, cpu))
        elif child.tag == "nic":
            bus = placement.chain[-1] if placement.chain else None
            nics += [_nic(net, bus, placement.numa_node) for net in child.iter("net")]


def _gpu(gpu, pci, placement: _Placement, cpu) -> Gpu:
    sm = gpu.get("sm")
    return Gpu(
        index=int(gpu.get("dev", len(placement.chain))),
        pci_bus_id=placement.chain[-1] if placement.chain else None,
        compute_capability=f"{sm[:-1]}.{sm[-1]}" if sm and sm.isdigit() and len(sm) > 1 else None,
        numa_node=placement.numa_node,
        cpu_affinity=_affinity_cpus(cpu.get("affinity")),
        # NCCL records the link's maximum (sysfs max_link_speed / max_link_width)
        pcie=PcieLink(gen_max=_pcie_generation(pci.get("link_speed")), width_max=_int(pci.get("link_width"))),
        nvlinks=[link for nvlink in gpu.iter("nvlink") for link in _nvlinks(nvlink)],
    )


def _nvlinks(nvlink) -> list[NvLink]:
    """One <nvlink target count tclass> bundle -> `count` links to that target."""
    target_class = int(nvlink.get("tclass", "0"), 16)
    if target_class == NVSWITCH_CLASS:
        remote_type = "NVSwitch"
    elif target_class >> 16 == DISPLAY_CLASS:
        remote_type = "GPU"
    else:
        remote_type = "unknown"
    target = nvlink.get("target")
    remote = pci_bus_id(target) if target else None
    return [
        NvLink(link=None, active=True, remote_pci_bus_id=remote, remote_type=remote_type)
        for _ in range(int(nvlink.get("count", "1")))
    ]


def _nic(net, bus: str | None, numa_node: int | None) -> Nic:
    speed_mbps = _int(net.get("speed"))
    return Nic(
        name=net.get("name", "?"),
        port=_int(net.get("port")),
        rate_gbps=speed_mbps / 1000 if speed_mbps else None,
        pci_bus_id=bus,
        numa_node=numa_node,
        address=net.get("guid"),
    )


def _pcie_word(a: _Placement, b: _Placement) -> str:
    if a.cpu != b.cpu:
        return pcie_word_from_numa(a.numa_node, b.numa_node)
    if _slot(a.chain[-1]) == _slot(b.chain[-1]):
        return "PIX"  # two functions of one device (the ports of a dual-port NIC)
    shared = len(os.path.commonprefix([a.chain, b.chain]))  # noqa: RUF071 (lists: compared item by item)
    if shared == 0:
        return "NODE"
    # children of one <pci> element share that PCIe switch
    return "PIX" if max(len(a.chain), len(b.chain)) - shared <= 1 else "PXB"


def _slot(bus_id: str) -> str:
    """ "0000:a8:00.1" -> "0000:a8:00": the device, without its function number."""
    return bus_id.rsplit(".", 1)[0]


def _affinity_cpus(mask: str | None) -> str | None:
    """Linux cpumask text ("ffffffff,00000000", 32-bit words, highest first) -> "32-63"."""
    if not mask:
        return None
    bits = int(mask.replace(",", ""), 16)
    return compact_ranges([cpu for cpu in range(bits.bit_length()) if bits >> cpu & 1]) or None


def _pcie_generation(link_speed: str | None) -> int | None:
    """ "32.0 GT/s PCIe" -> 5."""
    try:
        return PCIE_GENERATION_BY_GTS.get(float(link_speed.split()[0]))
    except (AttributeError, IndexError, ValueError):
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None
