"""pytest fixtures for multi-node tests. Import them into tests/conftest.py:

    from cluster.fixtures import *  # noqa: F401,F403

(tests/ has no __init__.py, so pytest puts tests/ on sys.path and `cluster` is importable.)

Fixtures (each skips with a clear reason when not root / tools missing; in CI that skip fails,
see tests/conftest.py):
- ``emulated_cluster``: a started 2-node `EmulatedCluster` at 1 Gbit/s (function scope).
  Other shapes through indirect parametrization::

      @pytest.mark.parametrize("emulated_cluster",
                               [dict(nodes=3, per_node_rate={2: "100mbit"})], indirect=True)
      def test_x(emulated_cluster): ...

- ``emulated_cluster_factory``: ``make(**kwargs) -> EmulatedCluster`` (started), any number,
  all torn down at the end of the test.
- ``module_emulated_cluster``: one started `EmulatedCluster` shared by the tests of a module
  (module scope), built from the module's ``EMULATED_CLUSTER`` dict (default: 2 nodes at
  1 Gbit/s). A test that cuts a link or reshapes a node puts it back before it returns, so the
  next test of the module finds the cluster as the dict describes it.
- ``slurm_cluster``: a started `SlurmCluster` on its own 2-node emulated cluster, shared by the
  tests of a module (module scope; ``slurm_cluster.ec`` is the emulated cluster). Indirect
  parametrization takes ``dict(nodes=..., rate=..., slurm=dict(cpus_per_node=...))``.
- ``slurm_cluster_factory``: ``make(nodes=2, rate="1gbit", **slurm_kwargs) -> SlurmCluster``
  (function scope) for tests that break their cluster (kill a node, ...).

Leftovers of a crashed earlier run (same prefix, owner process dead) are removed once per
process before the first cluster is built (`cleanup_stale`).
"""

from __future__ import annotations

import pytest

from .emulated import DEFAULT_PREFIX, EmulatedCluster, cleanup_stale, prerequisites_missing
from .slurm import SlurmCluster, slurm_missing

__all__ = [
    "emulated_cluster",
    "emulated_cluster_factory",
    "module_emulated_cluster",
    "require_cluster",
    "require_slurm",
    "slurm_cluster",
    "slurm_cluster_factory",
]

_STALE_DONE = False


def require_cluster() -> None:
    """pytest.skip unless an emulated cluster can be built here (root, ip/tc/nsenter/unshare)."""
    reason = prerequisites_missing()
    if reason:
        pytest.skip(reason)
    global _STALE_DONE
    if not _STALE_DONE:
        _STALE_DONE = True
        cleanup_stale(DEFAULT_PREFIX)


def require_slurm() -> None:
    require_cluster()
    reason = slurm_missing()
    if reason:
        pytest.skip(reason)


class _Closer:
    """Closes everything it was given, in reverse order; reports teardown failures."""

    def __init__(self):
        self.items: list = []

    def close(self) -> None:
        errors: list[str] = []
        for obj in reversed(self.items):
            if isinstance(obj, SlurmCluster):
                obj.close()
            else:
                errors += obj.close(raise_errors=False)
        self.items.clear()
        if errors:
            pytest.fail("emulated cluster teardown incomplete: " + "; ".join(errors), pytrace=False)


@pytest.fixture
def emulated_cluster_factory():
    require_cluster()
    closer = _Closer()

    def make(**kwargs) -> EmulatedCluster:
        c = EmulatedCluster(**kwargs)
        closer.items.append(c)
        return c.start()

    try:
        yield make
    finally:
        closer.close()


@pytest.fixture
def emulated_cluster(request, emulated_cluster_factory):
    kwargs = dict(getattr(request, "param", None) or {})
    kwargs.setdefault("nodes", 2)
    kwargs.setdefault("rate", "1gbit")
    return emulated_cluster_factory(**kwargs)


@pytest.fixture(scope="module")
def module_emulated_cluster(request):
    require_cluster()
    kwargs = dict(getattr(request.module, "EMULATED_CLUSTER", None) or {})
    kwargs.setdefault("nodes", 2)
    kwargs.setdefault("rate", "1gbit")
    closer = _Closer()
    try:
        c = EmulatedCluster(**kwargs)
        closer.items.append(c)
        yield c.start()
    finally:
        closer.close()


def _make_slurm(closer: _Closer, nodes: int = 2, rate="1gbit", slurm=None, **ec_kwargs) -> SlurmCluster:
    ec = EmulatedCluster(nodes=nodes, rate=rate, **ec_kwargs)
    closer.items.append(ec)
    ec.start()
    sc = SlurmCluster(ec, **(slurm or {}))
    closer.items.append(sc)
    return sc.start()


@pytest.fixture(scope="module")
def slurm_cluster(request):
    require_slurm()
    closer = _Closer()
    try:
        yield _make_slurm(closer, **dict(getattr(request, "param", None) or {}))
    finally:
        closer.close()


@pytest.fixture
def slurm_cluster_factory():
    require_slurm()
    closer = _Closer()

    def make(nodes: int = 2, rate="1gbit", **slurm_kwargs) -> SlurmCluster:
        return _make_slurm(closer, nodes=nodes, rate=rate, slurm=slurm_kwargs)

    try:
        yield make
    finally:
        closer.close()
