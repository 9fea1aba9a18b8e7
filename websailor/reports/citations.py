"""A report's citations: its reference list, its inline markers, and the statement-URL pairs
they make, each reference checked against the URLs the agent actually opened.

The report format the prompt asks for (:mod:`websailor.reports.prompt`) is Markdown with inline
numbered markers (``[1]``, ``[2, 3]``, ``[4-6]``, ``[1][2]``) and a final section ``References``
(or ``Sources``, ``参考文献``) listing one ``[n] title URL`` per line. A reference gets one
``problem`` when it cannot count as evidence:

* ``no_url``: the entry names no URL;
* ``malformed_url``: not an ``http``/``https`` URL with a host;
* ``private_url``: a loopback, private, link-local or local host (``localhost``, ``10.0.0.1``,
  ``printer.local``), which the checks never read;
* ``not_visited``: a well-formed URL the agent never opened with ``visit`` (flagged in the
  trajectory's record; FACT still checks it);
* ``duplicate``: the number was listed before (the first entry counts).

A statement is a sentence (or list item) of the body that carries markers; each marker whose
reference has a URL gives a statement-URL pair, the unit DeepResearch Bench's FACT checks.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from websailor.corpus.urls import title_key, url_to_title

#: headings that open the reference list (compared lower-cased, without '#' and ':')
REFERENCE_HEADINGS = (
    "references",
    "reference",
    "sources",
    "source list",
    "bibliography",
    "works cited",
    "参考文献",
    "参考资料",
    "引用",
)
#: a reference entry: ``[n] rest``, ``[n]: rest``, ``n. rest`` or ``- [n] rest``
_ENTRY = re.compile(r"^\s*(?:[-*]\s*)?(?:\[(\d{1,4})\][:：]?\s*|(\d{1,4})[.)]\s+)(.*\S)\s*$")
#: a Markdown link; its URL may hold balanced parentheses (``Python_(programming_language)``)
_MD_LINK = re.compile(r"\[([^\]]*)\]\(\s*<?((?:[^()\s<>]|\([^()\s]*\))+)>?\s*\)")
#: a URL written bare: with a scheme, ``www.``, or ``host.tld/path``; stops at space, quotes,
#: brackets and CJK punctuation (trailing punctuation and unbalanced ")" are trimmed after)
_URL_CHARS = r"[^\s<>\[\]\"'，。；：、（）《》【】「」]"
_BARE_URL = re.compile(
    rf"(?:[a-z][a-z0-9+.-]*://|www\.|(?<![\w@])[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z]{{2,}}/){_URL_CHARS}*", re.I
)
#: an inline marker: [1], [1, 2], [1-3], [1–3]; not a Markdown link's text (followed by "(")
_MARKER = re.compile(r"\[(\d{1,4}(?:\s*(?:[,;]|[-–])\s*\d{1,4})*)\](?!\()")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|(?<=[。！？])")
#: markers written after a sentence's end mark ("long. [1]"): they belong to that sentence
_MARKERS_AFTER_END = re.compile(r"([.!?。！？])((?:\s*\[\d{1,4}(?:\s*(?:[,;]|[-–])\s*\d{1,4})*\](?!\())+)")
#: the problems a reference may have, in the order they are checked
PROBLEMS = ("no_url", "malformed_url", "private_url", "duplicate", "not_visited")
#: a range marker longer than this is read as its two ends only
MAX_RANGE = 50


@dataclass
class Reference:
    """One entry of the reference list. ``url`` as written (``None``: none found);
    ``visited``: the agent opened it with ``visit``; ``cited``: some inline marker uses it;
    ``problem``: one of :data:`PROBLEMS` or ``None``."""

    n: int
    url: str | None
    title: str
    visited: bool = False
    cited: bool = False
    problem: str | None = None


@dataclass
class Statement:
    """A sentence of the report that carries citation markers: ``refs`` the numbers it cites."""

    text: str
    refs: list[int]


@dataclass
class ParsedReport:
    """What :func:`parse_report` reads from a report.

    Attributes:
        sections: the body's headings, in order.
        references: the reference list, in order (duplicates kept, marked).
        statements: the body's cited sentences.
        dangling: numbers cited inline that the reference list lacks.
        problems: report-level problems: ``no_citations`` (no inline marker), ``no_references``
            (no reference list), ``empty`` (no text).
        words: words of the body (CJK characters count one each).
    """

    sections: list[str] = field(default_factory=list)
    references: list[Reference] = field(default_factory=list)
    statements: list[Statement] = field(default_factory=list)
    dangling: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    words: int = 0

    def pairs(self) -> list[tuple[str, str, int]]:
        """``(statement, url, n)`` for each statement and each reference it cites that has a
        URL usable as evidence (no ``no_url``, ``malformed_url`` or ``private_url``
        problem), in order, each pair once."""
        usable = {r.n: r.url for r in self.references if r.url and r.problem in (None, "not_visited")}
        seen: set[tuple[str, str]] = set()
        out = []
        for s in self.statements:
            for n in s.refs:
                url = usable.get(n)
                if url and (s.text, url) not in seen:
                    seen.add((s.text, url))
                    out.append((s.text, url, n))
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON form kept in a trajectory's ``report`` field, with counts."""
        refs = [asdict(r) for r in self.references]
        return {
            "sections": self.sections,
            "references": refs,
            "statements": [asdict(s) for s in self.statements],
            "dangling": self.dangling,
            "problems": self.problems,
            "words": self.words,
            "counts": {
                "references": len(self.references),
                "cited_statements": len(self.statements),
                "pairs": len(self.pairs()),
                **{p: sum(r.problem == p for r in self.references) for p in PROBLEMS},
            },
        }


def url_problem(url: str) -> str | None:
    """``malformed_url``, ``private_url`` or ``None`` for a URL as a report writes it (a URL
    without a scheme, ``en.wikipedia.org/wiki/Nile``, counts as ``https://``). A host is read as
    a browser reads it: percent-decoded, without a trailing dot, and IPv4 in any of its
    spellings (``127.1``, ``0x7f.1``, ``0177.0.0.1``)."""
    u = url.strip()
    if "://" not in u and re.match(r"^(?:www\.)?[a-z0-9-]+(?:\.[a-z0-9-]+)+/", u, re.I):
        u = "https://" + u
    try:
        parts = urlsplit(u)
        host = unquote(parts.hostname or "").rstrip(".").lower()
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return "malformed_url"
    if parts.scheme.lower() not in ("http", "https") or not host or any(c.isspace() for c in u):
        return "malformed_url"
    if host == "localhost" or host.endswith((".localhost", ".local", ".internal", ".lan", ".home.arpa")):
        return "private_url"
    address = _ip_address(host)
    if address is None:
        return None if "." in host else "private_url"  # a bare host name is someone's local machine
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return None if address.is_global and not address.is_multicast else "private_url"


def _ip_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a host names literally (IPv6, or IPv4 in the forms ``inet_aton`` reads:
    short, hexadecimal, octal), or ``None`` for a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if re.fullmatch(r"(?:0x[0-9a-f]*|\d+)(?:\.(?:0x[0-9a-f]*|\d+)){0,3}", host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def url_key(url: str) -> str:
    """The key two URLs of one page share: a Wikipedia URL's title (any language host, mobile
    or not, fragment dropped), else the URL lower-cased without scheme, ``www.``, fragment and
    trailing slash."""
    u = url.strip()
    if "wikipedia.org/" in u.lower() or u.startswith("/wiki/"):
        return "wiki:" + title_key(url_to_title(u))
    u = re.sub(r"^[a-z][a-z0-9+.-]*://", "", u, flags=re.I).split("#", 1)[0]
    u = re.sub(r"^www\.", "", u, flags=re.I)
    return u.rstrip("/").lower()


def visited_urls(tool_calls: Iterable[Any]) -> list[str]:
    """The URLs a trajectory opened with ``visit``, in order, each once (records or
    :class:`~websailor.agent.trajectory.ToolCallRecord`; a call's ``url`` may be a list)."""
    out: list[str] = []
    for call in tool_calls:
        name = call.get("name") if isinstance(call, dict) else getattr(call, "name", None)
        args = call.get("arguments") if isinstance(call, dict) else getattr(call, "arguments", None)
        if name != "visit" or not isinstance(args, dict):
            continue
        urls = args.get("url")
        for u in [urls] if isinstance(urls, str) else urls if isinstance(urls, list) else []:
            if isinstance(u, str) and u.strip() and u.strip() not in out:
                out.append(u.strip())
    return out


def _numbers(inner: str) -> list[int]:
    out: list[int] = []
    for part in re.split(r"\s*[,;]\s*", inner.strip()):
        ends = [int(x) for x in re.split(r"\s*[-–]\s*", part) if x]
        if len(ends) == 2 and 0 <= ends[1] - ends[0] <= MAX_RANGE:
            out.extend(range(ends[0], ends[1] + 1))
        else:
            out.extend(ends)
    return out


def _trim_url(url: str) -> str:
    """A bare URL without the punctuation after it, and without a closing ")" it did not open."""
    while url:
        if url[-1] in ".,;:!?'\"":
            url = url[:-1]
        elif url[-1] == ")" and url.count(")") > url.count("("):
            url = url[:-1]
        else:
            break
    if "://" not in url and not url.lower().startswith("www."):  # host.tld/path: as url_problem reads it
        url = "https://" + url
    return url


def _entry(rest: str) -> tuple[str | None, str]:
    """The URL and the title of a reference entry's text."""
    link = _MD_LINK.search(rest)
    if link:
        title = (link.group(1) + " " + _MD_LINK.sub("", rest)).strip(" -–—:,.")
        return link.group(2), " ".join(title.split())
    bare = _BARE_URL.search(rest)
    if bare:
        url = _trim_url(bare.group(0))
        title = (rest[: bare.start()] + rest[bare.start() + len(url) :]).strip(" -–—:,.<>()（）")
        return url, " ".join(title.split())
    broken = next((tok for tok in rest.split() if "//" in tok), None)  # "htp//x": a URL, written wrong
    if broken:
        return broken.strip("<>()[]"), " ".join(rest.replace(broken, " ").split()).strip(" -–—:,.")
    return None, " ".join(rest.split())


def _split_references(lines: list[str]) -> tuple[list[str], list[str]]:
    """The body's lines and the reference list's lines: the list starts at the last heading
    (or bold line) named like :data:`REFERENCE_HEADINGS`; without one, at the trailing run of
    entry lines."""
    for i in range(len(lines) - 1, -1, -1):
        name = lines[i].strip().lstrip("#").strip().strip("*_").strip().rstrip(":：").strip().lower()
        if name in REFERENCE_HEADINGS:
            return lines[:i], lines[i + 1 :]
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    start = end
    while start and (_ENTRY.match(lines[start - 1]) or not lines[start - 1].strip()):
        start -= 1
    tail = [ln for ln in lines[start:end] if ln.strip()]
    if tail and all((m := _ENTRY.match(ln)) and _entry(m.group(3))[0] for ln in tail):
        return lines[:start], lines[start:end]
    return lines, []


def _statements(body: list[str]) -> list[Statement]:
    out: list[Statement] = []
    in_code = False
    for line in body:
        if line.strip().startswith("```"):
            in_code = not in_code
            continue
        if in_code or _HEADING.match(line):
            continue
        text = re.sub(r"^\s*(?:[-*+]|\d+[.)])\s+", "", line).strip()
        text = _MARKERS_AFTER_END.sub(lambda m: m.group(2) + m.group(1), text)
        for sentence in _SENTENCE_END.split(text):
            refs = [n for m in _MARKER.finditer(sentence) for n in _numbers(m.group(1))]
            if refs:
                clean = " ".join(_MARKER.sub("", sentence).split())
                clean = re.sub(r"\s+([.,;:!?。，；：！？])", r"\1", clean)
                if clean:
                    out.append(Statement(clean, list(dict.fromkeys(refs))))
    return out


def report_body(text: str | None) -> str:
    """The report without its reference list and inline markers: what RACE's judge reads
    (DeepResearch Bench cleans citations out of a report before scoring its quality, so that
    RACE measures the writing and FACT the citations)."""
    if not text:
        return ""
    body, _ = _split_references(text.splitlines())
    return re.sub(r"(?<![ \t])[ \t]+(?=[.,;:!?。，；：！？])", "", _MARKER.sub("", "\n".join(body))).strip()


def parse_report(text: str | None, visited: Iterable[str] = ()) -> ParsedReport:
    """Read a Markdown report's sections, reference list, cited statements and problems.

    Args:
        text: the report (``None`` or blank: a report with the problem ``empty``).
        visited: the URLs the agent opened (:func:`visited_urls`); a reference to none of them
            gets ``not_visited``. Pages compare by :func:`url_key`.

    Returns:
        A :class:`ParsedReport`; never raises for any text.
    """
    report = ParsedReport()
    if not text or not text.strip():
        report.problems.append("empty")
        return report
    lines = text.splitlines()
    body, ref_lines = _split_references(lines)
    seen_keys = {url_key(u) for u in visited}
    numbers: set[int] = set()
    for line in ref_lines:
        m = _ENTRY.match(line)
        if not m:
            continue
        n = int(m.group(1) or m.group(2))
        url, title = _entry(m.group(3))
        ref = Reference(n, url, title)
        if url is None:
            ref.problem = "no_url"
        else:
            ref.problem = url_problem(url)
            ref.visited = url_key(url) in seen_keys
        if ref.problem is None and n in numbers:
            ref.problem = "duplicate"
        if ref.problem is None and not ref.visited:
            ref.problem = "not_visited"
        numbers.add(n)
        report.references.append(ref)
    report.sections = [m.group(2) for ln in body if (m := _HEADING.match(ln))]
    report.statements = _statements(body)
    cited = {n for s in report.statements for n in s.refs}
    for ref in report.references:
        ref.cited = ref.n in cited
    report.dangling = sorted(cited - numbers)
    body_text = "\n".join(body)
    report.words = len(re.findall(r"[\u3400-\u9fff]|[^\s\u3400-\u9fff]+", body_text))
    if not cited:
        report.problems.append("no_citations")
    if not report.references:
        report.problems.append("no_references")
    return report
