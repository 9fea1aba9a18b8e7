"""Rule-based judges: SQuAD-style normalization, aliases, lists, token F1 (hand-computed)."""

import pytest

from websailor.judge import exact_match, gold_answers, normalize_answer, token_f1


@pytest.mark.parametrize(
    "text, norm",
    [
        ("The  Nile River.", "nile river"),
        ("Leonardo da Vinci!", "leonardo da vinci"),
        ("An “Apple”", "apple"),
        ("Ｐａｒｉｓ", "paris"),
        ("Pelé", "pelé"),
        ("1,000 km", "1000 km"),
        ("1,2", "1 2"),
    ],
)
def test_normalize_answer(text, norm):
    assert normalize_answer(text) == norm


def test_exact_match_uses_aliases_and_lists():
    assert exact_match("the nile", "Nile")
    assert exact_match("Mercury", "Mercury (planet)", ["Mercury"])
    assert not exact_match("Mercury", "Mercury (planet)")
    assert exact_match("Barack Obama", ["Obama", "Barack Obama"])
    assert exact_match("1879", 1879)
    assert not exact_match(None, "Nile") and not exact_match("  ", "Nile")
    assert not exact_match("Nile River", "Nile")


def test_token_f1_hand_computed():
    # pred "nile river", gold "nile": p = 1/2, r = 1, f1 = 2/3
    assert token_f1("Nile River", "Nile") == pytest.approx(2 / 3)
    # pred "leonardo", gold "leonardo da vinci": p = 1, r = 1/3, f1 = 0.5
    assert token_f1("Leonardo", "Leonardo da Vinci") == pytest.approx(0.5)
    assert token_f1("Leonardo", "Leonardo da Vinci", ["Leonardo"]) == 1.0
    assert token_f1("Danube", "Nile") == 0.0 and token_f1(None, "Nile") == 0.0


def test_no_gold_answer_is_an_error_not_a_wrong_grade():
    for bad in (None, "", "  ", [], [None]):
        with pytest.raises(ValueError, match="no gold answer"):
            exact_match("Nile", bad)
    assert gold_answers(["Nile", ""], ["The Nile"]) == ["Nile", "The Nile"]


def test_fanoutqa_conventions_and_cjk_f1():
    assert exact_match("No", False) and exact_match("false", False) and not exact_match("yes", False)
    assert exact_match("920,000,000", "920000000")
    # Chinese is scored character by character: 2 of 3 predicted characters, all 2 gold ones
    assert token_f1("青海省", "青海") == pytest.approx(0.8)


# -- the LLM judge on servers that answer like OpenAI's reasoning models and vLLM's reasoning parsers
def _verdict(messages) -> str:
    import json

    prompt = messages[-1]["content"]
    ok = "[response]: The Nile" in prompt and "[correct_answer]: Nile" in prompt
    return json.dumps({"extracted_final_answer": "The Nile", "reasoning": "same river", "correct": "yes" if ok else "no",
                       "confidence": 90})  # fmt: skip


def test_the_llm_judge_grades_on_an_openai_reasoning_model():
    from fakes import FakeOpenAIServer

    from websailor.judge.base import Case, Gold
    from websailor.judge.llm import JUDGE_MAX_TOKENS, LLMJudge
    from websailor.models import load_model

    with FakeOpenAIServer(_verdict, reasoning_model=True) as srv:  # refuses max_tokens and temperature 0
        judge = LLMJudge(load_model(f"openai:j@{srv.url}", backoff_s=0.01), max_attempts=1, concurrency=2)
        grades = judge.grade([Case("Which river?", "The Nile", Gold.parse("Nile")),
                              Case("Which river?", "The Danube", Gold.parse("Nile"))])  # fmt: skip
    assert [g.correct for g in grades] == [True, False] and all(g.error is None for g in grades)
    last = srv.bodies[-1]
    assert last["max_completion_tokens"] == JUDGE_MAX_TOKENS and "max_tokens" not in last and "temperature" not in last
    assert last["top_p"] == 1.0 and last["presence_penalty"] == 0.0  # the defaults, accepted


def test_the_llm_judge_reads_the_verdict_after_a_reasoning_servers_thought():
    from fakes import FakeOpenAIServer

    from websailor.judge.base import Case, Gold
    from websailor.judge.llm import LLMJudge, parse_verdict
    from websailor.models import load_model

    thought = 'Draft: {"correct": "no"} -- but "The Nile" is the Nile, so yes.'
    with FakeOpenAIServer(_verdict, reasoning=thought, reasoning_field="reasoning_content") as srv:
        (grade,) = LLMJudge(load_model(f"openai:j@{srv.url}"), max_attempts=1).grade(
            [Case("Which river?", "The Nile", Gold.parse("Nile"))]
        )
    assert grade.correct is True and grade.reasoning == "same river"
    assert parse_verdict('<think>{"correct": "yes"}</think>\nI cannot tell.') is None  # the thought is no verdict
    assert parse_verdict('<think>maybe</think>\n{"correct": "no"}').correct is False
