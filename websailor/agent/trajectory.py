"""The trajectory record: one rollout of the agent on one question.

Written as one JSON line per rollout; SFT, RL and evaluation read it back. Fields:
``id, rollout, question, answer, prediction, termination, messages, num_model_calls,
num_tool_calls, tool_calls, tokens, timings, model, env, seed, version`` (docs/agent.md,
"Trajectory record"), and for constructive trajectories ``construction`` and
``construction_notes`` (docs/sft.md; ``None`` in other records and in older files), and
``env_failures`` when a tool call's observation was degraded by the environment. An assistant
message also records its ``finish_reason`` and, when the backend returned them, the sampled
``token_ids`` and their ``logprobs``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

#: Every way a trajectory can end.
TERMINATIONS = ("answer", "max_calls", "context", "timeout", "format_error", "model_error")


@dataclass
class ToolCallRecord:
    """One executed tool call: ``latency_s`` in seconds, ``error`` if it failed,
    ``env_failures`` the kinds of environment failures that degraded its observation
    (:attr:`websailor.tools.ToolResult.env_failures`; ``None`` when the environment held)."""

    name: str
    arguments: dict[str, Any]
    latency_s: float
    error: str | None = None
    env_failures: list[str] | None = None


def env_failure_summary(calls: list[ToolCallRecord]) -> dict[str, Any]:
    """``{"calls": n, "tools": {name: n}, "kinds": {kind: n}}`` over the ``calls`` whose
    observation the environment degraded (``{}`` when none was): ``calls`` counts tool calls,
    ``kinds`` counts failed operations (one call may fail several queries)."""
    failed = [c for c in calls if c.env_failures]
    if not failed:
        return {}
    tools: dict[str, int] = {}
    kinds: dict[str, int] = {}
    for c in failed:
        tools[c.name] = tools.get(c.name, 0) + 1
        for k in c.env_failures or ():
            kinds[k] = kinds.get(k, 0) + 1
    return {"calls": len(failed), "tools": dict(sorted(tools.items())), "kinds": dict(sorted(kinds.items()))}


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def repeated_tool_calls(calls: list[ToolCallRecord] | list[dict[str, Any]]) -> int:
    """How many of ``calls`` (a rollout's tool calls, in order; records or their dicts) repeat
    an earlier one: the same tool with the same arguments, ``goal`` set aside (a visit's goal
    only says what to look for on the same page). A policy that loops on a page it has read
    spends its call budget without new evidence."""
    seen: set[str] = set()
    repeats = 0
    for call in calls:
        name, args = (
            (call.name, call.arguments)
            if isinstance(call, ToolCallRecord)
            else (call.get("name"), call.get("arguments"))
        )
        args = {k: v for k, v in args.items() if k != "goal"} if isinstance(args, dict) else args
        key = json.dumps([name, args], sort_keys=True, default=str)
        repeats += key in seen
        seen.add(key)
    return repeats


def env_failed_calls(record: dict[str, Any]) -> int:
    """How many tool calls of a trajectory record the environment degraded (its
    ``env_failures.calls``; 0 for records without the field, or with ``null`` or ``{}``,
    older files included).

    Raises:
        ValueError: ``env_failures`` is present but not ``{"calls": n, "tools": {name: n},
            "kinds": {kind: n}}`` with counts that are integers of at least 0 (``tools`` and
            ``kinds`` may be absent).
    """
    env = record.get("env_failures")
    if env is None or env == {}:
        return 0
    if not isinstance(env, dict) or not _count(env.get("calls")):
        raise ValueError(f"env_failures must be an object with a count 'calls', got {env!r}"[:300])
    for part in ("tools", "kinds"):
        counts = env.get(part, {})
        if not isinstance(counts, dict) or not all(isinstance(k, str) and _count(n) for k, n in counts.items()):
            raise ValueError(f"env_failures.{part} must map names to counts, got {counts!r}"[:300])
    return env["calls"]


def environment_failed(record: dict[str, Any], max_env_failures: int = 0) -> bool:
    """Whether a rollout is left ungraded for its environment: more than ``max_env_failures``
    of its tool calls had their observation degraded by an environment failure (default 0:
    any such call). Eval reruns such rollouts; RL gives them no reward.

    Raises:
        ValueError: a malformed ``env_failures`` field (:func:`env_failed_calls`).
    """
    return env_failed_calls(record) > max_env_failures


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
    #: The agent's sampling and budgets: ``temperature``, ``top_p``, ``presence_penalty``,
    #: ``max_calls``, ``max_tokens_per_turn`` (the budget the turns had), ``max_context_tokens``
    #: (the context limit they had); ``{}`` in older records and other sources.
    sampling: dict[str, Any] = field(default_factory=dict)
    level: int | None = None
    #: :func:`env_failure_summary` of :attr:`tool_calls`: the tool calls whose observation an
    #: environment failure degraded; ``{}`` when the environment held.
    env_failures: dict[str, Any] = field(default_factory=dict)
    #: ``qa`` or ``report`` (:data:`websailor.agent.loop.TASKS`); older records: ``qa``.
    task: str = "qa"
    #: A report task's parsed report (:meth:`websailor.reports.citations.ParsedReport.to_dict`):
    #: references with their problems, cited statements, counts; ``None`` on QA tasks.
    report: dict[str, Any] | None = None
    #: The context summaries of the rollout (:class:`websailor.agent.summarize.Summary` as
    #: dicts), each with the messages it replaced; ``messages`` holds the last segment.
    summaries: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON record; ``env_settings`` (the observation settings that are not the paper's,
        e.g. ``{"search_results": 5}``) only when there are any, ``sampling`` only when the
        agent recorded it, ``level`` (the question's
        difficulty level, see :func:`websailor.questions.question_level`) only when known,
        ``env_failures`` only when the environment failed a call; a tool call's
        ``env_failures`` only when it has any; ``task`` only when not ``qa``, ``report`` only
        on report tasks, ``summaries`` only when the context was summarized."""
        out = asdict(self)
        if not out["env_settings"]:
            del out["env_settings"]
        if not out["sampling"]:
            del out["sampling"]
        if out["level"] is None:
            del out["level"]
        if not out["env_failures"]:
            del out["env_failures"]
        for key, empty in (("task", "qa"), ("report", None), ("summaries", [])):
            if out[key] == empty:
                del out[key]
        for call in out["tool_calls"]:
            if call["env_failures"] is None:
                del call["env_failures"]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["tool_calls"] = [ToolCallRecord(**c) for c in d.get("tool_calls", [])]
        return cls(**kw)

    def env_failed(self, max_env_failures: int = 0) -> bool:
        """:func:`environment_failed` of this rollout."""
        return environment_failed({"env_failures": self.env_failures}, max_env_failures)

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
