"""commbench's web dashboard: a multi-page Dash app over a results folder.

`create_app(results_dir)` (dashboard.app) builds it; `commbench dashboard` serves it. Pages live
in dashboard/pages (thin: layout and callbacks), figures in dashboard/figures (plain functions
from run data to plotly figures), run loading and caching in dashboard/data.py.
"""
