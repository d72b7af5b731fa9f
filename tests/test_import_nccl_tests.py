"""`commbench import nccl-tests` on the synthetic fixtures: behaviours the real corpus lacks.

These fixtures were written by hand in the layouts nccl-tests prints (2.13-era and 2.17 text, the
-J report, version 2) with made-up H100 figures (see tests/fixtures/nccl_tests/SOURCES.md); the
real logs are tested in test_import_real_logs.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commbench import cli
from commbench.data.nccl_tests import busbw_factor, op_name, parse_file, parse_json, parse_text, write_run
from commbench.data.rundir import load_run
from commbench.errors import CommbenchError, UsageError

FIXTURES = Path(__file__).parent / "fixtures" / "nccl_tests"
ALL_REDUCE_LOG = FIXTURES / "synthetic_all_reduce_perf_h100x8.log"
ALL_GATHER_LOG = FIXTURES / "synthetic_all_gather_perf_2node.log"
CRASHED_LOG = FIXTURES / "synthetic_all_reduce_perf_h100x8_crashed.log"
UNCHECKED_LOG = FIXTURES / "synthetic_sendrecv_perf_nocheck.log"
ALL_REDUCE_JSON = FIXTURES / "synthetic_all_reduce_perf_h100x8.json"
EXAMPLES = Path(__file__).parent.parent / "results" / "examples"

# printed bandwidths carry two decimals: a ratio is only meaningful well above 0.01 GB/s
PRINT_TOLERANCE_GBPS = 0.015


def only_run(path: Path, **kwargs):
    runs = parse_file(path, **kwargs)
    assert len(runs) == 1
    return runs[0]


def run_cli(monkeypatch, *argv: str) -> int:
    """The real dispatcher, with only this command registered (the lead registers it in cli.py)."""
    monkeypatch.setattr(cli, "COMMANDS", {"import": "import_"})
    return cli.main(["import", *argv])


def assert_busbw_matches_factor(records, factor: float) -> None:
    for record in records:
        assert record.busbw_factor == pytest.approx(factor)
        assert record.busbw_gbps == pytest.approx(record.algbw_gbps * factor, abs=PRINT_TOLERANCE_GBPS * 2)


@pytest.mark.parametrize(
    ("name", "ours"),
    [
        ("all_reduce_perf", "all_reduce"),
        ("/opt/nccl-tests/build/alltoall_perf", "all_to_all"),
        ("AllGather", "all_gather"),
        ("ReduceScatter", "reduce_scatter"),
        ("SendRecv", "sendrecv"),
        ("broadcast_perf_mpi", "broadcast"),
        ("HyperCube", "hypercube"),
        # alltoallv_perf is its own test in nccl-tests (src/alltoallv.cu, "AlltoAllv"), not alltoall
        ("AlltoAllv", "all_to_allv"),
        ("./build/alltoallv_perf", "all_to_allv"),
    ],
)
def test_op_names_map_to_ours(name, ours):
    assert op_name(name) == ours


def test_all_reduce_text_from_an_h100_node():
    run = only_run(ALL_REDUCE_LOG)
    records = run.records
    sizes = sorted({record.size_bytes for record in records})
    assert sizes == [8 << step for step in range(25)]  # -b 8 -e 128M -f 2
    assert len(records) == 50
    assert [record.in_place for record in records[:4]] == [False, True, False, True]
    for record in records:
        assert (record.op, record.scope, record.group_size, record.timer) == ("all_reduce", "world", 8, "imported")
        assert (record.dtype, record.redop, record.root, record.wrong) == ("float", "sum", -1, 0)
        assert record.count * 4 == record.size_bytes
        assert record.algbw_gbps == pytest.approx(record.size_bytes / record.time_us / 1e3, abs=PRINT_TOLERANCE_GBPS)
        # one rank-averaged mean per row and no spread without -I: no invented percentiles
        assert record.time_us == record.time_us_mean == record.time_us_mean_nccl
        assert record.time_stat == "rank-averaged mean"
        assert (record.time_us_p10, record.time_us_p90, record.time_us_min, record.time_us_max) == (None,) * 4
        assert (record.iters, record.warmup, record.cv) == (20, 5, None)
    assert_busbw_matches_factor(records, 2 * 7 / 8)
    largest = [record for record in records if record.size_bytes == 128 << 20]
    assert all(360 <= record.busbw_gbps <= 480 for record in largest)

    info = run.info
    assert (info.kind, info.source, info.backend, info.world_size, info.complete) == (
        "import",
        "nccl-tests",
        "nccl",
        8,
        True,
    )
    assert [(node.hostname, node.ranks) for node in info.nodes] == [("dgx-h100-017", list(range(8)))]
    assert info.nodes[0].gpus[3] == {"rank": 3, "cuda_device": 3, "pci": "0000:5d:00", "name": "NVIDIA H100 80GB HBM3"}
    assert info.versions == {"nccl-tests": "2.17.6", "nccl": "2.27.5+cuda12.9"}
    assert info.args["header"]["max_bytes"] == 128 << 20
    assert info.args["avg_busbw_gbps"] == pytest.approx(92.5236)
    assert info.warnings == []


def test_all_gather_text_from_two_nodes_names_its_op_by_file_name():
    run = only_run(ALL_GATHER_LOG)
    assert run.info.world_size == 16
    assert [(node.hostname, node.ranks) for node in run.info.nodes] == [
        ("gpu-a07", list(range(8))),
        ("gpu-a08", list(range(8, 16))),
    ]
    assert run.info.versions == {"nccl": "2.18.5+cuda12.2"}
    assert len(run.records) == 2 * 21  # -b 1K -e 1G -f 2
    for record in run.records:
        assert (record.op, record.group_size, record.redop, record.root) == ("all_gather", 16, "none", -1)
        assert record.count * 4 * 16 == record.size_bytes  # count is per rank, size the gathered whole
    assert_busbw_matches_factor(run.records, 15 / 16)


def test_crashed_log_keeps_its_rows_and_is_incomplete():
    run = only_run(CRASHED_LOG)
    assert run.info.complete is False
    assert run.info.reason == "log ends early (crashed run?)"
    assert max(record.size_bytes for record in run.records) == 1 << 20
    assert len(run.records) == 2 * 18  # the half-printed 2 MiB row is skipped
    assert any("unreadable" in warning and "lines 37" in warning for warning in run.info.warnings)


def test_unchecked_run_reports_wrong_as_minus_one():
    run = only_run(UNCHECKED_LOG)
    assert {record.wrong for record in run.records} == {-1}
    assert {(record.op, record.dtype) for record in run.records} == {("sendrecv", "bfloat16")}
    assert all(record.count * 2 == record.size_bytes for record in run.records)
    assert_busbw_matches_factor(run.records, 1.0)


def test_an_absurd_wrong_count_skips_its_row_with_a_warning(tmp_path):
    """Found by the property test: a #wrong of 300 digits is inf as a float, not a count."""
    lines = ALL_REDUCE_LOG.read_text().splitlines(keepends=True)
    row = next(i for i, line in enumerate(lines) if line.split()[:1] == ["2097152"])
    fields = lines[row].split()
    fields[8] = "9" * 300  # the out-of-place #wrong column
    lines[row] = "  ".join(fields) + "\n"
    damaged = tmp_path / "all_reduce.log"
    damaged.write_text("".join(lines))
    run = only_run(damaged)
    assert 2097152 not in {record.size_bytes for record in run.records}
    assert len(run.records) == len(only_run(ALL_REDUCE_LOG).records) - 2  # both halves of that row
    assert any("unreadable" in warning for warning in run.info.warnings)


def test_json_report_with_per_iteration_statistics():
    run = only_run(ALL_REDUCE_JSON)
    assert len(run.records) == 2 * 11  # -b 1K -e 1G -f 4
    for record in run.records:
        assert record.busbw_gbps / record.algbw_gbps == pytest.approx(busbw_factor("all_reduce", 8), rel=1e-4)
        assert record.time_us_min <= record.time_us_p10 <= record.time_us <= record.time_us_p90 <= record.time_us_max
        assert 0 < record.cv < 0.1
        assert (record.iters, record.warmup, record.wrong) == (20, 1, 0)
    info = run.info
    assert info.world_size == 8 and info.nodes[0].ranks == list(range(8))  # one devices entry per process
    assert info.versions["nccl"] == "2.27.5"
    assert info.created == "2025-11-03T14:22:05" and info.complete
    assert info.args["argv"][0].endswith("all_reduce_perf")
    assert "NCCL_NVLS_ENABLE" in info.env
    assert "HF_TOKEN" not in info.env and "HOME" not in info.env  # only NCCL/CUDA/launcher variables


def test_json_per_process_times_name_the_slowest_process_and_keep_real_percentiles():
    # with several processes, -I also writes each process's slowest time per iteration
    document = json.loads(ALL_REDUCE_JSON.read_text())
    document["config"]["ngpus"] = 1  # one rank per process: process i is rank i
    per_iteration = document["results"][0]["out_of_place_per_iter"]
    iterations = len(per_iteration["times_us"])
    per_iteration["per_process_max_times_us"] = [[10.0] * iterations for _ in range(8)]
    per_iteration["per_process_max_times_us"][5] = [30.0] * iterations
    run = parse_json(json.dumps(document), source="straggler.json")
    first = run.records[0]
    assert first.slowest_rank == 5
    assert (first.time_us_min, first.time_us_max, first.time_us_p99) == (11.158169, 12.301774, 12.301774)
    assert first.time_us_min < first.time_us_p10 < first.time_us_p90 <= first.time_us_max
    assert run.records[1].slowest_rank is None  # the in-place result has no per-process times


def test_json_report_cut_short_keeps_complete_results():
    text = ALL_REDUCE_JSON.read_text()
    cut = text.index('{"size":4194304')  # the writer died while writing the 4 MiB result
    run = parse_json(text[: cut + 40], source="cut.json")
    assert run.info.complete is False
    assert max(record.size_bytes for record in run.records) == 1 << 20
    assert len(run.records) == 2 * 6


def test_several_runs_in_one_log_become_several_runs():
    text = ALL_REDUCE_LOG.read_text() + "srun: job step finished\n" + UNCHECKED_LOG.read_text()
    runs = parse_text(text, source="sweep.log")
    assert [run.records[0].op for run in runs] == ["all_reduce", "sendrecv"]
    assert all(run.info.complete for run in runs)


def test_split_communicators_use_the_group_size():
    # NCCL_TESTS_SPLIT="DIV 8" on two nodes: one 8-rank communicator per node, both at once
    lines = ALL_GATHER_LOG.read_text().splitlines()
    split = [line.replace("Group  0", "Group  1") if "on    gpu-a08" in line else line for line in lines]
    run = parse_text("\n".join(split), source="split.log", op="all_gather")[0]
    record = run.records[0]
    assert (record.group_size, record.n_groups, record.scope, record.busbw_factor) == (8, 2, "intra", 7 / 8)
    # the fixture's figures were computed for 16 ranks, which the importer points out
    assert any("busbw/algbw" in warning for warning in run.info.warnings)


def test_per_iteration_columns_blank_out_of_place_and_launcher_prefixes():
    # `srun -l` prefixes "0: "; -I adds i_min i_max i_p99 i_cv% per group; -O 0 leaves the
    # out-of-place group blank; agg iters 2 makes each timed iteration two collectives
    group_names = "  time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%"
    group_values = "  10.00    0.10    0.10       0     9.50    11.00    10.90     3.50"
    text = "\n".join(
        [
            "0: # nThread 1 nGpus 2 minBytes 1024 maxBytes 1024 step: 2(factor) warmup iters: 1 iters: 10 agg iters: 2 validation: 1 graph: 0",
            "0: #  Rank  0 Group  0 Pid   1234 on      node1 device  0 [0000:18:00] NVIDIA H100 80GB HBM3",
            "0: #  Rank  1 Group  0 Pid   1234 on      node1 device  1 [0000:2a:00] NVIDIA H100 80GB HBM3",
            "0: #       size         count      type   redop    root" + group_names * 2,
            "0:         1024           256     float     sum      -1" + " " * 32 + group_values,
            "0: # Avg bus bandwidth    : 0.1 ",
        ]
    )
    (record,) = parse_text(text, source="per_iter.log", op="all_reduce")[0].records
    assert (record.in_place, record.iters, record.group_size) == (True, 20, 2)
    assert (record.time_us_min, record.time_us_max, record.cv) == (9.5, 11.0, pytest.approx(0.035))


def test_a_row_on_a_last_line_cut_without_its_newline_is_not_trusted():
    # a file cut mid-write can end "... 3.5" where the log went on to print "3.50": same cell count
    group_names = "  time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%"
    group_values = "  10.00    0.10    0.10       0     9.50    11.00    10.90     3.50"
    head = [
        "# nThread 1 nGpus 2 minBytes 1024 maxBytes 2048 step: 2(factor) warmup iters: 1 iters: 10 agg iters: 1 validation: 1 graph: 0",
        "#  Rank  0 Group  0 Pid   1234 on      node1 device  0 [0000:18:00] NVIDIA H100 80GB HBM3",
        "#  Rank  1 Group  0 Pid   1234 on      node1 device  1 [0000:2a:00] NVIDIA H100 80GB HBM3",
        "#       size         count      type   redop    root" + group_names * 2,
        "        1024           256     float     sum      -1" + group_values * 2,
        "        2048           512     float     sum      -1" + group_values * 2,
    ]
    (run,) = parse_text("\n".join(head)[:-1], source="cut.log", op="all_reduce")
    assert {record.size_bytes for record in run.records} == {1024}
    assert any("unreadable" in warning and "lines 6" in warning for warning in run.info.warnings)


@pytest.mark.parametrize(
    ("before", "prefix", "created"),
    [
        ("Started: 2024-05-01 10:00:00", "", "2024-05-01T10:00:00"),  # a batch script's line
        ("", "2024-05-01T10:00:07Z ", "2024-05-01T10:00:07"),  # a logger's timestamp on every line
        ("", "", "unknown"),  # nothing in the log says when: not the file's or the importer's time
    ],
)
def test_created_comes_from_the_log_or_is_unknown(before, prefix, created):
    lines = [before] + [prefix + line for line in ALL_REDUCE_LOG.read_text().splitlines()]
    (run,) = parse_text("\n".join(lines) + "\n", source="dated.log")
    assert run.info.created == created
    assert len(run.records) == 50


def test_cputime_and_timestamp_columns_are_read_by_name():
    # -C 1 prints cputime instead of time; -S 1 ends each row with its local time, which dates the run
    names = "  cputime   algbw   busbw  #wrong"
    text = "\n".join(
        [
            "# nThread 1 nGpus 2 minBytes 1024 maxBytes 1024 step: 2(factor) warmup iters: 1 iters: 10 agg iters: 1 validation: 1 graph: 0",
            "#  Rank  0 Group  0 Pid   1234 on      node1 device  0 [0000:18:00] NVIDIA H100 80GB HBM3",
            "#  Rank  1 Group  0 Pid   1234 on      node1 device  1 [0000:2a:00] NVIDIA H100 80GB HBM3",
            "#       size         count      type   redop    root" + names * 2 + "            timestamp",
            "        1024           256     float     sum      -1    10.00    0.10    0.10       0    12.00    0.09    0.09       0  2025-01-02 03:04:05",
            "# Avg bus bandwidth    : 0.1 ",
        ]
    )
    (run,) = parse_text(text, source="cputime.log", op="all_reduce")
    assert [(record.in_place, record.time_us, record.wrong) for record in run.records] == [
        (False, 10.0, 0),
        (True, 12.0, 0),
    ]
    assert run.info.created == "2025-01-02T03:04:05"


def test_alltoallv_perf_output_is_its_own_collective():
    """No real alltoallv_perf log was found (see real/SOURCES.md): this one is the real GB300
    alltoall log with the binary renamed, which is how alltoallv_perf prints (src/alltoallv.cu
    times through the same TimeTest, busbw = algbw x (n-1)/n) plus its '#   rank=' summary."""
    real = Path(__file__).parent / "fixtures" / "nccl_tests" / "real" / "gb300_alltoall_4runs_elided_ranks.md"
    text = (
        real.read_text()
        .replace("alltoall_perf", "alltoallv_perf")
        .replace(
            "# Truncated",
            "#   rank=0 send_bytes=8589934592 recv_bytes=8589934592 alg_bw=833.31 bus_bw=624.98\n# Truncated",
            1,
        )
    )
    runs = parse_text(text, source="alltoallv.md")
    assert [run.records[0].op for run in runs] == ["all_to_allv"] * 4
    first = runs[0]
    assert (first.info.world_size, first.records[0].busbw_factor, first.info.warnings) == (4, 0.75, [])
    # the table alone cannot tell alltoallv from alltoall, so an unnamed one needs --op to be called so
    unnamed = "".join(line + "\n" for line in text.splitlines() if "alltoallv_perf" not in line)
    assert {run.records[0].op for run in parse_text(unnamed, source="a.md")} == {"all_to_all"}
    assert {run.records[0].op for run in parse_text(unnamed, source="a.md", op="alltoallv")} == {"all_to_allv"}


def test_a_log_that_does_not_name_its_op_needs_op(tmp_path):
    anonymous = tmp_path / "h100_run3.log"
    anonymous.write_text(ALL_GATHER_LOG.read_text())
    with pytest.raises(UsageError, match="--op"):
        parse_file(anonymous)
    assert only_run(anonymous, op="all_gather").records[0].op == "all_gather"


def test_header_without_rows_is_an_error(tmp_path):
    header_only = tmp_path / "all_reduce_perf.log"
    header_only.write_text("".join(ALL_REDUCE_LOG.read_text().splitlines(keepends=True)[:11]))
    with pytest.raises(CommbenchError, match="no result rows"):
        parse_file(header_only)


def test_run_directory_round_trips_through_load_run(tmp_path):
    run = only_run(ALL_REDUCE_JSON)
    path = write_run(run, tmp_path, run_id="imported")
    loaded = load_run(path)
    assert loaded.run_id == "imported"
    assert loaded.info.kind == "import" and loaded.info.complete
    assert loaded.records == [record.model_dump() for record in run.records]
    assert (path / "records.csv").read_text().count("\n") == len(run.records) + 1


def test_cli_imports_each_file_into_its_own_run(tmp_path, monkeypatch, capsys):
    assert run_cli(monkeypatch, "nccl-tests", str(ALL_REDUCE_LOG), str(CRASHED_LOG), "--out", str(tmp_path)) == 0
    out, err = capsys.readouterr()
    assert "50 records (25 sizes)" in out and "incomplete" in out
    assert "log ends early" in err
    runs = [load_run(path) for path in tmp_path.iterdir()]
    assert sorted(len(run.records) for run in runs) == [36, 50]


@pytest.mark.parametrize(
    "content",
    [
        "hello\nworld\n",
        "",
        '{"not": "nccl-tests"}',
        '{"config": {}, "results": [{"size": "x", "in_place": {"time": 1}}]}',
    ],
)
def test_cli_refuses_files_that_are_not_nccl_tests_output(tmp_path, monkeypatch, capsys, content):
    garbage = tmp_path / "garbage.txt"
    garbage.write_text(content)
    assert run_cli(monkeypatch, "nccl-tests", str(garbage), "--out", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "garbage.txt" in err
    assert not (tmp_path / "out").exists()


def test_cli_run_id_names_one_run_only(tmp_path, monkeypatch, capsys):
    argv = ["nccl-tests", str(ALL_REDUCE_LOG), str(UNCHECKED_LOG), "--run-id", "x", "--out", str(tmp_path)]
    assert run_cli(monkeypatch, *argv) == 2
    assert "--run-id" in capsys.readouterr().err


def test_example_run_is_the_imported_synthetic_h100_log():
    """The nccl-tests example under results/examples/ is this synthetic log, imported (line numbers aside)."""
    (example_dir,) = [path for path in EXAMPLES.iterdir() if path.name.startswith("example-nccl-tests-h100")]
    example = load_run(example_dir)
    assert json.loads((example_dir / "run.json").read_text())["source"] == "nccl-tests"
    fresh = [record.model_dump(exclude={"source_line"}) for record in only_run(ALL_REDUCE_LOG).records]
    assert [
        {key: value for key, value in record.items() if key != "source_line"} for record in example.records
    ] == fresh
