"""Per-iteration samples kept beside a run's records, so later comparisons can do statistics.

Format of `<run_dir>/samples.jsonl` (optional: runs written before it existed have none, and
every reader treats a missing file as "no samples"): one JSON object per measured row,
  {"key": [op, scope, group_size, size_bytes, dtype, in_place, direction],
   "slowest_rank": R, "time_us": [...], "ranks": [...], "rank_median_us": [...]}
and, for a pairwise row, "pair": [rank_a, rank_b] (the pairs of one round share every key field).
`time_us` are the per-iteration times of the rank whose median was reported (the record's
`time_us` is their median); `rank_median_us[i]` is the median of rank `ranks[i]`, for every rank
in the row's groups (a documented subset of every rank's samples: it keeps the file small on
large jobs). `key` with "pair" after it, where there is one, is `row_key(record)`: how samples find
their record.
Every measuring driver keeps them: sweeps per row and variant, pairwise runs per pair (the
ping-pong's one-way times), overlap runs per row (the collective alone, whose median is the
record's `time_us`; the both-at-once figures stay medians in the record).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from commbench.data.safe_read import RECORDS, LineReport, UnsafeFile, iter_jsonl

SAMPLES_JSONL = "samples.jsonl"

KEY_FIELDS = ("op", "scope", "group_size", "size_bytes", "dtype", "in_place", "direction")


def row_key(record: dict[str, Any]) -> tuple[Any, ...]:
    """What identifies a row across runs of the same command (and inside one run): its KEY_FIELDS and,
    for a pairwise row, its pair (rank_a, rank_b) last. The pairs of a pairwise run share every key
    field, so without the pair two runs' different pairs would be matched, or collapse into one row.
    Every matcher of rows (compare, baseline and check, samples to records) goes through this key."""
    return _with_pair([record.get(name) for name in KEY_FIELDS], record.get("pair"))


def key_from_json(values: list[Any]) -> tuple[Any, ...]:
    """A row key written as JSON (a baseline's "key") back into the tuple row_key makes."""
    fields = len(KEY_FIELDS)
    return _with_pair(values[:fields], values[fields] if len(values) > fields else None)


def _with_pair(fields: Iterable[Any], pair: Iterable[Any] | None) -> tuple[Any, ...]:
    return tuple(fields) + ((tuple(pair),) if pair else ())


def samples_line(
    record: dict[str, Any],
    slowest_rank: int | None,
    times_us: list[float],
    ranks: list[int],
    rank_medians_us: list[float],
) -> str:
    """One line of samples.jsonl for `record` (the writer appends these as rows are measured)."""
    line = {
        "key": [record.get(name) for name in KEY_FIELDS],
        "slowest_rank": slowest_rank,
        "time_us": [round(value, 4) for value in times_us],
        "ranks": ranks,
        "rank_median_us": [round(value, 4) for value in rank_medians_us],
    }
    if record.get("pair"):
        line["pair"] = list(record["pair"])
    return json.dumps(line) + "\n"


def read_samples(run_dir: str | Path, warnings: list[str] | None = None) -> dict[tuple[Any, ...], dict[str, Any]]:
    """row key -> {"slowest_rank", "time_us", "ranks", "rank_median_us"}; {} when the run kept no
    samples. Keys are row_key's (a pairwise row's ends with its pair (rank_a, rank_b)). Lines that
    do not parse are skipped with a warning, never an error: samples are an addition."""
    path = Path(run_dir) / SAMPLES_JSONL
    if not os.path.lexists(path):
        return {}
    found: dict[tuple[Any, ...], dict[str, Any]] = {}
    lines = LineReport()
    try:
        for number, item in iter_jsonl(path, RECORDS, lines, root=path.parent):
            try:
                key = _with_pair(item["key"], item.get("pair"))
                times = [float(value) for value in item["time_us"]]
                medians = [float(value) for value in item.get("rank_median_us") or []]
            except (KeyError, TypeError, ValueError, AttributeError):
                lines.skip(f"{path.name} line {number}", "not a samples line")
                continue
            found[key] = {
                "slowest_rank": item.get("slowest_rank"),
                "time_us": times,
                "ranks": item.get("ranks"),
                "rank_median_us": medians,
            }
    except UnsafeFile as exc:
        if warnings is not None:
            warnings.append(f"{exc}; no samples read")
        return {}
    if warnings is not None:
        warnings.extend(lines.warnings(path.name))
    return found
