"""The largest inputs the models accept, and the check every input goes through where it enters.

The maxima sit far above any published model or cluster (Llama 3.1 405B: hidden 16384, 126
layers, 128 heads, ffn 53248, vocab 128256; DeepSeek-V3: 256 experts; the largest reported
clusters: ~10^5 GPUs; global batches: a few thousand sequences), and low enough that every
count derived from them stays exact in int64 and finite in float64, that the planner's
enumeration (divisors of the GPU count and of the layers) stays quick, and that one simulated step
(micro-batches x pipeline stages x model chunks) stays a bounded amount of work. A value past a
maximum is a typo or a hostile file, not a model to plan for; it is refused with a UsageError
naming the input.
"""

from __future__ import annotations

import math

from commbench.errors import UsageError

# model description (ModelSpec, or a Hugging Face config.json)
MAX_HIDDEN = 2**20
MAX_LAYERS = 10_000
MAX_HEADS = 2**16
MAX_HEAD_DIM = 2**14
MAX_FFN = 2**22
MAX_VOCAB = 2**24
MAX_EXPERTS = 2**16
MAX_SEQ_LEN = 2**24  # tokens per sequence, also the longest context a config may declare
MAX_PARAMS = 10**15  # parameters in one model; bounds every product of the sizes above

# cluster and job
MAX_GPUS = 2**18
MAX_GPUS_PER_NODE = 1024
MAX_GLOBAL_BATCH = 2**16  # sequences per optimizer step
MAX_TOP = 100  # layouts `plan` ranks (each one is simulated)
MAX_TOKENS = 1e18  # training tokens for `estimate`
MIN_MFU = 1e-3  # below this a training time is not an estimate of anything

# pipeline ops (forward and backward, all stages) the event simulator schedules for one step;
# layouts with more are refused (screening still prices them in closed form)
MAX_SIMULATED_OPS = 1_000_000
# events one simulated timeline keeps; a longer step is cut there, and the result says so
MAX_TIMELINE_EVENTS = 200_000


def whole_number(what: str, value: object, low: int, high: int) -> int:
    """`value` as an int in [low, high]: an int, or a float without a fraction (JSON writes 4096.0
    for some sizes); booleans, text, NaN and infinities are refused, naming `what`."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{what} must be a whole number, not {_short(value)}")
    if not low <= value <= high:
        raise UsageError(f"{what} must be between {low} and {high:,}, not {_short(value)}")
    return value


def finite_number(what: str, value: float, low: float, high: float) -> float:
    """`value` if it is finite and in (low, high]; else a UsageError naming `what`."""
    if not (math.isfinite(value) and low < value <= high):
        raise UsageError(f"{what} must be a number above {low:g} and at most {high:g}, not {_short(value)}")
    return value


def _short(value: object) -> str:
    """The value as the message describes it: numbers as they are (a 300-digit one shortened), text
    and containers by their type and length only, so no message quotes a file's words (a config read
    on a shared dashboard must not echo what it holds)."""
    if isinstance(value, str):
        return f"text ({len(value)} characters)"
    if isinstance(value, (list, dict, tuple)):
        return f"a {type(value).__name__} of {len(value)} items"
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"
