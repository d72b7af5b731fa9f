"""Execution options (which collectives the framework overlaps), fp32 precision, processor files, and the CLI flags."""

import argparse
import json
from dataclasses import replace

import pytest

from commbench.commands import plan
from commbench.errors import UsageError
from commbench.modeling.cluster import Cluster
from commbench.modeling.hardware import PRESET_DIR, load_processor, load_system
from commbench.modeling.job import EXECUTIONS, PRECISIONS, TrainingJob
from commbench.modeling.layout import LayoutBatch, parse_layout
from commbench.modeling.memory import micro_batches, stage_parameters
from commbench.modeling.models import PRESETS
from commbench.modeling.network import Placement, PresetNetwork
from commbench.modeling.schedule import simulate
from commbench.modeling.spec import build_planner
from commbench.modeling.step import StepModel

DGX = load_system("dgx-h100")
NODE = Placement(8, 1)  # every group below sits inside one 8-GPU node
MODEL = PRESETS["llama2-7b"]
SEQ = 4096


# torch eager's kernels with Megatron's overlapped collectives and fused gradient accumulation: the
# comparisons below differ in what overlaps, not in which kernels run
OVERLAPPED = replace(
    EXECUTIONS["torch-eager"],
    name="overlapped",
    tp_backward_overlap=True,
    zero3_reduce_scatter_overlap=True,
    fused_grad_accumulation=True,
)


def step_model(execution: str, global_batch: int = 8, cost=None) -> StepModel:
    # no overlap slowdown, so a hidden collective costs exactly nothing and an exposed one its full time
    cluster = Cluster(8, DGX, cost or PresetNetwork(DGX), slowdown_intra=0.0, slowdown_inter=0.0)
    chosen = OVERLAPPED if execution == "megatron" else EXECUTIONS[execution]
    return StepModel(TrainingJob(MODEL, SEQ, global_batch, execution=chosen), cluster)


def both_models(model: StepModel, text: str) -> tuple[float, float]:
    """Closed-form and event-simulated step time of one layout."""
    layout = parse_layout(text, 8)
    return float(model.evaluate(LayoutBatch.from_layouts([layout])).step_s[0]), simulate(model, layout).step_s


def test_torch_eager_tp_pays_every_backward_all_reduce():
    text = "tp=8,dp=1,mbs=1,sp=0"
    megatron, eager = step_model("megatron"), step_model("torch-eager")
    batch = LayoutBatch.from_layouts([parse_layout(text, 8)])
    m = int(micro_batches(megatron.job, batch)[0])
    net = PresetNetwork(DGX)
    activation = SEQ * MODEL.hidden * megatron.job.activation_bytes
    all_reduce = float(net.time_s("all_reduce", activation, 8, NODE))
    loss_all_reduce = float(net.time_s("all_reduce", SEQ * 4.0, 8, NODE))
    # Megatron hides all backward all-reduces (2 per layer, 1 for the head) behind the weight-gradient GEMMs
    assert megatron.evaluate(batch).categories["tp"][0] == pytest.approx(
        m * (MODEL.layers * 2 * all_reduce + 3 * loss_all_reduce)
    )
    assert eager.evaluate(batch).categories["tp"][0] == pytest.approx(
        m * (MODEL.layers * 4 * all_reduce + all_reduce + 3 * loss_all_reduce)
    )
    exposed = m * (MODEL.layers * 2 + 1) * all_reduce
    accumulation = float(eager.accumulation_seconds(batch, m)[0])  # torch eager adds gradients unfused
    for fast, slow in zip(both_models(megatron, text), both_models(eager, text)):
        assert slow - fast == pytest.approx(exposed + accumulation)


def test_torch_eager_zero3_reduce_scatter_blocks():
    text = "dp=8,mbs=1,zero=3"
    megatron, eager = step_model("megatron", global_batch=16), step_model("torch-eager", global_batch=16)
    batch = LayoutBatch.from_layouts([parse_layout(text, 8)])
    m = int(micro_batches(megatron.job, batch)[0])
    dense, _ = stage_parameters(megatron.job, batch)
    per_layer_bytes = float(dense[0]) / MODEL.layers * megatron.job.precision.grad_bytes
    reduce_scatter = float(PresetNetwork(DGX).time_s("reduce_scatter", per_layer_bytes, 8, NODE))
    accumulation = float(eager.accumulation_seconds(batch, m)[0])
    for fast, slow in zip(both_models(megatron, text), both_models(eager, text)):
        assert slow - fast == pytest.approx(m * MODEL.layers * reduce_scatter + accumulation)


@pytest.mark.parametrize("text", ["dp=8,mbs=1,zero=0", "dp=4,pp=2,mbs=1", "dp=8,mbs=1,zero=1"])
def test_execution_leaves_layouts_without_tp_or_zero3_alone(text):
    """Apart from accumulating gradients over micro-batches, which torch eager does unfused."""
    megatron, eager = step_model("megatron"), step_model("torch-eager")
    batch = LayoutBatch.from_layouts([parse_layout(text, 8)])
    m = micro_batches(eager.job, batch)
    accumulation = float(eager.accumulation_seconds(batch, m)[0])
    for fast, slow in zip(both_models(megatron, text), both_models(eager, text)):
        assert slow - fast == pytest.approx(accumulation)


def test_unfused_gradient_accumulation_is_m_minus_1_passes_over_the_kept_gradients():
    eager = step_model("torch-eager", global_batch=32)
    for text, kept_share in (("dp=8,mbs=1,zero=1", 1.0), ("dp=8,mbs=1,zero=2", 1 / 8)):
        batch = LayoutBatch.from_layouts([parse_layout(text, 8)])
        m = int(micro_batches(eager.job, batch)[0])
        dense, _ = stage_parameters(eager.job, batch)
        expected = (
            (m - 1) * 3 * eager.job.precision.grad_bytes * float(dense[0]) * kept_share / DGX.processor.memory_bandwidth
        )
        assert m == 4 and float(eager.accumulation_seconds(batch, m)[0]) == pytest.approx(expected)
    assert float(step_model("megatron").accumulation_seconds(batch, m)[0]) == 0.0  # fused into the GEMMs


class RecordingCost(PresetNetwork):
    def __init__(self, system):
        super().__init__(system)
        self.ops = set()

    def time_s(self, op, size_bytes, group_size, placement):
        self.ops.add(op)
        return super().time_s(op, size_bytes, group_size, placement)


def test_no_pipeline_send_is_priced_without_a_pipeline():
    cost = RecordingCost(DGX)
    step_model("megatron", cost=cost).evaluate(LayoutBatch.from_layouts([parse_layout("dp=8,mbs=1", 8)]))
    assert cost.ops and "sendrecv" not in cost.ops


def test_fp32_precision_has_fp32_activations_unless_told_otherwise():
    fp32 = PRECISIONS["fp32"]
    assert (fp32.param_bytes, fp32.grad_bytes, fp32.optimizer_bytes, fp32.bytes_per_param) == (4, 4, 8, 16)
    assert TrainingJob(MODEL, SEQ, 8, fp32).activation_bytes == 4
    assert TrainingJob(MODEL, SEQ, 8).activation_bytes == 2
    assert TrainingJob(MODEL, SEQ, 8, fp32, activation_bytes=2).activation_bytes == 2


def device_file(tmp_path):
    """A processor description outside the presets: the H100 preset renamed."""
    raw = json.loads((PRESET_DIR / "processor-h100.json").read_text())
    raw["name"] = "measured device"
    path = tmp_path / "device.json"
    path.write_text(json.dumps(raw))
    return path


def test_processor_from_a_json_file(tmp_path):
    path = device_file(tmp_path)
    loaded = load_processor(str(path))
    assert loaded.name == "measured device"
    assert loaded.gemm_curve == load_processor("h100").gemm_curve
    with pytest.raises(UsageError, match="no such file"):
        load_processor(str(tmp_path / "missing.json"))
    path.write_text("{}")
    with pytest.raises(UsageError, match="not a processor"):
        load_processor(str(path))


def test_cli_flags_reach_the_job_and_cluster(tmp_path):
    path = device_file(tmp_path)
    parser = argparse.ArgumentParser()
    plan.add_arguments(parser)
    args = parser.parse_args(
        [
            "--model",
            "llama2-7b",
            "--gpus",
            "8",
            "--global-batch",
            "8",
            "--seq-len",
            "4096",
            "--processor",
            str(path),
            "--precision",
            "fp32",
            "--execution",
            "torch-eager",
        ]
    )
    planner = build_planner(plan.spec_from_args(args))
    assert planner.cluster.system.processor.name == "measured device"
    assert planner.job.precision is PRECISIONS["fp32"] and planner.job.activation_bytes == 4
    assert planner.job.execution is EXECUTIONS["torch-eager"]


def test_elementwise_efficiency_scales_only_the_elementwise_work(tmp_path):
    from dataclasses import replace

    from commbench.modeling.compute import layer_compute

    h100 = load_processor("h100")
    assert h100.elementwise_efficiency == 1.0  # presets leave it out: elementwise at memory bandwidth
    half = replace(h100, elementwise_efficiency=0.5)
    job, batch = TrainingJob(MODEL, SEQ, 8), LayoutBatch.from_layouts([parse_layout("tp=8,dp=1,mbs=1", 8)])
    fast, slow = layer_compute(job, batch, h100), layer_compute(job, batch, half)
    assert slow.fwd_elementwise == pytest.approx(2 * fast.fwd_elementwise)
    assert slow.fwd_gemm == pytest.approx(fast.fwd_gemm) and slow.fwd_attention == pytest.approx(fast.fwd_attention)
    raw = json.loads(device_file(tmp_path).read_text())
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({**raw, "elementwise_efficiency": {"value": 0.25, "source": "measured"}}))
    assert load_processor(str(path)).elementwise_efficiency == 0.25
    for bad in (0, 1.5, "nan"):
        path.write_text(json.dumps({**raw, "elementwise_efficiency": bad}))
        with pytest.raises(UsageError, match="elementwise_efficiency"):
            load_processor(str(path))


def test_te_tp_overlap_hides_forward_tp_only_inside_one_nvlink_domain():
    """Transformer Engine's TP communication overlap runs over NVLink: a TP=16 group on two DGX H100
    hosts pays every forward TP collective whole, as without the overlap; TP=8 inside a host hides it."""
    job = TrainingJob(PRESETS["llama3-70b"], SEQ, 64, execution=EXECUTIONS["megatron-core"])
    blocking = replace(job, execution=replace(EXECUTIONS["megatron-core"], tp_forward_overlap=False))
    cluster = Cluster(16, DGX, PresetNetwork(DGX), slowdown_intra=0.0, slowdown_inter=0.0)
    batch = LayoutBatch.from_layouts([parse_layout(t, 16) for t in ("tp=16,dp=1,mbs=1", "tp=8,dp=2,mbs=1")])
    overlapped, plain = (StepModel(j, cluster).evaluate(batch).categories["tp"] for j in (job, blocking))
    assert overlapped[0] == pytest.approx(plain[0])  # across hosts: nothing hidden
    assert overlapped[1] < 0.8 * plain[1]  # inside one host: the forward collectives hide behind the GEMMs
