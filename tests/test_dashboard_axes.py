"""Axis ticks of the dashboard's figures: sizes in binary units, rates in plain GB/s, times with their unit,
never Plotly's bare minor-tick digits ("4 3 2 1000 9 8") or SI prefixes ("100µ"); and the nominal-rate line
drawn, or its absence said on the figure."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("dash", reason="needs the dashboard extra: pip install 'commbench[dashboard]'")

from dashboard.data import ResultsStore
from dashboard.figures.bandwidth import bandwidth_figure, latency_figure, select_records
from dashboard.figures.common import plain_number, rate_ticks, size_label, size_ticks, time_label, time_ticks

EXAMPLES = Path(__file__).resolve().parents[1] / "results" / "examples"
CPU_RUN = "examples/example-cpu-2rank"
SI_PREFIXES = ("µ", "m", "k", "M", "G")


@pytest.mark.parametrize(
    ("size", "text"),
    [(512, "512 B"), (1024, "1 KiB"), (1536, "1.5 KiB"), (4 << 20, "4 MiB"), (1 << 30, "1 GiB"), (4 << 30, "4 GiB")],
)
def test_sizes_are_labelled_in_binary_units(size, text):
    assert size_label(size) == text


def test_size_axis_ticks_every_other_power_of_two_in_binary_units():
    axis = size_ticks([1024, 4 << 20])
    assert axis["ticktext"] == ["1 KiB", "4 KiB", "16 KiB", "64 KiB", "256 KiB", "1 MiB", "4 MiB"]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0001, "0.0001"),
        (0.25, "0.25"),
        (2.0, "2"),
        (12.5, "12.5"),
        (999.7, "1,000"),
        (2000.0, "2,000"),
        (2e-7, "0.0000002"),
    ],
)
def test_plain_numbers_have_no_exponent_or_prefix(value, text):
    assert plain_number(value) == text


def test_rate_axis_of_slow_cpu_runs_reads_plain_gbps():
    axis = rate_ticks([0.00012, 0.003, 0.04])
    assert axis["type"] == "log"
    assert axis["ticktext"] == ["0.0002", "0.0005", "0.001", "0.002", "0.005", "0.01", "0.02"]
    assert not any(prefix in text for text in axis["ticktext"] for prefix in SI_PREFIXES)


def test_rate_axis_over_many_decades_ticks_only_powers_of_ten():
    assert rate_ticks([0.0001, 450])["ticktext"] == ["0.0001", "0.001", "0.01", "0.1", "1", "10", "100"]


def test_a_narrow_range_still_gets_two_ticks_around_it():
    axis = rate_ticks([3.1, 3.3])
    assert axis["tickvals"] == [2.0, 5.0]


def test_time_axis_ticks_carry_their_unit_and_are_in_order():
    axis = time_ticks([300, 4500])
    assert axis["ticktext"] == ["500 µs", "1 ms", "2 ms"]
    assert axis["tickvals"] == sorted(axis["tickvals"])
    assert time_label(0.5) == "0.5 µs" and time_label(2e6) == "2 s"


@pytest.fixture(scope="module")
def cpu_frame(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    shutil.copytree(EXAMPLES / "example-cpu-2rank", root / CPU_RUN)
    return select_records(ResultsStore(root).records([CPU_RUN]), "all_reduce", None, "out")


def test_bandwidth_and_latency_figures_use_these_ticks(cpu_frame):
    figure = bandwidth_figure(cpu_frame)
    assert figure.layout.yaxis.ticktext and all(text[0].isdigit() for text in figure.layout.yaxis.ticktext)
    assert figure.layout.xaxis.ticktext[0].endswith(("B", "KiB"))
    latency = latency_figure(cpu_frame)
    assert latency.layout.yaxis.ticktext and all(
        text.endswith(("µs", "ms", " s")) for text in latency.layout.yaxis.ticktext
    )


def test_a_figure_without_a_nominal_rate_says_why(cpu_frame):
    figure = bandwidth_figure(cpu_frame, references=[], no_reference="no nominal-rate line: no NVLink")
    assert [a.text for a in figure.layout.annotations] == ["no nominal-rate line: no NVLink"]
    drawn = bandwidth_figure(cpu_frame, references=[("NVLink 18 x 25 GB/s", 450.0)], no_reference="unused")
    assert not drawn.layout.annotations
    assert any(trace.name.startswith("nominal NVLink") for trace in drawn.data)
    assert 100.0 in drawn.layout.yaxis.tickvals  # the axis reaches up to the line
