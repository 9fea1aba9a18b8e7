"""Building a judge from its spec: ``em``, ``f1[:THRESHOLD]`` or ``llm:MODEL_SPEC``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from websailor.errors import ConfigError
from websailor.judge.base import ExactMatchJudge, F1Judge, Judge
from websailor.models.base import SamplingParams

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


_caps: dict[str, float | int | None] = {"timeout_s": None, "max_tokens": None}


def set_judge_limits(timeout_s: float | None = None, max_tokens: int | None = None) -> None:
    """Cap every judge call at ``timeout_s`` seconds, retries included (``--judge-timeout``) and
    ``max_tokens`` completion tokens (``--judge-max-tokens``); ``None``: each scorer's own (120 s
    and 4,096 tokens a verdict, 600 s and 16,384 tokens a RACE reply: what a reasoning judge
    needs). Applies to the judge models made from now on (:func:`judge_model`).

    Raises:
        ConfigError: a timeout that is not a positive finite number, a token budget below 16.
    """
    if timeout_s is not None and (
        isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < float("inf")
    ):
        raise ConfigError(f"--judge-timeout {timeout_s!r}: give a positive number of seconds")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 16):
        raise ConfigError(f"--judge-max-tokens {max_tokens!r}: give a whole number of tokens, at least 16")
    _caps.update(timeout_s=None if timeout_s is None else float(timeout_s), max_tokens=max_tokens)


class CappedJudgeModel:
    """A judge model whose calls are capped (:func:`set_judge_limits`); everything else is the
    wrapped model's (its ``name``, so cached replies are found again, and its breaker).

    Args:
        model: the judge's :class:`~websailor.models.base.ChatModel`.
        timeout_s: the most seconds one call may take, retries included (``None``: the caller's).
        max_tokens: the most completion tokens of one call (``None``: the caller's).
    """

    def __init__(self, model: Any, timeout_s: float | None, max_tokens: int | None) -> None:
        self.model, self.timeout_s, self.max_tokens = model, timeout_s, max_tokens

    def chat(self, messages: list, params: SamplingParams) -> Any:
        """The wrapped model's reply, with the call's budget and token count capped."""
        timeout = (
            params.timeout_s if self.timeout_s is None else min(params.timeout_s or self.timeout_s, self.timeout_s)
        )
        tokens = params.max_tokens if self.max_tokens is None else min(params.max_tokens, self.max_tokens)
        return self.model.chat(messages, replace(params, timeout_s=timeout, max_tokens=tokens))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


def judge_model(model: Any) -> Any:
    """``model`` made a judge: its circuit breaker (:mod:`websailor.breaker`) named the judge's,
    so that an outage names the judge rather than a model server, and its calls capped as
    :func:`set_judge_limits` says (a :class:`CappedJudgeModel` when a cap is set); returns it."""
    breaker = getattr(model, "breaker", None)
    if breaker is not None:
        breaker.service = "judge"
    if _caps["timeout_s"] is None and _caps["max_tokens"] is None:
        return model
    return CappedJudgeModel(model, _caps["timeout_s"], _caps["max_tokens"])  # type: ignore[arg-type]
