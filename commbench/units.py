"""Byte sizes as nccl-tests writes them: K, M and G are binary (1K = 1024 bytes)."""

import re

from commbench.errors import UsageError

_SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """'4M' -> 4194304. Plain integers are bytes. Raises UsageError on anything else."""
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.match(str(text))
        if not match:
            raise UsageError(f"bad size {text!r}: use bytes or a binary suffix, e.g. 512, 8K, 4M, 1G")
        number, suffix = match.groups()
        value = float(number) * _SUFFIX[suffix.upper()]
        if value != int(value):
            raise UsageError(f"bad size {text!r}: it is not a whole number of bytes")
        value = int(value)
    if value < 0:
        raise UsageError(f"bad size {text!r}: sizes cannot be negative")
    return value


def format_size(num_bytes: int) -> str:
    """4194304 -> '4M'; sizes that are not a whole binary unit stay in bytes."""
    for suffix in ("G", "M", "K"):
        unit = _SUFFIX[suffix]
        if num_bytes >= unit and num_bytes % unit == 0:
            return f"{num_bytes // unit}{suffix}"
    return str(num_bytes)
