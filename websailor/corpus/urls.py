"""Wikipedia titles and URLs.

Local pages use real English Wikipedia URLs (``https://en.wikipedia.org/wiki/Title_With_Underscores``)
so that a trajectory from the simulated environment looks like one from the real web.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote, urlsplit

from websailor.text import clean_text

WIKI_PREFIX = "https://en.wikipedia.org/wiki/"
# Characters that Wikipedia leaves unescaped in article paths.
_SAFE = "/:,()'!*@$;-._~"
_WIKI_HOST = re.compile(r"^(?:[a-z\-]+\.)?(?:m\.)?wikipedia\.org$", re.IGNORECASE)
_BARE_WIKI_URL = re.compile(r"^(?:www\.)?(?:[a-z\-]+\.)?(?:m\.)?wikipedia\.org/", re.IGNORECASE)


def title_to_url(title: str) -> str:
    """``"Sierra Madre, California"`` -> ``https://en.wikipedia.org/wiki/Sierra_Madre,_California``."""
    return WIKI_PREFIX + quote(clean_text(title).strip().replace(" ", "_"), safe=_SAFE)


def title_key(title: str) -> str:
    """Lookup key of a title: Unicode NFC, spaces collapsed, first letter upper-case (as MediaWiki does)."""
    t = " ".join(clean_text(title).replace("_", " ").split())
    return t[:1].upper() + t[1:]


def url_to_title(url_or_title: str) -> str:
    """Best-effort title from a Wikipedia URL (any language or mobile host) or a plain title.

    ``https://en.m.wikipedia.org/wiki/Albert_Einstein#Life`` -> ``"Albert Einstein"``;
    ``"en.wikipedia.org/wiki/Paris"`` and ``"/wiki/Paris"`` -> ``"Paris"``; ``"Paris"`` -> ``"Paris"``. The result is not checked
    against any corpus; use :func:`title_key` to compare.
    """
    s = clean_text(url_or_title).strip()
    if _BARE_WIKI_URL.match(s):
        s = "https://" + s
    if "://" in s or s.startswith("//"):
        try:
            parts = urlsplit(s if "://" in s else "https:" + s)
        except ValueError:  # e.g. "https://[/wiki/X": not a URL at all
            return s
        if parts.scheme.lower() not in ("http", "https") or not _WIKI_HOST.match(parts.hostname or ""):
            return s  # another site: no page of ours has this "title"
        path = parts.path
        if not path.startswith("/wiki/"):
            # index.php?title=X
            q = dict(p.split("=", 1) for p in parts.query.split("&") if "=" in p)
            path = "/wiki/" + q.get("title", path.rsplit("/", 1)[-1])
        s = path
    if s.startswith("/wiki/"):
        s = s[len("/wiki/") :]
    s = s.split("#", 1)[0]
    return " ".join(clean_text(unquote(s)).replace("_", " ").split())
