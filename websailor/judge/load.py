"""Building a judge from its spec: ``em``, ``f1[:THRESHOLD]`` or ``llm:MODEL_SPEC``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from websailor.errors import ConfigError
from websailor.judge.base import ExactMatchJudge, F1Judge, Judge

JUDGE_HELP = "em (normalized exact match), f1[:THRESHOLD] (token F1, correct at >= 0.5 by default) or llm:MODEL_SPEC"


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

        return LLMJudge(judge_model(load_model(spec[4:].strip())), cache=cache, **kwargs)
    raise ConfigError(f"unknown judge {spec!r}: use {JUDGE_HELP}")


_request_timeout_s: float | None = None


def set_judge_timeout(seconds: float | None) -> None:
    """Cap every judge request at ``seconds`` (``--judge-timeout``; ``None``: each scorer's own
    budget, 120 s a verdict, 600 s a RACE reply, which a reasoning judge needs). Applies to the
    judge models made from now on (:func:`judge_model`).

    Raises:
        ConfigError: ``seconds`` is not a positive finite number.
    """
    global _request_timeout_s
    if seconds is not None and (
        isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < float("inf")
    ):
        raise ConfigError(f"--judge-timeout {seconds!r}: give a positive number of seconds")
    _request_timeout_s = None if seconds is None else float(seconds)


def judge_model(model: Any) -> Any:
    """``model`` made a judge: its circuit breaker (:mod:`websailor.breaker`) named the judge's,
    so that an outage names the judge rather than a model server, and its requests capped at
    the judge timeout (:func:`set_judge_timeout`); returns it."""
    breaker = getattr(model, "breaker", None)
    if breaker is not None:
        breaker.service = "judge"
    if _request_timeout_s is not None and hasattr(model, "timeout_s"):
        model.timeout_s = min(model.timeout_s, _request_timeout_s)
    return model
