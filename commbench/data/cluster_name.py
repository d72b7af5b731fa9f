"""Which cluster a run belongs to: `--cluster NAME`, else Slurm's cluster name, else the hostname pattern.

The hostname pattern is the first node's short hostname without its trailing number
("gpu-a17" -> "gpu-a", "node3" -> "node"), so the nodes of one fleet land in one history.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

_TRAILING_NUMBER = re.compile(r"[-_.]?\d+$")


def hostname_pattern(hostname: str) -> str:
    short = hostname.split(".")[0]
    return _TRAILING_NUMBER.sub("", short) or short or "local"


def resolve_cluster(explicit: str | None, env: Mapping[str, str] | None = None, first_host: str | None = None) -> str:
    """The cluster name a run records: explicit, SLURM_CLUSTER_NAME, or the first host's pattern."""
    variables = os.environ if env is None else env
    if explicit:
        return explicit
    if variables.get("SLURM_CLUSTER_NAME"):
        return variables["SLURM_CLUSTER_NAME"]
    return hostname_pattern(first_host or os.uname().nodename)
