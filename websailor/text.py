"""Plain-text helpers used across the package: safe UTF-8 with NFC, whitespace, cutting.

Nothing here knows about corpora, tools or models, so every layer may import it.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

_SPACE = re.compile(r"\s+")


def clean_text(text: str) -> str:
    """Replace what cannot be encoded as UTF-8 (lone surrogates from JSON escapes such as
    ``"\\ud800"`` or from undecodable command-line bytes) with U+FFFD, then apply NFC."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)
    return unicodedata.normalize("NFC", text)


def clean_strings(value: Any) -> Any:
    """:func:`clean_text` applied to every string inside lists and dicts (parsed tool
    arguments, command-line values); other values are returned as they are."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [clean_strings(v) for v in value]
    if isinstance(value, dict):
        return {str(k): clean_strings(v) for k, v in value.items()}
    return value


def normalize_space(text: str) -> str:
    """:func:`clean_text`, whitespace runs collapsed, ends stripped."""
    return _SPACE.sub(" ", clean_text(text)).strip()


def fold_space(text: str) -> str:
    """``text`` lower-cased with whitespace runs collapsed: the form in which synthesis and the
    constructive trajectories look for a name or a sentence inside an observation."""
    return " ".join(text.lower().split())


def truncate(text: str, max_chars: int) -> str:
    """Cut ``text`` at a word boundary so that it has at most ``max_chars`` characters (adds "...")."""
    if len(text) <= max_chars:
        return text
    cut = text[: max(0, max_chars - 3)].rsplit(" ", 1)[0]
    return cut + "..."
