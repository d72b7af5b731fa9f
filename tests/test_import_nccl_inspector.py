"""`commbench import nccl-inspector`: NCCL Inspector's JSON logs as a job run directory.

Fixtures: tests/fixtures/nccl_inspector/synthetic/ (SYNTHETIC, written by generate.py from the
schema inspector_json.cc writes; NVIDIA/nccl ships no sample output).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commbench.data.nccl_inspector import (
    INSPECTOR_OPS,
    busbw_factor,
    parse_line,
    read_job,
    read_job_samples,
    size_bytes,
    write_job,
)
from commbench.data.rundir import list_runs, load_run
from commbench.errors import UsageError
from tests.conftest import REPO, run_cli

JOB = REPO / "tests" / "fixtures" / "nccl_inspector" / "synthetic" / "nccl-inspector-4711"
SETTINGS = settings(
    max_examples=int(os.environ.get("COMMBENCH_PROPERTY_EXAMPLES", "60")),
    deadline=timedelta(seconds=5),
    database=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _lines():
    return [line for path in sorted(JOB.iterdir()) for line in path.read_text().splitlines()]


def test_fixture_job_communicators_scopes_hosts_and_job_id():
    job = read_job([JOB])
    comms = {c["name"]: c for c in job.info.args["communicators"]}
    assert job.info.args["job_id"] == "4711" and job.info.source == "nccl-inspector" and job.info.world_size == 4
    assert {name: (c["n_ranks"], c["nnodes"], c["scope"], c["hosts"]) for name, c in comms.items()} == {
        "DP Group 0": (4, 2, "world", ["gpu-a01", "gpu-a02"]),
        "TP Group 0": (2, 1, "intra", ["gpu-a01"]),
        "TP Group 1": (2, 1, "intra", ["gpu-a02"]),
        "PP Group 0": (2, 2, "inter", ["gpu-a01", "gpu-a02"]),
    }
    assert comms["DP Group 0"]["rank_hosts"] == {"0": "gpu-a01", "1": "gpu-a01", "2": "gpu-a02", "3": "gpu-a02"}
    assert [(n.hostname, n.ranks) for n in job.info.nodes] == [("gpu-a01", [0, 1]), ("gpu-a02", [2, 3])]
    rows = {(r.comm_name, r.op, r.size_bytes): r for r in job.records}
    # ReduceScatter and AllGather log one rank's 16 MiB; commbench's size is nccl-tests' (x 4 ranks)
    assert set(rows) == {
        ("DP Group 0", "all_reduce", 64 << 20),
        ("DP Group 0", "all_reduce", 1 << 20),
        ("DP Group 0", "reduce_scatter", 64 << 20),
        ("DP Group 0", "all_gather", 64 << 20),
        ("TP Group 0", "all_reduce", 8 << 20),
        ("TP Group 1", "all_reduce", 8 << 20),
        ("PP Group 0", "send", 4 << 20),
        ("PP Group 0", "recv", 4 << 20),
    }
    assert all(r.iters == 12 and r.timer == "imported" and r.dtype == "unknown" for r in job.records)


def test_every_line_busbw_is_inspectors_own_figure():
    """commbench's size convention and factor give back the busbw Inspector computed on every line."""
    for line in _lines():
        call = parse_line(line)
        reported = json.loads(line)
        perf = reported.get("coll_perf") or reported["p2p_perf"]
        mine = (
            size_bytes(call.op, call.msg_bytes, call.n_ranks) * busbw_factor(call.op, call.n_ranks) / call.exec_us / 1e3
        )
        assert mine == pytest.approx(perf.get("coll_busbw_gbs", perf.get("p2p_busbw_gbs")), rel=1e-5)


def test_time_is_the_slowest_rank_per_call_and_samples_keep_every_call(tmp_path):
    job = read_job([JOB])
    directory = write_job(job, tmp_path)
    samples = read_job_samples(directory)
    world = next(c for c in job.info.args["communicators"] if c["name"] == "DP Group 0")
    row = samples[(world["id"], "all_reduce", 64 << 20)]
    per_call: dict[int, list[int]] = {}
    for line in _lines():
        item = json.loads(line)
        perf = item.get("coll_perf")
        if (
            perf
            and item["header"]["id"] == world["id"]
            and perf["coll"] == "AllReduce"
            and perf["coll_msg_size_bytes"] == 64 << 20
        ):
            per_call.setdefault(perf["coll_sn"], []).append(perf["coll_exec_time_us"])
    assert row["sn"] == sorted(per_call) and row["time_us"] == [max(per_call[sn]) for sn in sorted(per_call)]
    assert row["ranks"] == [0, 1, 2, 3] and row["rank_median_us"][3] > row["rank_median_us"][0]  # rank 3 is 5% slower
    run = load_run(directory)
    assert run.info.complete and not run.warnings


def test_store_ingests_the_job(tmp_path):
    from commbench.data.store import ingest, query

    write_job(read_job([JOB]), tmp_path / "results")
    report = ingest(tmp_path / "db.duckdb", [tmp_path / "results"])
    assert len(report.added) == 1
    _, rows = query(
        tmp_path / "db.duckdb",
        "SELECT r.source, count(*), count(DISTINCT json_extract_string(x.extra, '$.comm_id')) "
        "FROM runs r JOIN records x USING (run_id) GROUP BY r.source",
    )
    assert rows == [("nccl-inspector", 8, 4)]


def test_gz_and_jsonl_and_a_truncated_last_line(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    files = sorted(JOB.iterdir())
    with gzip.open(folder / "a.log.gz", "wt") as handle:
        handle.write(files[0].read_text())
    shutil.copy(files[1], folder / "b.jsonl")
    text = files[2].read_text()
    (folder / "c.log").write_text(text[: len(text) - 40])  # the writer was killed mid-line
    shutil.copy(files[3], folder / "d.log")
    job = read_job([folder])
    assert job.info.args["calls_logged"] == len(_lines()) - 1
    assert any("c.log: skipped 1 of" in warning for warning in job.info.warnings)


@pytest.mark.parametrize(
    "content, why",
    [
        (b"", "empty"),
        (b"\x00\xff\x13binary" * 100, "not JSON"),
        (b"[" * 100000 + b"\n", "not JSON"),  # deeper than the parser's recursion limit
        (b'{"header": {}, "metadata": {}, "coll_perf": {}}\n', "missing"),
        (b"x" * (5 << 20) + b"\n", "longer than"),  # over safe_read.MAX_LINE_BYTES (4 MiB)
        (
            json.dumps(
                {
                    "header": {"id": "0x1", "rank": 5, "n_ranks": 2, "nnodes": 1},
                    "metadata": {"hostname": "h", "pid": 1},
                    "coll_perf": {
                        "coll": "AllReduce",
                        "coll_sn": 1,
                        "coll_msg_size_bytes": 8,
                        "coll_exec_time_us": 1,
                        "coll_busbw_gbs": 0.0,
                    },
                }
            ).encode()
            + b"\n",
            "rank 5 of a communicator of 2",
        ),
    ],
    ids=["empty", "binary", "deep", "empty-parts", "huge-line", "rank-out-of-range"],
)
def test_hostile_logs_one_line_exit_2_nothing_written(tmp_path, content, why):
    bad = tmp_path / "bad.log"
    bad.write_bytes(content)
    out = tmp_path / "out"
    result = run_cli("import", "nccl-inspector", str(JOB), str(bad), "--out", str(out), timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("commbench import: error: ") and why in lines[0], result.stderr
    assert not list_runs(out)


def test_other_bad_input(tmp_path):
    for args, said in [
        (["/nonexistent"], "no such file"),
        (["/dev/null"], "not a regular file"),
        ([str(tmp_path)], "no Inspector logs"),
        ([str(JOB), "--op", "all_reduce"], "--op is for nccl-tests"),
    ]:
        result = run_cli("import", "nccl-inspector", *args, "--out", str(tmp_path / "out"), timeout=120)
        assert result.returncode == 2 and said in result.stderr and len(result.stderr.strip().splitlines()) == 1, (
            result.stderr
        )
    assert not (tmp_path / "out").exists() or not list_runs(tmp_path / "out")


def test_cli_import_prints_the_communicators(tmp_path):
    result = run_cli("import", "nccl-inspector", str(JOB), "--out", str(tmp_path), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "job 4711: 264 calls logged by 4 processes on 2 node(s), 4 communicator(s), 8 records" in result.stdout
    assert "communicator 0x99aa00bb11cc22 (PP Group 0): 2 ranks on 2 node(s), scope inter" in result.stdout


# --------------------------------------------------------------------------------- property

_LINES = _lines()
_VALID = st.sampled_from(_LINES)
_GARBAGE = st.one_of(
    st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
    st.text(max_size=200),
    st.sampled_from(["{}", "[]", "null", '{"header": 1}', "{" * 50]),
)


@st.composite
def mutated(draw, line: str) -> str:
    """A valid line with one field of one part replaced by a value of another type, removed, or cut."""
    item = json.loads(line)
    how = draw(st.sampled_from(["cut", "retype", "drop", "keep"]))
    if how == "cut":
        return line[: draw(st.integers(0, len(line) - 1))]
    if how == "keep":
        return line
    part = draw(st.sampled_from(sorted(item)))
    key = draw(st.sampled_from(sorted(item[part])))
    if how == "drop":
        del item[part][key]
    else:
        item[part][key] = draw(
            st.one_of(
                st.none(),
                st.booleans(),
                st.text(max_size=5),
                st.integers(-5, 5),
                st.floats(allow_nan=True),
                st.lists(st.integers(), max_size=2),
            )
        )
    return json.dumps(item)


@SETTINGS
@given(data=st.data())
def test_any_mix_of_valid_mutated_and_garbage_lines_imports_or_refuses_cleanly(tmp_path_factory, data):
    lines = data.draw(st.lists(st.one_of(_VALID, _VALID.flatmap(mutated), _GARBAGE), min_size=1, max_size=40))
    folder = tmp_path_factory.mktemp("mix")
    (folder / "x.log").write_text(
        "\n".join(line.replace("\n", " ") for line in lines) + "\n", encoding="utf-8", errors="surrogatepass"
    )
    valid = set(_LINES)
    try:
        job = read_job([folder])
    except UsageError as exc:
        assert "\n" not in str(exc)
        return
    # every imported call is one of the fixture's calls, unchanged: exec times match a real line
    known = {
        (parse_line(line).comm_id, parse_line(line).op, parse_line(line).sn, parse_line(line).rank): parse_line(line)
        for line in valid
    }
    for record in job.records:
        assert record.op in INSPECTOR_OPS.values() and record.time_us > 0
    assert job.info.args["calls_logged"] <= len(lines)
    kept = [parse_line(line) for line in lines if line in valid]
    assert len(kept) <= job.info.args["calls_logged"]
    assert all((c.comm_id, c.op, c.sn, c.rank) in known for c in kept)


def test_links_in_a_searched_folder_are_not_followed(tmp_path):
    folder = tmp_path / "nccl-inspector-77"
    folder.mkdir()
    for path in sorted(JOB.iterdir())[:2]:
        shutil.copy(path, folder / path.name)
    outside = tmp_path / "outside.log"
    shutil.copy(sorted(JOB.iterdir())[2], outside)
    (folder / "escape.log").symlink_to(outside)
    (folder / "sub").symlink_to(JOB, target_is_directory=True)
    job = read_job([folder])
    assert job.info.args["job_id"] == "77"
    assert sorted(Path(p).name for p in job.info.args["source_files"]) == sorted(
        p.name for p in sorted(JOB.iterdir())[:2]
    )
