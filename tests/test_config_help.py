"""Each command's --help is generated from its typed config: every option field appears with its
default, and a parsed command line with no options is the config's own default (one home for both)."""

import argparse
import re
from dataclasses import fields

import pytest

from commbench.cli import build_parser
from commbench.commands.run import config_from_args
from commbench.config_options import add_config_arguments, default_text, flags_of, option_fields
from commbench.diagnose.config import DiagnoseConfig, FleetOptions
from commbench.measure.options import CalibrateConfig, OverlapConfig, RunConfig, is_overlap_option

# per command, its configs and which of their fields it offers (None: every documented one)
CONFIGS = {
    "run": ((RunConfig, None),),
    "diagnose": ((DiagnoseConfig, None), (FleetOptions, None)),
    "overlap": ((OverlapConfig, is_overlap_option),),
    "calibrate": ((CalibrateConfig, None),),
}


def command_help(name: str) -> str:
    parser = build_parser(only=name)
    sub = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return " ".join(sub.choices[name].format_help().split())  # argparse wraps lines: compare word by word


def _words(text: str) -> str:
    return " ".join(text.replace("%%", "%").split())


@pytest.mark.parametrize("command", sorted(CONFIGS))
def test_every_config_field_is_in_help_with_its_default(command):
    shown = command_help(command)
    for config, only in CONFIGS[command]:
        for f in option_fields(config):
            if only is not None and not only(f):
                continue
            flag = flags_of(f)[-1]
            assert re.search(rf"(^|[\s,\[]){re.escape(flag)}\b", shown), (
                f"{config.__name__}.{f.name}: {flag} not in help"
            )
            default = default_text(f)
            if default is not None:
                assert _words(f"(default {default})") in shown, (
                    f"{config.__name__}.{f.name}: default {default!r} not shown"
                )


def test_the_options_of_run_cover_its_config():
    """Every RunConfig field but the command line itself is an option."""
    assert {f.name for f in fields(RunConfig)} - {f.name for f in option_fields(RunConfig)} == {"argv"}
    assert {f.name for f in fields(DiagnoseConfig)} - {f.name for f in option_fields(DiagnoseConfig)} == {
        "command",
        "slurm",
    }


def test_run_with_no_options_is_the_config_default():
    args = build_parser(only="run").parse_args(["run"])
    assert config_from_args(args) == RunConfig().validate()


def test_overlap_and_calibrate_with_no_options_are_their_config_defaults():
    from commbench.commands import calibrate, overlap

    args = build_parser(only="overlap").parse_args(["overlap"])
    assert overlap.config_from_args(args) == OverlapConfig().validate()
    assert calibrate.config_from_args(build_parser(only="calibrate").parse_args(["calibrate"])) == CalibrateConfig()


def test_overlap_offers_its_own_defaults_and_only_its_options():
    """overlap's help states overlap's defaults (1M..64M by 4, 10 iterations), not run's, and offers
    none of run's pairwise or routing options."""
    shown = command_help("overlap")
    for text in ("smallest message size (default 1M)", "(default 4)", "per size (default 10)", "(default 1024)"):
        assert text in shown
    for flag in ("--pairwise", "--routing", "--scopes", "--ci-pct"):
        assert flag not in shown


def test_a_default_changed_in_the_config_changes_the_help():
    """The help reads the default from the field: a config with another default says so."""
    from dataclasses import dataclass

    from commbench.config_options import documented

    @dataclass
    class Sweep:
        max_bytes: int = documented("largest size", 1 << 30, shown=lambda size: f"{size >> 30}G")
        iters: int | None = documented("timed iterations", None, shown="adaptive")

    parser = argparse.ArgumentParser()
    add_config_arguments(parser, Sweep)
    text = " ".join(parser.format_help().split())
    assert "largest size (default 1G)" in text and "timed iterations (default adaptive)" in text
    assert parser.parse_args([]).max_bytes == 1 << 30 and parser.parse_args(["--iters", "3"]).iters == "3"


def test_estimate_offers_every_precision_of_the_model():
    """estimate --bytes lists the modelling layer's precisions, fp32 included, not a copy of them."""
    from commbench.modeling.job import PRECISIONS

    parser = build_parser(only="estimate")
    sub = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    option = next(a for a in sub.choices["estimate"]._actions if "--bytes" in a.option_strings)
    assert tuple(option.choices) == tuple(PRECISIONS) and "fp32" in option.choices
