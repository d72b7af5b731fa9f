"""A run as the statistics see it: its rows by key, their samples, and what its run.json says.

A run is named by its directory or, when a database is given, by its run id (the database says
where the directory is). Directories are read directly: they are the source of truth.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commbench.data.rundir import RUN_FILE, load_run
from commbench.data.samples import read_samples, row_key
from commbench.data.schema import RunInfo
from commbench.errors import UsageError
from commbench.units import format_size

# run.json environment prefixes that change what a collective does (launcher ports do not)
BEHAVIOUR_ENV = ("NCCL_", "GLOO_", "TORCH_NCCL", "TORCH_DISTRIBUTED", "CUDA_", "OMP_", "UCX_")
# run.json args that name where a run went rather than what it measured
IGNORED_ARGS = {"run_id", "out_dir", "progress", "argv", "node_name"}


@dataclass
class RunRows:
    info: RunInfo
    path: Path
    rows: dict[tuple[Any, ...], dict[str, Any]]  # row key -> record
    samples: dict[tuple[Any, ...], list[float]]  # row key -> per-iteration times (us) of the reported rank

    @property
    def run_id(self) -> str:
        return self.info.run_id


def resolve_run(name: str, db: str | Path | None = None) -> Path:
    """A run directory from a path, or from a run id looked up in the database."""
    path = Path(name)
    if (path / RUN_FILE).is_file():
        return path
    if db is not None and Path(db).is_file():
        from commbench.data.store import query  # the store needs duckdb: only when a run id is given

        _, found = query(db, "SELECT path FROM runs WHERE run_id = ?", [name])
        if found:
            return Path(found[0][0])
    raise UsageError(f"{name}: not a run directory" + (" nor a run id in the database" if db else ""))


def read_run(name: str, db: str | Path | None = None) -> RunRows:
    path = resolve_run(name, db)
    run = load_run(path)
    rows = {row_key(record): record for record in run.records}
    samples = {key: kept["time_us"] for key, kept in read_samples(path).items() if key in rows}
    return RunRows(info=run.info, path=path, rows=rows, samples=samples)


def describe_key(key: tuple[Any, ...]) -> str:
    """A row key in words; a pairwise row's names its two ranks ("pair ranks 0<->3")."""
    op, scope, group_size, size_bytes, dtype, in_place, direction, *pair = key
    where = "in-place" if in_place else "out-of-place"
    extra = f" {direction}" if direction else ""
    ranks = f" ranks {pair[0][0]}<->{pair[0][1]}" if pair else ""
    return f"{op}{extra} {scope}{ranks} n={group_size} {format_size(size_bytes)} {dtype} {where}"


def name_width(names: Any) -> int:
    """The width of a text table's row column: 52, or the longest name (a pairwise row's, which names its pair)."""
    return max([52, *(len(name) for name in names)])


def run_differences(before: RunInfo, after: RunInfo) -> list[str]:
    """What differs between two runs' run.json, in words: versions, environment, nodes, topology, options."""
    changes = [f"{name} {old} -> {new}" for name, old, new in _dict_changes(before.versions, after.versions)]
    changes += [
        f"{name} {old} -> {new}"
        for name, old, new in _dict_changes(_behaviour_env(before.env), _behaviour_env(after.env))
    ]
    changes += _node_changes([n.hostname for n in before.nodes], [n.hostname for n in after.nodes])
    if _canonical(before.topology) != _canonical(after.topology) and before.topology and after.topology:
        changes.append("topology changed")
    options = _dict_changes(_options(before.args), _options(after.args))
    changes += [f"option {name} {old} -> {new}" for name, old, new in options]
    if getattr(before, "cluster", None) != getattr(after, "cluster", None):
        changes.append(
            f"cluster {getattr(before, 'cluster', None) or 'unset'} -> {getattr(after, 'cluster', None) or 'unset'}"
        )
    return changes


def _dict_changes(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str, str]]:
    names = sorted(set(old) | set(new))
    return [(name, _text(old.get(name)), _text(new.get(name))) for name in names if old.get(name) != new.get(name)]


def _text(value: Any) -> str:
    if value is None:
        return "unset"
    return value if isinstance(value, str) else json.dumps(value)


def _behaviour_env(env: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in env.items() if key.startswith(BEHAVIOUR_ENV)}


def _options(args: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in args.items() if key not in IGNORED_ARGS}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _node_changes(before: list[str], after: list[str]) -> list[str]:
    gone = sorted(set(before) - set(after))
    new = sorted(set(after) - set(before))
    if not gone and not new:
        return []
    if len(gone) == len(new):
        return [f"nodes: {', '.join(f'{a} replaced by {b}' for a, b in zip(gone, new))}"]
    parts = [f"-{name}" for name in gone] + [f"+{name}" for name in new]
    return [f"nodes: {' '.join(parts)} ({len(before)} -> {len(after)})"]
