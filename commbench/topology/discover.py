"""Discover this node: its name, GPUs (NVML), NICs (sysfs) and how they connect."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from commbench.topology import netns
from commbench.topology.links import link_matrix, matrix_nics
from commbench.topology.model import Nic, NodeTopology
from commbench.topology.nvml import read_gpus
from commbench.topology.sysfs import (
    interface_names,
    pci_numa_node,
    pcie_word,
    read_ethernet,
    read_rdma_ports,
)

LIVE_SYSFS = Path("/sys")


def node_name(override: str | None = None) -> str:
    """The name this node goes by: the override, else $COMMBENCH_NODE_NAME, else Slurm's
    $SLURMD_NODENAME (the name the job was scheduled on), else the hostname."""
    return (
        override or os.environ.get("COMMBENCH_NODE_NAME") or os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    )


def nvlink_domain(topology: NodeTopology | None) -> str | None:
    """The NVLink domain this node's GPUs are in: $COMMBENCH_NVLINK_DOMAIN where set (a label the
    operator gives, e.g. the rack; what an emulated cluster uses to stand for a rack), else NVML's
    fabric registration ("<cluster uuid>/<clique id>", GB200/GB300 NVL72), else None (the host)."""
    return os.environ.get("COMMBENCH_NVLINK_DOMAIN") or (topology.nvlink_domain if topology else None)


def discover_node(name: str | None = None, sysfs_root: str | Path = LIVE_SYSFS) -> NodeTopology:
    """Everything this node holds. No GPU or no driver gives an empty GPU list and a note."""
    sysfs = Path(sysfs_root)
    nvml = read_gpus()
    nics, nic_notes = read_nics(sysfs)
    for gpu in nvml.gpus:
        if gpu.numa_node is None and gpu.pci_bus_id:  # older drivers lack nvmlDeviceGetNumaNodeId
            gpu.numa_node = pci_numa_node(sysfs, gpu.pci_bus_id)
    matrix = link_matrix(
        nvml.gpus,
        matrix_nics(nics),
        # NVML knows GPU pairs best; sysfs places everything else
        lambda a, b: nvml.pcie_words.get((a, b)) or pcie_word(sysfs, a, b),
    )
    return NodeTopology(
        hostname=node_name(name),
        source="nvml+sysfs",
        driver_version=nvml.driver_version,
        gpus=nvml.gpus,
        nics=nics,
        devices=matrix.devices,
        links=matrix.links,
        nic_legend=matrix.nic_legend,
        p2p_read=nvml.p2p_read,
        notes=nvml.notes + nic_notes,
    )


def read_nics(sysfs: Path) -> tuple[list[Nic], list[str]]:
    """RDMA ports, then Ethernet interfaces not already behind an RDMA port; and notes."""
    rdma = read_rdma_ports(sysfs)
    behind_rdma = {nic.netdev for nic in rdma if nic.netdev}
    if sysfs == LIVE_SYSFS and interface_names(sysfs) != netns.namespace_interfaces():
        note = (
            "/sys shows another network namespace (entered with nsenter --net?): "
            "Ethernet interfaces read from the kernel, link speeds unknown"
        )
        ethernet = [nic for nic in netns.read_interfaces() if nic.name not in behind_rdma]
        return rdma + ethernet, [note]
    return rdma + read_ethernet(sysfs, skip=behind_rdma), []
