"""Command-line options generated from a typed config: one dataclass field, one option.

A command's config (RunConfig, DiagnoseConfig, ...) documents each field with `documented(...)`:
its help text, its flags, how the command line spells it and the concern it belongs to (the
--help section). `add_config_arguments` turns those fields into argparse options whose defaults
are the fields' own, so the help, the parsed default and the config cannot disagree; and
`config_values` reads the parsed options back into the config's keyword arguments. PlanSpec's
options are made the same way (commands/plan.py). Torch-free and argparse-only.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import MISSING, Field, field, fields
from typing import Any, TypeVar

from commbench.errors import UsageError
from commbench.units import parse_size

T = TypeVar("T")

# ---- parsers of option text (argparse's `type`): a bad value is one line and exit 2


def csv_list(choices: tuple[str, ...] | None) -> Callable[[str], tuple[str, ...]]:
    """Comma-separated names, each one of `choices` (any when None)."""

    def parse(text: str) -> tuple[str, ...]:
        items = tuple(item.strip() for item in text.split(",") if item.strip())
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        if choices:
            bad = [item for item in items if item not in choices]
            if bad:
                raise argparse.ArgumentTypeError(f"unknown {bad[0]!r}; choose from {', '.join(choices)}")
        return items

    return parse


def as_argument(check: Callable[[str], T], text: str) -> T:
    """check(text) for argparse's `type`: a UsageError becomes argparse's one line and exit 2."""
    try:
        return check(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def size_arg(text: str) -> int:
    """A byte size: 8, 1K, 64M (binary)."""
    return as_argument(parse_size, text)


def tokens_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(item) for item in text.split(",") if item.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers separated by commas, got {text!r}") from None


def documented(
    doc: str,
    default: Any = MISSING,
    *,
    flags: tuple[str, ...] = (),
    group: str = "",
    parse: Callable[[str], Any] | None = None,
    choices: tuple[str, ...] | None = None,
    metavar: str | None = None,
    shown: str | Callable[[Any], str] | None = None,
    default_factory: Callable[[], Any] | None = None,
    argparse: dict[str, Any] | None = None,
) -> Any:
    """A config field that is also a command-line option.

    doc       the option's help, without its default (added from the field's default)
    flags     the option strings; default --<field-name-with-dashes>
    group     the --help section (the concern: sweep, timing, pairwise, MoE routing, output ...)
    parse     argparse's `type` (text -> value)
    shown     the default as --help prints it: a text, or a function of the default; a default of
              None is left unsaid unless `shown` says what it means
    A bool field is a switch: --flag sets True; a field that defaults to True is turned off by
    its flag (name it --no-...). argparse: further add_argument keywords (nargs, const)."""
    metadata = {
        "doc": doc,
        "flags": flags,
        "group": group,
        "parse": parse,
        "choices": choices,
        "metavar": metavar,
        "shown": shown,
        "argparse": argparse or {},
    }
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def option_fields(config: type) -> list[Field[Any]]:
    """The fields of `config` that are command-line options, in declaration order."""
    return [f for f in fields(config) if "doc" in f.metadata]


def field_default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def flags_of(f: Field[Any]) -> tuple[str, ...]:
    return f.metadata["flags"] or ("--" + f.name.replace("_", "-"),)


def default_text(f: Field[Any]) -> str | None:
    """The default as --help states it, or None when there is nothing to state (a switch, no default)."""
    default, shown = field_default(f), f.metadata["shown"]
    if callable(shown):
        return str(shown(default))
    if shown is not None:
        return str(shown)
    if default is MISSING or default is None or isinstance(default, bool):
        return None
    if isinstance(default, tuple):
        return ", ".join(str(item) for item in default)
    return f"{default:g}" if isinstance(default, float) else str(default)


def help_text(f: Field[Any]) -> str:
    shown = default_text(f)
    text = str(f.metadata["doc"]) + (f" (default {shown})" if shown is not None else "")
    return text.replace("%", "%%")  # argparse formats help with %


def add_config_arguments(
    parser: argparse.ArgumentParser, config: type, only: Callable[[Field[Any]], bool] = lambda f: True
) -> None:
    """One option per documented field of `config` (those `only` keeps), in --help sections by group."""
    groups: dict[str, Any] = {}
    for f in option_fields(config):
        if not only(f):
            continue
        group = f.metadata["group"]
        target = groups.setdefault(group, parser.add_argument_group(group) if group else parser)
        default = field_default(f)
        kwargs: dict[str, Any] = {"dest": f.name, "help": help_text(f)}
        if isinstance(default, bool):
            kwargs.update(action="store_false" if default else "store_true")
        else:
            kwargs.update(default=None if default is MISSING else default, required=default is MISSING)
            for name in ("choices", "metavar"):
                if f.metadata[name] is not None:
                    kwargs[name] = f.metadata[name]
            if f.metadata["parse"] is not None:
                kwargs["type"] = f.metadata["parse"]
        target.add_argument(*flags_of(f), **kwargs, **f.metadata["argparse"])


def config_values(args: argparse.Namespace, config: type) -> dict[str, Any]:
    """The config's keyword arguments from the parsed options (every documented field argparse has)."""
    return {f.name: getattr(args, f.name) for f in option_fields(config) if hasattr(args, f.name)}
