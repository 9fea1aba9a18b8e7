"""The trajectory record: one rollout of the agent on one question.

Written as one JSON line per rollout; SFT, RL and evaluation read it back. Fields:
``id, rollout, question, answer, prediction, termination, messages, num_model_calls,
num_tool_calls, tool_calls, tokens, timings, model, env, seed, version`` (docs/agent.md,
"Trajectory record").
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
    messages: list[dict[str, str]] = field(default_factory=list)
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["tool_calls"] = [ToolCallRecord(**c) for c in d.get("tool_calls", [])]
        return cls(**kw)

    def token_view(self, tokenizer: Any) -> tuple[list[int], list[int]]:
        """Chat-templated token ids of the whole conversation and the loss mask.

        The mask is 1 on the tokens of each assistant turn as the template renders it, from
        the end of the generation prompt (the assistant header) up to and including its
        end-of-turn token, and 0 on everything else: system, user and tool-response turns,
        role headers and the whitespace a template puts between turns. The span is taken
        from the rendered text, not from the message, so templates that reformat replies
        (Qwen3 writes ``</think>`` followed by a blank line; Llama 3 trims) still mask
        exactly what the model must produce. Both lists have the same length.

        Requires a fast tokenizer (offsets) with a chat template.

        Raises:
            ValueError: the template does not render the conversation prefix by prefix (a
                later turn changes how an earlier one is rendered).
        """
        text = tokenizer.apply_chat_template(self.messages, tokenize=False)
        spans: list[tuple[int, int]] = []
        for i, m in enumerate(self.messages):
            if m["role"] != "assistant":
                continue
            before = tokenizer.apply_chat_template(self.messages[:i], tokenize=False, add_generation_prompt=True)
            upto = tokenizer.apply_chat_template(self.messages[: i + 1], tokenize=False)
            if not text.startswith(upto) or not upto.startswith(before):
                raise ValueError("the chat template does not render conversations prefix by prefix")
            end = len(upto.rstrip())
            if end > len(before):
                spans.append((len(before), end))
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        mask = []
        for a, b in enc["offset_mapping"]:
            mask.append(int(any(s <= a and b <= e and b > a for s, e in spans)))
        return list(enc["input_ids"]), mask
