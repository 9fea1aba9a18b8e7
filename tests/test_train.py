"""Training data: constructive trajectories replayed through the real local tools."""

import json

from websailor.agent.parse import parse_turn
from websailor.agent.trajectory import Trajectory
from websailor.corpus import Corpus
from websailor.synth import SynthConfig, load_or_build, read_items, synthesize
from websailor.tools import build_local_tools
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


def test_import_webdancer_chatml_in_place(shared_data, tmp_path):
    import pytest

    from websailor.errors import InputFormatError
    from websailor.train.importer import read_chatml

    trajs = read_chatml(shared_data / "webdancer_sample_traj.jsonl")
    assert len(trajs) == 200 and all(t.termination == "answer" for t in trajs)
    t = trajs[0]
    assert t.question.startswith("In a prestigious British equestrian event") and t.answer["answer"] == "English horse race Derby"
    assert t.messages[1] == {"role": "user", "content": t.question} and "<tools>" in t.messages[0]["content"]
    assert t.num_tool_calls == 1 and "Epsom Derby" in t.prediction
    rec = json.loads((shared_data / "webdancer_sample_traj.jsonl").read_text().splitlines()[0])
    rec["messages"] = rec["messages"][:2] + [rec["messages"][3], rec["messages"][2]]  # tool turn before the call
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rec) + "\n")
    with pytest.raises(InputFormatError, match="line 1: the messages do not alternate"):
        read_chatml(bad)
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(InputFormatError, match="no trajectories"):
        read_chatml(tmp_path / "empty.jsonl")
