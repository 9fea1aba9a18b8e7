"""The web environment's tools: the same names, schemas and observation layout as the local
ones, backed by providers through the :class:`~websailor.tools.web.executor.ToolExecutor`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import bm25s

from websailor.corpus.index import BM25Index
from websailor.corpus.store import Document
from websailor.errors import WebsailorError
from websailor.text import truncate
from websailor.tools.base import Tool
from websailor.tools.extract import EVIDENCE_CHARS, extract_for_goal
from websailor.tools.metrics import ToolMetrics
from websailor.tools.search import BLOCK_SEPARATOR, BaseSearchTool, format_search_results, search_description
from websailor.tools.visit import MAX_ECHO_CHARS, BaseVisitTool, format_visit
from websailor.tools.web.cache import ResultCache
from websailor.tools.web.executor import Outcome, Provider, ToolExecutor
from websailor.tools.web.providers import (
    DirectFetch,
    JinaReader,
    RawDownload,
    SearxngSearch,
    SerperSearch,
    clean_markdown,
    normalize_query,
    normalize_url,
)
from websailor.tools.web.settings import WebSettings


class ToolUnavailableError(WebsailorError):
    """Every provider of a tool failed for every item of the call (the observation says why)."""


@dataclass(frozen=True)
class WebHit:
    """One web search result, in the fields :func:`format_search_results` lays out."""

    rank: int
    title: str
    url: str
    snippet: str


def failed_block(what: str, outcome: Outcome, hint: str) -> str:
    """The observation of an operation every provider failed (graceful degradation): what
    failed, each provider's reason, and what the agent can do instead."""
    return f"{what} failed ({outcome.failure_text()}). {hint}"


class WebSearchTool(BaseSearchTool):
    """``search`` on the web: each query through the providers in order (Serper, then the
    backup), with the executor's cache, limits, retries and failover. A query every provider
    failed gets a block saying why; if all failed, the call is an error observation.

    ``top_k`` results per query are shown (``--search-results``; the providers should be
    asked for as many) and each snippet is cut to ``snippet_chars`` when given
    (``--snippet-chars``; default: the provider's snippet)."""

    tool_key = "search"
    label = "search"
    hint = "Try again, or rephrase the query."

    def __init__(
        self,
        executor: ToolExecutor,
        providers: Sequence[Provider],
        max_queries: int = 10,
        max_query_chars: int = 500,
        top_k: int = 10,
        snippet_chars: int | None = None,
    ) -> None:
        self.executor = executor
        self.providers = list(providers)
        self.max_queries = max_queries
        self.max_query_chars = max_query_chars
        self.top_k = top_k
        self.snippet_chars = snippet_chars
        if self.name == "search":
            self.description = search_description(top_k)

    def cache_key(self, query: str) -> dict[str, Any]:
        """The cache key of ``query``: its normalized text, and the number of results asked for
        when it is not the paper's 10 (so cached 10-result lists stay valid)."""
        key: dict[str, Any] = {"q": normalize_query(query)}
        if self.top_k != 10:
            key["num"] = self.top_k
        return key

    def snippet(self, text: str) -> str:
        """A provider's snippet, cut to :attr:`snippet_chars` when set."""
        return truncate(text, self.snippet_chars) if self.snippet_chars is not None else text

    def search_blocks(self, queries: list[str]) -> list[str]:
        outcomes = self.executor.call_many(
            self.tool_key,
            [{"q": q} for q in queries],
            self.providers,
            keys=[self.cache_key(q) for q in queries],
        )
        if all(not o.ok for o in outcomes):
            what = f"The {self.label}" + (
                f" for '{queries[0]}'" if len(queries) == 1 else f" for all {len(queries)} queries"
            )
            raise ToolUnavailableError(failed_block(what, outcomes[0], self.hint))
        return [
            self.format_hits(q, o.value) if o.ok else failed_block(f"The {self.label} for '{q}'", o, self.hint)
            for q, o in zip(queries, outcomes)
        ]

    def format_hits(self, query: str, hits: list[dict[str, Any]]) -> str:
        return format_search_results(
            query,
            [WebHit(i, h["title"], h["url"], self.snippet(h["snippet"])) for i, h in enumerate(hits[: self.top_k], 1)],
        )


class WebScholarTool(WebSearchTool):
    """``google_scholar``: academic search (Serper's scholar endpoint, or SearXNG's science
    category); hits add the publication, year and citation count."""

    name = "google_scholar"
    tool_key = "google_scholar"
    label = "Google Scholar search"
    description = (
        "Search Google Scholar for academic publications. Give one or more queries in the array "
        "'query'; each returns its best results (title, URL, publication, year, citations, snippet)."
    )

    def format_hits(self, query: str, hits: list[dict[str, Any]]) -> str:
        if not hits:
            return format_search_results(query, [])
        lines = []
        hits = hits[: self.top_k]
        for i, h in enumerate(hits, 1):
            meta = ", ".join(x for x in (h.get("publication"), h.get("year")) if x)
            cited = f" Cited by {h['cited_by']}." if h.get("cited_by") is not None else ""
            lines.append(
                f"{i}. [{h['title']}]({h['url']})\n{meta + '.' if meta else ''}{cited}\n{self.snippet(h['snippet'])}"
            )
        return (
            f"A Google Scholar search for '{query}' found {len(hits)} results:\n\n## Scholar Results\n"
            + "\n\n".join(lines)
        )


class WebVisitTool(BaseVisitTool):
    """``visit`` on the web: the page through the reader providers (Jina, then a direct
    fetch), then evidence and summary for the goal: the LLM extractor when a summary model is
    given (retried on a shrunk page when its output is empty or unparsable), else the
    goal-ranked passage extractor."""

    def __init__(
        self,
        executor: ToolExecutor,
        providers: Sequence[Provider],
        summary_model: Any = None,
        max_urls: int = 5,
        max_evidence_chars: int = EVIDENCE_CHARS,
        allow_private: bool = False,
        cut_llm_evidence: bool = False,
    ) -> None:
        self.executor = executor
        self.allow_private = allow_private
        self.providers = list(providers)
        self.summary_model = summary_model
        self.max_urls = max_urls
        self.max_evidence_chars = max_evidence_chars
        self.cut_llm_evidence = cut_llm_evidence
        self.index = BM25Index(bm25s.BM25())  # only its analyzer ranks a page's passages

    def visit_one(self, url: str, goal: str) -> str:
        try:
            clean = normalize_url(url)
        except ValueError as e:
            return f"The URL {truncate(url, MAX_ECHO_CHARS)} cannot be visited: {str(e).split(':')[0]}. Give a full http(s) URL."
        # pages read with private addresses allowed stay out of the cache of runs without
        key = {"url": clean, "private": True} if self.allow_private else None
        outcome = self.executor.call("visit", {"url": clean}, self.providers, key=key)
        if not outcome.ok:
            return failed_block(
                f"Reading {truncate(url, MAX_ECHO_CHARS)}",
                outcome,
                "Try another page with the same information, or search for it.",
            )
        page = outcome.value
        doc = Document(id=0, title=page["title"] or clean, url=page["url"], text=clean_markdown(page["text"]))
        found = extract_for_goal(
            doc, goal, self.index, self.summary_model, self.max_evidence_chars, self.cut_llm_evidence
        )
        text = format_visit(url, goal, found)
        if page.get("truncated"):
            text += "(The page was longer than the size limit; only its beginning was read.)\n"
        return text


#: The tools :func:`build_web_tools` makes (``PythonInterpreter`` and ``parse_file`` come from
#: :func:`websailor.tools.environment.open_environment`, which adds them to either environment).
WEB_TOOLS = ("search", "visit", "google_scholar")


def build_web_tools(
    settings: WebSettings,
    summary_model: Any = None,
    metrics: ToolMetrics | None = None,
    names: Sequence[str] = WEB_TOOLS,
    *,
    search_results: int | None = None,
    snippet_chars: int | None = None,
    evidence_chars: int | None = None,
) -> tuple[dict[str, Tool], ToolExecutor]:
    """The web tools named in ``names`` and the executor they share (close it when done; give
    it to :func:`executor_fetch` for ``parse_file``).

    The observation settings (``None``: the paper's; see
    :class:`websailor.tools.environment.EnvSpec`): results per query of ``search`` and
    ``google_scholar`` (providers are asked for as many), their snippet length (default: the
    provider's snippet) and ``visit``'s evidence budget per page.

    Tools: ``search`` (Serper, then SearXNG), ``visit`` (Jina Reader, then direct fetch),
    ``google_scholar`` (Serper scholar, then SearXNG science).

    Raises:
        ConfigError: ``search`` or ``google_scholar`` asked for without a provider (names
            ``SERPER_API_KEY`` and ``SEARXNG_BASE_URL``), an unknown name, bad policies, an
            unusable cache file, or no way to read pages.
    """
    from websailor.errors import ConfigError

    unknown = [n for n in names if n not in WEB_TOOLS]
    if unknown:
        raise ConfigError(f"build_web_tools makes {', '.join(WEB_TOOLS)}, not {', '.join(unknown)}")
    if "search" in names or "google_scholar" in names:
        settings.require_search("search" if "search" in names else "google_scholar")
    policies = {n: settings.policy(n) for n in ("search", "google_scholar", "visit", "parse_file")}
    cache = ResultCache(settings.resolved_cache_path()) if settings.cache else None
    executor = ToolExecutor(policies, cache=cache, metrics=metrics)
    key = settings.serper_api_key.get_secret_value() if settings.serper_api_key else None
    top_k = search_results if search_results is not None else 10
    search: list[Provider] = []
    scholar: list[Provider] = []
    if key:
        search.append(SerperSearch(key, settings.serper_base_url, top_k=top_k))
        scholar.append(SerperSearch(key, settings.serper_base_url, endpoint="scholar", top_k=top_k))
    if settings.searxng_base_url:
        search.append(SearxngSearch(settings.searxng_base_url, top_k=top_k))
        scholar.append(SearxngSearch(settings.searxng_base_url, category="science", top_k=top_k))
    readers: list[Provider] = []
    if settings.use_jina:
        jina_key = settings.jina_api_key.get_secret_value() if settings.jina_api_key else None
        readers.append(JinaReader(settings.jina_base_url, jina_key))
    if settings.direct_fetch:
        readers.append(DirectFetch(settings.allow_private_urls))
    if "visit" in names and not readers:
        executor.close()
        raise ConfigError("web settings: use_jina and direct_fetch are both off, so visit has no way to read pages")
    if "visit" in names and settings.direct_fetch:
        import trafilatura  # noqa: F401  (imported now, not inside the first fetch's time limit)
    makers = {
        "search": lambda: WebSearchTool(executor, search, top_k=top_k, snippet_chars=snippet_chars),
        "visit": lambda: WebVisitTool(
            executor,
            readers,
            summary_model,
            max_evidence_chars=evidence_chars if evidence_chars is not None else EVIDENCE_CHARS,
            allow_private=settings.allow_private_urls,
            cut_llm_evidence=evidence_chars is not None,
        ),
        "google_scholar": lambda: WebScholarTool(executor, scholar, top_k=top_k, snippet_chars=snippet_chars),
    }
    try:
        return {n: makers[n]() for n in names}, executor
    except BaseException:
        executor.close()
        raise


def executor_fetch(executor: ToolExecutor, allow_private: bool = False) -> Any:
    """A ``url -> (bytes, content type)`` downloader for ``parse_file`` through the executor
    (limits, retries; no cache: files are bytes).

    Raises:
        ToolUnavailableError: the download failed after retries (the message says why).
    """

    def fetch(url: str) -> tuple[bytes, str | None]:
        try:
            clean = normalize_url(url)
        except ValueError as e:
            raise ToolUnavailableError(str(e)) from None
        outcome = executor.call("parse_file", {"url": clean}, [RawDownload(allow_private)])
        if not outcome.ok:
            raise ToolUnavailableError(
                failed_block(
                    f"Downloading {truncate(url, MAX_ECHO_CHARS)}",
                    outcome,
                    "Check the URL, or look for another copy of the file.",
                )
            )
        return outcome.value

    return fetch


__all__ = [
    "BLOCK_SEPARATOR",
    "WEB_TOOLS",
    "ToolUnavailableError",
    "WebHit",
    "WebScholarTool",
    "WebSearchTool",
    "WebVisitTool",
    "build_web_tools",
    "executor_fetch",
]
