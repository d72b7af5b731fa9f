"""Property: however a real nccl-tests log is reflowed, prefixed, reordered or cut, no value is
ever written into the wrong field; a row whose cells are shifted is reported or the run refused.

Each example takes one log of tests/fixtures/nccl_tests/real/, applies hypothesis-drawn
mutations that keep its line numbers, imports it, and compares every record with the row the
second reader of test_import_real_logs.py finds on the same line of the unmutated log.
"""

from __future__ import annotations

import functools
import os
import re
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_import_real_logs import EXPECTED, REAL, expected_values, imported_values, simple_tables

from commbench.data.nccl_tests import parse_text
from commbench.errors import CommbenchError

SETTINGS = settings(
    max_examples=int(os.environ.get("COMMBENCH_PROPERTY_EXAMPLES", "60")),
    deadline=timedelta(seconds=5),
    database=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=[HealthCheck.too_slow],
)
LOGS = sorted(EXPECTED)
PREFIXES = ["", "    ", "\t", "> ", "[1,0]<stdout>:", "0: ", "[1,0]<stdout>:    ", "2024-05-01T10:00:00Z "]
_HEADER = re.compile(r"^(?P<lead>.*?#)(?P<names>\s+size\s+count\s+type\s.*)$")
_LEAD = re.compile(r"^(\s|>|\[\d+,\d+\]<stdout>:)*")


@functools.cache
def truth(name: str) -> dict:
    """(line, in_place) -> the values the unmutated log printed there."""
    return {
        (row["line"], row["in_place"]): expected_values(row)
        for table in simple_tables((REAL / name).read_text())
        for row in table
    }


def is_row(line: str) -> bool:
    content = line[_LEAD.match(line).end() :]
    return content[:1].isdigit() and len(content.split()) >= 8


@st.composite
def reflowed(draw, lines: list[str]) -> list[str]:
    """Cells of rows and column headers re-spaced with 1-6 blanks or tabs; every line given one prefix."""
    prefix = draw(st.sampled_from(PREFIXES))
    gaps = st.sampled_from([" ", "  ", "      ", "\t", " \t "])
    out = []
    for line in lines:
        if is_row(line):
            lead = _LEAD.match(line).end()
            cells = line[lead:].split()
            line = line[:lead] + (draw(gaps).join([""] + cells) if draw(st.booleans()) else " ".join(cells))
        out.append(prefix + line)
    return out


@st.composite
def reordered(draw, lines: list[str]) -> list[str]:
    """Every table's value columns put in another order (the same within each placement), rows to match."""
    order = draw(st.permutations(range(4)))
    swap_redop_root = draw(st.booleans())
    out, width = [], None
    for line in lines:
        if (header := _HEADER.match(line)) and ("#wrong" in line or "error" in line):
            names = header["names"].split()
            width = len(names)
            out.append(header["lead"] + " " + " ".join(_permute(names, order, swap_redop_root)))
        elif width and is_row(line) and len(cells := line[(lead := _LEAD.match(line).end()) :].split()) == width:
            out.append(line[:lead] + " ".join(_permute(cells, order, swap_redop_root)))
        else:
            out.append(line)
    return out


def _permute(cells: list[str], order: tuple[int, ...], swap_redop_root: bool) -> list[str]:
    """cells = prefix + two groups of four (time algbw busbw #wrong|error); -I groups are left alone."""
    prefix_width = len(cells) - 8
    prefix = list(cells[:prefix_width])
    if swap_redop_root and prefix_width == 5:
        prefix[3], prefix[4] = prefix[4], prefix[3]
    groups = [cells[prefix_width : prefix_width + 4], cells[prefix_width + 4 :]]
    return prefix + [group[i] for group in groups for i in order]


@st.composite
def mutated_log(draw):
    name = draw(st.sampled_from(LOGS))
    lines = (REAL / name).read_text().split("\n")
    if draw(st.booleans()):
        lines = draw(reordered(lines))
    if draw(st.booleans()):
        lines = draw(reflowed(lines))
    text = "\n".join(lines)
    if draw(st.booleans()):
        text = text[: draw(st.integers(0, len(text)))]
    return name, text


def import_or_refuse(text: str):
    try:
        return parse_text(text, source="mutated.log")
    except CommbenchError:
        return []


@SETTINGS
@given(case=mutated_log())
def test_mutated_real_logs_never_write_a_value_in_the_wrong_field(case):
    name, text = case
    expected = truth(name)
    for run in import_or_refuse(text):
        for record in run.records:
            key = (record.source_line, record.in_place)
            assert imported_values(record) == expected[key], f"{name} line {record.source_line}"


@st.composite
def shifted_row(draw):
    """One real row with one cell dropped or doubled, so every cell after it moves one column."""
    name = draw(st.sampled_from(LOGS))
    lines = (REAL / name).read_text().split("\n")
    rows = [index for index, line in enumerate(lines) if is_row(line) and (index + 1, False) in truth(name)]
    index = draw(st.sampled_from(rows))
    lead = _LEAD.match(lines[index]).end()
    cells = lines[index][lead:].split()
    at = draw(st.integers(0, len(cells) - 1))
    cells = cells[:at] + cells[at + 1 :] if draw(st.booleans()) else cells[: at + 1] + cells[at:]
    lines[index] = lines[index][:lead] + "  ".join(cells)
    return name, "\n".join(lines), index + 1


@SETTINGS
@given(case=shifted_row())
def test_a_shifted_row_is_reported_or_refused_never_imported(case):
    name, text, line = case
    try:
        runs = parse_text(text, source="shifted.log")
    except CommbenchError as refused:
        assert "do not fit the column header" in str(refused) or "--op" in str(refused)
        return
    expected = truth(name)
    written = [record for run in runs for record in run.records]
    assert all(imported_values(record) == expected[(record.source_line, record.in_place)] for record in written)
    assert line not in {record.source_line for record in written}
    warnings = [warning for run in runs for warning in run.info.warnings]
    assert any("unreadable" in warning and re.search(rf"\b{line}\b", warning) for warning in warnings)
