"""Overlap: compute and communication streams per rank from analysed traces and `commbench overlap` runs."""

import dash
import pandas as pd
from dash import Input, Output, State, callback, dcc, html

from commbench.units import format_size
from dashboard.app import SELECTION_STORE, results
from dashboard.figures.overlap import (
    collective_rows,
    iteration_figure,
    iteration_windows,
    measured_pair_bars,
    measurement_figure,
    rank_rows,
    select_bars,
    timeline_figure,
)
from dashboard.ui import columns_of, data_table, notices, run_options

dash.register_page(__name__, path="/overlap", name="Overlap", order=3, title="commbench · overlap")

SOURCE_KINDS = ("trace", "overlap")
WHOLE_TRACE = "all"


def layout(**_query):
    entries = results().usable(SOURCE_KINDS)
    return html.Div(
        [
            html.H2("Overlap"),
            html.P(
                "How much communication hides behind compute. For a trace: every rank's streams or threads on one "
                "microsecond axis, overlap % (time both run / communication time) and exposed communication per "
                "iteration. For a `commbench overlap` run: a GEMM and a collective alone and together.",
                className="lead",
            ),
            dcc.Store(id="ov-start"),
            html.Div(
                [
                    html.Div(
                        [
                            html.Label("trace or overlap run", className="title"),
                            dcc.Dropdown(id="ov-source", options=run_options(entries), clearable=False),
                        ],
                        className="control wide",
                    ),
                    html.Div(
                        [html.Label("ranks", className="title"), dcc.Checklist(id="ov-ranks", inline=True)],
                        className="control",
                    ),
                    html.Div(
                        [html.Label("window", className="title"), dcc.Dropdown(id="ov-window", clearable=False)],
                        className="control",
                    ),
                ],
                className="controls",
            ),
            html.Div(id="ov-notices"),
            dcc.Graph(id="ov-timeline"),
            dcc.Graph(id="ov-figures"),
            html.H4("Per rank"),
            data_table("ov-table"),
            html.H4("Busiest collectives"),
            data_table("ov-collectives"),
        ]
    )


@callback(
    Output("ov-source", "value"),
    Input("ov-start", "data"),
    State(SELECTION_STORE, "data"),
    State("ov-source", "options"),
)
def start_from_selection(_start, selected, options):
    values = [option["value"] for option in options]
    chosen = [key for key in selected or [] if key in values]
    return (chosen or values or [None])[0]


@callback(
    Output("ov-ranks", "options"),
    Output("ov-ranks", "value"),
    Output("ov-window", "options"),
    Output("ov-window", "value"),
    Input("ov-source", "value"),
)
def offer_ranks_and_windows(source):
    entry = _entry(source)
    if entry is None:
        return [], [], [], None
    if entry.trace is not None:
        ranks = [rank["rank"] for rank in entry.trace["ranks"]]
        windows = [{"label": "whole trace", "value": WHOLE_TRACE}] + [
            {"label": f"iteration {step}", "value": str(step)} for step, _, _ in iteration_windows(entry.trace)
        ]
        return [{"label": f" {r}", "value": r} for r in ranks], ranks, windows, WHOLE_TRACE
    rows = _overlap_rows(entry)
    windows = [{"label": f"{r['op']} {format_size(r['size_bytes'])}", "value": str(i)} for i, r in enumerate(rows)]
    return [], [], windows, (windows[-1]["value"] if windows else None)


@callback(
    Output("ov-timeline", "figure"),
    Output("ov-figures", "figure"),
    Output("ov-table", "columns"),
    Output("ov-table", "data"),
    Output("ov-collectives", "columns"),
    Output("ov-collectives", "data"),
    Output("ov-notices", "children"),
    Input("ov-source", "value"),
    Input("ov-ranks", "value"),
    Input("ov-window", "value"),
)
def draw(source, ranks, window):
    entry = _entry(source)
    if entry is None:
        empty = timeline_figure([])
        message = "No trace analyses or overlap runs yet: see `commbench trace` and `commbench overlap`."
        return empty, empty, [], [], [], [], notices([message], "info")
    if entry.error:
        empty = timeline_figure([])
        return empty, empty, [], [], [], [], notices(entry.messages(), "error")
    if entry.trace is not None:
        return _draw_trace(entry, ranks, window)
    return _draw_measurement(entry, window)


def _draw_trace(entry, ranks, window):
    analysis = entry.trace
    span = next(((start, end) for step, start, end in iteration_windows(analysis) if str(step) == window), None)
    bars, note = select_bars(analysis["timeline"], ranks, span)
    messages = [m for m in (note, analysis.get("timeline_note")) if m] + list(analysis.get("warnings") or [])
    ranks_table, collectives = rank_rows(analysis), collective_rows(analysis)
    return (
        timeline_figure(bars, span),
        iteration_figure(analysis),
        columns_of(ranks_table),
        ranks_table,
        columns_of(collectives),
        collectives,
        notices(messages, "info"),
    )


def _draw_measurement(entry, window):
    rows = _overlap_rows(entry)
    if not rows:
        empty = timeline_figure([])
        return empty, measurement_figure(pd.DataFrame()), [], [], [], [], notices(["This run has no overlap records."])
    chosen = rows[int(window)] if window and window.isdigit() and int(window) < len(rows) else rows[-1]
    frame = pd.DataFrame(rows)
    columns = [
        "op",
        "size_bytes",
        "gemm_size",
        "compute_us",
        "comm_us",
        "both_us",
        "overlap",
        "compute_slowdown",
        "comm_slowdown",
        "wrong",
    ]
    table = frame[[c for c in columns if c in frame]].round(4).to_dict("records")
    pair_timeline = timeline_figure(measured_pair_bars(chosen))
    pair_timeline.update_layout(
        title=f"{chosen['op']} {format_size(chosen['size_bytes'])} beside a "
        f"{chosen['gemm_size']}^3 GEMM, started together at 0"
    )
    return (pair_timeline, measurement_figure(frame), columns_of(table), table, [], [], notices(entry.messages()))


def _entry(key):
    entries = results().entries_for([key] if key else [])
    return entries[0] if entries else None


def _overlap_rows(entry) -> list[dict]:
    """Records that carry the overlap fields, out-of-place first (as the command prints them)."""
    needed = {"compute_us", "comm_us", "both_us", "compute_during_comm_us", "comm_during_compute_us", "overlap"}
    rows = [r for r in entry.run.records if needed <= r.keys()] if entry.run else []
    return sorted(rows, key=lambda r: (r["op"], r["in_place"], r["size_bytes"]))
