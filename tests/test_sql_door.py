"""`commbench db sql` is a read-only door: one SELECT over the database and nothing else (issue 24).

Before this door, EXPLAIN ANALYZE COPY ... TO wrote a file, SELECT read_text() read any file and
read_csv('http://...') tried to install an extension."""

from __future__ import annotations

from pathlib import Path

import pytest

from commbench.cli import main as cli_main
from commbench.data import store

EXAMPLES = Path(__file__).parent.parent / "results" / "examples"


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sqldoor") / "r.duckdb"
    store.ingest(path, [EXAMPLES / "example-cpu-2rank"])
    return path


@pytest.mark.parametrize(
    "statement",
    [
        "EXPLAIN ANALYZE COPY (SELECT 'touch /tmp/pwned') TO '{out}' (HEADER false)",
        "EXPLAIN SELECT 1",
        "SELECT read_text('/etc/passwd')",
        "SELECT * FROM read_text('/etc/passwd')",
        "SELECT content FROM read_blob('/proc/self/environ')",
        "SELECT * FROM glob('/root/.*')",
        "SELECT * FROM read_csv('http://127.0.0.1:1/x')",
        "SELECT * FROM sqlite_scan('/tmp/x.db', 't')",
        "SELECT * FROM '/etc/passwd'",
        "WITH x AS (SELECT * FROM read_json('/etc/hosts')) SELECT * FROM x",
        "SELECT * FROM runs WHERE run_id IN (SELECT filename FROM read_text('/etc/passwd'))",
        "ATTACH '{out}' AS other",
        "INSTALL httpfs",
        "LOAD httpfs",
        "PRAGMA enable_profiling",
        "SET enable_external_access = true",
        "CALL pragma_version()",
        "SELECT 1; SELECT 2",
        "SELECT 1; COPY runs TO '{out}'",
    ],
)
def test_db_sql_refuses_what_is_not_one_plain_select(db, tmp_path, capsys, statement):
    out = tmp_path / "written"
    assert cli_main(["db", "sql", statement.format(out=out), "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error:" in err[0], err
    assert "root:" not in err[0]  # nothing of /etc/passwd comes back
    assert not out.exists()


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT count(*) AS n FROM records",
        "WITH r AS (SELECT op, busbw_gbps FROM records) SELECT op, max(busbw_gbps) FROM r GROUP BY op",
        "SELECT * FROM range(3)",
        "SELECT table_name FROM duckdb_tables()",
    ],
)
def test_plain_selects_over_the_tables_still_work(db, capsys, statement):
    assert cli_main(["db", "sql", statement, "--db", str(db)]) == 0
    assert "row(s)" in capsys.readouterr().out


def test_the_reading_connection_cannot_reach_files_even_past_the_parser(db):
    """Defence in depth: the connection the dashboard and db sql share has external access off, locked."""
    con = store.open_read_only(db)
    try:
        assert con.execute("SELECT current_setting('enable_external_access')").fetchone() == (False,)
        with pytest.raises(Exception, match=r"disabled by configuration|Permission"):
            con.execute("SELECT * FROM read_text('/etc/passwd')").fetchall()
        with pytest.raises(Exception, match="locked"):
            con.execute("SET enable_external_access = true")
    finally:
        con.close()
