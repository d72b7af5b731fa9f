"""Compare: two runs row by row, with 95% intervals and verdicts (commbench compare's statistics)."""

import dash
from dash import Input, Output, callback, dcc, html

from dashboard.app import results
from dashboard.figures.history import compare_figure, compare_rows
from dashboard.fleet import comparable_pair, comparison
from dashboard.ui import columns_of, control, data_table, notices, page_heading, run_options

dash.register_page(__name__, path="/compare", name="Compare", order=6, title="commbench · compare")

KINDS = ("sweep", "import")


def layout(a: str | None = None, b: str | None = None, **_query):
    entries = results().usable(KINDS)
    keys = [entry.key for entry in entries]
    first, second = comparable_pair(entries) or (None, None)  # the newest pair sharing rows: B the newer
    return html.Div(
        page_heading(
            "Compare",
            "Run B against run A, per row: the change in busbw with a 95% bootstrap "
            "interval from the per-iteration samples, and a verdict that needs both "
            "significance (Benjamini-Hochberg q < 0.05) and a material change (over 5%). "
            "Red: slower, green: faster, grey: no significant change (light: no samples).",
        )
        + [
            html.Div(
                [
                    control(
                        "run A (reference)",
                        dcc.Dropdown(id="cmp-a", options=run_options(entries), value=a if a in keys else first),
                        wide=True,
                    ),
                    control(
                        "run B",
                        dcc.Dropdown(id="cmp-b", options=run_options(entries), value=b if b in keys else second),
                        wide=True,
                    ),
                ],
                className="controls",
            ),
            html.Div(id="cmp-differences"),
            dcc.Graph(id="cmp-figure"),
            data_table(
                "cmp-table",
                style_data_conditional=[
                    {"if": {"filter_query": '{verdict} = "slower"'}, "backgroundColor": "#fde0dd"},
                    {"if": {"filter_query": '{verdict} = "faster"'}, "backgroundColor": "#e5f5e0"},
                ],
            ),
        ]
    )


@callback(
    Output("cmp-figure", "figure"),
    Output("cmp-table", "data"),
    Output("cmp-table", "columns"),
    Output("cmp-differences", "children"),
    Input("cmp-a", "value"),
    Input("cmp-b", "value"),
)
def draw_comparison(key_a, key_b):
    if not key_a or not key_b:
        return compare_figure({"rows": []}), [], [], notices(["pick two runs"])
    result = comparison(results().entry(key_a).path, results().entry(key_b).path)
    rows = compare_rows(result)
    if not rows:
        return (
            compare_figure(result),
            [],
            [],
            html.P(
                f"{key_b} and {key_a} share no row (op, scope, group size, size and dtype): pick two runs of the "
                "same sweep.",
                id="cmp-summary",
            ),
        )
    flagged = sum(row["verdict"] in ("slower", "faster") for row in rows)
    summary = html.P(
        [
            html.B("what differs: "),
            "; ".join(result["differences"]) or "nothing recorded in run.json",
            html.Br(),
            f"{flagged} of {len(rows)} rows changed significantly and materially",
        ],
        id="cmp-summary",
    )
    return compare_figure(result), rows, columns_of(rows), summary
