"""bench/scorecard_moe.py: the MoE rows split by the scorecard's position rule, each with its source
commit, priced at their own layout (a row without a hardware preset is listed, not scored)."""

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _module():
    spec = importlib.util.spec_from_file_location("scorecard_moe", BENCH / "scorecard_moe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCORECARD = _module()


def test_rows_split_by_position_and_cite_their_commit():
    rows = SCORECARD.load_rows()
    half = SCORECARD.halves(rows)
    ordered = sorted(rows, key=lambda r: (r["gpus"], r["id"]))
    assert [half[r["id"]] for r in ordered[:4]] == ["held out", "calibration", "held out", "calibration"]
    assert len({r["id"] for r in rows}) == len(rows)
    assert all(len(r["commit"]) == 10 and r["container"] for r in rows)


def test_a_published_row_is_priced_at_its_layout_and_b300_is_not_scored():
    rows = SCORECARD.load_rows()
    h100 = next(r for r in rows if r["system"] == "DGX-H100" and r["model"] == "gpt-oss-120b")
    layout = SCORECARD.layout_of(h100)
    assert (layout.tp, layout.pp, layout.ep, layout.etp) == (h100["tp"], h100["pp"], h100["ep"], 1)
    assert SCORECARD.predict(h100)["step_s"] > 0
    b300 = next(r for r in rows if r["system"] == "DGX-B300")
    assert "no hardware preset" in SCORECARD.predict(b300)["not_scored"]
    assert SCORECARD.published_step(h100) == h100["global_batch"] * h100["seq_len"] / (
        h100["tokens_per_s_per_gpu"] * h100["gpus"]
    )
