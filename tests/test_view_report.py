"""Reports in the viewer: a report rollout's Markdown rendered as inert HTML (no markup, link or
image of the model's reaches the page as such), each citation marked with FACT's verdict and
reason (or the parse's own problem), the RACE table with its mode, context summaries in the
timeline; race.jsonl and fact.jsonl lines that are malformed or cut off are skipped with a note.
Records are made by the library's own classes (parse_report, RaceScore, FactResult, Summary)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from fakes import XSS, call
from fastapi.testclient import TestClient

from websailor.agent.summarize import Summary, resumed_task
from websailor.eval.fact import FactResult, PairCheck, UnusableReference
from websailor.eval.race import CriterionScore, DimensionScore, RaceScore
from websailor.eval.report_eval import ScoredReports, report_key, report_summary
from websailor.reports.citations import parse_report, visited_urls
from websailor.view import create_view_app, find_runs
from websailor.view.safe_markdown import Cite, render_markdown, safe_url

NILE, CAIRO, UNSEEN = (
    "https://en.wikipedia.org/wiki/Nile",
    "https://en.wikipedia.org/wiki/Cairo",
    "https://example.org/x",
)
REPORT = f"""# The Nile

Intro <script>alert(1)</script> and <img src=x onerror=alert(1)> in a sentence. {XSS}

## Course

The Nile is 6,650 km long [1]. Cairo lies on the Nile [2]. Some say it is blue [3]. See [a link](javascript:alert(1)),
[data](data:text/html;base64,PHNjcmlwdD4=) and [the river](https://en.wikipedia.org/wiki/Nile "title").
![a map](https://example.org/map.png) ![bad](javascript:alert(2)) Never listed [9].

<div onmouseover="alert(1)">a raw HTML block</div>

<iframe src="javascript:alert(1)"></iframe>

| figure | value |
|---|---|
| length | 6,650 km [1] |

## References
[1] Nile - {NILE}
[2] Cairo - {UNSEEN}
[3] Notes - http://10.0.0.7/notes
[4] Cairo again - {CAIRO}
"""
Q_REPORT = "Survey the Nile."
REASON_1 = "The page gives 6,650 km <b>exactly</b>"


def _report_record(rollout: int = 0, prediction: str = REPORT) -> dict:
    calls = [{"name": "visit", "arguments": {"url": NILE, "goal": "length"}, "latency_s": 0.1, "error": None}]
    messages = [
        {"role": "system", "content": "Write a report."},
        {"role": "user", "content": Q_REPORT},
        {"role": "assistant", "content": call("visit", url=NILE, goal="length")},
        {"role": "user", "content": "<tool_response>The Nile is 6,650 km long.</tool_response>"},
        {"role": "assistant", "content": f"<think>Done.</think>\n<answer>{prediction}</answer>"},
    ]
    return {
        "id": "t1",
        "rollout": rollout,
        "question": Q_REPORT,
        "answer": None,
        "prediction": prediction,
        "termination": "answer",
        "messages": messages,
        "tool_calls": calls,
        "num_tool_calls": 1,
        "num_model_calls": 2,
        "task": "report",
        "report": parse_report(prediction, visited_urls(calls)).to_dict(),
    }


def _race(rec: dict) -> dict:
    dims = {
        "comprehensiveness": DimensionScore(0.4, 6.0, 4.0, 0.6),
        "insight": DimensionScore(0.3, 5.0, 5.0, 0.5),
        "instruction_following": DimensionScore(0.2, 7.0, 3.0, 0.7),
        "readability": DimensionScore(0.1, None, None, None),
    }
    crits = [
        CriterionScore("C1", "comprehensiveness", "Covers the course", 1.0, 6.0, 4.0, f"Mostly there {XSS}"),
        CriterionScore("C2", "insight", "Explains the floods", 1.0, 5.0, 5.0, "As deep as the reference"),
    ]
    score = RaceScore("t1", "relative", 0.4812, dims, crits, "task", "judge-m", rec["rollout"], 5.9, 4.3)
    score.problems.append("readability: no criterion scored")
    return {**score.to_dict(), "key": report_key(rec)}


def _fact(rec: dict) -> dict:
    pairs = [
        PairCheck("The Nile is 6,650 km long.", NILE, 1, "supported", REASON_1),
        PairCheck("Cairo lies on the Nile.", UNSEEN, 2, "unsupported", f"The page is about something else {XSS}"),
    ]
    result = FactResult("t1", pairs, [UnusableReference(3, "http://10.0.0.7/notes", "Notes", "private_url", True)])
    return {**result.to_dict(), "rollout": rec["rollout"], "key": report_key(rec)}


def _qa_with_summaries() -> dict:
    """A QA rollout whose first turns a context summary replaced, and a summary that failed."""
    q = "Which river flows through Cairo?"
    replaced = [
        {"role": "assistant", "content": call("search", query=["Cairo river"])},
        {"role": "user", "content": "<tool_response>REPLACED-OBSERVATION: Cairo is on the Nile.</tool_response>"},
    ]
    summary = Summary(3, 30000, replaced, f"SUMMARY-TEXT: Cairo lies on the Nile. {XSS}", 2900, 120)
    failed = Summary(5, 31000, [], None, 100, 0, "the model wrote an empty summary")
    return {
        "id": "qs",
        "rollout": 0,
        "question": q,
        "answer": {"answer": "Nile", "aliases": [], "parts": []},
        "prediction": "Nile",
        "termination": "answer",
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": resumed_task(q, summary.text)},
            {"role": "assistant", "content": "<think>The summary settles it.</think><answer>Nile</answer>"},
        ],
        "tool_calls": [{"name": "search", "arguments": {"query": ["Cairo river"]}, "latency_s": 0.2, "error": None}],
        "summaries": [summary.to_dict(), failed.to_dict()],
    }


def _lines(path: Path, rows: list, tail: str = "") -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows) + tail)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """``rep``: a report evaluation (two rollouts, RACE and FACT for rollout 0, bad lines among
    them); ``qa.jsonl``: a QA trajectory with context summaries."""
    rep = tmp_path / "rep"
    rep.mkdir()
    recs = [_report_record(0), _report_record(1)]
    _lines(rep / "trajectories.jsonl", recs)
    _lines(
        rep / "race.jsonl", [_race(recs[0]), "{not json", {"task_id": "t1", "rollout": 1}], tail='{"task_id": "t1", "ro'
    )
    _lines(rep / "fact.jsonl", ["", _fact(recs[0]), '{"task_id": "t1", "rollout": 1, "pairs": [{"n": "x"}]}'])
    _lines(tmp_path / "qa.jsonl", [_qa_with_summaries()])
    return tmp_path


class _Tags(HTMLParser):
    """Every tag of a page with its attributes, as a browser's parser reads them."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))


def _inert(html: str) -> None:
    """No markup, script, handler, link or image of the model's on the page: parsed as a
    browser would, the page's only scripts are the viewer's own, no tag has an event handler,
    no link or source a scheme other than http(s), nothing is an image or a frame."""
    assert "<script>alert" not in html and XSS not in html
    for tag, attrs in _Tags(html).tags:
        assert tag not in ("img", "iframe", "object", "embed", "svg", "math", "form", "base", "meta") or (
            tag == "meta" and attrs == [("charset", "utf-8")]
        ), (tag, attrs)
        if tag == "script":
            assert re.fullmatch(r"(\.\./)*/?static/\w+\.js", dict(attrs).get("src") or ""), attrs  # the viewer's own
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name, value)
            if name in ("href", "src", "action", "formaction"):
                scheme = (value or "").strip().split(":", 1)[0].lower() if ":" in (value or "") else ""
                assert scheme in ("", "http", "https") or value == "data:,", (tag, name, value)


def test_a_report_eval_is_found_and_its_table_opens(root: Path):
    assert {r.rel: r.kind for r in find_runs(root)} == {"rep": "eval", "qa.jsonl": "trajectories"}
    c = TestClient(create_view_app(root))
    r = c.get("/eval/rep")
    assert r.status_code == 200 and 'data-id="t1"' in r.text  # a report has no gold answer: it opens all the same
    assert "RACE relative 0.481, citation accuracy 0.500" in r.text  # rollout 0's cell title
    # the index's line from the summary eval --task report writes
    recs = [_report_record(0), _report_record(1)]
    race, fact = RaceScore.from_dict(_race(recs[0])), FactResult.from_dict(_fact(recs[0]))
    summary = report_summary(recs, ScoredReports(race=[race], fact=[fact]), "drb")
    (root / "rep" / "summary.json").write_text(json.dumps(summary))
    index = c.get("/").text
    assert "2 reports on 1 tasks, RACE relative 48.1, citation accuracy 50.0%, 1.00 effective citations" in index


def test_the_report_is_rendered_as_inert_html(root: Path):
    html = TestClient(create_view_app(root)).get("/eval/rep?question=t1&rollout=0").text
    _inert(html)
    assert "<h1>The Nile</h1>" in html and "<h2>Course</h2>" in html and "<table>" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;div onmouseover=" in html  # shown as text
    assert "[a link](javascript:alert(1))" in html  # not a link
    link = (
        '<a href="https://en.wikipedia.org/wiki/Nile" title="title" rel="noopener noreferrer nofollow" target="_blank">'
    )
    assert link + "the river</a>" in html
    assert 'class="image-link" href="https://example.org/map.png"' in html and "[image: a map]" in html
    assert "![bad](javascript:alert(2))" in html
    assert "References</h2>" not in html  # the list is shown from the parse, with verdicts


def test_each_citation_shows_facts_verdict_and_reason(root: Path):
    html = TestClient(create_view_app(root)).get("/eval/rep?question=t1&rollout=0").text
    # inline markers: a class per verdict, the reason as the title, a link to the list's entry
    assert re.search(r'<a class="cite verdict-supported" href="#rollout0-ref-1" title="supported: The page gives '
                     r'6,650 km &lt;b&gt;exactly&lt;/b&gt;">1</a>', html)  # fmt: skip
    assert 'class="cite verdict-unsupported" href="#rollout0-ref-2"' in html
    assert 'class="cite verdict-private_url" href="#rollout0-ref-3"' in html
    assert '<span class="cite verdict-dangling" title="dangling: cited, but not in the reference list">9</span>' in html
    # the reference list
    assert '<li class="reference verdict-supported" id="rollout0-ref-1">' in html
    assert '<li class="reference verdict-unsupported" id="rollout0-ref-2">' in html
    assert "does not support the statement; a page the agent never opened" in html  # FACT's verdict and the parse's
    assert '<li class="reference verdict-private_url" id="rollout0-ref-3">' in html
    assert (
        '<li class="reference verdict-not_visited" id="rollout0-ref-4">' in html and "never opened; not cited" in html
    )
    assert '<a href="http://10.0.0.7/notes"' not in html  # a private address is never a link
    assert "The page gives 6,650 km &lt;b&gt;exactly&lt;/b&gt;" in html and "The page is about something else" in html
    assert "citation accuracy" in html and "0.500" in html and "1 effective citation" in html
    # without a FACT line (rollout 1: its line is malformed), the parse's own problems
    other = TestClient(create_view_app(root)).get("/eval/rep?question=t1&rollout=1").text
    _inert(other)
    assert '<li class="reference verdict-not_visited" id="rollout1-ref-2">' in other
    assert 'class="cite verdict-unchecked" href="#rollout1-ref-1"' in other and "No FACT check" in other
    assert "No RACE score" in other


def test_the_race_table_with_its_mode(root: Path):
    html = TestClient(create_view_app(root)).get("/eval/rep?question=t1&rollout=0").text
    assert '<h3>RACE <span class="mode mode-relative">relative</span></h3>' in html
    assert "0.5 is as good as the task&#39;s reference report" in html
    assert "overall <b>0.481</b>" in html and "target 5.90, reference 4.30" in html
    row = "<td>comprehensiveness</td><td>0.400</td><td>6.00</td><td>4.00</td><td><b>0.600</b></td>"
    assert row in html and "<td>readability</td><td>0.100</td><td>n/a</td><td>n/a</td><td><b>n/a</b></td>" in html
    assert re.search(r"<details><summary>1 criterion of comprehensiveness</summary>.*Covers the course", html, re.S)
    assert "Mostly there &lt;script&gt;" in html and "readability: no criterion scored" in html


def test_an_absolute_score_is_labelled_so(root: Path):
    rec = _report_record(0)
    absolute = {**_race(rec), "mode": "absolute", "reference_total": None}
    _lines(root / "rep" / "race.jsonl", [absolute])
    html = TestClient(create_view_app(root)).get("/eval/rep?question=t1&rollout=0").text
    assert '<span class="mode mode-absolute">absolute</span>' in html and "no reference report" in html


def test_bad_score_lines_are_skipped_with_a_note(root: Path):
    html = TestClient(create_view_app(root)).get("/eval/rep?question=t1").text
    assert "race.jsonl line 2 skipped: not valid JSON" in html
    assert "race.jsonl line 3 skipped: not a RACE score record" in html
    assert "race.jsonl line 4 skipped: unfinished" in html
    assert "fact.jsonl line 3 skipped" in html
    # files that are no JSONL at all, or a score of an earlier report of the rollout
    (root / "rep" / "race.jsonl").write_bytes(b"\xff\xfe\x00garbage")
    rerun = {**_fact(_report_record(0)), "key": "0123456789abcdef"}
    _lines(root / "rep" / "fact.jsonl", [rerun])
    r = TestClient(create_view_app(root)).get("/eval/rep?question=t1&rollout=0")
    assert r.status_code == 200 and "race.jsonl: reading stopped" in r.text
    assert "fact.jsonl scored an earlier report of this rollout" in r.text and "No FACT check" in r.text


def test_context_summaries_show_in_the_timeline(root: Path):
    c = TestClient(create_view_app(root))
    html = c.get("/trajectories/qa.jsonl?question=qs&rollout=0").text
    _inert(html)
    replaced = re.search(r'<li class="replaced" id="replaced-1">.*?</details></li>', html, re.S)
    assert replaced and "REPLACED-OBSERVATION" in replaced.group(0) and "Cairo river" in replaced.group(0)
    assert "1 step (2 messages) that context summary 1 replaced" in replaced.group(0)
    assert '<li class="context-summary" id="summary-1">' in html
    assert "at 30000 context tokens, after 3 model calls" in html
    assert "SUMMARY-TEXT: Cairo lies on the Nile. &lt;script&gt;" in html
    assert 'id="step-1"' in html and 'id="step-2"' in html  # numbered over the whole conversation
    assert "at 31000 context tokens not written: the model wrote an empty summary" in html
    side_by_side = c.get("/trajectories/qa.jsonl?question=qs").text
    assert 'id="r0-replaced-1"' in side_by_side and 'id="r0-summary-1"' in side_by_side


def test_safe_url_and_markdown_rules():
    assert safe_url("https://a.org/x") and safe_url("HTTP://a.org")
    for bad in ("javascript:alert(1)", "data:text/html,x", "vbscript:x", "/relative", "#frag", "https:no-host",
                "mailto:a@b.c", "https://a.org/\nx", " javascript:alert(1)", "file:///etc/passwd"):  # fmt: skip
        assert not safe_url(bad), bad
    html = str(render_markdown("[x](<javascript:alert(1)>) <javascript:alert(1)> [1]: https://evil.example\n\n[1]"))
    assert "href" not in html
    lan = str(render_markdown("[router](http://192.168.1.1/reset) ![x](http://localhost/a.png) [ok](https://a.org)"))
    assert lan.count("href") == 1 and "[router](http://192.168.1.1/reset)" not in lan and "router</a>" in lan
    marked = str(render_markdown("A [1, 2] b `[3]`", lambda n, before: Cite("supported", f"r{n} <x>", f"p-ref-{n}")))
    assert marked.count('class="cite verdict-supported"') == 2 and "<code>[3]</code>" in marked
    assert 'title="r1 &lt;x&gt;"' in marked


@pytest.mark.parametrize(
    "change",
    [
        {"report": "not a report"},
        {"report": {"references": [{"n": "1"}, 5, {"n": True}, {"n": 2, "url": ["x"], "problem": 3}], "counts": 7}},
        {"prediction": None, "report": None},
        {"summaries": 5},
        {"summaries": [1, "x", {"text": 3, "replaced": "y"}, {"text": "S", "replaced": [1, {"role": "user"}]}]},
        {"messages": "not a list"},
    ],
    ids=["report-text", "odd-references", "no-prediction", "summaries-number", "odd-summaries", "messages-text"],
)
def test_records_of_odd_shape_still_show(root: Path, change: dict):
    rec = {**_report_record(0), **change}
    odd_race = {**_race(rec), "overall": "high", "target_total": 10**400}
    odd_race["dimensions"]["insight"] = {"weight": "x", "target": None, "reference": [], "score": float("inf")}
    _lines(root / "rep" / "trajectories.jsonl", [rec])
    _lines(root / "rep" / "race.jsonl", [odd_race, {**_race(rec), "criteria": [{"id": 1}]}])
    r = TestClient(create_view_app(root)).get("/eval/rep?question=t1&rollout=0")
    assert r.status_code == 200, r.text
    _inert(r.text)
    assert "race.jsonl line 2 skipped" in r.text and "overall <b>n/a</b>" in r.text  # odd figures show as n/a


def test_an_export_writes_the_report_pages(root: Path, tmp_path_factory):
    from websailor.view.export import export_site

    site = tmp_path_factory.mktemp("site")
    export_site(root, site)
    pages = {p.name: p.read_text(encoding="utf-8") for p in site.rglob("*.html")}
    report = next(text for name, text in pages.items() if "question_3Dt1" in name and "rollout_3D0" in name)
    _inert(report)
    assert "<h1>The Nile</h1>" in report and 'class="cite verdict-supported" href="#rollout0-ref-1"' in report


def test_a_score_file_that_leads_out_of_its_run_is_not_read(root: Path, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere") / "race.jsonl"
    _lines(outside, [{**_race(_report_record(0)), "judge": "SECRET-JUDGE"}])
    (root / "rep" / "race.jsonl").unlink()
    (root / "rep" / "race.jsonl").symlink_to(outside)
    r = TestClient(create_view_app(root)).get("/eval/rep?question=t1&rollout=0")
    assert r.status_code == 200 and "SECRET-JUDGE" not in r.text
    assert "race.jsonl not read" in r.text and "symbolic link out of its run folder" in r.text
