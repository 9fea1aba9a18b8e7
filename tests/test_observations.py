"""Observation settings (--search-results, --snippet-chars, --evidence-chars, --observations) in
the real local tools, their records and resume checks, and evaluation figures by level."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from websailor.cli import app
from websailor.errors import ConfigError, InvalidArgumentError
from websailor.tools.environment import COMPACT_OBSERVATIONS, EnvSpec, open_environment

runner = CliRunner()
QUERY = "river flowing through Egypt and Sudan"
PAGE = "https://en.wikipedia.org/wiki/History_of_the_United_States"  # one of the longest pages
GOAL = "when the colonies declared independence and what followed"


def _results(observation: str) -> list[str]:
    """The snippets of a search observation (the line after each numbered result)."""
    lines = observation.splitlines()
    return [lines[i + 1] for i, line in enumerate(lines) if re.match(r"\d+\. \[", line)]


def _evidence(observation: str) -> str:
    return observation.split("Evidence in page:\n", 1)[1].split("\n\nSummary:\n", 1)[0]


def test_compact_settings_shorten_search_and_visit_observations(vital_dir: Path):
    paper = open_environment(EnvSpec(corpus=vital_dir))
    compact = open_environment(EnvSpec.from_options(corpus=vital_dir, observations="compact"))
    own = open_environment(EnvSpec(corpus=vital_dir, search_results=3, snippet_chars=90, evidence_chars=300))
    args = json.dumps({"query": [QUERY]})
    big, small, tiny = (_results(e.tools["search"](args)) for e in (paper, compact, own))
    assert len(big) == 10 and len(small) == COMPACT_OBSERVATIONS["search_results"] and len(tiny) == 3
    assert max(map(len, big)) > 160 and all(len(s) <= 300 for s in big)
    assert all(len(s) <= COMPACT_OBSERVATIONS["snippet_chars"] for s in small) and all(len(s) <= 90 for s in tiny)
    assert [s[:40] for s in small] == [s[:40] for s in big[:5]]  # the same best results, shorter
    # the description the model reads says how many results come back
    assert "its 10 best results" in paper.tools["search"].description
    assert (
        "its 5 best results" in compact.tools["search"].description and "its 3 best" in own.tools["search"].description
    )
    visit = json.dumps({"url": PAGE, "goal": GOAL})
    long, short, shortest = (_evidence(e.tools["visit"](visit)) for e in (paper, compact, own))
    assert len(long) > COMPACT_OBSERVATIONS["evidence_chars"]
    assert len(short) <= COMPACT_OBSERVATIONS["evidence_chars"] and len(shortest) <= 300
    assert shortest and long.startswith(shortest[:100])  # the passage that serves the goal most comes first
    for env in (paper, compact, own):
        env.close()
    assert paper.settings == {} and compact.settings == COMPACT_OBSERVATIONS


def test_bad_observation_values_are_refused_naming_the_option(vital_dir: Path):
    for field, option in (
        ("search_results", "--search-results"),
        ("snippet_chars", "--snippet-chars"),
        ("evidence_chars", "--evidence-chars"),
    ):
        with pytest.raises(ConfigError, match=f"^{option} must be a positive integer, got 0$"):
            EnvSpec.from_options(**{field: 0})
        with pytest.raises(ConfigError, match=f"^{option} must be a positive integer, got True$"):
            EnvSpec.from_options(**{field: True})
    with pytest.raises(ConfigError, match="^--observations must be one of paper, compact, got 'tiny'$"):
        EnvSpec.from_options(observations="tiny")
    res = runner.invoke(
        app, ["tool", "search", '{"query": ["Nile"]}', "--corpus", str(vital_dir), "--snippet-chars", "-4"]
    )
    assert res.exit_code == 2 and "error: --snippet-chars must be a positive integer, got -4" in res.stderr
    res = runner.invoke(app, ["tool", "search", '{"query": ["Nile"]}', "--observations", "huge"])
    assert res.exit_code == 2 and "--observations" in res.output


def test_presets_single_options_record_and_ignored():
    spec = EnvSpec.from_options(observations="compact", snippet_chars=200)
    assert spec.observations() == {**COMPACT_OBSERVATIONS, "snippet_chars": 200}
    assert EnvSpec.from_options(observations="paper") == EnvSpec()
    assert EnvSpec().record() == {} and EnvSpec(search_results=5).record() == {"search_results": 5}
    assert EnvSpec(search_results=5).record() != EnvSpec(search_results=6).record()
    assert spec.given() == ["--search-results", "--snippet-chars", "--evidence-chars"]
    assert EnvSpec(tools_url="http://h:1", search_results=5).ignored() == [
        "--search-results is ignored: the tools are the tool server's at http://h:1 (give it to `websailor serve tools`)"
    ]
    assert EnvSpec(tools_url="http://h:1", search_results=5).trajectory_settings() == {}
    assert EnvSpec.from_options(observations="compact", tools="search").ignored() == []  # the preset sets all three
    assert EnvSpec(kind="none", snippet_chars=50).ignored() == ["--snippet-chars is ignored: --env none has no tools"]
    # the paper's values given explicitly are the defaults, recorded as nothing (a resume with and
    # without them is the same run); a web snippet is the provider's unless cut, so 300 there is a setting
    assert EnvSpec(search_results=10, snippet_chars=300, evidence_chars=4000).observations() == {}
    assert EnvSpec(kind="web", snippet_chars=300).observations() == {"snippet_chars": 300}


def test_a_resumed_rl_run_with_other_observations_is_refused(tmp_path: Path):
    from websailor.train.run_folder import check_resume

    record = {"model": "m", **EnvSpec(search_results=5).record()}
    (tmp_path / "settings.json").write_text(json.dumps(record))  # what train rl saved
    (tmp_path / "summary.json").write_text("{}")  # and it trained
    assert check_resume(tmp_path, dict(record), "settings.json", "summary.json", "RL") is None  # the same: resumes
    for other in (EnvSpec(), EnvSpec(search_results=6)):
        with pytest.raises(ConfigError, match="holds an RL run with other search_results"):
            check_resume(tmp_path, {"model": "m", **other.record()}, "settings.json", "summary.json", "RL")


def _agent(spec: EnvSpec):
    from fakes import ScriptedModel, call

    from websailor.agent.session import open_agent

    def reply(msgs):
        if sum(m["role"] == "assistant" for m in msgs) == 0:
            return call("search", query=[QUERY])
        return "<answer>Nile</answer>" if "Cairo" in msgs[1]["content"] else "<answer>Paris</answer>"

    return open_agent(ScriptedModel(reply), spec)


def _levelled_qa(path: Path) -> Path:
    rows = [
        ("l1-a", "Which river flows through Cairo?", "Nile", 1),
        ("l1-b", "Which river flows through Cairo and Khartoum?", "Nile", 1),
        ("l2-a", "Which city is the capital of Italy?", "Rome", 2),
    ]
    path.write_text(
        "".join(
            json.dumps(
                {
                    "id": i,
                    "question": q,
                    "answer": a,
                    "aliases": [],
                    "split": "test",
                    "level": lv,
                    "topology_hash": "h",
                    "constraints": [],
                }
            )
            + "\n"  # fmt: skip
            for i, q, a, lv in rows
        )
    )
    return path


def test_eval_records_settings_refuses_other_values_and_gives_figures_by_level(vital_dir: Path, tmp_path: Path):
    from websailor.eval.harness import EvalConfig, evaluate
    from websailor.eval.report import summarize
    from websailor.eval.scoring import read_trajectories, score_trajectories
    from websailor.judge import load_judge
    from websailor.questions import load_questions

    qa = _levelled_qa(tmp_path / "qa.jsonl")
    items = load_questions(qa)
    assert [q.meta.get("level") for q in items] == [1, 1, 2]
    out = tmp_path / "ev"
    spec = EnvSpec(corpus=vital_dir, search_results=4, snippet_chars=120)
    with _agent(spec) as session:
        summary = evaluate(items, session.agent, load_judge("em"), out, EvalConfig(rollouts=2, concurrency=1),
                           bench="qa", progress=False)  # fmt: skip
    records = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    assert {json.dumps(r["env_settings"]) for r in records} == {'{"search_results": 4, "snippet_chars": 120}'}
    assert {r["level"] for r in records} == {1, 2}
    observation = records[0]["messages"][3]["content"]
    assert len(_results(observation)) == 4 and all(len(s) <= 120 for s in _results(observation))
    saved = json.loads((out / "summary.json").read_text())
    assert saved["env_settings"] == [{"search_results": 4, "snippet_chars": 120}]
    levels = saved["by_level"]
    assert list(levels) == ["1", "2"]
    assert levels["1"]["questions"] == 2 and levels["1"]["trajectories"] == 4 and levels["1"]["avg_at_k"] == 1.0
    assert levels["2"]["questions"] == 1 and levels["2"]["avg_at_k"] == 0.0 and levels["2"]["pass_at_k"] == 0.0
    assert levels["1"]["avg_at_k_ci95"] == [1.0, 1.0] and levels["1"]["mean_tool_calls"] == 1.0
    assert levels["2"]["terminations"] == {"answer": 2} and levels["2"]["format_validity"] == 1.0
    assert summary["avg_at_k"] == pytest.approx(2 / 3, abs=1e-4)  # the whole figures are unchanged
    report = (out / "report.md").read_text()
    assert "| 1 | 2 | 4 | 100.0 (100.0-100.0) | 100.0 | 100.0 | 1 | answer 4 |" in report
    assert "| 2 | 1 | 2 | 0.0 (0.0-0.0) | 0.0 | 100.0 | 1 | answer 2 |" in report
    assert "- observation settings: --search-results 4, --snippet-chars 120" in report
    # websailor score gives the same figures from the trajectories alone
    rescored = summarize(score_trajectories(read_trajectories([out / "trajectories.jsonl"]), load_judge("em"),
                                            progress=False), "qa")  # fmt: skip
    assert rescored["by_level"] == levels and rescored["env_settings"] == saved["env_settings"]
    res = runner.invoke(app, ["score", str(out / "trajectories.jsonl"), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["by_level"] == levels
    paper = tmp_path / "paper.jsonl"  # pooled with a run of the paper's settings: named
    paper.write_text("".join(json.dumps({**r, "id": f"p-{r['id']}", "env_settings": {}}) + "\n" for r in records))
    res = runner.invoke(app, ["score", str(out / "trajectories.jsonl"), str(paper), "--json"])
    assert (
        res.exit_code == 0
        and 'different observation settings ({"search_results": 4, "snippet_chars": 120}, {})' in res.stderr
    ), res.output
    # a rerun into the same --out with other values is refused, naming the option, before any model time
    res = runner.invoke(
        app,
        [
            "eval",
            "--bench",
            str(qa),
            "--out",
            str(out),
            "--corpus",
            str(vital_dir),
            "--search-results",
            "4",
            "--model",
            "openai:none@http://127.0.0.1:9/v1",
        ],  # fmt: skip
    )
    assert res.exit_code == 2, res.output
    assert "--snippet-chars 120 there, the default in this run" in res.stderr and "--search-results" not in res.stderr
    with (
        _agent(EnvSpec(corpus=vital_dir)) as session,
        pytest.raises(InvalidArgumentError, match="--search-results 4 there"),
    ):
        evaluate(items, session.agent, load_judge("em"), out, EvalConfig(rollouts=2), progress=False)


def test_no_levels_and_paper_settings_add_nothing_to_the_summary(vital_dir: Path, tmp_path: Path):
    from websailor.eval.harness import EvalConfig, evaluate
    from websailor.judge import Gold, load_judge
    from websailor.questions import Question

    items = [Question("nile", "Which river flows through Cairo?", Gold.parse("Nile"))]
    with _agent(EnvSpec(corpus=vital_dir)) as session:
        summary = evaluate(
            items, session.agent, load_judge("em"), tmp_path / "ev", EvalConfig(rollouts=1), progress=False
        )
    assert "by_level" not in summary and "env_settings" not in summary
    record = json.loads((tmp_path / "ev" / "trajectories.jsonl").read_text())
    assert "env_settings" not in record and "level" not in record
    assert "level" not in (tmp_path / "ev" / "report.md").read_text()


def test_run_out_refuses_other_observation_settings(vital_dir: Path, tmp_path: Path):
    out = tmp_path / "t.jsonl"
    out.write_text(
        json.dumps({"id": "q", "rollout": 0, "question": "x", "env_settings": {"evidence_chars": 800}}) + "\n"
    )
    res = runner.invoke(
        app,
        [
            "run",
            "--questions",
            str(_levelled_qa(tmp_path / "qa.jsonl")),
            "--out",
            str(out),
            "--corpus",
            str(vital_dir),
            "--model",
            "openai:none@http://127.0.0.1:9/v1",
        ],  # fmt: skip
    )
    assert res.exit_code == 2 and "--evidence-chars 800 there, the default in this run" in res.stderr


def test_constructive_trajectories_use_and_record_the_settings(vital, vital_dir: Path, smollm2_path: Path, tmp_path):
    from websailor.synth import SynthConfig, load_or_build, synthesize
    from websailor.train.sft_data import load_sft_data

    qa = tmp_path / "qa.jsonl"
    from websailor.tools.local import build_local_tools

    # replayed with compact observations at synthesis, so that both builds keep every item
    compact_tools = build_local_tools(vital, **COMPACT_OBSERVATIONS)
    synthesize(
        load_or_build(vital), qa, SynthConfig(n=3, seed=3, test_fraction=0.0), progress=False, tools=compact_tools
    )
    base = ["traj", "build", "--qa", str(qa), "--corpus", str(vital_dir)]
    paper, compact = tmp_path / "paper.jsonl", tmp_path / "compact.jsonl"
    assert runner.invoke(app, [*base, "--out", str(paper)]).exit_code == 0
    res = runner.invoke(app, [*base, "--out", str(compact), "--observations", "compact"])
    assert res.exit_code == 0 and "ignored" not in res.stderr, res.output
    big = [json.loads(x) for x in paper.read_text().splitlines()]
    small = [json.loads(x) for x in compact.read_text().splitlines()]
    assert all("env_settings" not in r for r in big) and all(r["env_settings"] == COMPACT_OBSERVATIONS for r in small)
    assert "its 5 best results" in small[0]["messages"][0]["content"]
    for b, s in zip(big, small):
        searches = [(x["content"], y["content"]) for x, y in zip(b["messages"][3::2], s["messages"][3::2])
                    if "## Web Results" in x["content"]]  # fmt: skip
        # per query of the call (the opening search queries the question and the clue): at most 5 results compact
        per_query = [(b.split("A search for ")[1:], c.split("A search for ")[1:]) for b, c in searches]
        assert searches and all(len(x) == len(y) for x, y in per_query)
        assert all(len(_results(q2)) <= 5 < len(_results(q1)) for x, y in per_query for q1, q2 in zip(x, y))
    assert sum(len(m["content"]) for r in small for m in r["messages"]) < sum(
        len(m["content"]) for r in big for m in r["messages"]
    )
    res = runner.invoke(app, [*base, "--out", str(compact), "--search-results", "7"])
    assert res.exit_code == 2 and "--search-results 5 there, 7 in this run" in res.stderr
    res = runner.invoke(app, [*base, "--out", str(compact), "--observations", "compact"])  # same values: resumes
    assert res.exit_code == 0 and "0 constructive trajectories written" in res.stdout
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_path)
    assert load_sft_data([paper], tokenizer, 100_000).observation_settings() == []
    data = load_sft_data([compact, paper], tokenizer, 100_000)
    assert data.observation_settings() == [
        {"settings": COMPACT_OBSERVATIONS, "trajectories": 3},
        {"settings": {}, "trajectories": 3},
    ]


def test_web_tools_take_the_same_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    from fakes import web_providers

    with web_providers(monkeypatch, tmp_path):
        with open_environment(EnvSpec(kind="web")) as paper:
            full = _results(paper.tools["search"]('{"query": ["Springfield"]}'))
        with open_environment(EnvSpec(kind="web", search_results=2, snippet_chars=20)) as env:
            assert "its 2 best results" in env.tools["search"].description
            cut = _results(env.tools["search"]('{"query": ["Springfield"]}'))
            scholar = env.tools["google_scholar"]('{"query": ["Springfield"]}')
            assert env.settings == {"search_results": 2, "snippet_chars": 20}
    assert len(full) == 10 and full[0] == "Snippet 1 about Springfield."  # the provider's snippet, whole
    assert cut == ["Snippet 1 about...", "Snippet 2 about..."]  # not the cached 10-result list
    assert "found 2 results" in scholar
