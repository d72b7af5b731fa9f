"""The layout's rules: every module's imports, read from its source with `ast`, and the one home of op facts.

- every module in commbench/ and dashboard/ opens with a docstring;
- no import cycle in commbench/ or dashboard/ (imports inside functions count: they run too);
- the dashboard never imports commbench.commands; commbench imports dashboard only from the
  dashboard command;
- commbench.modeling, commbench.data, commbench.traces, commbench.analysis and commbench.diagnose never import torch (the trace demo,
  which trains a model to produce a trace, is the one exception);
- a measuring driver never imports another driver, nor subclasses anything;
- README's "Layout of the code" names every module and package under commbench/ and
  commbench/measure/, and nothing that is not there;
- one home per op fact: every op commbench measures has a declaration in collectives/ and vice
  versa; the declarations, the network model and the nccl-tests reader take the busbw factor from
  ops.py, and no module but ops.py spells a ring formula (n - 1) / n.
Imports under `if TYPE_CHECKING:` are left out: they never run.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path

import pytest

from commbench import dtypes, ops, scopes

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("commbench", "dashboard")
TORCH_FREE = ("commbench.modeling", "commbench.data", "commbench.traces", "commbench.analysis", "commbench.diagnose")
TORCH_ALLOWED_IN = ("commbench.traces.demo",)  # trains a small DDP model to produce a trace
DASHBOARD_COMMAND = "commbench.commands.dashboard"
DRIVERS = (
    "commbench.measure.sweep",
    "commbench.measure.pairwise",
    "commbench.measure.overlap",
    "commbench.measure.diagnose",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def _is_type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _runtime_import_nodes(tree: ast.AST):
    """Import statements anywhere in the module (functions included), except under TYPE_CHECKING."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if _is_type_checking_block(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def imported_names(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module `name` imports: a known module where the import names one, else the raw name."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _runtime_import_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:  # relative import
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join(anchor + ([base] if base else []))
        for alias in node.names:
            candidate = f"{base}.{alias.name}"
            found.add(candidate if candidate in known else base)  # `from pkg import module` or a name
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = all_modules()
    known = set(modules)
    return {name: imported_names(name, path, known) for name, path in modules.items()}


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle among the known modules, as the path that closes it, or None."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" after

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for target in sorted(graph.get(node, ())):
            if target not in graph:
                continue
            if state.get(target) == "open":
                return path[path.index(target) :] + [target] if target in path else [node, target]
            if target not in state and (cycle := visit(target, path + [target])):
                return cycle
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [start])):
            return cycle
    return None


def test_every_module_opens_with_a_docstring():
    missing = sorted(name for name, path in all_modules().items() if not ast.get_docstring(ast.parse(path.read_text())))
    assert not missing, f"modules without a docstring saying what they own: {missing}"


def test_no_import_cycle(graph):
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "os"}, "b": set()}) is None


def test_dashboard_never_imports_the_commands(graph):
    offenders = {
        m: sorted(t for t in targets if _within(t, "commbench.commands"))
        for m, targets in graph.items()
        if _within(m, "dashboard")
    }
    assert not {m: t for m, t in offenders.items() if t}


def test_commbench_imports_dashboard_only_from_its_command(graph):
    offenders = sorted(
        m
        for m, targets in graph.items()
        if _within(m, "commbench") and m != DASHBOARD_COMMAND and any(_within(t, "dashboard") for t in targets)
    )
    assert not offenders


def test_drivers_never_import_each_other(graph):
    assert all(name in graph for name in DRIVERS), "a driver moved: update DRIVERS"
    offenders = {driver: sorted(t for t in graph[driver] if t in DRIVERS and t != driver) for driver in DRIVERS}
    assert not {d: t for d, t in offenders.items() if t}


def test_drivers_override_nothing():
    """A driver is a plain class the runner calls through its public methods: no base class whose
    hooks it could override (pairwise and overlap once subclassed the sweep and replaced _run_rows)."""
    modules = all_modules()
    subclasses = sorted(
        f"{driver}.{node.name}"
        for driver in DRIVERS
        for node in ast.walk(ast.parse(modules[driver].read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and node.bases
    )
    assert not subclasses, f"driver classes with a base class: {subclasses}"


def test_torch_free_layers_never_import_torch(graph):
    offenders = sorted(
        m
        for m, targets in graph.items()
        if any(_within(m, layer) for layer in TORCH_FREE)
        and m not in TORCH_ALLOWED_IN
        and any(_within(t, "torch") for t in targets)
    )
    assert not offenders, f"these modules import torch: {offenders}"


def _layout_section() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return readme.split("## Layout of the code", 1)[1].split("\n## ", 1)[0]


def test_readme_layout_matches_the_tree():
    layout = _layout_section()
    present = {
        p.name
        for folder in ("commbench", "commbench/measure")
        for p in (ROOT / folder).iterdir()
        if (p.suffix == ".py" or p.is_dir()) and p.name not in ("__init__.py", "__main__.py", "__pycache__")
    }
    missing = sorted(
        name for name in present if name.removesuffix(".py") + (".py" if name.endswith(".py") else "/") not in layout
    )
    assert not missing, f"README's layout does not mention {missing}"
    named = set(re.findall(r"\b([a-z_]+\.py)\b", layout))
    gone = sorted(
        name
        for name in named
        if not any(
            (ROOT / folder / name).exists()
            for folder in (
                "commbench",
                "commbench/measure",
                "commbench/data",
                "commbench/traces",
                "commbench/modeling",
                "commbench/topology",
                "commbench/diagnose",
                "tests",
            )
        )
    )
    assert not gone, f"README's layout names files that are not there: {gone}"


def test_every_measured_op_has_a_declaration_and_vice_versa():
    from commbench.collectives import declarations

    modules = {path.stem for path in (ROOT / "commbench" / "collectives").glob("*.py")} - {"__init__", "base"}
    assert modules == set(ops.MEASURED_OPS), "ops.py and collectives/ disagree on the measured ops"
    assert all(declaration.name == name for name, declaration in declarations().items())


@pytest.fixture
def factor_42(monkeypatch):
    """ops.py's all_reduce factor replaced: whoever takes the factor from ops.py now says 42."""
    monkeypatch.setitem(ops.OPS, "all_reduce", replace(ops.OPS["all_reduce"], factor=lambda n, direction=None: 42.0))


def test_the_network_model_takes_factors_from_ops(factor_42):
    from commbench.modeling import network

    assert network.busbw_factor("all_reduce", 8) == 42.0
    assert set(network.OPS) <= set(ops.OPS)


def test_collective_declarations_take_factors_from_ops(factor_42):
    from commbench.collectives import get_collective
    from commbench.collectives.base import OUT_OF_PLACE

    assert get_collective("all_reduce").busbw_factor(8, OUT_OF_PLACE) == 42.0


def test_no_busbw_formula_outside_ops():
    """A second factor table would spell (n - 1) / n again: only ops.py may."""
    ring = re.compile(r"\((\w+) - 1\) / \1\b")
    offenders = sorted(
        name
        for name, path in all_modules().items()
        if name != "commbench.ops"
        and any(
            isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and ring.search(ast.unparse(node))
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        )
    )
    assert not offenders, f"busbw formulas outside commbench/ops.py: {offenders}"


def test_the_nccl_tests_reader_takes_factors_from_ops(factor_42):
    from commbench.data import nccl_tests

    assert nccl_tests.busbw_factor("all_reduce", 8) == 42.0


# one home for dtypes and scopes: a second table would list two of their names side by side
DTYPE_HOME, SCOPE_HOME = "commbench.dtypes", "commbench.scopes"
# spellings only a dtype table holds: "float", "int" or "long" also name Python and JSON types
DTYPE_WORDS = {spelling for dtype in dtypes.DTYPES.values() for spelling in (dtype.name, *dtype.spellings)} - {
    "float",
    "int",
    "long",
    "bool",
    "byte",
    "char",
    "short",
}


def _constants(nodes: list) -> bool:
    return all(isinstance(node, ast.Constant) for node in nodes)


def _string_items(node: ast.AST, dict_keys: bool) -> list[str] | None:
    """The strings of a literal tuple, list or set, a Literal[...], or (dict_keys) the keys of a dict
    of constants (a dict of computed values maps its keys, it does not list them), else None."""
    if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("Literal"):
        node = node.slice
    if isinstance(node, ast.Dict):
        items = node.keys if dict_keys and _constants(node.values) else None
    else:
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else None
    if not items or not _constants(items) or not all(isinstance(item.value, str) for item in items):
        return None
    return [item.value for item in items]


def _membership_tests(tree: ast.AST) -> set[int]:
    """ids of the literals on the right of `in`: `scope in ("intra", "pair")` asks, it lists nothing."""
    return {
        id(right)
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        for op, right in zip(node.ops, node.comparators)
        if isinstance(op, (ast.In, ast.NotIn))
    }


def tables_of(source: str, words: set[str], dict_keys: bool = True) -> list[str]:
    """The literals in `source` that name two or more of `words`: a table of them. dict_keys: a dict
    keyed by them counts (a dtype table is name -> bytes; a dict keyed by scope holds a per-tier fact)."""
    found, tree = [], ast.parse(source)
    asked = _membership_tests(tree)
    for node in ast.walk(tree):
        items = None if id(node) in asked else _string_items(node, dict_keys)
        if items is not None and len(words.intersection(items)) >= 2:
            found.append(ast.unparse(node))
    return found


def _tables_outside(home: str, words: set[str], dict_keys: bool) -> dict[str, list[str]]:
    found = {
        name: tables_of(path.read_text(encoding="utf-8"), words, dict_keys)
        for name, path in all_modules().items()
        if name != home
    }
    return {name: tables for name, tables in found.items() if tables}


def test_no_dtype_table_outside_dtypes():
    assert not _tables_outside(DTYPE_HOME, DTYPE_WORDS, dict_keys=True), "dtype facts belong in commbench/dtypes.py"


def test_no_scope_list_outside_scopes():
    assert not _tables_outside(SCOPE_HOME, set(scopes.SCOPES), dict_keys=False), (
        "the scope list belongs in commbench/scopes.py"
    )


def test_the_table_finder_finds_tables():
    """What the two tests above would flag: each of the old tables, and none of the lookups that replaced them."""
    assert tables_of('DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0}', DTYPE_WORDS)
    assert tables_of('GLOO = ("float", "half", "double", "int8")', DTYPE_WORDS)
    assert tables_of('Scope = Literal["world", "intra", "inter", "pair"]', set(scopes.SCOPES))
    assert tables_of('p.add_argument("--scope", choices=("world", "intra", "inter"))', set(scopes.SCOPES))
    assert tables_of('SYMBOLS = {"bf16": "circle", "fp16": "diamond"}', DTYPE_WORDS)
    assert not tables_of('x = ("float", "int")\nfor tier in NODE_TIERS: pass', DTYPE_WORDS | set(scopes.SCOPES))
    assert not tables_of('if scope in ("intra", "pair"): pass', set(scopes.SCOPES))
    assert not tables_of('net = {"intra": system.intra, "inter": system.inter}', set(scopes.SCOPES))
    assert not tables_of('USAGE = {"intra": 0.15, "inter": 0.02}', set(scopes.SCOPES), dict_keys=False)


SLOWDOWN_HOME = "commbench.data.calculon"  # Calculon's processor_usage; modeling/cluster.py takes it from there
_SLOWDOWN_WORDS = re.compile(r"\b15\s?%.{0,40}\b2\s?%", re.S)


def slowdown_literals(source: str) -> list[str]:
    """The default overlap slowdown typed again: 0.15 and 0.02 in one module, or "15% ... 2%" in one string."""
    tree = ast.parse(source)
    numbers = {
        node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, float)
    }
    found = ["0.15 and 0.02"] if {0.15, 0.02} <= numbers else []
    return found + [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _SLOWDOWN_WORDS.search(node.value)
    ]


def test_the_default_slowdown_has_one_home():
    from commbench.data.calculon import PROCESSOR_USAGE
    from commbench.modeling.cluster import DEFAULT_SLOWDOWN_INTER, DEFAULT_SLOWDOWN_INTRA

    assert (
        (DEFAULT_SLOWDOWN_INTRA, DEFAULT_SLOWDOWN_INTER)
        == (PROCESSOR_USAGE["intra"], PROCESSOR_USAGE["inter"])
        == (0.15, 0.02)
    )
    found = {
        name: slowdown_literals(path.read_text(encoding="utf-8"))
        for name, path in all_modules().items()
        if name != SLOWDOWN_HOME
    }
    assert not {name: hits for name, hits in found.items() if hits}, "the default slowdown belongs in data/calculon.py"


def test_the_slowdown_finder_finds_the_old_copies():
    assert slowdown_literals('HELP = "default 15% NVLink / 2% inter-node"')
    assert slowdown_literals('label = "defaults: 15% intra-node, 2% inter-node"')
    assert slowdown_literals('DEFAULTS = {"intra": (True, 0.15), "inter": (False, 0.02)}')
    assert not slowdown_literals('x = 0.15\nlabel = f"{x:.0%} intra-node"')


# the routing grammar is parsed in modeling/routing.py only; a config parses its --routing once
# (RunConfig.routing_model, PlanSpec.routing_model) and the rest reads the parsed Routing
ROUTING_PARSERS = {"commbench.modeling.routing", "commbench.modeling.spec", "commbench.measure.options"}


def routing_parse_calls(source: str) -> int:
    return sum(
        isinstance(node, ast.Call) and ast.unparse(node.func).endswith("parse_routing")
        for node in ast.walk(ast.parse(source))
    )


def test_only_the_configs_parse_a_routing_text():
    calls = {name: routing_parse_calls(path.read_text(encoding="utf-8")) for name, path in all_modules().items()}
    assert {name for name, count in calls.items() if count and name.startswith(("commbench", "dashboard"))} <= (
        ROUTING_PARSERS
    ), "parse --routing once in its config (routing_model) and pass the Routing on"
    assert routing_parse_calls("from x import parse_routing\nr = parse_routing(cfg.routing)") == 1
