"""Parsing one assistant turn into an action: a tool call, a final answer, or an error.

Tolerates what models get wrong (and what the protocol makes likely): a missing closing
``</tool_call>`` because generation stopped at ``<tool_response>``, code fences around the
JSON, trailing commas, single quotes, and Python code passed in ``<code>`` for the
``PythonInterpreter`` tool. Broken JSON is repaired with ``json_repair``; only a result with a
string ``name`` counts as a call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from websailor.jsonio import load_lenient_json

_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.S)
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


def parse_turn(text: str, tools: bool = True) -> Action:
    """Parse an assistant turn.

    An answer wins if the turn holds a complete ``<answer>`` and no tool call before it; a turn
    with several tool calls runs the first and warns. Returns an :class:`Action` whose
    ``error`` explains, for the model, what was wrong. With ``tools=False`` (the no-tools
    baseline) only an answer is valid, and the error says so.
    """
    m = _THINK.search(text)
    action = Action(thought=m.group(1).strip() if m else "", text=text)
    body = _THINK.sub("", text) if m else text
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
