"""The judge interface: a :class:`Grade` per (question, prediction, gold) and the rule-based
judges (:func:`websailor.judge.load.load_judge` builds any judge from its spec)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Protocol

from websailor.errors import ConfigError
from websailor.judge.em import exact_match, token_f1
from websailor.judge.gold import Gold


@dataclass
class Grade:
    """One verdict. ``correct`` is ``None`` when the item could not be graded (a judge
    endpoint down, unparsable verdicts): such items are reported as ungraded, never counted
    as wrong. ``score`` is 0/1, or the token F1 for the ``f1`` judge."""

    correct: bool | None
    score: float | None
    extracted: str | None = None
    reasoning: str | None = None
    confidence: float | None = None
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Case:
    """What a judge sees: the question, the agent's final answer (``None`` if it gave none),
    and the gold answer."""

    question: str
    prediction: str | None
    gold: Gold


class Judge(Protocol):
    name: str

    def grade(self, cases: Sequence[Case]) -> list[Grade]:
        """One grade per case, in order."""
        ...


class ExactMatchJudge:
    """Normalized exact match with aliases and list answers (:func:`exact_match`)."""

    name = "em"

    def grade(self, cases: Sequence[Case]) -> list[Grade]:
        out = []
        for c in cases:
            ok = exact_match(c.prediction, c.gold)
            out.append(Grade(ok, float(ok), extracted=c.prediction))
        return out


class F1Judge:
    """Token F1 against the best gold form; correct when F1 >= ``threshold``."""

    def __init__(self, threshold: float = 0.5) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ConfigError(f"the f1 judge's threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold
        self.name = "f1" if threshold == 0.5 else f"f1:{threshold:g}"

    def grade(self, cases: Sequence[Case]) -> list[Grade]:
        out = []
        for c in cases:
            f1 = token_f1(c.prediction, c.gold)
            out.append(Grade(f1 >= self.threshold, f1, extracted=c.prediction))
        return out
