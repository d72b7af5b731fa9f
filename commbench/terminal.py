"""Where human-readable tables go: the terminal's width when there is one, never cut when piped.

rich sizes its output to the terminal, and to 80 columns when stdout is a pipe or a file, where
it folds or truncates cells ("all_redu…"). A pipe has no width to respect, so piped output gets
one wide enough for any layout string or op name; `--format csv/json` remain the forms for tools.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

# wide enough for any row we print, narrow enough that nothing draws a line across it
PIPED_WIDTH = 1000


def console(stderr: bool = False, **options: Any) -> Console:
    """A rich Console for our tables: the terminal's width, or PIPED_WIDTH when not a terminal."""
    candidate = Console(stderr=stderr, **options)
    if candidate.is_terminal:
        return candidate
    return Console(stderr=stderr, width=PIPED_WIDTH, **options)
