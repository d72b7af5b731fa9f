"""The processor JSON schema (commbench/modeling/hardware.py): the kernel-by-kernel fields
`commbench calibrate` writes are read back exactly, are optional, and bad values are refused."""

import json

import pytest

from commbench.errors import UsageError
from commbench.modeling.hardware import PRESET_DIR, load_processor

KERNEL_FIELDS = {
    "sm_count": {"value": 132, "source": "test"},
    "gemm_tile": {"value": [128, 256], "source": "test"},
    "gemm_surface": {"value": {"bf16": [[4096, 4096, 4096, 0.7], [512, 512, 512, 0.2]]}, "source": "test"},
    "attention_rates": {"value": {"flash2": {"forward": 0.5, "backward": 0.4}}, "source": "test"},
    "kernel_overhead_s": {"value": 4e-6, "source": "test"},
    "autograd_op_s": {"value": {"forward": 3e-6, "backward": 2e-6}, "source": "test"},
    "optimizer_efficiency": {"value": 0.8, "source": "test"},
}


def write(tmp_path, extra: dict):
    raw = json.loads((PRESET_DIR / "processor-h100.json").read_text())
    for key in KERNEL_FIELDS:
        raw.pop(key, None)
    raw.update(extra)
    path = tmp_path / "device.json"
    path.write_text(json.dumps(raw))
    return str(path)


def test_kernel_fields_are_read_back(tmp_path):
    proc = load_processor(write(tmp_path, KERNEL_FIELDS))
    assert proc.sm_count == 132 and proc.gemm_tile == (128, 256)
    assert proc.surface("bf16").tolist() == [[4096, 4096, 4096, 0.7], [512, 512, 512, 0.2]]
    assert proc.surface("fp32") is None
    assert proc.attention_rate("flash2") == (0.5, 0.4)
    assert proc.kernel_overhead_s == 4e-6 and proc.optimizer_efficiency == 0.8
    assert proc.autograd_op_s == (3e-6, 2e-6)
    assert proc.sources["gemm_surface"] == "test"


def test_kernel_fields_are_optional(tmp_path):
    proc = load_processor(write(tmp_path, {}))
    assert (proc.sm_count, proc.gemm_tile, proc.gemm_surface) == (None, None, ())
    assert proc.attention_rate("flash3") == (proc.attention_efficiency,) * 2
    assert (proc.kernel_overhead_s, proc.optimizer_efficiency, proc.autograd_op_s) == (0.0, 1.0, (0.0, 0.0))


@pytest.mark.parametrize(
    "key, value",
    [
        ("sm_count", 0),
        ("sm_count", 1.5),
        ("gemm_tile", [128]),
        ("gemm_tile", [0, 128]),
        ("gemm_surface", {"int8": [[1, 1, 1, 0.5]]}),
        ("gemm_surface", {"bf16": [[64, 64, 64, 1.5]]}),
        ("gemm_surface", {"bf16": []}),
        ("gemm_surface", {"bf16": [[64, 64, 0.5]]}),
        ("attention_rates", {"flash2": {"forward": 0.5}}),
        ("attention_rates", {"flash2": {"forward": 0, "backward": 1}}),
        ("kernel_overhead_s", -1e-6),
        ("kernel_overhead_s", float("nan")),
        ("optimizer_efficiency", 2),
        ("autograd_op_s", {"forward": 1e-6}),
        ("autograd_op_s", {"forward": -1e-6, "backward": 0.0}),
    ],
)
def test_bad_kernel_fields_are_one_line(tmp_path, key, value):
    with pytest.raises(UsageError, match="not a processor description"):
        load_processor(write(tmp_path, {key: {"value": value, "source": "test"}}))
