"""Evaluation: loaders in every layout (small files built here; BrowseComp samples encrypted
by the test itself), metrics with hand-computed values, scoring, the LLM judge, the harness."""

import csv
import json
from pathlib import Path

import pytest
from fixtures import NQSample

from websailor.errors import InputFormatError
from websailor.eval.metrics import avg_at_k, best_pass_at_1, bootstrap_ci, pass_at_k, per_run_accuracy
from websailor.judge import Case, Gold, load_judge
from websailor.questions import (
    canary_xor_encrypt,
    detect_format,
    load_questions,
    sha256_xor_decrypt,
    sha256_xor_encrypt,
)


# -- loaders ------------------------------------------------------------------------------------
def test_nq_sample_in_place(nq_sample: NQSample):
    items = load_questions(nq_sample.path)
    assert len(items) == nq_sample.n_items and items[0].id == nq_sample.first_id
    assert items[nq_sample.alternatives_index].gold.forms == nq_sample.alternatives  # golden_answers are alternatives


def _write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_browsecomp_csv_is_decrypted_with_each_rows_canary(tmp_path: Path):
    rows = [
        [sha256_xor_encrypt(q, c), sha256_xor_encrypt(a, c), "Art", c]
        for q, a, c in [
            ("Which river flows through Khartoum and Cairo?", "Nile", "canary-1"),
            ("Which painter made the Mona Lisa?", "Leonardo da Vinci", "canary-two"),
        ]
    ]
    path = _write_csv(tmp_path / "browse_comp_test_set.csv", ["problem", "answer", "problem_topic", "canary"], rows)
    items = load_questions(path)
    assert [(it.question, it.gold.answer, it.meta["topic"]) for it in items] == [
        ("Which river flows through Khartoum and Cairo?", "Nile", "Art"),
        ("Which painter made the Mona Lisa?", "Leonardo da Vinci", "Art"),
    ]
    assert sha256_xor_decrypt(rows[0][0], "canary-1") == "Which river flows through Khartoum and Cairo?"

    no_canary = _write_csv(tmp_path / "nc.csv", ["problem", "answer"], [r[:2] for r in rows])
    with pytest.raises(InputFormatError, match="cannot tell the benchmark layout"):
        load_questions(no_canary)
    with pytest.raises(InputFormatError, match="no 'canary' column"):
        load_questions(f"browsecomp:{no_canary}")
    wrong = _write_csv(
        tmp_path / "wrong.csv", ["problem", "answer", "canary"], [[r[0], r[1], "not-the-canary"] for r in rows]
    )
    with pytest.raises(InputFormatError, match="row 2: cannot decrypt with its canary"):
        load_questions(wrong)


def test_browsecomp_zh_xlsx_and_xbench_csv(tmp_path: Path):
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.append(["Topic", "Question", "Answer", "canary"])
    ws.append(
        [
            "历史",
            sha256_xor_encrypt("哪位皇帝修建了长城的大部分？", "zh-c"),
            sha256_xor_encrypt("秦始皇", "zh-c"),
            "zh-c",
        ]
    )
    wb.save(tmp_path / "browsecomp-zh-encrypted.xlsx")
    items = load_questions(tmp_path / "browsecomp-zh-encrypted.xlsx")
    assert items[0].question == "哪位皇帝修建了长城的大部分？" and items[0].gold.answer == "秦始皇"

    path = _write_csv(
        tmp_path / "DeepSearch.csv",
        ["id", "prompt", "type", "answer", "canary"],
        [
            [
                7,
                canary_xor_encrypt("2024年奥运会在哪座城市举办？", "xb-key"),
                "t",
                canary_xor_encrypt("巴黎", "xb-key"),
                "xb-key",
            ]
        ],
    )
    assert detect_format(path, [{"id": 1, "prompt": "", "answer": "", "canary": ""}]) == "xbench"
    items = load_questions(path)
    assert (items[0].id, items[0].question, items[0].gold.answer) == ("7", "2024年奥运会在哪座城市举办？", "巴黎")


def test_gaia_hle_fanoutqa_and_synth_layouts(tmp_path: Path):
    gaia = tmp_path / "metadata.jsonl"
    gaia.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {
                    "task_id": "a1",
                    "Question": "How many moons has Mars?",
                    "Level": 1,
                    "Final answer": "2",
                    "file_name": "",
                },
                {
                    "task_id": "a2",
                    "Question": "What is in the attached sheet?",
                    "Level": 2,
                    "Final answer": "5",
                    "file_name": "x.xlsx",
                },
            ]
        )
        + "\n"
    )
    items = load_questions(gaia)
    assert [(it.id, it.gold.answer, it.meta["level"]) for it in items] == [("a1", "2", 1)]  # text only

    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.Table.from_pylist(
            [
                {
                    "id": "h1",
                    "question": "What is 2+2?",
                    "image": "",
                    "answer": "4",
                    "answer_type": "exactMatch",
                    "category": "Math",
                },
                {
                    "id": "h2",
                    "question": "What is shown?",
                    "image": "data:image/png;base64,xx",
                    "answer": "a cat",
                    "answer_type": "exactMatch",
                    "category": "Other",
                },
            ]
        ),
        tmp_path / "test-00000-of-00001.parquet",
    )
    items = load_questions(tmp_path / "test-00000-of-00001.parquet")
    assert [it.id for it in items] == ["h1"] and items[0].meta["category"] == "Math"

    fan = tmp_path / "fanout-final-dev.json"
    fan.write_text(
        json.dumps(
            [
                {
                    "id": "f1",
                    "question": "Batting hands of the top picks?",
                    "answer": {"Pat Burrell": "Right", "Mark Mulder": "Left"},
                    "decomposition": [],
                },
                {"id": "f2", "question": "Which two cities?", "answer": ["Paris", "Rome"], "decomposition": []},
                {"id": "f3", "question": "How many?", "answer": 12, "decomposition": []},
            ]
        )
    )
    f1, f2, f3 = load_questions(fan)
    assert f1.gold.parts == ("Pat Burrell", "Right", "Mark Mulder", "Left") and f2.gold.parts == ("Paris", "Rome")
    assert f3.gold.answer == "12" and f3.gold.parts is None

    synth = tmp_path / "qa.jsonl"
    synth.write_text(
        "\n".join(
            json.dumps(
                {
                    "id": f"sf-{i}",
                    "question": f"Which river {i}?",
                    "answer": "Nile",
                    "aliases": ["The Nile"],
                    "topology_hash": "h",
                    "constraints": [],
                    "split": s,
                }
            )
            for i, s in enumerate(["train", "test", "test"])
        )
        + "\n"
    )
    assert [it.id for it in load_questions(synth)] == ["sf-1", "sf-2"]
    assert [it.id for it in load_questions(synth, split="all", limit=2)] == ["sf-0", "sf-1"]
    assert load_questions(synth)[0].gold.forms == ("Nile", "The Nile")
    with pytest.raises(InputFormatError, match="no items in split 'dev'"):
        load_questions(synth, split="dev")


def test_bad_benchmark_files(tmp_path: Path):
    no_answer = tmp_path / "q.jsonl"
    no_answer.write_text('{"question": "Which river?", "id": 1}\n')
    with pytest.raises(InputFormatError, match="cannot tell the benchmark layout"):
        load_questions(no_answer)
    with pytest.raises(InputFormatError, match="no 'answer' or 'golden_answers' column, which the jsonl layout needs"):
        load_questions(f"jsonl:{no_answer}")
    empty_answer = tmp_path / "e.jsonl"
    empty_answer.write_text('{"question": "Which river?", "answer": "  "}\n')
    with pytest.raises(InputFormatError, match="record 1: no gold answer"):
        load_questions(empty_answer)
    with pytest.raises(InputFormatError, match="does not exist"):
        load_questions(tmp_path / "missing.csv")
    garbage = tmp_path / "g.xlsx"
    garbage.write_text("not a workbook")
    with pytest.raises(InputFormatError, match="cannot read it"):
        load_questions(garbage)


# -- metrics (hand-computed) ------------------------------------------------------------------------
TABLE = [
    [True, False, True],  # question a: 2 of 3
    [False, False, False],  # b: 0 of 3
    [True, True, True],  # c: 3 of 3
    [False, True, False],
]  # d: 1 of 3


def test_metrics_hand_computed():
    assert per_run_accuracy(TABLE) == [0.5, 0.5, 0.5]
    assert avg_at_k(TABLE) == 0.5 and best_pass_at_1(TABLE) == 0.5
    assert pass_at_k(TABLE) == 0.75  # a, c, d solved at least once
    # unbiased pass@1 = mean of c/n = (2/3 + 0 + 1 + 1/3) / 4 = 0.5; pass@2 = mean(1 - C(n-c,2)/C(3,2))
    assert pass_at_k(TABLE, 1) == pytest.approx(0.5)
    assert pass_at_k(TABLE, 2) == pytest.approx((1 + 0 + 1 + (1 - 1 / 3)) / 4)
    skewed = [[True, True], [True, False], [False, False]]
    assert per_run_accuracy(skewed) == [2 / 3, 1 / 3] and best_pass_at_1(skewed) == 2 / 3 and avg_at_k(skewed) == 0.5


def test_ungraded_entries_are_left_out():
    table = [[True, None], [False, False]]
    assert per_run_accuracy(table) == [0.5, 0.0]
    assert pass_at_k(table) == 0.5  # question 1: one graded rollout, correct


def test_bootstrap_interval_brackets_the_estimate():
    table = TABLE * 25
    lo, hi = bootstrap_ci(table, n_resamples=500)
    assert lo < avg_at_k(table) < hi and 0.3 < lo and hi < 0.7
    assert bootstrap_ci([[True]] * 10) == (1.0, 1.0)


def test_metrics_refuse_ragged_tables():
    with pytest.raises(ValueError, match="same number of runs"):
        avg_at_k([[True, False], [True]])
    with pytest.raises(ValueError, match="k must be between 1 and 2"):
        pass_at_k([[True, False]], 3)


# -- LLM judge --------------------------------------------------------------------------------------
def _verdict(correct: str, extracted: str = "Nile") -> str:
    return json.dumps(
        {"extracted_final_answer": extracted, "reasoning": "same river", "correct": correct, "confidence": 90}
    )


def test_llm_judge_parses_retries_caches_and_never_counts_failures_as_wrong(tmp_path: Path):
    from fakes import ScriptedModel

    from websailor.errors import ModelError
    from websailor.judge.llm import LLMJudge

    case = Case("Which river flows through Cairo?", "It is the Nile.", Gold.parse("Nile"))
    model = ScriptedModel(["I think so.", "```json\n" + _verdict("yes") + "\n```"])
    judge = LLMJudge(model, cache=tmp_path / "judge.sqlite")
    (g,) = judge.grade([case])
    assert (g.correct, g.score, g.extracted, g.confidence) == (True, 1.0, "Nile", 90.0) and model.calls == 2
    # cached: a second judge over the same file does not call the model
    again = ScriptedModel([ModelError("down")])
    assert LLMJudge(again, cache=tmp_path / "judge.sqlite").grade([case])[0].correct is True and again.calls == 0
    # the endpoint is down: ungraded after the retries, with the error
    down = ScriptedModel([ModelError("HTTP 503")])
    (g,) = LLMJudge(down, max_attempts=3).grade([case])
    assert g.correct is None and g.score is None and "HTTP 503" in g.error and down.calls == 3
    # no final answer: wrong without asking the model
    silent = ScriptedModel([ModelError("never called")])
    (g,) = LLMJudge(silent).grade([Case("q", None, Gold.parse("Nile"))])
    assert g.correct is False and silent.calls == 0
    # the prompt carries the question, the response and the gold answer with its aliases
    seen = []
    spy = ScriptedModel(lambda msgs: (seen.append(msgs[0]["content"]), _verdict("no", "Danube"))[1])
    (g,) = LLMJudge(spy).grade([Case("Which river?", "Danube", Gold.parse("Nile", ["The Nile"]))])
    assert (
        g.correct is False
        and "[correct_answer]: Nile (also accepted: The Nile)" in seen[0]
        and "[response]: Danube" in seen[0]
    )


def test_load_judge_specs():
    from websailor.errors import ConfigError

    assert load_judge("em").name == "em" and load_judge("f1").name == "f1" and load_judge("f1:0.8").name == "f1:0.8"
    for bad in ("", "gpt", "llm:", "f1:x", "f1:2"):
        with pytest.raises(ConfigError):
            load_judge(bad)


# -- scoring ---------------------------------------------------------------------------------------
from websailor.eval.scoring import read_trajectories, rollouts_per_question, score_table, score_trajectories  # noqa: E402


def _traj(qid: str, rollout: int, prediction, answer="Nile", tools: int = 2, termination: str = "answer") -> dict:
    return {
        "id": qid,
        "rollout": rollout,
        "question": f"question {qid}?",
        "answer": answer,
        "prediction": prediction,
        "termination": termination,
        "num_tool_calls": tools,
        "num_model_calls": tools + 1,
        "tokens": {"prompt": 100, "completion": 10},
        "timings": {"total_s": 1.5},
        "model": "m",
        "env": "local",
    }


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_scoring_resumes_and_builds_the_table(tmp_path: Path):
    recs = [
        _traj("a", 0, "the Nile"),
        _traj("a", 1, "Danube"),
        _traj("b", 0, None, termination="max_calls"),
        _traj("b", 1, "nile", answer={"answer": "Nile", "aliases": [], "parts": None}),
    ]
    path = _write(tmp_path / "t.jsonl", recs)
    records = read_trajectories([path])
    assert rollouts_per_question(records) == 2
    scores = score_trajectories(records, load_judge("em"), tmp_path / "scores.jsonl", progress=False)
    assert [s.correct for s in scores] == [True, False, False, True]
    assert score_table(scores) == (["a", "b"], [[True, False], [False, True]])
    # resumed: nothing is graded twice
    before = (tmp_path / "scores.jsonl").read_text()
    score_trajectories(records, load_judge("em"), tmp_path / "scores.jsonl", progress=False)
    assert (tmp_path / "scores.jsonl").read_text() == before


def test_bad_trajectory_files(tmp_path: Path):
    mixed = _write(tmp_path / "m.jsonl", [_traj("a", 0, "x"), _traj("a", 1, "x"), _traj("b", 0, "x")])
    with pytest.raises(
        InputFormatError, match="mix different numbers of rollouts per question: 1 with 1 .*'b'.*; 1 with 2"
    ):
        rollouts_per_question(read_trajectories([mixed]))
    two_files = [
        _write(tmp_path / "k1.jsonl", [_traj("a", 0, "x")]),
        _write(tmp_path / "k2.jsonl", [_traj("b", 0, "x"), _traj("b", 1, "y")]),
    ]
    with pytest.raises(InputFormatError, match="mix different numbers"):
        rollouts_per_question(read_trajectories(two_files))
    no_pred = _traj("a", 0, "x")
    del no_pred["prediction"]
    with pytest.raises(InputFormatError, match="line 1: not a trajectory record \\(no prediction\\)"):
        read_trajectories([_write(tmp_path / "np.jsonl", [no_pred])])
    with pytest.raises(InputFormatError, match="no usable gold answer"):
        read_trajectories([_write(tmp_path / "ng.jsonl", [_traj("a", 0, "x", answer="  ")])])
    # no answer at all: a question asked without one, read and left ungraded (never wrong)
    [rec] = read_trajectories([_write(tmp_path / "none.jsonl", [_traj("a", 0, "x", answer=None)])])
    [s] = score_trajectories([rec], load_judge("em"), progress=False)
    assert s.correct is None and s.ungraded_for == "no_gold_answer"
    with pytest.raises(InputFormatError, match="also appears in"):
        read_trajectories([_write(tmp_path / "d.jsonl", [_traj("a", 0, "x"), _traj("a", 0, "y")])])


# -- harness ---------------------------------------------------------------------------------------
def test_evaluate_runs_grades_and_reports(vital, tmp_path: Path):
    from fakes import ScriptedModel, call

    from websailor.agent import Agent, AgentConfig
    from websailor.eval.harness import EvalConfig, evaluate
    from websailor.models.base import SamplingParams
    from websailor.questions import Question
    from websailor.tools.local import build_local_tools

    items = [
        Question("nile", "Which river flows through Cairo?", Gold.parse("Nile")),
        Question("mona", "Who painted the Mona Lisa?", Gold.parse("Leonardo da Vinci", ["Leonardo"])),
    ]

    def reply(msgs):  # (mona: one reply off the protocol first) search once, then answer ("Leonardo" is an alias)
        mona = "Mona" in msgs[1]["content"]
        turn = sum(m["role"] == "assistant" for m in msgs)
        if mona and turn == 0:
            return "I am not sure."
        if turn == int(mona):
            return call("search", query=[msgs[1]["content"]])
        return (
            "<think>found</think><answer>Nile</answer>"
            if "Cairo" in msgs[1]["content"]
            else "<answer>Leonardo</answer>"
        )

    agent = Agent(ScriptedModel(reply), build_local_tools(vital), AgentConfig(max_calls=4))
    out = tmp_path / "ev"
    summary = evaluate(
        items, agent, load_judge("em"), out, EvalConfig(rollouts=2, concurrency=2), bench="tiny", progress=False
    )
    assert (
        summary["avg_at_k"] == 1.0 and summary["pass_at_k"] == 1.0 and summary["k"] == 2 and summary["questions"] == 2
    )
    assert summary["mean_tool_calls"] == 1.0 and summary["terminations"] == {"answer": 4}
    assert summary["accuracy_by_tool_calls"] == {"1-2": {"n": 4, "accuracy": 1.0}}
    assert (
        summary["assistant_turns"] == 10 and summary["format_validity"] == 0.8
    )  # 2 x (2 + 3) turns, 2 off the protocol
    for name in (
        "trajectories.jsonl",
        "scores.jsonl",
        "summary.json",
        "report.md",
        "accuracy_by_tool_calls.png",
        "terminations.png",
        "pass_at_j.png",
    ):
        assert (out / name).stat().st_size > 0
    report = (out / "report.md").read_text()
    assert "judge: em" in report and "| 100.0 (100.0-100.0) | 100.0 | 100.0 |" in report
    assert "Format validity: 80.0% of 10 assistant turns" in report
    traj = json.loads((out / "trajectories.jsonl").read_text().splitlines()[0])
    assert traj["answer"]["answer"] in ("Nile", "Leonardo da Vinci")  # the gold travels with aliases
    # each rollout records how it sampled, and the report says it
    turn = agent.model.turn_tokens
    assert traj["sampling"] == {
        "temperature": 0.85,
        "top_p": 0.95,
        "presence_penalty": 1.1,
        "max_calls": 4,
        "max_tokens_per_turn": turn,
        "max_context_tokens": 128_000,
    }
    assert summary["sampling"] == [{**traj["sampling"], "rollouts": 4}]
    assert f"- sampling: temperature 0.85, top-p 0.95, presence penalty 1.1, at most 4 calls of {turn} tokens" in report
    # a third rollout at another temperature into the same folder: the report says the settings are mixed
    hot = AgentConfig(max_calls=4, sampling=SamplingParams(temperature=1.0, top_p=1.0))
    agent = Agent(ScriptedModel(reply), build_local_tools(vital), hot)
    summary = evaluate(items, agent, load_judge("em"), out, EvalConfig(rollouts=3), bench="tiny", progress=False)
    assert [(e["temperature"], e["rollouts"]) for e in summary["sampling"]] == [(0.85, 4), (1.0, 2)]
    report = (out / "report.md").read_text()
    assert "- sampling (MIXED: the rollouts were sampled with different settings): temperature 0.85" in report
    assert "(4 of 6 rollouts); temperature 1.0, top-p 1.0" in report


def test_report_states_ungraded_and_leaves_them_out():
    from websailor.eval.report import summarize, to_markdown
    from websailor.eval.scoring import Score

    def sc(qid, r, correct):
        return Score(
            qid,
            r,
            "llm:j",
            correct,
            None if correct is None else float(correct),
            None,
            None,
            None,
            None if correct is not None else "judge endpoint error: HTTP 503",
            "answer",
            3,
            4,
            100,
            10,
            2.0,
            "m",
            "local",
        )

    s = summarize([sc("a", 0, True), sc("a", 1, None), sc("b", 0, False), sc("b", 1, None)])
    assert s["ungraded"] == 2 and s["avg_at_k"] == 0.5 and s["per_run_accuracy"] == [0.5, None]
    assert s["ungraded_for"] == {"judge": 2}
    assert "ungraded: 2 (judge 2; left out of every figure)" in to_markdown(s)
    s = summarize([sc("a", 0, None)])
    assert s["avg_at_k"] is None and "n/a" in to_markdown(s)
    # the interval depends on the grades, not on the order the rollouts finished in (a resumed run)
    import random

    rng = random.Random(0)
    many = [sc(f"q{i:02d}", r, rng.random() < 0.6) for i in range(40) for r in range(3)]
    shuffled = random.Random(1).sample(many, len(many))
    assert summarize(shuffled)["avg_at_k_ci95"] == summarize(many)["avg_at_k_ci95"]


def test_stored_grades_are_reused_only_for_the_same_case_and_ungraded_ones_are_retried(tmp_path: Path):
    from fakes import ScriptedModel

    from websailor.errors import ModelError
    from websailor.judge.llm import LLMJudge

    out = tmp_path / "scores.jsonl"
    first = read_trajectories([_write(tmp_path / "a.jsonl", [_traj("a", 0, "Danube")])])
    assert [s.correct for s in score_trajectories(first, load_judge("em"), out, progress=False)] == [False]
    # the same (id, rollout) with another prediction is graded anew, not given the stored grade
    second = read_trajectories([_write(tmp_path / "b.jsonl", [_traj("a", 0, "Nile")])])
    assert [s.correct for s in score_trajectories(second, load_judge("em"), out, progress=False)] == [True]
    # an ungraded rollout (judge down) is graded again on the next run
    down = LLMJudge(ScriptedModel([ModelError("503")]), max_attempts=1)
    down.name = "llm:j"
    assert [s.correct for s in score_trajectories(second, down, out, progress=False)] == [None]
    up = LLMJudge(ScriptedModel([_verdict("yes")]))
    up.name = "llm:j"
    assert [s.correct for s in score_trajectories(second, up, out, progress=False)] == [True]


def test_model_errors_are_ungraded_and_superseded_by_a_rerun(tmp_path: Path):
    failed = _traj("a", 0, None, termination="model_error")
    path = _write(tmp_path / "t.jsonl", [failed, _traj("b", 0, "Nile")])
    scores = score_trajectories(read_trajectories([path]), load_judge("em"), progress=False)
    assert [s.correct for s in scores] == [None, True] and "model error" in scores[0].error
    # a resumed run appends the rerun: it replaces the failed record
    _write(tmp_path / "t.jsonl", [failed, _traj("b", 0, "Nile"), _traj("a", 0, "Nile")])
    scores = score_trajectories(read_trajectories([path]), load_judge("em"), progress=False)
    assert sorted((s.id, s.correct) for s in scores) == [("a", True), ("b", True)]


def test_malformed_trajectory_fields_are_named(tmp_path: Path):
    for field, value, message in [
        ("rollout", "abc", "'rollout' must be an integer"),
        ("rollout", None, "'rollout' must be an integer"),
        ("prediction", 12, "'prediction' must be text or null"),
        ("tokens", "many", "'tokens' must be an object"),
        ("num_tool_calls", "x", "'num_tool_calls' must be an integer"),
        ("answer", [["Paris"]], "no usable gold answer"),
    ]:
        rec = _traj("a", 0, "Nile")
        rec[field] = value
        with pytest.raises(InputFormatError, match=message):
            read_trajectories([_write(tmp_path / "bad.jsonl", [rec])])


def test_loader_messages_count_records_of_the_file(tmp_path: Path):
    gaia = tmp_path / "metadata.jsonl"
    gaia.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"task_id": "a1", "Question": "Q1?", "Final answer": "1", "file_name": "x.png"},
                {"task_id": "a2", "Question": "Q2?", "Final answer": "2", "file_name": ""},
                {"task_id": "a3", "Question": "Q3?", "Final answer": "", "file_name": ""},
            ]
        )
        + "\n"
    )
    with pytest.raises(InputFormatError, match="record 3: no gold answer"):
        load_questions(gaia)
    with pytest.raises(InputFormatError, match="--split applies to synthesized QA items only"):
        load_questions(tmp_path / "metadata.jsonl", split="test")


def test_em_normalizes_every_script():
    from websailor.judge import exact_match, normalize_answer

    assert normalize_answer("Pa\u200bris\u00ad") == "paris"
    assert exact_match("秦始皇。", "秦始皇") and exact_match("\ufeffNile\u200e", "Nile")


def test_eval_reruns_rollouts_that_hit_model_errors(tmp_path: Path):
    from fakes import ScriptedModel

    from websailor.agent import Agent
    from websailor.errors import ModelError
    from websailor.eval.harness import EvalConfig, evaluate
    from websailor.questions import Question

    items = [Question("nile", "Which river flows through Cairo?", Gold.parse("Nile"))]
    down = Agent(ScriptedModel([ModelError("HTTP 503")]), [], env="none")
    s = evaluate(items, down, load_judge("em"), tmp_path, EvalConfig(rollouts=2), progress=False)
    assert s["ungraded"] == 2 and s["avg_at_k"] is None and s["terminations"] == {"model_error": 2}
    up = Agent(ScriptedModel(["<answer>Nile</answer>"]), [], env="none")
    s = evaluate(items, up, load_judge("em"), tmp_path, EvalConfig(rollouts=2), progress=False)
    assert s["ungraded"] == 0 and s["avg_at_k"] == 1.0 and s["trajectories"] == 2


def test_a_question_file_without_answers_is_evaluated_as_ungraded(tmp_path: Path):
    """``eval --bench`` of questions without gold answers runs them and reports them ungraded
    (never wrong, and no outage: exit 0); a file mixing both grades the ones with an answer."""
    from fakes import FakeOpenAIServer
    from typer.testing import CliRunner

    from websailor.cli import app

    qs = tmp_path / "mine.jsonl"
    qs.write_text(
        '{"id": "a", "question": "Capital of France?"}\n'
        '{"id": "b", "question": "Capital of Italy?", "answer": null}\n'
        '{"id": "c", "question": "Capital of France, again?", "answer": "Paris"}\n'
    )
    with FakeOpenAIServer("<answer>Paris</answer>") as srv:
        out = tmp_path / "ev"
        args = ["eval", "--bench", str(qs), "--out", str(out), "--env", "none", "--model", f"openai:m@{srv.url}"]
        res = CliRunner().invoke(app, [*args, "--rollouts", "2"])
        assert res.exit_code == 0, res.output
        assert "2 of 3 questions in" in res.stdout and "have no gold answer: their rollouts are ungraded" in res.stdout
        s = json.loads((out / "summary.json").read_text())
        assert s["trajectories"] == 6 and s["ungraded"] == 4 and s["ungraded_for"] == {"no_gold_answer": 4}
        assert s["avg_at_k"] == 1.0 and s["pass_at_k"] == 1.0  # c alone is graded
        scores = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
        assert {(x["id"], x["correct"]) for x in scores} == {("a", None), ("b", None), ("c", True)}
        assert "no gold answer 4; left out of every figure" in (out / "report.md").read_text()
        # a file of questions alone: every rollout ungraded, still exit 0 (the rollouts are the result)
        only = tmp_path / "only.jsonl"
        only.write_text('{"id": "a", "question": "Capital of France?"}\n')
        res = CliRunner().invoke(app, [*args[:2], str(only), "--out", str(tmp_path / "ev2"), *args[5:]])
        assert res.exit_code == 0, res.output
        s = json.loads((tmp_path / "ev2" / "summary.json").read_text())
        assert s["ungraded_for"] == {"no_gold_answer": s["trajectories"]} and s["avg_at_k"] is None
