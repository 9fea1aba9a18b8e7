"""Checks that can fail: a candidate held against each condition of the question, from what its
page shows (issue 38).

A constructive trajectory (:mod:`websailor.train.constructive`) checks its candidate after
reading the candidate's page, one condition at a time, each against a quoted sentence of the
page or a value read from it, with a verdict (``yes`` or ``no``)::

    Checking Gaspard Monge against the question: "it is associated with Technical drawing": its
    page says "... the inventor of descriptive geometry, technical drawing ...": yes; "it has the
    initials G. M.": its name, Gaspard Monge, has the initials G. M.: yes. Every condition
    checked fits, so the answer is Gaspard Monge.

and a wrong candidate is rejected naming the condition it fails ("it has the initials G. M.":
its name, Technical drawing, has the initials T. D.: no). A check is written only when the page (or,
for a name, the title) really shows it: :func:`confirmed` and :func:`rejection` read the
observation the tool returned. The verdict words of the closing sentence are those
:mod:`websailor.eval.grounding` counts (fits; is not the answer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from websailor.text import fold_space
from websailor.tools.observation_parse import observation_body

#: Constraint kinds a wrong candidate's page can be shown to fail (the others compare two pages).
REJECTABLE = ("name", "span_start", "span_end", "quantity", "linked", "described")


@dataclass(frozen=True)
class Check:
    """One condition of the question held against a candidate: ``constraint`` (an item's
    constraint dict), ``shown`` (what the page or the title shows, in words, quotation
    included) and ``holds``."""

    constraint: dict
    shown: str
    holds: bool

    def line(self) -> str:
        """``"it has the initials G. M.": its name, Gaspard Monge, has the initials G. M.: yes``
        (the condition as a statement of "it", :func:`websailor.synth.phrasing.statement`)."""
        from websailor.synth.phrasing import statement

        return f'"{statement(self.constraint, "it")}": {self.shown}: {"yes" if self.holds else "no"}'


def quote(text: str, limit: int = 200) -> str:
    """``text`` on one line, cut at a word to ``limit`` characters (``...`` marks the cut);
    double quotation marks become single ones, so the quotation stays whole."""
    text = " ".join(text.split()).replace('"', "'")
    return text if len(text) <= limit else text[: limit - 1].rsplit(" ", 1)[0] + "..."


def name_check(constraint: dict, title: str) -> Check:
    """A name mask (``kind`` ``name``: initials, or word and letter counts; see
    :class:`websailor.synth.vague.NameMask`) held against ``title``: what the title shows in
    the mask's own terms (the mask of ``title`` in the same style,
    :func:`websailor.synth.vague.mask_name`), and whether it matches."""
    from websailor.synth.vague import NameMask, mask_name, name_words

    p = constraint["params"]
    mask = NameMask(constraint["phrase"], p["style"], tuple(p["pattern"]))
    if not name_words(title):
        return Check(constraint, f"its name, {title}, has no words to compare", False)
    phrase = mask_name(title, None, p["style"]).phrase  # "whose initials are T. D.", "whose name has 2 words, ..."
    for clause, shape in (("whose initials are ", "has the initials "), ("whose name ", "")):
        if phrase.startswith(clause):
            phrase = shape + phrase[len(clause) :]
            break
    return Check(constraint, f"its name, {title}, {phrase}", mask.matches(title))


def confirmed(constraint: dict, observation: str, target_url: str, earlier: str) -> str | None:
    """What ``observation`` (the answer's page) shows for ``constraint``, or ``None``: its
    evidence sentence on that page (for a comparison, the other page's sentence must be in the
    ``earlier`` observations too); for a link, else a line of the page naming the linked page.
    Name masks are checked on the title (:func:`name_check`), never here."""
    if constraint["kind"] == "name":
        return None
    obs = fold_space(observation)
    mine = [e["sentence"] for e in constraint.get("evidence", []) if e.get("url") == target_url and e.get("sentence")]
    shown = next((s for s in mine if fold_space(s) in obs), None)
    if shown is None and constraint["kind"] == "linked":
        other = re.compile(rf"(?<!\w){re.escape(constraint['params']['other'])}(?!\w)")
        lines = [ln for ln in observation_body(observation).splitlines() if ln.strip()]
        shown = next((ln.strip() for ln in lines if other.search(ln)), None)
    if shown is None:
        return None
    if constraint["kind"] in ("compare", "relative_start"):
        theirs = [e["sentence"] for e in constraint.get("evidence", []) if e.get("url") != target_url]
        if not any(fold_space(s) in fold_space(earlier) for s in theirs):
            return None
    return shown


def check_order(item: dict) -> list[dict]:
    """Constraints worth checking on the answer's page, best first: what the page says it is (its
    first sentence) and values with their evidence there (a date, a number, a comparison), then links (is the linked page named there?);
    never the name mask (:func:`name_check` reads it from the title)."""
    url = item.get("target_url", "")
    rank = {"described": 0, "span_start": 0, "span_end": 0, "quantity": 0, "compare": 1, "relative_start": 1}
    cs = [
        c
        for c in item.get("constraints") or []
        if (c["kind"] in rank and any(e.get("url") == url and e.get("sentence") for e in c.get("evidence", [])))
        or c["kind"] == "linked"
    ]
    return sorted(cs, key=lambda c: rank.get(c["kind"], 2))


def answer_checks(item: dict, shown: list[tuple[dict, str]]) -> list[Check]:
    """The checks of the answer: each constraint its page confirmed (``shown``, pairs of the
    constraint and its sentence, from :func:`confirmed`), quoted, then its name masks read from
    its title; all hold (a constraint the page does not show is not claimed)."""
    checks = [Check(c, f'its page says "{quote(s)}"', True) for c, s in shown]
    checks += [name_check(c, item["answer"]) for c in item.get("constraints") or [] if c["kind"] == "name"]
    return checks


def rejection(item: dict, kg: Any, node: str, observation: str) -> Check | None:
    """A condition that ``node`` (a wrong candidate) fails and that its page (``observation``)
    or its title shows it fails, as a :class:`Check` that does not hold: its name's shape, a
    year, a quantity's sentence, its first sentence (what it is, for a question that describes
    the answer), or the absence of the linked page's name. ``None`` when no
    failure is shown."""
    from websailor.synth.constraints import Constraint
    from websailor.synth.vague import bare_name

    body = observation_body(observation)
    obs = fold_space(body)
    attrs = kg.attributes(node)
    # what the page shows first (a name, a year, a number), an absent link last
    for d in sorted(item.get("constraints") or [], key=lambda d: d["kind"] == "linked"):
        c = Constraint.from_dict(d)
        if d["kind"] not in REJECTABLE or c.matches(kg, node):
            continue
        if d["kind"] == "name" and fold_space(node) in obs:
            return name_check(d, node)
        if d["kind"] in ("span_start", "span_end") and attrs.span:
            year = attrs.span[0 if d["kind"] == "span_start" else 1]
            line = next((ln for ln in body.splitlines() if year > 0 and re.search(rf"\b{year}\b", ln)), None)
            if line:
                return Check(d, f'its page gives {year}: "{quote(line)}"', False)
        if d["kind"] == "quantity":
            shown = next(
                (
                    q.sentence
                    for q in attrs.quantities
                    if q.kind == d["params"]["kind"] and fold_space(q.sentence) in obs
                ),
                None,
            )
            if shown:
                return Check(d, f'its page says "{quote(shown)}"', False)
        if d["kind"] == "described" and attrs.lead and fold_space(attrs.lead) in obs:
            return Check(d, f'its page says "{quote(attrs.lead)}"', False)
        if d["kind"] == "linked":
            others = d["params"].get("others") or [d["params"]["other"]]
            names = {n for o in others for n in (o, bare_name(o))}
            # strict: not even inside a word ("liverworts" mentions Liverwort)
            if not any(fold_space(n) in obs for n in names):
                return Check(d, f"nothing its page shows mentions {d['params']['other']}", False)
    return None


def checking(candidate: str, checks: list[Check]) -> str:
    """The sentence that holds ``candidate`` against ``checks``, one condition after another:
    ``Checking X against the question: "...": ...: yes; "...": ...: no.``"""
    return f"Checking {candidate} against the question: " + "; ".join(c.line() for c in checks) + "."


def rejected(candidate: str, check: Check) -> str:
    """The thought's words rejecting ``candidate`` for the failed ``check``."""
    return f"{checking(candidate, [check])} {candidate} is not the answer."


def accepted(candidate: str, checks: list[Check], between: str = "") -> str:
    """The closing words accepting ``candidate`` after ``checks`` (all holding); ``between``
    (a sentence, e.g. which pages led to it) goes before the verdict."""
    return f"{checking(candidate, checks)}{between} Every condition checked fits, so the answer is {candidate}."
