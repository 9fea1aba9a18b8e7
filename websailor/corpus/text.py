"""Corpus text: sentence splitting, word offsets and passage chunking.

Sentence boundaries come from blingfire (a finite-state segmenter that knows abbreviations
such as "A. J. P. Taylor" or "c. 1500"); everything else is plain Python.
"""

from __future__ import annotations

import re

import blingfire

from websailor.text import normalize_space

_WORD = re.compile(r"\w+|[^\w\s]")


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
