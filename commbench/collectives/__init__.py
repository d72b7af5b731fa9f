"""The collectives commbench measures: one declaration per module, over one harness (commbench.measure.harness).

Which ops exist, and their facts beyond measuring, is commbench.ops; this package maps each
measured op to its declaration (which imports torch).
"""

from __future__ import annotations

import importlib

from commbench.errors import UsageError
from commbench.ops import DEFAULT_OPS, MEASURED_OPS

__all__ = ["DEFAULT_OPS", "check_op_name", "declarations", "get_collective"]


def get_collective(name: str):
    """The declaration of one op (imports torch): X in commbench/collectives/x.py for op `x`, so
    adding a collective is that file and its entry in commbench/ops.py."""
    name = check_op_name(name)
    return getattr(importlib.import_module(f"commbench.collectives.{name}"), name.upper())


def declarations() -> dict:
    """Op name -> its declaration, for every measured op (imports torch)."""
    return {name: get_collective(name) for name in MEASURED_OPS}


def check_op_name(name: str) -> str:
    if name not in MEASURED_OPS:
        raise UsageError(f"unknown op {name!r}; choose from {', '.join(MEASURED_OPS)}")
    return name
