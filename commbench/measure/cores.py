"""The CPU cores this process may use: its affinity mask, capped by a cgroup CPU quota.

Under Slurm (task/cgroup, task/affinity) or a container, os.cpu_count() counts the whole
machine; ranks sized from it oversubscribe the cores they were actually given. Every driver
that divides cores among ranks asks usable_cores().
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def usable_cores(cgroup_root: Path = CGROUP_ROOT) -> int:
    """Cores in this process's affinity mask, no more than its cgroup's quota allows (at least 1)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cgroup_cpu_quota(cgroup_root)
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(1, cores)


def cgroup_cpu_quota(cgroup_root: Path = CGROUP_ROOT, own_cgroup: str | None = None) -> float | None:
    """The tightest CPU quota in cores on this process's cgroup path (cgroup v2 cpu.max, else v1
    cpu.cfs_quota_us / cfs_period_us), None where there is none or it cannot be read."""
    own = own_cgroup if own_cgroup is not None else _own_cgroup()
    quotas = []
    for directory in _up_to_root(cgroup_root, own):
        v2 = _read(directory / "cpu.max")
        if v2 is not None:
            quota, _, period = v2.partition(" ")
            quotas.append(None if quota == "max" else _ratio(quota, period))
    v1_quota, v1_period = (
        _read(cgroup_root / "cpu" / "cpu.cfs_quota_us"),
        _read(cgroup_root / "cpu" / "cpu.cfs_period_us"),
    )
    if v1_quota is not None and v1_period is not None and not v1_quota.startswith("-"):
        quotas.append(_ratio(v1_quota, v1_period))
    found = [quota for quota in quotas if quota is not None]
    return min(found) if found else None


def _own_cgroup() -> str:
    """This process's cgroup v2 path ("/" outside one), from /proc/self/cgroup's "0::" line."""
    text = _read(Path("/proc/self/cgroup")) or ""
    return next((line[3:] for line in text.splitlines() if line.startswith("0::")), "/")


def _up_to_root(cgroup_root: Path, own: str) -> list[Path]:
    parts = [part for part in own.split("/") if part]
    return [cgroup_root.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]


def _ratio(quota: str, period: str) -> float | None:
    try:
        value = int(quota) / int(period)
    except (ValueError, ZeroDivisionError):
        return None
    return value if value > 0 else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None
