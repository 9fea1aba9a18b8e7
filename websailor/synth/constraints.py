"""Constraints on a question's target, and the three checks every item must pass
(SailorFog-QA-V2 verification):

* unique: evaluating all constraints over the *whole* knowledge graph yields exactly the target;
* leak-free: neither the answer, nor an alias, nor a distinctive word of a multi-word answer
  occurs in the question;
* supported: every constraint has an evidence sentence from the corpus.

A :class:`Constraint` is data (``kind``, ``params``) plus the phrase a question uses for it, so
items can be stored as JSON and re-verified later.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import Stemmer

from websailor.synth.graph import KnowledgeGraph, description_key
from websailor.synth.vague import NameMask

KINDS = (
    "linked",
    "name",
    "span_start",
    "span_end",
    "year",
    "quantity",
    "topic",
    "compare",
    "relative_start",
    "described",
)
_WORD = re.compile(r"[^\W_]+")
_STOP = frozenset("the a an of and in on at to for by with from de da di du von van der la le el al".split())


@dataclass(frozen=True)
class Constraint:
    """One condition on the target node.

    ``kind`` and ``params``:

    * ``linked`` ``{"other": title, "others": [titles]}``: the target is linked to that page.
      ``others`` (optional) lists every page the question's phrase may refer to (pages with
      the same description: "a country in Oceania" is Australia, Fiji, Tonga, ...); a node
      satisfies the constraint if it is linked to any of them, since a solver cannot tell
      which was meant. ``compare`` and ``relative_start`` read ``others`` the same way;
    * ``name`` ``{"style", "pattern"}``: see :class:`websailor.synth.vague.NameMask`;
    * ``span_start`` / ``span_end`` ``{"lo", "hi"}``: start or end of the life span/period;
    * ``year`` ``{"lo", "hi"}``: some year in the page's text lies in the interval;
    * ``quantity`` ``{"kind", "lo", "hi"}``: some quantity of that kind lies in the interval;
    * ``topic`` ``{"topic"}``: the page's topic.
    * ``compare`` ``{"kind", "other", "more"}``: the target's quantity of that kind is larger
      (``more``) or smaller than the other page's;
    * ``relative_start`` ``{"other", "lo", "hi"}``: the target's span starts between ``lo`` and
      ``hi`` years after the other page's (negative: before);
    * ``described`` ``{"key"}``: the page's own description is this one (lower case, span
      removed: :func:`~websailor.synth.graph.description_key`), "is a major river in northeast
      Africa"; every page with the same description meets it. Its evidence is the page's first
      sentence, so a question that states it is found by a search of its own text, as most
      questions people write are.

    ``evidence`` holds the supporting sentences (``{"sentence", "url"}``).
    """

    kind: str
    params: dict
    phrase: str
    evidence: tuple = field(default_factory=tuple)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["evidence"] = list(self.evidence)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Constraint:
        return cls(d["kind"], d["params"], d["phrase"], tuple(d.get("evidence", ())))

    def matches(self, kg: KnowledgeGraph, node: str) -> bool:
        """Whether ``node`` satisfies the constraint."""
        p = self.params
        others = p.get("others") or ([p["other"]] if "other" in p else [])
        if self.kind == "linked":
            return any(kg.has_edge(node, o) for o in others)
        if self.kind == "name":
            return NameMask(self.phrase, p["style"], tuple(p["pattern"])).matches(node)
        attrs = kg.attributes(node)
        if self.kind in ("span_start", "span_end"):
            span = attrs.span
            return span is not None and p["lo"] <= span[0 if self.kind == "span_start" else 1] <= p["hi"]
        if self.kind == "year":
            return any(p["lo"] <= y <= p["hi"] for y in attrs.years)
        if self.kind == "quantity":
            return any(q.kind == p["kind"] and p["lo"] <= q.value <= p["hi"] for q in attrs.quantities)
        if self.kind == "topic":
            return attrs.topic == p["topic"]
        if self.kind == "described":
            return description_key(attrs.description) == p["key"]
        if self.kind == "compare":
            mine = [q.value for q in attrs.quantities if q.kind == p["kind"]]
            for o in others:
                if o == node:
                    continue
                theirs = [q.value for q in kg.attributes(o).quantities if q.kind == p["kind"]]
                if mine and theirs and (mine[0] > theirs[0] if p["more"] else mine[0] < theirs[0]):
                    return True
            return False
        if self.kind == "relative_start":
            return attrs.span is not None and any(
                o != node
                and kg.attributes(o).span is not None
                and p["lo"] <= attrs.span[0] - kg.attributes(o).span[0] <= p["hi"]
                for o in others
            )
        raise ValueError(f"unknown constraint kind {self.kind!r}; one of {', '.join(KINDS)}")


def candidates(kg: KnowledgeGraph, constraints: Iterable[Constraint]) -> list[str]:
    """Every node of the graph that satisfies all ``constraints`` (sorted). Starts from the
    neighbours of a ``linked`` constraint when there is one, else scans all nodes."""
    cs = list(constraints)
    linked = [c for c in cs if c.kind == "linked"]
    if linked:
        others = linked[0].params.get("others") or [linked[0].params["other"]]
        pool = {n for o in others if o in kg for n in kg.neighbors(o)}
    else:
        pool = set(kg.nodes())
    return sorted(n for n in pool if all(c.matches(kg, n) for c in cs))


def is_unique(kg: KnowledgeGraph, constraints: Iterable[Constraint], target: str) -> bool:
    """True when ``target`` is the only node of the whole graph meeting every constraint."""
    return candidates(kg, constraints) == [target]


def distinctive_words(answer: str) -> set[str]:
    """Words of an answer that would give it away: not stop words, at least 4 letters (or
    any word of a one-word answer)."""
    words = [w.lower() for w in _WORD.findall(answer)]
    if len(words) == 1:
        return set(words)
    return {w for w in words if w not in _STOP and len(w) >= 4}


_STEMMER = Stemmer.Stemmer("english")


def fold(text: str) -> str:
    """Lower case without accents: "Kanō Jigorō" -> "kano jigoro" (a writer that drops the
    diacritics still names the answer)."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()


def _initialism(answer: str) -> str | None:
    """The capitals an answer of two or more capitalized words is abbreviated to ("United
    Kingdom" -> "UK", "European Union" -> "EU"), or ``None``."""
    words = [w for w in _WORD.findall(re.sub(r"\s*\([^)]*\)\s*$", "", answer)) if w.lower() not in _STOP]
    if len(words) < 2 or not all(w[:1].isupper() for w in words):
        return None
    return "".join(w[0] for w in words)


def is_leak_free(question: str, answer: str, aliases: Iterable[str] = ()) -> bool:
    """True if no form of the answer appears in the question (case-insensitive, accents
    ignored, whole words), nor its initialism ("UK" for "United Kingdom", case-sensitive), and
    no distinctive word of it in any inflection ("albums" leaks "Album", "cricketer" leaks
    "Cricket": words are compared by their Snowball stems)."""
    q = fold(question)
    for form in [answer, *aliases]:
        if form and re.search(r"(?<!\w)" + re.escape(fold(form)) + r"(?!\w)", q):
            return False
    initials = _initialism(answer)
    if initials and re.search(r"(?<![\w.])" + initials + r"(?![\w])", question):
        return False  # "the UK Parliament" names the United Kingdom
    q_stems = set(_STEMMER.stemWords(_WORD.findall(q)))
    return not (set(_STEMMER.stemWords(sorted(distinctive_words(fold(answer))))) & q_stems)


def is_supported(constraints: Iterable[Constraint]) -> bool:
    """Every constraint carries at least one evidence sentence."""
    return all(any(e.get("sentence") for e in c.evidence) for c in constraints)
