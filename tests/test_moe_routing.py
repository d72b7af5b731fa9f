"""The MoE routing model (commbench.modeling.routing): split matrices, shares, placement, bad input."""

import json

import numpy as np
import pytest

from commbench.errors import UsageError
from commbench.modeling.routing import (
    MoeShape,
    expected_imbalance,
    expected_shares,
    expert_owner,
    parse_routing,
    received,
    token_matrix,
)


def shape(**kw):
    base = dict(tokens=4096, hidden=16, elt_bytes=4, top_k=2, experts=8, ranks=4)
    return MoeShape(**{**base, **kw})


def test_uniform_splits_exactly_evenly():
    matrix = token_matrix(parse_routing("uniform"), shape())
    assert (matrix == 4096 * 2 // 4).all()
    assert received(matrix, 64).imbalance == 1.0


def test_zipf_hottest_rank_share_matches_the_model():
    routing = parse_routing("zipf:1.2")
    expected = expected_shares(routing, 8, 4)
    p = np.arange(1, 9) ** -1.2 / (np.arange(1, 9) ** -1.2).sum()
    assert expected[0] == pytest.approx(p[0] + p[1])  # block placement: rank 0 holds experts 0 and 1
    matrix = token_matrix(routing, shape(tokens=16384))
    into = matrix.sum(axis=0)
    assert int(np.argmax(into)) == 0
    assert into[0] / into.sum() == pytest.approx(expected[0], rel=0.02)  # sampling noise ~0.5% at 131k copies
    assert received(matrix, 64).imbalance == pytest.approx(4 * expected[0], rel=0.02)
    assert expected_imbalance(routing, 8, 4) == pytest.approx(4 * expected[0])


def test_rows_keep_their_tokens_and_a_seed_repeats():
    for text in ("zipf:0.8", "dirichlet:0.5", "uniform"):
        matrix = token_matrix(parse_routing(text), shape(seed=3))
        assert (matrix.sum(axis=1) == 4096 * 2).all(), text
        assert (matrix == token_matrix(parse_routing(text), shape(seed=3))).all()
    assert (
        token_matrix(parse_routing("dirichlet:0.5"), shape(seed=1))
        != token_matrix(parse_routing("dirichlet:0.5"), shape(seed=2))
    ).any()


def test_capacity_factor_drops_beyond_capacity():
    dropless = token_matrix(parse_routing("zipf:1.5"), shape())
    capped = token_matrix(parse_routing("zipf:1.5"), shape(capacity_factor=1.0))
    capacity = 4096 * 2 // 8
    assert capped.sum() < dropless.sum()
    assert (capped.sum(axis=0) <= 2 * capacity * 4).all()  # two experts per rank, four source ranks


def test_placement():
    assert expert_owner(8, 4).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert expert_owner(8, 4, "round_robin").tolist() == [0, 1, 2, 3, 0, 1, 2, 3]


def test_file_matrices(tmp_path):
    ranks = tmp_path / "ranks.json"
    ranks.write_text(json.dumps([[2, 2, 2, 2], [8, 0, 0, 0], [4, 4, 0, 0], [0, 0, 0, 8]]))
    matrix = token_matrix(parse_routing(f"file:{ranks}"), shape(tokens=8))
    assert matrix.tolist() == [[4, 4, 4, 4], [16, 0, 0, 0], [8, 8, 0, 0], [0, 0, 0, 16]]  # scaled to 8 tokens x 2
    experts = tmp_path / "experts.csv"
    experts.write_text("\n".join(",".join(["1"] * 8) for _ in range(4)))
    assert (token_matrix(parse_routing(f"file:{experts}"), shape(tokens=8)) == 4).all()
    loads = tmp_path / "loads.json"
    loads.write_text(json.dumps({"counts": [3, 1, 0, 0, 0, 0, 0, 0]}))
    assert expected_shares(parse_routing(f"file:{loads}"), 8, 4).tolist() == [1, 0, 0, 0]


BAD = [
    ("zipf:nan", None, "finite"),
    ("zipf:inf", None, "finite"),
    ("zipf:-1", None, "negative"),
    ("dirichlet:0", None, "positive"),
    ("gauss:1", None, "choose"),
    ("file:{p}", [[1, -2, 3, 0]] * 4, "negative"),
    ("file:{p}", [[1, 1, 1]] * 3, "3x3 matrix"),
    ("file:{p}", [[1, 1, 1, 1]] * 3 + [[1, 1, 1, 2]], "row 3"),
    ("file:{p}", [[1, 0, 0, 0]] * 4, "whole number"),
]


@pytest.mark.parametrize("text,counts,needle", BAD, ids=[f"{t}-{n}" for t, _, n in BAD])
def test_bad_routing_input_is_refused(tmp_path, text, counts, needle):
    path = tmp_path / "m.json"
    if counts is not None:
        path.write_text(json.dumps(counts))
    with pytest.raises(UsageError, match=needle):
        token_matrix(parse_routing(text.format(p=path)), shape())


def test_top_k_above_experts_is_refused():
    with pytest.raises(UsageError, match="more than the 8 experts"):
        shape(top_k=9)


def test_a_routing_file_is_read_once_per_config(tmp_path, monkeypatch):
    """RunConfig and PlanSpec parse --routing once and keep it: validating, checking the ranks and
    making every row (or pricing the plan) reuse that parse, so a file: routing is read once."""
    import commbench.modeling.routing as routing_model
    from commbench.measure.moe import routed_rows
    from commbench.measure.options import RunConfig
    from commbench.modeling.spec import PlanSpec, build_planner

    counts = tmp_path / "counts.json"
    counts.write_text(json.dumps([[4, 0, 0, 4], [0, 4, 4, 0], [2, 2, 2, 2], [8, 0, 0, 0]]))
    reads = []
    real = routing_model._read_counts
    monkeypatch.setattr(routing_model, "_read_counts", lambda path: reads.append(path) or real(path))
    cfg = RunConfig(ops=("all_to_allv",), routing=f"file:{counts}", experts=4, tokens=(8, 16, 32)).validate()
    cfg.check_moe_ranks(4)
    assert len(routed_rows(cfg, 4, 4)) == 3 and len(reads) == 1
    spec = PlanSpec(model="mixtral-8x7b", gpus=8, global_batch=8, seq_len=1024, routing=f"file:{counts}")
    assert build_planner(spec).job.routing == f"file:{counts}" and len(reads) == 2
