"""A Diagnosis as the user reads it: a JSON-ready dict with node names, the text report, and the run
directory (run.json + diagnose.json) the dashboard reads."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from commbench.data.rundir import load_document, new_run_id, save_document_run, utc_now
from commbench.data.schema import RunInfo
from commbench.diagnose.hostlist import compress
from commbench.diagnose.strategy import Diagnosis

DIAGNOSE_FILE = "diagnose.json"


def to_dict(result: Diagnosis, names: list[str], source: str) -> dict[str, Any]:
    """Everything the report shows, by node name; `source` says where the measurements came from."""
    drained = sorted(result.drained())
    ref = result.reference
    return {
        "source": source,
        "nodes": len(names),
        "drain": [
            {"node": names[n], "reasons": v.reasons, "evidence": [_named(e, names) for e in v.evidence]}
            for n, v in sorted(result.bad_nodes.items())
        ]
        + [
            {"node": names[n], "reasons": ["no answer"], "evidence": [{"note": why}]}
            for n, why in sorted(result.hung.items())
        ],
        "links": [
            {"link": [names[a], names[b]], "reasons": v.reasons, "evidence": [_named(e, names) for e in v.evidence]}
            for (a, b), v in sorted(result.bad_links.items())
        ],
        "rounds": len(result.rounds),
        "group_tests": result.group_tests,
        "reference": None
        if ref is None
        else {"busbw_gbps": ref.busbw, "sigma": ref.sigma, "retransmit_pct": ref.retransmit_pct},
        "exclude": compress([names[n] for n in drained]),
        "good": compress([names[n] for n in result.good_nodes()]),
        "round_log": [
            {
                "step": r.step,
                "groups": [[names[n] for n in g] for g in r.groups],
                "busbw_gbps": r.busbw,
                "retransmit_pct": r.retransmit_pct,
                "outcomes": r.outcomes,
                "hung": [names[n] for n in r.hung],
            }
            for r in result.rounds
        ],
    }


def json_ready(value: Any) -> Any:
    """The report with every NaN (a hung group's bandwidth, retransmissions not measured) as None: JSON has
    no NaN, and `jq` or a browser refuses the token Python would write."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(item) for item in value]
    return value


def measured(value: Any) -> bool:
    """A figure that was measured: not None (JSON) and not NaN (in memory)."""
    return value is not None and value == value


def _named(evidence: dict[str, Any], names: list[str]) -> dict[str, Any]:
    return {**evidence, "group": [names[n] for n in evidence.get("group", [])]}


def evidence_line(e: dict[str, Any]) -> str:
    """One piece of evidence in words: the last one of a verdict is the decisive one."""
    if "busbw_gbps" not in e:
        return str(e.get("note", ""))
    loss = e.get("retransmit_pct")
    result = (
        f"{e['busbw_gbps']:.4g} GB/s = {e['of_median']:.0%} of the fleet median"
        if measured(e["busbw_gbps"])
        else f"no result ({e.get('outcome', 'hung')})"
    )
    return (
        f"round {e['round']}: {'+'.join(e['group'])} {result}"
        + (f", {loss:.2f}% re-sent" if measured(loss) else "")
        + (f" ({e['note']})" if e.get("note") else "")
    )


def text(report: dict[str, Any]) -> str:
    lines = [
        f"# diagnose: {report['nodes']} nodes, {report['rounds']} concurrent rounds, "
        f"{report['group_tests']} group tests ({report['source']})"
    ]
    ref = report["reference"]
    if ref:
        loss = ref["retransmit_pct"]
        lines.append(
            f"# fleet reference: median ring bandwidth {ref['busbw_gbps']:.4g} GB/s, robust sigma "
            f"{ref['sigma']:.3f} (log), median retransmissions "
            + (f"{loss:.3f}%" if measured(loss) else "not measured")
        )
    lines.append("nodes to drain:" if report["drain"] else "nodes to drain: none")
    for item in report["drain"]:
        lines.append(f"  {item['node']:<16} {', '.join(item['reasons']):<12} {evidence_line(item['evidence'][-1])}")
    lines.append("links to inspect:" if report["links"] else "links to inspect: none")
    for item in report["links"]:
        lines.append(
            f"  {' <-> '.join(item['link']):<24} {', '.join(item['reasons']):<12} {evidence_line(item['evidence'][-1])}"
        )
    lines += straggler_lines(report.get("stragglers"))
    lines.append(f"exclude (sbatch --exclude): {report['exclude'] or '(none)'}")
    lines.append(f"good nodes: {report['good'] or '(none)'}")
    if report.get("wall_s") is not None:
        lines.append(f"# wall time of the diagnosis: {report['wall_s']:.1f} s")
    lines.append(f"# exclude: {report['exclude']}")  # the one line `commbench submit --diagnose` reads
    return "\n".join(lines)


def straggler_lines(screen: dict[str, Any] | None) -> list[str]:
    """The screen's ring over every node (real mode): who was slow itself, who the others waited for.
    Reported, not drained: the group tests decide."""
    if screen is None:
        return []
    if "note" in screen:
        return [f"stragglers (screen ring): {screen['note']}"]
    found = [
        f"{s['node']} slow itself ({s['ratio']:.2f}x the median node's time in {s['iterations_slow']} of "
        f"{s['iterations']} iterations)"
        for s in screen["slow"]
    ]
    found += [
        f"{s['node']} made the others wait (its time {s['ratio']:.2f}x shorter than the median node's in "
        f"{s['iterations_slow']} of {s['iterations']} iterations: it arrived late)"
        for s in screen["waited_for"]
    ]
    return [
        f"stragglers (screen ring over every node, {screen['size']} B x {screen['iterations']} iterations): "
        + ("; ".join(found) if found else "none")
    ]


def summary_lines(run_dir: Path, report: dict[str, Any]) -> list[str]:
    """Nodes to drain and why, links to inspect, rounds, the scheduler actions taken (diagnose --drain,
    --resume, --slurm-plan) and the exclude list in hostlist syntax: what `submit --diagnose --wait`
    prints when the job ends."""

    def reasons(item: dict[str, Any]) -> str:
        return ", ".join(item.get("reasons", [])) or "?"

    drain = [f"{item['node']} ({reasons(item)})" for item in report["drain"]]
    links = [f"{' <-> '.join(item['link'])} ({reasons(item)})" for item in report["links"]]
    return [
        f"diagnosis: {run_dir}",
        f"{report['nodes']} nodes, {report['rounds']} concurrent rounds, {report['group_tests']} group tests "
        f"({report['source']})",
        f"nodes to drain: {'; '.join(drain) or 'none'}",
        f"links to inspect: {'; '.join(links) or 'none'}",
        f"good nodes: {report['good'] or '(none)'}",
        *(
            f"actions: {row.get('verb', '?')} {row.get('node', '?')} {row['result']}"
            for row in report.get("actions") or []
        ),
        f"# exclude: {report['exclude']}",
    ]


def save_run(
    report: dict[str, Any],
    out_dir: str | Path,
    args: dict[str, Any],
    synthetic: bool,
    note: str,
    backend: str = "model",
    run_id: str | None = None,
) -> Path:
    """A run directory of kind "diagnose": run.json and the whole report in diagnose.json. `backend`:
    "model" for the cluster model, else the one that measured; `run_id` when the caller named the run
    already (scheduler actions cite it as their evidence)."""
    info = RunInfo(
        run_id=run_id or new_run_id("diagnose-"),
        kind="diagnose",
        source="commbench",
        created=utc_now(),
        backend=backend,
        world_size=report["nodes"],
        args=args,
        synthetic=synthetic,
        note=note,
    )
    return save_document_run(out_dir, info, DIAGNOSE_FILE, json_ready(report))


def load_report(run_dir: str | Path) -> dict[str, Any]:
    """The report stored in a diagnose run directory; CommbenchError if it is missing or not one."""
    return load_document(run_dir, DIAGNOSE_FILE, "a diagnosis", "round_log")
