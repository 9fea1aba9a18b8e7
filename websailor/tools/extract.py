"""Page extraction for ``visit`` in every environment: the goal-ranked passage extractor
(the offline default) and the LLM extractor.

On the real web an LLM reads the page and writes evidence and a summary for the goal
(WebSailor-V2 / Tongyi DeepResearch ``visit``). Offline, this extractor does the same job
without a model: it ranks the page's passages by BM25 against the goal, puts the most
relevant first, and builds a short extractive summary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from websailor.corpus.index import BM25Index
from websailor.corpus.store import Document
from websailor.corpus.text import split_sentences
from websailor.text import truncate
from websailor.tools.visit import Extraction

if TYPE_CHECKING:
    from websailor.models.base import ChatModel

#: The evidence budget of one visited page (characters): ``visit``'s default (``--evidence-chars``).
EVIDENCE_CHARS = 4000


def _units(doc: Document) -> list[str]:
    """Passages of a page for ranking: paragraphs, or sentences when the page has few."""
    paragraphs = [p for p in doc.paragraphs if not p.startswith("## ")]
    if len(paragraphs) >= 3:
        return paragraphs
    return [s for p in paragraphs for s in split_sentences(p)] or [doc.title]


def extract(
    doc: Document,
    goal: str,
    index: BM25Index,
    max_evidence_chars: int = EVIDENCE_CHARS,
    summary_sentences: int = 3,
    max_summary_chars: int = 600,
) -> Extraction:
    """Rank ``doc``'s passages by relevance to ``goal``.

    Args:
        doc: the page.
        goal: what the agent wants from the page; blank keeps page order.
        index: supplies the analyzer (same stemming as search).
        max_evidence_chars: evidence budget; passages past it are dropped (the last one cut);
            the best passage is kept, cut to the budget, however small the budget.
        summary_sentences: sentences in the summary: the page's opening sentence plus the
            sentences that best match the goal, in page order.

    Returns:
        :class:`Extraction` with evidence passages (matching ones by descending score, then
        the rest in page order) and the summary.
    """
    units = _units(doc)
    scores = index.score_texts(goal, units) if goal.strip() else np.zeros(len(units), dtype=np.float32)
    order = sorted(range(len(units)), key=lambda i: (-float(scores[i]), i))
    evidence: list[str] = []
    used = 0
    for i in order:
        room = max_evidence_chars - used
        if room < 80 and evidence:
            break
        evidence.append(truncate(units[i], room))
        used += len(evidence[-1]) + 1

    sentences = [s for p in doc.paragraphs if not p.startswith("## ") for s in split_sentences(p)]
    if not sentences:
        return Extraction(evidence, doc.title)
    s_scores = index.score_texts(goal, sentences) if goal.strip() else np.zeros(len(sentences), dtype=np.float32)
    chosen = {0}
    for i in sorted(range(len(sentences)), key=lambda i: (-float(s_scores[i]), i)):
        if len(chosen) >= summary_sentences or s_scores[i] <= 0:
            break
        chosen.add(i)
    if len(chosen) < summary_sentences:
        chosen.update(range(min(summary_sentences, len(sentences))))
    summary = truncate(" ".join(sentences[i] for i in sorted(chosen)), max_summary_chars)
    return Extraction(evidence, summary)


EXTRACTOR_PROMPT = """Read the page below for a reader who has one goal, and report what in it serves that goal.

## Page
{content}

## Goal
{goal}

## What to write
- "rational": which parts of the page bear on the goal, and why.
- "evidence": those parts quoted from the page, word for word where wording matters.
- "summary": a short paragraph on what the page says about the goal and how far it settles it.

Answer with one JSON object with exactly these three keys."""


def llm_extract(
    model: ChatModel, doc: Document, goal: str, max_chars: int = 24000, attempts: int = 3
) -> Extraction | None:
    """LLM page extraction, as the web ``visit`` tool of Tongyi DeepResearch does it: the
    model reads the page and the goal and answers JSON with rationale, evidence and summary.
    An empty or unparsable answer is retried with the page cut to half its length.

    Returns ``None`` when every attempt fails (the caller falls back to :func:`extract`).
    Raises :class:`websailor.errors.ModelError` only through the model.
    """
    from websailor.jsonio import load_lenient_json
    from websailor.models.base import SamplingParams

    content = doc.text[:max_chars]
    params = SamplingParams(temperature=0.7, max_tokens=1024, stop=[])
    for _ in range(attempts):
        prompt = EXTRACTOR_PROMPT.format(content=content, goal=goal)
        gen = model.chat([{"role": "user", "content": prompt}], params)
        obj = load_lenient_json(gen.text) if gen.text.strip() else None
        if obj and str(obj.get("evidence", "")).strip() and str(obj.get("summary", "")).strip():
            return Extraction([str(obj["evidence"]).strip()], str(obj["summary"]).strip())
        content = content[: len(content) // 2]
        if len(content) < 200:
            break
    return None


def extract_for_goal(
    doc: Document,
    goal: str,
    index: BM25Index,
    summary_model: ChatModel | None = None,
    max_evidence_chars: int = EVIDENCE_CHARS,
    cut_llm_evidence: bool = False,
) -> Extraction:
    """What ``visit`` reports of ``doc`` in every environment: the LLM extractor's evidence and
    summary when ``summary_model`` is given and its output is usable (:func:`llm_extract`),
    else the goal-ranked passages (:func:`extract`) within ``max_evidence_chars``. With
    ``cut_llm_evidence`` (an evidence budget set with ``--evidence-chars``), the LLM's evidence
    is cut to that budget too."""
    found = llm_extract(summary_model, doc, goal) if summary_model is not None else None
    if found is None:
        return extract(doc, goal, index, max_evidence_chars)
    if cut_llm_evidence:
        found = Extraction([truncate(e, max_evidence_chars) for e in found.evidence], found.summary)
    return found
