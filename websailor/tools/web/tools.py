"""The web environment's tools: the same names, schemas and observation layout as the local
ones, backed by providers through the :class:`~websailor.tools.executor.ToolExecutor`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import bm25s

from websailor.corpus.index import BM25Index
from websailor.corpus.store import Document
from websailor.corpus.text import truncate
from websailor.errors import WebsailorError
from websailor.tools.base import Tool
from websailor.tools.cache import ResultCache
from websailor.tools.executor import Outcome, Provider, ToolExecutor
from websailor.tools.extract import extract, llm_extract
from websailor.tools.metrics import ToolMetrics
from websailor.tools.search import BLOCK_SEPARATOR, SearchTool, format_search_results
from websailor.tools.visit import MAX_ECHO_CHARS, VisitTool, format_visit
from websailor.tools.web.providers import (DirectFetch, JinaReader, RawDownload, SearxngSearch, SerperSearch,
                                           normalize_query, normalize_url)
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


def failed_block(what: str, outcome: Outcome) -> str:
    """The observation of an operation every provider failed (graceful degradation)."""
    return (f"{what} failed: the service did not answer ({outcome.failure_text()}). "
            "Try again, rephrase, or use another tool.")


class WebSearchTool(SearchTool):
    """``search`` on the web: each query through the providers in order (Serper, then the
    backup), with the executor's cache, limits, retries and failover. A query every provider
    failed gets a block saying why; if all failed, the call is an error observation."""

    tool_key = "search"

    def __init__(self, executor: ToolExecutor, providers: Sequence[Provider], max_queries: int = 10,
                 max_query_chars: int = 500) -> None:
        self.executor = executor
        self.providers = list(providers)
        self.max_queries = max_queries
        self.max_query_chars = max_query_chars

    def search_blocks(self, queries: list[str]) -> list[str]:
        outcomes = self.executor.call_many(self.tool_key, [{"q": normalize_query(q)} for q in queries], self.providers)
        if all(not o.ok for o in outcomes):
            raise ToolUnavailableError(failed_block(f"The {self.name}", outcomes[0]))
        return [self.format_hits(q, o.value) if o.ok else failed_block(f"The search for '{q}'", o)
                for q, o in zip(queries, outcomes)]

    def format_hits(self, query: str, hits: list[dict[str, Any]]) -> str:
        return format_search_results(query, [WebHit(i, h["title"], h["url"], h["snippet"]) for i, h in enumerate(hits, 1)])


class WebScholarTool(WebSearchTool):
    """``google_scholar``: academic search (Serper's scholar endpoint, or SearXNG's science
    category); hits add the publication, year and citation count."""

    name = "google_scholar"
    tool_key = "google_scholar"
    description = ("Search Google Scholar for academic publications. Give one or more queries in the array "
                   "'query'; each returns its best results (title, URL, publication, year, citations, snippet).")

    def format_hits(self, query: str, hits: list[dict[str, Any]]) -> str:
        if not hits:
            return f"No results found for '{query}'. Try a shorter or more general query."
        lines = []
        for i, h in enumerate(hits, 1):
            meta = ", ".join(x for x in (h.get("publication"), h.get("year")) if x)
            cited = f" Cited by {h['cited_by']}." if h.get("cited_by") is not None else ""
            lines.append(f"{i}. [{h['title']}]({h['url']})\n{meta + '.' if meta else ''}{cited}\n{h['snippet']}")
        return f"A Google Scholar search for '{query}' found {len(hits)} results:\n\n## Scholar Results\n" + "\n\n".join(lines)


class WebVisitTool(VisitTool):
    """``visit`` on the web: the page through the reader providers (Jina, then a direct
    fetch), then evidence and summary for the goal: the LLM extractor when a summary model is
    given (retried on a shrunk page when its output is empty or unparsable), else the
    goal-ranked passage extractor."""

    def __init__(self, executor: ToolExecutor, providers: Sequence[Provider], summary_model: Any = None,
                 max_urls: int = 5, max_evidence_chars: int = 4000) -> None:
        self.executor = executor
        self.providers = list(providers)
        self.summary_model = summary_model
        self.max_urls = max_urls
        self.max_evidence_chars = max_evidence_chars
        self.index = BM25Index(bm25s.BM25())  # only its analyzer ranks a page's passages

    def visit_one(self, url: str, goal: str) -> str:
        try:
            clean = normalize_url(url)
        except ValueError as e:
            return f"The URL {truncate(url, MAX_ECHO_CHARS)} cannot be visited: {str(e).split(':')[0]}. Give a full http(s) URL."
        outcome = self.executor.call("visit", {"url": clean}, self.providers)
        if not outcome.ok:
            return failed_block(f"Reading {truncate(url, MAX_ECHO_CHARS)}", outcome)
        page = outcome.value
        doc = Document(id=0, title=page["title"] or clean, url=page["url"], text=page["text"])
        found = llm_extract(self.summary_model, doc, goal) if self.summary_model is not None else None
        if found is None:
            found = extract(doc, goal, self.index, self.max_evidence_chars)
        text = format_visit(url, goal, found)
        if page.get("truncated"):
            text += "(The page was longer than the size limit; only its beginning was read.)\n"
        return text


def build_web_tools(settings: WebSettings, summary_model: Any = None, metrics: ToolMetrics | None = None,
                    python: bool = True, parse_files: bool = True) -> tuple[dict[str, Tool], ToolExecutor]:
    """The web environment's tools and the executor they share (close it when done).

    Tools: ``search`` (Serper, then SearXNG), ``visit`` (Jina Reader, then direct fetch),
    ``google_scholar`` (Serper scholar, then SearXNG science), and, unless turned off,
    ``PythonInterpreter`` (sandboxed) and ``parse_file`` (URLs fetched through the executor).

    Raises:
        ConfigError: no search provider configured (names ``SERPER_API_KEY`` and
            ``SEARXNG_BASE_URL``), bad policies, an unusable cache file, or no sandbox for
            the Python tool.
    """
    settings.require_search()
    names = ("search", "google_scholar", "visit", "parse_file")
    cache = ResultCache(settings.resolved_cache_path()) if settings.cache else None
    executor = ToolExecutor({n: settings.policy(n) for n in names}, cache=cache, metrics=metrics)
    key = settings.serper_api_key.get_secret_value() if settings.serper_api_key else None
    search: list[Provider] = []
    scholar: list[Provider] = []
    if key:
        search.append(SerperSearch(key, settings.serper_base_url))
        scholar.append(SerperSearch(key, settings.serper_base_url, endpoint="scholar"))
    if settings.searxng_base_url:
        search.append(SearxngSearch(settings.searxng_base_url))
        scholar.append(SearxngSearch(settings.searxng_base_url, category="science"))
    readers: list[Provider] = []
    if settings.use_jina:
        jina_key = settings.jina_api_key.get_secret_value() if settings.jina_api_key else None
        readers.append(JinaReader(settings.jina_base_url, jina_key))
    if settings.direct_fetch:
        readers.append(DirectFetch())
    if not readers:
        from websailor.errors import ConfigError

        raise ConfigError("web settings: use_jina and direct_fetch are both off, so visit has no way to read pages")
    tools: list[Tool] = [WebSearchTool(executor, search), WebVisitTool(executor, readers, summary_model),
                         WebScholarTool(executor, scholar)]
    if python:
        from websailor.tools.python_tool import PythonInterpreterTool

        tools.append(PythonInterpreterTool())
    if parse_files:
        from websailor.tools.parse_file import ParseFileTool

        tools.append(ParseFileTool(files_root=None, fetch=executor_fetch(executor)))
    return {t.name: t for t in tools}, executor


def executor_fetch(executor: ToolExecutor) -> Any:
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
        outcome = executor.call("parse_file", {"url": clean}, [RawDownload()])
        if not outcome.ok:
            raise ToolUnavailableError(failed_block(f"Downloading {truncate(url, MAX_ECHO_CHARS)}", outcome))
        return outcome.value

    return fetch


__all__ = ["BLOCK_SEPARATOR", "ToolUnavailableError", "WebHit", "WebScholarTool", "WebSearchTool", "WebVisitTool",
           "build_web_tools", "executor_fetch"]
