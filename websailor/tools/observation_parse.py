"""Reading back what the tools wrote: the search results and the visited pages of an
observation laid out by :func:`websailor.tools.search.format_search_results` and
:func:`websailor.tools.visit.format_visit` (the layout of the released Tongyi DeepResearch
tools, offline and on the web alike).

The grounding figures of an evaluation (:mod:`websailor.eval.grounding`) and the constructive
trajectories (:mod:`websailor.train.constructive`) read observations this way: which titles a
search listed, at which rank and under which query; which pages were opened; and what a tool
found, without the lines that only echo the call (the query, the URL and the goal, which quote
the question or the agent's own words).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from websailor.tools.search import BLOCK_SEPARATOR

_HEADER = re.compile(r"^A search for '(.*)' found \d+ results?:$")
_RESULT = re.compile(r"^(\d+)\. \[(.+)\]\((\S+)\)$")
#: the lines of an observation that echo the call rather than report what the tool found
_ECHO = ("A search for ", "Page ", "No results found for ")


@dataclass(frozen=True)
class Listed:
    """One search result as the agent read it: its ``rank`` (1 = first) under ``query``, the
    page's ``title`` and ``url``, and the ``snippet`` shown (possibly empty)."""

    query: str
    rank: int
    title: str
    url: str
    snippet: str


def search_results(observation: str) -> list[Listed]:
    """Every result listed in a search observation, query by query, in the order shown; ``[]``
    for an observation that is not a search's (a page, an error, no results)."""
    out: list[Listed] = []
    for block in observation.split(BLOCK_SEPARATOR):
        query = ""
        current: list | None = None
        for line in block.splitlines():
            head = _HEADER.match(line)
            if head:
                query = head.group(1)
                continue
            m = _RESULT.match(line)
            if m and query:
                if current:
                    out.append(Listed(*current))
                current = [query, int(m.group(1)), m.group(2), m.group(3), ""]
            elif current is not None and line.strip():
                current[4] = f"{current[4]} {line.strip()}".strip()
        if current:
            out.append(Listed(*current))
    return out


def pages_read(observation: str) -> list[str]:
    """The URLs of the pages a visit observation shows (one per page read)."""
    return [
        line[len("Page ") :].split(", read for the goal:", 1)[0]
        for line in observation.splitlines()
        if line.startswith("Page ") and ", read for the goal:" in line
    ]


def title_from_url(url: str) -> str:
    """The page title a Wikipedia-style URL names (``.../wiki/River_delta`` -> ``River delta``);
    the URL's last path segment, unquoted, for others."""
    path = urlsplit(url).path.rstrip("/")
    return unquote(path.rsplit("/", 1)[-1]).replace("_", " ")


def bare_title(title: str) -> str:
    """A page title without its disambiguation: ``Mercury (planet)`` -> ``Mercury``."""
    return re.sub(r"\s*\([^)]*\)\s*$", "", title)


def observation_body(observation: str) -> str:
    """``observation`` without the lines that echo the call (a search's query, a page's URL and
    goal, a query that found nothing): what the tool found."""
    return "\n".join(ln for ln in observation.splitlines() if not ln.startswith(_ECHO))
