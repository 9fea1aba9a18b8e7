"""Parsing JSON objects with readable reasons, shared by file readers and tool-argument parsing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def loads_object(text: str) -> dict[str, Any]:
    """Parse ``text`` as one JSON object.

    Raises:
        ValueError: with a short reason ("not valid JSON (Expecting ',' delimiter at column 12)"
            or "expected a JSON object, got list") for the caller to prefix with its context.
    """
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise ValueError("not valid JSON (nested too deeply)") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def read_appended_jsonl(path: Path, what: str) -> list[tuple[int, dict[str, Any]]]:
    """Records of an output file that a run appends to, as ``(line_number, object)``.

    A missing file has none. A half-written last line (the run was killed mid-write) is cut
    from the file, so the next append starts on a clean line.

    Raises:
        InputFormatError: ``path`` is not a regular file, or a line is not a JSON object; the
            message calls the records ``what`` ("a trajectory record", "a QA item").
    """
    from websailor.errors import InputFormatError
    from websailor.log import get_logger

    if not path.exists():
        return []
    if not path.is_file():
        raise InputFormatError(f"{path} is not a file; expected a JSONL file ({what} per line)")
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        get_logger(__name__).warning("%s: dropping an unfinished last line (%d bytes) left by an interrupted run",
                                     path, len(data) - cut)
        with path.open("r+b") as fh:
            fh.truncate(cut)
        data = data[:cut]
    records = []
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            records.append((lineno, loads_object(raw.decode("utf-8"))))
        except (ValueError, UnicodeDecodeError):
            raise InputFormatError(f"{path} line {lineno} is not {what}; use another --out or repair the file") from None
    return records
