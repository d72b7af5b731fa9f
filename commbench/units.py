"""Byte sizes as nccl-tests writes them: K, M and G are binary (1K = 1024 bytes)."""

import re

from commbench.errors import UsageError

_SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
MAX_SIZE = 1 << 50  # 1 PiB: far beyond any buffer, small enough to stay exact in every computation
_SIZE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "...'"


def parse_size(text: str | int) -> int:
    """'4M' -> 4194304. Plain integers are bytes. Raises UsageError on anything else."""
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.match(str(text))
        if not match:
            raise UsageError(f"bad size {_shown(text)}: use bytes or a binary suffix, e.g. 512, 8K, 4M, 1G")
        number, suffix = match.groups()
        # exact arithmetic: a float would turn 300 digits into inf and 2**53 + 1 into 2**53
        whole, _, fraction = number.lstrip("-").partition(".")
        scaled = (int(whole) * 10 ** len(fraction) + int(fraction or 0)) * _SUFFIX[suffix.upper()]
        value, remainder = divmod(scaled, 10 ** len(fraction))
        if remainder:
            raise UsageError(f"bad size {_shown(text)}: it is not a whole number of bytes")
        value = -value if number.startswith("-") else value
    if value < 0:
        raise UsageError(f"bad size {_shown(text)}: sizes cannot be negative")
    if value > MAX_SIZE:
        raise UsageError(f"bad size {_shown(text)}: larger than {MAX_SIZE} bytes (1 PiB)")
    return value


def format_size(num_bytes: int) -> str:
    """4194304 -> '4M'; sizes that are not a whole binary unit stay in bytes."""
    for suffix in ("G", "M", "K"):
        unit = _SUFFIX[suffix]
        if num_bytes >= unit and num_bytes % unit == 0:
            return f"{num_bytes // unit}{suffix}"
    return str(num_bytes)
