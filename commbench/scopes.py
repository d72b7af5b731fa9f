"""One home for the scopes: which ranks form one communicator of a measured row.

A record's `scope` is one of these names; the run options, the results schema, the bandwidth
table, the Slurm summary and the history's filters take the list and its order from here, and
`--help` texts describe each scope with the words below. intra and inter are also the two network
tiers a preset system describes (one network inside a node, one between nodes).
Torch-free: the data and modelling layers import it.
"""

from __future__ import annotations

from typing import Literal, get_args

# the order every listing follows: the whole job, then its node-local and cross-node parts, then pairs
Scope = Literal["world", "intra", "inter", "pair"]
SCOPES: tuple[Scope, ...] = get_args(Scope)

# what forms a group, in the words --help and the schema's docs use
GROUPS: dict[Scope, str] = {
    "world": "every rank of the job",
    "intra": "one group per node",
    "inter": "one rank per node",
    "pair": "two ranks (commbench run --pairwise)",
}
# what a sweep measures (--scopes); pairs are --pairwise's
SWEPT_SCOPES: tuple[Scope, ...] = ("world", "intra", "inter")
# the network tiers of a preset system and of the planner's bandwidth-table lookups
NODE_TIERS: tuple[Scope, ...] = ("intra", "inter")


def describe(scopes: tuple[Scope, ...] = SCOPES) -> str:
    """'world (every rank of the job), intra (one group per node), ...' for --help and docs."""
    return ", ".join(f"{scope} ({GROUPS[scope]})" for scope in scopes)


def in_order(names: set[str] | list[str]) -> list[str]:
    """The scopes among `names`, in the listing order above (unknown names last, sorted)."""
    known = [scope for scope in SCOPES if scope in names]
    return known + sorted(set(names) - set(SCOPES))
