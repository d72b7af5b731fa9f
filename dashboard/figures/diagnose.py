"""A diagnosis (commbench.diagnose.report.to_dict) drawn: nodes coloured by verdict, each round's groups,
and the straggler screen.

Input is the stored report of a `commbench diagnose` run. The node map lays nodes out in rows of
`per_row` (node order, which follows the leaf switches); the rounds chart has one row per round and
one column per node, each cell the outcome of the group that node was in (blank: not tested). The
straggler chart has one bar per node the screen flagged, against the straggler threshold: the report
keeps the flagged nodes' ratios only, so the other nodes are counted, not drawn.
"""

from __future__ import annotations

import math
import textwrap

import plotly.graph_objects as go

from commbench.diagnose.report import evidence_line, measured, straggler_lines
from commbench.diagnose.stragglers import STRAGGLER_RATIO
from commbench.diagnose.strategy import OUTCOMES
from dashboard.figures.common import message_figure

VERDICT_COLOURS = {
    "good": "#2ca02c",
    "slow": "#d62728",
    "lossy": "#ff7f0e",
    "slow, lossy": "#8c564b",
    "no answer": "#000000",
    "link end": "#9467bd",
}
OUTCOME_COLOURS = ("#2ca02c", "#ffbf00", "#d62728", "#000000")
# The screen's two findings: a node slow itself, and a node the others waited for (it arrived late).
STRAGGLER_KINDS = {
    "slow": ("slow itself (its time longer)", "#d62728", "its time {ratio:.2f}x the median node's"),
    "waited_for": (
        "made the others wait (its time shorter: it arrived late)",
        "#9467bd",
        "its time {ratio:.2f}x shorter than the median node's",
    ),
}
# A source line longer than this wraps in a figure's title (a run's command can be long).
SOURCE_LINE_CHARS = 140
# Beyond this many nodes the rounds chart keeps the nodes that were ever in a group that did not pass.
MAX_ROUND_COLUMNS = 256


def node_verdicts(report: dict) -> dict[str, str]:
    """Every node's verdict: its drain reasons, "link end" for an end of a bad link, else "good"."""
    names = [n for r in report["round_log"][:1] for g in r["groups"] for n in g]
    verdicts = {name: "good" for name in names}
    for link in report["links"]:
        for name in link["link"]:
            verdicts[name] = "link end"
    for item in report["drain"]:
        verdicts[item["node"]] = ", ".join(item["reasons"])
    return verdicts


def node_map(report: dict, per_row: int = 32) -> go.Figure:
    verdicts = node_verdicts(report)
    if not verdicts:
        return message_figure("this diagnosis has no rounds")
    figure = go.Figure()
    names = list(verdicts)
    for verdict, colour in VERDICT_COLOURS.items():
        index = [i for i, name in enumerate(names) if verdicts[name] == verdict]
        if index:
            figure.add_trace(
                go.Scatter(
                    x=[i % per_row for i in index],
                    y=[i // per_row for i in index],
                    mode="markers",
                    name=verdict,
                    text=[names[i] for i in index],
                    hovertemplate="%{text}: " + verdict + "<extra></extra>",
                    marker={"symbol": "square", "size": 14 if len(names) <= 512 else 6, "color": colour},
                )
            )
    figure.update_layout(
        title=_sourced_title(f"{len(names)} nodes by verdict", report),
        template="plotly_white",
        xaxis={"visible": False},
        yaxis={"visible": False, "autorange": "reversed"},
        margin={"t": 110},
        height=min(900, 220 + 18 * (len(names) // per_row + 1)),
    )
    return figure


def rounds_chart(report: dict) -> go.Figure:
    rounds = report["round_log"]
    if not rounds:
        return message_figure("this diagnosis has no rounds")
    cells = [
        {
            name: (outcome, group, bw)
            for group, outcome, bw in zip(r["groups"], r["outcomes"], r["busbw_gbps"])
            for name in group
        }
        for r in rounds
    ]
    columns = every_node = [n for g in rounds[0]["groups"] for n in g]
    if len(columns) > MAX_ROUND_COLUMNS:
        columns = [n for n in columns if any(n in c and c[n][0] != "pass" for c in cells)] or columns[
            :MAX_ROUND_COLUMNS
        ]
    z = [[OUTCOMES.index(c[n][0]) if n in c else None for n in columns] for c in cells]
    hover = [
        [
            (
                f"{n}: {c[n][0]}, group {'+'.join(c[n][1])}, "
                + (f"{c[n][2]:.4g} GB/s" if measured(c[n][2]) else "no result")
                if n in c
                else f"{n}: not tested"
            )
            for n in columns
        ]
        for c in cells
    ]
    labels = [f"{i + 1}. {r['step']}" for i, r in enumerate(rounds)]
    step = 1 / len(OUTCOMES)  # one flat band of colour per outcome
    scale = [
        point for i, colour in enumerate(OUTCOME_COLOURS) for point in ([i * step, colour], [(i + 1) * step, colour])
    ]
    figure = go.Figure(
        go.Heatmap(
            z=z,
            x=columns,
            y=labels,
            text=hover,
            hoverinfo="text",
            zmin=-0.5,
            zmax=3.5,
            colorscale=scale,
            xgap=1,
            ygap=1,
            colorbar={"tickvals": [0, 1, 2, 3], "ticktext": list(OUTCOMES)},
        )
    )
    shown = "every node" if columns is every_node else "the nodes ever in a group that did not pass"
    # at least the height the colour bar's four outcomes need to be read
    figure.update_layout(
        title=_sourced_title(f"each round's groups and outcomes ({shown})", report),
        template="plotly_white",
        yaxis={"autorange": "reversed"},
        margin={"t": 110},
        height=max(340, 200 + 28 * len(rounds)),
    )
    return figure


def verdict_rows(report: dict) -> list[dict]:
    """The drain list and the links, one row each, with the deciding evidence."""
    rows = [
        {
            "what": "drain",
            "node or link": d["node"],
            "reasons": ", ".join(d["reasons"]),
            "evidence": evidence_line(d["evidence"][-1]),
        }
        for d in report["drain"]
    ]
    rows += [
        {
            "what": "inspect link",
            "node or link": " <-> ".join(link["link"]),
            "reasons": ", ".join(link["reasons"]),
            "evidence": evidence_line(link["evidence"][-1]),
        }
        for link in report["links"]
    ]
    return rows


def straggler_verdict(report: dict) -> str:
    """The straggler screen in words: the text report's line, or why this report has no screen."""
    if "stragglers" not in report:
        if report["source"].startswith("synthetic"):
            return "no straggler screen: the cluster model (--simulate/--hosts) does not run one"
        return "no straggler screen: this report was written before commbench diagnose had one"
    if report["stragglers"] is None:
        return "no straggler screen: it was skipped (--no-straggler-screen)"
    return straggler_lines(report["stragglers"])[0]


def straggler_chart(report: dict) -> go.Figure:
    """One bar per flagged node (its median ratio to the median node's time), coloured by finding,
    with the threshold as a line; a message when the report holds no screen or the screen found none."""
    screen = report.get("stragglers")
    if screen is None or "note" in screen:
        return message_figure(straggler_verdict(report), title=_sourced_title("straggler screen", report))
    flagged = [(kind, item) for kind in STRAGGLER_KINDS for item in screen[kind]]
    threshold = screen_threshold(screen)
    if not flagged:
        return message_figure(
            f"no node at {threshold:g}x the median node's time or more in most of "
            f"{screen['iterations']} iterations: no straggler",
            title=_sourced_title("straggler screen", report),
        )
    figure = go.Figure([_straggler_bars(kind, screen[kind], threshold) for kind in STRAGGLER_KINDS if screen[kind]])
    # a shape's label, not an annotation: on a log axis annotations take log10 positions, shapes data values
    figure.add_hline(
        y=threshold,
        line={"color": "#000000", "dash": "dash"},
        label={
            "text": f"straggler threshold {threshold:g}x"
            + ("" if "ratio" in screen else " (not stored in this report: today's)"),
            "textposition": "start",
            "yanchor": "bottom",
        },
    )
    named = len({item["node"] for _, item in flagged})
    top = max(item["ratio"] for _, item in flagged) * 1.5
    figure.update_layout(
        title=_sourced_title(
            f"straggler screen: {named} of {report['nodes']} nodes flagged",
            report,
            f"one ring over every node, {screen['size']} B x {screen['iterations']} iterations; the "
            f"other {report['nodes'] - named} nodes stayed under the threshold (their ratios are "
            "not stored)",
        ),
        template="plotly_white",
        showlegend=True,
        bargap=0.5,
        height=450,
        margin={"t": 150},
        xaxis={"title": "node", "type": "category"},
        # log from 1 (the median node): a node 30x late and the 1.2x threshold both stay readable
        yaxis={
            "title": "ratio to the median node's time",
            "type": "log",
            "range": [0, math.log10(top)],
            "tickvals": [m * 10**e for e in range(math.ceil(math.log10(top))) for m in (1, 2, 5)],
        },
    )
    return figure


def screen_threshold(screen: dict) -> float:
    """The ratio the screen flagged at: stored in the report since stop 22; older reports were all
    screened at STRAGGLER_RATIO, which has not changed since the screen was written."""
    return screen.get("ratio", STRAGGLER_RATIO)


def _straggler_bars(kind: str, items: list[dict], threshold: float) -> go.Bar:
    name, colour, ratio_words = STRAGGLER_KINDS[kind]
    return go.Bar(
        x=[s["node"] for s in items],
        y=[s["ratio"] for s in items],
        name=name,
        marker={"color": colour},
        hovertext=[
            f"{s['node']}, {name}: {ratio_words.format(ratio=s['ratio'])} (median over iterations), "
            f"at or over {threshold:g}x in {s['iterations_slow']} of {s['iterations']} "
            "iterations"
            for s in items
        ],
        hoverinfo="text",
    )


def _sourced_title(what: str, report: dict, *details: str) -> str:
    """`what`, then the report's source (host, date, command), wrapped to fit, and any details."""
    lines = textwrap.wrap(report["source"], SOURCE_LINE_CHARS) + list(details)
    return f"{what}<br><sup>" + "<br>".join(lines) + "</sup>"
