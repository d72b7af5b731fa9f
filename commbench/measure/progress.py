"""The progress bar of a long measurement: rich, on stderr, only on a terminal (torch-free).

Used by the runner (rank 0 of every measuring driver) and by `commbench calibrate`.
"""

from __future__ import annotations

import sys


class Progress:
    """A rich progress bar on stderr (a no-op when disabled or when stderr is not a terminal)."""

    def __init__(self, enabled: bool, total: int, first: str = "starting", width: int = 32):
        self.bar = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self.bar = RichProgress(
                TextColumn(f"{{task.description:<{width}}}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.task = self.bar.add_task(first, total=total)

    def __enter__(self):
        if self.bar:
            self.bar.start()
        return self

    def advance(self, description: str) -> None:
        if self.bar:
            self.bar.update(self.task, advance=1, description=description)

    def __exit__(self, *exc):
        if self.bar:
            self.bar.stop()
        return False
