"""Pairwise point-to-point: the "which link is bad" question.

Every pair of nodes (through the first rank of each) and every pair of ranks inside each node is
measured with the one-way ping-pong at two sizes: --min-bytes for latency, --max-bytes for
bandwidth. Pairs run in rounds built by the circle method, so within a round no rank — and,
between nodes, no node — belongs to two pairs: pairs measured together never share a link.
Inter-node rounds run one after another; the intra-node rounds of all nodes run together.

A pair is flagged as an outlier when its bandwidth is below `outlier_ratio` x the best pair of
its kind (between nodes, or inside a node): peers in one cluster should be alike, and a slow
node or NIC drags down every pair that touches it, which the report then names.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from commbench.collectives import get_collective
from commbench.collectives.pingpong import UNI
from commbench.config import DTYPES
from commbench.sweep import Row, Sweep, gather_to_rank0, measure, to_record


def round_robin(members: list[int]) -> list[list[tuple[int, int]]]:
    """Rounds in which every pair meets once and nobody is in two pairs of one round."""
    players = list(members) + ([None] if len(members) % 2 else [])
    rounds = []
    for _ in range(len(players) - 1):
        half = len(players) // 2
        pairs = [(players[i], players[-1 - i]) for i in range(half)]
        rounds.append([tuple(sorted(p)) for p in pairs if None not in p])
        players = [players[0], players[-1], *players[1:-1]]  # rotate all but the first
    return [r for r in rounds if r]


class PairwiseSweep(Sweep):
    kind = "pairwise"

    def plan(self) -> list[Row]:
        cfg, nodes = self.session.cfg, self.session.nodes
        pingpong = get_collective("pingpong")
        elt = DTYPES[cfg.dtype][1]
        inter_rounds = round_robin([node.ranks[0] for node in nodes])
        per_node = [round_robin(node.ranks) for node in nodes]
        intra_rounds = [sum((rounds[k] for rounds in per_node if k < len(rounds)), [])
                        for k in range(max((len(r) for r in per_node), default=0))]
        rows = []
        for size in sorted({max(cfg.min_bytes, elt), cfg.max_bytes}):
            counts = pingpong.counts(size // elt, 2, elt)
            for pairs in inter_rounds + intra_rounds:
                rows.append(Row("pair", pingpong, tuple(pairs), size, counts))
        return rows

    def _run_rows(self, progress) -> None:
        session = self.session
        host = {rank: node.hostname for node in session.nodes for rank in node.ranks}
        for row in self.rows:
            session.monitor.progress(f"pairwise {row.size} B {row.groups[0]}")
            measured = measure(session, row, UNI)
            table = gather_to_rank0(session, measured)
            if table is not None:
                records = [to_record(session, replace(row, groups=(pair,)), UNI, table, measured).model_copy(
                    update={"pair": list(pair), "pair_nodes": [host[pair[0]], host[pair[1]]]}) for pair in row.groups]
                self.total_wrong += sum(max(r.wrong, 0) for r in records)
                self.writer.add_records(records)
            progress.advance(f"pairwise {row.size} B round")

    def report(self) -> None:
        records = flag_outliers(self.writer.records, self.session.cfg.max_bytes, self.session.cfg.outlier_ratio)
        self.writer.set_records(records)
        print_pairwise(records, self.session.cfg.outlier_ratio)
        self.printer.print(f"# Results: {self.writer.path}")


def pair_kind(record: dict) -> str:
    a, b = record["pair_nodes"]
    return "intra" if a == b else "inter"


def flag_outliers(records: list[dict], bandwidth_size: int, ratio: float) -> list[dict]:
    """Mark bandwidth rows below ratio x the best of their kind; latency rows stay unflagged."""
    best: dict[str, float] = {}
    for r in records:
        if r["size_bytes"] == bandwidth_size:
            best[pair_kind(r)] = max(best.get(pair_kind(r), 0.0), r["algbw_gbps"])
    return [{**r, "outlier": r["size_bytes"] == bandwidth_size and r["algbw_gbps"] < ratio * best[pair_kind(r)]}
            for r in records]


def suspects(records: list[dict]) -> list[str]:
    """Nodes (or ranks) common to every flagged pair: the likely culprits."""
    flagged = [r for r in records if r.get("outlier")]
    if not flagged:
        return []
    counts = Counter(name for r in flagged for name in set(_ends(r)))
    return sorted(name for name, n in counts.items() if n == len(flagged))


def _ends(record: dict) -> list[str]:
    if pair_kind(record) == "inter":
        return record["pair_nodes"]
    return [f"{record['pair_nodes'][0]}:rank{rank}" for rank in record["pair"]]


def print_pairwise(records: list[dict], ratio: float) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    sizes = sorted({r["size_bytes"] for r in records})
    latency = {tuple(r["pair"]): r["time_us"] for r in records if r["size_bytes"] == sizes[0]}
    table = Table(title=f"pairwise ping-pong: one-way latency at {sizes[0]} B, bandwidth at {sizes[-1]} B")
    for column in ("pair (ranks)", "nodes", "latency (us)", "bandwidth (GB/s)", ""):
        table.add_column(column, justify="right" if "(" in column and column != "pair (ranks)" else "left")
    for r in sorted((r for r in records if r["size_bytes"] == sizes[-1]), key=lambda r: (pair_kind(r), r["pair"])):
        a, b = r["pair"]
        mark = "[bold red]SLOW[/]" if r["outlier"] else ""
        table.add_row(f"{a} <-> {b}", " <-> ".join(r["pair_nodes"]), f"{latency.get((a, b), float('nan')):.1f}",
                      f"{r['algbw_gbps']:.4f}", mark)
    console.print(table)
    flagged = [r for r in records if r.get("outlier")]
    if flagged:
        names = ", ".join(f"{a}-{b}" for a, b in (r["pair"] for r in flagged))
        console.print(f"# {len(flagged)} pair(s) below {ratio:.0%} of the best of their kind: {names}")
        common = suspects(records)
        if common:
            console.print(f"# every slow pair touches: {', '.join(common)}")
    else:
        console.print(f"# no pair below {ratio:.0%} of the best of its kind")
