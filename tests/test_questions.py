"""The one loader of question files: the same records whichever command reads them, questions
without answers for ``run``, all of a synth file's items for ``run``, every line checked first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from websailor.errors import InputFormatError
from websailor.questions import load_questions, resolve_split


def _write(path: Path, rows: list[object], blank_after_first: bool = False) -> Path:
    lines = [json.dumps(r) for r in rows]
    if blank_after_first:
        lines.insert(1, "")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_questions_without_answers_for_run_and_not_for_eval(tmp_path: Path):
    p = _write(tmp_path / "q.jsonl", [{"question": "Who painted the Mona Lisa?"}, {"question": "Where is Cairo?"}],
               blank_after_first=True)  # fmt: skip
    qs = load_questions(p, require_answer=False)
    assert [(q.id, q.gold, q.answer) for q in qs] == [("line1", None, None), ("line3", None, None)]
    with pytest.raises(
        InputFormatError, match="a question but no answer .*`websailor run --questions` takes questions alone"
    ):
        load_questions(p)


def test_aliases_must_be_a_list(tmp_path: Path):
    p = _write(tmp_path / "a.jsonl", [{"question": "Q?", "answer": "x", "aliases": "notalist"}])
    with pytest.raises(InputFormatError, match="record 1: 'aliases' must be a list of strings, got str"):
        load_questions(p)


def test_a_sheet_names_its_rows(tmp_path: Path):
    p = tmp_path / "q.csv"
    p.write_text("question,answer\nQ1?,x\n,y\n")
    with pytest.raises(InputFormatError, match="row 3: 'question' must be a non-empty string"):
        load_questions(p)
    p.write_text("question,answer\nQ1?,x\n")
    assert [q.id for q in load_questions(p)] == ["q-0"]


def test_answers_are_kept_as_given_and_as_gold(tmp_path: Path):
    p = _write(tmp_path / "nq.jsonl", [{"id": "n1", "question": "Capital of France?", "golden_answers": ["Paris", "paris, France"]}])  # fmt: skip
    (q,) = load_questions(p, require_answer=False)
    assert q.answer == ["Paris", "paris, France"] and q.gold.forms == ("Paris", "paris, France")
    assert q.with_gold_record().answer == {"answer": "Paris", "aliases": ["paris, France"], "parts": None}
    (q2,) = load_questions(p)
    assert q2 == q


def test_every_line_is_checked_and_the_first_five_problems_named(tmp_path: Path):
    p = tmp_path / "bad.jsonl"
    p.write_text("".join(['{"question": ""}\n', "[1]\n", "{oops\n", *['{"id": true, "question": "q"}\n'] * 4]))
    with pytest.raises(InputFormatError) as e:
        load_questions(p, require_answer=False)
    msg = str(e.value)
    assert "line 2: expected a JSON object, got list" in msg and "line 3: not valid JSON" in msg
    p.write_text("".join(['{"question": ""}\n', *['{"id": true, "question": "q"}\n'] * 6]))
    with pytest.raises(InputFormatError) as e:
        load_questions(p, require_answer=False)
    msg = str(e.value)
    assert msg.count("line ") == 5 and "(and 2 more)" in msg and "line 2: 'id' must be a string or an integer" in msg


def test_a_synth_file_gives_run_all_items_and_training_its_train_split(tmp_path: Path):
    rows = [{"id": f"sf-{i}", "question": f"Which river {i}?", "answer": "Nile", "topology_hash": "h", "constraints": [],
             "split": s} for i, s in enumerate(["train", "test", "train"])]  # fmt: skip
    qa = _write(tmp_path / "qa.jsonl", rows)
    assert resolve_split(qa, None, "all") == "all" and resolve_split(qa, "test", "all") == "test"
    assert [q.id for q in load_questions(qa, resolve_split(qa, None, "all"))] == ["sf-0", "sf-1", "sf-2"]
    assert [q.id for q in load_questions(qa, resolve_split(qa, None, "train"))] == ["sf-0", "sf-2"]
    assert [q.id for q in load_questions(qa)] == ["sf-1"]  # eval's default
    plain = _write(tmp_path / "plain.jsonl", [{"question": "q?", "answer": "a"}])
    assert resolve_split(plain, None, "train") is None


def test_run_reads_any_layout_through_the_loader(tmp_path: Path, vital_dir: Path):
    from fakes import FakeOpenAIServer

    from websailor.cli import app

    rows = [{"id": f"sf-{i}", "question": f"Which river {i}?", "answer": "Nile", "topology_hash": "h", "constraints": [],
             "split": s} for i, s in enumerate(["train", "test"])]  # fmt: skip
    qa = _write(tmp_path / "qa.jsonl", rows)
    out = tmp_path / "t.jsonl"
    with FakeOpenAIServer("<answer>Nile</answer>") as srv:
        res = CliRunner().invoke(app, ["run", "--questions", str(qa), "--out", str(out), "--model",
                                       f"openai:m@{srv.url}", "--corpus", str(vital_dir), "--env", "none"])  # fmt: skip
    assert res.exit_code == 0, res.output
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["id"], r["answer"], r["env"]) for r in recs) == [
        ("sf-0", "Nile", "none"),
        ("sf-1", "Nile", "none"),
    ]
    assert "--corpus is ignored: --env none has no tools" in res.stderr
