"""Rank placement (which ranks sit on which node) and the merge of per-node topologies.

The sweep gathers each rank's (rank, local_rank, node name) with all_gather_object, and one
topology per node (discovered by its local rank 0), then calls `merge_nodes`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

from commbench.topology.model import ClusterTopology, NodeTopology, PlainData

RankIdentity = tuple[int, int, str]  # (global rank, local rank, node name)


@dataclass
class NodePlacement(PlainData):
    """The ranks of one node; the same fields as run.json's NodeInfo."""

    hostname: str
    node_id: int
    ranks: list[int] = field(default_factory=list)
    local_ranks: list[int] = field(default_factory=list)


def place_ranks(identities: Iterable[RankIdentity]) -> list[NodePlacement]:
    """Nodes ordered by their first rank and numbered from 0; `local_ranks[i]` goes with `ranks[i]`."""
    members: dict[str, list[tuple[int, int]]] = {}
    for rank, local_rank, hostname in sorted(identities):
        members.setdefault(hostname, []).append((rank, local_rank))
    # Ranks were visited in order, so hosts entered the dict in order of their first rank.
    return [
        NodePlacement(
            hostname=hostname,
            node_id=node_id,
            ranks=[rank for rank, _ in ranks],
            local_ranks=[local_rank for _, local_rank in ranks],
        )
        for node_id, (hostname, ranks) in enumerate(members.items())
    ]


def merge_nodes(topologies: Iterable[NodeTopology], identities: Iterable[RankIdentity]) -> ClusterTopology:
    """One cluster view: every placed node, in placement order, carrying its ranks.

    The first topology reported for a hostname wins (several ranks of one node may send one).
    A placed node that sent none still appears, empty, with a note; topologies of hosts that hold
    no rank come last, without a node id.
    """
    by_host: dict[str, NodeTopology] = {}
    for topology in topologies:
        by_host.setdefault(topology.hostname, topology)
    nodes = []
    for placement in place_ranks(identities):
        node = by_host.pop(placement.hostname, None) or NodeTopology(
            hostname=placement.hostname, source="none", notes=["no topology was reported for this node"]
        )
        nodes.append(dataclasses.replace(node, **placement.to_dict()))
    return ClusterTopology(nodes=nodes + list(by_host.values()))
