"""Rank placement and the merged cluster view stored in run.json."""

from __future__ import annotations

import json

from commbench.data.schema import NodeInfo
from commbench.topology import ClusterTopology, NodeTopology, merge_nodes, place_ranks

# torchrun on three nodes, identities arriving in all_gather order (not sorted by node)
IDENTITIES = [(0, 0, "n2"), (1, 1, "n2"), (2, 0, "n1"), (3, 1, "n1"), (5, 1, "n3"), (4, 0, "n3")]


def test_nodes_ordered_by_first_rank():
    placements = place_ranks(reversed(IDENTITIES))
    assert [(p.hostname, p.node_id, p.ranks, p.local_ranks) for p in placements] == [
        ("n2", 0, [0, 1], [0, 1]),
        ("n1", 1, [2, 3], [0, 1]),
        ("n3", 2, [4, 5], [0, 1]),
    ]


def test_placement_fits_run_json_node_info():
    assert NodeInfo(**place_ranks(IDENTITIES)[0].to_dict()).hostname == "n2"


def test_merge_places_each_node_once():
    reported = [
        NodeTopology(hostname="n1", source="nvml+sysfs", notes=["a"]),
        NodeTopology(hostname="n2", source="nvml+sysfs"),
        NodeTopology(hostname="n1", source="nvml+sysfs", notes=["a second report of n1 is ignored"]),
        NodeTopology(hostname="spare", source="nvml+sysfs"),
    ]
    cluster = merge_nodes(reported, IDENTITIES)
    assert [(n.hostname, n.node_id, n.ranks) for n in cluster.nodes] == [
        ("n2", 0, [0, 1]),
        ("n1", 1, [2, 3]),
        ("n3", 2, [4, 5]),
        ("spare", None, []),
    ]
    assert cluster.nodes[1].notes == ["a"]
    assert cluster.nodes[2].source == "none" and "no topology" in cluster.nodes[2].notes[0]
    assert reported[0].ranks == []  # the inputs are left as they were


def test_cluster_round_trips_through_json():
    cluster = merge_nodes([NodeTopology(hostname="n1", source="nvml+sysfs")], [(0, 0, "n1"), (1, 1, "n1")])
    stored = json.loads(json.dumps(cluster.to_dict()))
    assert ClusterTopology.from_dict(stored) == cluster
    assert ClusterTopology.from_dict({"nodes": [{**stored["nodes"][0], "from_a_newer_commbench": 1}]}) == cluster
