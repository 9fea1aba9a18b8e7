"""FACT (DeepResearch Bench, section 3.2) over the local environment: a report whose references
point at real pages of the embedded corpus, a page that does not exist, a private URL and a
malformed one; the judge is a scripted OpenAI-compatible server that calls a statement supported
when its keyword is in the page text it was sent, so every figure is computed by hand."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fakes import FakeOpenAIServer

from websailor.corpus.urls import title_to_url
from websailor.eval.fact import (
    FactResult,
    PairCheck,
    UnusableReference,
    check_report,
    fact_summary,
    page_from_result,
)
from websailor.eval.fact_judge import FactJudge, parse_fact_verdict
from websailor.models import load_model
from websailor.tools.base import Tool, ToolResult
from websailor.tools.environment import EnvSpec, open_environment

NILE, EVEREST, EINSTEIN = (title_to_url(t) for t in ("Nile", "Mount Everest", "Albert Einstein"))
MISSING = title_to_url("Zyxqor Lost City of Qwerty")
PRIVATE = "http://127.0.0.1:8000/internal/metrics"
#: each statement of the report carries one of these; the judge says "supported" when it is on the page
KEYWORDS = ("7,088", "Mediterranean", "8,848.86", "9,999", "relativity", "twelve gates", "survey", "broken", "atlas")

REPORT = f"""# Rivers, mountains and physicists

## Facts

The Nile is about 7,088 kilometers long [1][7]. The Nile empties into the Mediterranean Sea [1, 2].
Mount Everest stands 8,848.86 m above sea level [2].
- The Nile is 9,999 kilometers long [1].
- Albert Einstein developed the theory of relativity [3].

The lost city had twelve gates [4]. Internal metrics confirm the survey [5].
A broken link is cited here [6]. A printed atlas gives the same figure [8].

## References

[1] Nile {NILE}
[2] Mount Everest {EVEREST}
[3] Albert Einstein {EINSTEIN}
[4] A lost city {MISSING}
[5] Internal dashboard {PRIVATE}
[6] Broken link htp://en.wikipedia.org/wiki/Nile
[7] Nile (mobile) https://en.m.wikipedia.org/wiki/Nile#Course
[8] A printed atlas, page 12
"""

#: the pairs of REPORT, in order, with their verdicts: [7] is [1]'s page again (one pair), [4] is
#: not in the corpus, [5] [6] [8] give no pair
EXPECTED = [
    ("The Nile is about 7,088 kilometers long.", NILE, 1, "supported"),
    ("The Nile empties into the Mediterranean Sea.", NILE, 1, "supported"),
    ("The Nile empties into the Mediterranean Sea.", EVEREST, 2, "unsupported"),
    ("Mount Everest stands 8,848.86 m above sea level.", EVEREST, 2, "supported"),
    ("The Nile is 9,999 kilometers long.", NILE, 1, "unsupported"),
    ("Albert Einstein developed the theory of relativity.", EINSTEIN, 3, "supported"),
    ("The lost city had twelve gates.", MISSING, 4, "unreachable"),
]


def _section(prompt: str, tag: str) -> str:
    m = re.search(rf"<{tag}[^>]*>\n(.*?)\n</{tag}>", prompt, re.S)
    assert m, f"no <{tag}> in the judge's prompt"
    return m.group(1)


def keyword_judge(messages) -> str:
    """Supported when the statement's keyword is in the page text the judge was sent."""
    prompt = messages[-1]["content"]
    statement, page = _section(prompt, "statement"), _section(prompt, "page")
    key = next(k for k in KEYWORDS if k in statement)
    ok = key in page
    return json.dumps(
        {"verdict": "supported" if ok else "unsupported", "reason": f"{key!r} {'is' if ok else 'is not'} on the page"}
    )


class SpyTool(Tool):
    """``inner`` (the environment's visit), recording the URLs it is asked to read."""

    def __init__(self, inner: Tool) -> None:
        self.inner, self.urls = inner, []
        self.name, self.description, self.parameters = inner.name, inner.description, inner.parameters

    def execute(self, arguments=None) -> ToolResult:
        self.urls.append(arguments["url"])
        return self.inner.execute(arguments)

    def forward(self, **kwargs):
        return self.inner.forward(**kwargs)


@pytest.fixture(scope="module")
def env(vital_dir: Path):
    with open_environment(EnvSpec(corpus=vital_dir, tools=("visit",))) as environment:
        yield environment


def _judge(srv: FakeOpenAIServer, cache: Path | None, attempts: int = 3) -> FactJudge:
    return FactJudge(load_model(f"openai:j@{srv.url}", max_attempts=1, backoff_s=0.01), cache, max_attempts=attempts)


def test_fact_checks_a_reports_pairs_against_the_local_corpus(env, tmp_path: Path):
    spy = SpyTool(env.tools["visit"])
    cache = tmp_path / "fact.sqlite"
    with FakeOpenAIServer(keyword_judge) as srv:
        with _judge(srv, cache) as judge:
            first = check_report(REPORT, {"visit": spy}, judge, task_id="t1", concurrency=3)
        judged = len(srv.bodies)
        with _judge(srv, cache) as judge:  # a rerun with the same cache
            second = check_report(REPORT, env, judge, task_id="t1")
        assert len(srv.bodies) == judged  # no new judge request

    assert [(p.statement, p.url, p.n, p.verdict) for p in first.pairs] == EXPECTED
    # 4 supported, 2 unsupported; the unreachable pair is in neither term
    assert first.citation_accuracy == pytest.approx(4 / 6) and first.effective_citations == 4
    assert first.counts() == {
        "pairs": 7,
        "supported": 4,
        "unsupported": 2,
        "unreachable": 1,
        "unjudged": 0,
        "unusable": 3,
    }
    assert judged == first.judge_calls == 6 and first.cache_hits == 0
    assert "could not be found" in first.pairs[6].reason and not first.pairs[6].cached
    assert first.pairs[0].reason == "'7,088' is on the page"
    # the judge saw the page's evidence, not the visit header that echoes the statement
    assert all("read for the goal" not in b["messages"][-1]["content"] for b in srv.bodies)
    assert all(b["temperature"] == 0.0 for b in srv.bodies)
    # references without a usable URL: listed with their problem; the private page never read
    assert [(u.n, u.problem, u.cited) for u in first.unusable] == [
        (5, "private_url", True),
        (6, "malformed_url", True),
        (8, "no_url", True),
    ]
    assert not any("127.0.0.1" in u for u in spy.urls) and len(spy.urls) == 7
    assert first.problems == [] and first.accuracy_note is None

    # the rerun: every verdict from the cache, the same figures
    assert [(p.statement, p.url, p.verdict, p.reason) for p in second.pairs] == [
        (p.statement, p.url, p.verdict, p.reason) for p in first.pairs
    ]
    assert second.judge_calls == 0 and second.cache_hits == 6
    assert [p.cached for p in second.pairs] == [True] * 6 + [False]
    assert second.citation_accuracy == first.citation_accuracy

    # the JSON form, and back
    d = json.loads(json.dumps(first.to_dict()))
    assert d["counts"]["supported"] == 4 and d["effective_citations"] == 4 and d["judge_calls"] == 6
    assert d["pairs"][2] == {"statement": EXPECTED[2][0], "url": EVEREST, "n": 2, "verdict": "unsupported",
                             "reason": "'Mediterranean' is not on the page", "cached": False}  # fmt: skip
    assert d["unusable"][0] == {
        "n": 5,
        "url": PRIVATE,
        "title": "Internal dashboard",
        "problem": "private_url",
        "cited": True,
    }
    assert FactResult.from_dict(d).to_dict() == d


def test_a_judge_that_answers_prose_leaves_pairs_unjudged_and_endpoint_errors_are_retried(env):
    report = f"The Nile is about 7,088 kilometers long [1]. A lost city had twelve gates [2].\n\n## References\n[1] {NILE}\n[2] {MISSING}\n"
    with FakeOpenAIServer("I think the page supports it.") as srv:
        result = check_report(report, env, _judge(srv, None, attempts=2))
        assert len(srv.bodies) == 2  # one reachable pair, two tries
    assert [p.verdict for p in result.pairs] == ["unjudged", "unreachable"]
    assert "unparsable verdict" in result.pairs[0].reason and result.judge_calls == 2
    assert result.citation_accuracy is None and result.effective_citations == 0
    assert (
        result.accuracy_note == "no pair was judged (1 unreachable, 1 unjudged)" and "nothing_judged" in result.problems
    )

    with FakeOpenAIServer(keyword_judge, fail_first=1) as srv:  # HTTP 500, then a verdict
        result = check_report(report, env, _judge(srv, None, attempts=2))
    assert [p.verdict for p in result.pairs] == ["supported", "unreachable"] and result.judge_calls == 2
    assert result.citation_accuracy == 1.0


def test_a_report_without_citations_is_recorded_not_failed(env):
    with FakeOpenAIServer(keyword_judge) as srv:
        judge = _judge(srv, None)
        plain = check_report("# Rivers\n\nThe Nile is long, as everyone knows.\n", env, judge, task_id="p")
        empty = check_report("", env, judge, task_id="e")
        only_private = check_report(f"Secret figures [1].\n\n## References\n[1] {PRIVATE}\n", env, judge)
        assert srv.bodies == []
    assert plain.pairs == [] and plain.citation_accuracy is None and plain.effective_citations == 0
    assert plain.problems == ["no_citations", "no_references"] and plain.accuracy_note == "the report cites nothing"
    assert empty.problems == ["empty"] and empty.to_dict()["citation_accuracy"] is None
    assert only_private.problems == ["no_usable_pairs"] and [u.problem for u in only_private.unusable] == [
        "private_url"
    ]
    with pytest.raises(ValueError, match="visit tool"):
        check_report("x [1]", {}, judge)


def test_a_page_counts_as_read_only_in_visits_own_layout():
    from websailor.tools.visit import Extraction, format_visit

    read = format_visit("https://en.wikipedia.org/wiki/Nile", "Is the Nile long?", Extraction(["It is long."], "Long."))
    page = page_from_result(ToolResult(read))
    assert page.text is not None and page.text.startswith("Evidence in page:") and "Is the Nile long?" not in page.text
    assert page_from_result(ToolResult(read, env_failures=("timeout",))).reason.startswith(
        "environment failure (timeout)"
    )
    assert page_from_result(ToolResult("[visit] Error: down", "down", "tool_server")).reason == "tool_server: down"
    failed = page_from_result(ToolResult("Reading https://x.org/a failed (jina: HTTP 404). Try another page."))
    assert failed.text is None and failed.reason.startswith("Reading https://x.org/a failed")
    assert parse_fact_verdict(
        '<think>{"verdict": "supported"}</think>{"verdict": "Not supported", "reason": "no"}'
    ) == (
        "unsupported",
        "no",
    )
    assert parse_fact_verdict('{"verdict": "maybe"}') is None and parse_fact_verdict("It is supported.") is None


def _result(task_id: str, verdicts: list[str], problems: list[str] | None = None) -> FactResult:
    pairs = [PairCheck(f"s{i}", f"https://example.org/{i}", i + 1, v) for i, v in enumerate(verdicts)]
    return FactResult(task_id, pairs, [UnusableReference(9, None, "a book", "no_url", True)], problems or [],
                      judge_calls=len(verdicts), cache_hits=1)  # fmt: skip


def test_fact_summary_by_hand():
    a = _result("a", ["supported"] * 3 + ["unsupported"])  # 0.75, 3 effective
    b = _result("b", ["supported", "unsupported", "unreachable", "unjudged"])  # 0.5, 1 effective
    c = _result("c", [], ["no_citations", "no_references"])  # no accuracy, 0 effective
    s = fact_summary([a, b, c])
    assert s["tasks"] == 3 and s["tasks_with_accuracy"] == 2
    assert s["citation_accuracy"] == pytest.approx(0.625)
    assert s["pooled_citation_accuracy"] == pytest.approx(4 / 6)
    assert s["effective_citations"] == pytest.approx(4 / 3) and s["effective_citations_cited_tasks"] == 2
    assert s["pairs"] == {"supported": 4, "unsupported": 2, "unreachable": 1, "unjudged": 1, "total": 8}
    assert s["unusable"] == 3 and s["judge_calls"] == 8 and s["cache_hits"] == 3
    assert s["problems"] == {"no_citations": 1, "no_references": 1}
    lo, hi = s["citation_accuracy_ci"]
    assert 0.5 <= lo <= 0.625 <= hi <= 0.75
    assert fact_summary([a, b, c])["citation_accuracy_ci"] == [lo, hi]  # seeded
    assert fact_summary([a])["citation_accuracy_ci"] == [0.75, 0.75]
    none = fact_summary([])
    assert none["tasks"] == 0 and none["citation_accuracy"] is None and none["effective_citations"] is None
