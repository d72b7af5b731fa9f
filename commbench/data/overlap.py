"""The record of one `commbench overlap` row: a collective and a GEMM, alone and at once.

OverlapRecord is a Record (commbench/data/schema.py, one schema version for both) whose
inherited timing fields describe the collective run alone, so an overlap run also prices
collectives like a sweep; the fields below are added. Readers of run directories (load_run)
validate lines as Record, which keeps these fields as extras. All times are medians over the
timed iterations in microseconds, all from the rank whose both_us is largest (slowest_rank).

Overlap achieved (our definition for a controlled pair, not the trace's HTA one):
    overlap = (compute_us + comm_us - both_us) / min(compute_us, comm_us)
1 means the shorter operation hid completely behind the longer one (both = max), 0 means they
ran as if one after the other (both = compute + comm). Contention can push both_us past the
serial sum (below 0) and noise can push it under the longer one (above 1): `overlap` is
clamped to [0, 1], `overlap_unclamped` keeps the raw value.
"""

from __future__ import annotations

from pydantic import Field

from commbench.data.schema import Record


class OverlapRecord(Record):
    gemm_size: int = Field(description="M = N = K of the GEMM that runs beside the collective")
    gemm_dtype: str = Field(description="element type of the GEMM (bfloat16 on GPU, float32 on CPU)")
    gemm_threads: int = Field(description="CPU threads the GEMM may use (torch intra-op threads); 0 on GPU")
    gemm_tflops: float = Field(description="2*M*N*K / compute_us: the GEMM's rate alone, TFLOP/s")
    compute_us: float = Field(description="GEMM alone")
    comm_us: float = Field(description="collective alone (equals time_us)")
    both_us: float = Field(description="GEMM and collective started together, until the later one ends")
    compute_during_comm_us: float = Field(description="the GEMM's own duration while the collective runs")
    comm_during_compute_us: float = Field(description="the collective's own duration while the GEMM runs")
    overlap: float = Field(description="(compute + comm - both) / min(compute, comm), clamped to [0, 1]")
    overlap_unclamped: float = Field(description="the same before clamping")
    compute_slowdown: float = Field(description="compute_during_comm_us / compute_us (1.0 = not slowed)")
    comm_slowdown: float = Field(description="comm_during_compute_us / comm_us (1.0 = not slowed)")


OVERLAP_FIELDS: list[str] = [name for name in OverlapRecord.model_fields if name not in Record.model_fields]


def overlap_achieved(compute_us: float, comm_us: float, both_us: float) -> float:
    """(compute + comm - both) / min(compute, comm), unclamped; 0 when either takes no time."""
    shorter = min(compute_us, comm_us)
    return (compute_us + comm_us - both_us) / shorter if shorter > 0 else 0.0
