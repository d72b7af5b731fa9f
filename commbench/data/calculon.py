"""Export a bandwidth table as Calculon network tiers (the "networks" list of a Calculon system file).

Calculon (github.com/calculon-ai/calculon) prices a collective on tier t as
    latency + size * scalar_op * (1 + offset_op / n) / (bandwidth * efficiency)
with one latency, bandwidth and efficiency per tier and a (scalar, offset) per op; offset -1
turns the scalar into the ring factor: all_reduce (2, -1) gives 2(n-1)/n, all_gather and
reduce_scatter (1, -1) give (n-1)/n, p2p (1, null) gives 1 -- nccl-tests' busbw factors, so
bandwidth * efficiency plays the part of our busbw. We assume Calculon's size is nccl-tests'
size (the whole gathered buffer for all_gather), which is what makes those factors agree.

What we write, per tier (tier 0 = inside a node, tier 1 = one rank per node):
  bandwidth   the highest fitted asymptotic busbw among the tier's ops (GB/s), efficiency 1.0
              (we measure what a link delivers, not its nominal rate);
  ops         nominal scalar x bandwidth / that op's own fitted busbw, so each op keeps its
              measured asymptotic bandwidth; an op the run did not measure on the tier gets the
              nominal scalar (it is assumed to run at the tier's bandwidth) and a note says so;
  latency     the median fitted alpha of the tier's ops (seconds);
  size        ranks per node for tier 0, all ranks of the run for tier 1;
  must_be_filled, processor_usage   not measured: the convention of Calculon's own examples
              (PROCESSOR_USAGE below; commbench's simulator uses the same slowdowns by default).
Each tier is built from the largest group measured on it (a full node, all nodes).

What is lost (listed in the file's "commbench" section too): the size dependence beyond one
latency plus one bandwidth (the fit's error, cache and protocol knees); every group size but
the largest per tier; hierarchical placements (Calculon puts a parallel dimension on one tier,
while our tables price a group spanning nodes as intra + inter phases); per-op latency;
all_to_all, broadcast and ping-pong (Calculon has no such ops); dtype and in-place variants;
pairwise figures; the contention of several groups measured at once (n_groups).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from commbench.data.bandwidth_table import BandwidthTable, Entry
from commbench.scopes import NODE_TIERS

# Calculon op -> (our op, nominal scalar, offset)
CALCULON_OPS = {
    "p2p": ("sendrecv", 1.0, None),
    "reduce_scatter": ("reduce_scatter", 1.0, -1),
    "all_gather": ("all_gather", 1.0, -1),
    "all_reduce": ("all_reduce", 2.0, -1),
}
# Calculon's processor_usage of its NVLink and InfiniBand networks (github calculon-ai/calculon,
# systems/h100_80g_nvl8.json): the compute slowdown while communication overlaps it, a simulator's
# assumption, not a measurement. The planner's default slowdowns are these (modeling/cluster.py).
PROCESSOR_USAGE = {"intra": 0.15, "inter": 0.02}
MUST_BE_FILLED = {"intra": True, "inter": False}

LOST = [
    "size dependence beyond latency + size/bandwidth (the fitted model's error, cache and protocol knees)",
    "every measured group size but the largest of each tier",
    "hierarchical placements: a group spanning nodes with several ranks in each is priced by one tier",
    "per-op latency: one latency per tier (the median of the ops' fitted alphas)",
    "all_to_all, broadcast and ping-pong curves: Calculon has no such ops",
    "dtype and in-place variants, pairwise figures, and contention between concurrent groups (n_groups)",
]


def calculon_networks(table: BandwidthTable) -> dict[str, Any]:
    """{"networks": [tier...], "commbench": {provenance, notes, lost}}; raises ValueError without tiers."""
    tiers: list[dict[str, Any]] = []
    provenance: list[dict[str, Any]] = []
    notes: list[str] = []
    for tier_name in NODE_TIERS:
        chosen = {name: _largest(table, tier_name, op) for name, (op, _, _) in CALCULON_OPS.items()}
        measured = {name: e for name, e in chosen.items() if e is not None}
        if not measured:
            continue
        tiers.append(_tier(table, tier_name, measured, notes))
        provenance.append(
            {"tier": len(tiers) - 1, "placement": tier_name, "from": {name: e.label for name, e in measured.items()}}
        )
    if not tiers:
        raise ValueError(
            "no intra-node or one-rank-per-node all_reduce, all_gather, reduce_scatter or sendrecv to export"
        )
    return {"networks": tiers, "commbench": {"source": table.source, "tiers": provenance, "notes": notes, "lost": LOST}}


def _tier(table: BandwidthTable, tier_name: str, measured: dict[str, Entry], notes: list[str]) -> dict[str, Any]:
    bandwidth = max(e.fit.busbw_gbps for e in measured.values())
    ops = {}
    for name, (_, nominal, offset) in CALCULON_OPS.items():
        entry = measured.get(name)
        if entry is None:
            notes.append(f"{tier_name}: {name} not measured; priced at the tier bandwidth with the nominal scalar")
            ops[name] = [nominal, offset]
        else:
            ops[name] = [nominal * bandwidth / entry.fit.busbw_gbps, offset]
    must_be_filled, processor_usage = MUST_BE_FILLED[tier_name], PROCESSOR_USAGE[tier_name]
    largest = max(e.group_size for e in measured.values())
    size = max(largest, table.world_size // table.nodes) if tier_name == "intra" else max(largest, table.world_size)
    return {
        "bandwidth": bandwidth,
        "efficiency": 1.0,
        "size": int(size),
        "latency": float(np.median([e.fit.alpha_us for e in measured.values()])) * 1e-6,
        "ops": ops,
        "must_be_filled": must_be_filled,
        "processor_usage": processor_usage,
    }


def _largest(table: BandwidthTable, tier_name: str, op: str) -> Entry | None:
    """The entry of op with the largest group placed on this tier; an explicit scope beats world."""
    candidates = []
    for entry in table.entries(op=op):
        placement = table.placement(entry.scope, entry.group_size)
        if placement is None or entry.group_size < 2:
            continue
        per_node, nodes = placement
        on_tier = nodes == 1 if tier_name == "intra" else (per_node == 1 and nodes > 1)
        if on_tier:
            candidates.append((entry.group_size, entry.scope != "world", entry.fit.busbw_gbps, entry))
    return max(candidates, key=lambda c: c[:3])[3] if candidates else None
