"""Entity linking of page titles in plain text: the corpus link graph.

Lead sections and passage dumps carry no hyperlinks, so links are derived by matching the
titles of the corpus's own pages in each page's text:

* Longest match: at each token the longest title (or title without its parenthetical
  qualifier, e.g. "Mercury" for "Mercury (planet)") wins; ambiguous surface forms are dropped
  unless one page's title is exactly that surface. A qualifier-stripped base links only as a
  proper name, and only if no other title starts with it.
* Case-aware: a title is classed as a *proper name* or a *common noun* from how the corpus
  writes it mid-sentence ("Paris" is always capitalised; "photosynthesis" is mostly lower
  case). Halves of hyphenated compounds ("arch-gravity dam") never link, nor
  a lower-case word right after "to", a modal or a subject pronoun ("birds can fly").
  Proper names link only in their capitalised form, and not when glued to another
  capitalised word (so "Paris" does not link inside "Paris Hilton", "Mexico" not inside
  "New Mexico"). Common nouns link only in lower case (or sentence-initially) and only if the
  word is *specific*: its lower-case form occurs in at most ``max_common_df`` pages. This
  keeps generic words such as "city", "species" or "well" ("the city of ...", "as well as")
  from linking, while "photosynthesis" or "abdomen" still do.
* Titles that are numbers, single characters or only stop words never link; pages never
  link to themselves.

Each link keeps its evidence: the sentence where the mention occurs and its offsets.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from websailor.corpus.text import sentence_spans, word_spans

_ARTICLES = frozenset({"the", "a", "an"})
_STOP = frozenset(
    "the a an of in on at to for and or by with from as is was be are were this that it its his her "
    "their our your my not no".split()
)
# a lower-case single word after these is most likely a verb ("birds can fly", "to breed")
_VERB_CONTEXT = frozenset(
    "to can could will would shall should may might must cannot not also often then did does do they we who".split()
)
_NUMERIC = re.compile(r"^[\d\W_]+$")


@dataclass(frozen=True)
class Mention:
    """One link: page ``source`` mentions page ``target`` as ``surface`` in ``sentence``.

    ``start``/``end`` are character offsets of the surface within ``sentence``.
    """

    source: str
    target: str
    surface: str
    sentence: str
    start: int
    end: int


@dataclass(frozen=True)
class _Candidate:
    doc: int
    tokens: tuple[str, ...]
    content: int  # index of the first content token (after a leading article)
    base: bool  # surface is a title stripped of its "(qualifier)"


@dataclass
class _Occurrence:
    source: int
    cand: _Candidate
    form: str  # "cap", "lower" or "initial"
    sentence: str
    start: int
    end: int


def _surface_forms(title: str, prefixes: set[str]) -> list[str]:
    """The title, plus its base without a "(qualifier)" unless another title starts with that
    base (then "Amazon" of "Amazon (company)" would steal mentions of "Amazon River")."""
    forms = [title]
    if title.endswith(")") and " (" in title:
        base = title[: title.index(" (")].strip()
        if base and base.lower() not in prefixes:
            forms.append(base)
    return forms


def _word_prefixes(title: str) -> list[str]:
    """Proper word prefixes of a title without qualifier: "Amazon River" -> ["amazon"]."""
    if title.endswith(")"):
        return []
    words = title.lower().split()
    return [" ".join(words[:i]) for i in range(1, len(words))]


def _linkable(tokens: Sequence[str]) -> bool:
    text = "".join(tokens)
    if len(text) < 2 or _NUMERIC.match(text):
        return False
    if len(tokens) <= 2 and tokens[0].isdigit() and all(t.islower() for t in tokens[1:]):
        return False  # a measurement such as "100 metres"
    return any(t.lower() not in _STOP and t.isalnum() for t in tokens)


class EntityLinker:
    """Links mentions of ``titles`` in text. See the module docstring for the rules.

    Args:
        titles: page titles; index ``i`` is page ``i``.
        max_common_df: a common-noun title links only if its lower-case form appears in at
            most this many pages; ``None`` means 0.2% of the pages, at least 10.
    """

    def __init__(self, titles: Sequence[str], max_common_df: int | None = None) -> None:
        self.titles = list(titles)
        self.max_common_df = max_common_df if max_common_df is not None else max(10, len(titles) // 500)
        by_key: dict[tuple[str, ...], list[tuple[_Candidate, bool]]] = defaultdict(list)
        # lower-cased plain titles and their word prefixes: a "(qualifier)" base equal to one
        # of these is not used as a surface form
        prefixes = {t.lower() for t in self.titles if not t.endswith(")")}
        prefixes |= {p for t in self.titles for p in _word_prefixes(t)}
        for doc, title in enumerate(self.titles):
            for i, form in enumerate(_surface_forms(title, prefixes)):
                toks = tuple(t for t, _, _ in word_spans(form))
                if not _linkable(toks):
                    continue
                content = 1 if len(toks) > 1 and toks[0].lower() in _ARTICLES else 0
                by_key[tuple(t.lower() for t in toks)].append((_Candidate(doc, toks, content, i > 0), i == 0))
        self._table: dict[tuple[str, ...], list[_Candidate]] = {}
        for key, cands in by_key.items():
            exact = [c for c, is_title in cands if is_title]
            docs = {c.doc for c, _ in cands}
            if len(docs) == 1:
                self._table[key] = [c for c, _ in cands]
            elif len({c.doc for c in exact}) == 1:
                self._table[key] = exact  # "Mercury" -> the page titled exactly "Mercury"
            elif len(exact) > 1:
                self._table[key] = exact  # same lower-case key, different case ("AIDS"/"Aids")
        self._lengths: dict[str, list[int]] = defaultdict(list)
        for key in self._table:
            if len(key) not in self._lengths[key[0]]:
                self._lengths[key[0]].append(len(key))
        for lens in self._lengths.values():
            lens.sort(reverse=True)

    # -- matching ------------------------------------------------------------------------
    @staticmethod
    def _form(cand: _Candidate, toks: Sequence[str], sentence_start: bool) -> str | None:
        for i, (t, x) in enumerate(zip(cand.tokens, toks)):
            if i == cand.content:
                continue
            if i < cand.content:
                if t.lower() != x.lower():
                    return None
            elif t != x:
                return None
        t, x = cand.tokens[cand.content], toks[cand.content]
        if x == t:
            form = "cap" if t[:1].isupper() else "lower"
        elif x == t[:1].lower() + t[1:]:
            form = "lower"
        else:
            return None
        if form == "cap" and sentence_start and cand.content == 0:
            return "initial"
        return form

    def _scan_sentence(self, source: int, sentence: str) -> Iterator[_Occurrence]:
        spans = word_spans(sentence)
        lower = [t.lower() for t, _, _ in spans]
        toks = [t for t, _, _ in spans]
        # first word token of the sentence (skip opening quotes/brackets)
        first = next((i for i, t in enumerate(toks) if t[0].isalnum()), 0)
        i = 0
        while i < len(spans):
            matched = 0
            for n in self._lengths.get(lower[i], ()):
                key = tuple(lower[i : i + n])
                if len(key) < n or key not in self._table:
                    continue
                for cand in self._table[key]:
                    form = self._form(cand, toks[i : i + n], i == first)
                    if form is None:
                        continue
                    if form in ("cap", "initial") and self._glued(toks, i, i + n, first):
                        continue
                    if self._hyphenated(toks, i, i + n):
                        continue
                    if form == "lower" and n == 1 and i > 0 and lower[i - 1] in _VERB_CONTEXT:
                        continue
                    yield _Occurrence(source, cand, form, sentence, spans[i][1], spans[i + n - 1][2])
                    matched = n
                    break
                if matched:
                    break
            i += matched or 1

    @staticmethod
    def _glued(toks: Sequence[str], a: int, b: int, first: int) -> bool:
        """True when the mention touches another capitalised word (part of a longer name)."""

        def cap(j: int) -> bool:
            return 0 <= j < len(toks) and toks[j][:1].isupper() and toks[j].isalpha()

        return (cap(a - 1) and a - 1 != first) or cap(b)

    @staticmethod
    def _hyphenated(toks: Sequence[str], a: int, b: int) -> bool:
        """True when the mention is one half of a hyphenated compound ("arch-gravity dam")."""
        return (a >= 2 and toks[a - 1] in "-‐" and toks[a - 2][:1].isalnum()) or (
            b + 1 < len(toks) and toks[b] in "-‐" and toks[b + 1][:1].isalnum()
        )

    # -- public API ----------------------------------------------------------------------
    def link(self, pages: Iterable[tuple[int, Sequence[str]]]) -> list[Mention]:
        """Link every page. ``pages`` yields ``(doc_index, paragraphs)``; headings (paragraphs
        starting with "## ") are skipped. Returns mentions in page and text order."""
        occurrences: list[_Occurrence] = []
        for doc, paragraphs in pages:
            for para in paragraphs:
                if para.startswith("## "):
                    continue
                for a, b in sentence_spans(para):
                    sentence = para[a:b].strip()
                    occurrences.extend(o for o in self._scan_sentence(doc, sentence) if o.cand.doc != doc)
        return self._decide(occurrences)

    def _decide(self, occurrences: list[_Occurrence]) -> list[Mention]:
        n_cap: dict[int, int] = defaultdict(int)
        n_lower: dict[int, int] = defaultdict(int)
        lower_docs: dict[int, set[int]] = defaultdict(set)
        for o in occurrences:
            target = o.cand.doc
            if o.form == "cap":
                n_cap[target] += 1
            elif o.form == "lower":
                n_lower[target] += 1
                lower_docs[target].add(o.source)
        out: list[Mention] = []
        for o in occurrences:
            target = o.cand.doc
            common = n_lower[target] > n_cap[target]
            if o.cand.base:
                # a disambiguated title's base ("Crust" of "Crust (geology)") is ambiguous by
                # definition: link it only as a proper name ("Guernica")
                ok = not common and o.form != "lower"
            elif common:
                ok = o.form != "cap" and len(lower_docs[target]) <= self.max_common_df
            else:
                ok = o.form != "lower"
            if ok:
                out.append(
                    Mention(
                        source=self.titles[o.source],
                        target=self.titles[target],
                        surface=o.sentence[o.start : o.end],
                        sentence=o.sentence,
                        start=o.start,
                        end=o.end,
                    )
                )
        return out
