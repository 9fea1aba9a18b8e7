"""How a QA file's questions read: the wording report of ``websailor synth stats``.

The figures say whether questions chain specific relations in a few sentences (as the
SailorFog-QA-V2 questions the paper's team shows do) or read like a template: how many distinct
relation phrases the links use, the share of links worded as a mere association ("is associated
with"), the share of items that close with a name mask, by level, the mean words and sentences
per question, and the constraints per item. It reads any QA file, including files written
before links carried relation phrases (their links are all associations).
"""

from __future__ import annotations

import statistics
from collections import Counter

from websailor.corpus.text import split_sentences

#: the wording of a link whose evidence gave no relation phrase
ASSOCIATION = "is associated with"


def has_name_mask(item: dict) -> bool:
    """Whether an item states a name mask (its ``mask_name`` operator)."""
    return any(o["op"] == "mask_name" for o in item["uncertainty"])


def question_shape(question: str) -> dict:
    """Words and sentences of one question (sentences as the corpus splits them, so "J. C."
    and "c. 1200" do not end one)."""
    return {"words": len(question.split()), "sentences": len(split_sentences(question))}


def wording_report(items: list[dict]) -> dict:
    """Wording figures of ``items`` (QA items as ``synth`` writes them).

    Returns ``{}`` for no items, else: ``links`` (linked constraints), ``distinct_relations``
    (distinct relation phrases among them), ``association_share`` (share of links worded "is
    associated with"), ``name_mask_share`` (share of items with a ``mask_name`` operator),
    ``name_mask_share_by_level`` (``{level: share}``), ``mean_words``, ``mean_sentences``,
    ``mean_constraints``, ``top_relations`` (the five most used phrases with their counts), and
    ``writer``: ``{"llm": questions the LLM writer wrote, "rejected": {reason: count}}`` when
    any item records a writer's attempt (``rendering``), else ``None``.
    """
    if not items:
        return {}
    links = [c for it in items for c in it["constraints"] if c["kind"] == "linked"]
    relations = Counter(c["params"]["relation"] for c in links if c["params"].get("relation"))
    associations = sum(not c["params"].get("relation") for c in links)
    masked = [has_name_mask(it) for it in items]
    by_level: dict[int, list[bool]] = {}
    for it, m in zip(items, masked):
        by_level.setdefault(it.get("level", 4), []).append(m)
    shapes = [question_shape(it["question"]) for it in items]
    return {
        "links": len(links),
        "distinct_relations": len(relations),
        "association_share": round(associations / len(links), 3) if links else None,
        "name_mask_share": round(sum(masked) / len(items), 3),
        "name_mask_share_by_level": {lv: round(sum(ms) / len(ms), 3) for lv, ms in sorted(by_level.items())},
        "mean_words": round(statistics.mean(s["words"] for s in shapes), 1),
        "mean_sentences": round(statistics.mean(s["sentences"] for s in shapes), 2),
        "mean_constraints": round(statistics.mean(len(it["constraints"]) for it in items), 2),
        "top_relations": dict(relations.most_common(5)),
        "writer": _writer_counts(items),
    }


def _writer_counts(items: list[dict]) -> dict | None:
    renderings = [it.get("rendering") or {} for it in items]
    rejected = Counter(r["reason"] for r in renderings if r.get("mode") == "template" and r.get("reason"))
    written = sum(r.get("mode") == "llm" for r in renderings)
    return {"llm": written, "rejected": dict(rejected.most_common())} if written or rejected else None
