"""The LLM writer (``websailor synth --llm SPEC``): a model writes an item's question from its
facts, in the style of the questions SailorFog-QA-V2 trains on, and the result is verified again
before it is kept.

The model gets the answer's type, the item's facts (each constraint's phrase, numbered) and the
template question, and answers with JSON: ``{"question": ..., "facts_used": [numbers]}``. The
rewrite is kept only if every check passes, in this order; otherwise the template question stays
and ``rendering`` records why (``{"mode": "template", "reason": CODE, "detail": ...}``):

* ``model_error``: the endpoint failed (the dataset loop stops asking after a few in a row);
* ``not_json``: the reply is prose, not the JSON object asked for;
* ``not_a_question``: the question is empty, too short, or does not end with "?";
* ``bad_text``: it holds characters that are not text (control characters, lone surrogates,
  bidirectional overrides);
* ``too_long``: more than :data:`MAX_SENTENCES` sentences or :data:`MAX_WORDS` words (the prompt
  asks for one to four sentences);
* ``leaks_answer``: the answer, an alias or a distinctive word of it appears;
* ``bad_facts``: ``facts_used`` is not a list of the facts' numbers;
* ``dropped_constraint``: a fact the writer says it used is not in its text (its numbers,
  decades, initials, or most of its content words), or a linked entity was left out (every
  link is a hop of the item's solution path, so it must be stated);
* ``not_unique``: the facts the question states no longer single out the answer over the whole
  graph.

A question that leaves out a fact the answer does not need (a second blurred value, a name
mask) is kept, and the item's constraints and operators become the ones it states, so that the
stored item is verified against what its question says.
"""

from __future__ import annotations

import json
import re

from websailor.corpus.text import split_sentences
from websailor.errors import ModelError
from websailor.models.base import ChatModel, SamplingParams
from websailor.synth.constraints import Constraint, candidates, is_leak_free
from websailor.synth.graph import KnowledgeGraph
from websailor.synth.phrasing import type_word

WRITER_PROMPT = """You write one hard research question about a hidden answer, in the style of BrowseComp: one to four sentences that chain the facts below, naming every other entity only by the description given, and keeping each period, number, comparison and name hint exactly as vague as it is stated (copy numbers, decades, centuries and initials as they are). Do not add facts, do not sharpen any, and never name the answer or give it away. The answer is a {type}.

Facts about the answer:
{facts}

A plain version of the question: {template}

Reply with a JSON object only: {{"question": "<your question>", "facts_used": [<the numbers of the facts your question states>]}}"""

#: rejection codes, in the order the checks run
REASONS = (
    "model_error",
    "not_json",
    "not_a_question",
    "bad_text",
    "too_long",
    "leaks_answer",
    "bad_facts",
    "dropped_constraint",
    "not_unique",
)
#: the longest question kept, in sentences and words
MAX_SENTENCES = 6
MAX_WORDS = 150
#: characters a question may not hold: controls, lone surrogates, zero-width and direction marks
_NOT_TEXT = re.compile("[\x00-\x1f\x7f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
#: wall-clock budget of one request, retries included: a hanging endpoint costs at most this per item
WRITER_TIMEOUT_S = 60.0

_CONTENT = re.compile(r"[^\W_]{4,}")
_TOKENS = re.compile(r"\d[\d,]*s?|\b[A-Z]\.")
_STOP = frozenset(
    """which with that from this have their about associated whose name word words first letters starting certain
    same initials""".split()
)
#: the operator recorded for each kind of constraint that is not a link
_OP_OF_KIND = {
    "span_start": "vague_period",
    "span_end": "vague_period",
    "quantity": "vague_number",
    "name": "mask_name",
    "compare": "comparison",
    "relative_start": "relative_time",
    "described": "self_description",
}


def survives(text: str, c: Constraint) -> bool:
    """Whether ``text`` states constraint ``c``: every number, decade and initial of its phrase,
    and at least 60% of its content words (case-insensitive)."""
    low = text.lower()
    if any(t.lower() not in low for t in _TOKENS.findall(c.phrase)):
        return False
    words = [w.lower() for w in _CONTENT.findall(c.phrase) if w.lower() not in _STOP]
    return not words or sum(w in low for w in words) >= max(1, round(0.6 * len(words)))


def _parse(reply: str) -> dict | None:
    """The JSON object in a reply (a code fence or text around it is allowed), or ``None``."""
    start, end = reply.find("{"), reply.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        data = json.loads(reply[start : end + 1])
    except ValueError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get("question"), str) else None


def _reject(question: str, code: str, detail: str = "") -> tuple[str, dict]:
    return question, {"mode": "template", "reason": code, "detail": detail}


def write_question(model: ChatModel, kg: KnowledgeGraph, item: dict) -> tuple[str, dict]:
    """Ask ``model`` to write ``item``'s question from its facts, and verify the result.

    Args:
        model: any chat model (an OpenAI-compatible endpoint with ``--llm``).
        kg: the graph the item was built from (uniqueness is checked over all of it).
        item: an item as :func:`websailor.synth.items.build_item` returns it. When the written
            question is kept and states fewer facts than the item had, its ``constraints`` and
            ``uncertainty`` are narrowed to them in place.

    Returns:
        ``(question, rendering)``: the written question and ``{"mode": "llm", "template": ...,
        "facts_used": [...]}``, or the template question and ``{"mode": "template", "reason":
        CODE, "detail": ...}`` (codes in :data:`REASONS`). Never raises for a bad reply.
    """
    template, answer = item["question"], item["answer"]
    cs = [Constraint.from_dict(c) for c in item["constraints"]]
    facts = "\n".join(f"{i}. It {c.phrase}" if c.params.get("form") != "object" else f"{i}. {c.phrase} it"
                      for i, c in enumerate(cs, 1))  # fmt: skip
    prompt = WRITER_PROMPT.format(type=type_word(kg, answer), facts=facts, template=template)
    try:
        gen = model.chat(
            [{"role": "user", "content": prompt}],
            SamplingParams(temperature=0.7, max_tokens=400, stop=[], timeout_s=WRITER_TIMEOUT_S),
        )
    except ModelError as e:
        return _reject(template, "model_error", str(e))
    data = _parse(gen.text)
    if data is None:
        return _reject(template, "not_json", gen.text[:200])
    text = " ".join(data["question"].split())
    if len(text) < 20 or not text.endswith("?"):
        return _reject(template, "not_a_question", text[:200])
    if _NOT_TEXT.search(text):
        return _reject(template, "bad_text", repr(text[:200]))
    if len(text.split()) > MAX_WORDS or len(split_sentences(text)) > MAX_SENTENCES:
        return _reject(template, "too_long", f"{len(text.split())} words")
    if not is_leak_free(text, answer, item.get("aliases", ())):
        return _reject(template, "leaks_answer", text[:200])
    used = data.get("facts_used")
    if (
        not isinstance(used, list)
        or not used
        or not all(isinstance(i, int) and not isinstance(i, bool) and 1 <= i <= len(cs) for i in used)
    ):
        return _reject(template, "bad_facts", repr(used)[:200])
    stated = sorted(set(used))
    lost = next((cs[i - 1] for i in stated if not survives(text, cs[i - 1])), None)
    if lost is not None:
        return _reject(template, "dropped_constraint", f"says it states {lost.phrase!r} but does not")
    left_out = [c for i, c in enumerate(cs, 1) if i not in stated]
    link = next((c for c in left_out if c.kind == "linked"), None)
    if link is not None:
        return _reject(template, "dropped_constraint", f"leaves out the link {link.phrase!r}")
    kept = [cs[i - 1] for i in stated]
    if candidates(kg, kept) != [answer]:
        return _reject(template, "not_unique", f"{len(left_out)} fact(s) left out; the rest fit other pages too")
    if left_out:
        _narrow(item, kept, left_out)
    return text, {"mode": "llm", "template": template, "facts_used": stated}


def _narrow(item: dict, kept: list[Constraint], left_out: list[Constraint]) -> None:
    """Drop the left-out (non-link) constraints and the operator each one recorded."""
    ops = list(item["uncertainty"])
    for c in left_out:
        op = _OP_OF_KIND[c.kind]
        entity = c.params.get("other")
        i = next(
            (i for i, o in enumerate(ops) if o["op"] == op and (entity is None or o["params"].get("entity") == entity)),
            None,
        )
        if i is not None:
            ops.pop(i)
    item["uncertainty"] = ops
    item["constraints"] = [c.to_dict() for c in kept]
