"""The `commbench` command line: dispatches to commbench.commands.<name>."""

from __future__ import annotations

import argparse
import errno
import importlib
import re
import sys

from commbench import __version__
from commbench.errors import WRITE_ERRORS, CommbenchError, Interrupted, write_error

# subcommand -> module under commbench.commands (kept in the order `--help` shows them)
COMMANDS = {
    "run": "run",
    "topo": "topo",
    "import": "import_",
    "table": "table",
    "overlap": "overlap",
    "trace": "trace",
    "estimate": "estimate",
    "plan": "plan",
    "calibrate": "calibrate",
    "submit": "submit",
    "jobs": "jobs",
    "dashboard": "dashboard",
    "db": "db",
    "compare": "compare",
    "baseline": "baseline",
    "check": "check",
    "history": "history",
    "diagnose": "diagnose",
    "health": "health",
    "efficiency": "efficiency",
    "metrics": "metrics",
}


# What argparse takes for a negative number (a value, not an option): its own pattern knows only
# -4 and -.5, so `--params -7e9` or `--at -4M` read as a missing value; with this one the option's
# own check answers ("--params must be positive") instead.
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?[A-Za-z]*$")


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line (no usage dump) on bad input."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or (`only`) the one subcommand about to run: each command module
    imports what its work needs (numpy, DuckDB, ruptures, torch...), so a command imports only its own."""
    parser = _Parser(
        prog="commbench",
        description="Measure collectives (NCCL/gloo) the nccl-tests way, map the machine, and plan training layouts.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"commbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module_name in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name)  # still a valid choice; never parsed on this call
            continue
        module = importlib.import_module(f"commbench.commands.{module_name}")
        doc = (module.__doc__ or "").strip()
        command = sub.add_parser(
            name,
            help=module.HELP,
            description=doc or module.HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(command)
        command.set_defaults(handler=module.main)
    return parser


def _command_named(argv: list[str]) -> str | None:
    """The subcommand when argv starts with one (the usual call); None for --help, --version, typos."""
    return argv[0] if argv and argv[0] in COMMANDS else None


# errors that mean the path the user gave is wrong (exit 2); others (a full disk, I/O) are failures
_BAD_PATH_ERRNOS = {errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.ELOOP}


def _os_error_line(exc: OSError) -> str:
    where = exc.filename if exc.filename is not None else "a file"
    return f"{where}: {exc.strerror or exc}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(only=_command_named(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except Interrupted as exc:
        print(f"commbench {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except CommbenchError as exc:
        print(f"commbench {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"commbench {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `commbench ... | head` closed the pipe: not an error of ours
        sys.stderr.close()
        return 0
    except OSError as exc:  # a path that could not be read or written: one line, never a traceback
        if exc.errno in WRITE_ERRORS:  # the disk refused a write (full, read-only, no permission)
            print(f"commbench {args.command}: error: {write_error(exc)}", file=sys.stderr)
            return 1
        print(f"commbench {args.command}: error: {_os_error_line(exc)}", file=sys.stderr)
        return 2 if exc.errno in _BAD_PATH_ERRNOS else 1


if __name__ == "__main__":
    sys.exit(main())
