"""The pairwise driver (`commbench run --pairwise`): the "which link is bad" question.

Every pair of nodes (through the first rank of each) and every pair of ranks inside each node is
measured with the one-way ping-pong at two sizes: --min-bytes for latency, --max-bytes for
bandwidth. Pairs run in rounds built by the circle method, so within a round no rank — and,
between nodes, no node — belongs to two pairs: pairs measured together never share a link.
Inter-node rounds run one after another; the intra-node rounds of all nodes run together.

A pair is flagged as an outlier when its bandwidth is below `outlier_ratio` x the best pair of
its kind (between nodes, or inside a node) — peers in one cluster should be alike, and a slow
node or NIC drags down every pair that touches it — or when TCP re-sent more than
`max_retransmit_pct` of its segments while the pair was measured: a lossy link that TCP repairs
at nearly full speed (see commbench.measure.linkhealth). The report then names the node every flagged
pair touches. Because no node is in two pairs of one round, the two nodes' counter deltas over
a measurement are that pair's traffic, plus the few segments of the world-wide estimate exchange
and barrier around it (dozens against the thousands one bandwidth-size measurement sends).
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from commbench.analysis.pairwise import flag_outliers, print_pairwise
from commbench.collectives import get_collective
from commbench.collectives.pingpong import UNI
from commbench.dtypes import DTYPES
from commbench.errors import UsageError
from commbench.measure.harness import Row, gather_rows, gather_to_rank0, kept_samples, measure, to_record
from commbench.measure.linkhealth import TcpCounters, moves_data_over_tcp, read_tcp_counters
from commbench.measure.progress import Progress
from commbench.measure.runner import MeasuredRun
from commbench.measure.session import Session


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


class PairwiseDriver:
    kind = "pairwise"
    command = "run"

    def __init__(self, session: Session):
        self.session = session
        self.rows = pair_rows(session)

    def measure_rows(self, run: MeasuredRun, progress: Progress) -> None:
        session = self.session
        host = {rank: node.hostname for node in session.nodes for rank in node.ranks}
        over_tcp = moves_data_over_tcp(session.backend)
        for row in self.rows:
            run.monitor.progress(f"pairwise {row.size} B {row.groups[0]}")
            before = read_tcp_counters() if over_tcp else None
            measured = measure(session, row, UNI)
            after = read_tcp_counters() if over_tcp else None
            samples = gather_to_rank0(session, measured)
            counters = gather_counter_deltas(session, before, after)
            if samples is not None:
                records, kept = [], []
                for pair in row.groups:
                    one_pair = replace(row, groups=(pair,))
                    records.append(
                        to_record(session, one_pair, UNI, samples, measured).model_copy(
                            update={
                                "pair": list(pair),
                                "pair_nodes": [host[pair[0]], host[pair[1]]],
                                **pair_counters(counters, pair, host),
                            }
                        )
                    )
                    kept.append(kept_samples(one_pair, UNI, samples, measured, records[-1]))
                run.add(records, kept)
            progress.advance(f"pairwise {row.size} B round")

    def report(self, run: MeasuredRun) -> None:
        cfg = self.session.cfg
        records = flag_outliers(run.writer.records, cfg.max_bytes, cfg.outlier_ratio, cfg.max_retransmit_pct)
        run.writer.set_records(records)
        print_pairwise(records, cfg.outlier_ratio, cfg.max_retransmit_pct)
        print(f"# Results: {run.writer.path}", flush=True)


def pair_rows(session: Session) -> list[Row]:
    """Ping-pong rows at --min-bytes (latency) and --max-bytes (bandwidth): the inter-node rounds one
    after another, then the intra-node rounds of all nodes together."""
    cfg, nodes = session.cfg, session.nodes
    if session.env.world_size < 2:
        raise UsageError(
            "--pairwise measures pairs of ranks: it needs at least 2 (--nproc 2, or more under a launcher)"
        )
    pingpong = get_collective("pingpong")
    elt = DTYPES[cfg.dtype].bytes
    inter_rounds = round_robin([node.ranks[0] for node in nodes])
    per_node = [round_robin(node.ranks) for node in nodes]
    intra_rounds = [
        [pair for rounds in per_node if k < len(rounds) for pair in rounds[k]]
        for k in range(max((len(r) for r in per_node), default=0))
    ]
    rows = []
    for size in sorted({max(cfg.min_bytes, elt), cfg.max_bytes}):
        counts = pingpong.counts(size // elt, 2, elt)
        for pairs in inter_rounds + intra_rounds:
            rows.append(Row("pair", pingpong, tuple(pairs), size, counts))
    return rows


def gather_counter_deltas(
    session: Session, before: TcpCounters | None, after: TcpCounters | None
) -> torch.Tensor | None:
    """Every rank's (segments sent, retransmitted) over its last measurement, as a (world, 2)
    tensor on rank 0; NaN where a rank could not read its counters."""
    mine = torch.full((2,), float("nan"), dtype=torch.float64)
    if before is not None and after is not None:
        delta = after - before
        mine[:] = torch.tensor([delta.segments_sent, delta.retransmitted], dtype=torch.float64)
    return gather_rows(session, mine)


def pair_counters(counters: torch.Tensor | None, pair: tuple[int, int], host: dict[int, str]) -> dict:
    """The TCP segments and retransmissions of a pair of nodes: both nodes' deltas. Ranks on one
    node talk over loopback or shared memory, which loses nothing; its counters would only show
    the node's other traffic, so such pairs get none."""
    if counters is None or host[pair[0]] == host[pair[1]]:
        return {}
    sent, retransmitted = counters[list(pair)].sum(dim=0).tolist()
    if math.isnan(sent) or math.isnan(retransmitted):  # some end could not read its counters
        return {}
    return {"tcp_segments_sent": int(sent), "tcp_retransmits": int(retransmitted)}
