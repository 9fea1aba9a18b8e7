"""RL on reports: the RACE score of each rollout's report is its reward (a scripted judge scores
by a rule the test knows, so rewards and advantages are computed by hand), one TRL step runs with
``task: report``, summarized rollouts are refused by token-exact RL, and bad settings are named."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fakes import FakeOpenAIServer, ScriptedModel, call

from websailor.agent.loop import Agent, AgentConfig
from websailor.errors import ConfigError
from websailor.eval.report_tasks import CRITERIA_FILE, QUERY_FILE, REFERENCE_FILE
from websailor.models import load_model
from websailor.tools.environment import EnvSpec
from websailor.train.rl import RLSettings, load_settings, train_rl
from websailor.train.rl.report_reward import ReportJudge, read_rubric, report_training_tasks
from websailor.train.rl.rollouts import AgentRollouts, RolloutSettings
from websailor.train.rl_log import read_log
from websailor.train.rollout_tokens import rollout_tokens
from websailor.train.sft import load_tokenizer

DIMS = ("comprehensiveness", "insight", "instruction_following", "readability")
PROMPT = "Survey the rivers of Africa."
REFERENCE_SCORE = 5


def race_judge(messages) -> str:
    """Scores report_1 on every criterion by how often it says 'river' (capped at 10), the
    reference at 5; derives one criterion per dimension when asked."""
    prompt = messages[-1]["content"]
    if '"dimension_weight"' in prompt:
        return json.dumps({"dimension_weight": {d: 1 for d in DIMS},
                           "criteria": {d: [{"criterion": f"{d} c", "explanation": "x", "weight": 1}] for d in DIMS}})  # fmt: skip
    report = re.search(r"<report_1>\n(.*?)\n</report_1>", prompt, re.S).group(1)
    target = min(10, len(re.findall(r"\briver\b", report, re.I)))
    entries = [{"id": cid, "reason": "rule", "report_1": target, "report_2": REFERENCE_SCORE}
               for cid in re.findall(r"^(C\d+)\. ", prompt, re.M)]  # fmt: skip
    return json.dumps({"scores": entries})


def _bench(root: Path, with_criteria: bool = True) -> Path:
    def write(path: Path, rows: list[dict]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    write(root / QUERY_FILE, [{"id": 7, "topic": "Geography", "language": "en", "prompt": PROMPT}])
    if with_criteria:
        crit = {d: [{"criterion": f"{d} one", "explanation": "x", "weight": 1.0}] for d in DIMS}
        write(
            root / CRITERIA_FILE,
            [{"id": 7, "prompt": PROMPT, "dimension_weight": {d: 0.25 for d in DIMS}, "criterions": crit}],
        )
    write(root / REFERENCE_FILE, [{"id": 7, "prompt": PROMPT, "article": "# Rivers\n\nThe Nile."}])
    return root


def _report(rivers: int) -> str:
    return (
        "<answer># Rivers\n\n"
        + " ".join(["The river flows [1]."] * rivers)
        + "\n\n## References\n[1] https://en.wikipedia.org/wiki/Nile</answer>"
    )


def test_report_rewards_are_race_scores_and_advantages_follow(tmp_path: Path, vital, smollm2_path: Path):
    from websailor.tools.local import build_local_tools

    items, tasks = report_training_tasks(_bench(tmp_path / "drb"))
    tools = build_local_tools(vital)
    trajs = []
    for r, rivers in enumerate([5, 0, 15]):  # RACE per dimension: 5/(5+5), 0/(0+5), 10/(10+5)
        agent = Agent(
            ScriptedModel([call("search", query=["Nile"]), _report(rivers)]), tools, AgentConfig(task="report")
        )
        trajs.append(agent.run(PROMPT, "7", r))
    trajs.append(
        Agent(ScriptedModel([call("search", query=["Nile"])]), tools, AgentConfig(task="report", max_calls=1)).run(
            PROMPT, "7", 3
        )
    )
    with FakeOpenAIServer(race_judge) as srv:
        judge = ReportJudge(load_model(f"openai:j@{srv.url}"), tasks, cache=tmp_path / "race.sqlite")
        ro = AgentRollouts(
            {PROMPT: items[0]}, tools, judge, RolloutSettings(4, "v2", AgentConfig(task="report")), tmp_path / "r.jsonl"
        )
        out = ro.batch([items[0]] * 4, trajs, step=0, tokenizer=load_tokenizer(smollm2_path))
        judge.close()
    rewards = [0.5, 0.0, 2 / 3, 0.0]  # the cut rollout (no report) earns nothing
    records = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [r["reward"] for r in records] == pytest.approx(rewards)
    # V2's leave-one-out advantage: r_i - mean of the other three
    expected = [r - (sum(rewards) - r) / 3 for r in rewards]
    assert out["advantage"][:3] == pytest.approx(expected[:3])
    assert records[3]["in_loss"] is False  # cut, with a negative advantage: left out
    assert records[0]["correct"] is True and records[1]["correct"] is False  # at least as good as the reference


def test_a_user_rubric_and_derived_criteria(tmp_path: Path):
    rubric_file = tmp_path / "rubric.json"
    rubric_file.write_text(json.dumps({"dimension_weight": {d: 0.25 for d in DIMS},
                                       "criterions": {d: [{"criterion": "c", "explanation": "e", "weight": 1}] for d in DIMS}}))  # fmt: skip
    assert read_rubric(rubric_file).source == "rubric"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"dimension_weight": {"insight": 1}, "criterions": {"insight": []}}))
    with pytest.raises(ConfigError, match="is not usable"):
        read_rubric(bad)
    with pytest.raises(ConfigError, match="cannot be read"):
        read_rubric(tmp_path / "missing.json")
    _, tasks = report_training_tasks(_bench(tmp_path / "drb", with_criteria=False))
    with FakeOpenAIServer(race_judge) as srv:
        judge = ReportJudge(load_model(f"openai:j@{srv.url}"), tasks)
        from websailor.judge.base import Case

        grades = judge.grade(
            [Case(PROMPT, _report(10)[8:-9], None), Case(PROMPT, _report(2)[8:-9], None), Case("other", "x", None)]
        )
        derivations = sum('"dimension_weight"' in b["messages"][-1]["content"] for b in srv.bodies)
    assert [g.score for g in grades[:2]] == pytest.approx([10 / 15, 2 / 7]) and derivations == 1
    assert grades[2].correct is None and "not one of the training tasks" in grades[2].error


def test_summarized_rollouts_are_refused_by_token_exact_rl(vital, smollm2_path: Path):
    from websailor.agent.summarize import SUMMARY_REQUEST
    from websailor.tools.local import build_local_tools

    def reply(messages):
        if messages[-1]["content"] == SUMMARY_REQUEST:
            return "<summary>Found the Nile.</summary>"
        return (
            call("visit", url="https://en.wikipedia.org/wiki/Nile", goal="all")
            if len(messages) < 8
            else "<answer>x</answer>"
        )

    traj = Agent(ScriptedModel(reply, max_context=900), build_local_tools(vital), AgentConfig(summarize_at=0.3)).run(
        "q", "s"
    )
    assert any(s["text"] for s in traj.summaries)
    with pytest.raises(ValueError, match="token-exact RL over summarized rollouts is not supported"):
        rollout_tokens(traj, load_tokenizer(smollm2_path))


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"task": "report"}, "needs a judge model: reward llm:MODEL_SPEC"),
        ({"task": "report", "reward": "llm:openai:j@http://x", "prefilter": 4}, "train without it"),
        ({"rubric": "r.json"}, "settings of report tasks"),
        ({"task": "essay"}, "task"),
    ],
)
def test_bad_report_settings_are_named(overrides: dict, message: str):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_settings(None, **overrides)


@pytest.mark.trainer
def test_one_rl_step_on_a_report_task(
    tmp_path: Path, smollm2_path: Path, vital_dir: Path, monkeypatch: pytest.MonkeyPatch
):
    """A TRL step with the RACE reward. The tiny random model never writes a report, so each
    rollout's final text is replaced by a scripted report (its turns stay the model's): rewards
    then differ within the group, and the update moves the weights."""
    import torch
    from transformers import AutoModelForCausalLM

    from tests.test_sft import _save_tiny

    tiny = _save_tiny(tmp_path / "tiny", smollm2_path)
    real_run = Agent.run

    def run_and_report(self, question, id="q", rollout=0, answer=None, on_step=None):
        traj = real_run(self, question, id, rollout, answer, on_step)
        traj.prediction, traj.termination = _report(3 * (rollout % 2))[8:-9], "answer"
        return traj

    monkeypatch.setattr(Agent, "run", run_and_report)
    with FakeOpenAIServer(race_judge) as srv:
        settings = RLSettings(task="report", reward=f"llm:openai:j@{srv.url}", group_size=2, batch_size=2, max_steps=1,
                              max_calls=1, max_tokens_per_turn=8, learning_rate=1e-3, concurrency=2, save_steps=1)  # fmt: skip
        summary = train_rl(
            _bench(tmp_path / "drb"),
            f"hf:{tiny}",
            tmp_path / "out",
            settings,
            env=EnvSpec(corpus=vital_dir),
            progress=False,
        )
    assert summary["steps"] == 1
    log = read_log(tmp_path / "out")
    # rewards 0 and 3/(3+5) in the group: mean 0.1875
    assert log[0]["reward/mean"] == pytest.approx(0.1875) and log[0]["groups/zero_spread_share"] == 0.0
    records = [json.loads(x) for x in (tmp_path / "out" / "rollouts.jsonl").read_text().splitlines()]
    assert sorted(r["reward"] for r in records) == pytest.approx([0.0, 0.375])
    assert all(r["task"] == "report" for r in records)
    base = AutoModelForCausalLM.from_pretrained(tiny).parameters()
    after = AutoModelForCausalLM.from_pretrained(tmp_path / "out").parameters()
    assert any(not torch.equal(p, q) for p, q in zip(base, after))
