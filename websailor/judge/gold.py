"""The gold answer of a question in one shape for every judge.

Benchmarks give answers in several shapes: a string; a number; a list of acceptable strings
(Natural Questions' ``golden_answers``); a list or mapping whose every element must be given
(FanOutQA's list answers; for a mapping, every key and value); or our own record ``{"answer", "aliases", "parts"}`` that trajectory
files carry. :meth:`Gold.parse` turns each into a :class:`Gold`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


def _text(x: Any) -> str | None:
    """One answer form as text: strings, numbers (``3.0`` -> ``"3"``) and booleans.

    Raises:
        ValueError: a nested list or mapping where one form was expected.
    """
    if x is None:
        return None
    if isinstance(x, bool):  # FanOutQA's booleans, graded as yes/no (as its own scorer does)
        return "yes" if x else "no"
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    if isinstance(x, (list, tuple, dict)):
        raise ValueError(f"a gold answer form must be text or a number, got {type(x).__name__} {x!r}")
    s = str(x).strip()
    return s or None


@dataclass(frozen=True)
class Gold:
    """``answer``: the canonical form; ``aliases``: other accepted forms; ``parts``: for a
    list answer, the elements that must all be given (``None`` for a single answer)."""

    answer: str
    aliases: tuple[str, ...] = ()
    parts: tuple[str, ...] | None = None

    @property
    def forms(self) -> tuple[str, ...]:
        """The answer and its aliases."""
        return (self.answer, *self.aliases)

    def to_dict(self) -> dict:
        return {"answer": self.answer, "aliases": list(self.aliases), "parts": list(self.parts) if self.parts else None}

    @classmethod
    def parse(cls, answer: Any, aliases: Iterable[Any] = (), list_answer: bool = False) -> Gold:
        """Build a gold answer.

        Args:
            answer: a string or number; a list of alternatives (or, with ``list_answer``, of
                required parts); a mapping, whose ``"key: value"`` pairs are required parts (or
                our record with an ``"answer"`` key).
            aliases: more accepted forms.
            list_answer: a list ``answer`` lists parts that must all be given, not alternatives.

        Raises:
            ValueError: no non-empty answer, or ``aliases`` that is not a list of forms (a
                string would be read letter by letter).
        """
        if isinstance(aliases, (str, bytes, dict)):
            raise ValueError(f"'aliases' must be a list of strings, got {type(aliases).__name__} {aliases!r}")
        extra = [t for t in (_text(a) for a in aliases) if t]
        if isinstance(answer, dict) and "answer" in answer:  # our own record
            rec_aliases = [t for t in (_text(a) for a in answer.get("aliases") or []) if t] + extra
            if answer.get("parts"):
                return cls._of_parts([str(p) for p in answer["parts"]], rec_aliases, answer)
            return cls.parse(answer["answer"], rec_aliases)
        if isinstance(answer, dict):  # every key and every value must be given
            parts = [t for kv in answer.items() for t in (_text(kv[0]), _text(kv[1])) if t]
            return cls._of_parts(list(dict.fromkeys(parts)), extra, answer)
        if isinstance(answer, (list, tuple)):
            texts = [t for t in (_text(a) for a in answer) if t]
            if list_answer:
                return cls._of_parts(texts, extra, answer)
            if not texts and not extra:
                raise ValueError(f"no gold answer to grade against (answer {answer!r})")
            forms = texts + extra
            return cls(forms[0], tuple(dict.fromkeys(f for f in forms[1:] if f != forms[0])))
        text = _text(answer)
        if isinstance(answer, bool):
            extra = [str(answer).lower(), *extra]
        if text is None and not extra:
            raise ValueError(f"no gold answer to grade against (answer {answer!r})")
        forms = ([text] if text else []) + extra
        return cls(forms[0], tuple(dict.fromkeys(f for f in forms[1:] if f != forms[0])))

    @classmethod
    def _of_parts(cls, parts: list[str], aliases: list[str], raw: Any) -> Gold:
        parts = [p for p in parts if p.strip()]
        if not parts:
            raise ValueError(f"no gold answer to grade against (answer {raw!r})")
        return cls("; ".join(parts), tuple(aliases), tuple(parts))
