"""Training data: constructive trajectories replayed through the real local tools."""

import json
import re
from pathlib import Path

import pytest
from fixtures import ChatMLSample

from websailor.agent.parse import parse_turn
from websailor.agent.trajectory import Trajectory
from websailor.corpus import Corpus
from websailor.synth import SynthConfig, load_or_build, read_items, synthesize
from websailor.synth.phrasing import statement
from websailor.tools.local import build_local_tools
from websailor.tools.observation_parse import search_results
from websailor.train.constructive import build_constructive


def test_constructive_trajectories_follow_the_protocol_and_reach_the_answer(vital: Corpus, tmp_path):
    qa = tmp_path / "qa.jsonl"
    tools = build_local_tools(vital)  # the replay at synthesis makes every path one the searches show
    synthesize(load_or_build(vital), qa, SynthConfig(n=20, seed=3, test_fraction=0.0), progress=False, tools=tools)
    out = tmp_path / "sft.jsonl"
    assert build_constructive(read_items(qa), tools, out, progress=False) == (20, 0)
    assert build_constructive(read_items(qa), tools, out, progress=False) == (0, 20)  # resumed: nothing twice
    target = {str(it["id"]): it["target_url"] for it in read_items(qa)}
    for line in out.read_text().splitlines():
        t = Trajectory.from_dict(json.loads(line))
        roles = [m["role"] for m in t.messages]
        assert roles[:2] == ["system", "user"] and roles[2:] == ["assistant", "user"] * t.num_tool_calls + ["assistant"]
        actions = [parse_turn(m["content"]) for m in t.messages if m["role"] == "assistant"]
        assert all(a.error is None for a in actions) and actions[-1].answer == t.answer["answer"] == t.prediction
        assert all(c.error is None for c in t.tool_calls)  # every call ran for real
        observations = [m["content"] for m in t.messages[3::2]]
        assert all(o.startswith("<tool_response>") for o in observations)
        # the first page read is the first hop's, which names the answer, or (the short path: the
        # question's own search listed it) the answer's own page
        assert t.answer["answer"].lower() in observations[1].lower() or t.tool_calls[1].arguments["url"] == target[t.id]


def test_import_webdancer_chatml_in_place(chatml_sample: ChatMLSample, tmp_path):
    import pytest

    from websailor.errors import InputFormatError
    from websailor.train.importer import read_chatml

    trajs = read_chatml(chatml_sample.path)
    assert len(trajs) == chatml_sample.n_trajectories and all(t.termination == "answer" for t in trajs)
    t = trajs[0]
    assert (
        t.question.startswith(chatml_sample.first_question_start) and t.answer["answer"] == chatml_sample.first_answer
    )
    assert t.messages[1] == {"role": "user", "content": t.question} and "<tools>" in t.messages[0]["content"]
    assert t.num_tool_calls == chatml_sample.first_tool_calls and chatml_sample.first_prediction_part in t.prediction
    rec = json.loads(chatml_sample.path.read_text().splitlines()[0])
    rec["messages"] = rec["messages"][:2] + [rec["messages"][3], rec["messages"][2]]  # tool turn before the call
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rec) + "\n")
    with pytest.raises(InputFormatError, match="line 1: the messages do not alternate"):
        read_chatml(bad)
    good = json.loads(chatml_sample.path.read_text().splitlines()[0])
    for broken, message in [
        (
            dict(good, messages=good["messages"][:2] + [{"role": "assistant", "content": None}] + good["messages"][3:]),
            "message 3 has NoneType content",
        ),
        (dict(good, functions={"name": "search"}), "'functions' must be a list"),
        (
            dict(
                good,
                messages=[good["messages"][0], {"role": "user", "content": "Tools...\nUser:   "}]
                + good["messages"][2:],
            ),
            "no 'User: <question>'",
        ),
    ]:
        bad.write_text(json.dumps(broken) + "\n")
        with pytest.raises(InputFormatError, match=message):
            read_chatml(bad)
    bad.write_bytes(b"\xff\xfe" + bytes(range(128, 200)))
    with pytest.raises(InputFormatError, match="not UTF-8 text"):
        read_chatml(bad)
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(InputFormatError, match="no trajectories"):
        read_chatml(tmp_path / "empty.jsonl")


def _qa(vital: Corpus, tmp_path, n: int = 6):
    qa = tmp_path / "qa.jsonl"
    synthesize(load_or_build(vital), qa, SynthConfig(n=n, seed=5, test_fraction=0.0), progress=False)
    return qa


def test_expert_rejection_sampling_keeps_only_correct_tool_using_rollouts(vital: Corpus, smollm2_path, tmp_path):
    from fakes import ScriptedModel, call

    from websailor.agent import Agent, AgentConfig
    from websailor.judge import load_judge
    from websailor.questions import load_questions
    from websailor.train.expert import ExpertFilter, build_expert
    from websailor.train.sft import load_tokenizer

    qa = _qa(vital, tmp_path)
    items = load_questions(qa, split="train")
    gold = {it.question: it.gold.answer for it in items}
    order = {it.question: i for i, it in enumerate(items)}

    def expert(messages):  # item 0: answers at once; odd items: wrong; the rest: search, then the right answer
        q = messages[1]["content"]
        i = order[q]
        if i == 0:
            return f"<answer>{gold[q]}</answer>"
        if sum(m["role"] == "assistant" for m in messages) < 2:
            return call("search", query=[q[:60]])
        return f"<think>Found it.</think><answer>{gold[q] if i % 2 == 0 else 'Atlantis'}</answer>"

    model = ScriptedModel(expert)
    agent = Agent(model, build_local_tools(vital), AgentConfig(max_calls=4))
    out = tmp_path / "expert.jsonl"
    tok = load_tokenizer(smollm2_path)
    flt = ExpertFilter(max_tokens=32768, min_tool_calls=1, grounded=False)
    counts = build_expert(items, agent, load_judge("em"), out, tok, k=2, flt=flt, concurrency=2, progress=False)
    n_right = sum(1 for i in range(1, len(items)) if i % 2 == 0)
    assert counts["kept"] == counts["written"] == 2 * n_right
    assert counts["wrong"] == 2 * sum(1 for i in range(1, len(items)) if i % 2 == 1) and counts["few_tool_calls"] == 2
    kept = [Trajectory.from_dict(json.loads(line)) for line in out.read_text().splitlines()]
    assert all(t.prediction == gold[t.question] and t.num_tool_calls >= 1 for t in kept)
    assert len((tmp_path / "expert.rollouts.jsonl").read_text().splitlines()) == 2 * len(items)
    # resumed: no rollout is run again, nothing is written twice; a tighter budget rejects all as too long
    calls = model.calls
    again = build_expert(
        items,
        agent,
        load_judge("em"),
        out,
        tok,
        k=2,
        flt=ExpertFilter(max_tokens=100, min_tool_calls=1, grounded=False),
        progress=False,
    )
    assert model.calls == calls and again["written"] == 0 and again["too_long"] == 2 * n_right
    # the default keeps only grounded rollouts: the right answers the search showed, not right guesses
    from websailor.train.expert import grounded

    strict = build_expert(
        items,
        agent,
        load_judge("em"),
        tmp_path / "g.jsonl",
        tok,
        k=2,
        flt=ExpertFilter(min_tool_calls=1),
        progress=False,
    )
    shown = [json.loads(line) for line in out.read_text().splitlines()]
    assert strict["kept"] == sum(grounded(r) for r in shown) and strict["ungrounded"] == 2 * n_right - strict["kept"]
    assert strict["kept"] == 0  # the scripted expert names the answer without reading it anywhere
    from websailor.train.constructive import constructive_trajectory

    read_first = constructive_trajectory(read_items(_qa(vital, tmp_path, n=1))[0], build_local_tools(vital))
    assert grounded(read_first.to_dict())  # a trajectory that reads, then answers, is kept


def test_rewritten_thoughts_replace_only_the_thinking(vital: Corpus, tmp_path):
    from fakes import ScriptedModel

    from websailor.train.constructive import constructive_trajectory
    from websailor.train.thoughts import rewrite_thoughts

    item = read_items(_qa(vital, tmp_path, n=1))[0]
    traj = constructive_trajectory(item, build_local_tools(vital))
    prompts = []

    def writer(messages):
        prompts.append(messages[-1]["content"])
        return (
            "<think>I narrow the candidates with the next clue.</think>"
            if "final answer" not in messages[-1]["content"]
            else " ".join(["word"] * 500)
        )  # too long for the last step: the original thought stays

    new, done = rewrite_thoughts(traj, ScriptedModel(writer))
    turns = [(a["content"], b["content"]) for a, b in zip(traj.messages, new.messages) if a["role"] == "assistant"]
    assert done == len(turns) - 1
    for old, rewritten in turns[:-1]:
        assert rewritten.startswith("<think>\nI narrow the candidates with the next clue.\n</think>\n")
        assert parse_turn(rewritten).tool_call == parse_turn(old).tool_call  # the action is unchanged
    assert turns[-1][0] == turns[-1][1]
    assert [m for m in new.messages if m["role"] != "assistant"] == [
        m for m in traj.messages if m["role"] != "assistant"
    ]
    assert "scripted" in new.model and traj.model == "constructive"
    # the writer saw the question, the step's action and its result
    assert all(item["question"] in p and "Action at this step" in p for p in prompts)
    assert any("<tool_response>" in p or "Its result:" in p for p in prompts)


def test_rewritten_thoughts_replace_unclosed_and_stray_thoughts():
    from fakes import ScriptedModel

    from websailor.train.thoughts import rewrite_thoughts

    search = '<tool_call>\n{"name": "search", "arguments": {"query": ["长江 发源地"]}}\n</tool_call>'
    traj = Trajectory(id="q", rollout=0, question="Where does the Yangtze rise?", model="imported")
    traj.messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": traj.question},
        {"role": "assistant", "content": f"<think>\nI should search first.\n{search}"},
        {"role": "user", "content": "<tool_response>\nThe Tanggula Mountains.\n</tool_response>"},
        {"role": "assistant", "content": "The page says so.</think>\n\n<answer>唐古拉山脉</answer>"},
    ]
    new, done = rewrite_thoughts(traj, ScriptedModel(["I check the clue."]))
    assert done == 2
    assert new.messages[2]["content"] == f"<think>\nI check the clue.\n</think>\n{search}"
    assert new.messages[4]["content"] == "<think>\nI check the clue.\n</think>\n<answer>唐古拉山脉</answer>"


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


@pytest.fixture(scope="module")
def kinds_build(vital: Corpus, tmp_path_factory):
    """40 items of the vital corpus and their constructive trajectories, half drawn for a distractor."""
    kg = load_or_build(vital)
    tmp = tmp_path_factory.mktemp("kinds")
    qa = tmp / "qa.jsonl"
    synthesize(kg, qa, SynthConfig(n=40, seed=3, test_fraction=0.0), progress=False)
    out = tmp / "kinds.jsonl"
    items = read_items(qa)
    build_constructive(items, build_local_tools(vital), out, progress=False, distractor_share=0.5, kg=kg)
    return kg, items, out


def test_constructive_trajectories_check_the_candidate_and_reject_distractors(vital: Corpus, kinds_build, tmp_path):
    """Verified: a real visit of the answer's page whose observation shows the checked
    constraint's evidence, named in the final thought. Distractor: a page that is not the answer,
    visited for real, rejected for a constraint it really fails, then the right answer. Shares,
    notes and the draw are deterministic per item."""
    from collections import Counter

    from websailor.synth.constraints import Constraint
    from websailor.train.constructive import CONSTRUCTIONS, wants_distractor
    from websailor.train.traj_stats import construction_counts, format_construction_counts

    kg, items, out = kinds_build
    by_id = {str(it["id"]): it for it in items}
    records = [json.loads(line) for line in out.read_text().splitlines()]
    seen: Counter = Counter()
    for rec in records:
        t, item = Trajectory.from_dict(rec), by_id[rec["id"]]
        kind, notes = t.construction, t.construction_notes
        seen[kind] += 1
        assert kind in CONSTRUCTIONS
        roles = [m["role"] for m in t.messages]
        assert roles[2:] == ["assistant", "user"] * t.num_tool_calls + ["assistant"]
        assert all(c.error is None for c in t.tool_calls)
        actions = [parse_turn(m["content"]) for m in t.messages if m["role"] == "assistant"]
        assert all(a.error is None for a in actions) and actions[-1].answer == item["answer"] == t.prediction
        observations = [m["content"] for m in t.messages[3::2]]
        visits = [(i, c.arguments["url"]) for i, c in enumerate(t.tool_calls) if c.name == "visit"]
        final = t.messages[-1]["content"]
        names = [c for c in item["constraints"] if c["kind"] == "name"]
        for c in names:  # a name mask is checked on the title, in the mask's own terms
            assert f'"{statement(c, "it")}": its name, {item["answer"]}, ' in final
        # the search of the question itself lists the answer (the short path: no hop page is
        # opened), or it does not and the thought before the first visit says so and follows the clue
        first_visit = next(i for i, c in enumerate(t.tool_calls) if c.name == "visit")
        asked = _norm(t.question)
        question_hits = [h.url for h in search_results(observations[0]) if _norm(h.query) == asked]
        no_fit = "No result of my search for the question fits every clue, so I follow its most specific clue"
        short = item["target_url"] in question_hits
        assert short != (no_fit in actions[first_visit].thought)
        seen[f"short_path:{short}"] += 1
        if kind == "direct":
            assert notes.get("unverified") and not notes.get("rejected")
            assert ("Every condition checked fits" in final) == bool(names)
            assert bool(names) or "its page shows none of the conditions to check" in final
            continue
        if notes.get("checked"):
            # the check: a real visit of the answer's page that shows each checked constraint
            i = max(i for i, url in visits if url == item["target_url"])
            obs = _norm(observations[i])
            checked = [c for c in item["constraints"] if c["phrase"] in notes["checked"]]
            assert checked and all(c["kind"] != "name" for c in checked)
            assert (
                f"Checking {item['answer']} against the question: " in final and "Every condition checked fits" in final
            )
            for c in checked:  # the final thought holds each against the sentence its page shows
                assert f'"{statement(c, "it")}": its page says "' in final
                on_page = [e["sentence"] for e in c["evidence"] if e["url"] == item["target_url"]]
                assert any(_norm(s) in obs for s in on_page) or (
                    c["kind"] == "linked" and c["params"]["other"].lower() in obs
                )
            # the thought before the visit quotes the first constraint checked, which the page confirmed
            first = next(c for c in checked if c["phrase"] == notes["checked"][0])
            assert f'check on its own page that "{statement(first, "it")}"' in actions[i].thought
        else:
            assert kind == "distractor" and notes["unverified"]
        if kind == "distractor":
            assert wants_distractor(rec["id"], 0.5)
            wrong = notes["rejected"]["title"]
            failed = next(c for c in item["constraints"] if c["phrase"] == notes["rejected"]["failed"])
            assert wrong != item["answer"] and not Constraint.from_dict(failed).matches(kg, wrong)
            url = kg.url(wrong)
            j = next(i for i, u in visits if u == url)
            assert url != item["target_url"] and j < max(i for i, u in visits if u == item["target_url"])
            assert wrong.lower() in _norm(" ".join(observations[:j]))  # met in what was read before
            rejection = actions[j + 1].thought
            assert f'Checking {wrong} against the question: "{statement(failed, "it")}": ' in rejection
            assert f": no. {wrong} is not the answer." in rejection
            if failed["kind"] == "name":
                assert wrong.lower() in _norm(observations[j])
            if failed["kind"] == "linked":
                assert failed["params"]["other"].lower() not in _norm(observations[j].split("\n", 2)[-1])
        else:
            assert not notes.get("rejected")
    assert seen["verified"] and seen["distractor"] and seen["direct"]
    assert seen["short_path:True"] and seen["short_path:False"]
    # every page opened has its reason in what was read before (issue 38), and checks can say no
    from websailor.eval.grounding import choice_grounding, rollout_grounding
    from websailor.judge.gold import Gold

    choices = [c for r in records for c in choice_grounding(r["messages"])]
    assert choices and all(c["grounded"] for c in choices)
    figures = [rollout_grounding(r["messages"], r["prediction"], Gold.parse(r["answer"])) for r in records]
    assert all(f["grounded"] and f["picked"] is not False for f in figures)
    assert sum(f["rejections"] for f in figures) == seen["distractor"]
    counts = construction_counts(out)
    assert {k: counts[k] for k in CONSTRUCTIONS} == {k: seen[k] for k in CONSTRUCTIONS}
    line = format_construction_counts(counts).splitlines()[0]
    for k in CONSTRUCTIONS:
        assert f"{k} {seen[k]} ({seen[k] / len(records):.0%})" in line
    unverified = sum(1 for r in records if (r["construction_notes"] or {}).get("unverified"))
    assert f"not verified: {unverified} (" in format_construction_counts(counts)

    # deterministic: a rebuild, and a build resumed after half the items, write the same trajectories
    def content(path):
        return [
            (r["id"], r["messages"], r["construction"], r["construction_notes"]) for r in map(json.loads, open(path))
        ]

    half = tmp_path / "half.jsonl"
    half.write_text("".join(out.read_text().splitlines(keepends=True)[: len(records) // 2]))
    build_constructive(items, build_local_tools(vital), half, progress=False, distractor_share=0.5, kg=kg)
    assert content(half) == content(out)


def test_distractor_share_is_checked(vital: Corpus, tmp_path):
    import inspect

    from websailor.errors import InvalidArgumentError

    items = read_items(_qa(vital, tmp_path, n=1))
    tools = build_local_tools(vital)
    for bad in (-0.1, 1.5):
        with pytest.raises(InvalidArgumentError, match=r"distractor_share must be in \[0, 1\]"):
            build_constructive(items, tools, tmp_path / "x.jsonl", progress=False, distractor_share=bad, kg=object())
    with pytest.raises(InvalidArgumentError, match="needs the knowledge graph"):
        build_constructive(items, tools, tmp_path / "x.jsonl", progress=False, distractor_share=0.3)
    from websailor.cli.traj import traj_build
    from websailor.train.constructive import DEFAULT_DISTRACTOR_SHARE

    assert inspect.signature(traj_build).parameters["distractor_share"].default == DEFAULT_DISTRACTOR_SHARE
    # no distractors: no graph needed, every trajectory direct or verified; old records read as unrecorded
    out = tmp_path / "plain.jsonl"
    build_constructive(items, tools, out, progress=False, distractor_share=0.0)
    rec = json.loads(out.read_text())
    assert rec["construction"] in ("direct", "verified")
    old = {k: v for k, v in rec.items() if k not in ("construction", "construction_notes")}
    assert Trajectory.from_dict(old).construction is None
    from websailor.train.traj_stats import construction_counts

    (tmp_path / "old.jsonl").write_text(json.dumps(old) + "\n")
    assert construction_counts(tmp_path / "old.jsonl")["unrecorded"] == 1


def test_sft_data_reads_every_kind(kinds_build, smollm2_path):
    from websailor.train.sft import load_tokenizer
    from websailor.train.sft_data import load_sft_data

    _, _, out = kinds_build
    data = load_sft_data(out, load_tokenizer(smollm2_path), max_length=32768)
    n = len(out.read_text().splitlines())
    assert data.counts["read"] == data.counts["kept"] == n


def test_a_one_hop_procedure_is_checked_too(vital: Corpus, tmp_path):
    """Procedures of any length: level-1 items, solved by one search and the answer's page."""
    from websailor.train.constructive import constructive_trajectory

    kg = load_or_build(vital)
    tools = build_local_tools(vital)
    qa = tmp_path / "one_hop.jsonl"
    synthesize(kg, qa, SynthConfig(n=6, seed=5, test_fraction=0.0, levels=(1,)), progress=False, tools=tools)
    kinds = set()
    for item in read_items(qa):
        assert [s["action"] for s in item["procedure"]] == ["search", "visit"]
        t = constructive_trajectory(item, tools, kg=kg, distractor=True)
        assert parse_turn(t.messages[-1]["content"]).answer == item["answer"]
        assert t.tool_calls[0].name == "search" and t.tool_calls[-1].arguments["url"] == item["target_url"]
        assert t.num_tool_calls == 2 + (t.construction == "distractor")
        assert t.to_dict()["level"] == 1  # the item's level travels with its trajectory
        kinds.add(t.construction)
    assert kinds & {"verified", "distractor"}


def test_when_the_questions_own_search_lists_the_answer_the_trajectory_takes_the_short_path(vital: Corpus, tmp_path):
    """Issue 38, the short path: when the opening search of the question's text lists the
    answer's page, the trajectory opens no hop page; it picks the answer from that list (or first
    a result ranked above it, rejected) and never says that no result fits. When the list does
    not show the answer, it says so and follows the clue."""
    from websailor.synth.levels import ItemConfig
    from websailor.train.constructive import constructive_trajectory

    kg = load_or_build(vital)
    tools = build_local_tools(vital)
    qa = tmp_path / "qa.jsonl"
    cfg = SynthConfig(n=12, seed=6, test_fraction=0.0, levels=(1, 2), item=ItemConfig(level=1, described_p=0.5))
    synthesize(kg, qa, cfg, progress=False, tools=tools)
    seen = {True: 0, False: 0}
    for item in read_items(qa):
        t = constructive_trajectory(item, tools, kg=kg, distractor=True)
        question, target = item["question"], item["target_url"]
        listed = [h for h in search_results(t.messages[3]["content"]) if h.query == question]
        short = any(h.url == target for h in listed)
        seen[short] += 1
        visits = [c.arguments["url"] for c in t.tool_calls if c.name == "visit"]
        thoughts = " ".join(m["content"] for m in t.messages if m["role"] == "assistant")
        assert visits[-1] == target and parse_turn(t.messages[-1]["content"]).answer == item["answer"]
        if short:
            rank = next(h.rank for h in listed if h.url == target)
            hops = {kg.url(c["params"]["other"]) for c in item["constraints"] if c["kind"] == "linked"}
            assert not set(visits) & (hops - {h.url for h in listed}), (item["id"], visits)  # no hop page
            assert "No result of my search for the question fits" not in thoughts
            assert f"Result {rank} of my search for the question, " in thoughts
        else:
            assert "No result of my search for the question fits every clue" in thoughts
    assert seen[True] >= 2 and seen[False] >= 1, seen


def test_a_path_the_compact_search_does_not_show_is_left_out(vital: Corpus, tmp_path, caplog):
    """With fewer search results than synthesis replayed the path with, an item whose search no
    longer lists the page the next step opens is left out (a trajectory would visit a page it was
    never shown); synthesizing with the same settings keeps only items whose path shows."""
    from websailor.synth.dataset import SynthConfig as Cfg
    from websailor.train.constructive import HopNotShown, constructive_trajectory

    kg = load_or_build(vital)
    items = read_items(_qa(vital, tmp_path, n=12))
    one = build_local_tools(vital, search_results=1)
    out = tmp_path / "one.jsonl"
    written, _ = build_constructive(items, one, out, progress=False)
    left = len(items) - written
    assert left > 0 and "left out" in caplog.text and len(out.read_text().splitlines()) == written
    by_id = {str(it["id"]): it for it in items}
    for line in out.read_text().splitlines():  # every visit after a search opens a page that search listed
        rec = json.loads(line)
        steps = by_id[rec["id"]]["procedure"]
        for j, call in enumerate(rec["tool_calls"][:-1]):
            after = rec["tool_calls"][j + 1]
            if call["name"] == "search" and after["name"] == "visit" and j + 1 < len(steps):
                assert f"({after['arguments']['url']})" in rec["messages"][3 + 2 * j]["content"]
    missing = next(it for it in items if str(it["id"]) not in out.read_text())
    with pytest.raises(HopNotShown, match="does not show"):
        constructive_trajectory(missing, one)
    shown = tmp_path / "shown.jsonl"
    synthesize(kg, shown, Cfg(n=8, seed=5, test_fraction=0.0), progress=False, tools=one)
    kept = read_items(shown)
    assert build_constructive(kept, one, tmp_path / "kept.jsonl", progress=False)[0] == len(kept) == 8


def test_the_opening_search_queries_the_question_text(vital: Corpus, tmp_path):
    """By default the first search queries the question as written beside the path's first
    clue (a move that carries over to hand-written questions), and its observation lists both;
    ``question_query=False`` is the clue alone; one file never mixes the two openings."""
    from websailor.errors import InvalidArgumentError

    items = read_items(_qa(vital, tmp_path, n=6))
    tools = build_local_tools(vital)
    out, old = tmp_path / "q.jsonl", tmp_path / "clue.jsonl"
    build_constructive(items, tools, out, progress=False)
    build_constructive(items, tools, old, progress=False, question_query=False)
    by_id = {str(it["id"]): it for it in items}
    for new_line, old_line in zip(out.read_text().splitlines(), old.read_text().splitlines()):
        new, clue = json.loads(new_line), json.loads(old_line)
        item = by_id[new["id"]]
        first = new["tool_calls"][0]
        assert first["name"] == "search" and first["arguments"]["query"] == [
            item["question"],
            item["procedure"][0]["query"],
        ]
        assert new["messages"][3]["content"].count("A search for ") == 2
        assert "in its own words" in new["messages"][2]["content"]
        assert new["construction_notes"]["opening"] == "question"
        assert clue["tool_calls"][0]["arguments"]["query"] == [item["procedure"][0]["query"]]
        assert clue["construction_notes"]["opening"] == "clue"
        assert new["messages"][-1]["content"].endswith(f"<answer>{item['answer']}</answer>")
    with pytest.raises(InvalidArgumentError, match="'question' opening"):
        build_constructive(items, tools, out, progress=False, question_query=False)
    # a file mixed by hand is refused at the record that differs, not only at the first
    lines = out.read_text().splitlines()
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(lines[0] + "\n" + old.read_text().splitlines()[1] + "\n")
    with pytest.raises(InvalidArgumentError, match=r"'clue' opening \(line 2\)"):
        build_constructive(items, tools, mixed, progress=False)
    # a question that is its own clue (or blank) is searched once, and the thought says so
    from websailor.train.constructive import constructive_trajectory

    item = dict(items[0], question=items[0]["procedure"][0]["query"].upper())
    t = constructive_trajectory(item, tools)
    assert t.tool_calls[0].arguments["query"] == [item["procedure"][0]["query"]]
    assert "most specific clue I can look up" in t.messages[2]["content"]


def test_traj_stats_measures_what_a_file_teaches(vital: Corpus, kinds_build, tmp_path, smollm2_path, capsys):
    """``traj stats``: every visit of the constructive file grounded, one rejection per distractor
    trajectory, lookups as the question's own search shows them; the committed rollouts of a model
    that was never taught why (issue 38's starting point) are mostly ungrounded, and ``train sft``
    warns about such a file without refusing it."""
    from typer.testing import CliRunner

    from websailor.cli import app
    from websailor.judge.gold import Gold
    from websailor.train.sft_data import load_sft_data
    from websailor.train.traj_stats import question_search_lists, trajectory_stats

    _, items, out = kinds_build
    records = [json.loads(line) for line in out.read_text().splitlines()]
    res = CliRunner().invoke(app, ["traj", "stats", str(out), "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert s["trajectories"] == len(records) and s["sources"] == {"constructive": len(records)}
    assert s["visits"] == sum(1 for r in records for c in r["tool_calls"] if c["name"] == "visit") > 0
    assert s["visits_grounded"] == s["visits"] and s["grounded_share"] == 1.0
    distractors = sum(r["construction"] == "distractor" for r in records)
    assert s["with_rejection"] == s["rejections"] == distractors == s["constructions"]["distractor"]
    assert s["answers_grounded"] == s["answered"] == len(records)
    lookups = [question_search_lists(r["messages"], r["question"], Gold.parse(r["answer"])) for r in records]
    assert s["lookups"] == sum(x is True for x in lookups) and s["lookup_known"] == sum(x is not None for x in lookups)
    assert 0 < s["lookups"] < s["lookup_known"]  # both kinds of item: the short path and the clue
    text = CliRunner().invoke(app, ["traj", "stats", str(out)]).stdout
    assert f"visits with a grounded choice: {s['visits']} of {s['visits']} (100.0%)" in text
    assert CliRunner().invoke(app, ["traj", "stats", str(tmp_path / "none.jsonl")]).exit_code == 2

    rollouts = Path(__file__).parents[1] / "experiments/results/transfer_opening/eval_question/trajectories.jsonl"
    r = trajectory_stats(rollouts)
    assert r["trajectories"] == 80 and r["visits_grounded"] < 0.1 * r["visits"] and r["rejections"] == 0
    from transformers import AutoTokenizer

    capsys.readouterr()
    data = load_sft_data([out, rollouts], AutoTokenizer.from_pretrained(smollm2_path), 100_000)
    ungrounded = data.counts["visits"] - data.counts["visits_grounded"]
    assert ungrounded > 0 and data.counts["kept"] > len(records)  # kept, but counted
    assert f"{ungrounded} of {data.counts['visits']} visits in the kept trajectories" in capsys.readouterr().err


def test_traj_select_draws_the_lookup_share_and_reruns_to_the_same_file(kinds_build, tmp_path):
    """``traj select``: n trajectories of the pool with the asked share of lookups (as the
    question's own search shows them), the kind that runs short filled by the other, the same
    file on a rerun, and refusals that name the input."""
    from typer.testing import CliRunner

    from websailor.cli import app
    from websailor.errors import ConfigError, InputFormatError
    from websailor.train.traj_select import select_trajectories
    from websailor.train.traj_stats import trajectory_figures, trajectory_stats

    _, _, pool = kinds_build
    figures = [trajectory_figures(json.loads(line)) for line in pool.read_text().splitlines()]
    n_lookups = sum(bool(f["lookup"]) for f in figures)
    assert 4 <= n_lookups <= len(figures) - 4
    out = tmp_path / "sft.jsonl"
    res = CliRunner().invoke(app, ["traj", "select", "--from", str(pool), "--out", str(out), "--n", "8"])
    assert res.exit_code == 0, res.output
    assert f"8 of {len(figures)} trajectories written to" in res.stdout and "4 lookups" in res.stdout
    assert trajectory_stats(out)["lookups"] == 4 and trajectory_stats(out)["trajectories"] == 8
    pool_ids = {json.loads(line)["id"] for line in pool.read_text().splitlines()}
    kept = [json.loads(line) for line in out.read_text().splitlines()]
    assert len({r["id"] for r in kept}) == 8 and {r["id"] for r in kept} <= pool_ids
    before = out.read_bytes()
    again = CliRunner().invoke(app, ["traj", "select", "--from", str(pool), "--out", str(out), "--n", "8"])
    assert again.exit_code == 0 and "already in" in again.stdout and out.read_bytes() == before
    # another draw into the same file is refused, the file kept
    other = CliRunner().invoke(app, ["traj", "select", "--from", str(pool), "--out", str(out), "--seed", "1"])
    assert other.exit_code == 2 and "holds another selection" in other.output and out.read_bytes() == before
    # all lookups asked, more than there are: the clue kind fills in; a pool smaller than n gives all
    c = select_trajectories(pool, tmp_path / "all.jsonl", n_lookups + 2, 1.0, seed=0)
    assert (c["lookups"], c["clue"]) == (n_lookups, 2)
    assert select_trajectories(pool, tmp_path / "every.jsonl", 1000, 0.5)["kept"] == len(figures)
    assert select_trajectories(pool, tmp_path / "zero.jsonl", 0, 0.5)["kept"] == len(figures)  # 0: all
    for n, share in ((-1, 0.5), (5, 1.5)):
        with pytest.raises(ConfigError, match="--n -1|--lookup-share 1.5"):
            select_trajectories(pool, tmp_path / "bad.jsonl", n, share)
    missing = CliRunner().invoke(app, ["traj", "select", "--from", str(tmp_path / "no.jsonl"), "--out", str(out)])
    assert missing.exit_code == 2 and "no such file" in missing.output
    # files that are not trajectories, and outputs that would destroy something, are named
    first = pool.read_text().splitlines()[0]
    for lines, says in (
        ([first, json.dumps({"id": "q1", "question": "Q?", "answer": "A"})], "line 2 is not a trajectory record (it has no messages)"),
        ([first, json.dumps({"messages": [1, 2], "question": "Q?", "answer": "A"})], "line 2 is not a trajectory record (its messages are not"),
        ([json.dumps({"messages": [{"role": "user", "content": "x"}], "question": "Q?"})], "line 1 is not a trajectory record (it has no gold answer)"),
        ([first, json.dumps(json.loads(first) | {"termination": "format_error"})], "line 2: the trajectory ends without an answer (termination 'format_error')"),
    ):  # fmt: skip
        bad = tmp_path / "bad_pool.jsonl"
        bad.write_text("\n".join(lines) + "\n")
        with pytest.raises(InputFormatError, match=re.escape(says)):
            select_trajectories(bad, tmp_path / "never.jsonl", 1, 0.5)
    assert not (tmp_path / "never.jsonl").exists()
    bad.write_text(json.dumps({"messages": [1]}) + "\n")
    with pytest.raises(InputFormatError, match="line 1 is not a trajectory record \\(its messages are not a list"):
        trajectory_stats(bad)  # traj stats too, where it crashed
    copy = tmp_path / "pool_copy.jsonl"
    copy.write_bytes(pool.read_bytes())
    for target, says in (
        (copy, "is the pool (--from)"),
        (tmp_path, "is a folder"),
        (copy / "x.jsonl", "is a file, not a folder"),
    ):
        with pytest.raises(ConfigError, match=re.escape(says)):
            select_trajectories(copy, target, 3, 0.5)
    assert copy.read_bytes() == pool.read_bytes()
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b"caf\xe9\n")
    with pytest.raises(ConfigError, match="holds another selection"):
        select_trajectories(pool, latin, 3, 0.5)
    assert latin.read_bytes() == b"caf\xe9\n"
    empty = tmp_path / "empty.jsonl"
    empty.touch()
    assert select_trajectories(pool, empty, 3, 0.5)["written"] and len(empty.read_text().splitlines()) == 3
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_check_states_what_the_title_or_page_shows_and_its_verdict():
    from websailor.train.checks import Check, accepted, name_check, rejected

    initials = {
        "kind": "name",
        "params": {"style": "initials", "pattern": ["G", "M"]},
        "phrase": "whose initials are G. M.",
    }
    assert name_check(initials, "Gaspard Monge").line() == (
        '"it has the initials G. M.": its name, Gaspard Monge, has the initials G. M.: yes'
    )
    wrong = name_check(initials, "Technical drawing")
    assert not wrong.holds and wrong.line().endswith("its name, Technical drawing, has the initials T. D.: no")
    letters = {
        "kind": "name",
        "params": {"style": "letters", "pattern": [3, 8, "L"]},
        "phrase": "whose name has 3 words, the first with 8 letters, starting with L",
    }
    assert name_check(letters, "Leonardo da Vinci").holds
    assert (
        name_check(letters, "Nile (river)").shown == "its name, Nile (river), is one word of 4 letters, starting with N"
    )
    assert rejected("Technical drawing", wrong).endswith("Technical drawing is not the answer.")
    span = {"kind": "span_start", "params": {"lo": 1800, "hi": 1899}, "phrase": "founded in the 19th century"}
    ok = Check(span, 'its page says "It was founded in 1821."', True)
    text = accepted("X", [ok], " The page of Y led me to it.")
    assert text.endswith("The page of Y led me to it. Every condition checked fits, so the answer is X.")
    from websailor.eval.grounding import ACCEPT, REJECT

    assert ACCEPT.search(text) and REJECT.search(rejected("Technical drawing", wrong))  # what the eval counts


def test_imported_trajectories_are_kept_and_their_ungrounded_visits_counted(generated_chatml, tmp_path):
    from typer.testing import CliRunner

    from websailor.cli import app
    from websailor.train.traj_stats import trajectory_stats

    out = tmp_path / "imported.jsonl"
    res = CliRunner().invoke(
        app, ["traj", "build", "--source", "import", "--from", str(generated_chatml.path), "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    s = trajectory_stats(out)
    assert s["trajectories"] == generated_chatml.n_trajectories  # every one kept, whatever it teaches
    assert (
        f"{s['visits'] - s['visits_grounded']} of {s['visits']} visits in {out} open a page with no reason"
        in res.stdout
    )
