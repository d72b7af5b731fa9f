"""A command imports only its own module: `commbench history` must not pay for torch, the planner or
the dashboard (a history query's goal is <= 1 s, issue 15, and the interpreter's imports count)."""

from __future__ import annotations

import subprocess
import sys

from commbench.cli import COMMANDS, build_parser


def imported_commands(argv: list[str]) -> set[str]:
    probe = (
        "import sys; from commbench.cli import build_parser, _command_named\n"
        f"build_parser(only=_command_named({argv!r}))\n"
        "print(' '.join(m for m in sys.modules if m.startswith('commbench.commands.')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    commands = {f"commbench.commands.{m}" for m in COMMANDS.values()}
    return set(out.split()) & commands  # helpers such as commands.store_options are not commands


def test_a_command_imports_only_its_own_module():
    assert imported_commands(["history", "--cluster", "x"]) == {"commbench.commands.history"}
    assert (
        "torch"
        not in subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from commbench.cli import build_parser; build_parser(only='history'); "
                "print(' '.join(sys.modules))",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    )


def test_help_and_typos_still_see_every_command():
    assert imported_commands(["--help"]) == {f"commbench.commands.{m}" for m in COMMANDS.values()}
    assert imported_commands(["histor"]) == {f"commbench.commands.{m}" for m in COMMANDS.values()}
    choices = build_parser(only="history")._subparsers._group_actions[0].choices
    assert set(choices) == set(COMMANDS)
