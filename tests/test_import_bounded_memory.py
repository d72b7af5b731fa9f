"""An nccl-tests import holds only its rows' values: memory grows by under ROW_BYTES a table row.

Issue 24: a 10^6-row log took 12 GB (the text, its lines, Measurement objects and 2x10^6 Records
held at once). The figure for 10^6 rows is measured in bench/import_memory.py (bench/RESULTS.md);
this test keeps the cause from coming back at a size that runs in a few seconds: the traced peak
of a whole import (read, infer, write) at two sizes, so the fixed cost cancels and what is left is
what each extra row costs. Holding the log's text costs about 120 bytes a row more, holding rows
as objects of any kind 500 bytes to 9 KB.
"""

from __future__ import annotations

import math
import tracemalloc
from pathlib import Path

from commbench.data.nccl_tests import parse_file, write_run
from commbench.data.nccl_tests_facts import Measurement, Measurements
from commbench.data.safe_read import MAX_LINE_BYTES

FIXTURE = Path(__file__).parent / "fixtures" / "nccl_tests" / "synthetic_all_reduce_perf_h100x8.log"
# the compact columns: two measurements of about 80 bytes a row, plus the arrays' spare room
ROW_BYTES = 250


def _log(path: Path, rows: int) -> Path:
    """The fixture with its table rows repeated to `rows` rows (header and footer kept)."""
    lines = FIXTURE.read_text().splitlines(keepends=True)
    table = [line for line in lines if line.strip()[:1].isdigit()]
    first = lines.index(table[0])
    body = [table[index % len(table)] for index in range(rows)]
    path.write_text("".join(lines[:first] + body + lines[first + len(table) :]))
    return path


def _peak_bytes(log: Path, out: Path) -> int:
    tracemalloc.start()
    try:
        for run in parse_file(log):
            write_run(run, out)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_import_memory_grows_by_the_rows_values_only(tmp_path):
    _peak_bytes(_log(tmp_path / "warm.log", 10), tmp_path / "warm")  # caches and lazy imports: not per row
    small, big = 200, 1000
    peaks = [_peak_bytes(_log(tmp_path / f"{rows}.log", rows), tmp_path / "out") for rows in (small, big)]
    per_row = (peaks[1] - peaks[0]) / (big - small)
    assert per_row < ROW_BYTES, f"{per_row:.0f} bytes a row (peaks {peaks}): the import holds whole rows again"
    written = [len((run / "records.jsonl").read_text().splitlines()) for run in (tmp_path / "out").iterdir()]
    assert sorted(written) == [2 * small, 2 * big]  # both imports whole: every row's two records


def test_a_line_over_the_length_limit_is_skipped_and_named(tmp_path):
    """The log is streamed under safe_read's line limit: a longer line is never held, and the run says so."""
    lines = FIXTURE.read_text().splitlines(keepends=True)
    lines.insert(3, "x" * (MAX_LINE_BYTES + 10) + "\n")
    log = tmp_path / "long.log"
    log.write_text("".join(lines))
    (run,) = parse_file(log)
    assert len(run.records) == 50
    assert "long.log line 4: skipped (longer than 4 MiB)" in run.info.warnings


def test_measurement_columns_give_back_what_was_appended():
    """Measurements keeps every value as it came, those its typed arrays cannot hold included
    (a 20-digit integer, NaN where NaN stands for None, lists), by index and by iteration."""
    kept = [
        Measurement(8, 2, "float", "sum", -1, False, 11.5, 0.0, 0.01, 0, "0", 19),
        Measurement(10**19, 2, "half", "none", -(10**19), True, 1.0, 0.1, 0.2, -1, "N/A", 20, time_min=math.nan),
        Measurement(16, 4, "float", "sum", -1, False, 2.5, 0.1, 0.2, 0, "0", 21, iters=20, time_min=3.0, cv=0.05),
        Measurement(32, 8, "int8", "prod", 0, True, 2.5, 0.1, 0.2, 3, "3", 21, slowest_process=1, process_times=[1.0]),
    ]
    columns = Measurements()
    columns.extend(kept)
    assert [repr(m) for m in columns] == [repr(m) for m in kept] == [repr(columns[i]) for i in range(-4, 0)]
    assert repr(list(columns.column("time_min"))) == "[None, nan, 3.0, None]"
    assert columns.rows == 3 and columns.distinct("dtype") == {"float", "half", "int8"}
