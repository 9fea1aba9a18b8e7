"""Parsing JSON objects with readable reasons (file readers, tool arguments) or leniently (model output),
and the locked append-and-resume JSONL files every long run writes.

Every reader of those files keeps one set of rules (:class:`JsonlStream`, which streams a file
line by line with byte offsets; :func:`read_jsonl` and :func:`read_appended_jsonl` read it
whole): a UTF-8 byte-order mark is ignored; a last line without its newline is read when it is
a whole JSON object and left out (an :class:`Unfinished` line) when it is the start of one cut
off; any other line that is not a JSON object is refused, naming the file and the line; a line
longer than :data:`MAX_LINE_BYTES` is refused without being held in memory.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from json_repair import repair_json

from websailor.errors import InputFormatError

_FENCE = re.compile(r"^\s*```[a-zA-Z0-9]*\s*\n?|\n?\s*```\s*$")


def loads_object(text: str) -> dict[str, Any]:
    """Parse ``text`` as one JSON object.

    Raises:
        ValueError: with a short reason ("not valid JSON (Expecting ',' delimiter at column 12)"
            or "expected a JSON object, got list") for the caller to prefix with its context.
    """
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        where = "at" if not e.msg.endswith(" at") else ""  # "Unterminated string starting at": no second "at"
        raise ValueError(f"not valid JSON ({' '.join(filter(None, (e.msg, where)))} column {e.colno})") from None
    except RecursionError:
        raise ValueError("not valid JSON (nested too deeply)") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {_json_type(obj)}")
    return obj


def _json_type(value: Any) -> str:
    """The JSON name of a parsed value's type (``null``, ``list``, ``string``, ...)."""
    names = {type(None): "null", bool: "boolean", str: "string", int: "number", float: "number", list: "list"}
    return names.get(type(value), type(value).__name__)


def load_lenient_json(raw: str) -> dict[str, Any] | None:
    """A JSON object from model output: strict first, then repaired (fences, trailing commas,
    single quotes, unclosed brackets); ``None`` if no object comes out."""
    obj = load_lenient_value(raw)
    return obj if isinstance(obj, dict) else None


def load_lenient_value(raw: str) -> Any:
    """Any JSON value (an object, a list, ...) from model output, read as :func:`load_lenient_json`
    reads an object; ``None`` if nothing comes out (or the value is ``null``)."""
    text = _FENCE.sub("", raw.strip()).strip()
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        try:
            return repair_json(text, return_objects=True)
        except Exception:  # json_repair can raise on pathological input
            return None


#: Longest JSONL line read (bytes): a longer one is refused without being held in memory (a
#: sparse or binary file, or a file that is not JSONL).
MAX_LINE_BYTES = 64 << 20
_BOM = b"\xef\xbb\xbf"
#: Bytes compared before a file's read end to tell a file that grew from one rewritten.
SIGNATURE_BYTES = 256


class LineTooLongError(InputFormatError):
    """A JSONL line longer than :data:`MAX_LINE_BYTES` (it was not read)."""


@dataclass(frozen=True)
class Unfinished:
    """The unfinished last line of a JSONL file, left out: the start of a JSON object cut off
    (a run being written, or killed mid-write). ``offset`` and ``size`` in bytes, ``lineno``
    1-based."""

    path: Path
    lineno: int
    offset: int
    size: int

    def __str__(self) -> str:
        return (
            f"{self.path} line {self.lineno} is unfinished ({self.size} bytes): a run still writing it, or one "
            "killed mid-write; it is left out"
        )


class JsonlStream:
    """The lines of a JSONL file streamed one at a time, with their byte offsets, under the
    rules of :func:`read_appended_jsonl`: a UTF-8 byte-order mark at the start is ignored, a
    last line without its newline is read when it is a whole JSON object and left out (see
    :attr:`unfinished`) when it is the start of one, and a line longer than
    :data:`MAX_LINE_BYTES` is refused without being held in memory.

    ``start`` and ``lineno`` continue a stream where an earlier one's :attr:`end` and
    :attr:`lineno` left off (a file that only grew). While and after iterating:

    - :attr:`end`: the byte offset after the last line read that ends with its newline;
    - :attr:`lineno`: that line's number (a continuation starts after it);
    - :attr:`open_line`: a whole last object without its newline was yielded (it lies after
      :attr:`end`, so a continuation from :attr:`end` yields it again);
    - :attr:`unfinished`: the :class:`Unfinished` last line left out, or ``None``.

    ``what`` names the records in error messages ("a trajectory record", "a QA item").
    """

    def __init__(self, path: Path, what: str, start: int = 0, lineno: int = 0) -> None:
        self.path, self.what = Path(path), what
        self.start, self.end, self.lineno = start, start, lineno
        self.open_line = False
        self.unfinished: Unfinished | None = None

    def lines(self) -> Iterator[tuple[int, int, bytes]]:
        """``(offset, line number, raw bytes)`` of each line, blank ones included, with its
        newline when it has one.

        Raises:
            OSError: the file cannot be opened or read.
            LineTooLongError: a line longer than :data:`MAX_LINE_BYTES` (an
                :class:`~websailor.errors.InputFormatError`).
            InputFormatError: a last line without its newline that is neither a JSON object nor
                the start of one.
        """
        with self.path.open("rb") as fh:
            offset = self.start
            if offset == 0 and fh.read(len(_BOM)) == _BOM:
                offset = self.end = len(_BOM)
            fh.seek(offset)
            while raw := fh.readline(MAX_LINE_BYTES + 1):
                if len(raw) > MAX_LINE_BYTES:
                    raise LineTooLongError(
                        f"{self.path} line {self.lineno + 1} is longer than {MAX_LINE_BYTES >> 20} MB: not "
                        f"{self.what}; is it the right file?"
                    )
                here, offset = offset, offset + len(raw)
                if raw.endswith(b"\n"):
                    self.end, self.lineno = offset, self.lineno + 1
                    yield here, self.lineno, raw
                    continue
                if not raw.strip():  # trailing blanks without a newline: nothing there
                    return
                if _object_or_none(raw) is None:
                    if not raw.lstrip().startswith(b"{"):
                        raise InputFormatError(
                            f"{self.path} line {self.lineno + 1} is not {self.what}: is it the right file?"
                        )
                    self.unfinished = Unfinished(self.path, self.lineno + 1, here, len(raw))
                    return
                self.open_line = True
                yield here, self.lineno + 1, raw

    def records(self) -> Iterator[tuple[int, int, dict[str, Any]]]:
        """``(offset, line number, object)`` of each line that is not blank.

        Raises:
            OSError: as :meth:`lines`.
            InputFormatError: as :meth:`lines`, or a line that is not a JSON object (see
                :func:`parse_line`).
        """
        for offset, lineno, raw in self.lines():
            if raw.strip():
                yield offset, lineno, parse_line(self.path, lineno, raw, self.what)


def _object_or_none(raw: bytes) -> dict[str, Any] | None:
    try:
        return loads_object(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None


def parse_line(path: Path, lineno: int, raw: bytes, what: str) -> dict[str, Any]:
    """The JSON object on line ``lineno`` of ``path`` (its ``raw`` bytes, UTF-8).

    Raises:
        InputFormatError: it is not a JSON object ("FILE line N is not WHAT: is it the right file?").
    """
    obj = _object_or_none(raw)
    if obj is None:
        raise InputFormatError(f"{path} line {lineno} is not {what}: is it the right file?")
    return obj


def end_signature(path: Path, end: int) -> bytes:
    """The last :data:`SIGNATURE_BYTES` bytes of ``path`` before offset ``end`` (``b""`` for
    0): kept after a read, they tell a file that only grew from one rewritten in place
    (:func:`only_grew`).

    Raises:
        OSError: the file cannot be read.
    """
    with Path(path).open("rb") as fh:
        fh.seek(max(0, end - SIGNATURE_BYTES))
        return fh.read(min(SIGNATURE_BYTES, end))


def only_grew(path: Path, end: int, signature: bytes) -> bool:
    """Whether the bytes of ``path`` before ``end`` still end with ``signature`` (taken by
    :func:`end_signature` when ``end`` was read): ``False`` when they changed (the file was
    rewritten or cut back), when ``end`` is 0, or when the file cannot be read."""
    if not end:
        return False
    try:
        return end_signature(path, end) == signature
    except OSError:
        return False


def read_jsonl(path: Path, what: str) -> tuple[list[tuple[int, dict[str, Any]]], Unfinished | None]:
    """The records of a JSONL file that a run appends to, as ``(line_number, object)``, and
    its unfinished last line (left out; ``None`` when there is none), read under the rules of
    :class:`JsonlStream`. A missing file has none. The file is never changed.

    Raises:
        InputFormatError: ``path`` is not a regular file, or a line (other than an unfinished
            last one) is not a JSON object.
    """
    stream = _file_stream(Path(path), what)
    if stream is None:
        return [], None
    return [(lineno, rec) for _, lineno, rec in stream.records()], stream.unfinished


def _file_stream(path: Path, what: str) -> JsonlStream | None:
    """A :class:`JsonlStream` of ``path`` from its start; ``None`` when there is no such file.

    Raises:
        InputFormatError: ``path`` is not a regular file.
    """
    if not path.exists():
        return None
    if not path.is_file():
        raise InputFormatError(f"{path} is not a file; expected a JSONL file ({what} per line)")
    return JsonlStream(path, what)


def read_appended_jsonl(path: Path, what: str, repair: bool = False) -> list[tuple[int, dict[str, Any]]]:
    """Records of a JSONL file that a run appends to, as ``(line_number, object)``.

    A missing file has none; a UTF-8 byte-order mark is ignored. A last line without its
    newline is kept when it is a whole JSON object, and skipped (with a warning) when it is
    the start of one that was cut off (a run was killed mid-write). Only with ``repair`` (a
    writer holding the file's lock, see :func:`appending`) is the file changed, and only after
    every complete line has been read as a record: the half line is cut, or the missing
    newline added, so the next append starts on a clean line. A file that is not such a JSONL
    file is never changed. Readers never change the file. The file is streamed
    (:class:`JsonlStream`): a line longer than :data:`MAX_LINE_BYTES` is refused.

    Raises:
        InputFormatError: ``path`` is not a regular file, or a line (other than an unfinished
            last one) is not a JSON object; the message calls the records ``what`` ("a
            trajectory record", "a QA item").
    """
    from websailor.log import get_logger

    path = Path(path)
    stream = _file_stream(path, what)
    if stream is None:
        return []
    records = [(lineno, rec) for _, lineno, rec in stream.records()]
    if stream.unfinished is not None:
        get_logger(__name__).warning(
            "%s: %s an unfinished last line (%d bytes) left by an interrupted run",
            path,
            "dropping" if repair else "skipping",
            stream.unfinished.size,
        )
        if repair:
            with path.open("r+b") as fh:
                fh.truncate(stream.unfinished.offset)
    elif repair and stream.open_line:
        with path.open("ab") as fh:
            fh.write(b"\n")
    return records


@contextmanager
def appending(path: Path, what: str) -> Iterator[tuple[TextIO, list[tuple[int, dict[str, Any]]]]]:
    """Open an output JSONL for appending, as its only writer: take an exclusive lock on it
    (``flock``; another websailor process writing the same file is refused), repair an
    unfinished last line, and yield the handle with the records already there.

    Raises:
        InvalidArgumentError: another process holds the file.
        InputFormatError: see :func:`read_appended_jsonl`.
    """
    import fcntl

    from websailor.errors import InvalidArgumentError

    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and not path.is_file():
        read_appended_jsonl(path, what)  # raises the not-a-file error
    with path.open("a", encoding="utf-8") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise InvalidArgumentError(
                f"another process is writing to {path}; wait for it to finish or use another output file"
            ) from None
        yield fh, read_appended_jsonl(path, what, repair=True)  # closing the file releases the lock
