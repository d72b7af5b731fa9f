"""`commbench import nccl-tests` on real logs published by others (tests/fixtures/nccl_tests/real/).

Every imported value is checked, row by row, against a second reader written here on purpose
as simply as possible and sharing no code with the importer: strip what precedes the content,
take the column header's names, and zip each row's cells with them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from commbench import cli
from commbench.data.nccl_tests import parse_file, parse_text
from commbench.data.rundir import load_run
from commbench.errors import CommbenchError, UsageError

REAL = Path(__file__).parent / "fixtures" / "nccl_tests" / "real"

# What each log says about each of its runs: collective, ranks, hosts, complete.
EXPECTED = {
    "dgx2_v100_5collectives_2020.log": [
        ("all_gather", 12, ["seville"], True),
        ("all_reduce", 12, ["seville"], True),
        ("broadcast", 12, ["seville"], True),
        ("reduce", 12, ["seville"], True),
        ("reduce_scatter", 12, ["seville"], True),
    ],
    "a3mega_h100_2nodes_all_reduce.md": [("all_reduce", 16, ["ztan-mig-235z", "ztan-mig-gq73"], True)],
    "cscs_gh200_2nodes_all_reduce_indented.md": [("all_reduce", 8, ["nid005471", "nid005487"], True)] * 2,
    "cscs_gh200_sarus_2.18.2.log": [("all_reduce", 2, ["nid007106", "nid007109"], True)],
    "aws_eks_a100_2nodes_mpirun_info_2.9.9.log": [
        ("all_reduce", 16, ["nccl-tests-efa-16-worker-0", "nccl-tests-efa-16-worker-1"], True)
    ],
    "azureml_k80_4gpu_old_format.log": [("all_reduce", 4, ["2e3f9af7241040529530e810ce60fe5d000002"], True)],
    "oracle_a100_2nodes_mpirun_10G.log": [("all_reduce", 16, ["inst-xxxxx-gpu4-ol89", "inst-yyyyy-gpu4-ol89"], True)],
    "korean_wiki_t4_3nodes_srun_nocheck.log": [("all_reduce", 3, ["gpu01", "gpu02", "gpu03"], True)],
    "dgxspark_gb10_all_gather_2runs.md": [("all_gather", 2, ["spark-fb97", "spark-4440"], True)] * 2,
    "rtx5090_mpirun_tagged_2runs.md": [("all_reduce", 2, ["lab"], True)] * 2,
    "a10g_3runs_prompts_info.log": [
        ("all_reduce", 1, ["ip-10-0-139-244"], True),
        ("all_reduce", 1, ["ip-10-0-142-242"], True),
        ("all_reduce", 2, ["ip-10-0-139-244", "ip-10-0-142-242"], True),
    ],
    "a100_g2_markdown_indented_info.md": [("all_reduce", 2, ["3767c65d25c4"], True)],
    # the README shows the first and last two rank lines of the multi-host runs, "..." between
    "gb300_alltoall_4runs_elided_ranks.md": [
        ("all_to_all", 4, ["GPU-3882"], True),
        ("all_to_all", 8, ["GPU-5188", "GPU-205"], True),
        ("all_to_all", 64, ["GPU-5705", "GPU-6569"], True),
        ("all_to_all", 128, ["GPU-5705", "GPU-1631"], True),
    ],
}
# Logs that printed no row, and the failure line each must be refused with.
CRASHED = {
    "nccl_tests_issue355_alltoall_crashed.log": "Test CUDA failure common.cu:389 'an illegal memory access was encountered'",
    "nccl_tests_issue264_crash_before_table.log": "Test CUDA failure common.cu:941 'system not yet initialized'",
}


def test_every_real_log_is_in_the_corpus_list_and_has_a_source():
    logs = {path.name for path in REAL.iterdir() if path.name != "SOURCES.md"}
    assert logs == set(EXPECTED) | set(CRASHED)
    sources = (REAL / "SOURCES.md").read_text()
    assert all(f"`{name}`" in sources for name in logs)
    assert sum(len(runs) for runs in EXPECTED.values()) + len(CRASHED) >= 20


# --- the second, simple reader -----------------------------------------------------------------

_SIMPLE_PREFIX = re.compile(r"^(\s|>|\[\d+,\d+\]<stdout>:)+")


def simple_tables(text: str) -> list[list[dict]]:
    """Each table of the text as a list of {column: cell} per row and placement, in order."""
    tables: list[list[dict]] = []
    names: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = _SIMPLE_PREFIX.sub("", raw)
        words = line.lstrip("#").split()
        if line.startswith("#") and words[:3] == ["size", "count", "type"]:
            names = words
            tables.append([])
        elif names and line[:1].isdigit() and len(line.split()) == len(names):
            tables[-1].extend(simple_row(dict(enumerate(line.split())), names, number))
    return tables


def simple_row(cells: dict, names: list[str], number: int) -> list[dict]:
    half = names.index("time", names.index("time") + 1)  # the in-place group starts at the 2nd time
    head = {name: cells[i] for i, name in enumerate(names[:half]) if name in ("size", "count", "type", "redop", "root")}
    first = names.index("time")
    rows = []
    for in_place, start, end in ((False, first, half), (True, half, len(names))):
        row = dict(head, line=number, in_place=in_place)
        row.update({names[i]: cells[i] for i in range(start, end)})
        rows.append(row)
    return rows


def expected_values(row: dict) -> tuple:
    wrong = row.get("#wrong", "N/A")
    return (
        int(row["size"]),
        int(row["count"]),
        row["type"],
        row.get("redop", "none"),
        int(row.get("root", -1)),
        row["in_place"],
        float(row["time"]),
        float(row["algbw"]),
        float(row["busbw"]),
        -1 if "error" in row or wrong == "N/A" else int(wrong),
        row["line"],
    )


def imported_values(record) -> tuple:
    return (
        record.size_bytes,
        record.count,
        record.dtype,
        record.redop,
        record.root,
        record.in_place,
        record.time_us,
        record.algbw_gbps,
        record.busbw_gbps,
        record.wrong,
        record.source_line,
    )


# --- the corpus ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_log_imports_every_value_of_every_row(name):
    path = REAL / name
    runs = parse_file(path)
    tables = simple_tables(path.read_text())
    assert len(runs) == len(tables) == len(EXPECTED[name])
    for run, table, (op, ranks, hosts, complete) in zip(runs, tables, EXPECTED[name]):
        assert [imported_values(record) for record in run.records] == [expected_values(row) for row in table]
        assert {record.op for record in run.records} == {op}
        assert run.info.world_size == ranks
        assert [node.hostname for node in run.info.nodes] == hosts
        assert run.info.complete is complete


@pytest.mark.parametrize("name", sorted(CRASHED))
def test_real_crashed_log_is_refused_quoting_its_failure(name, tmp_path, monkeypatch, capsys):
    with pytest.raises(CommbenchError) as refused:
        parse_file(REAL / name)
    assert CRASHED[name] in str(refused.value)
    monkeypatch.setattr(cli, "COMMANDS", {"import": "import_"})
    assert cli.main(["import", "nccl-tests", str(REAL / name), "--out", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and CRASHED[name] in err
    assert not (tmp_path / "out").exists()


def test_five_runs_of_five_collectives_give_five_labelled_directories(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMANDS", {"import": "import_"})
    assert (
        cli.main(["import", "nccl-tests", str(REAL / "dgx2_v100_5collectives_2020.log"), "--out", str(tmp_path)]) == 0
    )
    runs = sorted((load_run(path) for path in tmp_path.iterdir()), key=lambda run: run.info.args["run"])
    assert [run.info.args["run"] for run in runs] == [f"run {i} of 5" for i in range(1, 6)]
    assert [run.records[0]["op"] for run in runs] == [
        "all_gather",
        "all_reduce",
        "broadcast",
        "reduce",
        "reduce_scatter",
    ]
    assert [run.info.args["lines"] for run in runs] == ["1-55", "56-109", "110-163", "164-217", "218-270"]
    assert all(f"-run{i}of5-" in run.run_id for i, run in enumerate(runs, 1))
    assert all(run.info.args["command"].startswith("Running: CUDA_VISIBLE_DEVICES=") for run in runs)
    out = capsys.readouterr().out
    assert "run 3 of 5 (lines 110-163): 62 records (31 sizes), broadcast on 12 ranks" in out


def test_provenance_names_the_log_not_the_importing_machine():
    (run,) = parse_file(REAL / "cscs_gh200_sarus_2.18.2.log")
    info = run.info
    assert info.created == "unknown"  # the log gives no time; the file's date is not the run's
    assert info.versions == {"nccl-tests": "2.18.2", "nccl": "2.30.7"}
    assert info.args["command"].startswith("srun -N2 --gpus-per-node=4")
    assert (info.args["lines"], info.args["run"]) == ("1-25", "run 1 of 1")
    assert info.nodes[1].gpus[0] == {"rank": 1, "cuda_device": 0, "pci": "0009:01:00", "name": "NVIDIA GH200 120GB"}
    import socket

    assert socket.gethostname().split(".")[0] not in info.run_id


def test_old_tables_read_by_header_whole_number_times_not_shifted():
    """2020 K80 table: no root column, float error, times printed without decimals (19902)."""
    (run,) = parse_file(REAL / "azureml_k80_4gpu_old_format.log")
    first = run.records[0]
    assert (first.time_us, first.algbw_gbps, first.busbw_gbps, first.root, first.wrong) == (19902.0, 1.69, 2.53, -1, -1)
    assert run.info.args["collective_from"] == "table"  # the log names no collective
    assert not any("wrong elements" in warning for warning in run.info.warnings)


def test_indented_log_keeps_its_rank_lines_and_footer():
    first, second = parse_file(REAL / "cscs_gh200_2nodes_all_reduce_indented.md")
    assert (first.info.world_size, len(first.info.nodes), first.info.complete) == (8, 2, True)
    assert first.info.args["avg_busbw_gbps"] == 19.7866 and second.info.args["avg_busbw_gbps"] == 1.58767
    assert not any("ends early" in warning for warning in first.info.warnings)


def _unnamed(name: str, drop: tuple[str, ...]) -> str:
    """The log with the lines that name its collective removed."""
    return (
        "\n".join(line for line in (REAL / name).read_text().splitlines() if not any(word in line for word in drop))
        + "\n"
    )


def test_two_rank_all_reduce_without_a_name_needs_op_and_says_which_two():
    # at 2 ranks all_reduce and sendrecv print the same sizes and busbw = algbw
    text = _unnamed("cscs_gh200_sarus_2.18.2.log", ("all_reduce_perf",))
    with pytest.raises(UsageError, match="fits all_reduce or sendrecv; pass --op"):
        parse_text(text, source="anonymous.log")
    (run,) = parse_text(text, source="anonymous.log", op="sendrecv")
    assert run.records[0].op == "sendrecv" and run.info.args["collective_from"] == "--op"


def test_op_that_contradicts_the_log_is_refused(tmp_path, monkeypatch, capsys):
    with pytest.raises(UsageError, match="--op all_gather contradicts the log, which names all_reduce"):
        parse_file(REAL / "a3mega_h100_2nodes_all_reduce.md", op="all_gather")
    text = _unnamed("azureml_k80_4gpu_old_format.log", ())
    with pytest.raises(UsageError, match="contradicts the log's table, which fits all_reduce"):
        parse_text(text, source="k80.log", op="all_gather")
    monkeypatch.setattr(cli, "COMMANDS", {"import": "import_"})
    argv = [
        "import",
        "nccl-tests",
        str(REAL / "dgx2_v100_5collectives_2020.log"),
        "--op",
        "broadcast",
        "--out",
        str(tmp_path / "o"),
    ]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run 1 of 5" in err and not (tmp_path / "o").exists()


def test_unnamed_alltoall_is_told_from_all_gather_by_its_unchecked_in_place_results():
    text = _unnamed("gb300_alltoall_4runs_elided_ranks.md", ("alltoall_perf",))
    runs = parse_text(text, source="a2a.log")
    assert [(run.records[0].op, run.info.args["collective_from"]) for run in runs] == [("all_to_all", "table")] * 4
    assert any("lists 4 of its 128 ranks" in warning for warning in runs[3].info.warnings)


def test_unnamed_old_tables_are_told_apart_by_layout_sizes_and_busbw():
    """The 2020 DGX-2 runs without their command lines: each collective still comes out right."""
    text = _unnamed("dgx2_v100_5collectives_2020.log", ("Running:",))
    ops = [(run.records[0].op, run.info.args["collective_from"]) for run in parse_text(text, source="dgx2.log")]
    assert ops == [(op, "table") for op in ("all_gather", "all_reduce", "broadcast", "reduce", "reduce_scatter")]


def _shift_rows(name: str, rows: int) -> str:
    """The log with one cell dropped from each of its first `rows` rows, so later cells move left."""
    lines, shifted = (REAL / name).read_text().split("\n"), 0
    for index, line in enumerate(lines):
        if shifted < rows and line.strip()[:1].isdigit() and len(line.split()) >= 12:
            cells = line.split()
            lines[index] = "  ".join(cells[:5] + cells[6:])  # the out-of-place time is gone
            shifted += 1
    return "\n".join(lines)


def test_a_few_shifted_rows_are_skipped_and_named_many_refuse_the_run():
    (run,) = parse_text(_shift_rows("a3mega_h100_2nodes_all_reduce.md", 1), source="a3mega.md")
    assert len(run.records) == 60  # 31 sizes, the damaged one left out
    assert any("skipped 1 unreadable row(s)" in warning and "lines 32" in warning for warning in run.info.warnings)
    with pytest.raises(UsageError, match="4 of 31 rows do not fit the column header"):
        parse_text(_shift_rows("a3mega_h100_2nodes_all_reduce.md", 4), source="a3mega.md")
