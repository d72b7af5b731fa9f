"""Where the results database lives: --db FILE, else $COMMBENCH_DB, else results/commbench.duckdb.

Kept apart from the store so commands can name the file without importing DuckDB.
"""

from __future__ import annotations

import os
from pathlib import Path

DB_ENV = "COMMBENCH_DB"
DEFAULT_DB = "results/commbench.duckdb"


def db_path(explicit: str | None = None) -> Path:
    return Path(explicit or os.environ.get(DB_ENV) or DEFAULT_DB)
