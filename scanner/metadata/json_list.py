"""The items of a JSON list, decoded one at a time from a text stream.

A dump of a cluster with a million ledgers is a list of a million objects: decoded whole it costs
gigabytes, decoded item by item it costs about one read chunk, whatever the layout of the text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import TextIO

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_NUMBER_CHARS = re.compile(r"[0-9eE.+-]*")
_DECODER = json.JSONDecoder()
# Characters read at once. The text read and what is made of it (the items' text joined, the store's records) stay
# under glibc's mmap threshold, which the CLI fixes at 128 KiB (scanner/scan/allocator.py): above it each buffer
# would be mapped afresh and unmapped when freed, a page fault for every 4 KiB of it, every time (1 MiB reads took
# 80,000 faults and half the CPU of loading a 33 MB dump).
READ_CHUNK = 1 << 16


class NotJson(ValueError):
    """The text is not JSON; the message says at which character and why."""


class NotAList(ValueError):
    """The text is JSON, but its top-level value is not a list; ``found`` names its type."""

    def __init__(self, found: str):
        super().__init__(f"expected a JSON list, found {found}")
        self.found = found


def json_list_items(stream: TextIO) -> Iterator[object]:
    """Each item of the JSON list that ``stream`` holds, in order; NotJson or NotAList otherwise.

    Errors surface when the reader reaches them: items before a syntax error are yielded first.
    """
    return (item for items in json_list_batches(stream) for item in items)


def json_list_batches(stream: TextIO, whole_lines: Callable[[str], object] | None = None) -> Iterator[list | object]:
    """The items of :func:`json_list_items` in lists of one or more (as many as one read decodes at once).

    ``whole_lines(text)``, where given, is offered the text of each run of whole lines first (items and commas, an
    item a line, the last comma left out): what it makes of them (anything but None, and not a list) is given in place
    of their list of items; None: they are decoded here as ever."""
    return _ListReader(stream, whole_lines).batches()


class _ListReader:
    def __init__(self, stream: TextIO, whole_lines: Callable[[str], object] | None = None):
        self._stream = stream
        self._made_of_lines = whole_lines
        self._text = ""
        self._pos = 0
        self._dropped = 0  # characters before self._text, for error positions
        self._eof = False
        self._by_lines = True  # whole lines decoded at once while they are whole items

    def batches(self) -> Iterator[list]:
        if self._peek() != "[":
            raise NotAList(type(self._value()).__name__)
        self._pos += 1
        if self._peek() == "]":
            self._pos += 1
        else:
            while True:
                if lines := self._whole_lines():
                    yield lines
                yield [self._value()]
                delimiter = self._peek()
                if delimiter not in (",", "]"):
                    raise self._error("expecting ',' or ']' after a list item")
                self._pos += 1
                if delimiter == "]":
                    break
        if self._peek():
            raise self._error("extra data after the list")

    def _peek(self) -> str:
        """The next character that is not whitespace, not consumed; "" at the end of the text."""
        while True:
            self._pos = _WHITESPACE.match(self._text, self._pos).end()
            if self._pos < len(self._text):
                return self._text[self._pos]
            if not self._read_more():
                return ""

    def _whole_lines(self) -> list | object:
        """The items up to the last comma that ends a line in what is read, decoded at once (the comma consumed), when
        what is before that comma is items and commas alone (a list written an item a line); else none, and the items
        are read one at a time from here on. A JSON string never holds a line end: an item cut there does not decode.
        """
        if not self._by_lines:
            return []
        end = self._text.rfind(",\n", self._pos)
        if end < 0 or not self._text[self._pos:end].strip():
            return []
        if self._made_of_lines is not None and (made := self._made_of_lines(self._text[self._pos:end])) is not None:
            self._pos = end + 1
            return made
        try:
            items = json.loads("[" + self._text[self._pos:end] + "]")
        except json.JSONDecodeError:
            self._by_lines = False
            return []
        self._pos = end + 1
        return items

    def _value(self) -> object:
        self._peek()
        if self._by_lines and self._text.find("\n", self._pos) < 0 and len(self._text) - self._pos < READ_CHUNK:
            self._read_more()  # an item a line with no line end yet is cut by the read: read on before a decode fails
        while True:
            try:
                value, end = _DECODER.raw_decode(self._text, self._pos)
            except json.JSONDecodeError as error:
                # most likely the value goes on in the next chunk; read at least as much again
                if self._read_more(len(self._text)):
                    continue
                raise NotJson(f"at character {self._dropped + error.pos}: {error.msg}") from None
            if isinstance(value, (int, float)) and _NUMBER_CHARS.fullmatch(self._text, end) and self._read_more():
                continue  # the chunk may have cut the number short ("-1.5" of "-1.5e-7")
            self._pos = end
            return value

    def _read_more(self, at_least: int = 0) -> bool:
        if self._eof:
            return False
        chunk = self._stream.read(max(READ_CHUNK, at_least))
        if not chunk:
            self._eof = True
            return False
        self._dropped += self._pos
        self._text = self._text[self._pos :] + chunk
        self._pos = 0
        return True

    def _error(self, problem: str) -> NotJson:
        return NotJson(f"at character {self._dropped + self._pos}: {problem}")
