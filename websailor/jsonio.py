"""Parsing JSON objects with readable reasons (file readers, tool arguments) or leniently (model output),
and the locked append-and-resume JSONL files every long run writes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from json_repair import repair_json

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
    text = _FENCE.sub("", raw.strip()).strip()
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        try:
            obj = repair_json(text, return_objects=True)
        except Exception:  # json_repair can raise on pathological input
            return None
    return obj if isinstance(obj, dict) else None


def read_appended_jsonl(path: Path, what: str, repair: bool = False) -> list[tuple[int, dict[str, Any]]]:
    """Records of a JSONL file that a run appends to, as ``(line_number, object)``.

    A missing file has none; a UTF-8 byte-order mark is ignored. A last line without its
    newline is kept when it is a whole JSON object, and skipped (with a warning) when it is
    the start of one that was cut off (a run was killed mid-write). Only with ``repair`` (a
    writer holding the file's lock, see :func:`appending`) is the file changed, and only after
    every complete line has been read as a record: the half line is cut, or the missing
    newline added, so the next append starts on a clean line. A file that is not such a JSONL
    file is never changed. Readers never change the file.

    Raises:
        InputFormatError: ``path`` is not a regular file, or a line (other than an unfinished
            last one) is not a JSON object; the message calls the records ``what`` ("a
            trajectory record", "a QA item").
    """
    from websailor.errors import InputFormatError
    from websailor.log import get_logger

    if not path.exists():
        return []
    if not path.is_file():
        raise InputFormatError(f"{path} is not a file; expected a JSONL file ({what} per line)")
    data = path.read_bytes()
    start = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    cut = len(data) if data.endswith(b"\n") else data.rfind(b"\n") + 1
    records = []
    lineno = 0
    for lineno, raw in enumerate(data[start : max(cut, start)].split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            records.append((lineno, loads_object(raw.decode("utf-8"))))
        except (ValueError, UnicodeDecodeError):
            raise InputFormatError(f"{path} line {lineno} is not {what}: is it the right file?") from None
    tail = data[max(cut, start) :]
    if tail.strip():
        lineno = data[start : max(cut, start)].count(b"\n") + 1
        try:
            records.append((lineno, loads_object(tail.decode("utf-8"))))
            if repair:
                with path.open("ab") as fh:
                    fh.write(b"\n")
        except (ValueError, UnicodeDecodeError):
            if not tail.lstrip().startswith(b"{"):
                raise InputFormatError(f"{path} line {lineno} is not {what}: is it the right file?") from None
            get_logger(__name__).warning(
                "%s: %s an unfinished last line (%d bytes) left by an interrupted run",
                path,
                "dropping" if repair else "skipping",
                len(tail),
            )
            if repair:
                with path.open("r+b") as fh:
                    fh.truncate(cut)
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
