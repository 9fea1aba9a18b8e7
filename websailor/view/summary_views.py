"""Context summaries in a rollout's timeline (:mod:`websailor.agent.summarize`): the whole
conversation is rebuilt (:func:`websailor.agent.summarize.full_messages`), and each summary shows
where it came in, marked as a context summary with the context's tokens at that moment, after
the turns it replaced (collapsed). A summary the model did not write (an error, an empty reply)
replaced nothing: it is listed with its reason.

A record is read as it is, whatever its fields hold: a ``summaries`` that is not a list, an
entry that is not an object, a ``replaced`` that is not a list of messages are left out, never
an error.
"""

from __future__ import annotations

from typing import Any

from websailor.agent.summarize import full_messages


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _entries(rec: dict[str, Any]) -> list[dict[str, Any]]:
    summaries = rec.get("summaries")
    return [s for s in summaries if isinstance(s, dict)] if isinstance(summaries, list) else []


def _written(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The summaries the model wrote, in order, each with its replaced messages checked."""
    out = []
    for s in _entries(rec):
        if isinstance(s.get("text"), str) and s["text"]:
            replaced = s.get("replaced") if isinstance(s.get("replaced"), list) else []
            out.append({**s, "replaced": [m for m in replaced if isinstance(m, dict)]})
    return out


def conversation(rec: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(messages, summaries)``: the whole conversation of a trajectory record, each summary
    marked where it came in (a message with ``"summary": i``), and the summaries marked so,
    as :func:`summary_entry` shows them. A record without summaries gives its messages."""
    raw = rec.get("messages")
    messages = [m for m in raw if isinstance(m, dict)] if isinstance(raw, list) else []
    written = _written(rec)
    if not written or len(messages) < 2:
        return messages, []
    question = rec.get("question") if isinstance(rec.get("question"), str) else ""
    whole = full_messages({"messages": messages, "question": question, "summaries": written})
    return whole, [summary_entry(s, i) for i, s in enumerate(written)]


def summary_index(message: dict[str, Any], summaries: list[dict[str, Any]]) -> int | None:
    """The index of the summary ``message`` marks (:func:`conversation`), ``None`` for any
    other message."""
    i = message.get("summary")
    return i if _count(i) is not None and 0 <= i < len(summaries) and message.get("role") == "user" else None


def summary_entry(s: dict[str, Any], i: int) -> dict[str, Any]:
    """What the timeline shows of the ``i``-th summary written: ``n`` (1-based), the model
    calls before it, the context's tokens when it was asked, the text, its tokens and the
    number of messages it replaced."""
    return {
        "n": i + 1,
        "call": _count(s.get("call")),
        "context_tokens": _count(s.get("context_tokens")),
        "text": s["text"],
        "prompt_tokens": _count(s.get("prompt_tokens")),
        "completion_tokens": _count(s.get("completion_tokens")),
        "replaced": len(s["replaced"]),
    }


def failed_summaries(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The summaries asked for that the model did not write: ``call``, ``context_tokens`` and
    ``error`` of each."""
    return [
        {
            "call": _count(s.get("call")),
            "context_tokens": _count(s.get("context_tokens")),
            "error": str(s.get("error") or "no summary came back"),
        }
        for s in _entries(rec)
        if not (isinstance(s.get("text"), str) and s["text"])
    ]


def timeline(steps: list[dict[str, Any]], summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The steps in blocks: for each summary, the steps it replaced (``segment`` of each step:
    the summaries before it) and the summary; then the steps after the last one (``summary``
    ``None``)."""
    blocks = [
        {"summary": s, "steps": [st for st in steps if st.get("segment", 0) == i]} for i, s in enumerate(summaries)
    ]
    blocks.append({"summary": None, "steps": [st for st in steps if st.get("segment", 0) >= len(summaries)]})
    return blocks
