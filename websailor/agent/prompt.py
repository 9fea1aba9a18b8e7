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

SYSTEM_TEMPLATE = """You are a deep research assistant. Your core function is to conduct thorough, multi-source investigations into any topic. You must handle both broad, open-domain inquiries and queries within specialized academic fields. For every request, synthesize information from credible, diverse sources to deliver a comprehensive, accurate, and objective response. When you have gathered sufficient information and are ready to provide the definitive response, you must enclose the entire final answer within <answer></answer> tags.

# Tools

You may call one function per turn to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tools}
</tools>

For each function call, first think inside <think></think> tags, then return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>

Current date: {date}"""

#: Told to the model when the context nears its limit (Tongyi DeepResearch: from about 110k of 128k tokens).
FINAL_ANSWER_NUDGE = (
    "You have now reached the maximum context length you can handle. You should stop making tool calls and, "
    "based on all the information above, think again and provide what you consider the most likely answer "
    "in the following format:<think>your final thinking</think>\n<answer>your answer</answer>"
)


def system_prompt(tools: Iterable[Tool], date: dt.date | None = None) -> str:
    """The system message: tool schemas (one JSON object per line) and today's date."""
    schemas = "\n".join(json.dumps(t.schema(), ensure_ascii=False) for t in tools)
    return SYSTEM_TEMPLATE.format(tools=schemas, date=(date or dt.date.today()).isoformat())


def tool_response(observation: str) -> str:
    """A tool result as the user turn that carries it back to the model."""
    return f"<tool_response>\n{observation}\n</tool_response>"
