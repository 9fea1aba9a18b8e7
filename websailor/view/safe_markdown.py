"""Markdown a model wrote, rendered as inert HTML (markdown-it-py): a report's headings, lists,
tables, emphasis and code show as such, and nothing in it can run or load on the viewer's page.

What keeps it inert:

- raw HTML is never markup: the ``html`` option is off and the ``html_block`` and
  ``html_inline`` rules are disabled, so ``<script>`` or ``<img onerror=...>`` in a report is
  parsed as text and escaped; their render rules escape too, should a token of theirs ever come;
- a link is a link only to an ``http`` or ``https`` URL with a host (:func:`safe_url`), checked
  twice: by markdown-it's ``validateLink`` while parsing (``[x](javascript:...)``, ``data:``,
  ``vbscript:``, ``file:``, relative paths and fragments stay text) and again when an ``<a>`` is
  written (an ``href`` that fails, or names a private or local host, is dropped:
  :func:`linkable`); a link opens in a new tab with ``rel="noopener noreferrer nofollow"``
  (:data:`LINK_REL`);
- images are never loaded: ``![alt](url)`` shows as a link labelled ``image: alt``;
- link reference definitions (``[1]: https://...``) are not read: a report's reference list
  stays text and its ``[n]`` markers are never turned into links to whatever a definition says;
- every other text goes through markdown-it's escaping, and the inline citation markers
  (``[1]``, ``[2, 3]``, ``[4-6]``) get their links and classes from values escaped here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markupsafe import Markup

from websailor.reports.citations import url_problem

#: The only URL schemes a rendered link may have.
SAFE_SCHEMES = frozenset({"http", "https"})
#: The ``rel`` of every rendered link: no access to this page, no referrer, no endorsement.
LINK_REL = "noopener noreferrer nofollow"
#: Longest text rendered (characters); the rest is cut, and the page says so.
MAX_CHARS = 400_000
#: An inline citation marker, as :mod:`websailor.reports.citations` reads them: [1], [1, 2],
#: [1-3], [1–3]; not a Markdown link's text.
MARKER = re.compile(r"\[(\d{1,4}(?:\s*(?:[,;]|[-–])\s*\d{1,4})*)\](?!\()")
_CLASS = re.compile(r"[^a-z0-9_-]")
_FRAGMENT = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class Cite:
    """How one number of an inline marker is shown: ``verdict`` (a class name:
    ``supported``, ``not_visited``...), ``title`` (its tooltip: the judge's reason) and
    ``target`` (the id of the reference list's entry it links to; ``""``: no link)."""

    verdict: str
    title: str = ""
    target: str = ""


#: Given a marker's number and the text of its sentence before it, how to show it.
CiteLookup = Callable[[int, str], Cite]


def css_name(value: str) -> str:
    """``value`` as a class name: lower case, only ``a-z 0-9 _ -`` kept (``unchecked`` when
    nothing is left)."""
    return _CLASS.sub("", str(value).lower()) or "unchecked"


def safe_url(url: str) -> bool:
    """Whether ``url`` may be a link's ``href``: an absolute ``http`` or ``https`` URL with a
    host, without spaces or control characters (so no ``javascript:``, ``data:``,
    ``vbscript:``, ``file:``, no relative path or fragment)."""
    if not isinstance(url, str) or not url or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        return False
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return False
    return parts.scheme.lower() in SAFE_SCHEMES and bool(host) and url.lower().startswith(parts.scheme.lower() + "://")


def _attr(value: str) -> str:
    return escapeHtml(value)


def linkable(url: Any) -> bool:
    """Whether ``url`` becomes a link on a page: :func:`safe_url`, and not a private or local
    address (:func:`websailor.reports.citations.url_problem`), so that a report cannot have the
    user's browser open a page of their own network."""
    return isinstance(url, str) and safe_url(url) and url_problem(url) is None


def _link_open(self: Any, tokens: list, idx: int, options: Any, env: dict) -> str:
    """``<a href rel target>``, the ``href`` kept only when :func:`linkable` allows it."""
    href = tokens[idx].attrGet("href")
    title = tokens[idx].attrGet("title")
    href_attr = f' href="{_attr(href)}"' if linkable(href) else ""
    title_attr = f' title="{_attr(title)}"' if isinstance(title, str) and title else ""
    return f'<a{href_attr}{title_attr} rel="{LINK_REL}" target="_blank">'


def _image(self: Any, tokens: list, idx: int, options: Any, env: dict) -> str:
    """An image as a link labelled ``image: ALT`` (never loaded); text when its URL is not safe."""
    token = tokens[idx]
    alt = "".join(c.content for c in token.children or [])
    label = escapeHtml(f"image: {alt}" if alt else "image")
    src = token.attrGet("src")
    if linkable(src):
        return f'<a class="image-link" href="{_attr(src)}" rel="{LINK_REL}" target="_blank">[{label}]</a>'
    return f'<span class="image-link">[{label}]</span>'


def _escaped(self: Any, tokens: list, idx: int, options: Any, env: dict) -> str:
    """Raw HTML (never produced with the rules disabled) shown as text."""
    return escapeHtml(tokens[idx].content)


def _marker(match: re.Match, before: str, cite: CiteLookup) -> str:
    """A marker ``[1, 2]`` with each number a link (class ``cite verdict-V``, the reason as its
    title) to its reference list entry."""

    def one(m: re.Match) -> str:
        c = cite(int(m.group(0)), before)
        cls = css_name(c.verdict)
        title = f' title="{_attr(c.title)}"' if c.title else ""
        if c.target:
            return f'<a class="cite verdict-{cls}" href="#{_FRAGMENT.sub("", c.target)}"{title}>{m.group(0)}</a>'
        return f'<span class="cite verdict-{cls}"{title}>{m.group(0)}</span>'

    inner = re.sub(r"\d+", one, escapeHtml(match.group(1)))
    return f'<span class="marker">[{inner}]</span>'


def _text(self: Any, tokens: list, idx: int, options: Any, env: dict) -> str:
    """A text token, escaped; with a ``cite`` lookup in ``env``, its citation markers marked."""
    content = tokens[idx].content
    cite = env.get("cite") if isinstance(env, dict) else None
    if cite is None:
        return escapeHtml(content)
    out, last = [], 0
    for m in MARKER.finditer(content):
        out.append(escapeHtml(content[last : m.start()]))
        out.append(_marker(m, content[: m.start()], cite))
        last = m.end()
    out.append(escapeHtml(content[last:]))
    return "".join(out)


def _renderer() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.disable(["html_block", "html_inline", "reference"])
    md.validateLink = safe_url
    for name, rule in (
        ("link_open", _link_open),
        ("image", _image),
        ("html_block", _escaped),
        ("html_inline", _escaped),
        ("text", _text),
    ):
        md.add_render_rule(name, rule)
    return md


_MD = _renderer()


def render_markdown(text: str, cite: CiteLookup | None = None) -> Markup:
    """``text`` (Markdown a model wrote) as HTML safe to put on a page as is (see the module's
    rules); with ``cite``, each inline citation marker's numbers shown as ``cite`` says. Text
    beyond :data:`MAX_CHARS` is cut (a line says so)."""
    if not isinstance(text, str):
        return Markup("")
    cut = len(text) > MAX_CHARS
    html = _MD.render(text[:MAX_CHARS], {"cite": cite} if cite else {})
    if cut:
        html += f'<p class="mute">(cut at {MAX_CHARS:,} of {len(text):,} characters)</p>'
    return Markup(html)
