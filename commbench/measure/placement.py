"""Which ranks share a node or an NVLink domain, and the groups each scope measures.

A domain is the set of hosts whose GPUs share NVLink: one host on a DGX/HGX, a whole rack on a
GB200/GB300 NVL72 (NodeInfo's nvlink_domain, from NVML's fabric cluster UUID and clique, or
--nvlink-domain's label). Where each host is its own domain, host and domain scopes coincide.

world: everyone.   intra: one group per NVLink domain (all domains at once; NCCL_TESTS_SPLIT
"DIV <ranks per domain>").   inter: rail groups, the i-th rank of every domain (all rails at once;
"MOD <ranks per domain>").   host: one group per host, measured only where a domain spans hosts.
"""

from __future__ import annotations

from commbench.data.schema import NodeInfo
from commbench.scopes import NODE_TIERS, SWEPT_SCOPES, nvlink_domain_of


def domain_ranks(nodes: list[NodeInfo]) -> list[list[int]]:
    """The ranks of each NVLink domain, domains in order of their first host."""
    domains: dict[str, list[int]] = {}
    for node in nodes:
        domains.setdefault(nvlink_domain_of(node), []).extend(node.ranks)
    return list(domains.values())


def scope_groups(scope: str, nodes: list[NodeInfo]) -> list[list[int]]:
    if scope == "world":
        return [sorted(rank for node in nodes for rank in node.ranks)]
    if scope == "host":
        return [list(node.ranks) for node in nodes]
    domains = domain_ranks(nodes)
    if scope == "intra":
        return domains
    if scope == "inter":
        depth = max(len(ranks) for ranks in domains)
        return [[ranks[i] for ranks in domains if i < len(ranks)] for i in range(depth)]
    raise ValueError(scope)


def applicable_scopes(nodes: list[NodeInfo]) -> list[str]:
    """world always; intra and inter only when there are several domains and their groups differ
    from world (with one rank per domain, inter is world; with one domain, intra is world); host
    where some domain holds several hosts of several ranks (else host groups are intra's, or single ranks)."""
    domains = domain_ranks(nodes)
    scopes = ["world"]
    if len(domains) > 1 and max(len(ranks) for ranks in domains) > 1:
        scopes += NODE_TIERS  # intra and inter: inside one NVLink domain, and across them
    if len(domains) < len(nodes) and max(len(node.ranks) for node in nodes) > 1:
        scopes.append("host")
    return [scope for scope in SWEPT_SCOPES if scope in scopes]
