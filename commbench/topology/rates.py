"""Nominal link rates: one NVLink's rate per generation, a NIC's signalling rate, and the most a
scope's traffic can get over the links a recorded topology shows (what measured bandwidth is
compared with).

NVLink per direction per link (NVIDIA's architecture whitepapers): NVLink 1 (P100) 20 GB/s,
NVLink 2 (V100), 3 (A100) and 4 (H100) 25 GB/s, NVLink 5 (Blackwell) 50 GB/s. NCCL's topology
dump gives no generation, and generations 2-4 share 25 GB/s, so that is the default. A NIC's rate
is what the topology recorded (sysfs or NCCL), in Gbit/s; one byte is 8 bits on the wire.
"""

from __future__ import annotations

from commbench.topology.model import ClusterTopology, Nic, NodeTopology

NVLINK_GBPS = {"1": 20.0, "2": 25.0, "3": 25.0, "4": 25.0, "5": 50.0}
DEFAULT_NVLINK_GBPS = 25.0
NETWORK_KINDS = ("InfiniBand", "RoCE", "Ethernet")


def nvlink_gbps(version: str | None) -> float:
    """Per-direction GB/s of one NVLink of this generation (the default when it is not known)."""
    return NVLINK_GBPS.get(str(version), DEFAULT_NVLINK_GBPS)


def network_kind(nic: Nic) -> str:
    """InfiniBand, RoCE or Ethernet; "network" when the source did not say."""
    return nic.kind if nic.kind in NETWORK_KINDS else "network"


def nominal_rates(cluster: ClusterTopology | None, scope: str) -> list[tuple[str, float]]:
    """(label, per-direction GB/s) of the links a scope's traffic crosses: NVLink inside a node
    (intra, pair, world on one node), the fastest NIC between nodes (inter, pair, world on several)."""
    if cluster is None:
        return []
    nodes = cluster.nodes
    rates = []
    if scope in ("intra", "pair") or (scope == "world" and len(nodes) <= 1):
        rates += nvlink_rate(nodes)
    if scope in ("inter", "pair") or (scope == "world" and len(nodes) > 1):
        rates += nic_rate(nodes)
    return rates


def nvlink_rate(nodes: list[NodeTopology]) -> list[tuple[str, float]]:
    """The GPU with the fewest active NVLinks, at the slowest generation seen: what every GPU gets."""
    counts, per_link = [], []
    for node in nodes:
        for gpu in node.gpus:
            active = gpu.active_nvlinks()
            if active:
                counts.append(len(active))
                per_link += [nvlink_gbps(link.version) for link in active]
    if not counts:
        return []
    rate = min(per_link)
    return [(f"NVLink {min(counts)} x {rate:g} GB/s", min(counts) * rate)]


def nic_rate(nodes: list[NodeTopology]) -> list[tuple[str, float]]:
    """The fastest NIC of the cluster with a known rate, in GB/s."""
    rated = [nic for node in nodes for nic in node.nics if nic.rate_gbps]
    if not rated:
        return []
    best = max(rated, key=lambda nic: nic.rate_gbps)
    return [(f"{network_kind(best)} {best.rate_gbps:g} Gb/s", best.rate_gbps / 8)]
