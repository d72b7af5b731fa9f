"""Who reports a lost rank, and how long the others wait for it (no store needed: nothing starts)."""

from commbench.measure.watchdog import DIAGNOSE_BOUND_S, Diagnosis, RankMonitor

HOSTS = {0: "n0", 1: "n0", 2: "n1", 3: "n1"}


def monitor(rank: int, timeout_s: float = 10.0) -> RankMonitor:
    return RankMonitor("127.0.0.1", 1, rank, 4, HOSTS, timeout_s, on_hang=lambda diagnosis: None)


def test_the_lowest_healthy_rank_reports_a_lost_rank_and_nobody_waits_across_nodes():
    lost = Diagnosis((2,), "lost rank 2")
    assert [monitor(rank).reporter(lost) for rank in range(4)] == [0, 0, 0, 0]
    assert [monitor(rank).is_reporter(lost) for rank in range(4)] == [True, False, False, False]
    # rank 1 shares node n0 with the reporter: leaving first would let torchrun stop rank 0 unheard
    assert monitor(1).linger_s(lost) == 10.0 + DIAGNOSE_BOUND_S
    # the reporter lives on another node: rank 3 leaving cannot silence it
    assert monitor(3).linger_s(lost) == 0.0 and monitor(0).linger_s(lost) == 0.0


def test_a_node_cut_off_from_the_store_reports_its_own_side_and_its_other_ranks_wait():
    cut_off = Diagnosis((0,), "node n1 cannot reach rank 0", store_lost=True)
    assert monitor(2).is_reporter(cut_off) and not monitor(3).is_reporter(cut_off)
    assert monitor(3, timeout_s=30).linger_s(cut_off) == 30 + DIAGNOSE_BOUND_S
    assert monitor(2).linger_s(cut_off) == 0.0
