"""Optional LLM rewrite of a template question into fluent prose (``websailor synth --llm``).

The rewrite is accepted only if every constraint survived and nothing leaked; otherwise, or
when the model fails, the template text stays and the reason is recorded in the item's
``rendering`` field. A constraint survives when the rewrite keeps its distinctive content:
numbers and decades of blurred values, the letters of a name mask, and most content words of
a linked entity's description.
"""

from __future__ import annotations

import re

from websailor.errors import ModelError
from websailor.models.base import ChatModel, SamplingParams
from websailor.synth.constraints import Constraint, is_leak_free

REWRITE_PROMPT = """Rewrite the question below as one fluent, natural English question. Keep every condition it states, with the same vagueness: do not add facts, do not drop or sharpen any condition, do not name the answer. Reply with the question only.

Question: {question}"""

_CONTENT = re.compile(r"[^\W_]{4,}")
_TOKENS = re.compile(r"\d[\d,]*s?|\b[A-Z]\.")
_STOP = frozenset(
    "which with that from this have their about associated whose name word words first letters starting".split()
)


#: wall-clock budget of one rewrite, retries included: a hanging endpoint costs at most this per item
REWRITE_TIMEOUT_S = 60.0


def _must_keep(c: Constraint) -> tuple[list[str], list[str]]:
    """(tokens that must all appear, content words of which most must appear)."""
    exact = _TOKENS.findall(c.phrase)
    words = [w.lower() for w in _CONTENT.findall(c.phrase) if w.lower() not in _STOP]
    return exact, words


def survived(rewrite: str, constraints: list[Constraint]) -> str | None:
    """The first constraint the rewrite lost (its phrase), or ``None`` if all survived."""
    low = rewrite.lower()
    for c in constraints:
        exact, words = _must_keep(c)
        if any(t.lower() not in low for t in exact):
            return c.phrase
        if words and sum(w in low for w in words) < max(1, round(0.6 * len(words))):
            return c.phrase
    return None


def rewrite_question(model: ChatModel, question: str, constraints: list[Constraint], answer: str) -> tuple[str, dict]:
    """Returns ``(question, rendering)``: the rewrite if it passed the checks, else the
    template text; ``rendering`` is ``{"mode": "llm" | "template", "reason": ...}``."""
    try:
        gen = model.chat(
            [{"role": "user", "content": REWRITE_PROMPT.format(question=question)}],
            SamplingParams(temperature=0.7, max_tokens=256, stop=[], timeout_s=REWRITE_TIMEOUT_S),
        )
    except ModelError as e:
        return question, {"mode": "template", "reason": f"model error: {e}"}
    text = " ".join(gen.text.strip().strip('"').split())
    if not text.endswith("?") or len(text) < 20:
        return question, {"mode": "template", "reason": "the rewrite is not a question"}
    lost = survived(text, constraints)
    if lost:
        return question, {"mode": "template", "reason": f"lost a constraint: {lost}"}
    if not is_leak_free(text, answer):
        return question, {"mode": "template", "reason": "the rewrite leaks the answer"}
    return text, {"mode": "llm", "template": question}
