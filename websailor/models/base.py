"""The chat-model protocol shared by every backend.

A backend turns conversations (lists of ``{"role", "content"}`` messages) into assistant
replies. ``generate`` takes a *batch* of conversations so that a local backend can run
concurrent rollouts in one forward pass; HTTP backends simply serve each request.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

#: A chat turn: ``{"role", "content"}``. An assistant turn the agent recorded may also carry
#: ``token_ids`` and ``logprobs`` (what the model sampled, :class:`Generation`) and
#: ``finish_reason``; local backends continue a conversation from those exact ids, HTTP
#: backends send ``role`` and ``content`` only.
Message = dict[str, Any]


@dataclass
class SamplingParams:
    """Sampling settings for one call. Defaults follow the paper's evaluation setup
    (Tongyi DeepResearch inference scripts): temperature 0.85, top-p 0.95, presence penalty 1.1."""

    temperature: float = 0.85
    top_p: float = 0.95
    presence_penalty: float = 1.1
    max_tokens: int = 4096
    stop: list[str] = field(default_factory=lambda: ["<tool_response>", "\n<tool_response>"])
    seed: int | None = None
    timeout_s: float | None = None  # wall-clock budget for this call, retries included (HTTP backends)

    def distribution(self) -> dict[str, float]:
        """The settings that shape the distribution sampled from: ``temperature``, ``top_p``,
        ``presence_penalty`` (what a trajectory records of its sampler and what the RL
        prefilter compares; budgets, stops and seeds left out)."""
        return {"temperature": self.temperature, "top_p": self.top_p, "presence_penalty": self.presence_penalty}


def sampling_options(distribution: dict[str, float]) -> list[str]:
    """The ``websailor eval`` / ``run`` options that sample from ``distribution`` (the keys of
    :meth:`SamplingParams.distribution`), e.g. ``["--temperature", "1", "--top-p", "1",
    "--presence-penalty", "0"]``: one spelling for the RL prefilter's warning and the ladder
    script's prefilter command."""
    return [x for key, value in distribution.items() for x in (f"--{key.replace('_', '-')}", f"{value:g}")]


@dataclass
class Generation:
    """One reply: ``text`` (cut before any stop string), token counts of the prompt as the
    model saw it and of the completion, and why generation ended (``stop``, ``length``,
    ``repetition``: a degenerate reply cut early).

    ``token_ids`` are the sampled tokens of the reply as the model produced them (cut before
    a stop string, the end-of-turn token kept when the model wrote it) and ``logprobs`` their
    log-probabilities under the sampling distribution (logits divided by the temperature,
    before top-p truncation), one per id; both ``None`` when the backend cannot say."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str = "stop"
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None


class ChatModel(ABC):
    """A chat backend. Subclasses set ``name`` and ``max_context`` (tokens).

    ``turn_tokens`` (completion tokens of one turn) and ``question_timeout_s`` (seconds per
    question) are the budgets an agent uses when its config leaves them unset: the paper's
    (8,192 tokens, 150 minutes) here, smaller for local models."""

    name: str = "model"
    max_context: int = 131072
    turn_tokens: int = 8192
    question_timeout_s: float = 150 * 60

    @abstractmethod
    def generate(self, conversations: list[list[Message]], params: SamplingParams) -> list[Generation]:
        """Reply to each conversation. Raises :class:`websailor.errors.ModelError` after
        retries are exhausted."""

    def chat(self, messages: list[Message], params: SamplingParams) -> Generation:
        """Reply to one conversation (a batch of one)."""
        return self.generate([messages], params)[0]

    def close(self) -> None:  # noqa: B027 - a no-op by default; backends with threads override it
        """Release resources (threads, connections)."""


def cut_at_stop(text: str, stop: list[str]) -> tuple[str, bool]:
    """``text`` up to the earliest stop string, and whether one was found."""
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def ids_before_stop(tokenizer: Any, ids: list[int], stop: list[str]) -> tuple[int, str | None]:
    """Where sampled ``ids`` that ran into a stop string are cut: the number of ids through the
    first token that reaches the text before the first stop string, and that text (``None``
    when the ids hold no stop string: keep them all). When one token spans the text and the
    start of the stop string it is kept (it was sampled, and dropping it would drop text): the
    kept ids may then end with part of the stop string, while the text is cut exactly before
    it. Servers that stop at a stop string (vLLM) return its tokens among the ids."""
    decode = tokenizer.decode
    before, found = cut_at_stop(decode(ids, skip_special_tokens=False), stop)
    if not found:
        return len(ids), None
    k = 0
    while k < len(ids) and not decode(ids[:k], skip_special_tokens=False).startswith(before):
        k += 1
    return k, cut_at_stop(decode(ids, skip_special_tokens=True), stop)[0]


def decode_reply(tokenizer: Any, ids: list[int], cut: bool) -> str:
    """The text of a reply's ids, special tokens dropped. A reply ``cut`` at its token limit
    may end inside a multi-byte character, which decodes as U+FFFD: those trailing
    replacement characters are dropped instead of being stored and sent back to the model."""
    text = tokenizer.decode(ids, skip_special_tokens=True)
    return text.rstrip("\ufffd") if cut else text


def check_tokens(ids: Any, logprobs: Any, where: str) -> tuple[list[int] | None, list[float] | None]:
    """A reply's sampled token ids and their log-probabilities as a server sent them, checked:
    ids a list of non-negative integers, log-probabilities a list of finite numbers of at most 0
    (1e-3 allowed for rounding), as many of each when both came; ``None`` stays ``None``.
    Nothing is coerced (a float id or a string log-probability is refused, not rounded).

    Raises:
        ModelError: anything else, naming ``where`` (the server).
    """
    from websailor.errors import ModelError

    if ids is not None and not (
        isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)
    ):
        raise ModelError(f"{where}: the reply's token_ids are not a list of non-negative integers")
    if logprobs is not None:
        if not isinstance(logprobs, list):
            raise ModelError(f"{where}: the reply's log-probabilities are not a list")
        if not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x <= 1e-3 for x in logprobs
        ):
            raise ModelError(f"{where}: the reply's logprobs are not all finite numbers of at most 0")
        logprobs = [float(x) for x in logprobs]
    if ids is not None and logprobs is not None and len(ids) != len(logprobs):
        raise ModelError(f"{where}: the reply has {len(ids)} token ids but {len(logprobs)} logprobs")
    return ids, logprobs
