"""Pairwise flagging without a cluster: the TCP counter reader and the slow/lossy rules."""

from pathlib import Path

import pytest

from commbench.analysis.pairwise import flag_outliers, retransmit_percent, suspects
from commbench.measure.linkhealth import TcpCounters, read_tcp_counters

SNMP_TEXT = """Ip: Forwarding DefaultTTL InReceives
Ip: 1 64 1000
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 3 13 0 0 0 1099 10979 236 0 1 0
Udp: InDatagrams NoPorts
Udp: 5 0
"""


def test_reads_the_tcp_segment_counters(tmp_path):
    snmp = tmp_path / "snmp"
    snmp.write_text(SNMP_TEXT)
    assert read_tcp_counters(snmp) == TcpCounters(segments_sent=10979, retransmitted=236)
    assert read_tcp_counters(snmp) - TcpCounters(979, 36) == TcpCounters(10000, 200)


@pytest.mark.parametrize(
    "text", ["", "Tcp: OutSegs\n", "Tcp: OutSegs RetransSegs\nTcp: 12 x\n", "Tcp: InSegs\nTcp: 3\n"]
)
def test_unreadable_counters_are_none_not_an_error(tmp_path, text):
    snmp = tmp_path / "snmp"
    snmp.write_text(text)
    assert read_tcp_counters(snmp) is None
    assert read_tcp_counters(tmp_path / "missing") is None


def test_this_machine_has_counters():
    if not Path("/proc/net/snmp").exists():
        pytest.skip("no /proc/net/snmp: not Linux, or /proc not mounted")
    counters = read_tcp_counters()
    assert counters is not None and counters.segments_sent >= counters.retransmitted >= 0


def test_retransmit_percent():
    assert retransmit_percent(2000, 30) == pytest.approx(1.5)
    assert retransmit_percent(0, 0) is None


def pair(a, b, nodes, gbps, size=1 << 20, sent=None, resent=None):
    record = {"pair": [a, b], "pair_nodes": nodes, "size_bytes": size, "algbw_gbps": gbps}
    if sent is not None:
        record |= {"tcp_segments_sent": sent, "tcp_retransmits": resent}
    return record


def test_lossy_pairs_are_flagged_at_full_bandwidth_and_the_common_node_named():
    records = [
        pair(0, 1, ["n0", "n1"], 0.154, sent=3000, resent=1),
        pair(0, 2, ["n0", "n2"], 0.148, sent=3100, resent=90),
        pair(1, 2, ["n1", "n2"], 0.153, sent=3050, resent=60),
        pair(0, 1, ["n0", "n1"], 0.0001, size=8, sent=30, resent=5),
    ]  # latency row: never judged
    flagged = flag_outliers(records, 1 << 20, ratio=0.75, max_retransmit_pct=0.5)
    assert [r["outlier_reasons"] for r in flagged] == [[], ["lossy"], ["lossy"], []]
    assert [r["outlier"] for r in flagged] == [False, True, True, False]
    assert suspects(flagged) == ["n2"]


def test_slow_and_lossy_are_both_named_and_missing_counters_judge_bandwidth_only():
    records = [
        pair(0, 1, ["n0", "n1"], 0.15),
        pair(0, 2, ["n0", "n2"], 0.02, sent=100, resent=10),
        pair(1, 2, ["n1", "n2"], 0.15, sent=100, resent=0),
    ]
    flagged = flag_outliers(records, 1 << 20, ratio=0.75, max_retransmit_pct=0.5)
    assert [r["outlier_reasons"] for r in flagged] == [[], ["slow", "lossy"], []]
