"""Plain-data topology of one node and of a cluster, as stored in run.json under "topology".

Every class is a dataclass of JSON types with `to_dict()` / `from_dict()`; `from_dict` ignores keys
it does not know, so a run.json written by a newer commbench still loads.

Link vocabulary (the one `nvidia-smi topo -m` prints), from closest to farthest:
  X     the device itself
  NV#   # bonded NVLinks (direct, or through NVSwitches)
  PIX   at most one PCIe bridge (the two sit on one PCIe switch)
  PXB   several PCIe bridges, without crossing a host bridge
  PHB   through a PCIe host bridge (a CPU root complex)
  NODE  across host bridges inside one NUMA node
  SYS   across NUMA nodes (the CPU interconnect: UPI, xGMI ...)
  ?     unknown (the source did not say)
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

LINK_LEGEND = {
    "X": "the device itself",
    "NV#": "# bonded NVLinks (direct or through NVSwitches)",
    "PIX": "at most one PCIe bridge (same PCIe switch)",
    "PXB": "several PCIe bridges, no host bridge",
    "PHB": "through a PCIe host bridge (CPU root complex)",
    "NODE": "across host bridges inside one NUMA node",
    "SYS": "across NUMA nodes (CPU interconnect)",
    "?": "unknown",
}

UNKNOWN_LINK = "?"
PCI_ADDRESS = re.compile(r"^([0-9a-f]{4,8}):([0-9a-f]{2}:[0-9a-f]{2}\.[0-7])$")


def _known_fields(cls, data: dict) -> dict:
    names = {f.name for f in dataclasses.fields(cls)}
    return {key: value for key, value in data.items() if key in names}


class PlainData:
    """to_dict() gives JSON types; from_dict() builds the object back, ignoring unknown keys."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict):
        return cls(**_known_fields(cls, data))


@dataclass
class PcieLink(PlainData):
    """PCIe link of a device. The current generation drops at idle to save power: read max."""

    gen_current: int | None = None
    gen_max: int | None = None
    width_current: int | None = None
    width_max: int | None = None


@dataclass
class NvLink(PlainData):
    """One NVLink of a GPU. `link` is NVML's index; imports that only give counts leave it None."""

    link: int | None
    active: bool
    version: str | None = None
    remote_pci_bus_id: str | None = None
    remote_type: str = "unknown"  # GPU, NVSwitch or unknown


@dataclass
class NvlinkFabric(PlainData):
    """The multi-node NVLink fabric a GPU belongs to, as NVML reports it (nvmlDeviceGetGpuFabricInfo
    / ...InfoV): GPUs of one GB200/GB300 NVL72 rack share a cluster UUID and a clique id."""

    cluster_uuid: str  # the NVLink domain's UUID, 8-4-4-4-12 hex; all zeros before registration
    clique_id: int  # the partition of the domain the GPU is in
    state: str  # registration: not supported, not started, in progress, completed
    status: int | None = None  # NVML's return code of the registration (0: success), once completed

    @property
    def domain(self) -> str | None:
        """The NVLink domain key, "<cluster uuid>/<clique id>"; None before a completed, successful
        registration (a GPU with no fabric is in its host's domain)."""
        if self.state != "completed" or self.status not in (0, None) or not self.cluster_uuid.strip("0-"):
            return None
        return f"{self.cluster_uuid}/{self.clique_id}"


@dataclass
class Gpu(PlainData):
    # NVML's index, in PCI bus order; CUDA numbers GPUs the same way only with
    # CUDA_DEVICE_ORDER=PCI_BUS_ID (its default puts the fastest first)
    index: int
    name: str = ""
    pci_bus_id: str | None = None  # domain:bus:device.function, "0000:18:00.0"
    memory_bytes: int | None = None
    compute_capability: str | None = None
    numa_node: int | None = None
    cpu_affinity: str | None = None  # CPU list, "0-55,112-167"
    pcie: PcieLink = field(default_factory=PcieLink)
    nvlinks: list[NvLink] = field(default_factory=list)
    fabric: NvlinkFabric | None = None  # None: NVML reports no NVLink fabric (single-host NVSwitch, PCIe)

    @classmethod
    def from_dict(cls, data: dict) -> Gpu:
        gpu = cls(**_known_fields(cls, data))
        gpu.pcie = PcieLink.from_dict(data.get("pcie") or {})
        gpu.nvlinks = [NvLink.from_dict(link) for link in data.get("nvlinks") or []]
        gpu.fabric = NvlinkFabric.from_dict(data["fabric"]) if data.get("fabric") else None
        return gpu

    def active_nvlinks(self, remote_type: str | None = None) -> list[NvLink]:
        """The active NVLinks to a GPU or an NVSwitch (remote_type), or all of them (None)."""
        return [link for link in self.nvlinks if link.active and remote_type in (None, link.remote_type)]


@dataclass
class Nic(PlainData):
    """A network port: an RDMA device port (InfiniBand or RoCE) or a plain Ethernet interface."""

    name: str  # mlx5_0, eth0
    kind: str = "unknown"  # InfiniBand, RoCE, Ethernet or unknown
    port: int | None = None
    up: bool | None = None
    state: str | None = None  # as the source says it: ACTIVE, LinkUp, up, down ...
    rate_gbps: float | None = None  # signalling rate, Gbit/s
    rate_detail: str | None = None  # "4X NDR"
    roce_version: str | None = None  # "RoCE v2"
    pci_bus_id: str | None = None
    numa_node: int | None = None
    netdev: str | None = None  # the Ethernet interface behind an RDMA port
    address: str | None = None  # MAC, or node GUID for InfiniBand
    mtu: int | None = None


@dataclass
class NodeTopology(PlainData):
    """What one node holds and how its devices connect.

    `devices` labels the rows and columns of `links`: GPU<index>.., then NIC0.. which
    `nic_legend` names (the RDMA devices, as nvidia-smi lists them); `p2p_read` is GPU x GPU peer-to-peer read status in nvidia-smi's
    `topo -p2p r` words (OK, CNS, GNS, TNS, NS, U). `node_id`, `ranks` and `local_ranks` are filled
    when the node is placed in a cluster.
    """

    hostname: str
    source: str  # nvml+sysfs, nccl-xml:<file>, nvidia-smi:<file>
    driver_version: str | None = None
    gpus: list[Gpu] = field(default_factory=list)
    nics: list[Nic] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    links: list[list[str]] = field(default_factory=list)
    nic_legend: dict[str, str] = field(default_factory=dict)
    p2p_read: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    node_id: int | None = None
    ranks: list[int] = field(default_factory=list)
    local_ranks: list[int] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict) -> NodeTopology:
        node = cls(**_known_fields(cls, data))
        node.gpus = [Gpu.from_dict(gpu) for gpu in data.get("gpus") or []]
        node.nics = [Nic.from_dict(nic) for nic in data.get("nics") or []]
        return node

    @property
    def nvlink_domain(self) -> str | None:
        """The multi-node NVLink domain all of this node's GPUs registered in; None where they
        report none (or disagree): the node is then its own domain."""
        domains = {gpu.fabric.domain if gpu.fabric else None for gpu in self.gpus}
        return domains.pop() if len(domains) == 1 else None

    def link(self, device_a: str, device_b: str) -> str:
        """Link word between two labelled devices, e.g. link("GPU0", "NIC3") -> "PIX"; "?" when
        either is not labelled or the source recorded no matrix."""
        if device_a not in self.devices or device_b not in self.devices or not self.links:
            return UNKNOWN_LINK
        return self.links[self.devices.index(device_a)][self.devices.index(device_b)]


@dataclass
class ClusterTopology(PlainData):
    """Nodes ordered by their first global rank (nodes without ranks last)."""

    nodes: list[NodeTopology] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict) -> ClusterTopology:
        return cls(nodes=[NodeTopology.from_dict(node) for node in data.get("nodes") or []])


def pci_bus_id(text: str) -> str:
    """A PCI address in sysfs spelling: NVML's "00000000:1B:00.0" -> "0000:1b:00.0".

    Text that is no PCI address (NCCL writes "fffffff:ffff:ff" for an NVSwitch hidden from a VM)
    comes back lower-cased only.
    """
    text = text.strip().lower()
    address = PCI_ADDRESS.match(text)
    if not address:
        return text
    domain, rest = address.groups()
    return f"{int(domain, 16):04x}:{rest}"


def compact_ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5" (the Linux cpulist format, used for CPUs and ranks)."""
    runs: list[list[int]] = []
    for number in sorted(set(numbers)):
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ",".join(f"{first}-{last}" if last > first else f"{first}" for first, last in runs)
