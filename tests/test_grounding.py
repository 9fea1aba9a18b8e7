"""Grounding figures: whether an answer came from what the agent read, whether the answer's page
was listed, visited and picked, and whether checks reject (websailor.eval.grounding)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from websailor.agent.prompt import tool_response
from websailor.eval.grounding import grounding_figures, rollout_grounding
from websailor.eval.report import summarize, to_markdown
from websailor.eval.scoring import Score
from websailor.judge.gold import Gold
from websailor.tools.observation_parse import observation_body, pages_read, search_results, title_from_url
from websailor.tools.search import BLOCK_SEPARATOR, format_search_results
from websailor.tools.visit import Extraction, format_visit

ROOT = Path(__file__).resolve().parents[1]
WIKI = "https://en.wikipedia.org/wiki/"


@dataclass
class _Hit:
    rank: int
    title: str
    url: str
    snippet: str


def _search(query: str, *titles_snippets: tuple[str, str]) -> str:
    hits = [_Hit(i, t, WIKI + t.replace(" ", "_"), s) for i, (t, s) in enumerate(titles_snippets, 1)]
    return format_search_results(query, hits)


def _visit(title: str, goal: str, *evidence: str) -> str:
    return format_visit(WIKI + title.replace(" ", "_"), goal, Extraction(list(evidence), evidence[0]))


def _turn(thought: str, call: dict | None = None, answer: str | None = None) -> dict:
    body = f"<tool_call>\n{json.dumps(call)}\n</tool_call>" if call else f"<answer>{answer}</answer>"
    return {"role": "assistant", "content": f"<think>\n{thought}\n</think>\n{body}"}


def _chat(question: str, *turns: tuple[dict, str | None]) -> list[dict]:
    msgs = [{"role": "system", "content": "tools"}, {"role": "user", "content": question}]
    for turn, obs in turns:
        msgs.append(turn)
        if obs is not None:
            msgs.append({"role": "user", "content": tool_response(obs)})
    return msgs


Q = "Which river, about 7,088 km long, flows north through northeast Africa into the Mediterranean Sea?"
RESULTS = _search(
    Q,
    ("Mediterranean Sea", "The Mediterranean Sea is connected to the Atlantic Ocean."),
    ("Nile", "The Nile is a major north-flowing river in northeast Africa, 7,088 km long."),
)


def test_an_answer_picked_from_the_list_checked_and_given_is_grounded():
    msgs = _chat(
        Q,
        (_turn("I search the question.", {"name": "search", "arguments": {"query": [Q]}}), RESULTS),
        (
            _turn(
                "Result 2, Nile, shares 'north-flowing', 'northeast Africa' and '7,088 km' with the question.",
                {"name": "visit", "arguments": {"url": WIKI + "Nile", "goal": "length"}},
            ),
            _visit("Nile", "length", "At 7,088 kilometres long, it is the longest river."),
        ),
        (_turn('Its page says "7,088 kilometres": it fits.', answer="Nile"), None),
    )
    g = rollout_grounding(msgs, "Nile", Gold.parse({"answer": "Nile", "aliases": ["River Nile"]}))
    assert g == {
        "answered": True,
        "grounded": True,
        "listed": True,
        "visited": True,
        "picked": True,
        "checks": 1,
        "rejections": 0,
    }


def test_an_answer_named_before_anything_showed_it_is_not_grounded_though_its_page_was_opened_after():
    """The transfer run's failure: the model names an entity no observation showed, opens its
    page (which of course names it) and answers it."""
    msgs = _chat(
        Q,
        (_turn("I search the question.", {"name": "search", "arguments": {"query": [Q]}}), RESULTS),
        (
            _turn(
                "The clues point to River delta.",
                {"name": "visit", "arguments": {"url": WIKI + "River_delta", "goal": "check it"}},
            ),
            _visit("River delta", "check it", "A river delta is a landform created by the deposition of sediment."),
        ),
        (_turn("The page of River delta confirms it. So the answer is River delta.", answer="River delta"), None),
    )
    g = rollout_grounding(msgs, "River delta", Gold.parse("Nile"))
    assert (g["grounded"], g["listed"], g["visited"], g["picked"]) == (False, True, False, False)
    assert (g["checks"], g["rejections"]) == (1, 0)


def test_a_rejection_counts_and_a_pages_quoted_words_do_not():
    courbet = _visit("Gustave Courbet", "who", "Courbet rejected academic convention.", "Born 1819.")
    msgs = _chat(
        "Who painted the Mona Lisa?",
        (
            _turn("I open Gustave Courbet.", {"name": "visit", "arguments": {"url": WIKI + "Gustave_Courbet"}}),
            courbet,
        ),
        (
            _turn(
                'Its page says "he rejected academic convention" and "born 1819": the question asks for the '
                "16th century, so he does not fit. I try the next result.",
                {"name": "visit", "arguments": {"url": WIKI + "Leonardo_da_Vinci"}},
            ),
            courbet,
        ),
        (_turn('The page says "he rejected academic convention"; it confirms him.', answer="Gustave Courbet"), None),
    )
    g = rollout_grounding(msgs, "Gustave Courbet", Gold.parse("Leonardo da Vinci"))
    assert (g["checks"], g["rejections"]) == (2, 1)
    assert g["listed"] is False and g["picked"] is None and g["grounded"] is False


def test_no_answer_and_no_gold_leave_their_figures_open():
    msgs = _chat(Q, (_turn("I search.", {"name": "search", "arguments": {"query": [Q]}}), RESULTS))
    g = rollout_grounding(msgs, None, None)
    assert g["answered"] is False and g["grounded"] is None
    assert g["listed"] is None and g["visited"] is None and g["picked"] is None


def test_a_disambiguated_title_lists_its_bare_name():
    obs = _search("planet nearest the sun", ("Mercury (planet)", "Mercury is the smallest planet."))
    msgs = _chat("Which planet is nearest the sun?", (_turn("I search.", {"name": "search", "arguments": {}}), obs))
    g = rollout_grounding(msgs, "Mercury", Gold.parse("Mercury"))
    assert g["listed"] and g["grounded"] and g["picked"]


def test_observations_read_back_as_the_tools_wrote_them():
    two = _search("it's a river", ("Nile", "first line"), ("Congo River", "")) + BLOCK_SEPARATOR + RESULTS
    hits = search_results(two)
    assert [(h.query, h.rank, h.title) for h in hits] == [
        ("it's a river", 1, "Nile"),
        ("it's a river", 2, "Congo River"),
        (Q, 1, "Mediterranean Sea"),
        (Q, 2, "Nile"),
    ]
    assert hits[0].snippet == "first line" and hits[1].snippet == "" and hits[3].url == WIKI + "Nile"
    page = _visit("River delta", "a goal naming the Nile", "Sediment builds deltas.")
    assert pages_read(page) == [WIKI + "River_delta"] and search_results(page) == []
    assert "Nile" not in observation_body(page) and "Sediment builds deltas." in observation_body(page)
    assert title_from_url(WIKI + "Caf%C3%A9_society") == "Café society"


def _score(i: int, grounding: dict, correct: bool) -> Score:
    return Score(str(i), 0, "em", correct, float(correct), None, None, None, None, "answer", 2, 3, 10, 5, 1.0,
                 grounding=grounding)  # fmt: skip


def test_the_report_states_the_grounding_figures():
    ok = {"answered": True, "grounded": True, "listed": True, "visited": True, "picked": True, "checks": 1,
          "rejections": 0}  # fmt: skip
    missed = {"answered": True, "grounded": False, "listed": True, "visited": False, "picked": False, "checks": 2,
              "rejections": 1}  # fmt: skip
    none = {"answered": False, "grounded": None, "listed": False, "visited": False, "picked": None, "checks": 0,
            "rejections": 0}  # fmt: skip
    s = summarize([_score(0, ok, True), _score(1, missed, False), _score(2, none, False)])
    assert s["grounding"] == {
        "rollouts": 3,
        "answered": 2,
        "grounded": 0.5,
        "listed": 0.6667,
        "visited": 0.3333,
        "picked": 0.5,
        "checks": 3,
        "rejecting": 0.3333,
    }
    md = to_markdown(s)
    assert "Grounding: 50.0% of 2 answers appear in what the agent read" in md
    assert "listed by a search in 66.7% of the rollouts and visited in 33.3%" in md
    assert "3 checks of a page read, 33.3% of them rejecting" in md
    assert "Grounding" not in to_markdown(summarize([_score(0, {}, True)]))
    # no rollout answered (the base model of the demo): no percentage of nothing
    md = to_markdown(summarize([_score(0, none, False), _score(1, none, False)]))
    assert "Grounding: no rollout gave an answer; the answer's page was listed by a search in 0.0%" in md
    line = next(x for x in md.splitlines() if x.startswith("Grounding"))
    assert "n/a" not in line and line.endswith("no check of a page read states a verdict.")


def test_the_committed_transfer_rollouts_show_the_failure_the_issue_describes():
    """The 80 rollouts of experiments/results/transfer_opening/eval_question (the warm start on
    the 20 hand-written questions): the answer's page listed in 45, visited in 1, and no check
    that rejects."""
    rows = []
    path = ROOT / "experiments" / "results" / "transfer_opening" / "eval_question" / "trajectories.jsonl"
    for line in path.read_text().splitlines():
        r = json.loads(line)
        rows.append(rollout_grounding(r["messages"], r["prediction"], Gold.parse(r["answer"])))
    f = grounding_figures(rows)
    assert (f["rollouts"], round(f["listed"] * 80), round(f["visited"] * 80)) == (80, 45, 1)
    assert f["checks"] > 100 and f["rejecting"] == 0
    assert f["grounded"] < 0.9


def test_a_choice_is_grounded_when_its_thought_says_where_the_page_was_shown():
    from websailor.eval.grounding import choice_grounding

    visit = {"name": "visit", "arguments": {"url": WIKI + "Nile", "goal": "length"}}
    said = [
        ("Result 2 of my search for the question, Nile: its snippet shares '7,088' with the question.", True),
        ('The search says "The Nile is a major north-flowing river in northeast Africa".', True),
        ("The clues point to Nile.", False),  # shown, but the thought does not say where
        ("Result 1 of my search, Mediterranean Sea, fits.", False),  # the rank of another result
        ('"Nile" is named.', False),  # a bare name is not a quotation
    ]
    for thought, grounded in said:
        msgs = _chat(Q, (_turn("I search.", {"name": "search", "arguments": {"query": [Q]}}), RESULTS),
                     (_turn(thought, visit), _visit("Nile", "length", "It is long.")))  # fmt: skip
        [c] = choice_grounding(msgs)
        assert (c["candidate"], c["shown"], c["grounded"]) == ("Nile", True, grounded), thought
    # a page no observation showed is not grounded whatever the thought says
    msgs = _chat(Q, (_turn("Result 1 of the search, Gene Kelly.", {"name": "visit", "arguments": {
        "url": WIKI + "Gene_Kelly"}}), _visit("Gene Kelly", "g", "An actor.")))  # fmt: skip
    assert choice_grounding(msgs) == [
        {"turn": 2, "candidate": "Gene Kelly", "shown": False, "says_where": False, "grounded": False}
    ]


def test_traj_build_refuses_a_trajectory_whose_visit_has_no_reason(vital, tmp_path, monkeypatch, caplog):
    """Without the reason a thought gives for each page (patched out here), the replay's
    generic thoughts are not grounded: the builder refuses those items and says how many."""
    import websailor.train.constructive as con
    from websailor.synth import SynthConfig, load_or_build, read_items, synthesize
    from websailor.tools.local import build_local_tools

    tools = build_local_tools(vital)
    qa = tmp_path / "qa.jsonl"
    synthesize(load_or_build(vital), qa, SynthConfig(n=6, seed=3, test_fraction=0.0), progress=False, tools=tools)
    monkeypatch.setattr(con, "why_this_page", lambda url, observations, question, from_question=False: None)
    with caplog.at_level("WARNING"):
        written, _ = con.build_constructive(read_items(qa), tools, tmp_path / "sft.jsonl", progress=False)
    assert written == 0 and not (tmp_path / "sft.jsonl").read_text().strip()
    assert "6 of 6 items refused: a visit of their trajectory has no reason in what was read" in caplog.text


def test_one_rollouts_grounding_in_words():
    from websailor.eval.grounding import describe_grounding

    base = {
        "answered": True,
        "grounded": True,
        "listed": True,
        "visited": True,
        "picked": True,
        "checks": 2,
        "rejections": 1,
    }
    assert describe_grounding(base) == (
        "the answer appears in what the agent read before giving it; a search listed the answer's page: "
        "visited, picked; 2 checks of a page read, 1 rejecting"
    )
    unlisted = {
        **base,
        "grounded": False,
        "listed": False,
        "visited": False,
        "picked": None,
        "checks": 1,
        "rejections": 0,
    }
    assert describe_grounding(unlisted) == (
        "the answer appears in nothing the agent read before giving it (memory, or made up); "
        "no search listed the answer's page; 1 check of a page read, 0 rejecting"
    )
    ungraded = {
        **base,
        "answered": False,
        "grounded": None,
        "listed": None,
        "visited": None,
        "picked": None,
        "checks": 0,
    }
    assert describe_grounding(ungraded) == "no answer given; no check of a page read states a verdict"
    assert describe_grounding({}) == ""
