"""One home for the scopes: which ranks form one communicator of a measured row.

A record's `scope` is one of these names; the run options, the results schema, the bandwidth
table, the Slurm summary and the history's filters take the list and its order from here, and
`--help` texts describe each scope with the words below. intra and inter are also the two network
tiers a preset system describes: one network inside an NVLink domain, one between domains. A
domain is a host on a DGX/HGX and a whole rack (18 hosts of 4 GPUs) on a GB200/GB300 NVL72, so a
run whose hosts record an NVLink domain (NVML's fabric cluster and clique, or --nvlink-domain) is
split by domain, and `host` adds one group per host where hosts and domains differ.
Torch-free: the data and modelling layers import it.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

# the order every listing follows: the whole job, then its node-local and cross-node parts, then pairs
Scope = Literal["world", "intra", "inter", "host", "pair"]
SCOPES: tuple[Scope, ...] = get_args(Scope)

# what forms a group, in the words --help and the schema's docs use
GROUPS: dict[Scope, str] = {
    "world": "every rank of the job",
    "intra": "one group per NVLink domain: a node, or a rack of nodes on NVL72",
    "inter": "one rank per NVLink domain",
    "host": "one group per host, where NVLink domains span several hosts",
    "pair": "two ranks (commbench run --pairwise)",
}
# what a sweep measures (--scopes); pairs are --pairwise's
SWEPT_SCOPES: tuple[Scope, ...] = ("world", "intra", "inter", "host")
# the network tiers of a preset system and of the planner's bandwidth-table lookups: inside one NVLink
# domain (scale-up) and across domains (scale-out)
NODE_TIERS: tuple[Scope, ...] = ("intra", "inter")


def describe(scopes: tuple[Scope, ...] = SCOPES) -> str:
    """'world (every rank of the job), intra (one group per node), ...' for --help and docs."""
    return ", ".join(f"{scope} ({GROUPS[scope]})" for scope in scopes)


def in_order(names: set[str] | list[str]) -> list[str]:
    """The scopes among `names`, in the listing order above (unknown names last, sorted)."""
    known = [scope for scope in SCOPES if scope in names]
    return known + sorted(set(names) - set(SCOPES))


def nvlink_domain_of(node: Any) -> str:
    """The NVLink domain a run's host (a NodeInfo, or its dict) is in: the domain its run.json
    records (NVML's fabric cluster and clique, or $COMMBENCH_NVLINK_DOMAIN), else the host itself."""
    if isinstance(node, dict):
        return str(node.get("nvlink_domain") or f"host:{node['hostname']}")
    return str(getattr(node, "nvlink_domain", None) or f"host:{node.hostname}")
