"""``eval --task report`` and ``score --task report`` end to end with scripted servers: a writer
whose report cites a supporting page, an unsupporting one, a page it never opened, a private URL
and a page that does not exist; a judge that scores by rules the test knows, so the RACE and FACT
figures below are computed by hand. A rerun costs no judge call; rescoring elsewhere is answered
by the judges' cache."""

import json
import re
from pathlib import Path

import pytest
from fakes import FakeOpenAIServer, call
from typer.testing import CliRunner

from websailor.cli.main import app
from websailor.corpus.urls import title_to_url
from websailor.eval.report_tasks import CRITERIA_FILE, QUERY_FILE, REFERENCE_FILE

runner = CliRunner()
NILE, EINSTEIN, PARIS = (title_to_url(t) for t in ("Nile", "Albert Einstein", "Paris"))
MISSING = title_to_url("No such page xyzzy")
REPORT = f"""# A short survey

## Rivers and people
The Nile flows through northeast Africa [1]. Einstein composed the Zorblax symphony [2].
Paris lies in France [3]. A private note [4]. A page that is gone says Quokka [5].

## References
[1] Nile - {NILE}
[2] Einstein - {EINSTEIN}
[3] Paris - {PARIS}
[4] Notes - http://127.0.0.1:8080/notes
[5] Gone - {MISSING}
"""
#: the FACT judge calls a statement supported when this word of it is on the page it was sent
KEYWORDS = ("Africa", "Zorblax", "France", "Quokka")
TARGET, REFERENCE_SCORE = 6, 4  # the RACE judge's score of every criterion, for each report


def writer(messages) -> str:
    """Search, visit the Nile and Einstein pages, then write :data:`REPORT` (never opening Paris)."""
    turn = sum(m["role"] == "assistant" for m in messages)
    script = [
        call("search", query=["Nile Egypt"]),
        call("visit", url=NILE, goal="the Nile in Egypt"),
        call("visit", url=EINSTEIN, goal="Einstein's work"),
    ]
    return script[turn] if turn < len(script) else f"<think>Done.</think>\n<answer>{REPORT}</answer>"


def judge(prompt: str) -> str:
    if '"dimension_weight"' in prompt:  # derive the criteria of a task that has none
        crits = {d: [{"criterion": f"{d} one", "explanation": "x", "weight": 1}] for d in
                 ("comprehensiveness", "insight", "instruction_following", "readability")}  # fmt: skip
        weights = {"comprehensiveness": 0.4, "insight": 0.3, "instruction_following": 0.2, "readability": 0.1}
        return json.dumps({"dimension_weight": weights, "criteria": crits})
    if "<report_1>" in prompt:  # RACE: every criterion the same score
        entries = []
        for cid in re.findall(r"^(C\d+)\. ", prompt, flags=re.M):
            e = {"id": cid, "reason": "by rule", "report_1": TARGET}
            if "<report_2>" in prompt:
                e["report_2"] = REFERENCE_SCORE
            entries.append(e)
        return json.dumps({"scores": entries})
    statement = re.search(r"<statement>\n(.*?)\n</statement>", prompt, re.S).group(1)
    page = re.search(r"<page [^>]*>\n(.*?)\n</page>", prompt, re.S).group(1)
    word = next(k for k in KEYWORDS if k in statement)
    verdict = "supported" if word in page else "unsupported"
    return json.dumps(
        {"verdict": verdict, "reason": f"{word} {'is' if verdict == 'supported' else 'is not'} on the page"}
    )


def reply(messages) -> str:
    if "# The report" in messages[0]["content"]:
        return writer(messages)
    return judge(messages[-1]["content"])


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture
def bench(tmp_path: Path) -> Path:
    root = tmp_path / "drb"
    tasks = [
        {"id": 51, "topic": "Geography", "language": "en", "prompt": "Survey the Nile and its people."},
        {"id": 52, "topic": "Science", "language": "en", "prompt": "Survey Einstein's life."},
        {"id": 1, "topic": "Geography", "language": "zh", "prompt": "调查尼罗河"},
    ]
    _write(root / QUERY_FILE, tasks)
    criteria = {
        "id": 51,
        "prompt": tasks[0]["prompt"],
        "dimension_weight": {"comprehensiveness": 0.3, "insight": 0.3, "instruction_following": 0.2, "readability": 0.2},
        "criterions": {
            d: [{"criterion": f"{d} a", "explanation": "x", "weight": 0.5}, {"criterion": f"{d} b", "explanation": "y", "weight": 0.5}]
            for d in ("comprehensiveness", "insight", "instruction_following", "readability")
        },
    }  # fmt: skip
    _write(root / CRITERIA_FILE, [criteria])
    _write(root / REFERENCE_FILE, [{"id": 51, "prompt": tasks[0]["prompt"], "article": "# Reference\n\nThe Nile."}])
    return root


def _judge_requests(srv: FakeOpenAIServer) -> int:
    return sum(b.get("model") == "j" for b in srv.bodies)


def test_eval_and_score_reports_end_to_end(bench: Path, vital_dir: Path, tmp_path: Path):
    out = tmp_path / "ev"
    with FakeOpenAIServer(reply) as srv:
        args = ["eval", "--task", "report", "--bench", str(bench), "--language", "en", "--model", f"openai:w@{srv.url}",
                "--judge", f"llm:openai:j@{srv.url}", "--corpus", str(vital_dir), "--rollouts", "1", "--out", str(out)]  # fmt: skip
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
        trajs = [json.loads(ln) for ln in (out / "trajectories.jsonl").read_text().splitlines()]
        assert sorted(t["id"] for t in trajs) == ["51", "52"]  # the zh task is left out
        refs = {r["n"]: r["problem"] for r in trajs[0]["report"]["references"]}
        assert refs == {1: None, 2: None, 3: "not_visited", 4: "private_url", 5: "not_visited"}

        race = {r["task_id"]: r for r in map(json.loads, (out / "race.jsonl").read_text().splitlines())}
        # task 51: relative, every dimension 6 / (6 + 4) = 0.6, and so overall
        assert race["51"]["mode"] == "relative" and race["51"]["overall"] == pytest.approx(0.6)
        assert all(d["score"] == pytest.approx(0.6) for d in race["51"]["dimensions"].values())
        # task 52: no criteria (derived by the judge), no reference: absolute 6 / 10
        assert race["52"]["mode"] == "absolute" and race["52"]["overall"] == pytest.approx(0.6)
        assert race["52"]["criteria_source"] == "derived"
        # RACE's judge reads the report without its citations
        race_prompts = [
            b["messages"][-1]["content"] for b in srv.bodies if "<report_1>" in b["messages"][-1]["content"]
        ]
        assert race_prompts and all("## References" not in p and "[1]" not in p for p in race_prompts)

        fact = {r["task_id"]: r for r in map(json.loads, (out / "fact.jsonl").read_text().splitlines())}
        verdicts = [(p["n"], p["verdict"]) for p in fact["51"]["pairs"]]
        # 1 Africa on the Nile page; 2 no Zorblax on Einstein's; 3 France on Paris's (never opened, still checked);
        # 4 private: never read; 5 does not exist: unreachable
        assert verdicts == [(1, "supported"), (2, "unsupported"), (3, "supported"), (5, "unreachable")]
        assert [u["problem"] for u in fact["51"]["unusable"]] == ["private_url"]
        assert fact["51"]["citation_accuracy"] == pytest.approx(2 / 3) and fact["51"]["effective_citations"] == 2

        summary = json.loads((out / "summary.json").read_text())
        assert summary["race"]["relative"]["overall"] == pytest.approx(0.6)
        assert summary["race"]["absolute"]["overall"] == pytest.approx(0.6)
        assert summary["fact"]["citation_accuracy"] == pytest.approx(2 / 3)
        assert summary["fact"]["effective_citations"] == pytest.approx(2.0)
        # per task: RACE 1 call (51), 2 (52: derive, score); FACT 3 judged pairs for 51, none for 52 (the
        # same report: its verdicts come from the cache)
        assert summary["judge_calls_per_task"] == {"race": 1.5, "fact": 1.5}
        assert summary["fact"]["cache_hits"] == 3
        assert summary["citation_problems"]["not_visited"] == 4 and summary["summarized_rollouts"] == 0
        report = (out / "report.md").read_text()
        assert "| relative | 1 | 1 | 60.0" in report and "| absolute | 1 | 1 | 60.0" in report
        assert "citation accuracy: 66.7%" in report

        before = _judge_requests(srv)
        res = runner.invoke(app, args)  # a rerun: everything is done
        assert res.exit_code == 0, res.output
        assert _judge_requests(srv) == before

        again = tmp_path / "again"  # rescoring into another folder: the judges' cache answers
        res = runner.invoke(app, ["score", "--task", "report", str(out / "trajectories.jsonl"), "--judge",
                                  f"llm:openai:j@{srv.url}", "--corpus", str(vital_dir), "--out", str(again), "--bench", str(bench),
                                  "--json"])  # fmt: skip
        assert res.exit_code == 0, res.output
        rescored = json.loads(res.stdout)
        assert _judge_requests(srv) == before
        assert rescored["fact"]["cache_hits"] == 6 and rescored["race"]["cache_hits"] == 2
        assert rescored["race"]["relative"]["overall"] == summary["race"]["relative"]["overall"]


def test_report_scoring_refuses_what_it_cannot_do(bench: Path, tmp_path: Path):
    res = runner.invoke(
        app, ["eval", "--task", "report", "--bench", str(bench), "--judge", "em", "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 2 and "RACE and FACT need a judge model" in res.stderr
    res = runner.invoke(
        app, ["eval", "--task", "report", "--bench", str(bench), "--language", "fr", "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 2 and "--language must be en or zh" in res.stderr
    qa = tmp_path / "qa.jsonl"
    qa.write_text(
        json.dumps({"id": "q", "rollout": 0, "question": "q?", "prediction": "a", "termination": "answer"}) + "\n"
    )
    res = runner.invoke(
        app,
        [
            "score",
            "--task",
            "report",
            str(qa),
            "--judge",
            "llm:openai:j@http://127.0.0.1:9",
            "--out",
            str(tmp_path / "s"),
        ],
    )
    assert res.exit_code == 2 and "is a QA trajectory" in res.stderr
    res = runner.invoke(app, ["score", "--task", "report", str(qa)])
    assert res.exit_code == 2 and "needs --out" in res.stderr
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"question": "q?", "answer": "a"}) + "\n")
    res = runner.invoke(
        app,
        [
            "eval",
            "--task",
            "report",
            "--bench",
            str(other),
            "--judge",
            "llm:openai:j@http://127.0.0.1:9",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert res.exit_code == 2 and "expected the fields id, topic, language, prompt" in res.stderr
