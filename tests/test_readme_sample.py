"""README's sample `commbench run` output ends with the lines the printer really writes."""

import io
import json
import re

from commbench.data.schema import Record
from commbench.measure.report import NcclTestsPrinter
from tests.conftest import REPO


def _shape(lines: list[str]) -> list[str]:
    """The lines with their figures blanked: a measurement differs from run to run, the words do not."""
    return [re.sub(r"\d+(\.\d+)?", "N", line.rstrip()) for line in lines]


def _readme_trailer() -> list[str]:
    text = (REPO / "README.md").read_text()
    sample = text[text.index("$ commbench run --nproc 2 -b 1K -e 4M") :]
    lines = sample[: sample.index("```")].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("# Out of bounds values"))
    return lines[first:]


def test_readme_sample_trailer_is_what_the_printer_prints():
    records_file = REPO / "results" / "examples" / "example-cpu-2rank" / "records.jsonl"
    record = Record(**json.loads(records_file.read_text().splitlines()[0]))
    printer = NcclTestsPrinter(stream=io.StringIO())
    printer.rows.append([record])
    printer.summary("results/20261201-090038-vm-f06094")
    printed = printer.stream.getvalue().splitlines()
    assert _shape(_readme_trailer()) == _shape(printed)
