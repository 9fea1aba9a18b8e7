"""What a trajectory file teaches (``websailor traj stats``): whether its choices are grounded,
whether its checks can fail, and how many of its items are lookups (issue 38); and the kinds of
a constructive file (:func:`construction_counts`, printed by ``traj build``).

Every figure is read from the trajectories' messages by the same functions that measure an
agent's rollouts (:mod:`websailor.eval.grounding`), so a file of any source (constructive,
expert, imported) is measured alike:

* ``visits`` and ``visits_grounded``: the turns that open a page, and those whose page was
  shown by an earlier observation and whose thought says where (a result's rank, or a quoted
  line naming it): :func:`~websailor.eval.grounding.choice_grounding`;
* ``checks``, ``rejections`` and ``with_rejection``: the verdicts on a page just read, those
  that say no, and the trajectories with at least one rejected candidate;
* ``answers_grounded``: the final answer appears in an observation before it is given;
* ``lookups``: the first search of the question's own text lists the answer's page (the short
  path: pick it from the list, check it, answer); the others must follow a clue.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from websailor.errors import InputFormatError
from websailor.eval.grounding import choice_grounding, record_gold, rollout_grounding
from websailor.jsonio import read_appended_jsonl
from websailor.judge.em import normalize_answer
from websailor.judge.gold import Gold
from websailor.text import fold_space
from websailor.tools.observation_parse import bare_title, search_results
from websailor.train.constructive import CONSTRUCTIONS


def question_search_lists(messages: list[dict], question: str, gold: Gold | None) -> bool | None:
    """Whether a search of ``question``'s own text (the first that queries it) lists a page
    whose title (or bare title) is a gold form; ``None`` without a gold answer or without such
    a search."""
    if gold is None:
        return None
    forms = {normalize_answer(f) for f in gold.forms} - {""}
    asked = fold_space(question)
    for m in messages[2:]:
        if m.get("role") != "user" or not isinstance(m.get("content"), str):
            continue
        hits = [h for h in search_results(m["content"]) if fold_space(h.query) == asked]
        if hits:
            return any(forms & {normalize_answer(h.title), normalize_answer(bare_title(h.title))} for h in hits)
    return None


def check_trajectory(rec: dict, where: str, needs_gold: bool = False) -> None:
    """Refuse a record that is no trajectory record: ``messages`` present but not a list of
    message objects (or, with ``needs_gold``, missing or empty, or the record without a
    ``question`` and a gold ``answer``, as a training trajectory has).

    Raises:
        InputFormatError: naming ``where`` (the file and line) and what is wrong.
    """
    messages = rec.get("messages")
    why = None
    if messages is not None and not (isinstance(messages, list) and all(isinstance(m, dict) for m in messages)):
        why = "its messages are not a list of message objects"
    elif needs_gold and not messages:
        why = "it has no messages"
    elif needs_gold and not str(rec.get("question") or "").strip():
        why = "it has no question"
    elif needs_gold and record_gold(rec) is None:
        why = "it has no gold answer"
    if why:
        raise InputFormatError(f"{where} is not a trajectory record ({why}): is it the right file?")


def trajectory_figures(rec: dict) -> dict[str, Any]:
    """The figures of one trajectory record (see the module docstring): ``visits``,
    ``visits_grounded``, ``checks``, ``rejections``, ``answered``, ``answer_grounded`` and
    ``lookup`` (``None``: no search of the question's text, or no gold answer)."""
    messages = rec.get("messages") if isinstance(rec.get("messages"), list) else []
    gold = record_gold(rec)
    choices = choice_grounding(messages)
    g = rollout_grounding(messages, rec.get("prediction"), gold)
    return {
        "visits": len(choices),
        "visits_grounded": sum(c["grounded"] for c in choices),
        "checks": g["checks"],
        "rejections": g["rejections"],
        "answered": g["answered"],
        "answer_grounded": bool(g["grounded"]),
        "lookup": question_search_lists(messages, str(rec.get("question") or ""), gold),
    }


def trajectory_stats(path: str | Path) -> dict[str, Any]:
    """The figures of every trajectory in ``path`` (a trajectories JSONL; an unfinished last
    line is left out), in total: ``trajectories``, ``sources`` and ``constructions`` (counts by
    ``model`` and by ``construction``), ``visits``, ``visits_grounded`` and its share
    ``grounded_share``, ``checks``, ``rejections``, ``rejecting_share``, ``with_rejection``,
    ``answered``, ``answers_grounded``, ``lookups`` and ``lookup_known`` (the trajectories that
    searched the question's text with a gold answer). A share is ``None`` where nothing counts.

    Raises:
        InputFormatError: ``path`` is missing, or a line is not a JSON object or its
            ``messages`` are not a list of message objects.
    """
    path = Path(path)
    if not path.is_file():
        raise InputFormatError(f"{path}: {'not a file' if path.exists() else 'no such file'} (a trajectories JSONL)")
    totals: Counter = Counter()
    sources: Counter = Counter()
    kinds: Counter = Counter()
    for lineno, rec in read_appended_jsonl(path, "a trajectory record"):
        check_trajectory(rec, f"{path} line {lineno}")
        f = trajectory_figures(rec)
        totals["trajectories"] += 1
        sources[str(rec.get("model") or "unrecorded")] += 1
        kinds[str(rec.get("construction") or "none")] += 1
        for key in ("visits", "visits_grounded", "checks", "rejections"):
            totals[key] += f[key]
        totals["with_rejection"] += f["rejections"] > 0
        totals["answered"] += f["answered"]
        totals["answers_grounded"] += f["answered"] and f["answer_grounded"]
        totals["lookup_known"] += f["lookup"] is not None
        totals["lookups"] += bool(f["lookup"])

    def share(part: str, whole: str) -> float | None:
        return round(totals[part] / totals[whole], 4) if totals[whole] else None

    keys = ("trajectories", "visits", "visits_grounded", "checks", "rejections", "with_rejection", "answered")
    return {
        **{k: totals[k] for k in keys},
        "sources": dict(sources.most_common()),
        "constructions": dict(kinds.most_common()),
        "grounded_share": share("visits_grounded", "visits"),
        "rejecting_share": share("rejections", "checks"),
        "answers_grounded": totals["answers_grounded"],
        "lookups": totals["lookups"],
        "lookup_known": totals["lookup_known"],
    }


def _pct(part: int, whole: int) -> str:
    return f"{part} of {whole} ({100 * part / whole:.1f}%)" if whole else f"{part} of 0"


def format_stats(s: dict[str, Any]) -> str:
    """:func:`trajectory_stats` as the lines ``traj stats`` prints."""
    if not s["trajectories"]:
        return "no trajectories"
    n = s["trajectories"]
    lines = [
        f"trajectories: {n} (" + ", ".join(f"{k} {v}" for k, v in s["sources"].items()) + ")",
        "constructions: " + ", ".join(f"{k} {v}" for k, v in s["constructions"].items()),
        f"visits with a grounded choice: {_pct(s['visits_grounded'], s['visits'])}",
        f"checks of a page read: {s['checks']}, rejecting {_pct(s['rejections'], s['checks'])}",
        f"trajectories with a rejected candidate: {_pct(s['with_rejection'], n)}",
        f"answers grounded: {_pct(s['answers_grounded'], s['answered'])}",
        f"lookups (the question's own search lists the answer's page): {_pct(s['lookups'], s['lookup_known'])}",
    ]
    return "\n".join(lines)


def construction_counts(path: Path) -> Counter:
    """The kinds of the trajectories in ``path`` (``direct``, ``verified``, ``distractor``, and
    ``unrecorded`` for records without one), plus ``unverified:REASON`` and
    ``no_distractor:REASON`` counts from their notes. An unfinished last line is skipped.

    Raises:
        InputFormatError: a line is not a trajectory record.
    """
    counts: Counter = Counter()
    for line, rec in read_appended_jsonl(Path(path), "a trajectory record"):
        kind, notes = rec.get("construction") or "unrecorded", rec.get("construction_notes") or {}
        if not isinstance(kind, str) or not isinstance(notes, dict):
            raise InputFormatError(f"{path} line {line}: construction or construction_notes of the wrong type")
        counts[kind] += 1
        for key in ("unverified", "no_distractor"):
            if notes.get(key):
                counts[f"{key}:{notes[key]}"] += 1
    return counts


def format_construction_counts(counts: Counter) -> str:
    """One line per fact: the share of each kind, then why items could not be verified and why
    a drawn distractor was not found (``counts`` from :func:`construction_counts`)."""
    total = sum(counts[k] for k in (*CONSTRUCTIONS, "unrecorded"))
    if not total:
        return "no trajectories"
    kinds = [k for k in (*CONSTRUCTIONS, "unrecorded") if k in CONSTRUCTIONS or counts[k]]
    lines = ["kinds: " + ", ".join(f"{k} {counts[k]} ({counts[k] / total:.0%})" for k in kinds)]
    for key, what in (("unverified", "not verified"), ("no_distractor", "drawn for a distractor, none met")):
        why = sorted((k.split(":", 1)[1], n) for k, n in counts.items() if k.startswith(key + ":"))
        if why:
            lines.append(f"{what}: {sum(n for _, n in why)} (" + ", ".join(f"{r} {n}" for r, n in why) + ")")
    return "\n".join(lines)
