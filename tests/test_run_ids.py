"""Run ids are directory names, never paths (issue 24): `--run-id ../x` and absolute ids wrote
outside --out before, and passed through `submit -- --run-id` too. Slurm option checks match the
whole string: `--time $'30\\n'` passed the old `$`-anchored check."""

from __future__ import annotations

from pathlib import Path

import pytest

from commbench.cli import main as cli_main
from commbench.data.rundir import RunWriter
from commbench.data.schema import RunInfo
from commbench.errors import UsageError
from commbench.measure import slurm

LOG = Path(__file__).parent / "fixtures" / "nccl_tests" / "synthetic_all_reduce_perf_h100x8_crashed.log"
BAD_IDS = ["../x", "/abs/run", "a/b", "..", ".hidden", "x\n", "-rf", ""]


def cli(argv: list[str]) -> int:
    try:
        return cli_main(argv)
    except SystemExit as exc:  # argparse's own exit for a bad option value
        return exc.code


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("run_id", ["../x", "/abs"])
@pytest.mark.parametrize(
    "command",
    [
        ["run", "--nproc", "2", "-e", "1K"],
        ["import", "nccl-tests", str(LOG)],
    ],
)
def test_a_path_as_run_id_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, command, run_id):
    out = tmp_path / "deep" / "out"
    run_id = str(tmp_path / "abs") if run_id == "/abs" else run_id
    assert cli([*command, "--out", str(out), "--run-id", run_id]) == 2
    assert "run id" in _one_error_line(capsys)
    assert list(tmp_path.iterdir()) == []


def test_submit_refuses_a_path_as_run_id_before_sbatch(tmp_path, capsys):
    assert (
        cli(
            [
                "submit",
                "--nodes",
                "1",
                "--ntasks-per-node",
                "1",
                "--out",
                str(tmp_path / "out"),
                "--",
                "--run-id",
                "../x",
            ]
        )
        == 2
    )
    assert "run id '../x'" in _one_error_line(capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("run_id", BAD_IDS)
def test_the_run_writer_itself_refuses_a_bad_id(tmp_path, run_id):
    info = RunInfo(run_id=run_id, created="now", backend="gloo", world_size=1)
    with pytest.raises(UsageError, match="run id"):
        RunWriter(tmp_path / "out", info)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("time_limit", ["30\n", "1:00:00\n", "30\n#SBATCH --uid=0"])
def test_slurm_time_check_matches_the_whole_string(time_limit):
    with pytest.raises(UsageError, match="not a Slurm time limit"):
        slurm.JobOptions(nodes=1, ranks_per_node=1, time_limit=time_limit).validate()


def test_slurm_env_names_match_the_whole_string():
    with pytest.raises(UsageError, match="not a valid environment variable name"):
        slurm.JobOptions(nodes=1, ranks_per_node=1, env=(("NCCL_DEBUG\n", "INFO"),)).validate()
