"""Generated (synthetic) run histories, with noise measured on real repeated sweeps.

Every directory written here says so: run.json has source "synthetic" and args.synthetic holds
the generator's settings, so a generated run can never pass for a measured one.

A noise profile is JSON measured from repeated `commbench run`s of one command:
  {"measured": {"host", "date", "command", "runs", "load"},
   "op": "all_reduce", "group_size": 2,
   "rows": [{"size_bytes", "in_place", "busbw_gbps": median over runs,
             "run_sigma": robust sd of log(busbw) over runs, "iter_cv": median per-iteration CV}]}
A generated run draws each row's level from busbw x exp(N(0, run_sigma)) (run-to-run noise),
then per-iteration samples around it with the measured CV (lognormal), scaled so that their
median is that level: the record's time is the samples' median, as the harness reports it, and
run_sigma (measured on reported figures) stays the whole run-to-run noise.
A profile may also carry "quiet": {"run_sigma", "source"}, the same machine's run-to-run noise
when it was not shared, with where that figure comes from; `quiet_variant` uses it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

from commbench.data.samples import SAMPLES_JSONL, samples_line
from commbench.data.schema import SCHEMA_VERSION

START = datetime(2026, 1, 1, tzinfo=timezone.utc)


@dataclass
class Injection:
    """From run `at` (1-based) on, busbw is multiplied by (1 - drop) and run.json changes as given."""

    at: int
    drop: float
    versions: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    nodes: dict[str, Any] = field(default_factory=dict)  # old hostname -> new hostname


def read_profile(path: str | Path) -> dict[str, Any]:
    profile: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    return profile


def generate_history(
    out_dir: str | Path,
    profile: dict[str, Any],
    n_runs: int,
    *,
    cluster: str = "synth",
    injection: Injection | None = None,
    seed: int = 0,
    iters: int = 20,
    prefix: str = "synth",
) -> list[Path]:
    """Write n_runs run directories under out_dir, one hour apart; returns their paths in order."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for info, records, samples in generate_runs(
        profile, n_runs, cluster=cluster, injection=injection, seed=seed, iters=iters, prefix=prefix
    ):
        path = out / info["run_id"]
        path.mkdir(exist_ok=True)
        (path / "records.jsonl").write_text("".join(json.dumps(rec) + "\n" for rec in records), encoding="utf-8")
        (path / SAMPLES_JSONL).write_text("".join(samples), encoding="utf-8")
        (path / "run.json").write_text(json.dumps(info), encoding="utf-8")  # last: a run is whole once run.json exists
        paths.append(path)
    return paths


# one generated run: (run.json, records, samples.jsonl lines)
GeneratedRun = tuple[dict[str, Any], list[dict[str, Any]], list[str]]


def generate_runs(
    profile: dict[str, Any],
    n_runs: int,
    *,
    cluster: str = "synth",
    injection: Injection | None = None,
    seed: int = 0,
    iters: int = 20,
    prefix: str = "synth",
) -> Iterator[GeneratedRun]:
    """(run.json, records, samples.jsonl lines) of each generated run, in order, without touching disk."""
    rng = np.random.default_rng(seed)
    rows = profile["rows"]
    base = np.array([row["busbw_gbps"] for row in rows])
    run_sigma = np.array([row["run_sigma"] for row in rows])
    iter_sigma = np.sqrt(np.log1p(np.array([row["iter_cv"] for row in rows]) ** 2))
    for index in range(1, n_runs + 1):
        after = injection is not None and index >= injection.at
        busbw = (
            base
            * ((1 - injection.drop) if injection is not None and after else 1.0)
            * np.exp(rng.normal(0.0, run_sigma))
        )
        spread = np.exp(rng.normal(0.0, iter_sigma[:, None], (len(rows), iters)))
        records, samples = [], []
        for row, level, row_spread in zip(rows, busbw, spread):
            record, times = _row(profile, row, level, row_spread, iters)
            records.append(record)
            ranks = list(range(profile["group_size"]))
            samples.append(samples_line(record, 0, times, ranks, [record["time_us"]] * len(ranks)))
        run_id = f"{prefix}-{cluster}-{index:05d}"
        yield _run_info(run_id, index, cluster, profile, injection if after else None, iters), records, samples


def generate_rows(
    profile: dict[str, Any],
    keys: list[tuple[int, bool]],
    n_runs: int,
    *,
    injection: Injection | None = None,
    seed: int = 0,
) -> list[list[float]]:
    """Several rows' busbw (one list per (size_bytes, in_place) key) over the same n_runs, each row's
    run-to-run noise drawn independently, as generate_runs draws it."""
    by_key = {(row["size_bytes"], row["in_place"]): row for row in profile["rows"]}
    rows = [by_key[key] for key in keys]
    scale = np.ones(n_runs)
    if injection is not None:
        scale[injection.at - 1 :] = 1 - injection.drop
    noise = np.random.default_rng(seed).normal(0.0, [row["run_sigma"] for row in rows], (n_runs, len(rows)))
    return [(row["busbw_gbps"] * scale * np.exp(noise[:, i])).tolist() for i, row in enumerate(rows)]


def quiet_variant(profile: dict[str, Any]) -> dict[str, Any]:
    """The profile with every row's run-to-run noise set to the quiet-machine figure it records."""
    quiet = profile["quiet"]
    return profile | {
        "rows": [row | {"run_sigma": quiet["run_sigma"]} for row in profile["rows"]],
        "measured": profile["measured"] | {"run_sigma_from": quiet["source"]},
    }


def _row(
    profile: dict[str, Any], row: dict[str, Any], busbw: float, spread: np.ndarray, iters: int
) -> tuple[dict[str, Any], list[float]]:
    """The record and per-iteration samples of one row whose busbw this run is `busbw`."""
    factor = 2 * (profile["group_size"] - 1) / profile["group_size"] if profile["op"] == "all_reduce" else 1.0
    level_us = row["size_bytes"] * factor / (busbw * 1e3)
    times = level_us * spread / np.median(spread)  # median = the level: run_sigma is the whole run-to-run noise
    time_us = float(level_us)
    p10, p90 = np.percentile(times, [10, 90])
    algbw = row["size_bytes"] / (time_us * 1e3)
    record = {
        "op": profile["op"],
        "scope": "world",
        "group_size": profile["group_size"],
        "n_groups": 1,
        "size_bytes": row["size_bytes"],
        "count": row["size_bytes"] // 4,
        "dtype": "float",
        "redop": "sum",
        "root": -1,
        "in_place": row["in_place"],
        "direction": None,
        "iters": iters,
        "warmup": 2,
        "timer": "host",
        "time_us": time_us,
        "time_us_p10": float(p10),
        "time_us_p90": float(p90),
        "time_us_min": float(times.min()),
        "time_us_max": float(times.max()),
        "cv": float(times.std() / times.mean()),
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * factor,
        "busbw_factor": factor,
        "aggregate_busbw_gbps": algbw * factor,
        "wrong": 0,
        "slowest_rank": 0,
    }
    return record, times.tolist()


def _run_info(
    run_id: str, index: int, cluster: str, profile: dict[str, Any], injection: Injection | None, iters: int
) -> dict[str, Any]:
    created = START + timedelta(hours=index)
    hosts = [f"{cluster}-node{n}" for n in range(1, profile["group_size"] + 1)]
    versions = {"commbench": "0.1.0", "torch": "2.4.0", "nccl": "2.21.5"}
    env = {"NCCL_IB_QPS_PER_CONNECTION": "4"}
    if injection is not None:
        versions |= injection.versions
        env = {key: value for key, value in (env | injection.env).items() if value is not None}
        hosts = [injection.nodes.get(host, host) for host in hosts]
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "kind": "sweep",
        "source": "synthetic",
        "created": created.isoformat(timespec="seconds"),
        "finished": (created + timedelta(minutes=5)).isoformat(timespec="seconds"),
        "backend": "nccl",
        "world_size": profile["group_size"],
        "cluster": cluster,
        "nodes": [{"hostname": host, "node_id": n, "ranks": [n], "local_ranks": [0]} for n, host in enumerate(hosts)],
        "args": {"ops": [profile["op"]], "iters": iters, "synthetic": {"profile": profile["measured"]["command"]}},
        "versions": versions,
        "env": env,
        "topology": None,
        "complete": True,
        "reason": None,
        "warnings": [],
    }
