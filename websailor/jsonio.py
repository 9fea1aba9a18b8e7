"""Parsing JSON objects with readable reasons, shared by file readers and tool-argument parsing."""

from __future__ import annotations

import json
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
