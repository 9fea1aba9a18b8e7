"""Web providers: each turns one normalized request into a JSON-ready result or raises
:class:`~websailor.tools.web.executor.ProviderFailure`.

- search: the Serper API (Google results, as the released Tongyi DeepResearch code) and a
  SearXNG instance's JSON API as the backup;
- google_scholar: Serper's scholar endpoint, SearXNG's ``science`` category as the backup;
- visit: the Jina Reader (page as markdown), and a direct fetch whose HTML trafilatura turns
  into markdown (PDF, DOCX and other files go through ``parse_file``'s parsers).

Base URLs are settings, so tests point them at a local server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from websailor.tools.web.executor import HttpReply, ProviderFailure, ToolPolicy, http_request


def normalize_query(query: str) -> str:
    """Whitespace collapsed and lower-cased: the cache key of a search query."""
    return " ".join(query.split()).lower()


def normalize_url(url: str) -> str:
    """Scheme and host lower-cased, fragment dropped; the rest as written. A URL written
    without a scheme (``en.wikipedia.org/wiki/Nile``) gets ``https://``, as the local ``visit``
    accepts it too.

    Raises:
        ValueError: not an ``http``/``https`` URL with a host.
    """
    url = url.strip()
    host = url.split("/", 1)[0]
    if "://" not in url and "." in host and not any(c.isspace() for c in url) and ":" not in host:
        url = "https://" + url
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        raise ValueError(f"not a web URL: {url[:200]!r} (expected http:// or https://)")
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path or "/", parts.query, ""))


def _results(data: Any, key: str, provider: str) -> list[dict[str, Any]]:
    if not isinstance(data, dict):
        raise ProviderFailure("bad_response", f"{provider} answered {type(data).__name__}, not a JSON object")
    items = data.get(key, [])
    if not isinstance(items, list):
        raise ProviderFailure("bad_response", f"{provider}'s {key!r} is not a list")
    return [r for r in items if isinstance(r, dict)]


#: Longest title, snippet or publication kept from a provider (characters).
MAX_FIELD_CHARS = 1000


def _text(value: Any, limit: int = MAX_FIELD_CHARS) -> str:
    return " ".join(str(value).split())[:limit] if value is not None else ""


def _link(value: Any) -> str:
    return str(value).strip()[:2000] if isinstance(value, str) else ""


@dataclass(frozen=True)
class SerperSearch:
    """Serper's Google search (``endpoint="search"``) or Google Scholar (``"scholar"``).

    Result: up to ``top_k`` hits ``{title, url, snippet}`` (scholar adds ``publication``,
    ``year``, ``cited_by``).
    """

    api_key: str
    base_url: str = "https://google.serper.dev"
    endpoint: str = "search"
    top_k: int = 10
    name: str = "serper"

    async def __call__(self, client: httpx.AsyncClient, request: dict[str, Any], policy: ToolPolicy) -> Any:
        reply = await http_request(
            client,
            "POST",
            f"{self.base_url.rstrip('/')}/{self.endpoint}",
            policy.max_bytes,
            json={"q": request["q"], "num": self.top_k},
            headers={"X-API-KEY": self.api_key},
        )
        hits = []
        for r in _results(reply.json(), "organic", "Serper")[: self.top_k]:
            hit = {"title": _text(r.get("title")), "url": _link(r.get("link")), "snippet": _text(r.get("snippet"))}
            if self.endpoint == "scholar":
                hit.update(
                    publication=_text(r.get("publicationInfo")), year=_text(r.get("year")), cited_by=r.get("citedBy")
                )
            hits.append(hit)
        return hits


@dataclass(frozen=True)
class SearxngSearch:
    """A SearXNG instance's JSON API (``format=json`` must be enabled in its settings);
    ``category="science"`` stands in for Google Scholar."""

    base_url: str
    category: str | None = None
    top_k: int = 10
    name: str = "searxng"

    async def __call__(self, client: httpx.AsyncClient, request: dict[str, Any], policy: ToolPolicy) -> Any:
        params = {"q": request["q"], "format": "json"}
        if self.category:
            params["categories"] = self.category
        reply = await http_request(
            client, "GET", f"{self.base_url.rstrip('/')}/search", policy.max_bytes, params=params
        )
        return [
            {
                "title": _text(r.get("title")),
                "url": _link(r.get("url")),
                "snippet": _text(r.get("content")),
                "publication": _text(r.get("journal") or r.get("publisher")),
                "year": _text(r.get("publishedDate"))[:4],
                "cited_by": None,
            }
            for r in _results(reply.json(), "results", "SearXNG")[: self.top_k]
        ]


def _page(url: str, title: str, text: str, truncated: bool, provider: str) -> dict[str, Any]:
    if not text.strip():
        raise ProviderFailure("empty", f"{provider} returned no readable text")
    return {"url": url, "title": title, "text": text, "truncated": truncated}


@dataclass(frozen=True)
class JinaReader:
    """The Jina Reader: ``GET {base_url}/{url}`` returns the page as markdown, after
    ``Title:`` and ``URL Source:`` header lines. The API key is optional (lower rate limits
    without one)."""

    base_url: str = "https://r.jina.ai"
    api_key: str | None = None
    name: str = "jina"

    async def __call__(self, client: httpx.AsyncClient, request: dict[str, Any], policy: ToolPolicy) -> Any:
        headers = {"X-Return-Format": "markdown"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        reply = await http_request(
            client, "GET", f"{self.base_url.rstrip('/')}/{request['url']}", policy.max_bytes, headers=headers
        )
        text = reply.text()
        title = ""
        head, sep, body = text.partition("Markdown Content:")
        if sep:
            for line in head.splitlines():
                if line.startswith("Title:"):
                    title = line[len("Title:") :].strip()
            text = body
        return _page(request["url"], title, text.strip(), reply.truncated, self.name)


_MD_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|>~])")
_MD_HEADING = re.compile(r"^#{1,6}\s+", re.MULTILINE)


def clean_markdown(text: str) -> str:
    """Page markdown as plain paragraphs for goal ranking: backslash escapes undone
    (``Capital\\_City`` -> ``Capital_City``) and headings written ``## Title``, the form the
    passage extractor skips (as in the local corpus)."""
    return _MD_HEADING.sub("## ", _MD_ESCAPE.sub(r"\1", text))


def is_public_address(address: str) -> bool:
    """Whether an IP address is globally routable: not loopback, private, link-local, shared
    (100.64.0.0/10, where some clouds keep their metadata service), multicast or reserved;
    IPv4-mapped IPv6 addresses are judged by their IPv4 part."""
    import ipaddress

    a = ipaddress.ip_address(address.split("%")[0])
    if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None:
        a = a.ipv4_mapped
    return a.is_global and not a.is_multicast


def _blocked(host: str) -> ProviderFailure:
    return ProviderFailure(
        "blocked", f"{host[:100]} is a private or local address (allow_private_urls: true lets visit read it)"
    )


async def check_public(url: str) -> None:
    """Refuse a URL whose host is, or resolves to, an address that is not public
    (:func:`is_public_address`): the agent must not reach the machine's own network.

    Raises:
        ProviderFailure: ``blocked`` for such an address, ``connection`` when the host does
            not resolve.
    """
    import asyncio
    import socket

    host = urlsplit(url).hostname or ""
    try:
        addresses = [str(__import__("ipaddress").ip_address(host))]
    except ValueError:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as e:
            raise ProviderFailure(
                "connection", f"the host {host[:100]!r} does not resolve ({type(e).__name__})"
            ) from None
        addresses = [info[4][0] for info in infos]
    if not all(is_public_address(a) for a in addresses):
        raise _blocked(host)


def _check_peer(url: str) -> Any:
    """A check of the address a response actually came from (a second DNS answer may differ
    from the one :func:`check_public` saw: DNS rebinding)."""

    def check(server_addr: tuple | None) -> None:
        if server_addr is not None and not is_public_address(str(server_addr[0])):
            raise _blocked(urlsplit(url).hostname or "")

    return check


async def fetch_target(client: httpx.AsyncClient, url: str, policy: ToolPolicy, allow_private: bool) -> HttpReply:
    """GET a page the agent asked for, following up to 5 redirects by hand so that every hop is
    checked by :func:`check_public`, and the address each answer came from too (unless
    ``allow_private``)."""
    for _ in range(6):
        peer = None
        if not allow_private:
            await check_public(url)
            peer = _check_peer(url)
        reply = await http_request(client, "GET", url, policy.max_bytes, follow_redirects=False, check_peer=peer)
        location = reply.headers.get("location")
        if reply.status not in (301, 302, 303, 307, 308) or not location:
            return reply
        url = str(httpx.URL(url).join(location))
    raise ProviderFailure("redirect_loop", "too many redirects")


@dataclass(frozen=True)
class DirectFetch:
    """Fetch the page itself and read it with :func:`document_text` (in a child process with a
    time limit, so a large or hostile page does not hold up the other operations). Private and
    local addresses are refused unless ``allow_private``."""

    allow_private: bool = False
    name: str = "direct"
    per_target = True

    async def __call__(self, client: httpx.AsyncClient, request: dict[str, Any], policy: ToolPolicy) -> Any:
        import asyncio

        from websailor.tools.documents.isolated import IsolatedCallError, call_isolated

        reply = await fetch_target(client, request["url"], policy, self.allow_private)
        ctype = reply.headers.get("content-type", "")
        try:  # in a child process with a time limit: a hostile document cannot hold up the others
            title, text = await asyncio.to_thread(
                call_isolated, document_text, reply.body, ctype, reply.url, timeout_s=policy.timeout_s
            )
        except IsolatedCallError as e:
            raise ProviderFailure("unparsable", f"the page could not be read ({e})") from None
        return _page(reply.url, title, text, reply.truncated, self.name)


@dataclass(frozen=True)
class RawDownload:
    """A file's bytes and content type, for ``parse_file`` (not cached: bytes are not JSON).
    A file over the size limit fails (``too_large``) rather than being cut; private and local
    addresses are refused unless ``allow_private``."""

    allow_private: bool = False
    name: str = "direct"
    per_target = True
    cacheable = False

    async def __call__(self, client: httpx.AsyncClient, request: dict[str, Any], policy: ToolPolicy) -> Any:
        reply = await fetch_target(client, request["url"], policy, self.allow_private)
        if reply.truncated:
            raise ProviderFailure("too_large", f"the file is larger than {policy.max_bytes:,} bytes")
        return reply.body, reply.headers.get("content-type")


def document_text(body: bytes, content_type: str, url: str) -> tuple[str, str]:
    """``(title, text)`` of a fetched document, its type found as ``parse_file`` finds it
    (extension, content type, magic bytes): HTML through
    :func:`~websailor.tools.documents.parsers.html_markdown`, text as is, PDF, DOCX, XLSX and CSV
    through the other parsers (titled by the file name).

    Raises:
        websailor.tools.documents.parse_file.FileParseError: an unsupported or corrupt file.
    """
    from websailor.tools.documents.parsers import detect_kind, html_markdown, parse_bytes

    name = urlsplit(url).path.rsplit("/", 1)[-1] or "document"
    kind = detect_kind(body, name, content_type or None) if body.strip() else "text"
    if kind == "html":
        return html_markdown(body, content_type or None, url, favor_recall=True)
    if kind == "text":
        return "", parse_bytes(body, name, content_type or None) if body.strip() else ""
    return name, parse_bytes(body, name, content_type or None)
