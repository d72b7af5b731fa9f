"""The one way commbench opens a file it did not write this run: from a results folder or an argument.

Files come from shared results folders and from users' command lines, so any of them may be a
FIFO (a read that never returns), a device (/dev/zero: a read that never ends), a symbolic link
out of the folder, far bigger than its kind ever is, binary, UTF-16, or JSON built to break a
parser (10^5 nested brackets, 5000-digit integers). Every reader here:
  - opens regular files only, without blocking (a FIFO is refused before anyone waits on it);
  - with `root`, resolves symbolic links and refuses a file whose real path leaves root;
  - refuses a file over its kind's size cap (`Kind.max_bytes`) with the cap in the message;
  - decodes UTF-8 only, naming UTF-16/32 when a byte-order mark says so, and calling a file with NUL
    bytes binary;
  - parses JSON with a nesting limit (MAX_JSON_DEPTH) and an integer length limit (MAX_INT_DIGITS);
  - streams the kinds that can be big (`iter_lines`, `iter_jsonl`): memory stays bounded by
    MAX_LINE_BYTES whatever the file's size, and a bad line is counted and skipped, never fatal.
Every refusal is an UnsafeFile (a UsageError: one line, exit 2) naming the path and never quoting
the file's contents.

Typical use:
    document = load_json(path, RUN_JSON, root=results)          # dict/list, or UnsafeFile
    lines = LineReport()
    for number, item in iter_jsonl(path, RECORDS, lines): ...   # lines.bad, lines.messages
    for number, text in iter_lines(path, NCCL_TESTS_LOG): ...
"""

from __future__ import annotations

import codecs
import errno
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NamedTuple

from commbench.errors import UsageError

MiB = 1 << 20
MAX_JSON_DEPTH = 200  # our deepest document (run.json with a topology) nests under 10
MAX_INT_DIGITS = 64  # no count, size or id we read is longer; Python's own limit (4300) is a ValueError
MAX_LINE_BYTES = 4 * MiB  # one JSONL record or log line; longer ones are skipped as bad
KEPT_MESSAGES = 3  # bad lines described one by one; the rest only counted


@dataclass(frozen=True)
class Kind:
    """What a file is, for its messages and its size cap (None: streamed, no cap)."""

    name: str
    max_bytes: int | None


RUN_JSON = Kind("run.json", 64 * MiB)
DOCUMENT = Kind("result document", 256 * MiB)  # trace analyses, diagnose reports
RECORDS = Kind("records file", None)  # records.jsonl, samples.jsonl: streamed
CONFIG = Kind("config file", 16 * MiB)  # model config.json, processor/system JSON, routing, baselines
TOPOLOGY = Kind("topology file", 64 * MiB)
NCCL_TESTS_LOG = Kind("nccl-tests log", None)  # streamed
NCCL_TESTS_JSON = Kind("nccl-tests JSON report", 256 * MiB)
INSPECTOR_LOG = Kind("NCCL Inspector log", None)  # streamed (JSONL)
TEXT = Kind("text file", 64 * MiB)


class UnsafeFile(UsageError):
    """A file refused or not readable as its kind: one line naming the path, never its contents."""


@dataclass
class LineReport:
    """What a streamed read skipped: how many bad lines, and the first few described."""

    bad: int = 0
    messages: list[str] = field(default_factory=list)
    cut: int | None = None  # the number of a last line dropped as cut mid-write (iter_jsonl)

    def skip(self, where: str, why: str) -> None:
        self.bad += 1
        if self.bad <= KEPT_MESSAGES:
            self.messages.append(f"{where}: skipped ({why})")

    def warnings(self, name: str) -> list[str]:
        """The kept messages, plus one line with the total when more were skipped."""
        more = [f"{name}: {self.bad} bad lines skipped in all"] if self.bad > KEPT_MESSAGES else []
        cut = [f"{name} line {self.cut}: dropped (cut mid-write: still being written, or the writer died)"]
        return self.messages + more + (cut if self.cut is not None else [])


# ------------------------------------------------------------------------------ opening


def checked_path(path: str | Path, root: str | Path | None = None) -> Path:
    """The real path of `path` (links resolved); with root, UnsafeFile unless it lies inside root."""
    path = Path(path)
    try:
        real = path.resolve(strict=True)
    except FileNotFoundError:
        raise UnsafeFile(f"{path}: no such file") from None
    except (OSError, RuntimeError) as exc:  # RuntimeError: a loop of symbolic links
        raise UnsafeFile(f"{path}: cannot be resolved ({_reason(exc)})") from None
    if root is not None:
        base = Path(root).resolve()
        if real != base and not real.is_relative_to(base):
            raise UnsafeFile(f"{path}: points outside {base} (a symbolic link?); refused")
    return real


@contextmanager
def open_regular(path: str | Path, kind: Kind, root: str | Path | None = None) -> Iterator[IO[bytes]]:
    """The file opened for binary reading, if it is a regular file (inside root, under the cap)."""
    real = checked_path(path, root)
    try:  # O_NONBLOCK: opening a FIFO would otherwise wait for a writer
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise UnsafeFile(f"{path}: cannot open ({_reason(exc)})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFile(f"{path}: not a regular file ({_file_type(info.st_mode)}); refused")
        if kind.max_bytes is not None and info.st_size > kind.max_bytes:
            raise UnsafeFile(
                f"{path}: {info.st_size / MiB:.1f} MiB, over the {kind.max_bytes // MiB} MiB "
                f"a {kind.name} may have; refused"
            )
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def _file_type(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a plain file"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno is not None:
        return os.strerror(exc.errno) if exc.errno != errno.ELOOP else "too many levels of symbolic links"
    return type(exc).__name__


# ------------------------------------------------------------------------------ text

_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


def _refuse_non_text(head: bytes, path: str | Path, kind: Kind) -> None:
    """UnsafeFile for a file whose first bytes say UTF-16/32 (a byte-order mark) or binary (NUL bytes)."""
    for bom, encoding in _BOMS:
        if head.startswith(bom):
            raise UnsafeFile(
                f"{path}: {encoding} text; a {kind.name} is read as UTF-8 (convert it: iconv -f {encoding} -t UTF-8)"
            )
    if b"\0" in head:
        raise UnsafeFile(f"{path}: binary data (NUL bytes), not a {kind.name}")


def decode(data: bytes, path: str | Path, kind: Kind) -> str:
    """UTF-8 text (a UTF-8 byte-order mark dropped); UnsafeFile naming what it is otherwise."""
    _refuse_non_text(data[:65536], path, kind)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UnsafeFile(f"{path}: not UTF-8 text (byte {exc.start}); not a {kind.name}") from None


def read_text(path: str | Path, kind: Kind, root: str | Path | None = None) -> str:
    """The whole file as text, for kinds with a size cap."""
    if kind.max_bytes is None:
        raise ValueError(f"{kind.name} is streamed: use iter_lines")  # a programming error, not the user's
    with open_regular(path, kind, root) as handle:
        data = handle.read(kind.max_bytes + 1)
    if len(data) > kind.max_bytes:  # grew while we read it
        raise UnsafeFile(f"{path}: over the {kind.max_bytes // MiB} MiB a {kind.name} may have; refused")
    return decode(data, path, kind)


def iter_lines(
    path: str | Path, kind: Kind, report: LineReport | None = None, root: str | Path | None = None
) -> Iterator[tuple[int, str]]:
    """(line number, text without its newline) for every line, read MAX_LINE_BYTES at most at a time.
    A line too long or not UTF-8 is counted in `report` and skipped; a file that opens as UTF-16 or
    binary is refused (UnsafeFile)."""
    for line in iter_text_lines(path, kind, report, root):
        yield line.number, line.text


class TextLine(NamedTuple):
    """One line of a streamed text file."""

    number: int  # 1-based
    text: str  # without its line end
    terminated: bool  # a newline ended it: a last line without one may have been cut mid-write


def iter_text_lines(
    path: str | Path,
    kind: Kind,
    report: LineReport | None = None,
    root: str | Path | None = None,
    *,
    replace_undecodable: bool = False,
) -> Iterator[TextLine]:
    """iter_lines, saying whether each line was terminated. With replace_undecodable, bytes that are
    not UTF-8 become U+FFFD and the line is kept (a log's junk lines), instead of being skipped."""
    report = report if report is not None else LineReport()
    name = Path(path).name
    with open_regular(path, kind, root) as handle:
        # UTF-16 or binary: refused up front (open_regular's file is buffered: it has peek)
        _refuse_non_text(handle.peek(65536)[:65536], path, kind)  # type: ignore[attr-defined]
        number = 0
        while True:
            raw = handle.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            number += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                _skip_rest_of_line(handle)
                report.skip(f"{name} line {number}", f"longer than {MAX_LINE_BYTES // MiB} MiB")
                continue
            encoding = "utf-8-sig" if number == 1 else "utf-8"
            try:
                text = raw.decode(encoding)
            except UnicodeDecodeError:
                if not replace_undecodable:
                    report.skip(f"{name} line {number}", "not UTF-8 text")
                    continue
                text = raw.decode(encoding, errors="replace")
            yield TextLine(number, text.rstrip("\r\n"), raw.endswith(b"\n"))


def _skip_rest_of_line(handle: IO[bytes]) -> None:
    while True:
        chunk = handle.readline(MAX_LINE_BYTES)
        if not chunk or chunk.endswith(b"\n"):
            return


# ------------------------------------------------------------------------------ JSON


def parse_json(text: str, where: str | Path) -> Any:
    """json.loads with the depth and integer limits; UnsafeFile (one line) for anything it refuses."""
    try:
        value = json.loads(text, parse_int=_bounded_int)
    except RecursionError:
        raise UnsafeFile(f"{where}: JSON nested too deep (over {MAX_JSON_DEPTH} levels); refused") from None
    except _IntTooLong:
        raise UnsafeFile(f"{where}: JSON integer longer than {MAX_INT_DIGITS} digits; refused") from None
    except json.JSONDecodeError as exc:  # position only: the message must not quote the file
        raise UnsafeFile(f"{where}: unreadable JSON ({exc.msg}: line {exc.lineno} column {exc.colno})") from None
    except ValueError as exc:
        raise UnsafeFile(f"{where}: unreadable JSON ({type(exc).__name__})") from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise UnsafeFile(f"{where}: JSON nested too deep (over {MAX_JSON_DEPTH} levels); refused")
    return value


def load_json(path: str | Path, kind: Kind, root: str | Path | None = None) -> Any:
    """The JSON document in a file of a capped kind."""
    return parse_json(read_text(path, kind, root), path)


def iter_jsonl(
    path: str | Path, kind: Kind, report: LineReport | None = None, root: str | Path | None = None
) -> Iterator[tuple[int, Any]]:
    """(line number, value) for every JSON line; blank lines ignored, bad ones counted and skipped.
    A last line without its newline that does not parse is a line cut mid-write (a run appends its
    rows, rundir's docstring): it is dropped, noted in `report.cut`, not counted as bad."""
    report = report if report is not None else LineReport()
    name = Path(path).name
    for line in iter_text_lines(path, kind, report, root):
        if not line.text.strip():
            continue
        try:
            yield line.number, parse_json(line.text, f"{name} line {line.number}")
        except UnsafeFile as exc:
            if line.terminated:
                report.skip(f"{name} line {line.number}", str(exc).split(": ", 1)[-1])
            else:
                report.cut = line.number


class _IntTooLong(ValueError):
    pass


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _IntTooLong
    return int(text)


def _depth(value: Any) -> int:
    """How deep lists and dicts nest in value (iterative: the check itself never recurses)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        elif not isinstance(item, list):
            continue
        deepest = max(deepest, level)
        if deepest > MAX_JSON_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in item if isinstance(child, (list, dict)))
    return deepest
