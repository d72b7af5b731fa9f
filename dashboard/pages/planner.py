"""Planner: rank training layouts for a model on a cluster, priced from a preset or a measured run."""

import dash
from dash import Input, Output, State, callback, dcc, html

from commbench.errors import CommbenchError, UsageError
from commbench.modeling.cluster import DEFAULT_SLOWDOWN_WORDS
from commbench.modeling.hardware import load_processor, load_system
from commbench.modeling.job import DISPATCH_DTYPES, DISPATCHERS, LORA_BASES
from commbench.modeling.spec import FINETUNES, MOE_OVERLAPS, TP_COMM_OVERLAPS, PlanSpec
from dashboard.app import plan_cache, results
from dashboard.data import safe_path
from dashboard.figures.common import message_figure
from dashboard.figures.planner import (
    breakdown_figure,
    memory_figure,
    ranked_rows,
    stage_memory_figure,
    step_timeline_figure,
)
from dashboard.figures.processor import gemm_surface_figure
from dashboard.planning import (
    PlanRequest,
    compute_precision_names,
    default_gpus_per_node,
    default_nvlink_domain,
    execution_names,
    hardware_names,
    model_names,
    network_names,
    precision_names,
    processor_names,
)
from dashboard.ui import HIDDEN, SHOWN, columns_of, control, data_table, empty_state, notices, page_heading

dash.register_page(__name__, path="/planner", name="Planner", order=4, title="commbench · planner")

BANDWIDTH_KINDS = ("sweep", "import", "pairwise", "overlap")
PRESET_SOURCE = "preset"  # the "bandwidth from" choice that prices from the hardware preset's figures
NO_PROCESSOR = (
    "Give a processor above (the processor-HOST.json `commbench calibrate` writes) to compare its "
    "GEMM rates with the hardware preset's."
)
DEFAULTS = "defaults"  # the "slowdown from" choice that leaves the step model's default factors
# the controls, in the order the callbacks receive them, and the PlanSpec field each one sets
SPEC_CONTROLS = {
    "plan-model": "model",
    "plan-hardware": "hardware",
    "plan-gpus": "gpus",
    "plan-gpus-per-node": "gpus_per_node",
    "plan-nvlink-domain": "nvlink_domain",
    "plan-batch": "global_batch",
    "plan-seq": "seq_len",
    "plan-bandwidth": "bandwidth",
    "plan-precision": "precision",
    "plan-compute-precision": "compute_precision",
    "plan-fp8-param-gather": "fp8_param_gather",
    "plan-execution": "execution",
    "plan-tp-comm-overlap": "tp_comm_overlap",
    "plan-finetune": "finetune",
    "plan-lora-rank": "lora_rank",
    "plan-lora-targets": "lora_targets",
    "plan-lora-dropout": "lora_dropout",
    "plan-lora-base": "lora_base",
    "plan-transpose-cache": "transpose_cache",
    "plan-fp8-activation-input": "fp8_activation_input",
    "plan-model-dropout": "model_dropout",
    "plan-framework": "framework",
    "plan-processor": "processor",
    "plan-inter-network": "inter_network",
    "plan-slowdown": "slowdown",
    "plan-overlap-run": "overlap_run",
    "plan-top": "top",
    "plan-routing": "routing",
    "plan-dispatcher": "dispatcher",
    "plan-dispatch-dtype": "dispatch_dtype",
    "plan-moe-overlap": "moe_overlap",
    "plan-capacity-factor": "capacity_factor",
    "plan-pad-to-capacity": "pad_to_capacity",
    "plan-cuda-graph": "cuda_graph",
}
LAYOUT_CONTROL = "plan-layout"  # evaluate one layout instead of ranking, as `commbench plan --layout` does


def layout(**_query):
    return html.Div(
        [
            *page_heading(
                "Planner",
                "Every layout (TP, PP, DP, ZeRO, micro-batch, recompute ...) that divides the "
                "cluster, the model and the batch is priced; the fastest that fit in memory are simulated and "
                "ranked (or only the one layout given). Pick a row to see its simulated step. The controls "
                "are `commbench plan`'s options.",
            ),
            html.Div(_job_controls() + _cluster_controls(), className="controls"),
            html.Div(id="plan-notices"),
            html.Div(id="plan-summary", className="lead"),
            data_table(
                "plan-table", row_selectable="single", selected_rows=[0], sort_action="none", filter_action="none"
            ),
            html.Div([dcc.Graph(id="plan-breakdown"), dcc.Graph(id="plan-memory")], className="grid2"),
            dcc.Graph(id="plan-timeline"),
            dcc.Graph(id="plan-stages"),
            dcc.Graph(id="plan-gemm", style=HIDDEN),
            empty_state(NO_PROCESSOR, "plan-gemm-empty"),
        ]
    )


def _control(title: str, component, wide: bool = False):
    """A labelled control whose hover text is the help of the `commbench plan` option it sets."""
    box = control(title, component, wide)
    box.title = PlanSpec.doc(SPEC_CONTROLS[component.id])
    return box


def _number(control_id: str, value=None, placeholder: str | None = None, fraction: bool = False):
    """A number input: a whole number from 1, or with `fraction` any number from 0."""
    return dcc.Input(
        id=control_id,
        type="number",
        value=value,
        min=0 if fraction else 1,
        step="any" if fraction else 1,
        debounce=True,
        placeholder=placeholder,
    )


def _choice(control_id: str, options, value, **kwargs):
    return dcc.Dropdown(id=control_id, options=options, value=value, **kwargs)


def _job_controls() -> list:
    return [
        _control("model", _choice("plan-model", _choice_options("plan-model"), "llama2-7b", clearable=False)),
        _control("global batch", _number("plan-batch", 64)),
        _control("sequence length", _number("plan-seq", 4096)),
        _control(
            "precision", _choice("plan-precision", precision_names(), PlanSpec.default("precision"), clearable=False)
        ),
        _control(
            "compute precision",
            _choice(
                "plan-compute-precision",
                compute_precision_names(),
                PlanSpec.default("compute_precision"),
                clearable=False,
            ),
        ),
        _control(
            "parameter gather",
            dcc.Checklist(
                id="plan-fp8-param-gather",
                value=[],
                options=[{"label": " quantised (--fp8-param-gather)", "value": "on"}],
            ),
        ),
        _control(
            "execution", _choice("plan-execution", execution_names(), PlanSpec.default("execution"), clearable=False)
        ),
        _control(
            "TP comm overlap",
            _choice("plan-tp-comm-overlap", list(TP_COMM_OVERLAPS), None, placeholder="the execution's"),
        ),
        _control("finetune", _choice("plan-finetune", list(FINETUNES), PlanSpec.default("finetune"), clearable=False)),
        _control("LoRA rank", _number("plan-lora-rank", PlanSpec.default("lora_rank"))),
        _control(
            "LoRA targets",
            dcc.Input(id="plan-lora-targets", type="text", debounce=True, value=PlanSpec.default("lora_targets")),
        ),
        _control("LoRA dropout", _number("plan-lora-dropout", PlanSpec.default("lora_dropout"), fraction=True)),
        _control(
            "LoRA base", _choice("plan-lora-base", list(LORA_BASES), PlanSpec.default("lora_base"), clearable=False)
        ),
        _control(
            "transpose cache",
            _choice(
                "plan-transpose-cache", list(TP_COMM_OVERLAPS), PlanSpec.default("transpose_cache"), clearable=False
            ),
        ),
        _control(
            "FP8 activation input",
            dcc.Checklist(
                id="plan-fp8-activation-input",
                value=[],
                options=[{"label": " kept in FP8 (activation_func_fp8_input_store)", "value": "on"}],
            ),
        ),
        _control(
            "model dropout",
            _choice("plan-model-dropout", list(TP_COMM_OVERLAPS), PlanSpec.default("model_dropout"), clearable=False),
        ),
        _control(
            "framework",
            dcc.Input(id="plan-framework", type="text", debounce=True, placeholder="e.g. NeMo 25.11 (picks execution)"),
        ),
        _control("layouts to rank", _number("plan-top", PlanSpec.default("top"))),
        _control(
            "MoE routing", dcc.Input(id="plan-routing", type="text", debounce=True, placeholder="model's default")
        ),
        *_moe_controls(),
        control(
            "or evaluate one layout",
            dcc.Input(
                id=LAYOUT_CONTROL, type="text", debounce=True, placeholder="e.g. tp=2,dp=8 or tp=2,dp=16,ep=32,etp=1"
            ),
        ),
    ]


def _moe_controls() -> list:
    """The MoE execution choices (commbench.modeling.job.MoEExecution), as plan's options."""
    return [
        _control(
            "MoE dispatcher",
            _choice("plan-dispatcher", list(DISPATCHERS), PlanSpec.default("dispatcher"), clearable=False),
        ),
        _control(
            "MoE dispatch dtype",
            _choice("plan-dispatch-dtype", list(DISPATCH_DTYPES), PlanSpec.default("dispatch_dtype"), clearable=False),
        ),
        _control(
            "MoE overlap",
            _choice("plan-moe-overlap", list(MOE_OVERLAPS), PlanSpec.default("moe_overlap"), clearable=False),
        ),
        _control("MoE capacity factor", _number("plan-capacity-factor", placeholder="dropless", fraction=True)),
        _control(
            "pad to capacity",
            _choice(
                "plan-pad-to-capacity",
                [{"label": "no", "value": False}, {"label": "yes", "value": True}],
                PlanSpec.default("pad_to_capacity"),
                clearable=False,
            ),
        ),
        _control(
            "full-iteration CUDA graph",
            _choice(
                "plan-cuda-graph",
                [{"label": "no", "value": False}, {"label": "yes", "value": True}],
                PlanSpec.default("cuda_graph"),
                clearable=False,
            ),
        ),
    ]


def _cluster_controls() -> list:
    measured = [run for run in results().listing(BANDWIDTH_KINDS) if run.records]  # no run is read from a database
    sources = [{"label": "hardware preset figures", "value": PRESET_SOURCE}] + [
        {
            "label": f"{'synthetic' if run.synthetic else 'measured'}: {run.label} ({run.backend}, "
            f"{run.world_size} ranks)",
            "value": run.key,
        }
        for run in measured
    ]
    overlap_runs = [{"label": f"defaults: {DEFAULT_SLOWDOWN_WORDS}", "value": DEFAULTS}] + [
        {"label": f"{'synthetic' if run.synthetic else 'measured'}: {run.label}", "value": run.key}
        for run in measured
        if run.kind == "overlap"
    ]
    return [
        _control("hardware", _choice("plan-hardware", hardware_names(), PlanSpec.default("hardware"), clearable=False)),
        _control("GPUs", _number("plan-gpus", 16)),
        _control("GPUs per node", _number("plan-gpus-per-node", placeholder="preset")),
        _control("NVLink domain", _number("plan-nvlink-domain", placeholder="preset")),
        _control(
            "processor", _choice("plan-processor", _choice_options("plan-processor"), None, placeholder="preset's")
        ),
        _control("inter-node network", _choice("plan-inter-network", network_names(), None, placeholder="preset's")),
        _control("bandwidth from", _choice("plan-bandwidth", sources, PRESET_SOURCE, clearable=False), wide=True),
        _control("compute slowdown", _number("plan-slowdown", placeholder="e.g. 0.13", fraction=True)),
        _control("slowdown from", _choice("plan-overlap-run", overlap_runs, DEFAULTS, clearable=False), wide=True),
    ]


def _choice_options(control_id: str) -> list[dict]:
    """What the model or processor control offers now (presets, then files of the folder)."""
    if control_id == "plan-model":
        return _file_options(model_names(), results().model_files())
    return _file_options(processor_names(), results().processor_files())


def _file_options(presets: list[str], files: dict) -> list[dict]:
    return [{"label": name, "value": name} for name in presets] + [
        {"label": f"{key} (file)", "value": key} for key in files
    ]


def _chosen_file(value: str | None, presets: list[str], files: dict, what: str) -> str | None:
    """A preset name as it is, a file choice as its path; CommbenchError for anything else: the
    browser picks among what the page offered and never names a path on the server."""
    if value is None or value in presets:
        return value
    if value in files:
        return str(files[value])
    raise CommbenchError(f"{what}: not one of the presets or the files in the results folder (or --models)")


def _chosen_routing(text: str | None) -> str | None:
    """A routing model as given; a matrix file (file:KEY) only from inside the results folder."""
    if not text or not text.strip().startswith("file:"):
        return text
    try:
        return "file:" + str(safe_path(results().root, text.strip().removeprefix("file:")))
    except UsageError:
        raise CommbenchError(
            "MoE routing file: give a path inside the results folder (e.g. file:routing/counts.json)"
        ) from None


def _request(*values) -> PlanRequest:
    """The page's controls (SPEC_CONTROLS, then LAYOUT_CONTROL) as a plan request; raises
    CommbenchError for a choice that cannot be planned."""
    *spec_values, layout_text = values
    chosen = dict(zip(SPEC_CONTROLS.values(), spec_values))
    stamps = []
    for name, unset in (("bandwidth", PRESET_SOURCE), ("overlap_run", DEFAULTS)):
        chosen[name], stamp = _measured_run(chosen[name], unset)
        stamps.append(stamp)
    for name in (
        "gpus_per_node",
        "nvlink_domain",
        "processor",
        "inter_network",
        "routing",
        "capacity_factor",
        "framework",
        "tp_comm_overlap",
    ):  # empty means the preset's (the model's for the capacity factor)
        chosen[name] = chosen[name] or None
    for name in ("finetune", "lora_rank", "lora_targets", "lora_base", "transpose_cache", "model_dropout"):
        chosen[name] = chosen[name] or PlanSpec.default(name)  # empty means full training, MLPerf's rank and targets
    chosen["lora_dropout"] = (
        PlanSpec.default("lora_dropout") if chosen["lora_dropout"] is None else chosen["lora_dropout"]
    )
    chosen["fp8_activation_input"] = bool(chosen["fp8_activation_input"])  # the checklist's ["on"] or []
    store = results()
    chosen["model"] = _chosen_file(chosen["model"], model_names(), store.model_files(), "model")
    chosen["processor"] = _chosen_file(chosen["processor"], processor_names(), store.processor_files(), "processor")
    chosen["routing"] = _chosen_routing(chosen["routing"])
    chosen["compute_precision"] = chosen["compute_precision"] or PlanSpec.default("compute_precision")
    chosen["fp8_param_gather"] = bool(chosen["fp8_param_gather"])  # the checklist's ["on"] or []
    for name in ("dispatcher", "dispatch_dtype", "moe_overlap", "pad_to_capacity", "cuda_graph"):  # cleared: default
        chosen[name] = PlanSpec.default(name) if chosen[name] is None else chosen[name]
    return PlanRequest(PlanSpec(**chosen), tuple(stamps), (layout_text or "").strip() or None)


def _measured_run(key: str | None, unset: str) -> tuple[str | None, object]:
    """The run directory a run choice names and its files' signature, or (None, None) for `unset`."""
    if not key or key == unset:
        return None, None
    entry = results().entry(key)
    if entry.error:
        raise CommbenchError(f"{entry.key}: {entry.error}")
    return str(entry.path), entry.signature


@callback(
    Output("plan-gpus-per-node", "placeholder"),
    Output("plan-nvlink-domain", "placeholder"),
    Input("plan-hardware", "value"),
)
def show_preset_host_and_domain(hardware):
    return f"preset: {default_gpus_per_node(hardware)}", f"preset: {default_nvlink_domain(hardware)}"


@callback(
    Output("plan-table", "columns"),
    Output("plan-table", "data"),
    Output("plan-table", "selected_rows"),
    Output("plan-breakdown", "figure"),
    Output("plan-memory", "figure"),
    Output("plan-summary", "children"),
    Output("plan-notices", "children"),
    *[Input(control_id, "value") for control_id in (*SPEC_CONTROLS, LAYOUT_CONTROL)],
)
def rank_layouts(*controls):
    try:
        view = plan_cache().view(_request(*controls))
    except CommbenchError as exc:
        empty = message_figure(str(exc))
        return [], [], [], empty, empty, "", notices([str(exc)], "error")
    ranked = [result.to_dict() for result in view.ranked]
    rows = ranked_rows(view.ranked)
    summary = (
        f"{view.fitting} of {view.screened} layouts fit in {view.capacity_bytes / 1e9:.0f} GB; "
        f"network: {view.network}; execution: {view.execution}; compute slowdown under overlapping "
        f"communication: {view.slowdown_intra:.1%} intra-node, {view.slowdown_inter:.1%} inter-node"
        + (
            " (a group spanning nodes with several ranks in each: each rate over its phase's share)"
            if view.slowdown_intra != view.slowdown_inter
            else ""
        )
    )
    return (
        columns_of(rows),
        rows,
        [0],
        breakdown_figure(ranked),
        memory_figure(ranked, view.capacity_bytes),
        summary,
        notices(view.warnings),
    )


@callback(
    Output("plan-timeline", "figure"),
    Output("plan-stages", "figure"),
    Input("plan-table", "selected_rows"),
    *[State(control_id, "value") for control_id in (*SPEC_CONTROLS, LAYOUT_CONTROL)],
    prevent_initial_call=True,  # rank_layouts sets the selection once the plan exists
)
def simulate_chosen(selected, *controls):
    try:
        view = plan_cache().view(_request(*controls))
    except CommbenchError as exc:
        return message_figure(str(exc)), message_figure(str(exc))
    index = (selected or [0])[0]
    if index >= len(view.ranked):
        return message_figure("Pick a layout in the table."), message_figure("Pick a layout in the table.")
    chosen = view.ranked[index]
    return (
        step_timeline_figure(view.timeline(index), f"simulated step of #{index + 1} {chosen.layout}"),
        stage_memory_figure(chosen.to_dict(), view.capacity_bytes),
    )


@callback(
    Output("plan-gemm", "figure"),
    Output("plan-gemm", "style"),
    Output("plan-gemm-empty", "children"),
    Input("plan-processor", "value"),
    Input("plan-hardware", "value"),
)
def compare_gemm_rates(processor, hardware):
    """A processor given (e.g. the JSON `commbench calibrate` wrote) against the hardware preset's; without
    one (or with one that cannot be read), one sentence in place of the figure."""
    if not processor:
        return {}, HIDDEN, NO_PROCESSOR
    try:
        chosen = _chosen_file(processor, processor_names(), results().processor_files(), "processor")
        return gemm_surface_figure(load_processor(chosen), load_system(hardware).processor), SHOWN, None
    except CommbenchError as exc:
        return {}, HIDDEN, str(exc)
