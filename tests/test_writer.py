"""The LLM writer (websailor.synth.writer) against a scripted OpenAI-compatible server: a
faithful question is kept, and a leak, a dropped constraint, a fact claimed but not stated, a
question no longer unique and a reply in prose are each rejected with their reason, never a
crash; the dataset loop counts the rejections by reason and synth stats reports them."""

import copy
import json
import random
import re

import pytest
from fakes import FakeOpenAIServer

from websailor.models import load_model
from websailor.synth import ItemConfig, SynthConfig, build_item, read_items, synthesize
from websailor.synth.constraints import Constraint, candidates
from websailor.synth.graph import KnowledgeGraph
from websailor.synth.phrasing import type_word
from websailor.synth.wording import wording_report
from websailor.synth.writer import survives, write_question


def _facts(item: dict) -> list[Constraint]:
    return [Constraint.from_dict(c) for c in item["constraints"]]


def _needed(kg: KnowledgeGraph, item: dict, c: Constraint) -> bool:
    """Whether the answer needs ``c`` to be unique."""
    return candidates(kg, [x for x in _facts(item) if x != c]) != [item["answer"]]


@pytest.fixture(scope="module")
def items(vital_kg: KnowledgeGraph) -> list[dict]:
    built = [build_item(vital_kg, random.Random(f"writer/{i}"), ItemConfig(level=4))[0] for i in range(300)]
    return [it for it in built if it]


def _question(kg: KnowledgeGraph, facts: list[Constraint]) -> str:
    """A rewording that keeps the content of ``facts``: another order, another frame."""
    clauses = [f"{c.phrase} it" if c.params.get("form") == "object" else f"it {c.phrase}" for c in reversed(facts)]
    return "Consider this: " + "; ".join(clauses) + ". What is it?"


def _reply(question: str, used: list) -> str:
    return "Here it is:\n```json\n" + json.dumps({"question": question, "facts_used": used}) + "\n```"


def test_the_writer_keeps_a_faithful_question_and_rejects_each_bad_one(vital_kg: KnowledgeGraph, items: list[dict]):
    kg = vital_kg
    # an item whose answer needs each of its facts, and one with a fact it can do without
    tight = next(it for it in items if len(it["constraints"]) >= 3 and all(_needed(kg, it, c) for c in _facts(it)))
    loose = next(it for it in items if any(c.kind not in ("linked",) and not _needed(kg, it, c) for c in _facts(it)))
    facts = _facts(tight)
    n = len(facts)
    good = _question(kg, facts)
    link = next(i for i, c in enumerate(facts, 1) if c.kind == "linked")
    value = next((i for i, c in enumerate(facts, 1) if c.kind != "linked"), None)
    script = [
        _reply(good, list(range(1, n + 1))),  # faithful
        _reply(good[:-1] + f", namely {tight['answer']}?", list(range(1, n + 1))),  # leaks the answer
        _reply(
            _question(kg, [c for i, c in enumerate(facts, 1) if i != link]), [i for i in range(1, n + 1) if i != link]
        ),
        _reply(_question(kg, [c for i, c in enumerate(facts, 1) if i != link]), list(range(1, n + 1))),  # claims it
        "Sure! The answer is a famous entity, and here is a question about it: what could it be",  # prose
        _reply("Which is it", list(range(1, n + 1))),  # not a question
        _reply(good, ["1", 2]),  # facts not as numbers
    ]
    expected = [
        "llm",
        "leaks_answer",
        "dropped_constraint",
        "dropped_constraint",
        "not_json",
        "not_a_question",
        "bad_facts",
    ]
    if value is not None:  # leaves out a value the answer needs
        script.append(
            _reply(
                _question(kg, [c for i, c in enumerate(facts, 1) if i != value]),
                [i for i in range(1, n + 1) if i != value],
            )
        )
        expected.append("not_unique")
    replies = iter(script)
    with FakeOpenAIServer(reply=lambda messages: next(replies)) as srv:
        model = load_model(f"openai:fake@{srv.url}")
        got = []
        for _ in expected:
            item = copy.deepcopy(tight)
            question, rendering = write_question(model, kg, item)
            got.append(rendering["mode"] if rendering["mode"] == "llm" else rendering["reason"])
            if rendering["mode"] == "llm":
                assert question == good and rendering["template"] == tight["question"]
                assert rendering["facts_used"] == list(range(1, n + 1)) and item["constraints"] == tight["constraints"]
            else:
                assert question == tight["question"] and item == tight  # nothing changed
        # the prompt gives the answer's type and every fact, and never the answer
        prompt = srv.bodies[0]["messages"][0]["content"]
        assert f"The answer is a {type_word(kg, tight['answer'])}" in prompt
        assert all(c.phrase in prompt for c in facts) and tight["answer"] not in prompt.split("Facts about")[0]
    assert got == expected
    # a question that leaves out a fact the answer does not need is kept, and the item narrowed
    spare = next(i for i, c in enumerate(_facts(loose), 1) if c.kind != "linked" and not _needed(kg, loose, c))
    kept = [c for i, c in enumerate(_facts(loose), 1) if i != spare]
    used = [i for i in range(1, len(_facts(loose)) + 1) if i != spare]
    with FakeOpenAIServer(reply=_reply(_question(kg, kept), used)) as srv:
        item = copy.deepcopy(loose)
        question, rendering = write_question(load_model(f"openai:fake@{srv.url}"), kg, item)
    assert rendering["mode"] == "llm" and rendering["facts_used"] == used
    assert item["constraints"] == [c.to_dict() for c in kept] and candidates(kg, kept) == [loose["answer"]]
    assert len(item["uncertainty"]) == len(loose["uncertainty"]) - 1
    assert all(survives(question, c) for c in kept)


def test_a_dead_writer_is_a_model_error_not_a_crash(vital_kg: KnowledgeGraph, items: list[dict]):
    with FakeOpenAIServer(bad_request="the model is overloaded") as srv:
        item = copy.deepcopy(items[0])
        question, rendering = write_question(load_model(f"openai:fake@{srv.url}"), vital_kg, item)
    assert question == items[0]["question"] and rendering["reason"] == "model_error"


def _writer_from_prompt(messages) -> str:
    """A writer that restates every fact of the prompt, except that it answers every third
    request in prose."""
    prompt = messages[0]["content"]
    if len(prompt) % 3 == 0:
        return "I would rather not write JSON today."
    facts = re.findall(r"^(\d+)\. (.+)$", prompt.split("A plain version")[0], flags=re.M)
    return _reply(
        "Consider this: " + "; ".join(f for _, f in reversed(facts)) + ". Which one is it?", [int(i) for i, _ in facts]
    )


def test_synthesis_with_the_writer_counts_rejections_by_reason(vital_kg: KnowledgeGraph, tmp_path):
    out = tmp_path / "qa.jsonl"
    with FakeOpenAIServer(reply=_writer_from_prompt) as srv:
        reasons = synthesize(
            vital_kg, out, SynthConfig(n=9, seed=3), progress=False, llm=load_model(f"openai:fake@{srv.url}")
        )
    items = read_items(out)
    modes = [it["rendering"]["mode"] for it in items]
    assert len(items) == 9 and reasons["rendered_llm"] == modes.count("llm") > 0
    assert reasons["writer_not_json"] == modes.count("template") > 0
    for it in items:
        if it["rendering"]["mode"] == "llm":
            assert it["question"].startswith("Consider this: ") and it["rendering"]["template"]
            assert candidates(vital_kg, _facts(it)) == [it["answer"]]
    report = wording_report(items)
    assert report["writer"] == {"llm": modes.count("llm"), "rejected": {"not_json": modes.count("template")}}


def test_text_that_is_not_a_clean_short_question_or_names_the_answer_unaccented_is_rejected(
    vital_kg: KnowledgeGraph, items: list[dict]
):
    from fakes import ScriptedModel

    from websailor.synth.constraints import fold, is_leak_free

    # a writer that drops the diacritics still names the answer
    assert not is_leak_free("Who founded judo, Kano Jigoro?", "Kanō Jigorō") and not is_leak_free(
        "JIGORO?", "Kanō Jigorō"
    )
    item = items[0]
    facts = _facts(item)
    good = _question(vital_kg, facts)
    used = list(range(1, len(facts) + 1))
    folded = fold(item["answer"]).upper()
    cases = {
        "bad_text": _reply(good[:-1] + " \x00\u202e?", used),
        "too_long": _reply(" ".join([good[:-1] + "."] * 8)[:-1] + "?", used),
        "leaks_answer": _reply(good[:-1] + f", that is {folded}?", used),
    }
    for reason, reply in cases.items():
        question, rendering = write_question(ScriptedModel([reply]), vital_kg, copy.deepcopy(item))
        assert rendering["mode"] == "template" and rendering["reason"] == reason, (reason, rendering)
        assert question == item["question"]
