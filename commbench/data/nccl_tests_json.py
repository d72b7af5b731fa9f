"""Read the report nccl-tests writes with `-J FILE` into RunFacts.

The report holds version, args, env, nccl_version, config (with devices), results (one object
per size with out_of_place/in_place and, with `-I`, `*_per_iter` statistics: every iteration's
time and, across processes, each process's slowest time per iteration), out_of_bounds,
average_bus_bandwidth and errors. A report cut short by a crash keeps its complete results.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

from commbench.data.nccl_tests_facts import INCOMPLETE_REASON, Device, Measurement, RunFacts, nccl_version_from_code
from commbench.data.safe_read import UnsafeFile, parse_json
from commbench.errors import UsageError

# Only these variables of a JSON run's environment are kept: the rest may hold secrets.
_KEPT_ENV_PREFIXES = ("NCCL_", "CUDA_", "NVIDIA_", "UCX_", "FI_", "SLURM_", "OMPI_", "PMIX_", "TORCH_")


def read_report(text: str, source: str) -> RunFacts:
    """The run a -J report describes. Raises UsageError when the text is not an nccl-tests report."""
    document = _load_json_report(text, source)
    if not isinstance(document, dict) or "results" not in document or "config" not in document:
        raise UsageError(f"{source}: JSON, but not an nccl-tests report (no 'config' and 'results')")
    try:
        return _facts_from_json(document, source)
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise UsageError(
            f"{source}: nccl-tests JSON report in a layout this commbench does not know ({exc!r})"
        ) from None


def _load_json_report(text: str, source: str) -> dict[str, Any]:
    """The report; for a writer that died mid-run, its header and complete results.

    nccl-tests writes the report as it goes and closes it only at the end, so a crash leaves
    '{...,"results":[{...},{...},{"size":' behind.
    """
    try:
        whole: dict[str, Any] = parse_json(text, source)  # safe_read's depth and integer limits: one line, exit 2
        return whole
    except UnsafeFile as exc:
        if "unreadable JSON" not in str(exc):
            raise
    start = text.find('"results":[')
    if start < 0:
        raise UsageError(f"{source}: not valid JSON and no nccl-tests results in it")
    try:
        document: dict[str, Any] = parse_json(text[:start] + '"results":[]}', source)
    except UnsafeFile:
        raise UsageError(f"{source}: not valid JSON and its nccl-tests header is unreadable") from None
    document["results"] = _complete_json_items(text, start + len('"results":['))
    return document


def _complete_json_items(text: str, position: int) -> list[Any]:
    """Decode the items of a JSON list from position on, stopping at the first incomplete one."""
    decoder = json.JSONDecoder()
    items: list[Any] = []
    while True:
        position = len(text) - len(text[position:].lstrip(", \n\t\r"))
        try:
            item, position = decoder.raw_decode(text, position)
        except (json.JSONDecodeError, RecursionError, ValueError):  # the cut item, or one built to break us
            return items
        items.append(item)


def _facts_from_json(document: dict[str, Any], source: str) -> RunFacts:
    config = document.get("config") or {}
    argv = [str(arg) for arg in document.get("args") or []]
    env = dict(entry.split("=", 1) for entry in document.get("env") or [] if "=" in entry)
    ranks_per_process = int(config.get("nthreads", 1)) * int(config.get("ngpus", 1))
    facts = RunFacts(
        source=source,
        program=argv[0] if argv else None,
        command=" ".join(argv) or None,
        devices=[
            device for entry in config.get("devices") or [] for device in _devices_from_json(entry, ranks_per_process)
        ],
        ranks_per_process=ranks_per_process,
        warmup=int(config.get("warmup_iters", 0)),
        ops_per_iteration=max(int(config.get("aggregated_iterations", 1)), 1) * max(int(config.get("graph", 0)), 1),
        iters=config.get("iterations"),
        args={"argv": argv, "config": {key: value for key, value in config.items() if key != "devices"}},
        env={key: value for key, value in env.items() if key.startswith(_KEPT_ENV_PREFIXES)},
        created=_iso_time(document.get("start_time")),
        finished=_iso_time(document.get("end_time")),
        # written after the last result, so a report cut short lacks it
        complete="average_bus_bandwidth" in document,
    )
    if document.get("nccl_version"):
        facts.versions["nccl"] = nccl_version_from_code(int(document["nccl_version"]))
    facts.versions["nccl-tests-json-format"] = document.get("version")
    if "average_bus_bandwidth" in document:
        facts.args["avg_busbw_gbps"] = float(document["average_bus_bandwidth"].get("bandwidth"))
    if "out_of_bounds" in document:
        facts.args["out_of_bounds"] = int(document["out_of_bounds"].get("count", 0))
    for split in ("NCCL_TESTS_SPLIT", "NCCL_TESTS_SPLIT_MASK"):
        if split in env:
            facts.args["split"] = f"{split}={env[split]}"
    facts.warnings.extend(f"{source}: nccl-tests reported: {error}" for error in document.get("errors") or [])
    for entry in document["results"]:
        facts.measurements.extend(_measurements_from_json(entry))
    if not facts.complete:
        facts.warnings.append(f"{source}: {INCOMPLETE_REASON}: kept the {len(facts.measurements)} complete results")
    return facts


def _devices_from_json(entry: dict[str, Any], ranks_per_process: int) -> list[Device]:
    """One `devices` entry per process -> that process's ranks.

    nccl-tests fills the entry from the first `#  Rank` line of each process only; the others
    drive the next ranks on the next CUDA devices of the same host, same GPU model assumed,
    bus id unknown.
    """
    first = Device(
        rank=int(entry["rank"]),
        group=int(entry.get("group", 0)),
        host=str(entry.get("hostname", "")),
        device=int(entry.get("device", 0)),
        pci=str(entry.get("device_hex", "")),
        name=str(entry.get("device_info", "")),
    )
    rest = [
        Device(first.rank + offset, first.group, first.host, first.device + offset, "", first.name)
        for offset in range(1, ranks_per_process)
    ]
    return [first] + rest


def _measurements_from_json(entry: dict[str, Any]) -> list[Measurement]:
    measurements = []
    for key, in_place in (("out_of_place", False), ("in_place", True)):
        figures = entry.get(key)
        if not figures:  # null: that placement was not run
            continue
        measurement = Measurement(
            size=int(entry["size"]),
            count=int(entry["count"]),
            dtype=str(entry["type"]),
            redop=str(entry["redop"]),
            root=int(str(entry["root"]).strip()),  # written as the padded table cell, "    -1"
            in_place=in_place,
            time_us=float(figures.get("time", figures.get("cpu_time"))),
            algbw=float(figures["alg_bw"]),
            busbw=float(figures["bus_bw"]),
            wrong=_wrong(figures.get("nwrong")),
            wrong_printed="N/A" if figures.get("nwrong") is None else str(figures.get("nwrong")),
            iters=entry.get("actual_iterations"),
        )
        _add_per_iteration(measurement, entry.get(f"{key}_per_iter") or {})
        measurements.append(measurement)
    return measurements


def _add_per_iteration(measurement: Measurement, per_iteration: dict[str, Any]) -> None:
    """-I statistics: extremes, spread and percentiles of the iterations, and the slowest process."""
    if not per_iteration:
        return
    measurement.time_min = float(per_iteration["min_us"])
    measurement.time_max = float(per_iteration["max_us"])
    measurement.cv = float(per_iteration["cv_pct"]) / 100
    if "p99_us" in per_iteration:
        measurement.time_p99 = float(per_iteration["p99_us"])
    times = [float(value) for value in per_iteration.get("times_us") or []]
    if len(times) >= 2:
        deciles = statistics.quantiles(times, n=10, method="inclusive")
        measurement.time_p10, measurement.time_p90 = deciles[0], deciles[-1]
    per_process = per_iteration.get("per_process_max_times_us") or []
    if len(per_process) > 1:
        means = [statistics.fmean(float(value) for value in times) for times in per_process if times]
        measurement.slowest_process = max(range(len(means)), key=means.__getitem__)
        measurement.process_times = means


def _wrong(value: str | float | None) -> int:
    """nwrong: a count, or null when the check was off -> -1."""
    if value is None or value == "N/A":
        return -1
    count = float(value)
    if not 0 <= count < 2**63:  # also refuses nan and inf
        raise ValueError(f"nwrong {value!r} is not a count")
    return int(count)


def _iso_time(stamp: str | None) -> str | None:
    """nccl-tests writes local time without a zone ('2025-11-03 14:22:05'); keep it, ISO-spelled."""
    return stamp.replace(" ", "T", 1) if stamp else None
