"""Web providers: each turns one normalized request into a JSON-ready result or raises
:class:`~websailor.tools.web.failures.ProviderFailure`.

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

from websailor.tools.web.executor import ToolPolicy
from websailor.tools.web.failures import TARGET_ERROR, UNUSABLE, UPSTREAM_UNAVAILABLE, ProviderFailure
from websailor.tools.web.http_call import HttpReply, http_request


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


def has_chinese(text: str) -> bool:
    """Whether ``text`` holds a CJK unified ideograph (U+4E00 to U+9FFF), the test the released
    Tongyi DeepResearch search tool uses to pick a Chinese Google locale."""
    return any("\u4e00" <= c <= "\u9fff" for c in text)


#: Serper's locale fields by query language, as the released Tongyi DeepResearch search tool
#: sends them (``inference/tool_search.py``): Chinese queries search Google as from China.
SERPER_LOCALES = {
    "zh": {"location": "China", "gl": "cn", "hl": "zh-cn"},
    "en": {"location": "United States", "gl": "us", "hl": "en"},
}


def query_locale(query: str) -> str:
    """``"zh"`` for a query with Chinese characters, else ``"en"`` (keys of :data:`SERPER_LOCALES`)."""
    return "zh" if has_chinese(query) else "en"


def _json_message(text: str) -> str:
    """The ``message`` of a JSON error body (Serper: ``{"message": ..., "statusCode": ...}``;
    Jina: ``{"code": ..., "name": ..., "message": ...}``), else the text itself, one line."""
    import json

    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        text = data["message"]
    return " ".join(text.split())[:300]


#: Words of an answer that says the account has run out (Serper's ``"Not enough credits"``).
_OUT_OF_CREDIT = re.compile(r"\b(credits?|quota|balance|recharge|top up)\b", re.IGNORECASE)


def account_failure(e: ProviderFailure) -> ProviderFailure:
    """``e`` as ``unusable`` when the answer says the account cannot serve for the rest of the
    run: HTTP 401, 402 or 403 (a refused key, no credit, a disabled feature), or a 400 or 429
    whose message speaks of credits, quota or balance (Serper's exhausted quota: users report
    ``{"message": "Not enough credits", "statusCode": 400}``); other failures unchanged."""
    if e.status is None or e.kind == UNUSABLE:
        return e
    message = _json_message(e.message)
    out_of_credit = e.status in (400, 429) and bool(_OUT_OF_CREDIT.search(message))
    if e.status not in (401, 402, 403) and not out_of_credit:
        return e
    said = f": {message}" if message else ""
    advice = "check the account's credit" if e.status == 402 or out_of_credit else "check the API key and the plan"
    return ProviderFailure(UNUSABLE, f"HTTP {e.status}{said} ({advice})", status=e.status, message=e.message)


@dataclass(frozen=True)
class SerperSearch:
    """Serper's Google search (``endpoint="search"``) or Google Scholar (``"scholar"``).

    Web searches carry the locale of the query's language (:func:`query_locale`:
    ``location``, ``gl``, ``hl`` as the released Tongyi DeepResearch tool sends them); scholar
    searches only the query, as Tongyi's scholar tool.

    Result: up to ``top_k`` hits ``{title, url, snippet}``, plus ``date`` and ``source`` when
    Serper gives them; scholar adds ``publication``, ``year``, ``cited_by``, and takes the
    ``pdfUrl`` of a hit without a ``link``.

    Raises (as :class:`ProviderFailure`): ``unusable`` for a refused key or an exhausted
    account (:func:`account_failure`), else as :func:`http_request`.
    """

    api_key: str
    base_url: str = "https://google.serper.dev"
    endpoint: str = "search"
    top_k: int = 10
    name: str = "serper"

    def payload(self, query: str) -> dict[str, Any]:
        """The JSON body of one query."""
        body: dict[str, Any] = {"q": query, "num": self.top_k}
        if self.endpoint == "search":
            body.update(SERPER_LOCALES[query_locale(query)])
        return body

    async def __call__(self, client: httpx.AsyncClient, request: dict[str, Any], policy: ToolPolicy) -> Any:
        try:
            reply = await http_request(
                client,
                "POST",
                f"{self.base_url.rstrip('/')}/{self.endpoint}",
                policy.max_bytes,
                json=self.payload(request["q"]),
                headers={"X-API-KEY": self.api_key},
            )
        except ProviderFailure as e:
            raise account_failure(e) from None
        hits = []
        for r in _results(reply.json(), "organic", "Serper")[: self.top_k]:
            hit = {"title": _text(r.get("title")), "url": _link(r.get("link")), "snippet": _text(r.get("snippet"))}
            for name in ("date", "source"):
                if _text(r.get(name)):
                    hit[name] = _text(r.get(name), 200)
            if self.endpoint == "scholar":
                hit["url"] = hit["url"] or _link(r.get("pdfUrl"))
                hit.update(
                    publication=_text(r.get("publicationInfo")), year=_text(r.get("year")), cited_by=r.get("citedBy")
                )
            hits.append(hit)
        return hits


#: Request headers that pass a SearXNG instance's bot detection when its limiter is on
#: (``searx/botdetection``: ``Accept`` must accept ``text/html``, ``Accept-Encoding`` must
#: name gzip or deflate, ``Accept-Language`` must be set; the executor's ``User-Agent`` is not
#: one of the bot names it refuses).
SEARXNG_HEADERS = {
    "Accept": "application/json, text/html;q=0.9",
    "Accept-Encoding": "gzip, deflate",
    "Accept-Language": "en-US,en;q=0.9",
}


def _searxng_failure(e: ProviderFailure) -> ProviderFailure:
    """SearXNG's refusals, said plainly: 403 is ``search.formats`` without ``json``
    (``unusable``); 429 is its limiter (retried)."""
    if e.status == 403:
        return ProviderFailure(
            UNUSABLE,
            "HTTP 403: the instance does not serve the JSON format (add json to search.formats in its settings.yml)",
            status=403,
        )
    if e.status == 429:
        e.detail = "HTTP 429 (the instance's limiter: too many requests, or its bot detection refused the request)"
    return e


@dataclass(frozen=True)
class SearxngSearch:
    """A SearXNG instance's JSON API (``format=json`` must be enabled in its settings);
    ``category="science"`` stands in for Google Scholar. Requests carry
    :data:`SEARXNG_HEADERS`, so an instance with its limiter on lets them through.

    Raises (as :class:`ProviderFailure`): ``unusable`` for 403 (the JSON format is off),
    ``upstream_unavailable`` for no results while engines did not answer
    (``unresponsive_engines``: blocked, rate limited or timed out upstream), else as
    :func:`http_request`. No results with every engine answering is a real empty result.
    """

    base_url: str
    category: str | None = None
    top_k: int = 10
    name: str = "searxng"

    async def __call__(self, client: httpx.AsyncClient, request: dict[str, Any], policy: ToolPolicy) -> Any:
        params = {"q": request["q"], "format": "json"}
        if self.category:
            params["categories"] = self.category
        try:
            reply = await http_request(
                client,
                "GET",
                f"{self.base_url.rstrip('/')}/search",
                policy.max_bytes,
                params=params,
                headers=SEARXNG_HEADERS,
            )
        except ProviderFailure as e:
            raise _searxng_failure(e) from None
        data = reply.json()
        results = _results(data, "results", "SearXNG")
        if not results:
            down = unresponsive_engines(data)
            if down:
                shown = ", ".join(f"{engine} ({why})" if why else engine for engine, why in down[:5])
                more = f" and {len(down) - 5} more" if len(down) > 5 else ""
                raise ProviderFailure(UPSTREAM_UNAVAILABLE, f"no results, its engines did not answer: {shown}{more}")
        return [
            {
                "title": _text(r.get("title")),
                "url": _link(r.get("url")),
                "snippet": _text(r.get("content")),
                "publication": _text(r.get("journal") or r.get("publisher")),
                "year": _text(r.get("publishedDate"))[:4],
                "cited_by": None,
            }
            for r in results[: self.top_k]
        ]


def unresponsive_engines(data: dict[str, Any]) -> list[tuple[str, str]]:
    """SearXNG's ``unresponsive_engines`` (``[[engine, reason], ...]``) as pairs; malformed
    entries are kept by their engine name alone."""
    out: list[tuple[str, str]] = []
    entries = data.get("unresponsive_engines")
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, (list, tuple)) and entry:
            out.append((_text(entry[0], 100), _text(entry[1], 100) if len(entry) > 1 else ""))
        elif isinstance(entry, str):
            out.append((_text(entry, 100), ""))
    return out


def _page(url: str, title: str, text: str, truncated: bool, provider: str) -> dict[str, Any]:
    if not text.strip():
        raise ProviderFailure("empty", f"{provider} returned no readable text")
    return {"url": url, "title": title, "text": text, "truncated": truncated}


#: Jina Reader's header line for a target that answered an error (``snapshot-formatter.ts``:
#: any status below 200 or from 400 up).
_JINA_TARGET_ERROR = re.compile(r"^Warning: Target URL returned error (\d{3})(?::\s*(.*))?$", re.MULTILINE)


def _jina_failure(e: ProviderFailure) -> ProviderFailure:
    """The Jina Reader's refusals: 401 and 402 (a refused key, no balance:
    ``InsufficientBalanceError``) and a 403 that is not a block of one domain are ``unusable``;
    a 403 that blocks one domain (``Anonymous access to domain ... blocked``) stays ``auth``,
    a provider fault of this page only."""
    if e.status == 403 and re.search(r"\bdomain\b|AbuseAlleviation", e.message):
        e.detail = f"HTTP 403: {_json_message(e.message)}"
        return e
    return account_failure(e)


def _jina_envelope(text: str) -> ProviderFailure | None:
    """A JSON error envelope in a 200 answer (``{"data": null, "code": 402, "name":
    "InsufficientBalanceError", ...}``, seen from some clients), as the failure its code means."""
    import json

    if not text.lstrip().startswith("{"):
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("code"), int) or "name" not in data:
        return None
    code = data["code"]
    if code < 400:
        return None
    if code >= 500:
        return ProviderFailure("server_error", f"HTTP 200 with an error {code}: {_json_message(text)}")
    if code == 429:
        return ProviderFailure("rate_limited", f"HTTP 200 with an error 429: {_json_message(text)}")
    failure = _jina_failure(ProviderFailure("client_error", f"error {code}", status=code, message=text))
    if failure.kind == "client_error":
        failure.detail = f"error {code}: {_json_message(text)}"
    return failure


@dataclass(frozen=True)
class JinaReader:
    """The Jina Reader: ``GET {base_url}/{url}`` returns the page as markdown, after
    ``Title:``, ``URL Source:`` and optional ``Warning:`` header lines. The API key is optional
    (lower rate limits without one).

    The reader answers HTTP 200 also for a target that answered an error, with a header line
    ``Warning: Target URL returned error 404: Not Found``: that is a ``target_error`` (the
    page is dead; the direct fetch is tried, nothing is cached). Other warnings (a page not
    fully loaded, hidden iframes) keep the content.

    Raises (as :class:`ProviderFailure`): ``target_error``; ``unusable`` for 401, 402 and a
    403 that is not a domain block (:func:`_jina_failure`), also when sent as a JSON error in
    a 200 answer; ``bad_response`` (retryable, a provider fault) for an empty body without
    the reader's header lines; ``empty`` for a page without text; else as :func:`http_request`.
    """

    base_url: str = "https://r.jina.ai"
    api_key: str | None = None
    name: str = "jina"

    async def __call__(self, client: httpx.AsyncClient, request: dict[str, Any], policy: ToolPolicy) -> Any:
        headers = {"X-Return-Format": "markdown"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            reply = await http_request(
                client, "GET", f"{self.base_url.rstrip('/')}/{request['url']}", policy.max_bytes, headers=headers
            )
        except ProviderFailure as e:
            raise _jina_failure(e) from None
        text = reply.text()
        title = ""
        head, sep, body = text.partition("Markdown Content:")
        if sep:
            error = _JINA_TARGET_ERROR.search(head)
            if error:
                reason = f" ({error.group(2).strip()})" if error.group(2) and error.group(2).strip() else ""
                raise ProviderFailure(TARGET_ERROR, f"the site answered HTTP {error.group(1)}{reason} to the reader")
            for line in head.splitlines():
                if line.startswith("Title:"):
                    title = line[len("Title:") :].strip()
            text = body
        else:
            envelope = _jina_envelope(text)
            if envelope is not None:
                raise envelope
            if not text.strip():  # not even the reader's header lines: the reader failed, not the page
                raise ProviderFailure("bad_response", "the reader answered an empty body")
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
        reply = await http_request(
            client, "GET", url, policy.max_bytes, follow_redirects=False, check_peer=peer, target=True
        )
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
