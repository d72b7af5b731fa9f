"""`commbench trace`: the command on fixture traces, and the demo traced and analysed end to end."""

import argparse
import json
from pathlib import Path

import pytest

from commbench.commands import trace as trace_command
from commbench.errors import UsageError

TRACES = Path(__file__).parent / "fixtures" / "traces"


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    trace_command.add_arguments(parser)
    return trace_command.main(parser.parse_args(argv))


def test_command_module_has_the_command_interface():
    assert trace_command.HELP and trace_command.__doc__
    assert "overlap %" in trace_command.__doc__


def test_table_shows_iterations_and_n_a_without_communication(capsys):
    assert run(str(TRACES / "gpu_two_streams.json"), str(TRACES / "no_communication.json")) == 0
    out = capsys.readouterr().out
    assert "60.0%" in out and "40.0%" in out  # the two iterations of rank 0
    assert "ncclDevKernel_AllGather_RING_LL" in out and "2K" in out
    assert "n/a" in out and "nan" not in out.lower()


def test_json_and_timeline_out(tmp_path, capsys):
    timeline_file = tmp_path / "timeline.json"
    assert run(str(TRACES / "gloo_cpu.json"), "--json", "--timeline-out", str(timeline_file)) == 0
    result = json.loads(capsys.readouterr().out)
    assert "timeline" not in result
    assert result["ranks"][0]["total"]["overlap_pct"] == 62.5
    timeline = json.loads(timeline_file.read_text())
    assert timeline["note"] is None
    assert {bar["category"] for bar in timeline["timeline"]} == {"compute", "communication"}


def test_truncated_trace_warns_on_stderr(tmp_path, capsys):
    text = (TRACES / "gloo_cpu.json").read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) - 30])
    assert run(str(cut)) == 0
    assert "warning" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [[], ["--demo", "somewhere", "trace.json"], ["missing.json"], ["--timeline-limit", "0", "x.json"]],
)
def test_bad_arguments_are_usage_errors(argv):
    with pytest.raises(UsageError):
        run(*argv)


def test_demo_trains_ddp_on_two_gloo_ranks_and_analyses_the_traces(tmp_path, capsys):
    """About 5 s: two processes, a 4-layer MLP, 5 steps of which 3 are recorded."""
    demo_dir = tmp_path / "demo"
    assert run("--demo", str(demo_dir), "--json", "--timeline-out", str(tmp_path / "timeline.json")) == 0
    result = json.loads(capsys.readouterr().out)
    assert sorted(path.name for path in demo_dir.iterdir()) == ["rank0.json", "rank1.json"]
    assert [rank["rank"] for rank in result["ranks"]] == [0, 1]
    for rank in result["ranks"]:
        assert rank["device"] == "cpu" and not rank["truncated"]
        assert len(rank["iterations"]) == 3
        total = rank["total"]
        assert total["compute_us"] > 0 and total["communication_us"] > 0
        assert 0 <= total["overlap_pct"] <= 100
        assert total["exposed_communication_us"] == pytest.approx(
            total["communication_us"] - total["overlap_us"], abs=0.01
        )
        busiest = rank["collectives"][0]
        # Each recorded step all-reduces the gradients in several 1 MB buckets.
        assert busiest["name"] == "gloo:all_reduce" and busiest["count"] >= 3 * 2
    timeline = json.loads((tmp_path / "timeline.json").read_text())["timeline"]
    assert {(bar["rank"], bar["category"]) for bar in timeline} == {
        (0, "compute"), (0, "communication"), (1, "compute"), (1, "communication"),
    }  # fmt: skip
