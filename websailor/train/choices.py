"""Why a trajectory opens the page it opens (issue 38): the reason, from what was read before,
that a constructive trajectory's thought gives before each visit (:func:`why_this_page`), the
search result's rank and the words its title and snippet share with the question, or a quoted
line of an earlier page that names it. :func:`websailor.eval.grounding.choice_grounding` is the
test every written trajectory passes."""

from __future__ import annotations

import re

from websailor.text import fold_space
from websailor.tools.observation_parse import bare_title, observation_body, pages_read, search_results, title_from_url

_WORD = re.compile(r"[\w][\w'\-,.]*[\w]|\w")


def _content_words(text: str) -> list[str]:
    """The words of ``text`` a reader matches on, in order, each once: not stop words, not
    shorter than three characters (numbers of any length)."""
    from bm25s.stopwords import STOPWORDS_EN

    seen, out = set(), []
    for w in _WORD.findall(text):
        key = w.lower()
        if key in seen or key in STOPWORDS_EN or (len(w) < 3 and not w.isdigit()):
            continue
        seen.add(key)
        out.append(w)
    return out


def _shared(question: str, text: str, most: int = 3) -> list[str]:
    """Up to ``most`` words of ``text`` that the question has too, the telling ones first:
    numbers, then names (capitalized), then the longer words; in ``text``'s order among the
    chosen."""
    asked = {w.lower() for w in _content_words(question)}
    common = [w for w in _content_words(text) if w.lower() in asked]
    telling = sorted(common, key=lambda w: (not any(ch.isdigit() for ch in w), not w[0].isupper(), -len(w)))
    chosen = set(telling[:most])
    return [w for w in common if w in chosen]


def _quoted_words(words: list[str]) -> str:
    q = [f"'{w}'" for w in words]
    return q[0] if len(q) == 1 else ", ".join(q[:-1]) + " and " + q[-1]


def why_this_page(url: str, observations: list[str], question: str, from_question: bool = False) -> str | None:
    """Why open ``url``, from what was read (issue 38), as a sentence: the rank of the latest
    search result that lists it (the search of the question's own text first, when it lists
    it) and what its title and snippet share with the question (or with the query that found it); else the line of an earlier observation that names it,
    quoted. ``None`` when nothing read shows it (the caller's thought is then not grounded, and
    :func:`websailor.eval.grounding.choice_grounding` says so). ``from_question``: the search of
    the question's own text, wherever it is among the observations, comes before any later page
    that names ``url`` (the short path picks the answer from that list)."""
    title = title_from_url(url)
    if from_question:
        asked = [o for o in observations if any(fold_space(h.query) == fold_space(question) for h in search_results(o))]
        if asked and (why := why_this_page(url, asked[:1], question)):
            return why
    for obs in reversed(observations):
        hits = [h for h in search_results(obs) if h.url == url]
        if hits:  # the search of the question itself first (the short path), then the best rank
            h = min(hits, key=lambda h: (fold_space(h.query) != fold_space(question), h.rank))
            shown = f"{h.title} {h.snippet}"
            words = _shared(question, shown)
            if words:
                why = f"its title and snippet share {_quoted_words(words)} with the question"
            elif words := _shared(h.query, shown):
                why = f"it is what the clue I searched names ({_quoted_words(words)})"
            else:
                continue
            search = (
                "my search for the question"
                if fold_space(h.query) == fold_space(question)
                else f"the search for '{h.query}'"
            )
            return f"Result {h.rank} of {search}, {h.title}: {why}."
        body = observation_body(obs)
        names = {fold_space(title), fold_space(bare_title(title))}
        line = next(
            (
                ln.strip()
                for ln in body.splitlines()
                if len(ln.split()) >= 4 and any(names_whole(fold_space(ln), n) for n in names)
            ),
            None,
        )
        if line:
            where = title_from_url(pages_read(obs)[0]) if pages_read(obs) else "what I read"
            return f'The page of {where} names {title}: "{_quote_naming(line, title)}".'
    return None


def _quote_naming(line: str, title: str, limit: int = 200) -> str:
    """``line`` cut to ``limit`` characters around the first mention of ``title`` (or its bare
    name), the mention kept whole."""
    text = " ".join(line.split()).replace('"', "'")  # the quotation's own marks stay whole
    if len(text) <= limit:
        return text
    at = max(text.lower().find(title.lower()), text.lower().find(bare_title(title).lower()), 0)
    start = max(0, at - limit // 2)
    cut = text[start : start + limit]
    if start:
        cut = cut.split(" ", 1)[-1]
    if start + limit < len(text):
        cut = cut.rsplit(" ", 1)[0]
    return ("..." if start else "") + cut + ("..." if start + limit < len(text) else "")


def names_whole(text: str, title: str) -> bool:
    """Whether normalized ``text`` names ``title`` as a whole word ("Cave" is not named by "caves")."""
    return re.search(r"(?<!\w)" + re.escape(fold_space(title)) + r"(?!\w)", text) is not None
