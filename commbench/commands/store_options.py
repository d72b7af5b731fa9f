"""Options shared by the commands that read or write the results database and grade runs."""

from __future__ import annotations

import argparse

from commbench.data.store_location import DB_ENV, DEFAULT_DB


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db", metavar="FILE", default=None, help=f"results database (default: ${DB_ENV}, else {DEFAULT_DB})"
    )


def fraction_arg(text: str) -> float:
    """'5%' -> 0.05, '0.05' -> 0.05; a bare number above 1 is refused (write 5% for five percent)."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad fraction {text!r}: write e.g. 5% or 0.05") from None
    if not 0 <= value < 10 or (not raw.endswith("%") and value > 1):
        raise argparse.ArgumentTypeError(f"bad fraction {text!r}: write e.g. 5% or 0.05")
    return value
