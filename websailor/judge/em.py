"""Rule-based judges: SQuAD-style normalized exact match and token F1 against every accepted
form of the gold answer (:class:`~websailor.judge.gold.Gold`).

Normalization (as in the SQuAD v1.1 evaluation, for every script): Unicode NFKC, lower case,
punctuation (any Unicode punctuation) and invisible format characters removed, the articles
"a", "an", "the" removed, whitespace collapsed. Accents are kept
("Pelé" and "Pele" differ) because they can distinguish answers. A list answer (``parts``)
is correct when every part, normalized, occurs as whole words in the normalized prediction,
in any order (the "loose" list matching of FanOutQA).
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable
from typing import Any

from websailor.judge.gold import Gold

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
# Chinese, Japanese and Korean script: scored character by character (no spaces between words)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    for word in normalize_answer(text).split():
        out.extend(_CJK.sub(lambda m: f" {m.group(0)} ", word).split() if _CJK.search(word) else [word])
    return out


_PUNCT = frozenset(string.punctuation) | {"\u2018", "\u2019", "\u201c", "\u201d", "\u2013", "\u2014"}


def _strip_char(ch: str) -> str:
    cat = unicodedata.category(ch)
    if cat == "Cf":  # zero-width spaces and joiners, direction marks, soft hyphens, BOMs
        return ""
    return " " if ch in _PUNCT or cat.startswith("P") or cat.startswith("Z") else ch


def normalize_answer(text: str) -> str:
    """``"The  Nile River."`` -> ``"nile river"``; punctuation of every script ("。", "、")
    becomes a space, invisible format characters (zero-width, direction marks) go."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = _THOUSANDS.sub("", text)  # "920,000,000" -> "920000000"
    text = "".join(_strip_char(ch) for ch in text)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def gold_answers(answer: Any, aliases: Iterable[str] = ()) -> list[str]:
    """Every accepted form of a gold answer given in any shape :meth:`Gold.parse` takes.

    Raises:
        ValueError: no non-empty gold answer.
    """
    return list(Gold.parse(answer, aliases).forms)


def _gold(answer: Any, aliases: Iterable[str]) -> Gold:
    return answer if isinstance(answer, Gold) else Gold.parse(answer, aliases)


def exact_match(prediction: str | None, answer: Any, aliases: Iterable[str] = ()) -> bool:
    """True when the normalized prediction equals a normalized gold form (or, for a list
    answer, contains every part). A missing or empty prediction is wrong.

    Args:
        prediction: the model's final answer.
        answer: a :class:`Gold` or anything :meth:`Gold.parse` takes.
        aliases: more accepted forms (when ``answer`` is not a :class:`Gold`).

    Raises:
        ValueError: no gold answer.
    """
    gold = _gold(answer, aliases)
    if not prediction or not prediction.strip():
        return False
    pred = normalize_answer(prediction)
    if gold.parts:
        padded = f" {pred} "
        return all(f" {normalize_answer(p)} " in padded for p in gold.parts)
    return any(pred == normalize_answer(g) for g in gold.forms)


def token_f1(prediction: str | None, answer: Any, aliases: Iterable[str] = ()) -> float:
    """Best token-level F1 (0..1) between the normalized prediction and any gold form; text in
    Chinese, Japanese or Korean script counts each character as a token.

    Raises:
        ValueError: no gold answer.
    """
    gold = _gold(answer, aliases)
    if not prediction:
        return 0.0
    pred = _tokens(prediction)
    best = 0.0
    for g in gold.forms:
        ref = _tokens(g)
        common = sum((Counter(pred) & Counter(ref)).values())
        if common:
            p, r = common / len(pred), common / len(ref)
            best = max(best, 2 * p * r / (p + r))
    return best
