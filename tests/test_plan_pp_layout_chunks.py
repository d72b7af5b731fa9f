"""An explicit pipeline layout prices each model chunk at its own decoder layers in the event schedule.

Megatron-Core's --pipeline-model-parallel-layout names every virtual stage's layers; rank r runs entries
r, r+pp, ... as its chunks. DeepSeek-V3's MLPerf and Megatron-Bridge recipes (Et*4|(t*4|)*14tmL) put one
layer beside the MTP layer and the loss in the last chunk and four in each other: spreading a rank's
layers evenly over its chunks made that last chunk 3.25 layers plus the head and stalled every stage
behind it once per micro-batch.
"""

from __future__ import annotations

import pytest

from commbench.modeling.layout import parse_layout
from commbench.modeling.spec import PlanSpec, build_planner


def _forward_durations(layout: str) -> dict[tuple[int, int], float]:
    """(stage, chunk) -> microseconds of micro-batch 1's forward in the simulated timeline."""
    planner = build_planner(PlanSpec(model="llama2-7b", gpus=8, global_batch=16, seq_len=4096))
    result, _ = planner.evaluate_layout(parse_layout(layout))
    out = {}
    for event in result.timeline:
        if event["category"] != "compute" or not event["stream"].endswith(".compute"):
            continue
        kind, mb, chunk = event["name"].split()
        if kind == "F" and mb == "mb1":
            out[(int(event["stream"][2 : event["stream"].index(".")]), int(chunk[1:]))] = event["dur_us"]
    return out


def test_each_chunk_runs_the_layers_the_layout_names():
    # llama2-7b's 32 layers: stage 0 holds entries 0 and 2 (2 + 14), stage 1 entries 1 and 3 (14 + 2, and the loss)
    chunked = _forward_durations("tp=2,pp=2,vpp=2,dp=2,mbs=1,pp_layout=Et*2|t*14|t*14|t*2L")
    assert chunked[(0, 1)] / chunked[(0, 0)] == pytest.approx(7.0)  # 14 layers against 2, not 8 and 8
    assert chunked[(1, 0)] / chunked[(0, 0)] == pytest.approx(7.0)
    # the same 16 layers per stage split evenly over the chunks: every decoder chunk is 8 layers
    even = _forward_durations("tp=2,pp=2,vpp=2,dp=2,mbs=1,pp_layout=Et*8|t*8|t*8|t*8L")
    assert even[(0, 0)] == pytest.approx(even[(0, 1)]) == pytest.approx(even[(1, 0)])
    # a stage's chunks together still run its layers: 2 + 14 layers take as long as 8 + 8
    assert chunked[(0, 0)] + chunked[(0, 1)] == pytest.approx(2 * even[(0, 0)])


def _deepseek_v3_step(global_batch: int):
    """DeepSeek-V3 on 8192 GB200 as NVIDIA's MLPerf Training v6.0 run lays it out (bench/published/
    moe_mlperf_runs.csv): tp2 pp4 vp4 ep32, the layout Et*4|(t*4|)*14tmL, dp 1024."""
    spec = PlanSpec(
        model="deepseek-v3",
        gpus=8192,
        global_batch=global_batch,
        seq_len=4096,
        hardware="gb200-nvl72",
        nvlink_domain=64,
        compute_precision="mxfp8",
        dispatcher="flex",
        moe_overlap="1f1b-a2a",
        cuda_graph=True,
    )
    layout = "tp=2,pp=4,vpp=4,ep=32,dp=1024,mbs=1,zero=1,pp_layout=Et*4|(t*4|)*14tmL"
    result, _ = build_planner(spec).evaluate_layout(parse_layout(layout))
    return result


def test_deepseek_v3s_light_last_chunk_leaves_only_the_fill_and_drain_bubble():
    # 16 and 32 micro-batches per pipeline: the interleaved bubble is the fill and drain, (pp-1) chunk
    # forward+backward times of stage 0, whatever the micro-batch count; priced at its stage's average the
    # last chunk (1 layer + MTP + loss) was 3.25 layers + MTP + loss and stalled every stage once per
    # micro-batch (0.28 s at 16, 0.43 s at 32, against 0.09 s of fill and drain)
    few, many = _deepseek_v3_step(16384), _deepseek_v3_step(32768)
    ops = [e for e in few.timeline if e["stream"] == "pp0.compute" and e["name"].endswith("mb1 c1")]
    fill_drain = 3 * sum(e["dur_us"] for e in ops) / 1e6  # (pp - 1) x (forward + backward) of a 4-layer chunk
    assert few.micro_batches == 16 and many.micro_batches == 32
    assert few.categories["bubble"] < 2 * fill_drain  # with the pipeline sends; 3.4x before
    assert many.categories["bubble"] < 1.35 * few.categories["bubble"]  # x1.25 (the sends); x1.5 before
