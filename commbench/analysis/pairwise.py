"""Pairwise figures without torch: which pairs are slow or lossy, the nodes they have in common, and
the table `commbench run --pairwise` prints. The pairwise driver (commbench/measure/pairwise.py)
measures; this module judges and reports, and the dashboard reads the same retransmission share.
"""

from __future__ import annotations

from collections import Counter
from typing import Any


def retransmit_percent(segments_sent: int, retransmitted: int) -> float | None:
    """Share of the sent segments that were re-sent, in percent (None when nothing was sent)."""
    return 100.0 * retransmitted / segments_sent if segments_sent > 0 else None


def record_retransmit_pct(record: dict[str, Any]) -> float | None:
    """retransmit_percent of a pairwise record's TCP counters; None when the record has none."""
    if record.get("tcp_segments_sent") is None or record.get("tcp_retransmits") is None:
        return None
    return retransmit_percent(record["tcp_segments_sent"], record["tcp_retransmits"])


def pair_kind(record: dict[str, Any]) -> str:
    a, b = record["pair_nodes"]
    return "intra" if a == b else "inter"


def flag_outliers(
    records: list[dict[str, Any]], bandwidth_size: int, ratio: float, max_retransmit_pct: float
) -> list[dict[str, Any]]:
    """Mark bandwidth rows below ratio x the best of their kind ("slow") or re-sending more than
    max_retransmit_pct of their TCP segments ("lossy"); latency rows carry too few segments to
    judge loss by, and stay unflagged."""
    best: dict[str, float] = {}
    for r in records:
        if r["size_bytes"] == bandwidth_size:
            best[pair_kind(r)] = max(best.get(pair_kind(r), 0.0), r["algbw_gbps"])
    flagged = []
    for r in records:
        reasons = []
        if r["size_bytes"] == bandwidth_size:
            if r["algbw_gbps"] < ratio * best[pair_kind(r)]:
                reasons.append("slow")
            retransmits = record_retransmit_pct(r)
            if retransmits is not None and retransmits > max_retransmit_pct:
                reasons.append("lossy")
        flagged.append({**r, "outlier": bool(reasons), "outlier_reasons": reasons})
    return flagged


def suspects(records: list[dict[str, Any]]) -> list[str]:
    """Nodes (or ranks) common to every flagged pair: the likely culprits."""
    flagged = [r for r in records if r.get("outlier")]
    if not flagged:
        return []
    counts = Counter(name for r in flagged for name in set(_ends(r)))
    return sorted(name for name, n in counts.items() if n == len(flagged))


def _ends(record: dict[str, Any]) -> list[str]:
    if pair_kind(record) == "inter":
        return list(record["pair_nodes"])
    return [f"{record['pair_nodes'][0]}:rank{rank}" for rank in record["pair"]]


def print_pairwise(records: list[dict[str, Any]], ratio: float, max_retransmit_pct: float) -> None:
    from rich.table import Table

    from commbench import terminal

    console = terminal.console(highlight=False)
    sizes = sorted({r["size_bytes"] for r in records})
    latency = {tuple(r["pair"]): r["time_us"] for r in records if r["size_bytes"] == sizes[0]}
    grid = Table(title=f"pairwise ping-pong: one-way latency at {sizes[0]} B, bandwidth at {sizes[-1]} B")
    for column in ("pair (ranks)", "nodes", "latency (us)", "bandwidth (GB/s)", "retrans (%)", ""):
        grid.add_column(column, justify="right" if "(" in column and column != "pair (ranks)" else "left")
    for r in sorted((r for r in records if r["size_bytes"] == sizes[-1]), key=lambda r: (pair_kind(r), r["pair"])):
        a, b = r["pair"]
        retransmits = record_retransmit_pct(r)
        mark = " ".join(f"[bold red]{reason.upper()}[/]" for reason in r.get("outlier_reasons") or [])
        grid.add_row(
            f"{a} <-> {b}",
            " <-> ".join(r["pair_nodes"]),
            f"{latency.get((a, b), float('nan')):.1f}",
            f"{r['algbw_gbps']:.4f}",
            "n/a" if retransmits is None else f"{retransmits:.2f}",
            mark,
        )
    console.print(grid)
    flagged = [r for r in records if r.get("outlier")]
    console.print(
        f"# slow: < {ratio:.0%} of the best pair of its kind; lossy: TCP re-sent > {max_retransmit_pct:g}% of segments"
    )
    if flagged:
        names = ", ".join(f"{r['pair'][0]}-{r['pair'][1]} ({', '.join(r['outlier_reasons'])})" for r in flagged)
        console.print(f"# {len(flagged)} pair(s) flagged: {names}")
        common = suspects(records)
        if common:
            console.print(f"# every flagged pair touches: {', '.join(common)}")
    else:
        console.print("# no pair flagged")
