"""Which collective an nccl-tests table measured, worked out from the table itself.

Older logs name no collective, files hold runs of several, and a user's `--op` may be wrong, so
the table is checked against what each nccl-tests collective prints:
  layout    reductions print a reduction op (`sum`), the others `none` or no `redop` column;
            rooted collectives print a root >= 0, the others -1 or no `root` column;
  sizes     `size` is count x element size for all_reduce, broadcast, reduce and sendrecv, and
            that times the rank count for all_gather, reduce_scatter, alltoall, gather, scatter;
  busbw     busbw / algbw is the collective's factor (commbench.ops) for the rank count, two
            printed decimals allowed for; all_gather and reduce_scatter printed busbw = algbw
            before June 2020;
  in-place  alltoall checks only its out-of-place result, so its in-place `#wrong` reads N/A.
alltoallv and hypercube are only ever taken from their name: their sizes follow no count rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from commbench import ops
from commbench.data.nccl_tests_facts import Measurements, RunFacts
from commbench.dtypes import element_bytes


@dataclass(frozen=True)
class OpShape:
    """What an nccl-tests collective prints, as far as it tells collectives apart. Its busbw
    factor is commbench.ops'; `older_factors` are ones earlier nccl-tests releases printed."""

    size_in_ranks: bool | None  # size = count x bytes x ranks (True), x 1 (False), no rule (None)
    reduces: bool
    rooted: bool
    from_table: bool = True  # False: only its name says it is this one
    older_factors: tuple[Callable[[int], float], ...] = ()


def _busbw_equals_algbw(n: int) -> float:
    return 1.0  # all_gather and reduce_scatter before nccl-tests' fix of June 2020 (its issue 45)


SHAPES: dict[str, OpShape] = {
    "all_reduce": OpShape(False, reduces=True, rooted=False),
    "all_gather": OpShape(True, reduces=False, rooted=False, older_factors=(_busbw_equals_algbw,)),
    "reduce_scatter": OpShape(True, reduces=True, rooted=False, older_factors=(_busbw_equals_algbw,)),
    "all_to_all": OpShape(True, reduces=False, rooted=False),
    "all_to_allv": OpShape(None, reduces=False, rooted=False, from_table=False),
    "sendrecv": OpShape(False, reduces=True, rooted=False),
    "broadcast": OpShape(False, reduces=False, rooted=True),
    "reduce": OpShape(False, reduces=True, rooted=True),
    "gather": OpShape(True, reduces=False, rooted=True),
    "scatter": OpShape(True, reduces=False, rooted=True),
    "hypercube": OpShape(None, reduces=False, rooted=False, from_table=False),
}


def candidates(facts: RunFacts, ranks: int | None) -> list[str]:
    """The collectives whose printing rules the run's table follows (ranks: communicator size, if known)."""
    rows = facts.measurements
    fitting = [
        op
        for op, shape in SHAPES.items()
        if shape.from_table and _layout_fits(shape, rows) and (ranks is None or _numbers_fit(op, shape, rows, ranks))
    ]
    if _in_place_unchecked(rows) and "all_to_all" in fitting:
        return ["all_to_all"]
    return fitting


def factor_fits(op: str, rows: Measurements, ranks: int) -> bool:
    """Whether every row's busbw is algbw x one of op's factors, within the two printed decimals."""
    return op not in SHAPES or _factor_fits(op, SHAPES[op], rows, ranks)


def _layout_fits(shape: OpShape, rows: Measurements) -> bool:
    """Reductions print an op, the others `none`; rooted ones a root >= 0, the others -1. A column
    the layout lacks reads as `none` / -1 (the reader's defaults), which is what it meant."""
    redops = rows.distinct("redop")
    roots = rows.column("root")
    layout_ok = "none" not in redops if shape.reduces else redops <= {"none"}
    return layout_ok and (min(roots) >= 0 if shape.rooted else min(roots) == max(roots) == -1)


def _numbers_fit(op: str, shape: OpShape, rows: Measurements, ranks: int) -> bool:
    return _sizes_fit(shape, rows, ranks) and _factor_fits(op, shape, rows, ranks)


def _sizes_fit(shape: OpShape, rows: Measurements, ranks: int) -> bool:
    if shape.size_in_ranks is None:
        return True
    per_count = ranks if shape.size_in_ranks else 1
    # element sizes looked up once per type printed, not once per row
    elements = {dtype: element_bytes(dtype) for dtype in rows.distinct("dtype")}
    for size, count, dtype in zip(rows.column("size"), rows.column("count"), rows.column("dtype")):
        element = elements[dtype]
        if element and count and size != count * element * per_count:
            return False
    return True


def _factor_fits(op: str, shape: OpShape, rows: Measurements, ranks: int) -> bool:
    """Each printed bandwidth is off by up to 0.005, so busbw - f x algbw is within 0.005 x (1 + f)."""
    factors = [ops.busbw_factor(op, ranks)] + [older(ranks) for older in shape.older_factors]
    busbws, algbws = rows.column("busbw"), rows.column("algbw")
    return any(
        all(abs(busbw - factor * algbw) <= 0.0051 * (1 + factor) + 1e-9 for busbw, algbw in zip(busbws, algbws))
        for factor in factors
    )


def _in_place_unchecked(rows: Measurements) -> bool:
    """Out-of-place results checked (a count) and every in-place one N/A: what alltoall prints."""
    seen_in_place = seen_out_of_place = False
    for in_place, wrong, printed in zip(rows.column("in_place"), rows.column("wrong"), rows.column("wrong_printed")):
        if in_place:
            if printed != "N/A":
                return False
            seen_in_place = True
        else:
            if wrong < 0:
                return False
            seen_out_of_place = True
    return seen_in_place and seen_out_of_place
