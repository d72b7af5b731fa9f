"""What a person reads: piped tables are never cut, and every number says what it is."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "results" / "examples"
LAYOUT = re.compile(r"tp=\d+,pp=\d+(,cp=\d+)?(,ep=\d+)?,dp=\d+,mbs=\d+,zero=\d,recompute=\w+")


def _piped(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "commbench", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "COLUMNS": ""},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_piped_plan_keeps_whole_layout_strings():
    out = _piped(
        "plan", "--model", "llama2-7b", "--gpus", "16", "--global-batch", "64", "--seq-len", "4096", "--top", "5"
    )
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert len(rows) == 5
    for row in rows:  # each row holds its layout whole, on one line (no fold, no ellipsis)
        assert LAYOUT.search(row), row
    assert "…" not in out


def test_piped_table_keeps_op_names_and_names_the_statistic():
    out = _piped("table", str(EXAMPLES / "example-cpu-2rank"), "--at", "4K")
    assert "…" not in out
    assert re.search(r"│ all_reduce\s+│", out) and re.search(r"│ reduce_scatter\s+│", out)
    assert "median per op" in out and "`commbench run` prints the median of the slowest rank" in out


def test_plan_bandwidth_ends_with_one_line_on_what_was_measured():
    run = EXAMPLES / "example-nccl-tests-a100-2nodes-aws"
    out = _piped(
        "plan",
        "--model",
        "llama2-7b",
        "--gpus",
        "16",
        "--global-batch",
        "64",
        "--seq-len",
        "4096",
        "--top",
        "1",
        "--bandwidth",
        str(run),
    )
    last = out.strip().splitlines()[-1]
    assert last.startswith(f"bandwidth from {run}: measured rows: all_reduce hierarchical; ")
    assert "the preset network (not in the run): all_gather hierarchical" in last
    as_json = json.loads(
        _piped(
            "plan",
            "--model",
            "llama2-7b",
            "--gpus",
            "16",
            "--global-batch",
            "64",
            "--seq-len",
            "4096",
            "--top",
            "1",
            "--bandwidth",
            str(run),
            "--json",
        )
    )
    assert as_json["bandwidth_pricing"] == last
