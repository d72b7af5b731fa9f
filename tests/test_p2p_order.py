"""Point-to-point ops post their receive before their send.

gloo starts a send only when the receiver's "ready to receive" message has arrived, and that
message rides the pair's one TCP connection behind data already queued there. With the send
posted first, a 2-rank sendrecv (or pingpong bi) ran its two directions one after the other on
the emulated 1 Gbit/s cluster: 16 MiB in ~280 ms instead of ~145 ms, half the link per row
(bench/RESULTS.md, "gloo point-to-point"). Timing that needs a shaped link; this guards the order.
"""

from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from commbench.collectives import get_collective
from commbench.collectives.base import Buffers, GroupContext
from commbench.collectives.pingpong import BI


class _Done:
    def wait(self):
        return True


@pytest.fixture
def posted(monkeypatch):
    calls: list[list[tuple[str, int]]] = []

    def record(ops):
        calls.append([(op.op.__name__, op.peer) for op in ops])
        return [_Done() for _ in ops]

    # P2POp checks its group against an initialised default group: none exists here
    monkeypatch.setattr(dist, "P2POp", lambda op, tensor, peer, group=None: SimpleNamespace(op=op, peer=peer))
    monkeypatch.setattr(dist, "batch_isend_irecv", record)
    return calls


@pytest.mark.parametrize("size", [2, 4])
def test_sendrecv_posts_the_receive_first(posted, size):
    ctx = GroupContext(group=None, rank=1, size=size, global_ranks=tuple(range(10, 10 + size)))
    buffers = Buffers(send=torch.zeros(4), recv=torch.zeros(4))
    get_collective("sendrecv").launch(buffers, ctx, get_collective("sendrecv").variants[0])
    # receive from rank-1, then send to rank+1 (global ranks)
    assert posted == [[("irecv", 10), ("isend", 10 + 2 % size)]]


def test_bidirectional_pingpong_posts_the_receive_first(posted):
    ctx = GroupContext(group=None, rank=0, size=2, global_ranks=(3, 7))
    buffers = Buffers(send=torch.zeros(4), recv=torch.zeros(4))
    get_collective("pingpong").launch(buffers, ctx, BI)
    assert posted == [[("irecv", 7), ("isend", 7)]]
