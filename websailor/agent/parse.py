"""Parsing one assistant turn into an action: a tool call, a final answer, or an error.

Tolerates what models get wrong (and what the protocol makes likely): a missing closing
``</tool_call>`` because generation stopped at ``<tool_response>``, code fences around the
JSON, trailing commas, single quotes, and Python code passed in ``<code>`` for the
``PythonInterpreter`` tool. Broken JSON is repaired with ``json_repair``; only a result with a
string ``name`` counts as a call.

The thought is read the way models write it: an unclosed ``<think>`` ends at the first
``<tool_call>`` or ``<answer>`` after it (one with nothing after it leaves a turn with no
action, a format error), and a ``</think>`` with no ``<think>`` before it (the chat template
opened the thought in the generation prompt) closes a thought that starts the turn. A tool call
followed by an answer runs the call and warns that the answer was ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from websailor.jsonio import load_lenient_json

_OPEN, _CLOSE = "<think>", "</think>"
_ACTION_TAGS = ("<tool_call>", "<answer>")
_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.S)
_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)
_CODE = re.compile(r"<code>(.*?)(?:</code>|$)", re.S)


@dataclass
class ToolCall:
    """A parsed call: tool ``name`` and its ``arguments`` object (``code`` for Python)."""

    name: str
    arguments: dict[str, Any]
    code: str | None = None


@dataclass
class Action:
    """What an assistant turn asks for. Exactly one of ``tool_call``, ``answer`` or ``error``
    is set; ``thought`` is the text of ``<think>`` (possibly empty)."""

    thought: str = ""
    text: str = ""  # the whole reply
    tool_call: ToolCall | None = None
    answer: str | None = None
    error: str | None = None
    warnings: list[str] = field(default_factory=list)


def split_thought(text: str) -> tuple[str, str]:
    """``(thought, body)`` of an assistant turn: the text of its first thought, and the turn
    without its thoughts (where the tool call or the answer is).

    A ``</think>`` before any ``<think>`` closes a thought that starts the turn. A ``<think>``
    with no ``</think>`` after it runs to the first ``<tool_call>`` or ``<answer>`` after it,
    or to the end of the turn.
    """
    thoughts: list[str] = []
    parts: list[str] = []
    pos = 0
    close = text.find(_CLOSE)
    if close >= 0 and not 0 <= text.find(_OPEN) < close:
        thoughts.append(text[:close])
        pos = close + len(_CLOSE)
    while (start := text.find(_OPEN, pos)) >= 0:
        parts.append(text[pos:start])
        inner = start + len(_OPEN)
        end = text.find(_CLOSE, inner)
        if end >= 0:
            thoughts.append(text[inner:end])
            pos = end + len(_CLOSE)
            continue
        ends = [i for i in (text.find(tag, inner) for tag in _ACTION_TAGS) if i >= 0]
        pos = min(ends, default=len(text))
        thoughts.append(text[inner:pos])
    parts.append(text[pos:])
    return (thoughts[0].strip() if thoughts else ""), "".join(parts)


def parse_turn(text: str, tools: bool = True) -> Action:
    """Parse an assistant turn.

    An answer wins if the turn holds a complete ``<answer>`` and no tool call before it; a turn
    with several tool calls runs the first and warns, and so does one with an answer after its
    tool call (the call runs, the answer is ignored). The thought is read as
    :func:`split_thought` reads it. Returns an :class:`Action` whose ``error`` explains, for the
    model, what was wrong. With ``tools=False`` (the no-tools baseline) only an answer is valid,
    and the error says so.
    """
    thought, body = split_thought(text)
    action = Action(thought=thought, text=text)
    call_at = body.find("<tool_call>")
    answer_at = body.find("<answer>")
    if answer_at >= 0 and (call_at < 0 or answer_at < call_at):
        action.answer = _ANSWER.search(body).group(1).strip()
        if not action.answer:
            action.answer, action.error = None, "The <answer></answer> is empty: write the final answer inside it."
        return action
    if not tools:
        action.error = (
            "There are no tools here: give the final answer inside <answer></answer>."
            if call_at >= 0
            else "Your reply has no <answer>: give the final answer inside <answer></answer>."
        )
        return action
    if call_at < 0:
        action.error = (
            "Your reply has neither a <tool_call> nor an <answer>. Call one tool as "
            '<tool_call>{"name": ..., "arguments": {...}}</tool_call>, or give the final answer '
            "inside <answer></answer>."
        )
        return action
    calls = _CALL.findall(body)
    if len(calls) > 1:
        action.warnings.append(f"Only the first of {len(calls)} tool calls was run: make one call per turn.")
    if "<answer>" in _CALL.sub("", body[call_at:]):
        action.warnings.append(
            "The <answer> after the tool call was ignored: give the final answer in a turn of its own, "
            "after the tool's result."
        )
    raw = calls[0]
    code_match = _CODE.search(raw)
    code = code_match.group(1).strip() if code_match else None
    obj = load_lenient_json(_CODE.sub("", raw) if code_match else raw)
    if obj is None or not isinstance(obj.get("name"), str) or not obj["name"].strip():
        action.error = (
            'The tool call is not valid: write a JSON object {"name": "<tool name>", '
            '"arguments": {...}} inside <tool_call></tool_call>.'
        )
        return action
    args = obj.get("arguments", {})
    if isinstance(args, str):
        loaded = load_lenient_json(args)
        args = loaded if loaded is not None else args
    if not isinstance(args, dict):
        action.error = f"The arguments of tool '{obj['name']}' must be a JSON object, got {type(args).__name__}."
        return action
    action.tool_call = ToolCall(obj["name"].strip(), args, code)
    return action


def count_valid_turns(messages: list[dict], tools: bool = True) -> tuple[int, int]:
    """Format validity of a conversation: ``(valid, total)`` assistant turns, where a valid turn
    parses (:func:`parse_turn`) into a tool call or a final answer."""
    turns = [m.get("content") or "" for m in messages if m.get("role") == "assistant"]
    return sum(parse_turn(t, tools).error is None for t in turns), len(turns)
