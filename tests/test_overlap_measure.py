"""`commbench overlap` on 2 gloo CPU ranks, and the step model reading its slowdown.

Times on a shared CPU scatter widely, so the checks are about consistency between fields
(definitions, orderings, bounds), never about absolute times.
"""

import argparse
import json
import math
import subprocess
import sys
from argparse import Namespace

import pytest

from commbench.commands import overlap as overlap_command
from commbench.commands import plan as plan_command
from commbench.data.overlap import OVERLAP_FIELDS, OverlapRecord, overlap_achieved
from commbench.data.rundir import RunWriter, load_run, utc_now
from commbench.data.schema import RECORD_FIELDS, RunInfo
from commbench.data.slowdown import extra_compute_per_overlapped_second, measured_slowdown
from commbench.errors import UsageError
from tests.conftest import REPO

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
SIZES = (64 << 10, 256 << 10)
GEMM_SIZE = 128


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    overlap_command.add_arguments(parser)
    return parser.parse_args(list(argv))


# `commbench ARGS` in a fresh interpreter, with `overlap` added to the dispatcher's table should it
# not be registered there yet
CLI = "import sys; from commbench.cli import COMMANDS, main; COMMANDS.setdefault('overlap', 'overlap'); sys.exit(main(sys.argv[1:]))"


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One small 2-rank run shared by the tests: (run, the table rank 0 printed)."""
    out = tmp_path_factory.mktemp("overlap")
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            CLI,
            "overlap",
            "--nproc",
            "2",
            "--gemm-size",
            str(GEMM_SIZE),
            "-b",
            "64K",
            "-e",
            "256K",
            "--iters",
            "3",
            "--warmup",
            "1",
            "--out",
            str(out),
            "--run-id",
            "cpu2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    return load_run(out / "cpu2"), result.stdout


def test_run_directory_has_one_complete_record_per_op_and_size(measured):
    run, _ = measured
    assert run.info.kind == "overlap" and run.info.complete and run.info.world_size == 2
    assert run.info.args["gemm_size"] == GEMM_SIZE
    assert sorted((r["op"], r["size_bytes"]) for r in run.records) == sorted((op, s) for op in OPS for s in SIZES)
    for record in run.records:
        assert set(RECORD_FIELDS) <= set(record) and set(OVERLAP_FIELDS) <= set(record)
        OverlapRecord.model_validate(record)  # every documented field present and typed
        assert record["wrong"] == 0 and record["group_size"] == 2 and record["timer"] == "host"


def test_every_field_is_documented():
    for name in OVERLAP_FIELDS:
        assert OverlapRecord.model_fields[name].description, name


def test_figures_are_consistent_with_their_definitions(measured):
    run, _ = measured
    for r in run.records:
        assert min(r["compute_us"], r["comm_us"], r["both_us"]) > 0
        # each iteration's both spans its own GEMM and collective, so the medians keep that order
        assert r["both_us"] >= max(r["compute_during_comm_us"], r["comm_during_compute_us"]) * (1 - 1e-9)
        assert r["overlap_unclamped"] == pytest.approx(overlap_achieved(r["compute_us"], r["comm_us"], r["both_us"]))
        assert 0.0 <= r["overlap"] <= 1.0
        assert r["overlap"] == pytest.approx(min(1.0, max(0.0, r["overlap_unclamped"])))
        assert r["compute_slowdown"] == pytest.approx(r["compute_during_comm_us"] / r["compute_us"])
        assert r["comm_slowdown"] == pytest.approx(r["comm_during_compute_us"] / r["comm_us"])
        assert r["comm_us"] == r["time_us"]
        assert r["time_us_min"] <= r["time_us_p10"] <= r["time_us"] <= r["time_us_p90"] <= r["time_us_max"]
        assert r["gemm_tflops"] == pytest.approx(2 * GEMM_SIZE**3 / r["compute_us"] / 1e6)
        assert r["gemm_dtype"] == "float32" and r["gemm_threads"] >= 1
        assert r["slowest_rank"] in (0, 1)


def test_both_at_once_takes_at_least_about_the_longer_alone(measured):
    # alone and together are separate phases: one noisy phase of a few iterations on a shared CPU
    # can break the bound on one row, so it is asked of the typical row
    run, _ = measured
    ratios = sorted(r["both_us"] / max(r["compute_us"], r["comm_us"]) for r in run.records)
    assert ratios[len(ratios) // 2] >= 0.5


def test_overlap_definition_at_its_ends():
    assert overlap_achieved(10, 4, 10) == 1.0  # the shorter hid completely
    assert overlap_achieved(10, 4, 14) == 0.0  # one after the other
    assert overlap_achieved(10, 4, 12) == 0.5
    assert overlap_achieved(0, 4, 4) == 0.0


def test_table_is_printed_once_with_the_run_directory(measured):
    run, table = measured
    for op in OPS:
        assert table.count(f"# {op} beside a {GEMM_SIZE}x{GEMM_SIZE}x{GEMM_SIZE} float32 GEMM") == 1
    assert "# Out of bounds values : 0 OK" in table
    assert f"# Results: {run.path}" in table


def test_step_model_reads_the_measured_slowdown(measured):
    run, _ = measured
    factor = measured_slowdown(run.path)
    at_largest = [extra_compute_per_overlapped_second(r) for r in run.records if r["size_bytes"] == max(SIZES)]
    expected = sorted(at_largest)[1:3]  # median of the four ops
    assert math.isfinite(factor) and factor == pytest.approx(max(0.0, sum(expected) / 2))


def write_overlap_run(path, compute_us=100.0, compute_during_comm_us=130.0, kind="overlap"):
    """An overlap run directory whose records all say: the GEMM runs 30% longer beside the collective."""
    info = RunInfo(run_id=path.name, kind=kind, created=utc_now(), backend="nccl", world_size=8)
    writer = RunWriter(path.parent, info)
    records = []
    for op in OPS:
        for size in (1 << 20, 64 << 20):
            records.append(
                OverlapRecord(
                    op=op,
                    group_size=8,
                    size_bytes=size,
                    count=size // 4,
                    dtype="float",
                    in_place=False,
                    iters=10,
                    timer="cuda_event",
                    time_us=500.0,
                    time_us_p10=500.0,
                    time_us_p90=500.0,
                    time_us_min=500.0,
                    time_us_max=500.0,
                    cv=0.0,
                    algbw_gbps=1.0,
                    busbw_gbps=1.0,
                    busbw_factor=1.0,
                    gemm_size=8192,
                    gemm_dtype="bfloat16",
                    gemm_threads=0,
                    gemm_tflops=600.0,
                    compute_us=compute_us,
                    comm_us=500.0,
                    both_us=520.0,
                    compute_during_comm_us=compute_during_comm_us,
                    comm_during_compute_us=510.0,
                    overlap=0.8,
                    overlap_unclamped=0.8,
                    compute_slowdown=compute_during_comm_us / compute_us,
                    comm_slowdown=1.02,
                )
            )
    writer.add_records(records)
    writer.finish(complete=True)
    return writer.path


def test_measured_slowdown_is_the_extra_compute_per_overlapped_second(tmp_path):
    # the collective (510 us) outlasts the GEMM (130 us beside it): all 130 us overlapped, 30 of them extra
    assert measured_slowdown(write_overlap_run(tmp_path / "a")) == pytest.approx(30 / 130)
    # a GEMM measured faster beside a collective is noise, not a speed-up
    assert measured_slowdown(write_overlap_run(tmp_path / "b", compute_during_comm_us=90.0)) == 0.0
    with pytest.raises(UsageError, match="overlap run"):
        measured_slowdown(write_overlap_run(tmp_path / "c", kind="sweep"))


def plan_args(**overrides) -> Namespace:
    """`commbench plan` for one layout as the command line parses it, with some options replaced."""
    parser = argparse.ArgumentParser()
    plan_command.add_arguments(parser)
    args = parser.parse_args(
        [
            "--model",
            "llama2-7b",
            "--gpus",
            "8",
            "--global-batch",
            "64",
            "--seq-len",
            "4096",
            "--top",
            "3",
            "--layout",
            "tp=2,dp=4,zero=1",
            "--json",
        ]
    )
    return Namespace(**{**vars(args), **overrides})


def test_plan_overlap_run_sets_the_slowdown_and_changes_the_step(tmp_path, capsys):
    run = write_overlap_run(tmp_path / "slow", compute_during_comm_us=200.0)  # 100 extra per 200 overlapped
    assert plan_command.main(plan_args()) == 0
    default = json.loads(capsys.readouterr().out)
    assert plan_command.main(plan_args(overlap_run=str(run))) == 0
    measured = json.loads(capsys.readouterr().out)
    assert default["slowdown"] == {"intra": 0.15, "inter": 0.02}
    assert measured["slowdown"] == {"intra": 0.5, "inter": 0.5}
    assert measured["categories_s"]["slowdown"] > default["categories_s"]["slowdown"]
    assert measured["step_s"] > default["step_s"]
    with pytest.raises(UsageError, match="not both"):
        plan_command.main(plan_args(overlap_run=str(run), slowdown=0.1))


@pytest.mark.parametrize(
    "argv, message",
    [
        (("--gemm-size", "0"), "--gemm-size"),
        (("--min-bytes", "4M", "--max-bytes", "1M"), "--min-bytes"),
        (("--iters", "0"), "--iters"),
    ],
)
def test_bad_values_are_usage_errors(argv, message):
    with pytest.raises(UsageError, match=message):
        overlap_command.main(parse(*argv))


def test_ops_outside_the_four_are_refused_by_the_parser():
    with pytest.raises(SystemExit) as exit_info:
        parse("--ops", "sendrecv")
    assert exit_info.value.code == 2


def test_help_explains_every_figure_of_the_table():
    for figure in ("compute", "comm", "both", "overlap", "compute slowdown", "comm slowdown", "#wrong"):
        assert figure in overlap_command.__doc__
    assert overlap_command.HELP
