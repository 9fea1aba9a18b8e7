"""Context management for long horizons: when a conversation nears the model's context, the
turns after the question are replaced by a summary the model writes of what it has found so
far, and the agent goes on from the question and that summary (the approach of ReSum, Wu et
al., arXiv 2509.13313, section 3: periodic summarization of the interaction history into a
compact reasoning state).

The summary is asked of the agent's own model, over the conversation as it stands (its prefix
is the one the model has just read, so a server with prefix caching reads it once), with
:data:`SUMMARY_REQUEST` as the last user turn. The trajectory keeps each summary with the
messages it replaced (:class:`Summary`), so nothing of the rollout is lost: the viewer shows
them in the timeline and :func:`full_messages` rebuilds the whole conversation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from websailor.agent.parse import split_thought

#: The last user turn of a summary request.
SUMMARY_REQUEST = (
    "Your context is nearly full. Stop researching for a moment and write a summary of your work so far, "
    "which will replace the conversation above: the task; every fact you found that bears on it, each with "
    "the URL of the page it came from; what is still open; and what you planned to do next. Keep numbers, "
    "names and URLs exact. Write only the summary, between <summary> and </summary>."
)

#: What opens the summary in the user turn that replaces the conversation.
SUMMARY_HEADER = "Summary of your research so far (it replaces the earlier turns, which no longer fit in your context):"
#: Continue from a summary.
SUMMARY_FOOTER = "Continue the research from here, or give your final answer if the summary settles it."


@dataclass
class Summary:
    """One summarization of a rollout.

    Attributes:
        call: model calls of the agent made before it (it happened before call ``call + 1``).
        context_tokens: the context's tokens when it was triggered.
        replaced: the messages it replaced (everything after the system message and the task).
        text: the summary (``None`` when the model gave none; then nothing was replaced).
        prompt_tokens, completion_tokens: the summary request's tokens.
        error: why no summary came back (a model error, an empty reply).
    """

    call: int
    context_tokens: int
    replaced: list[dict[str, Any]] = field(default_factory=list)
    text: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summary_text(reply: str) -> str:
    """The summary in a model's reply: the text of ``<summary>`` when present, else the reply
    without its thought; stripped (``""``: no summary)."""
    _, body = split_thought(reply)
    start = body.find("<summary>")
    if start >= 0:
        body = body[start + len("<summary>") :]
        body = body.split("</summary>", 1)[0]
    return body.strip()


def resumed_task(task: str, summary: str) -> str:
    """The user turn that replaces the conversation: the task, then the summary."""
    return f"{task}\n\n{SUMMARY_HEADER}\n{summary}\n\n{SUMMARY_FOOTER}"


def full_messages(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The whole conversation of a trajectory record, summaries undone: the system message, the
    task, and for each summary the turns it replaced followed by the user turn that replaced
    them (marked ``"summary": i``, the summary's index), then the turns after the last one. A
    record without summaries gives its ``messages``."""
    messages = list(record.get("messages") or [])
    summaries = [s for s in record.get("summaries") or [] if isinstance(s, dict) and s.get("text")]
    if not summaries or len(messages) < 2:
        return messages
    task = str(record.get("question") or "")
    out = [messages[0], {"role": "user", "content": task}]
    for i, s in enumerate(summaries):
        out.extend(m for m in s.get("replaced") or [] if isinstance(m, dict))
        out.append({"role": "user", "content": resumed_task(task, str(s["text"])), "summary": i})
    out.extend(messages[2:])
    return out
