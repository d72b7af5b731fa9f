"""Stream the events of a chrome-trace JSON file (plain or gzip) without loading it whole.

Profiler traces of real training jobs reach gigabytes; json.load would hold the text and every
event dict in memory at once. The reader decodes one event at a time from a buffer of text chunks
with json.JSONDecoder.raw_decode, and keeps the small top-level members (distributedInfo,
deviceProperties, ...) in `metadata`. Both chrome-trace layouts are accepted: an object with a
"traceEvents" array, or a bare array of events.
"""

from __future__ import annotations

import codecs
import gzip
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

from commbench.errors import UsageError

_CHUNK_BYTES = 1 << 20
# No single event or metadata member comes near this; text that still does not decode is corrupt,
# not merely cut by the chunk boundary, and reading on would pull the rest of the file into memory.
_LONGEST_VALUE_CHARS = 64 << 20
_WHITESPACE = " \t\r\n"
_GZIP_MAGIC = b"\x1f\x8b"
# What a file cut short leaves where decoding stops: nothing, a string or a number/literal that
# never ends. Anything else at the end of the file is a malformed trace, not a truncated one.
_CUT_TOKEN = re.compile(r'\s*(?:"(?:[^"\\]|\\.)*\\?|[-+.0-9eE]*|[A-Za-z]*)\s*')


class _EndOfText(Exception):
    """The file ended inside a value."""


class ChromeTraceReader:
    """One pass over a trace file: iterate events(), then read metadata and truncated."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.metadata: dict[str, Any] = {}
        self.truncated = False
        self._decoder = json.JSONDecoder()
        self._text = ""
        self._pos = 0
        self._file: IO[bytes] | None = None
        # Chunks may split a multi-byte character; the incremental decoder carries the pieces over.
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._at_eof = False
        self._inside_events = False

    def events(self) -> Iterator[dict[str, Any]]:
        """Yield each event dict; on a file cut short, stop at the last whole event and set truncated."""
        with self._open() as self._file:
            try:
                opening = self._next_token()
                if opening == "[":
                    yield from self._array_items()
                elif opening == "{":
                    yield from self._object_members()
                else:
                    raise UsageError(f"{self.path}: not a chrome trace (JSON object or array expected)")
            except _EndOfText:
                if not self._inside_events:
                    raise UsageError(f"{self.path}: empty, or cut short before its events") from None
                self.truncated = True
            except UnicodeDecodeError:
                raise UsageError(f"{self.path}: not a chrome trace (not UTF-8 text)") from None

    def _open(self) -> IO[bytes]:
        if not self.path.is_file():
            raise UsageError(f"{self.path}: no such trace file")
        with open(self.path, "rb") as probe:
            compressed = probe.read(2) == _GZIP_MAGIC
        return cast(IO[bytes], gzip.open(self.path, "rb")) if compressed else open(self.path, "rb")

    def _object_members(self) -> Iterator[dict[str, Any]]:
        saw_events = False
        while True:
            token = self._peek()
            if token in "},":
                self._pos += 1
                if token == "}":
                    break
                continue
            key = self._decode_value()
            if self._next_token() != ":":
                raise self._corrupt(self._pos - 1)
            if key == "traceEvents":
                if self._next_token() != "[":
                    raise UsageError(f"{self.path}: traceEvents is not a list of events")
                saw_events = True
                yield from self._array_items()
            else:
                self.metadata[key] = self._decode_value()
        if not saw_events:
            raise UsageError(f"{self.path}: no traceEvents: not a PyTorch profiler chrome trace")

    def _array_items(self) -> Iterator[dict[str, Any]]:
        self._inside_events = True
        while True:
            token = self._peek()
            if token in "],":
                self._pos += 1
                if token == "]":
                    return
                continue
            item = self._decode_value()
            if isinstance(item, dict):
                yield item

    def _peek(self) -> str:
        """Skip whitespace and return the next character, leaving it unread."""
        while True:
            while self._pos < len(self._text) and self._text[self._pos] in _WHITESPACE:
                self._pos += 1
            if self._pos < len(self._text):
                return self._text[self._pos]
            self._read_more()

    def _next_token(self) -> str:
        token = self._peek()
        self._pos += 1
        return token

    def _decode_value(self) -> Any:
        self._peek()  # raw_decode does not skip leading whitespace
        while True:
            try:
                value, end = self._decoder.raw_decode(self._text, self._pos)
            except json.JSONDecodeError as error:
                if self._at_eof and not _CUT_TOKEN.fullmatch(self._text, error.pos):
                    raise self._corrupt(error.pos) from None
                value, end = None, None
            # A value that ends exactly at the end of the buffer may be a number cut by the chunk
            # boundary ("12" of "1234"), so it only counts once more text (or the end) is seen.
            if end is not None and (end < len(self._text) or self._at_eof):
                self._pos = end
                return value
            if len(self._text) - self._pos > _LONGEST_VALUE_CHARS:
                raise self._corrupt(self._pos)
            self._read_more()

    def _read_more(self) -> None:
        if self._at_eof:
            raise _EndOfText
        # Drop what was consumed so the buffer holds at most one chunk plus the value being read.
        self._text = self._text[self._pos :]
        self._pos = 0
        try:
            # read1, unlike read, hands over what it decompressed before a gzip stream breaks off.
            assert self._file is not None, "read only inside events()"
            chunk = self._file.read1(_CHUNK_BYTES)  # type: ignore[attr-defined]  # BufferedReader and GzipFile have it
        except EOFError:  # a gzip stream cut short
            chunk = b""
        except (gzip.BadGzipFile, zlib.error):
            raise UsageError(f"{self.path}: damaged gzip file") from None
        self._text += self._utf8.decode(chunk, final=not chunk)
        self._at_eof = not chunk

    def _corrupt(self, position: int) -> UsageError:
        return UsageError(f"{self.path}: not valid JSON near {self._text[position : position + 40]!r}")
