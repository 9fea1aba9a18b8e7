"""The report task and context summarization in the agent loop: the report prompt, the report's
citations parsed into the trajectory (a page never visited, a private and a malformed URL
flagged), and ReSum-style summaries that replace earlier turns near the context limit, recorded
with what they replaced."""

import pytest
from fakes import ScriptedModel, call

from websailor.agent import Agent, AgentConfig
from websailor.agent.prompt import FINAL_ANSWER_NUDGE
from websailor.agent.summarize import SUMMARY_HEADER, SUMMARY_REQUEST, full_messages
from websailor.agent.trajectory import Trajectory
from websailor.corpus import Corpus
from websailor.corpus.urls import title_to_url
from websailor.errors import InvalidArgumentError, ModelError
from websailor.reports.citations import parse_report, url_key, url_problem, visited_urls
from websailor.tools.local import build_local_tools


@pytest.fixture(scope="module")
def tools(vital: Corpus):
    return build_local_tools(vital)


@pytest.fixture(scope="module")
def pages(vital: Corpus) -> list[str]:
    """Three titles of the embedded corpus."""
    return [t for t in ("Nile", "Albert Einstein", "Paris") if vital.get(t) is not None]


def _report(visited: list[str], never: str) -> str:
    return (
        "<think>I have enough.</think>\n<answer># The Nile and Einstein\n\n## Rivers\n"
        f"The Nile flows north [1]. It is long [1, 3].\n\n## People\n- Einstein was a physicist [2].\n"
        "Unsourced context here.\n\n## References\n"
        f"[1] Nile - {title_to_url(visited[0])}\n[2] [Einstein]({title_to_url(visited[1])})\n"
        f"[3] A blog - {never}\n[4] Internal wiki - http://10.0.0.7/notes\n[5] Broken - htps//nowhere\n</answer>"
    )


def test_a_report_task_parses_its_citations_and_flags_a_page_never_opened(tools, pages):
    first, second = pages[:2]
    never = "https://example.org/never-opened"
    model = ScriptedModel(
        [
            call("search", query=[first]),
            call("visit", url=title_to_url(first), goal="course"),
            call("visit", url=[title_to_url(second)], goal="career"),
            _report([first, second], never),
        ]
    )
    traj = Agent(model, tools, AgentConfig(task="report")).run("Write a report on the Nile and Einstein", id="r1")
    assert traj.termination == "answer" and traj.task == "report"
    assert (
        "## References" in traj.messages[0]["content"] and "Cite only pages you opened" in traj.messages[0]["content"]
    )
    refs = {r["n"]: r for r in traj.report["references"]}
    assert refs[1]["visited"] and refs[1]["problem"] is None and refs[2]["problem"] is None
    assert refs[3]["problem"] == "not_visited" and not refs[3]["visited"]
    assert refs[4]["problem"] == "private_url" and refs[5]["problem"] == "malformed_url"
    assert traj.report["sections"] == ["The Nile and Einstein", "Rivers", "People"]
    assert [s["refs"] for s in traj.report["statements"]] == [[1], [1, 3], [2]]
    assert traj.report["counts"]["pairs"] == 4  # (flows, 1), (long, 1), (long, 3), (physicist, 2)
    rec = traj.to_dict()
    assert rec["task"] == "report" and Trajectory.from_dict(rec).report == traj.report
    qa = Agent(ScriptedModel(["<answer>x</answer>"]), tools).run("q").to_dict()
    assert "task" not in qa and "report" not in qa and "summaries" not in qa  # QA records are unchanged


def test_report_turns_get_a_report_sized_budget(tools):
    seen = []

    class Recording(ScriptedModel):
        def generate(self, conversations, params):
            seen.append(params.max_tokens)
            return super().generate(conversations, params)

    model = Recording(["<answer># R\n\nText.</answer>"])
    model.turn_tokens = 256
    Agent(model, tools, AgentConfig(task="report")).run("Write a report")
    Agent(model, tools).run("A question")
    assert seen == [2048, 256]


@pytest.mark.parametrize(
    "report, problems",
    [
        (None, ["empty"]),
        ("# Title\n\nNo sources at all.", ["no_citations", "no_references"]),
        ("# T\n\nA claim [1].", ["no_references"]),
        ("# T\n\nA claim.\n\n## References\n[1] https://example.com/a", ["no_citations"]),
    ],
)
def test_reports_without_citations_are_read_with_their_problem(report, problems):
    parsed = parse_report(report, [])
    assert parsed.problems == problems and parsed.pairs() == []
    if report and "[1]." in report:
        assert parsed.dangling == [1]


@pytest.mark.parametrize(
    "url, problem",
    [
        ("https://en.wikipedia.org/wiki/Nile", None),
        ("en.wikipedia.org/wiki/Nile", None),
        ("http://localhost:8000/", "private_url"),
        ("http://192.168.1.4/a", "private_url"),
        ("http://[::1]/a", "private_url"),
        ("http://printer.local/a", "private_url"),
        ("http://intranet/a", "private_url"),
        ("http://169.254.169.254/latest/meta-data", "private_url"),
        ("ftp://example.com/a", "malformed_url"),
        ("https://", "malformed_url"),
        ("https://example.com:port/", "malformed_url"),
        ("javascript:alert(1)", "malformed_url"),
    ],
)
def test_url_problems(url, problem):
    assert url_problem(url) == problem


def test_pages_compare_by_key():
    assert url_key("https://en.m.wikipedia.org/wiki/Albert_Einstein#Life") == url_key(
        "en.wikipedia.org/wiki/Albert Einstein"
    )
    assert url_key("https://www.Example.com/a/") == url_key("http://example.com/a")
    calls = [{"name": "visit", "arguments": {"url": ["u1", "u2"]}}, {"name": "search", "arguments": {"url": "x"}}]
    assert visited_urls(calls + [{"name": "visit", "arguments": {"url": "u1"}}]) == ["u1", "u2"]


# -- summarization ------------------------------------------------------------------------------
def _researcher(pages: list[str], answer: str, summaries: list, fail_summary: bool = False):
    """A scripted model that visits ``pages`` in turn, summarizes when asked (or fails to), and
    answers when the pages are done."""
    state = {"turn": 0}

    def reply(messages):
        if messages[-1]["content"] == SUMMARY_REQUEST:
            if fail_summary:
                raise ModelError("the summary endpoint is down")
            summaries.append(len(messages))
            return f"<think>sum up</think><summary>Visited {state['turn']} pages so far; facts at {title_to_url(pages[0])}.</summary>"
        i = state["turn"]
        state["turn"] += 1
        if i < len(pages):
            return call("visit", url=title_to_url(pages[i]), goal="everything about it")
        return f"<answer>{answer}</answer>"

    return reply


def test_summaries_replace_earlier_turns_near_the_context_limit_and_are_recorded(tools, pages):
    asked: list[int] = []
    visits = (pages * 4)[:8]
    model = ScriptedModel(_researcher(visits, "done", asked), max_context=2000)
    cfg = AgentConfig(summarize_at=0.5, max_summaries=3)
    traj = Agent(model, tools, cfg).run("Tell me about these pages", id="s")
    assert traj.termination == "answer" and traj.prediction == "done"
    done = [s for s in traj.summaries if s["text"]]
    assert 1 <= len(done) == len(asked) <= 3
    # each summary was triggered past half the context, and the conversation after it is the task and the summary
    assert all(s["context_tokens"] >= 1000 for s in done)
    assert all(s["replaced"] and s["replaced"][0]["role"] == "assistant" for s in done)
    assert SUMMARY_HEADER in traj.messages[1]["content"] and traj.messages[1]["content"].startswith(traj.question)
    # nothing is lost: the whole conversation comes back, with a marker where each summary came in
    rec = traj.to_dict()
    whole = full_messages(rec)
    assistant = [m for m in whole if m["role"] == "assistant"]
    assert len(assistant) == traj.num_model_calls == len(visits) + 1
    assert sum("summary" in m for m in whole) == len(done)
    # every call after a summary saw a shorter context than the one that triggered it
    assert max(s["context_tokens"] for s in done) < 2000
    assert traj.tokens["completion"] > sum(len(m["content"].split()) for m in assistant) - 1


def test_a_failed_summary_is_recorded_and_the_nudge_still_ends_the_rollout(tools, pages):
    visits = (pages * 6)[:16]
    model = ScriptedModel(_researcher(visits, "never", [], fail_summary=True), max_context=1500)
    traj = Agent(model, tools, AgentConfig(summarize_at=0.4, max_summaries=2)).run("q", id="f")
    assert [s["error"] for s in traj.summaries] == ["ModelError: the summary endpoint is down"] * 2
    assert all(not s["replaced"] and s["text"] is None for s in traj.summaries)
    assert traj.termination == "context"  # nudged once the summaries were spent, and went on calling tools
    assert any(FINAL_ANSWER_NUDGE in m["content"] for m in traj.messages if m["role"] == "user")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"task": "essay"}, "task must be one of qa, report"),
        ({"summarize_at": 0.9}, "below the answer nudge's (0.86)"),
        ({"summarize_at": 0.0}, "above 0"),
        ({"max_summaries": -1}, "max_summaries must be at least 0"),
    ],
)
def test_bad_agent_settings_are_refused(kwargs, message):
    with pytest.raises(InvalidArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        AgentConfig(**kwargs)


def test_eval_counts_the_rollouts_that_summarized(tools, pages, tmp_path):
    from websailor.eval.report import summarize, to_markdown
    from websailor.eval.scoring import score_trajectories
    from websailor.judge import load_judge
    from websailor.judge.gold import Gold

    model = ScriptedModel(_researcher((pages * 4)[:8], "done", []), max_context=2000)
    summarized = Agent(model, tools, AgentConfig(summarize_at=0.5)).run("Tell me", id="a").to_dict()
    plain = Agent(ScriptedModel(["<answer>done</answer>"]), tools).run("Tell me", id="b").to_dict()
    records = [{**r, "answer": Gold.parse("done").to_dict()} for r in (summarized, plain)]
    scores = score_trajectories(records, load_judge("em"), tmp_path / "scores.jsonl", progress=False)
    summary = summarize(scores)
    n = sum(bool(s["text"]) for s in summarized["summaries"])
    assert n >= 1 and summary["summarized_rollouts"] == {"rollouts": 1, "summaries": n}
    assert f"context summaries: 1 of 2 rollouts summarized ({n} summaries)" in to_markdown(summary)
