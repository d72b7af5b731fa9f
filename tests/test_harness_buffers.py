"""Rows reuse one allocation per buffer role (issue 31, the sweep's cost): a row neither allocates
nor faults fresh pages in, and what the last row left in a buffer can never pass for a result."""

from dataclasses import replace

import pytest
import torch
import torch.distributed as dist

from commbench.collectives import get_collective
from commbench.collectives.base import OUT_OF_PLACE
from commbench.data.schema import NodeInfo
from commbench.measure import harness
from commbench.measure.harness import Row, measure
from commbench.measure.launch import RankEnv, free_port
from commbench.measure.options import RunConfig
from commbench.measure.session import Session


@pytest.fixture(scope="module")
def one_rank_group():
    port = free_port()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield port
    dist.destroy_process_group()


def _session(port: int, **options) -> Session:
    return Session(
        cfg=RunConfig(ops=("all_reduce",), **options).validate(),
        env=RankEnv(0, 1, 0, "127.0.0.1", port, "test"),
        backend="gloo",
        device=torch.device("cpu"),
        nodes=[NodeInfo(hostname="h", node_id=0, ranks=[0], local_ranks=[0])],
    )


def test_a_role_keeps_one_allocation_and_grows_only_when_asked_for_more(one_rank_group):
    session = _session(one_rank_group)
    big = session.buffer("recv", 1024, torch.float32)
    assert big.numel() == 1024
    small = session.buffer("recv", 16, torch.float32)
    assert small.numel() == 16 and small.data_ptr() == big.data_ptr()
    assert session.buffer("send", 16, torch.float32).data_ptr() != big.data_ptr()
    assert session.buffer("recv", 16, torch.float64).dtype == torch.float64
    grown = session.buffer("recv", 4096, torch.float32)
    assert grown.numel() == 4096 and session.buffer("recv", 1024, torch.float32).data_ptr() == grown.data_ptr()


def test_rows_reuse_buffers_and_a_stale_result_is_not_taken_for_one(one_rank_group):
    """Out-of-place all_reduce on one rank leaves the known inputs in recv: a correct result. The
    next row's collective doing nothing (not even the copy into recv) must still be caught, on the
    very same buffer."""
    session = _session(one_rank_group, warmup=2, iters=3)
    collective = get_collective("all_reduce")
    row = Row("world", collective, ((0,),), 1024, collective.counts(256, 1, 4))
    assert measure(session, row, OUT_OF_PLACE).values[-1] == 0
    held = {role: t.data_ptr() for (role, _), t in session.buffers.items()}
    assert set(held) == {"send", "recv"}
    does_nothing = Row(
        "world",
        replace(collective, launch=lambda buffers, ctx, variant: None, out_of_place_copies=False),
        row.groups,
        1024,
        row.counts,
    )
    assert measure(session, does_nothing, OUT_OF_PLACE).values[-1] > 0
    assert {role: t.data_ptr() for (role, _), t in session.buffers.items()} == held
    smaller = Row("world", collective, ((0,),), 512, collective.counts(128, 1, 4))
    assert measure(session, smaller, OUT_OF_PLACE).values[-1] == 0
    assert {role: t.data_ptr() for (role, _), t in session.buffers.items()} == held
    assert harness.allocate(session, smaller, OUT_OF_PLACE, harness.my_context(session, smaller)).recv.numel() == 128
