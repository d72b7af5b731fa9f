"""The Dash application: eight pages over one results folder (History reads its results database), with a
shared run selection."""

from __future__ import annotations

from pathlib import Path

import dash
from dash import dcc, html
from flask import current_app

from dashboard.data import ResultsStore
from dashboard.planning import PlanCache

PAGES_FOLDER = Path(__file__).resolve().parent / "pages"
# The run keys picked on the Runs page, kept per browser tab for the other pages.
SELECTION_STORE = "selected-runs"
_STORE_KEY = "COMMBENCH_RESULTS"
_PLAN_CACHE_KEY = "COMMBENCH_PLAN_CACHE"


def create_app(results_dir: str | Path, models_dir: str | Path | None = None) -> dash.Dash:
    """A multi-page app reading the runs under results_dir (which must exist); the planner offers the
    model presets and the configs inside results_dir and models_dir, never a path the browser names."""
    _forget_registered_pages()
    app = dash.Dash(
        __name__,
        use_pages=True,
        pages_folder=str(PAGES_FOLDER),
        title="commbench",
        suppress_callback_exceptions=True,
    )
    app.server.config[_STORE_KEY] = ResultsStore(results_dir, models_dir)
    app.server.config[_PLAN_CACHE_KEY] = PlanCache()
    app.layout = html.Div(
        [
            dcc.Store(id=SELECTION_STORE, storage_type="session"),
            html.Nav(
                [html.Span("commbench", className="brand")]
                + [
                    dcc.Link(page["name"], href=page["relative_path"], id=f"nav-{page['name'].lower()}")
                    for page in sorted(dash.page_registry.values(), key=lambda p: p["order"])
                ],
                className="nav",
            ),
            html.Main(dash.page_container),
        ]
    )
    return app


def results() -> ResultsStore:
    """The store of the app serving the current request (pages call it in layouts and callbacks)."""
    return current_app.config[_STORE_KEY]


def plan_cache() -> PlanCache:
    """The planner page's cache of plans for the app serving the current request."""
    return current_app.config[_PLAN_CACHE_KEY]


def _forget_registered_pages() -> None:
    """Empty Dash's page registry and its queue of page callbacks before the pages register again.

    Both are module globals in Dash: an app built earlier in the same process (tests build
    several) would otherwise leave its pages and callbacks behind, and the new app would
    serve duplicate callbacks.
    """
    dash.page_registry.clear()
    dash._callback.GLOBAL_CALLBACK_LIST.clear()
    dash._callback.GLOBAL_CALLBACK_MAP.clear()
