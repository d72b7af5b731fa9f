"""Bad input: one line on stderr naming the problem, exit code 2, no traceback."""

import pytest

BAD_RUNS = [
    (["--ops", "all_reduce,bogus"], "bogus"),
    (["-b", "4M", "-e", "1K"], "--min-bytes"),
    (["-b", "12Q"], "bad size"),
    (["-b", "-8"], "negative"),
    (["--backend", "gloo", "-d", "bfloat16"], "bfloat16"),
    (["-d", "bfloat16"], "bfloat16"),
    (["-d", "complex"], "unknown dtype"),
    (["--nproc", "0"], "--nproc"),
    (["--iters", "0"], "--iters"),
    (["--scopes", "galaxy"], "galaxy"),
    (["--pairwise", "--nproc", "1"], "at least 2"),
]


@pytest.mark.parametrize("args,needle", BAD_RUNS, ids=[" ".join(a) for a, _ in BAD_RUNS])
def test_bad_run_input(cli, tmp_path, args, needle):
    result = cli("run", *args, "--out", str(tmp_path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert needle in lines[0] and "Traceback" not in result.stderr
    assert not list(tmp_path.iterdir()), "nothing is written for a refused run"


def test_unknown_command(cli):
    result = cli("frobnicate")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


def test_existing_run_id_is_refused_before_measuring(cli, tmp_path):
    first = cli(
        "run", "--nproc", "2", "-b", "1K", "-e", "1K", "--ops", "all_reduce", "--out", str(tmp_path), "--run-id", "same"
    )
    assert first.returncode == 0, first.stderr
    again = cli(
        "run", "--nproc", "2", "-b", "1K", "-e", "1K", "--ops", "all_reduce", "--out", str(tmp_path), "--run-id", "same"
    )
    assert again.returncode == 2
    lines = again.stderr.strip().splitlines()
    assert len(lines) == 1 and "already exists" in lines[0]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["-e", "9" * 309], "larger than"),
        (["--timeout", "nan"], "--timeout"),
        (["--time-budget-ms", "inf"], "--time-budget-ms"),
        (["--pairwise", "--max-retransmit-pct", "nan"], "--max-retransmit-pct"),
        (["--max-retransmit-pct", "-1"], "--max-retransmit-pct"),
    ],
)
def test_absurd_numbers_are_refused(cli, tmp_path, args, needle):
    result = cli("run", *args, "--out", str(tmp_path))
    assert result.returncode == 2 and needle in result.stderr and "Traceback" not in result.stderr
