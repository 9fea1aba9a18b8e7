"""``websailor compare``: two real evaluations (the harness, a scripted policy, the em judge)
side by side; the verdict claims a gain only when the paired interval excludes zero."""

from pathlib import Path

import pytest
from fakes import ScriptedModel
from typer.testing import CliRunner

from websailor.agent import Agent
from websailor.cli.main import app
from websailor.errors import InvalidArgumentError
from websailor.eval.compare import compare_runs, load_scores, paired_bootstrap, to_markdown
from websailor.eval.harness import EvalConfig, evaluate
from websailor.judge import Gold, load_judge
from websailor.questions import Question

RIVERS = {"Cairo": "Nile", "Vienna": "Danube", "Paris": "Seine", "London": "Thames", "Rome": "Tiber", "Kyiv": "Dnieper"}
ITEMS = [
    Question(f"q{i}", f"Which river flows through {city}?", Gold.parse(r)) for i, (city, r) in enumerate(RIVERS.items())
]


def _answers(right: set[str]):
    """A policy that answers the questions of ``right`` correctly, the others wrongly, and
    writes no protocol at all for the first one outside ``right`` (a format error)."""

    def reply(messages):
        q = next(m["content"] for m in messages if m["role"] == "user")
        city = next(c for c in RIVERS if c in q)
        if city in right:
            return f"<answer>{RIVERS[city]}</answer>"
        return "the river" if city == "Cairo" else "<answer>Amazon</answer>"

    return reply


def _eval(tmp: Path, name: str, right: set[str], questions=ITEMS) -> Path:
    out = tmp / name
    agent = Agent(ScriptedModel(_answers(right)), [], env="none")
    evaluate(questions, agent, load_judge("em"), out, EvalConfig(rollouts=2, concurrency=2), progress=False)
    return out


def test_a_clear_gain_a_tie_and_the_flipped_questions(tmp_path: Path):
    base = _eval(tmp_path, "base", set())
    tuned = _eval(tmp_path, "tuned", set(RIVERS))
    c = compare_runs(load_scores(base), load_scores(tuned), ("base", "sft"))
    assert c.summaries[0]["avg_at_k"] == 0.0 and c.summaries[1]["avg_at_k"] == 1.0
    assert c.avg_diff == 1.0 and c.avg_diff_ci95 == (1.0, 1.0)
    assert c.verdict.startswith("sft is better than base") and len(c.only_b) == 6 and not c.only_a
    assert c.summaries[0]["format_validity"] < 1.0 == c.summaries[1]["format_validity"]
    assert "Format validity: 62.5% of the turns of base, 100.0% of those of sft." in c.verdict
    same = _eval(tmp_path, "same", {"Vienna"})
    other = _eval(tmp_path, "other", {"Paris"})
    tie = compare_runs(load_scores(same), load_scores(other), ("a", "b"))
    assert tie.verdict.startswith("No difference in accuracy is shown") and "includes 0" in tie.verdict
    assert tie.only_a == ["q1"] and tie.only_b == ["q2"] and len(tie.neither) == 4


def test_cli_table_and_refusals(tmp_path: Path):
    runner = CliRunner()
    base = _eval(tmp_path, "base", set())
    tuned = _eval(tmp_path, "tuned", {"Cairo", "Vienna", "Paris", "London", "Rome"})
    res = runner.invoke(app, ["compare", str(base), str(tuned), "--name", "base", "--name", "sft"])
    assert res.exit_code == 0, res.output
    assert "| format validity (% of turns) |" in res.output and "| Avg@2 (95% CI) | 0.0 (0.0-0.0) |" in res.output
    assert "sft is better than base" in res.output
    renamed = [Question(q.id, q.question.replace("flows through", "runs by"), q.gold) for q in ITEMS]
    moved = _eval(tmp_path, "moved", set(), renamed)
    res = runner.invoke(app, ["compare", str(base), str(moved)])
    assert res.exit_code != 0 and "different questions" in res.output and "'q0'" in res.output
    res = runner.invoke(app, ["compare", str(base), str(tmp_path / "nothing")])
    assert res.exit_code != 0 and "no such file" in res.output
    res = runner.invoke(app, ["compare", str(base), str(tuned), "--name", "only-one"])
    assert res.exit_code != 0 and "--name takes two labels" in res.output
    res = runner.invoke(app, ["compare", str(base), str(tuned), "--out", str(tuned / "scores.jsonl")])
    assert res.exit_code != 0 and "inside the run directory" in res.output and load_scores(tuned)
    res = runner.invoke(app, ["compare", str(base), str(tuned), "--name", "x", "--name", "x"])
    assert res.exit_code != 0 and "two different, non-empty labels" in res.output
    eight = tmp_path / "k8"
    agent = Agent(ScriptedModel(_answers(set())), [], env="none")
    evaluate(ITEMS, agent, load_judge("em"), eight, EvalConfig(rollouts=3, concurrency=2), progress=False)
    with pytest.raises(InvalidArgumentError, match="only comparable at the same k"):
        compare_runs(load_scores(base), load_scores(eight))
    fewer = _eval(tmp_path, "fewer", set(RIVERS), ITEMS[:3])
    c = compare_runs(load_scores(base), load_scores(fewer), ("base", "sft"))
    assert c.graded == (6, 3) and "Compared on the 3 questions both graded (base graded 6, sft 3)" in to_markdown(c)
    disjoint = _eval(tmp_path, "disjoint", set(), [Question("z" + q.id, q.question, q.gold) for q in ITEMS])
    with pytest.raises(InvalidArgumentError, match="no graded question in common"):
        compare_runs(load_scores(base), load_scores(disjoint))


def test_paired_bootstrap_brackets_the_mean_difference():
    lo, hi = paired_bootstrap([0.0, 0.5, 0.0, 1.0], [0.5, 0.5, 1.0, 1.0])
    assert lo <= 0.375 <= hi and hi <= 0.75
    with pytest.raises(ValueError, match="equally long"):
        paired_bootstrap([0.0], [])
