"""FACT: does each cited page support the statement that cites it? (DeepResearch Bench, Du et
al., arXiv 2506.11763, section 3.2.)

The method, step by step:

1. **Pairs.** A report's statement-URL pairs come from :func:`websailor.reports.citations.parse_report`
   (:meth:`~websailor.reports.citations.ParsedReport.pairs`), deduplicated once more by page: one
   statement citing two URLs of one page (``en.wikipedia.org/wiki/Nile`` and
   ``en.m.wikipedia.org/wiki/Nile#Course``, same :func:`~websailor.reports.citations.url_key`)
   is one pair. A reference with no usable URL (``no_url``, ``malformed_url``, ``private_url``)
   gives no pair; it is listed in the task's ``unusable`` with its problem. A private URL is never
   fetched.
2. **Pages.** Each cited page is read through our own tool layer: the environment's ``visit``
   tool with the statement as its goal (:func:`read_cited_page`), so that an offline run reads
   the local corpus and a web run goes through the execution layer, its retries and its result
   cache. A page that cannot be read is ``unreachable`` and is not judged.
3. **Judge.** A chat model at temperature 0 (:class:`~websailor.eval.fact_judge.FactJudge`) says whether the page's
   evidence supports the statement (all of its facts or a part of them, figures allowing
   rounding): ``supported``, ``unsupported``, or ``no_content`` for a page with nothing to judge
   (an error page, a login wall), which makes the pair ``unreachable`` too. Endpoint errors and
   unparsable replies are retried; after ``max_attempts`` the pair is ``unjudged``. Verdicts are
   cached in SQLite, so a rerun costs no judge call.
4. **Figures.** Citation accuracy = supported / (supported + unsupported) pairs of a task;
   effective citations = the task's supported pairs (:class:`FactResult`). :func:`fact_summary`
   averages both over tasks.

**What counts.** ``unreachable`` and ``unjudged`` pairs count in neither the numerator nor the
denominator of citation accuracy, as in the benchmark's released scripts
(``utils/scrape.py``, ``utils/validate.py``, ``utils/stat.py`` of
github.com/Ayanami0730/deep_research_bench): a page whose scrape failed is sent to the judge as
"scrape failed: ..." and its judge is told to answer ``unknown`` for a page with no valid
content; ``unknown`` verdicts and citations whose validation failed (three unparsable replies)
are skipped by the statistics. The benchmark's ``valid_rate`` pools pairs over all tasks and its
effective citations average over the tasks that have citations; :func:`fact_summary` gives those
two figures too, next to the mean of the per-task accuracies.

**Differences from the benchmark.** The benchmark extracts statements with an LLM and dedupes
them with an LLM; here the report's own markers give them (:mod:`websailor.reports.citations`)
and duplicates are exact (same statement, same page). The benchmark's judge reads the whole page
(Jina Reader's title, description and text) and judges every statement of one URL in one call;
here the judge reads what ``visit`` returns for the statement (the page's passages ranked for
it, up to the environment's evidence budget, ``--evidence-chars``, then a summary), one pair a
call.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from websailor.errors import ServiceDown
from websailor.eval.fact_judge import MAX_REASON_CHARS, FactJudge
from websailor.log import get_logger
from websailor.reports.citations import ParsedReport, parse_report, url_key
from websailor.text import truncate
from websailor.tools.base import Tool, ToolResult
from websailor.tools.registry import execute_tool
from websailor.tools.visit import Extraction, format_visit

logger = get_logger(__name__)

#: a pair's verdict, in the order counts are listed
VERDICTS = ("supported", "unsupported", "unreachable", "unjudged")
#: the reference problems that leave a reference without a usable URL (no pair, listed as unusable)
UNUSABLE_PROBLEMS = ("no_url", "malformed_url", "private_url")
#: longest page text the judge is shown (characters); a web page's LLM summary may be long
MAX_PAGE_CHARS = 12000
# -- pairs ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UnusableReference:
    """A reference that gives no pair: ``problem`` is one of :data:`UNUSABLE_PROBLEMS`;
    ``cited``: some inline marker uses it."""

    n: int
    url: str | None
    title: str
    problem: str
    cited: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> UnusableReference:
        return cls(int(d["n"]), d.get("url"), str(d.get("title", "")), str(d["problem"]), bool(d.get("cited", False)))


def fact_pairs(parsed: ParsedReport) -> tuple[list[tuple[str, str, int]], list[UnusableReference]]:
    """The pairs FACT checks and the references it cannot use (DeepResearch Bench, section 3.2:
    extraction and deduplication).

    Args:
        parsed: a report read by :func:`~websailor.reports.citations.parse_report`.

    Returns:
        ``(pairs, unusable)``: ``(statement, url, n)`` in report order, each statement and page
        (:func:`~websailor.reports.citations.url_key`) once, the first reference number kept;
        and each reference whose problem is one of :data:`UNUSABLE_PROBLEMS`, in list order.
    """
    seen: set[tuple[str, str]] = set()
    pairs = []
    for statement, url, n in parsed.pairs():
        key = (statement, url_key(url))
        if key not in seen:
            seen.add(key)
            pairs.append((statement, url, n))
    unusable = [
        UnusableReference(r.n, r.url, r.title, r.problem, r.cited)
        for r in parsed.references
        if r.problem in UNUSABLE_PROBLEMS
    ]
    return pairs, unusable


# -- pages ---------------------------------------------------------------------------------------


def _visit_layout() -> tuple[str, str, str]:
    """The fixed parts of :func:`~websailor.tools.visit.format_visit`'s layout (the observation
    of a page that was read, in every back end): what comes before the URL, between the URL and
    the goal, and between the goal and the evidence. Read from the function itself, so that a
    change of the layout changes them too."""
    probe = format_visit("\x00U", "\x00G", Extraction(["\x00E"], "\x00S"))
    before_url, rest = probe.split("\x00U", 1)
    url_to_goal, rest = rest.split("\x00G", 1)
    goal_to_evidence = rest.split("\x00E", 1)[0]
    return before_url, url_to_goal, goal_to_evidence


_BEFORE_URL, _URL_TO_GOAL, _GOAL_TO_EVIDENCE = _visit_layout()


@dataclass(frozen=True)
class PageRead:
    """What ``visit`` gave for one cited page: ``text`` (the evidence and summary, without the
    header that echoes the URL and the goal) when the page was read, else ``None`` and
    ``reason``; ``env_failures``: the environment failure kinds of the call
    (:attr:`~websailor.tools.base.ToolResult.env_failures`)."""

    text: str | None
    reason: str | None = None
    env_failures: tuple[str, ...] = ()


def page_from_result(result: ToolResult) -> PageRead:
    """Whether a ``visit`` call on one URL read its page, from the tool's result.

    A page was read when the call has no ``error``, no ``env_failures``, and an observation in
    the layout of :func:`~websailor.tools.visit.format_visit`, the one layout every back end
    (local corpus, web readers, a tool server's) gives a page it read. Every other observation is
    a page not read: the local "could not be found" text
    (:func:`websailor.tools.local.visit.page_not_found`), the web's failed read
    (:func:`websailor.tools.web.tools.failed_block`), a refused URL. The reason is the call's
    error, or the observation's first line, with the environment failure kinds when there are
    some.
    """
    obs = result.observation or ""
    first = truncate(" ".join(next((ln for ln in obs.splitlines() if ln.strip()), "").split()), MAX_REASON_CHARS)
    if result.error is not None:
        return PageRead(None, truncate(f"{result.kind}: {result.error}", MAX_REASON_CHARS), result.env_failures)
    if result.env_failures:
        kinds = ", ".join(dict.fromkeys(result.env_failures))
        return PageRead(None, f"environment failure ({kinds}): {first}", result.env_failures)
    at = obs.find(_GOAL_TO_EVIDENCE)
    head = obs[:at] if at >= 0 else ""
    lines = head.split("\n")
    while lines and lines[0].startswith("Note: "):  # a tool's note before the page (ignored arguments)
        lines.pop(0)
    header = "\n".join(lines)
    if at < 0 or not header.startswith(_BEFORE_URL) or _URL_TO_GOAL not in header or "\n" in header:
        return PageRead(None, first or "the page could not be read")
    return PageRead(obs[at:].strip())


def read_cited_page(tools: Mapping[str, Tool], url: str, statement: str) -> PageRead:
    """Read one cited page with the environment's ``visit`` tool, the statement as its goal.

    Args:
        tools: the run's tools (a :class:`~websailor.tools.environment.ToolEnvironment`'s
            ``tools``); ``visit`` is called through :func:`~websailor.tools.registry.execute_tool`.
        url: the URL as the report wrote it (one without a scheme is read as ``https://``).
        statement: what the page is read for.

    Returns:
        A :class:`PageRead` (:func:`page_from_result`). A tool that raises (a bug) gives a page
        not read, with the exception as the reason; nothing is raised.
    """
    target = url.strip()
    if "://" not in target:
        target = "https://" + target.lstrip("/")
    try:
        result = execute_tool(tools, "visit", {"url": target, "goal": statement})
    except ServiceDown:  # the tool server was declared down: the scoring stops
        raise
    except Exception as e:  # a tool bug: the pair is unreachable, the run goes on
        logger.warning("visit raised on %s: %r", target, e)
        return PageRead(None, truncate(f"visit raised {type(e).__name__}: {e}", MAX_REASON_CHARS))
    return page_from_result(result)


# -- a task's result -----------------------------------------------------------------------------


@dataclass
class PairCheck:
    """One statement-URL pair and what FACT found: ``verdict`` one of :data:`VERDICTS`,
    ``reason`` the judge's (or why the page was not read, or why the judge gave no verdict);
    ``cached``: the verdict came from the cache."""

    statement: str
    url: str
    n: int
    verdict: str
    reason: str = ""
    cached: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PairCheck:
        """Raises: ValueError for a verdict not in :data:`VERDICTS`; KeyError for a missing field."""
        if d["verdict"] not in VERDICTS:
            raise ValueError(f"unknown FACT verdict {d['verdict']!r}; valid: {', '.join(VERDICTS)}")
        return cls(str(d["statement"]), str(d["url"]), int(d["n"]), d["verdict"], str(d.get("reason", "")),
                   bool(d.get("cached", False)))  # fmt: skip


@dataclass
class FactResult:
    """FACT's result for one task's report (DeepResearch Bench, section 3.2).

    Attributes:
        task_id: the task's id.
        pairs: each checked pair, in report order.
        unusable: references that gave no pair (:data:`UNUSABLE_PROBLEMS`).
        problems: what kept the report from being checked in full: the report's own
            (``empty``, ``no_citations``, ``no_references``), ``dangling_markers`` (cited numbers
            the reference list lacks), ``no_usable_pairs`` (citations, but no reference with a
            usable URL), ``nothing_judged`` (pairs, none of them judged).
        judge: the judge model's name.
        judge_calls: requests sent to the judge model (retries included; 0 for cached verdicts).
        cache_hits: verdicts read from the cache.
    """

    task_id: str
    pairs: list[PairCheck] = field(default_factory=list)
    unusable: list[UnusableReference] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    judge: str = ""
    judge_calls: int = 0
    cache_hits: int = 0

    def counts(self) -> dict[str, int]:
        """Pairs by verdict (every key of :data:`VERDICTS`), all ``pairs`` and ``unusable`` references."""
        out = {v: sum(p.verdict == v for p in self.pairs) for v in VERDICTS}
        return {"pairs": len(self.pairs), **out, "unusable": len(self.unusable)}

    @property
    def citation_accuracy(self) -> float | None:
        """supported / (supported + unsupported), a fraction 0..1; ``None`` when no pair was
        judged (:attr:`accuracy_note` says why). Unreachable and unjudged pairs are in neither
        term."""
        c = self.counts()
        judged = c["supported"] + c["unsupported"]
        return c["supported"] / judged if judged else None

    @property
    def accuracy_note(self) -> str | None:
        """Why :attr:`citation_accuracy` is ``None`` (``None`` when it is not)."""
        if self.citation_accuracy is not None:
            return None
        if "empty" in self.problems:
            return "the report is empty"
        if "no_citations" in self.problems:
            return "the report cites nothing"
        if not self.pairs:
            return "no statement-URL pair: no cited reference has a usable URL"
        c = self.counts()
        return f"no pair was judged ({c['unreachable']} unreachable, {c['unjudged']} unjudged)"

    @property
    def effective_citations(self) -> int:
        """The task's supported pairs."""
        return sum(p.verdict == "supported" for p in self.pairs)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: the fields, then ``counts``, ``citation_accuracy`` (``None`` with
        ``accuracy_note``) and ``effective_citations``."""
        return {
            "task_id": self.task_id,
            "pairs": [p.to_dict() for p in self.pairs],
            "unusable": [u.to_dict() for u in self.unusable],
            "problems": list(self.problems),
            "counts": self.counts(),
            "citation_accuracy": self.citation_accuracy,
            "accuracy_note": self.accuracy_note,
            "effective_citations": self.effective_citations,
            "judge": self.judge,
            "judge_calls": self.judge_calls,
            "cache_hits": self.cache_hits,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FactResult:
        """The result :meth:`to_dict` wrote (the derived figures are recomputed, not read).

        Raises:
            ValueError, KeyError: a pair or reference that is not in that form.
        """
        return cls(
            task_id=str(d["task_id"]),
            pairs=[PairCheck.from_dict(p) for p in d.get("pairs", [])],
            unusable=[UnusableReference.from_dict(u) for u in d.get("unusable", [])],
            problems=[str(p) for p in d.get("problems", [])],
            judge=str(d.get("judge", "")),
            judge_calls=int(d.get("judge_calls", 0)),
            cache_hits=int(d.get("cache_hits", 0)),
        )


@dataclass(frozen=True)
class _Checked:
    pair: PairCheck
    calls: int


def _check_pair(
    tools: Mapping[str, Tool], judge: FactJudge, statement: str, url: str, n: int, max_page_chars: int
) -> _Checked:
    page = read_cited_page(tools, url, statement)
    if page.text is None:
        return _Checked(PairCheck(statement, url, n, "unreachable", page.reason or ""), 0)
    text = page.text if len(page.text) <= max_page_chars else page.text[:max_page_chars] + "\n[... cut]"
    v = judge.judge(statement, url, text)
    if v.verdict is None:
        return _Checked(PairCheck(statement, url, n, "unjudged", v.error or ""), v.calls)
    if v.verdict == "no_content":
        reason = truncate(f"the judge found nothing to judge on the page: {v.reason}".rstrip(": "), MAX_REASON_CHARS)
        return _Checked(PairCheck(statement, url, n, "unreachable", reason, v.cached), v.calls)
    return _Checked(PairCheck(statement, url, n, v.verdict, v.reason, v.cached), v.calls)


def check_report(
    report: str | None,
    tools: Any,
    judge: FactJudge,
    *,
    task_id: str = "",
    visited: Iterable[str] = (),
    concurrency: int = 4,
    max_page_chars: int = MAX_PAGE_CHARS,
) -> FactResult:
    """FACT on one report (DeepResearch Bench, section 3.2): its pairs (:func:`fact_pairs`),
    each page read with ``visit`` (:func:`read_cited_page`) and judged (:class:`~websailor.eval.fact_judge.FactJudge`).

    Args:
        report: the report's Markdown (``None`` or blank: a result with the problem ``empty``).
        tools: a :class:`~websailor.tools.environment.ToolEnvironment` or its ``tools`` mapping;
            it must offer ``visit``.
        judge: the judge.
        task_id: recorded in the result.
        visited: the URLs the agent opened (for :func:`~websailor.reports.citations.parse_report`'s
            ``not_visited`` flag; FACT checks those pages all the same).
        concurrency: pairs read and judged at once (results keep pair order).
        max_page_chars: longest page text shown to the judge (characters; the rest is cut).

    Returns:
        A :class:`FactResult`; a report without citations gives one with no pairs, accuracy
        ``None`` and effective citations 0.

    Raises:
        ValueError: ``tools`` has no ``visit``, or ``concurrency`` or ``max_page_chars`` below 1.
    """
    tool_map: Mapping[str, Tool] = getattr(tools, "tools", tools)
    if not isinstance(tool_map, Mapping) or "visit" not in tool_map:
        raise ValueError("FACT reads cited pages with the environment's visit tool, and these tools have none")
    if concurrency < 1 or max_page_chars < 1:
        raise ValueError("concurrency and max_page_chars must be at least 1")
    parsed = parse_report(report, visited)
    pairs, unusable = fact_pairs(parsed)
    result = FactResult(task_id, unusable=unusable, problems=list(parsed.problems), judge=judge.name)
    if parsed.dangling:
        result.problems.append("dangling_markers")
    if parsed.statements and not pairs:
        result.problems.append("no_usable_pairs")
    if not pairs:
        return result
    pool = ThreadPoolExecutor(max_workers=min(concurrency, len(pairs)), thread_name_prefix="fact")
    finished_cleanly = False
    try:
        checked = list(pool.map(lambda p: _check_pair(tool_map, judge, *p, max_page_chars), pairs))
        finished_cleanly = True
    finally:  # on an interrupt, do not wait for the pages and verdicts in flight
        pool.shutdown(wait=finished_cleanly, cancel_futures=not finished_cleanly)
    result.pairs = [c.pair for c in checked]
    result.judge_calls = sum(c.calls for c in checked)
    result.cache_hits = sum(c.pair.cached for c in checked)
    if result.citation_accuracy is None:
        result.problems.append("nothing_judged")
    return result


# -- over tasks ----------------------------------------------------------------------------------


def fact_summary(
    results: Sequence[FactResult], n_resamples: int = 1000, level: float = 0.95, seed: int = 0
) -> dict[str, Any]:
    """FACT's figures over tasks (DeepResearch Bench, section 3.2), rates as fractions 0..1.

    Keys:
        ``tasks`` (distinct task ids; a task's rollouts are averaged first), ``reports``;
        ``tasks_with_accuracy`` (tasks with a judged pair); ``citation_accuracy``: the mean of
        the per-task accuracies over those tasks, with ``citation_accuracy_ci``, its
        seeded percentile bootstrap interval (:func:`websailor.eval.metrics.bootstrap_ci`,
        resampling tasks; ``None`` without such tasks); ``pooled_citation_accuracy``: supported
        / judged pairs over all tasks (the benchmark's ``valid_rate``); ``effective_citations``:
        supported pairs per task, over all tasks (a report without citations counts 0);
        ``effective_citations_cited_tasks``: the same over the tasks with at least one pair
        (the benchmark's average, which skips reports without citations); ``pairs``: pairs by
        verdict and in all; ``unusable`` references; ``judge_calls``; ``cache_hits``;
        ``problems``: tasks per problem.

    An empty ``results`` gives zero counts and ``None`` figures; nothing is raised.
    """
    from websailor.eval.metrics import bootstrap_ci

    by_task: dict[str, list[FactResult]] = {}
    for r in results:  # a task's rollouts count once, averaged, as RACE's summary does
        by_task.setdefault(r.task_id, []).append(r)
    accs = []
    effective, effective_cited = [], []
    for rs in by_task.values():
        task_accs = [a for r in rs if (a := r.citation_accuracy) is not None]
        if task_accs:
            accs.append(sum(task_accs) / len(task_accs))
        effective.append(sum(r.effective_citations for r in rs) / len(rs))
        cited = [r for r in rs if r.pairs]
        if cited:
            effective_cited.append(sum(r.effective_citations for r in cited) / len(cited))
    counts = [r.counts() for r in results]
    by_verdict = {v: sum(c[v] for c in counts) for v in VERDICTS}
    judged = by_verdict["supported"] + by_verdict["unsupported"]
    ci = None
    if accs:
        # one "run" per task: the interval of the mean of per-task accuracies (fractions, not 0/1)
        lo, hi = bootstrap_ci([[a] for a in accs], n_resamples=n_resamples, level=level, seed=seed)
        ci = None if math.isnan(lo) else [lo, hi]
    problems: dict[str, int] = {}
    for r in results:
        for p in dict.fromkeys(r.problems):
            problems[p] = problems.get(p, 0) + 1
    return {
        "tasks": len(by_task),
        "reports": len(results),
        "tasks_with_accuracy": len(accs),
        "citation_accuracy": sum(accs) / len(accs) if accs else None,
        "citation_accuracy_ci": ci,
        "pooled_citation_accuracy": by_verdict["supported"] / judged if judged else None,
        "effective_citations": sum(effective) / len(effective) if effective else None,
        "effective_citations_cited_tasks": sum(effective_cited) / len(effective_cited) if effective_cited else None,
        "pairs": {**by_verdict, "total": sum(c["pairs"] for c in counts)},
        "unusable": sum(c["unusable"] for c in counts),
        "judge_calls": sum(r.judge_calls for r in results),
        "cache_hits": sum(r.cache_hits for r in results),
        "problems": problems,
    }
