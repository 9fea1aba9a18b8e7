"""Training data: constructive trajectories replayed through the real local tools."""

import json

from fixtures import ChatMLSample

from websailor.agent.parse import parse_turn
from websailor.agent.trajectory import Trajectory
from websailor.corpus import Corpus
from websailor.synth import SynthConfig, load_or_build, read_items, synthesize
from websailor.tools.local import build_local_tools
from websailor.train.constructive import build_constructive


def test_constructive_trajectories_follow_the_protocol_and_reach_the_answer(vital: Corpus, tmp_path):
    qa = tmp_path / "qa.jsonl"
    synthesize(load_or_build(vital), qa, SynthConfig(n=20, seed=3, test_fraction=0.0), progress=False)
    out = tmp_path / "sft.jsonl"
    tools = build_local_tools(vital)
    assert build_constructive(read_items(qa), tools, out, progress=False) == (20, 0)
    assert build_constructive(read_items(qa), tools, out, progress=False) == (0, 20)  # resumed: nothing twice
    for line in out.read_text().splitlines():
        t = Trajectory.from_dict(json.loads(line))
        roles = [m["role"] for m in t.messages]
        assert roles[:2] == ["system", "user"] and roles[2:] == ["assistant", "user"] * t.num_tool_calls + ["assistant"]
        actions = [parse_turn(m["content"]) for m in t.messages if m["role"] == "assistant"]
        assert all(a.error is None for a in actions) and actions[-1].answer == t.answer["answer"] == t.prediction
        assert all(c.error is None for c in t.tool_calls)  # every call ran for real
        observations = [m["content"] for m in t.messages[3::2]]
        assert all(o.startswith("<tool_response>") for o in observations)
        # the first hop's page, read for the question, names the answer
        assert t.answer["answer"].lower() in observations[1].lower()


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
    flt = ExpertFilter(max_tokens=32768, min_tool_calls=1)
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
        flt=ExpertFilter(max_tokens=100, min_tool_calls=1),
        progress=False,
    )
    assert model.calls == calls and again["written"] == 0 and again["too_long"] == 2 * n_right


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
