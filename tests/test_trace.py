"""commbench.traces.analysis on synthetic traces whose overlap is worked out by hand.

gpu_two_streams.json (rank 0), times in microseconds, compute kernels on streams 7 and 8, NCCL on
streams 20 and 21:
  step 1  compute [10,50) [30,70)  allreduce (old name) [40,90)  memcpy [95,100)
          window [10,120): compute 60, comm 50, both [40,70) = 30 -> 60 %, exposed 20,
          busy [10,90) + [95,100) = 85 -> idle 25
  step 2  compute [120,140) [145,160)  allgather (new name) [150,170) and [155,175)
          window [120,175): compute 35, comm 25, both [150,160) = 10 -> 40 %, exposed 15, idle 5
gloo_cpu.json (rank 1), one step [0,100) on CPU: operators [0,40) and [50,90), minus the
c10d::allreduce_ call [60,65) -> compute 75; gloo:all_reduce [60,100) -> comm 40, both 25 ->
62.5 %, exposed 15, idle 10.
"""

import gzip
import json
import math
import shutil
from pathlib import Path

import pytest

from commbench.errors import UsageError
from commbench.traces import chrome_trace
from commbench.traces.analysis import analyse_traces

TRACES = Path(__file__).parent / "fixtures" / "traces"
GPU_TRACE = TRACES / "gpu_two_streams.json"
GLOO_TRACE = TRACES / "gloo_cpu.json"
NO_COMM_TRACE = TRACES / "no_communication.json"

FIGURES = (
    "duration_us", "compute_us", "communication_us", "memory_us", "overlap_us",
    "overlap_pct", "exposed_communication_us", "idle_us",
)  # fmt: skip


def figures(window: dict) -> tuple:
    return tuple(window[name] for name in FIGURES)


def analysed(*paths, **options) -> dict:
    return analyse_traces([str(path) for path in paths], **options).to_dict()


def test_overlapping_kernels_on_several_streams_give_the_worked_out_figures():
    (rank,) = analysed(GPU_TRACE)["ranks"]
    assert rank["rank"] == 0 and rank["device"] == "gpu"
    step_1, step_2 = rank["iterations"]
    assert step_1["step"] == 1 and step_2["step"] == 2
    assert figures(step_1) == (110, 60, 50, 5, 30, 60.0, 20, 25)
    assert figures(step_2) == (55, 35, 25, 0, 10, 40.0, 15, 5)
    # The total adds up the iterations; its overlap % is recomputed, not averaged.
    assert figures(rank["total"]) == (165, 95, 75, 5, 40, round(100 * 40 / 75, 3), 35, 30)


def test_gpu_iterations_follow_the_launch_not_the_cpu_step():
    (rank,) = analysed(GPU_TRACE)["ranks"]
    # The step-1 kernels run from t=10 although ProfilerStep#1 starts at t=0 on the CPU.
    assert [window["start_us"] for window in rank["iterations"]] == [0, 110]


def test_old_and_new_nccl_kernel_names_are_communication_with_their_bytes():
    (rank,) = analysed(GPU_TRACE)["ranks"]
    assert rank["collectives"] == [
        # 1024 float elements
        {"name": "ncclKernel_AllReduce_RING_LL_Sum_float", "count": 1, "total_us": 50, "bytes": 4096},
        # twice max(256, 512) bfloat16 elements
        {"name": "ncclDevKernel_AllGather_RING_LL", "count": 2, "total_us": 40, "bytes": 2048},
    ]


def test_a_trace_without_communication_reports_no_overlap_and_no_nan():
    result = analysed(NO_COMM_TRACE)
    (rank,) = result["ranks"]
    assert rank["total"]["overlap_pct"] is None
    assert figures(rank["total"]) == (30, 20, 0, 0, 0, None, 0, 10)
    assert rank["iterations"] == [] and rank["collectives"] == []
    assert "NaN" not in json.dumps(result)


def test_gloo_cpu_trace_counts_training_thread_operators_as_compute():
    (rank,) = analysed(GLOO_TRACE)["ranks"]
    assert rank["rank"] == 1 and rank["device"] == "cpu"
    (step,) = rank["iterations"]
    assert step["step"] == 5
    assert figures(step) == (100, 75, 40, 0, 25, 62.5, 15, 10)
    assert rank["collectives"] == [{"name": "gloo:all_reduce", "count": 1, "total_us": 40, "bytes": None}]


def test_timeline_bars_are_numeric_microseconds_from_one_origin():
    result = analysed(GPU_TRACE, GLOO_TRACE)
    bars = result["timeline"]
    assert {bar["rank"] for bar in bars} == {0, 1}
    assert all(isinstance(bar["start_us"], float) and isinstance(bar["dur_us"], float) for bar in bars)
    assert min(bar["start_us"] for bar in bars) == 0
    gloo_bars = [(bar["lane"], bar["category"], bar["name"]) for bar in bars if bar["rank"] == 1]
    # Only outermost CPU operators are drawn; the collective call is not compute.
    assert gloo_bars == [
        ("thread 200 (python)", "compute", "aten::linear"),
        ("thread 200 (python)", "compute", "autograd::engine::evaluate_function: AddmmBackward0"),
        ("thread 201 (pt_gloo_runloop)", "communication", "gloo:all_reduce"),
    ]
    assert result["timeline_note"] is None


def test_timeline_limit_keeps_the_longest_events_and_says_so():
    result = analysed(GPU_TRACE, timeline_limit=2)
    assert [bar["dur_us"] for bar in result["timeline"]] == [40, 50]  # sorted by start
    assert "2 longest" in result["timeline_note"]


def test_ranks_come_from_distributed_info_or_file_order():
    assert [rank["rank"] for rank in analysed(GLOO_TRACE, GPU_TRACE)["ranks"]] == [1, 0]
    repeated = analysed(GPU_TRACE, GPU_TRACE)
    assert [rank["rank"] for rank in repeated["ranks"]] == [0, 1]
    assert any("distinct rank" in warning for warning in repeated["warnings"])


def test_gzip_trace_gives_the_same_figures(tmp_path):
    compressed = tmp_path / "rank0.json.gz"
    with open(GPU_TRACE, "rb") as source, gzip.open(compressed, "wb") as target:
        shutil.copyfileobj(source, target)
    assert analysed(compressed)["ranks"][0]["total"] == analysed(GPU_TRACE)["ranks"][0]["total"]


def test_tiny_read_chunks_give_the_same_figures(monkeypatch):
    """Numbers and strings cut at every possible chunk boundary still decode whole."""
    expected = analysed(GPU_TRACE, GLOO_TRACE)
    monkeypatch.setattr(chrome_trace, "_CHUNK_BYTES", 3)
    assert analysed(GPU_TRACE, GLOO_TRACE) == expected


def test_bare_event_array_is_a_trace(tmp_path):
    events = json.loads(GLOO_TRACE.read_text())["traceEvents"]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(events))
    (rank,) = analysed(bare)["ranks"]
    assert rank["total"]["overlap_pct"] == 62.5


def test_truncated_trace_is_analysed_up_to_the_cut_with_a_warning(tmp_path):
    text = GPU_TRACE.read_text()
    cut = tmp_path / "cut.json"
    # Cut inside the event of the second allgather kernel: everything before it still counts.
    cut.write_text(text[: text.index('"ts": 155') + 4])
    result = analysed(cut)
    (rank,) = result["ranks"]
    assert rank["truncated"]
    assert result["warnings"] == [f"{cut}: the file ends in the middle of an event; analysed what was read"]
    assert rank["iterations"][1]["communication_us"] == 20  # only the stream-20 allgather
    assert not any(isinstance(value, float) and math.isnan(value) for value in rank["total"].values())


def test_truncated_gzip_trace_is_analysed_with_a_warning(tmp_path):
    # Repeat the events so that the compressed stream is long enough to cut in the middle.
    trace = json.loads(GLOO_TRACE.read_text())
    trace["traceEvents"] *= 200
    compressed = gzip.compress(json.dumps(trace, indent=1).encode())
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(compressed[: len(compressed) // 2])
    result = analysed(cut)
    assert result["ranks"][0]["truncated"] and result["warnings"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such trace file"),
        (b"", "empty, or cut short"),
        (b"hello", "not a chrome trace"),
        (b'{"schemaVersion": 1}', "no traceEvents"),
        (b'{"traceEvents": 3}', "not a list of events"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        (b"\x1f\x8bnot really gzip", "damaged gzip"),
        (b'{"traceEvents": [{"ph": "X",, }]}', "not valid JSON"),
    ],
)
def test_bad_input_is_one_clear_usage_error(tmp_path, content, message):
    path = tmp_path / "trace.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(UsageError, match=message):
        analyse_traces([path])


def test_no_paths_is_a_usage_error():
    with pytest.raises(UsageError):
        analyse_traces([])


def write_trace(directory: Path, events: list[dict]) -> Path:
    path = directory / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def step(number: int, start: float, duration: float) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{number}", "pid": 1, "tid": 1,
            "ts": start, "dur": duration}  # fmt: skip


def kernel(name: str, start: float, duration: float) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": start, "dur": duration}


def test_kernels_without_correlation_belong_to_the_step_they_start_in(tmp_path):
    events = [step(1, 0, 100), step(2, 100, 100), kernel("gemm", 10, 10), kernel("gemm", 150, 10)]
    (rank,) = analysed(write_trace(tmp_path, events))["ranks"]
    windows = [(window["step"], window["start_us"], window["duration_us"]) for window in rank["iterations"]]
    assert windows == [(1, 0, 140), (2, 140, 10)]


def test_gpu_work_launched_outside_every_step_is_measured_as_one_window(tmp_path):
    events = [step(1, 0, 10), kernel("gemm", 500, 10), kernel("ncclDevKernel_Broadcast_RING_LL", 505, 10)]
    (rank,) = analysed(write_trace(tmp_path, events))["ranks"]
    assert rank["iterations"] == []
    assert figures(rank["total"]) == (15, 10, 10, 0, 5, 50.0, 5, 0)


def test_odd_correlation_ids_and_args_are_ignored(tmp_path):
    """A list as a correlation id or as `args` (seen by the property tests) is skipped, not fatal."""
    import json

    from commbench.traces.analysis import analyse_traces

    events = [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 1,
            "args": {"correlation": []},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclDevKernel_AllGather_RING_LL",
            "pid": 0,
            "tid": 7,
            "ts": 5,
            "dur": 10,
            "args": {"correlation": [1]},
        },
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 8, "ts": 5, "dur": 10, "args": [1, 2]},
    ]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"traceEvents": events}))
    figures = analyse_traces([path]).to_dict()["ranks"][0]["total"]
    assert figures["communication_us"] == 10 and figures["compute_us"] == 10 and figures["overlap_pct"] == 100
