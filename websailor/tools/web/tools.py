"""The web environment's tools: the same names, schemas and observation layout as the local
ones, backed by providers through the :class:`~websailor.tools.web.executor.ToolExecutor`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import bm25s

from websailor.corpus.index import BM25Index
from websailor.corpus.store import Document
from websailor.errors import WebsailorError
from websailor.text import truncate
from websailor.tools.base import Tool, ToolResult
from websailor.tools.extract import EVIDENCE_CHARS, extract_for_goal
from websailor.tools.metrics import ToolMetrics
from websailor.tools.search import BLOCK_SEPARATOR, BaseSearchTool, format_search_results, search_description
from websailor.tools.visit import MAX_ECHO_CHARS, BaseVisitTool, format_visit
from websailor.tools.web.cache import ResultCache
from websailor.tools.web.executor import Provider, ToolExecutor
from websailor.tools.web.failures import CANCELLED, Outcome
from websailor.tools.web.providers import (
    DirectFetch,
    JinaReader,
    RawDownload,
    SearxngSearch,
    SerperSearch,
    clean_markdown,
    normalize_query,
    normalize_url,
    query_locale,
)
from websailor.tools.web.settings import WebSettings


class ToolUnavailableError(WebsailorError):
    """Every provider of a tool failed for every item of the call (the observation says why).

    Attributes:
        env_failures: the environment failure kind of each item the environment failed
            (:attr:`Outcome.env_failure`); empty when the items failed for the target's or
            the model's reasons (a dead link, a refused URL).
    """

    def __init__(self, message: str, env_failures: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.env_failures = tuple(env_failures)


@dataclass(frozen=True)
class WebHit:
    """One web search result, in the fields :func:`format_search_results` lays out (made by
    :func:`web_hit`, which puts a hit's date and source at the head of its snippet)."""

    rank: int
    title: str
    url: str
    snippet: str


def web_hit(rank: int, hit: dict[str, Any], snippet: str) -> WebHit:
    """A provider's hit as a :class:`WebHit`: ``Date published:`` and ``Source:`` lines (the
    released Tongyi DeepResearch search tool's) go under the title line, before the snippet,
    when the provider gave them."""
    lines = [f"Date published: {hit['date']}"] if hit.get("date") else []
    lines += [f"Source: {hit['source']}"] if hit.get("source") else []
    return WebHit(rank, hit["title"], hit["url"], "\n".join([*lines, snippet]))


def failed_block(what: str, outcome: Outcome, hint: str) -> str:
    """The observation of an operation every provider failed (graceful degradation): what
    failed, each provider's reason, and what the agent can do instead."""
    return f"{what} failed ({outcome.failure_text()}). {hint}"


#: The environment failures of the tool call running in this thread (set by the web tools'
#: ``forward``; each operation whose outcome is an environment failure adds its kind).
_CALL_ENV_FAILURES: ContextVar[list[str] | None] = ContextVar("web_call_env_failures", default=None)


@contextmanager
def collect_env_failures() -> Iterator[list[str]]:
    """A list that gathers the environment failure kinds of this thread's operations while the
    block runs (nested blocks gather their own)."""
    kinds: list[str] = []
    token = _CALL_ENV_FAILURES.set(kinds)
    try:
        yield kinds
    finally:
        _CALL_ENV_FAILURES.reset(token)


def note_env_failures(outcomes: Sequence[Outcome]) -> list[str]:
    """The environment failure kinds of ``outcomes`` (one per env-failed operation), also added
    to the current :func:`collect_env_failures` list."""
    kinds = [kind for o in outcomes if (kind := o.env_failure) is not None]
    sink = _CALL_ENV_FAILURES.get()
    if sink is not None:
        sink.extend(kinds)
    return kinds


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
        """The cache key of ``query``: its normalized text, the number of results asked for
        when it is not the paper's 10, and the Chinese locale for a query with Chinese
        characters (Serper is asked as from China, :func:`query_locale`). Keys of the default
        request (10 results, English locale) are those written before the locale was sent:
        those entries were asked without a locale, which Serper answers as ``gl=us``,
        ``hl=en`` (its playground's defaults; not confirmed from its documentation), so they
        are kept; a Chinese query's older entries are not reused."""
        key: dict[str, Any] = {"q": normalize_query(query)}
        if self.top_k != 10:
            key["num"] = self.top_k
        if self.tool_key == "search" and query_locale(query) != "en":
            key["locale"] = query_locale(query)
        return key

    def snippet(self, text: str) -> str:
        """A provider's snippet, cut to :attr:`snippet_chars` when set."""
        return truncate(text, self.snippet_chars) if self.snippet_chars is not None else text

    def forward(self, query: list[str]) -> ToolResult:
        """The observation of :meth:`BaseSearchTool.forward`, with one environment failure
        kind per query the environment failed (:attr:`ToolResult.env_failures`); when every
        query failed, :class:`ToolUnavailableError` carries them."""
        with collect_env_failures() as kinds:
            text = super().forward(query)
        return ToolResult(text, env_failures=tuple(kinds))

    def search_blocks(self, queries: list[str]) -> list[str]:
        outcomes = self.executor.call_many(
            self.tool_key,
            [{"q": q} for q in queries],
            self.providers,
            keys=[self.cache_key(q) for q in queries],
        )
        kinds = note_env_failures(outcomes)
        if all(not o.ok for o in outcomes):
            what = f"The {self.label}" + (
                f" for '{queries[0]}'" if len(queries) == 1 else f" for all {len(queries)} queries"
            )
            raise ToolUnavailableError(failed_block(what, outcomes[0], self.hint), kinds)
        return [
            self.format_hits(q, o.value) if o.ok else failed_block(f"The {self.label} for '{q}'", o, self.hint)
            for q, o in zip(queries, outcomes)
        ]

    def format_hits(self, query: str, hits: list[dict[str, Any]]) -> str:
        return format_search_results(
            query,
            [web_hit(i, h, self.snippet(h["snippet"])) for i, h in enumerate(hits[: self.top_k], 1)],
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

    def forward(self, url: str | list[str], goal: str) -> ToolResult:
        """The observation of :meth:`BaseVisitTool.forward`, with one environment failure kind
        per page the environment kept from being read (:attr:`ToolResult.env_failures`; a dead
        link is none)."""
        with collect_env_failures() as kinds:
            text = super().forward(url, goal)
        return ToolResult(text, env_failures=tuple(kinds))

    def visit_one(self, url: str, goal: str) -> str:
        try:
            clean = normalize_url(url)
        except ValueError as e:
            return f"The URL {truncate(url, MAX_ECHO_CHARS)} cannot be visited: {str(e).split(':')[0]}. Give a full http(s) URL."
        # pages read with private addresses allowed stay out of the cache of runs without
        key = {"url": clean, "private": True} if self.allow_private else None
        outcome = self.executor.call("visit", {"url": clean}, self.providers, key=key)
        note_env_failures([outcome])
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
        ToolUnavailableError: the download failed after retries (the message says why). A
            download is per-target, so its failure is the file's, not the environment's
            (no ``env_failures``), unless the executor was closed (``cancelled``).
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
                ),
                (CANCELLED,) if outcome.env_failure == CANCELLED else (),
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
    "collect_env_failures",
    "executor_fetch",
    "web_hit",
]
