"""Link health from the kernel's TCP counters: loss shows as retransmissions before it shows in
bandwidth.

On a short, fast link TCP repairs a lost segment within a round trip (SACK, fast retransmit), so
a link dropping a few percent of its packets still reaches nearly full bandwidth, and a
bandwidth-only pairwise matrix cannot tell it from a healthy one. The retransmission counter
can: `/proc/net/snmp` counts every segment the node's TCP stack sent (`OutSegs`) and re-sent
(`RetransSegs`). gloo, and NCCL's socket transport, move data over TCP, so their loss shows
there. The counters are the whole node's (its network namespace's), so other TCP traffic on the
node counts too; InfiniBand and RoCE transports retransmit in the NIC and are not seen here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SNMP = Path("/proc/net/snmp")


@dataclass(frozen=True)
class TcpCounters:
    segments_sent: int
    retransmitted: int

    def __sub__(self, earlier: TcpCounters) -> TcpCounters:
        return TcpCounters(self.segments_sent - earlier.segments_sent, self.retransmitted - earlier.retransmitted)


def moves_data_over_tcp(backend: str) -> bool:
    """gloo always; NCCL only on its socket transport (InfiniBand and RoCE retransmit in the NIC,
    where these counters would read a clean 0% whatever the link does)."""
    if backend == "gloo":
        return True
    return os.environ.get("NCCL_NET", "").lower() == "socket" or os.environ.get("NCCL_IB_DISABLE") == "1"


def read_tcp_counters(path: Path = SNMP) -> TcpCounters | None:
    """The node's TCP segment counters, or None where the file is missing or not understood."""
    try:
        lines = [line.split() for line in path.read_text().splitlines() if line.startswith("Tcp:")]
    except OSError:
        return None
    if len(lines) != 2:  # a header line and a value line
        return None
    fields = dict(zip(lines[0][1:], lines[1][1:]))
    try:
        return TcpCounters(int(fields["OutSegs"]), int(fields["RetransSegs"]))
    except (KeyError, ValueError):
        return None
