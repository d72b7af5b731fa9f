"""all_to_allv rows from the routing model, and their comparison with the uniform all_to_all.

For each tokens-per-rank value of a scope's groups the routing model (commbench.modeling.routing)
gives a split matrix; the row exchanges it (commbench.collectives.all_to_allv.routed) and carries
its received-bytes statistics into the record. The same run then measures the uniform all_to_all
of the same total bytes (every rank sending the mean), so skew_penalty = all_to_allv time /
uniform time compares two measurements taken minutes apart on the same ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from commbench.collectives import get_collective
from commbench.collectives.all_to_allv import routed
from commbench.collectives.base import Counts
from commbench.modeling.routing import Received, received, token_matrix


@dataclass(frozen=True)
class RoutedExchange:
    """What the routing model gave one all_to_allv row."""

    routing: str
    tokens: int
    token_bytes: int
    matrix: np.ndarray  # token copies, source x destination rank in the group
    stats: Received
    uniform: Counts  # the all_to_all of the same total bytes

    def record_fields(self) -> dict:
        return {
            "routing": self.routing,
            "tokens_per_rank": self.tokens,
            "recv_bytes_max": self.stats.max_bytes,
            "recv_bytes_mean": self.stats.mean_bytes,
            "hottest_rank": self.stats.hottest_rank,
            "split_bytes": (self.matrix * self.token_bytes).tolist(),
        }


def routed_rows(cfg, n: int, elt: int) -> list[tuple]:
    """(collective, size, counts, exchange) of one row per tokens-per-rank value on groups of n
    ranks. A routing file's matrix fixes its group size: groups of another size get no rows."""
    routing = cfg.routing_model
    if routing.matrix is not None and routing.matrix.shape[0] != n:
        return []
    rows = []
    for tokens in cfg.tokens_axis():
        shape = cfg.moe_shape(tokens, n)
        matrix = token_matrix(routing, shape)
        splits = tuple(tuple(int(x) * shape.hidden for x in row) for row in matrix)
        collective = routed(splits)
        counts = collective.counts(0, n, elt)
        if counts.param == 0:
            continue
        uniform = get_collective("all_to_all").counts(int(matrix.sum()) * shape.hidden // n, n, elt)
        exchange = RoutedExchange(
            routing.key, tokens, shape.token_bytes, matrix, received(matrix, shape.token_bytes), uniform
        )
        rows.append((collective, counts.size_bytes(elt), counts, exchange))
    return rows


def uniform_row(row):
    """The all_to_all row of the same total bytes as a routed all_to_allv row."""
    counts, elt = row.exchange.uniform, row.size // row.counts.send
    return replace(
        row, collective=get_collective("all_to_all"), counts=counts, exchange=None, size=counts.size_bytes(elt)
    )
