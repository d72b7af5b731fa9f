"""Slurm hostlist syntax: `node[01-03,07],gpu5` <-> a list of names.

compress() writes what `sbatch --exclude` and `scontrol show hostnames` accept: names that share a
prefix and a numeric suffix of the same width are folded into one bracket with ranges. expand()
reads the same syntax (one bracket per name, as Slurm writes them) for --hosts.
"""

from __future__ import annotations

import re
from itertools import groupby

_NUMBERED = re.compile(r"^(.*?)(\d+)\Z")
_BRACKET = re.compile(r"^([^\[\]]*)\[([^\[\]]+)\]([^\[\]]*)\Z")


def compress(names: list[str]) -> str:
    """The shortest hostlist this module writes for `names` (order: by prefix, then number)."""
    plain: list[str] = []
    numbered: dict[tuple[str, int], list[int]] = {}
    for name in sorted(set(names)):
        match = _NUMBERED.match(name)
        if match:
            prefix, digits = match.groups()
            numbered.setdefault((prefix, len(digits)), []).append(int(digits))
        else:
            plain.append(name)
    parts = list(plain)
    for (prefix, width), numbers in sorted(numbered.items()):
        if len(numbers) == 1:
            parts.append(f"{prefix}{numbers[0]:0{width}d}")
            continue
        ranges = []
        for _, consecutive in groupby(enumerate(sorted(numbers)), key=lambda pair: pair[1] - pair[0]):
            run = [n for _, n in consecutive]
            ranges.append(f"{run[0]:0{width}d}" + (f"-{run[-1]:0{width}d}" if len(run) > 1 else ""))
        parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts)


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth < 0 or depth > 1:
            raise ValueError(f"unbalanced brackets in host list {text!r}")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise ValueError(f"unbalanced brackets in host list {text!r}")
    return parts + [current]


def expand(hostlist: str) -> list[str]:
    """Every name of a hostlist, in order; ValueError with the reason on anything else."""
    names = []
    for part in (p.strip() for p in _split_top_level(hostlist.strip())):
        if not part:
            raise ValueError(f"empty name in host list {hostlist!r}")
        match = _BRACKET.match(part)
        if "[" not in part and "]" not in part:
            names.append(part)
        elif not match:
            raise ValueError(f"cannot read {part!r}: one [range] per name, e.g. node[01-04,07]")
        else:
            names.extend(f"{match.group(1)}{number}{match.group(3)}" for number in _expand_ranges(match.group(2), part))
    return names


def _expand_ranges(ranges: str, part: str) -> list[str]:
    numbers: list[str] = []
    for item in ranges.split(","):
        low, _, high = item.partition("-")
        if not low.isdigit() or (high and not high.isdigit()) or (high and int(high) < int(low)):
            raise ValueError(f"cannot read the range {item!r} in {part!r}")
        width = len(low)
        numbers.extend(f"{n:0{width}d}" for n in range(int(low), int(high or low) + 1))
    return numbers
