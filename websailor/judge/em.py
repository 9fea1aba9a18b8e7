"""Rule-based judges: SQuAD-style normalized exact match and token F1 against every accepted
form of the gold answer (the answer and its aliases).

Normalization (as in the SQuAD v1.1 evaluation): Unicode NFKC, lower case, punctuation
removed, the articles "a", "an", "the" removed, whitespace collapsed. Accents are kept
("Pelé" and "Pele" differ) because they can distinguish answers.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable
from typing import Any

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = frozenset(string.punctuation) | {"\u2018", "\u2019", "\u201c", "\u201d", "\u2013", "\u2014"}


def normalize_answer(text: str) -> str:
    """``"The  Nile River."`` -> ``"nile river"``."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(" " if ch in _PUNCT else ch for ch in text)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def gold_answers(answer: Any, aliases: Iterable[str] = ()) -> list[str]:
    """Every accepted form: ``answer`` may be a string, a number or a list of strings (the
    ``golden_answers`` of Natural-Questions-style files); ``aliases`` are added.

    Raises:
        ValueError: no non-empty gold answer.
    """
    forms = list(answer) if isinstance(answer, (list, tuple)) else [answer]
    forms += list(aliases)
    out = [str(f) for f in forms if f is not None and not isinstance(f, bool) and str(f).strip()]
    if not out:
        raise ValueError(f"no gold answer to grade against (answer {answer!r})")
    return out


def exact_match(prediction: str | None, answer: Any, aliases: Iterable[str] = ()) -> bool:
    """True when the normalized prediction equals a normalized gold form. A missing or empty
    prediction is wrong.

    Raises:
        ValueError: no gold answer (see :func:`gold_answers`).
    """
    golds = gold_answers(answer, aliases)
    if not prediction or not prediction.strip():
        return False
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(g) for g in golds)


def token_f1(prediction: str | None, answer: Any, aliases: Iterable[str] = ()) -> float:
    """Best token-level F1 (0..1) between the normalized prediction and any gold form.

    Raises:
        ValueError: no gold answer (see :func:`gold_answers`).
    """
    golds = gold_answers(answer, aliases)
    if not prediction:
        return 0.0
    pred = normalize_answer(prediction).split()
    best = 0.0
    for g in golds:
        gold = normalize_answer(g).split()
        common = sum((Counter(pred) & Counter(gold)).values())
        if common:
            p, r = common / len(pred), common / len(gold)
            best = max(best, 2 * p * r / (p + r))
    return best
