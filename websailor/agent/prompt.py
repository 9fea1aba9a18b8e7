"""The system prompt of the agent protocol (Tongyi DeepResearch / WebSailor-V2 format).

The tools are listed as JSON schemas inside ``<tools>...</tools>``; the model thinks in
``<think>``, then writes one ``<tool_call>`` or a final ``<answer>``; the prompt ends with the
current date (as in the released Tongyi DeepResearch inference code).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable

from websailor.tools.base import Tool

SYSTEM_TEMPLATE = """You are a research agent. You answer hard questions by searching for and reading sources, checking each claim against the evidence you find, and combining facts from several pages when no single page holds the answer. Keep going until the evidence settles the question; then give the final answer, as short as the question allows, between <answer> and </answer>.

# Tools

Each turn you may call at most one of the functions whose JSON schemas are listed between <tools> and </tools>:
<tools>
{tools}
</tools>

To call one, first reason between <think> and </think>, then write the call as a JSON object with the keys "name" and "arguments" between <tool_call> and </tool_call>:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>
The result comes back in the next message between <tool_response> and </tool_response>.

Current date: {date}"""

#: Told to the model when the context nears its limit (the Tongyi DeepResearch setup nudges
#: from about 110k of 128k tokens).
FINAL_ANSWER_NUDGE = (
    "Your context is nearly full, so no more tool calls are possible. Using what you have found so far, "
    "think once more and give your best answer now, as <think>your reasoning</think>\n<answer>your answer</answer>"
)

#: The system message of the no-tools baseline (``--env none``): the same answer format, no tools.
DIRECT_TEMPLATE = """You are a research agent without tools: answer from what you know. Reason between <think> and </think>, then give the final answer, as short as the question allows, between <answer> and </answer>.

Current date: {date}"""


def system_prompt(tools: Iterable[Tool], date: dt.date | None = None, task: str = "qa") -> str:
    """The system message: tool schemas (one JSON object per line) and today's date; with no
    tools, the direct-answer prompt of the no-tools baseline. ``task="report"``: the report
    task's prompts (:mod:`websailor.reports.prompt`)."""
    from websailor.reports.prompt import REPORT_DIRECT_TEMPLATE, REPORT_TEMPLATE

    tools = list(tools)
    today = (date or dt.date.today()).isoformat()
    if not tools:
        return (REPORT_DIRECT_TEMPLATE if task == "report" else DIRECT_TEMPLATE).format(date=today)
    schemas = "\n".join(json.dumps(t.schema(), ensure_ascii=False) for t in tools)
    return (REPORT_TEMPLATE if task == "report" else SYSTEM_TEMPLATE).format(tools=schemas, date=today)


def tool_response(observation: str) -> str:
    """A tool result as the user turn that carries it back to the model."""
    return f"<tool_response>\n{observation}\n</tool_response>"
