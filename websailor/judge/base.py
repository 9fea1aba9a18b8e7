"""The judge interface: a :class:`Grade` per (question, prediction, gold) and the rule-based
judges; :func:`load_judge` builds any judge from its spec (``em``, ``f1``, ``llm:MODEL_SPEC``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from websailor.errors import ConfigError
from websailor.judge.em import exact_match, token_f1
from websailor.judge.gold import Gold

JUDGE_HELP = "em (normalized exact match), f1[:THRESHOLD] (token F1, correct at >= 0.5 by default) or llm:MODEL_SPEC"


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


def load_judge(spec: str, cache: Path | None = None, **kwargs) -> Judge:
    """Build a judge from ``em``, ``f1[:THRESHOLD]`` or ``llm:MODEL_SPEC``.

    Args:
        spec: the judge spec.
        cache: SQLite file caching the LLM judge's verdicts (default: none).
        kwargs: passed to :class:`websailor.judge.llm.LLMJudge` (``max_attempts``, ...).

    Raises:
        ConfigError: an unknown spec or a bad threshold; see :data:`JUDGE_HELP`.
    """
    spec = (spec or "").strip()
    if spec == "em":
        return ExactMatchJudge()
    if spec == "f1" or spec.startswith("f1:"):
        try:
            return F1Judge(float(spec[3:]) if spec.startswith("f1:") else 0.5)
        except ValueError:
            raise ConfigError(f"bad judge {spec!r}: the f1 threshold must be a number; {JUDGE_HELP}") from None
    if spec.startswith("llm:") and spec[4:].strip():
        from websailor.judge.llm import LLMJudge
        from websailor.models import load_model

        return LLMJudge(load_model(spec[4:].strip()), cache=cache, **kwargs)
    raise ConfigError(f"unknown judge {spec!r}: use {JUDGE_HELP}")
