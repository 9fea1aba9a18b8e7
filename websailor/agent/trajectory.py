"""The trajectory record: one rollout of the agent on one question.

Written as one JSON line per rollout; SFT, RL and evaluation read it back. Fields:
``id, rollout, question, answer, prediction, termination, messages, num_model_calls,
num_tool_calls, tool_calls, tokens, timings, model, env, seed, version`` (docs/agent.md,
"Trajectory record"), and for constructive trajectories ``construction`` and
``construction_notes`` (docs/sft.md; ``None`` in other records and in older files). An assistant message also records its ``finish_reason`` and, when the
backend returned them, the sampled ``token_ids`` and their ``logprobs``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

#: Every way a trajectory can end.
TERMINATIONS = ("answer", "max_calls", "context", "timeout", "format_error", "model_error")


@dataclass
class ToolCallRecord:
    """One executed tool call: ``latency_s`` in seconds, ``error`` if it failed."""

    name: str
    arguments: dict[str, Any]
    latency_s: float
    error: str | None = None


@dataclass
class Trajectory:
    """One rollout. ``messages`` is the full conversation (system, user, assistant, and tool
    responses as user turns); ``tokens`` sums prompt and completion tokens over model calls;
    ``timings`` splits wall time into model and tool time (seconds)."""

    id: str
    rollout: int
    question: str
    answer: Any = None
    prediction: str | None = None
    termination: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)
    num_model_calls: int = 0
    num_tool_calls: int = 0
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    tokens: dict[str, int] = field(default_factory=lambda: {"prompt": 0, "completion": 0})
    timings: dict[str, float] = field(default_factory=lambda: {"total_s": 0.0, "model_s": 0.0, "tools_s": 0.0})
    model: str = ""
    env: str = "local"
    seed: int | None = None
    version: str = ""
    error: str | None = None
    #: How a constructive trajectory was made: ``direct``, ``verified`` or ``distractor``
    #: (:mod:`websailor.train.constructive`); ``None`` for other sources and older records.
    construction: str | None = None
    #: What the construction checked or could not: ``checked`` (the question's phrases confirmed
    #: on the answer's page), ``unverified`` (why none was), ``rejected`` (the wrong candidate
    #: visited and the phrase it fails), ``no_distractor`` (why a drawn distractor was not found).
    construction_notes: dict[str, Any] | None = None
    env_settings: dict[str, int] = field(default_factory=dict)
    level: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON record; ``env_settings`` (the observation settings that are not the paper's,
        e.g. ``{"search_results": 5}``) only when there are any, ``level`` (the question's
        difficulty level, see :func:`websailor.questions.question_level`) only when known."""
        out = asdict(self)
        if not out["env_settings"]:
            del out["env_settings"]
        if out["level"] is None:
            del out["level"]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["tool_calls"] = [ToolCallRecord(**c) for c in d.get("tool_calls", [])]
        return cls(**kw)

    def token_view(self, tokenizer: Any, sampled: bool = False) -> tuple[list[int], list[int]]:
        """Token ids of the whole conversation as the model saw it, and the loss mask.

        The conversation is assembled from per-turn pieces (:class:`websailor.models.turns.TurnTemplate`):
        the head, each assistant turn (with ``sampled``, its sampled ``token_ids`` when
        recorded; else its text tokenized on its own), and the template's glue between turns. The mask is 1 on the
        assistant turns' tokens (and the end-of-turn token after a re-tokenized turn), 0 on
        system, user and tool-response turns and template glue. Both lists have the same length.

        Raises:
            TemplateSplitError: the template cannot be split into per-turn pieces.
            ValueError: a turn's ``token_ids`` are not a list of ints.
        """
        from websailor.models.turns import TurnTemplate

        conv = TurnTemplate(tokenizer, self.model or "model").conversation(self.messages, sampled)
        return conv.ids, conv.mask
