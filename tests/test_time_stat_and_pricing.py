"""Issue 13 point 5: every record says which statistic its time is; collectives are priced from the
mean time per op and from in-place rows; activation memory scales with the activation dtype."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from commbench.data.bandwidth_table import BandwidthTable
from commbench.data.records import RowFacts, Stats, build_record
from commbench.modeling.hardware import load_system
from commbench.modeling.job import PRECISIONS, TrainingJob
from commbench.modeling.layout import LayoutBatch, parse_layout
from commbench.modeling.measured import MeasuredNetwork
from commbench.modeling.memory import activation_bytes_per_layer
from commbench.modeling.models import PRESETS
from commbench.modeling.network import Placement, PresetNetwork

EXAMPLE = Path(__file__).resolve().parents[1] / "results" / "examples" / "example-cpu-2rank"


def record(size: int, samples, in_place=False):
    facts = RowFacts(
        op="all_reduce",
        scope="world",
        group_size=2,
        n_groups=1,
        size_bytes=size,
        count=size // 4,
        dtype="float",
        redop="sum",
        root=-1,
        in_place=in_place,
        iters=len(samples),
        warmup=0,
        timer="host",
        stop_reason="fixed",
    )
    return build_record(facts, Stats.of(samples), 1.0, time_us_mean_nccl=None, wrong=0).model_dump()


def test_our_records_say_slowest_rank_median_and_keep_the_mean():
    rec = record(1024, [10.0, 10.0, 10.0, 40.0])  # one slow iteration: median 10, mean 17.5
    assert rec["time_stat"] == "slowest-rank median"
    assert (rec["time_us"], rec["time_us_mean"]) == (10.0, 17.5)


def test_the_table_prices_the_mean_and_labels_it():
    sizes = [2**k for k in range(10, 20, 2)]
    table = BandwidthTable.from_records([record(s, [10.0, 10.0, 10.0, 40.0 + s / 1e3]) for s in sizes])
    entry = table.entry("all_reduce", "world", 2)
    means = [np.mean([10.0, 10.0, 10.0, 40.0 + s / 1e3]) for s in sizes]
    assert np.allclose(entry.times_us, means)
    assert "mean per op" in entry.label
    older = [{k: v for k, v in record(s, [10.0, 20.0]).items() if k != "time_us_mean"} for s in sizes]
    assert "median" in BandwidthTable.from_records(older).entry("all_reduce", "world", 2).label


def test_all_reduce_is_priced_from_in_place_rows(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(EXAMPLE, run)
    rows = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines() if line.strip()]
    for row in rows:  # make the in-place rows 3x faster than the out-of-place ones
        if row["op"] == "all_reduce" and row["in_place"]:
            row["time_us"] /= 3
    (run / "records.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    system = load_system("dgx-h100")
    measured = MeasuredNetwork(run, PresetNetwork(system))
    in_place = BandwidthTable.from_run(run, in_place=True).entry("all_reduce", "world", 2)
    out_of_place = BandwidthTable.from_run(run).entry("all_reduce", "world", 2)
    assert in_place.in_place and not out_of_place.in_place
    size = float(in_place.sizes[len(in_place.sizes) // 2])
    price = float(measured.time_s("all_reduce", size, 2, Placement(2, 1))) * 1e6
    assert price == pytest.approx(float(in_place.time_us(size)))
    assert price < float(out_of_place.time_us(size)) / 2


def test_fp32_activations_double_the_16_bit_terms():
    model, layout = PRESETS["llama2-7b"], parse_layout("tp=2,dp=4,mbs=1,sp=0", 8)
    batch = LayoutBatch.from_layouts([layout])
    sixteen = TrainingJob(model, 4096, 8)
    fp32 = TrainingJob(model, 4096, 8, PRECISIONS["fp32"])
    none, full = np.zeros(1, dtype=int), np.full(1, 2)
    b16, b32 = (activation_bytes_per_layer(j, batch, none)[0] for j in (sixteen, fp32))
    masks = 2 * 4096 * model.hidden  # two 1-byte hidden dropout masks per token
    assert b32 - masks == pytest.approx(2 * (b16 - masks))
    assert activation_bytes_per_layer(fp32, batch, full)[0] == pytest.approx(
        2 * activation_bytes_per_layer(sixteen, batch, full)[0]
    )
