"""Text utilities: sentence splitting, word offsets and passage chunking.

Sentence boundaries come from blingfire (a finite-state segmenter that knows abbreviations
such as "A. J. P. Taylor" or "c. 1500"); everything else is plain Python.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

import blingfire

_WORD = re.compile(r"\w+|[^\w\s]")
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


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character spans ``[(start, end), ...]`` of the sentences of ``text`` (one paragraph)."""
    if not text.strip():
        return []
    _, offsets = blingfire.text_to_sentences_and_offsets(text)
    return [(int(a), int(b)) for a, b in offsets]


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``; paragraphs (blank-line separated) never share a sentence."""
    out: list[str] = []
    for para in re.split(r"\n\s*\n|\n", text):
        out.extend(para[a:b].strip() for a, b in sentence_spans(para))
    return [s for s in out if s]


def word_spans(text: str) -> list[tuple[str, int, int]]:
    """Tokens of ``text`` with offsets: runs of word characters, and single punctuation marks."""
    return [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]


def chunk_passages(paragraphs: list[str], max_words: int = 150, target_words: int = 100) -> list[str]:
    """Split paragraphs into retrieval passages.

    A paragraph of at most ``max_words`` words is one passage; a longer one is cut at sentence
    boundaries into windows of about ``target_words`` words (a single longer sentence stays whole).
    Returns the passages in order; empty paragraphs are dropped.
    """
    passages: list[str] = []
    for para in paragraphs:
        para = normalize_space(para)
        if not para:
            continue
        if len(para.split()) <= max_words:
            passages.append(para)
            continue
        current: list[str] = []
        n = 0
        for a, b in sentence_spans(para):
            sent = para[a:b].strip()
            w = len(sent.split())
            if current and n + w > target_words:
                passages.append(" ".join(current))
                current, n = [], 0
            current.append(sent)
            n += w
        if current:
            passages.append(" ".join(current))
    return passages


def truncate(text: str, max_chars: int) -> str:
    """Cut ``text`` at a word boundary so that it has at most ``max_chars`` characters (adds "...")."""
    if len(text) <= max_chars:
        return text
    cut = text[: max(0, max_chars - 3)].rsplit(" ", 1)[0]
    return cut + "..."
