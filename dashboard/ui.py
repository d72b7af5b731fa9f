"""Small layout pieces the pages share: notices, run options, tables."""

from __future__ import annotations

from dash import dash_table, html

from dashboard.data import RunEntry

# the style of a figure hidden because there is nothing to draw: an empty state is one sentence, not a blank frame
HIDDEN = {"display": "none"}
SHOWN: dict = {}


def empty_state(text: str, element_id: str) -> html.P:
    """The one sentence a page shows where it has nothing to draw."""
    return html.P(text, id=element_id, className="empty-state")


def notices(messages: list[str], kind: str = "warning") -> html.Div:
    """A box listing messages (kind "error" or "warning"); nothing when there are none."""
    if not messages:
        return html.Div()
    return html.Div([html.Div(message) for message in messages], className=f"notice {kind}")


def page_heading(title: str, lead: str) -> list:
    """A page's title and the paragraph that says what it shows."""
    return [html.H2(title), html.P(lead, className="lead")]


def synthetic_notices(entries: list[RunEntry]) -> html.Div:
    """A warning per synthetic run among entries, with its note: these figures were never measured."""
    return notices(
        [
            f"{e.key} is SYNTHETIC, not a measurement: {e.info.get('note') or 'no note given'}"
            for e in entries
            if e.synthetic
        ],
        "warning",
    )


def control(title: str, component, wide: bool = False) -> html.Div:
    """A labelled input in the controls row."""
    return html.Div([html.Label(title, className="title"), component], className="control wide" if wide else "control")


def run_options(entries: list[RunEntry]) -> list[dict]:
    return [
        {"label": f"{e.label} ({e.kind}, {e.info.get('backend')}, {e.info.get('world_size')} ranks)", "value": e.key}
        for e in entries
    ]


def data_table(table_id: str, **options):
    """A sortable, filterable table styled like the rest of the app; options override the defaults."""
    settings = {
        "columns": [],
        "data": [],
        "sort_action": "native",
        "filter_action": "native",
        "page_size": 15,
        "style_table": {"overflowX": "auto"},
        "style_cell": {
            "fontFamily": "inherit",
            "fontSize": "13px",
            "padding": "4px 8px",
            "textAlign": "left",
            "maxWidth": "420px",
            "whiteSpace": "normal",
        },
        "style_header": {"fontWeight": "bold", "backgroundColor": "#f3f3f3"},
    }
    return dash_table.DataTable(id=table_id, **{**settings, **options})


def columns_of(rows: list[dict]) -> list[dict]:
    return [{"name": key.replace("_", " "), "id": key} for key in (rows[0] if rows else {})]
