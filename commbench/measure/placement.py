"""Which ranks share a node, and the groups each scope measures.

world: everyone.   intra: one group per node (all nodes at once; NCCL_TESTS_SPLIT "DIV <ranks per node>").
inter: rail groups, local rank i of every node (all rails at once; "MOD <ranks per node>").
"""

from __future__ import annotations

from commbench.data.schema import NodeInfo
from commbench.scopes import SWEPT_SCOPES


def scope_groups(scope: str, nodes: list[NodeInfo]) -> list[list[int]]:
    if scope == "world":
        return [sorted(rank for node in nodes for rank in node.ranks)]
    if scope == "intra":
        return [list(node.ranks) for node in nodes]
    if scope == "inter":
        depth = max(len(node.ranks) for node in nodes)
        return [[node.ranks[i] for node in nodes if i < len(node.ranks)] for i in range(depth)]
    raise ValueError(scope)


def applicable_scopes(nodes: list[NodeInfo]) -> list[str]:
    """world always; intra and inter only when there are several nodes and their groups differ
    from world (with one rank per node, inter is world; with one node, intra is world)."""
    if len(nodes) > 1 and max(len(node.ranks) for node in nodes) > 1:
        return list(SWEPT_SCOPES)
    return ["world"]
