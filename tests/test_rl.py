"""Agentic RL: batch planning on hand-computed groups, rollout tokens and the env mask as the
trainer gets them, the rollout function with a scripted agent and judge, TRL end to end with
a tiny model (log, resume, use as ``hf:DIR``), the step log and plot, and bad input."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.fakes import ScriptedModel, call
from websailor.agent.loop import Agent, AgentConfig
from websailor.agent.trajectory import repeated_tool_calls
from websailor.errors import ConfigError, InputFormatError, ModelError
from websailor.judge.base import Grade
from websailor.judge.gold import Gold
from websailor.questions import Question
from websailor.tools.environment import EnvSpec
from websailor.train.advantages import plan_batch
from websailor.train.rl import RLSettings, accumulation_steps, load_settings, train_rl
from websailor.train.rl.rollouts import AgentRollouts, RolloutSettings
from websailor.train.rl_log import plot_log, read_log, run_outcome, window_means
from websailor.train.rollout_tokens import rollout_tokens
from websailor.train.sft import load_tokenizer


# -- batch planning ------------------------------------------------------------------------
def test_v2_plan_excludes_cut_negatives_and_keeps_slots():
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    terms = ["answer", "max_calls", "answer", "context"] + ["answer"] * 4
    plan = plan_batch(rewards, terms, 4, "v2", random.Random(0))
    assert plan.slots == list(range(8))
    assert plan.advantages[:4] == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3])
    assert plan.advantages[4:] == [0.0] * 4
    # the cut rollouts with a negative advantage are out; the answered wrong one stays in
    assert plan.in_loss[:4] == [True, False, True, False]
    assert (plan.zero_spread_groups, plan.skipped_groups, plan.duplicated_groups) == (1, 0, 0)


def test_dupo_plan_refills_zero_spread_and_skipped_groups():
    rewards = [
        0.1,
        1.0,
        0.1,
        0.1,  # spread
        1.0,
        1.0,
        1.0,
        1.0,  # zero spread
        None,
        0.0,
        0.0,
        1.0,
    ]  # the judge failed on one: skipped
    plan = plan_batch(rewards, ["answer"] * 12, 4, "dupo", random.Random(0))
    assert plan.slots == [0, 1, 2, 3] * 3  # the only group with spread fills every slot
    mean, std = 0.325, 0.45  # sample std of (0.1, 1.0, 0.1, 0.1)
    assert plan.advantages[:4] == pytest.approx([(r - mean) / (std + 1e-4) for r in (0.1, 1.0, 0.1, 0.1)])
    assert plan.advantages[4:8] == plan.advantages[:4] and all(plan.in_loss)
    assert (plan.zero_spread_groups, plan.skipped_groups, plan.duplicated_groups) == (1, 1, 2)


def test_dupo_plan_without_any_spread_trains_on_nothing():
    plan = plan_batch([0.0] * 4 + [1.0] * 4, ["answer"] * 8, 4, "dupo", random.Random(0))
    assert plan.in_loss == [False] * 8 and plan.advantages == [0.0] * 8


def test_v2_plan_skips_a_group_with_a_missing_reward():
    plan = plan_batch([1.0, None, 0.0, 1.0], ["answer"] * 4, 2, "v2", random.Random(0))
    assert plan.in_loss == [False, False, True, True]
    assert plan.advantages == [0.0, 0.0, -1.0, 1.0] and plan.skipped_groups == 1


# -- rollout tokens ------------------------------------------------------------------------
def _trajectory(vital, replies: list[str], max_calls: int = 10, rollout: int = 0):
    from websailor.tools.local import build_local_tools

    agent = Agent(ScriptedModel(replies), build_local_tools(vital), AgentConfig(max_calls=max_calls))
    return agent.run("Which city is the capital of France?", "q1", rollout, "Paris")


def test_env_mask_covers_exactly_the_model_replies(vital, smollm2_path: Path):
    tok = load_tokenizer(smollm2_path)
    replies = [call("search", query=["capital of France"]), "<think>Found it.</think>\n<answer>Paris</answer>"]
    traj = _trajectory(vital, replies)
    tk = rollout_tokens(traj, tok)
    assert len(tk.completion_ids) == len(tk.env_mask)
    prompt = tok.decode(tk.prompt_ids)
    assert prompt.endswith("<|im_start|>assistant\n") and "capital of France?" in prompt
    model_text = tok.decode([t for t, m in zip(tk.completion_ids, tk.env_mask) if m])
    assert model_text == "".join(m["content"] + "<|im_end|>" for m in traj.messages if m["role"] == "assistant")
    outside = tok.decode([t for t, m in zip(tk.completion_ids, tk.env_mask) if not m])
    assert "<tool_response>" in outside and "<tool_response>" not in model_text
    # the completion ends with the end-of-turn token, so the trainer does not count it truncated
    assert tk.completion_ids[-1] == tok.convert_tokens_to_ids("<|im_end|>") == tok.eos_token_id


def test_a_rollout_cut_after_a_tool_response_ends_at_the_last_reply(vital, smollm2_path: Path):
    tok = load_tokenizer(smollm2_path)
    traj = _trajectory(vital, [call("search", query=["France"])], max_calls=1)
    assert traj.termination == "max_calls" and traj.messages[-1]["role"] == "user"
    tk = rollout_tokens(traj, tok)
    assert tk.env_mask[-1] == 1 and tk.completion_ids[-1] == tok.eos_token_id
    assert "<tool_response>" not in tok.decode(tk.completion_ids)


# -- the rollout function ------------------------------------------------------------------
class _Judge:
    """Marks a prediction correct when it says Paris; ``fail`` makes it ungraded."""

    name = "test"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls = 0

    def grade(self, cases):
        self.calls += 1
        if self.fail:
            return [Grade(None, None, error="judge down") for _ in cases]
        return [Grade(c.prediction == "Paris", 1.0) for c in cases]


def _scripted_group(vital, outcomes: list[str]):
    """One group of rollouts; outcome ``right``, ``wrong`` or ``cut`` (budget exhausted)."""
    replies = {"right": "<answer>Paris</answer>", "wrong": "<answer>Lyon</answer>"}
    out = []
    for r, o in enumerate(outcomes):
        if o == "cut":
            out.append(_trajectory(vital, [call("search", query=["France"])], max_calls=1, rollout=r))
        else:
            out.append(_trajectory(vital, [call("search", query=["France"]), replies[o]], rollout=r))
    return out


def _rollouts(tmp_path: Path, algo: str, judge, group_size: int = 4, **settings_kw) -> AgentRollouts:
    item = Question("q1", "Which city is the capital of France?", Gold.parse("Paris"))
    settings = RolloutSettings(group_size, algo, AgentConfig(max_calls=4), concurrency=1, **settings_kw)
    return AgentRollouts({item.question: item}, {}, judge, settings, tmp_path / "rollouts.jsonl")


def test_v2_batch_masks_excluded_rollouts_and_passes_advantages(tmp_path: Path, vital, smollm2_path: Path):
    tok = load_tokenizer(smollm2_path)
    ro = _rollouts(tmp_path, "v2", _Judge())
    trajs = _scripted_group(vital, ["right", "wrong", "cut", "right"])
    item = next(iter(ro.items.values()))
    out = ro.batch([item] * 4, trajs, step=0, tokenizer=tok)
    assert out["logprobs"] is None
    assert out["advantage"] == pytest.approx([1 - 1 / 3, 0 - 2 / 3, 0 - 2 / 3, 1 - 1 / 3])
    assert sum(out["advantage"]) == pytest.approx(0.0)  # the trainer's group mean is 0: it keeps them as they are
    # the cut rollout has a negative advantage: left out of the loss (one masked token)
    assert out["completion_ids"][2] == [tok.eos_token_id] * 2 and out["env_mask"][2] == [0, 0]
    for i in (0, 1, 3):
        assert sum(out["env_mask"][i]) > 0 and len(out["env_mask"][i]) == len(out["completion_ids"][i])
    assert ro.last["reward/mean"] == 0.5 and ro.last["termination/max_calls"] == 0.25
    assert ro.last["rollouts/in_loss_share"] == 0.75  # the cut negative is out
    records = [json.loads(x) for x in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert [r["in_loss"] for r in records] == [True, True, False, True]
    assert [r["reward"] for r in records] == [1.0, 0.0, 0.0, 1.0] and records[0]["step"] == 1


def test_v2_with_unanswered_negatives_kept_trains_on_the_cut_rollout(tmp_path: Path, vital, smollm2_path: Path):
    """unanswered_negatives keep: the rollout cut by the budget enters the loss with its negative
    advantage, as a wrong answer does; the advantages are the same."""
    tok = load_tokenizer(smollm2_path)
    ro = _rollouts(tmp_path, "v2", _Judge(), exclude_unanswered=False)
    item = next(iter(ro.items.values()))
    out = ro.batch([item] * 4, _scripted_group(vital, ["right", "wrong", "cut", "right"]), step=0, tokenizer=tok)
    assert out["advantage"] == pytest.approx([1 - 1 / 3, 0 - 2 / 3, 0 - 2 / 3, 1 - 1 / 3])
    assert sum(out["env_mask"][2]) > 0 and ro.last["rollouts/in_loss_share"] == 1.0
    records = [json.loads(x) for x in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert [r["in_loss"] for r in records] == [True, True, True, True]
    assert plan_batch([1.0, 0.0], ["answer", "max_calls"], 2, "v2", random.Random(0), False).in_loss == [True, True]
    assert plan_batch([1.0, 0.0], ["answer", "max_calls"], 2, "v2", random.Random(0)).in_loss == [True, False]
    # DUPO leaves nothing out whatever the setting says, so one config serves both algorithms
    for rule in (True, False):
        dupo = plan_batch([1.0, 0.0], ["answer", "max_calls"], 2, "dupo", random.Random(0), rule)
        assert dupo.in_loss == [True, True]


def test_dupo_batch_duplicates_the_group_with_spread(tmp_path: Path, vital, smollm2_path: Path):
    tok = load_tokenizer(smollm2_path)
    ro = _rollouts(tmp_path, "dupo", _Judge(), group_size=2)
    trajs = _scripted_group(vital, ["right", "wrong"]) + _scripted_group(vital, ["wrong", "wrong"])
    item = next(iter(ro.items.values()))
    out = ro.batch([item] * 4, trajs, step=3, tokenizer=tok)
    assert out["completion_ids"][2:] == out["completion_ids"][:2]
    assert out["advantage"][:2] == out["advantage"][2:] and out["advantage"][0] > 0 > out["advantage"][1]
    assert ro.last["groups/duplicated"] == 1.0 and ro.last["groups/zero_spread_share"] == 0.5


def test_a_failing_judge_skips_groups_then_stops_training(tmp_path: Path, vital, smollm2_path: Path):
    tok = load_tokenizer(smollm2_path)
    ro = _rollouts(tmp_path, "v2", _Judge(fail=True), group_size=2)
    item = next(iter(ro.items.values()))
    for step in range(2):
        out = ro.batch([item] * 2, _scripted_group(vital, ["right", "wrong"]), step=step, tokenizer=tok)
        assert out["env_mask"] == [[0, 0], [0, 0]] and out["advantage"] == [0.0, 0.0]
        assert ro.last["groups/skipped"] == 1.0 and ro.last["reward/ungraded"] == 2.0
    records = [json.loads(x) for x in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert {r["advantage"] for r in records} == {None} and not any(r["in_loss"] for r in records)
    with pytest.raises(ModelError, match="no group could be graded in 3 batches in a row"):
        ro.batch([item] * 2, _scripted_group(vital, ["right", "wrong"]), step=2, tokenizer=tok)


def test_a_judge_failing_on_one_rollout_per_group_also_stops(tmp_path: Path, vital, smollm2_path: Path):
    class OneFails(_Judge):
        def grade(self, cases):
            return [Grade(None, None) if i == 0 else Grade(True, 1.0) for i, _ in enumerate(cases)]

    tok = load_tokenizer(smollm2_path)
    ro = _rollouts(tmp_path, "v2", OneFails(), group_size=2)
    item = next(iter(ro.items.values()))
    for step in range(2):
        ro.batch([item] * 2, _scripted_group(vital, ["right", "wrong"]), step=step, tokenizer=tok)
    with pytest.raises(ModelError, match="no group could be graded"):
        ro.batch([item] * 2, _scripted_group(vital, ["right", "wrong"]), step=2, tokenizer=tok)


def test_prompts_must_come_in_groups(tmp_path: Path):
    ro = _rollouts(tmp_path, "v2", _Judge(), group_size=2)
    q = [{"role": "user", "content": "Which city is the capital of France?"}]
    with pytest.raises(ValueError, match="groups of 2"):
        ro._questions([q, q, q])
    with pytest.raises(ValueError, match="not among the training questions"):
        ro._questions([[{"role": "user", "content": "other"}]] * 2)


# -- settings and bad input ----------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"group_size": 1}, "a group of one rollout has no baseline"),
        ({"group_size": 4, "batch_size": 6}, "batch_size 6 is not a multiple of group_size 4"),
        ({"prefilter": 1}, "one rollout per item cannot tell"),
        ({"algo": "ppo"}, "algo"),
        ({"epsilon_low": float("inf")}, "epsilon_low"),
        ({"unknown": 1}, "unknown"),
    ],
)
def test_bad_settings_are_named(overrides: dict, message: str):
    with pytest.raises(ConfigError, match=message):
        load_settings(None, **overrides)


def test_each_process_needs_whole_groups():
    s = RLSettings(group_size=4, batch_size=8)
    assert accumulation_steps(s, 1) == 8
    assert accumulation_steps(s, 2) == 4
    with pytest.raises(ConfigError, match="not whole groups of 4"):
        accumulation_steps(RLSettings(group_size=4, batch_size=4), 2)


def test_shipped_configs_load():
    root = Path(__file__).resolve().parents[1] / "configs" / "rl"
    paper = load_settings(root / "paper.yaml")
    assert (paper.batch_size, paper.learning_rate, paper.temperature, paper.epsilon_high) == (128, 1e-6, 1.0, 0.28)
    assert load_settings(root / "cpu_mini.yaml").batch_size % load_settings(root / "cpu_mini.yaml").group_size == 0
    assert load_settings(root / "cpu_mini.yaml").gradient_checkpointing is True and RLSettings().gradient_checkpointing


def test_the_run_outcome_says_when_steps_trained_on_nothing():
    log = [{"step": 1, "reward/mean": 0.0, "rollouts/in_loss_share": 0.0}]
    lines = run_outcome({"log": log, "steps": 1, "questions": 108, "train_seconds": 61.7})
    assert (
        lines[0]
        == "1 step on 108 questions (training took 61.7 s); mean reward 0.000 over the first 1 steps, 0.000 over the last 1"
    )
    assert lines[1].startswith("1 of 1 step trained on nothing: every group's rewards were equal")
    log += [{"step": 2, "reward/mean": 0.5, "rollouts/in_loss_share": 0.75}]
    lines = run_outcome({"log": log, "steps": 2, "questions": 4, "train_seconds": 9})
    assert "0.250 over the last 2" in lines[0] and lines[1].startswith("1 of 2 steps trained on nothing")
    assert run_outcome({"log": log[1:], "steps": 1, "questions": 4, "train_seconds": 9})[1:] == []


def test_step_log_read_and_plot(tmp_path: Path):
    log = tmp_path / "rl_log.jsonl"
    log.write_text(
        "".join(json.dumps({"step": i + 1, "reward/mean": i / 20, "entropy": 1.0}) + "\n" for i in range(20))
    )
    assert window_means(read_log(tmp_path), "reward/mean") == pytest.approx((0.225, 0.725))
    png = plot_log(tmp_path)
    assert png.stat().st_size > 10_000
    assert plot_log(tmp_path, tmp_path / "curves") == tmp_path / "curves.png"
    assert plot_log(tmp_path, tmp_path) == tmp_path / "rl_curves.png"
    with pytest.raises(InputFormatError, match=r"\.png, \.pdf"):
        plot_log(tmp_path, tmp_path / "x.txt")
    log.write_text('{"step": 1}\nnot json\n')
    with pytest.raises(InputFormatError, match="line 2 is not JSON"):
        read_log(tmp_path)
    with pytest.raises(InputFormatError, match="no RL step log"):
        read_log(tmp_path / "nothing")


def test_a_half_written_last_step_is_left_out_and_a_whole_one_kept(tmp_path: Path, caplog):
    from websailor.train.rl_log import read_step_log

    log = tmp_path / "rl_log.jsonl"
    log.write_text('{"step": 1, "reward/mean": 0.5}\n{"step": 2, "reward/mean": 0.75}\n{"step": 3, "rew')
    assert [r["step"] for r in read_log(tmp_path)] == [1, 2]
    assert "rl_log.jsonl line 3 is unfinished" in caplog.text
    got = read_step_log(log)
    assert [r["step"] for r in got.records] == [1, 2] and got.unfinished.lineno == 3 and got.unfinished.size == 16
    assert plot_log(tmp_path).is_file()  # train plot draws the complete steps
    log.write_text('\ufeff{"step": 1}\n{"step": 2}')  # a byte-order mark, and a whole last step without its newline
    assert [r["step"] for r in read_log(tmp_path)] == [1, 2] and read_step_log(log).unfinished is None
    assert log.read_text() == '\ufeff{"step": 1}\n{"step": 2}'  # readers never change the log
    log.write_text('{"step": 1}\n[2]')
    with pytest.raises(InputFormatError, match="line 2 is not an RL step record"):
        read_log(tmp_path)


def test_a_resumed_run_trims_its_logs_and_refuses_to_drop_a_complete_line(tmp_path: Path, caplog):
    from websailor.train.run_folder import trim_jsonl

    log = tmp_path / "rl_log.jsonl"
    log.write_text('{"step": 1}\n\n{"step": 2}\n{"step": 3}\n{"step": 4, "lo')
    trim_jsonl(log, 2)
    assert log.read_text() == '{"step": 1}\n{"step": 2}\n' and "line 5 is unfinished" in caplog.text
    log.write_text('{"step": 1}\n{"step": 2}')  # a whole last record without its newline is kept, with one
    trim_jsonl(log, 2)
    assert log.read_text() == '{"step": 1}\n{"step": 2}\n'
    inode = log.stat().st_ino
    trim_jsonl(log, 5)  # nothing to drop: the file is left as it is
    assert log.stat().st_ino == inode and log.read_text() == '{"step": 1}\n{"step": 2}\n'
    bad = '{"step": 1}\nnot json\n{"step": 2}\n'
    log.write_text(bad)
    with pytest.raises(InputFormatError, match="line 2 is not a record of rl_log.jsonl"):
        trim_jsonl(log, 1)
    assert log.read_text() == bad and [p.name for p in tmp_path.iterdir()] == ["rl_log.jsonl"]
    trim_jsonl(tmp_path / "none.jsonl", 1)  # no file: nothing to do


# -- TRL end to end --------------------------------------------------------------------
def _qa(path: Path) -> Path:
    rows = [
        {"id": "a", "question": "Which city is the capital of France?", "answer": "Paris"},
        {"id": "b", "question": "Which river flows through Paris?", "answer": "Seine"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def tiny_rl(smollm2_path: Path, vital_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    from tests.test_sft import _save_tiny

    root = tmp_path_factory.mktemp("rl")
    tiny = _save_tiny(root / "tiny", smollm2_path)
    qa = _qa(root / "qa.jsonl")
    settings = load_settings(
        None,
        group_size=2,
        batch_size=2,
        max_steps=2,
        max_calls=2,
        max_tokens_per_turn=8,
        learning_rate=1e-4,
        concurrency=2,
        save_steps=1,
        skip_zero_advantage=False,
    )
    summary = train_rl(qa, f"hf:{tiny}", root / "out", settings, env=EnvSpec(corpus=vital_dir), progress=False)
    return root, tiny, qa, settings, summary


@pytest.mark.trainer
def test_trl_end_to_end_logs_saves_and_resumes(tiny_rl, vital_dir: Path):
    from websailor.models import load_model

    root, tiny, qa, settings, summary = tiny_rl
    out = root / "out"
    assert summary["steps"] == 2 and summary["questions"] == 2
    log = read_log(out)
    assert [r["step"] for r in log] == [1, 2]
    for key in (
        "reward/mean",
        "groups/zero_spread_share",
        "rollouts/tool_calls",
        "rollouts/response_tokens",
        "entropy",
        "clip_ratio/region_mean",
        "time/rollout_s",
        "time/update_s",
        "loss",
    ):
        assert key in log[0], key
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    rollouts = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 4 and {r["step"] for r in rollouts} == {1, 2}
    for rec in log:  # the repeated calls the step log states are those of the step's rollouts
        step = [repeated_tool_calls(r["tool_calls"]) for r in rollouts if r["step"] == rec["step"]]
        assert rec["rollouts/repeated_calls"] == pytest.approx(sum(step) / len(step))
    assert {r["question"] for r in rollouts} <= {
        "Which city is the capital of France?",
        "Which river flows through Paris?",
    }
    # the saved directory is a model for run and eval
    assert load_model(f"hf:{out}").name == f"hf:{out}"
    # rerunning the same command returns the finished run; other settings are refused
    assert train_rl(qa, f"hf:{tiny}", out, settings, env=EnvSpec(corpus=vital_dir), progress=False)["steps"] == 2
    with pytest.raises(ConfigError, match="holds an RL run with other learning_rate"):
        train_rl(
            qa, f"hf:{tiny}", out, settings.model_copy(update={"learning_rate": 1e-3}), env=EnvSpec(corpus=vital_dir)
        )
    # a setting added since runs began is left out of the record at the value they had, and is
    # part of it at another (a run's V2 loss rule cannot change on resume)
    saved = json.loads((out / "rl_settings.json").read_text())
    assert "unanswered_negatives" not in saved and "max_staleness" not in saved
    with pytest.raises(ConfigError, match="holds an RL run with other unanswered_negatives"):
        keep = settings.model_copy(update={"unanswered_negatives": "keep"})
        train_rl(qa, f"hf:{tiny}", out, keep, env=EnvSpec(corpus=vital_dir))
    # a larger --max-steps continues the finished run from its last checkpoint
    more = train_rl(
        qa,
        f"hf:{tiny}",
        out,
        settings.model_copy(update={"max_steps": 3}),
        env=EnvSpec(corpus=vital_dir),
        progress=False,
    )
    assert more["steps"] == 3 and [r["step"] for r in read_log(out)] == [1, 2, 3]
    assert len((out / "rollouts.jsonl").read_text().splitlines()) == 6
    # killed after its last checkpoint, before the summary: the rerun samples nothing more
    (out / "rl_summary.json").unlink()
    (out / "model.safetensors").unlink()
    again = train_rl(
        qa,
        f"hf:{tiny}",
        out,
        settings.model_copy(update={"max_steps": 3}),
        env=EnvSpec(corpus=vital_dir),
        progress=False,
    )
    assert again["steps"] == 3 and len((out / "rollouts.jsonl").read_text().splitlines()) == 6
    assert load_model(f"hf:{out}").name == f"hf:{out}"


@pytest.mark.trainer
def test_the_update_follows_the_advantages(tiny_rl, vital_dir: Path, monkeypatch: pytest.MonkeyPatch):
    """The tiny random model never answers, so every group has zero spread: the first run's
    loss is exactly 0 and AdamW (no weight decay) leaves the weights as they were. With
    rewards that differ inside each group, the same run moves them."""
    import torch
    from transformers import AutoModelForCausalLM

    import websailor.train.rl.rollouts as rr

    root, tiny, qa, settings, _ = tiny_rl
    base = list(AutoModelForCausalLM.from_pretrained(tiny).parameters())
    flat = read_log(root / "out")
    assert all(r["groups/zero_spread_share"] == 1.0 and r["loss"] == 0.0 for r in flat)
    after_flat = AutoModelForCausalLM.from_pretrained(root / "out").parameters()
    assert all(torch.equal(p, q) for p, q in zip(base, after_flat))

    monkeypatch.setattr(rr, "reward", lambda traj, correct, algo: float(traj.rollout % 2))
    s = settings.model_copy(update={"max_steps": 1})
    train_rl(qa, f"hf:{tiny}", root / "spread", s, env=EnvSpec(corpus=vital_dir), progress=False)
    log = read_log(root / "spread")
    assert log[0]["groups/zero_spread_share"] == 0.0 and log[0]["reward/mean"] == 0.5
    assert log[0]["grad_norm"] > 0
    after = AutoModelForCausalLM.from_pretrained(root / "spread").parameters()
    assert any(not torch.equal(p, q) for p, q in zip(base, after))


@pytest.mark.trainer
def test_prefilter_with_nothing_moderate_is_refused(tiny_rl, vital_dir: Path):
    root, tiny, qa, settings, _ = tiny_rl
    s = settings.model_copy(update={"prefilter": 2, "max_steps": 1})
    with pytest.raises(
        ConfigError,
        match=r"no moderate items left after the prefilter \(2 rollouts per item: "
        r"0 too easy, 2 too hard",
    ):
        train_rl(qa, f"hf:{tiny}", root / "prefiltered", s, env=EnvSpec(corpus=vital_dir), progress=False)
    counts = json.loads((root / "prefiltered" / "prefilter.json").read_text())
    assert (counts["kept"], counts["too_hard"], counts["kept_ids"]) == (0, 2, [])
    first = [json.loads(x) for x in (root / "prefiltered" / "prefilter_rollouts.jsonl").read_text().splitlines()]
    assert len(first) == 4
    # another run in the same directory (it never trained) does not reuse those rollouts
    with pytest.raises(ConfigError, match="no moderate items"):
        train_rl(
            qa,
            f"hf:{tiny}",
            root / "prefiltered",
            s.model_copy(update={"seed": 1}),
            env=EnvSpec(corpus=vital_dir),
            progress=False,
        )
    again = [json.loads(x) for x in (root / "prefiltered" / "prefilter_rollouts.jsonl").read_text().splitlines()]
    assert len(again) == 4 and {r["seed"] for r in again}.isdisjoint({r["seed"] for r in first})
    # a wider band is a retry of the same prefilter: its rollouts are read again, not sampled anew
    wider = s.model_copy(update={"seed": 1, "prefilter_band": "0:1"})
    summary = train_rl(qa, f"hf:{tiny}", root / "prefiltered", wider, env=EnvSpec(corpus=vital_dir), progress=False)
    kept = [json.loads(x) for x in (root / "prefiltered" / "prefilter_rollouts.jsonl").read_text().splitlines()]
    assert kept == again and summary["prefilter"]["kept"] == 2 and summary["steps"] == 1


def test_synth_files_train_on_their_train_split(tmp_path: Path):
    from websailor.train.rl import training_questions

    rows = [
        {
            "id": f"s{i}",
            "question": f"Question {i}?",
            "answer": f"A{i}",
            "split": split,
            "topology_hash": "h",
            "constraints": [],
        }
        for i, split in enumerate(["train", "test", "train"])
    ]
    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [it.id for it in training_questions(qa)] == ["s0", "s2"]
    assert [it.id for it in training_questions(qa, "all")] == ["s0", "s1", "s2"]
    plain = _qa(tmp_path / "plain.jsonl")
    with pytest.raises(InputFormatError, match="--split applies to synthesized QA items only"):
        training_questions(plain, "train")


@pytest.mark.trainer
def test_bad_data_is_named(tmp_path: Path, tiny_rl, vital_dir: Path):
    root, tiny, qa, settings, _ = tiny_rl
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(InputFormatError):
        train_rl(empty, f"hf:{tiny}", tmp_path / "o1", settings, env=EnvSpec(corpus=vital_dir))
    dup = tmp_path / "dup.jsonl"
    dup.write_text(
        json.dumps({"id": "a", "question": "Q?", "answer": "x"})
        + "\n"
        + json.dumps({"id": "b", "question": "Q?", "answer": "y"})
        + "\n"
    )
    with pytest.raises(InputFormatError, match="items a and b ask the same question with different gold answers"):
        train_rl(dup, f"hf:{tiny}", tmp_path / "o2", settings, env=EnvSpec(corpus=vital_dir))
    big = settings.model_copy(update={"batch_size": 6, "group_size": 2})
    with pytest.raises(ConfigError, match="needs 3 questions, the data has 2"):
        train_rl(qa, f"hf:{tiny}", tmp_path / "o4", big, env=EnvSpec(corpus=vital_dir))
    assert not (tmp_path / "o4").exists()
    with pytest.raises(ConfigError, match="training needs local weights"):
        train_rl(qa, "openai:m@http://localhost:1/v1", tmp_path / "o3", settings, env=EnvSpec(corpus=vital_dir))


# -- the vLLM backend and the CLI ------------------------------------------------------
class _FakeVLLM:
    """Stands in for TRL's ``VLLMGeneration`` in colocate mode: echoes a fixed reply."""

    mode = "colocate"
    tensor_parallel_size = 1

    def __init__(self, tok, reply: str) -> None:
        self.tok, self.reply, self.prompts = tok, reply, []

    def generate(self, prompts, images, num_generations):
        self.prompts += prompts
        ids = self.tok(self.reply, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id, 7, 7]
        return prompts, [ids for _ in prompts], [[[-0.5]] * len(ids) for _ in prompts], None


def test_vllm_backend_turns_conversations_into_ids_and_back(smollm2_path: Path):
    from types import SimpleNamespace

    from websailor.models.base import SamplingParams
    from websailor.models.trl_vllm import TRLVLLMModel

    tok = load_tokenizer(smollm2_path)
    gen = _FakeVLLM(tok, "<think>x</think>\n<answer>Paris</answer>")
    trainer = SimpleNamespace(
        vllm_generation=gen,
        processing_class=tok,
        model=SimpleNamespace(config=SimpleNamespace(max_position_embeddings=8192)),
    )
    chat = TRLVLLMModel(trainer, "policy")
    conv = [{"role": "system", "content": "s"}, {"role": "user", "content": "Capital of France?"}]
    g = chat.chat(conv, SamplingParams(max_tokens=64))
    assert g.text == "<think>x</think>\n<answer>Paris</answer>" and g.finish_reason == "stop"
    # the sampled ids through the end-of-turn token, with vLLM's top-1 log-probabilities
    assert g.token_ids[-1] == tok.eos_token_id and 7 not in g.token_ids and g.logprobs == [-0.5] * len(g.token_ids)
    assert tok.decode(gen.prompts[0]).endswith("<|im_start|>assistant\n")
    gen.mode = "server"
    with pytest.raises(ConfigError, match="colocate"):
        TRLVLLMModel(trainer, "policy")


def test_cli_names_bad_rl_settings(tmp_path: Path):
    from typer.testing import CliRunner

    from websailor.cli import app

    qa = _qa(tmp_path / "qa.jsonl")
    for args, message in (
        (["--group-size", "1"], "no baseline"),
        (["--group-size", "4", "--batch", "6"], "not a multiple"),
        (["--algo", "ppo"], "ppo"),
        (["--prefilter-band", "0.9:0.1"], "prefilter_band '0.9:0.1': use 0<c<k"),
        (["--prefilter-from", str(tmp_path / "no-eval")], "no such file or directory"),
    ):
        r = CliRunner().invoke(app, ["train", "rl", "--data", str(qa), "--out", str(tmp_path / "o"), *args])
        assert r.exit_code != 0 and message in r.output, r.output
    assert not (tmp_path / "o").exists()


@pytest.mark.trainer
def test_rl_in_the_web_environment(tiny_rl, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """``env=EnvSpec(kind="web")``: missing provider settings are refused before anything is written; with
    the provider imitation the rollouts run with the web tools and say so."""
    from websailor.tools.web.fault_server import FaultServer

    root, tiny, qa, settings, _ = tiny_rl
    for var in ("SERPER_API_KEY", "SEARXNG_BASE_URL", "WEBSAILOR_WEB_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    s = settings.model_copy(update={"max_steps": 1})
    with pytest.raises(ConfigError, match="SERPER_API_KEY"):
        train_rl(qa, f"hf:{tiny}", tmp_path / "web", s, env=EnvSpec(kind="web"), progress=False)
    assert not (tmp_path / "web").exists()
    with FaultServer() as server:
        monkeypatch.setenv("SERPER_API_KEY", server.api_key)
        monkeypatch.setenv("SERPER_BASE_URL", server.url)
        monkeypatch.setenv("WEBSAILOR_WEB_CACHE", str(tmp_path / "cache.sqlite"))
        summary = train_rl(qa, f"hf:{tiny}", tmp_path / "web", s, env=EnvSpec(kind="web"), progress=False)
    assert summary["steps"] == 1
    assert json.loads((tmp_path / "web" / "rl_settings.json").read_text())["env"] == "web"
    rollouts = [json.loads(x) for x in (tmp_path / "web" / "rollouts.jsonl").read_text().splitlines()]
    assert {r["env"] for r in rollouts} == {"web"}
    assert '"name": "google_scholar"' in rollouts[0]["messages"][0]["content"]


def test_an_interrupt_during_the_rollouts_does_not_wait_for_those_in_flight(tmp_path: Path):
    """Ctrl-C or SIGTERM (raised as KeyboardInterrupt in the main thread) while a batch rolls
    out: the rollouts not started are cancelled and the ones still running are not waited for,
    so the command can exit at once."""
    import threading
    import time

    release = threading.Event()

    class Agentish:
        def run(self, question, qid, rollout, answer):
            if rollout == 0:
                raise KeyboardInterrupt  # what the main thread receives on a signal
            release.wait(60)  # a long rollout still in flight

    item = Question("q1", "Which city is the capital of France?", Gold.parse("Paris"))
    rollouts = AgentRollouts(
        {item.question: item}, {}, None, RolloutSettings(4, "v2", AgentConfig(), 2), tmp_path / "r"
    )
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        rollouts._run(Agentish(), [item] * 4, step=0)
    assert time.perf_counter() - t0 < 5
    release.set()


# -- prefilter from existing rollouts ------------------------------------------------------------
PREFILTER_ITEMS = {
    "easy": ("Which river flows through Cairo?", "Nile", ["Nile"] * 4),
    "mid": ("Which city is the capital of France?", "Paris", ["Paris", "Lyon", "Paris", "Nice"]),
    "hard": ("Who painted the Mona Lisa?", "Leonardo da Vinci", ["Raphael"] * 4),
    "flaky": ("Which river flows through Paris?", "Seine", ["Seine", "HTTP 503", "Loire", "Seine"]),
}


def _graded_eval(out: Path, items: dict | None = None) -> list[Question]:
    """An eval output of the real harness: four rollouts per item by a scripted model that
    answers each question from its list in turn ("HTTP 503": a model error)."""
    from websailor.eval.harness import EvalConfig, evaluate
    from websailor.judge import load_judge

    items = items or PREFILTER_ITEMS
    questions = [Question(qid, q, Gold.parse(a)) for qid, (q, a, _) in items.items()]
    replies = {q: list(r) for q, _, r in items.values()}

    def answer(messages: list[dict]) -> str:
        reply = replies[messages[-1]["content"]].pop(0)
        if reply.startswith("HTTP"):
            return ModelError(reply)
        return f"<answer>{reply}</answer>"

    agent = Agent(ScriptedModel(answer), [], env="none")
    evaluate(questions, agent, load_judge("em"), out, EvalConfig(rollouts=4, concurrency=1), progress=False)
    return questions


def test_prefilter_from_an_eval_output_keeps_the_moderate_items(tmp_path: Path):
    from websailor.judge import load_judge
    from websailor.train.rl import prefilter_from_file

    items = _graded_eval(tmp_path / "eval")
    scores = (tmp_path / "eval" / "scores.jsonl").read_bytes()
    kept, rec = prefilter_from_file(items, tmp_path / "eval", load_judge("em"), record=tmp_path / "prefilter.json")
    assert [it.id for it in kept] == ["mid"]
    assert {k: rec[k] for k in ("k", "kept", "too_easy", "too_hard", "short", "unrated", "ungraded")} == {
        "k": 4,
        "kept": 1,
        "too_easy": 1,
        "too_hard": 1,
        "short": 1,  # the model error is not counted: three graded rollouts of four
        "unrated": 0,
        "ungraded": 1,
    }
    assert (rec["rollouts"], rec["graded"], rec["reused_grades"]) == (16, 15, 15)  # the eval's grades, reused
    assert rec["source"] == str(tmp_path / "eval" / "trajectories.jsonl") and rec["band"] == "0<c<k"
    saved = json.loads((tmp_path / "prefilter.json").read_text())
    assert saved["kept_ids"] == ["mid"] and saved["from"] == str(tmp_path / "eval")
    assert (tmp_path / "eval" / "scores.jsonl").read_bytes() == scores  # the eval output is only read
    # the trajectories file itself; three graded rollouts per item suffice; a pass-rate band
    kept, rec = prefilter_from_file(items, tmp_path / "eval" / "trajectories.jsonl", load_judge("em"), k=3)
    assert sorted(it.id for it in kept) == ["flaky", "mid"] and rec["short"] == 0
    kept, rec = prefilter_from_file(items, tmp_path / "eval", load_judge("em"), band="0:0.5")
    assert sorted(it.id for it in kept) == ["hard", "mid"] and rec["too_easy"] == 1
    # another judge grades the rollouts again (f1 is not em)
    kept, rec = prefilter_from_file(items, tmp_path / "eval", load_judge("f1"))
    assert rec["reused_grades"] == 0 and rec["graded"] == 15 and [it.id for it in kept] == ["mid"]
    # items of the data the file never rated are not kept, and said so
    extra = [*items, Question("new", "Which sea is the saltiest?", Gold.parse("Dead Sea"))]
    kept, rec = prefilter_from_file(extra, tmp_path / "eval", load_judge("em"))
    assert rec["unrated"] == 1 and [it.id for it in kept] == ["mid"]


def test_prefilter_from_rollouts_of_another_sampler_says_so(tmp_path: Path, caplog):
    """An eval samples at the paper's evaluation settings; RL at its own: the rating is used,
    with one warning naming both."""
    from websailor.judge import load_judge
    from websailor.train.rl import prefilter_from_file

    items = _graded_eval(tmp_path / "eval")
    rl = {"temperature": 1.0, "top_p": 1.0, "presence_penalty": 0.0}
    with caplog.at_level("WARNING", logger="websailor.train.rl.prefilter"):
        kept, _ = prefilter_from_file(items, tmp_path / "eval", load_judge("em"), sampling=rl)
    assert [it.id for it in kept] == ["mid"]
    said = [r.getMessage() for r in caplog.records if "sampled with" in r.getMessage()]
    assert len(said) == 1 and "temperature 0.85, top p 0.95, presence penalty 1.1" in said[0]
    assert "this run samples with temperature 1.0, top p 1.0, presence penalty 0.0" in said[0]
    assert "eval --temperature 1 --top-p 1 --presence-penalty 0)" in said[0]
    caplog.clear()
    with caplog.at_level("WARNING", logger="websailor.train.rl.prefilter"):
        same = {"temperature": 0.85, "top_p": 0.95, "presence_penalty": 1.1}
        prefilter_from_file(items, tmp_path / "eval", load_judge("em"), sampling=same)
    assert not [r for r in caplog.records if "sampled with" in r.getMessage()]


def test_prefilter_from_another_question_set_or_ungraded_rollouts_is_refused(tmp_path: Path):
    from websailor.judge import load_judge
    from websailor.train.rl import prefilter_from_file

    items = _graded_eval(tmp_path / "eval")
    judge = load_judge("em")
    with pytest.raises(
        ConfigError, match=r"another question set: 1 item ids are not in the training data \(e.g. 'easy'\)"
    ):
        prefilter_from_file(items[1:], tmp_path / "eval", judge)
    edited = [Question(it.id, it.question + " (edited)", it.gold) if it.id == "mid" else it for it in items]
    with pytest.raises(ConfigError, match=r"1 ids ask another question than the training data's \(e.g. 'mid'\)"):
        prefilter_from_file(edited, tmp_path / "eval", judge)
    with pytest.raises(
        ConfigError, match="no moderate items in --prefilter-from .* 1 too easy, 2 too hard, 1 with fewer"
    ):
        prefilter_from_file(items, tmp_path / "eval", judge, band="0.6:0.9")
    with pytest.raises(ConfigError, match="no such file or directory"):
        prefilter_from_file(items, tmp_path / "nothing", judge)
    with pytest.raises(ConfigError, match="no trajectories.jsonl"):
        prefilter_from_file(items, tmp_path, judge)
    down = {"down": ("Which river flows through Cairo?", "Nile", ["HTTP 503"] * 4)}
    down_items = _graded_eval(tmp_path / "down", down)
    with pytest.raises(ConfigError, match="none of its 4 rollouts is graded"):
        prefilter_from_file(down_items, tmp_path / "down", judge)


def test_prefilter_from_an_earlier_prefilters_rollouts(tmp_path: Path):
    """The rollouts a sampling prefilter left (ungraded on disk) rate the items again the same way."""
    from websailor.judge import load_judge
    from websailor.train.rl import prefilter_from_file, prefilter_items

    items = [Question(qid, q, Gold.parse(a)) for qid, (q, a, _) in PREFILTER_ITEMS.items()]
    replies = {q: list(r) for q, _, r in PREFILTER_ITEMS.values()}
    agent = Agent(
        ScriptedModel(lambda m: f"<answer>{replies[m[-1]['content']].pop(0).replace('HTTP 503', 'x')}</answer>"),
        [],
        env="none",
    )
    rollouts = tmp_path / "run" / "prefilter_rollouts.jsonl"
    rollouts.parent.mkdir()
    live, counts = prefilter_items(items, agent, load_judge("em"), 4, rollouts, concurrency=1, progress=False)
    kept, rec = prefilter_from_file(items, tmp_path / "run", load_judge("em"))
    assert [it.id for it in kept] == [it.id for it in live] == ["mid", "flaky"]
    assert {k: rec[k] for k in counts} == counts and rec["reused_grades"] == 0


@pytest.mark.parametrize(
    ("band", "rates"),
    [
        ("0<c<k", [(0, "too_hard"), (1, "kept"), (3, "kept"), (4, "too_easy")]),
        ("0.25:0.5", [(0, "too_hard"), (1, "kept"), (2, "kept"), (3, "too_easy")]),
    ],
)
def test_prefilter_bands(band: str, rates: list):
    from websailor.train.rl import band_verdict

    assert [band_verdict(c, 4, band) for c, _ in rates] == [v for _, v in rates]


@pytest.mark.parametrize("band", ["0.5", "0.8:0.2", "a:b", "-1:0.5", "0<c<=k"])
def test_bad_prefilter_bands_are_refused(band: str):
    with pytest.raises(ConfigError, match="prefilter_band .*use 0<c<k"):
        load_settings(None, prefilter_band=band)


@pytest.mark.trainer
def test_train_rl_prefilters_from_an_eval_and_records_it(tiny_rl, vital_dir: Path, tmp_path: Path):
    root, tiny, qa, settings, _ = tiny_rl
    rated = {
        "a": ("Which city is the capital of France?", "Paris", ["Paris", "Lyon", "Paris", "Nice"]),
        "b": ("Which river flows through Paris?", "Seine", ["Seine"] * 4),
    }
    _graded_eval(tmp_path / "eval", rated)
    s = settings.model_copy(update={"prefilter_from": str(tmp_path / "eval"), "max_steps": 1})
    out = tmp_path / "run"
    summary = train_rl(qa, f"hf:{tiny}", out, s, env=EnvSpec(corpus=vital_dir), progress=False)
    assert summary["questions"] == 1 and summary["steps"] == 1
    assert summary["memory"]["checkpointing_kwargs"] == {
        "use_reentrant": False,
        "kept": "attention outputs",
    }  # the default
    p = summary["prefilter"]
    assert (p["kept"], p["too_easy"], p["too_hard"], p["band"], p["k"]) == (1, 1, 0, "0<c<k", 4)
    assert p["source"] == str(tmp_path / "eval" / "trajectories.jsonl")
    assert json.loads((out / "prefilter.json").read_text())["kept_ids"] == ["a"]
    assert not (out / "prefilter_rollouts.jsonl").exists()  # nothing was sampled
    assert {json.loads(x)["question"] for x in (out / "rollouts.jsonl").read_text().splitlines()} == {rated["a"][0]}
    # continuing needs the same prefilter source and band
    for change in ({"prefilter_band": "0:0.5"}, {"prefilter_from": str(tmp_path / "eval" / "trajectories.jsonl")}):
        with pytest.raises(ConfigError, match="holds an RL run with other prefilter_"):
            train_rl(
                qa, f"hf:{tiny}", out, s.model_copy(update={**change, "max_steps": 2}), env=EnvSpec(corpus=vital_dir)
            )


def test_reward_gain_bootstraps_last_against_first_window(tmp_path):
    """The training-reward target of the experiments: last window minus first, with an
    interval that excludes zero only when the rise is real."""
    import random

    from websailor.train.rl_log import reward_gain

    def write(rewards_by_step):
        path = tmp_path / "rollouts.jsonl"
        lines = [json.dumps({"step": s, "reward": r}) for s, rs in enumerate(rewards_by_step, 1) for r in rs]
        path.write_text("\n".join(lines) + "\n" + '{"step": 99, "rew')  # an unfinished last line is skipped
        return path

    rising = write([[0.0] * 6 + [1.0] * 2] * 10 + [[1.0] * 6 + [0.0] * 2] * 10)
    g = reward_gain(rising)
    assert (g["steps"], g["window"], g["first"], g["last"], g["diff"]) == (20, 10, 0.25, 0.75, 0.5)
    assert 0.3 < g["diff_ci95"][0] < 0.5 < g["diff_ci95"][1] < 0.7 and len(g["reward_per_step"]) == 20
    rng = random.Random(0)
    flat = reward_gain(write([[float(rng.random() < 0.4) for _ in range(8)] for _ in range(12)]), window=6)
    assert flat["window"] == 6 and flat["diff_ci95"][0] < 0 < flat["diff_ci95"][1]
    short = reward_gain(write([[0.0, 1.0], [1.0, 1.0], [None, 1.0]]))  # fewer steps than two windows: halved
    assert short["window"] == 1 and short["first"] == 0.5 and short["last"] == 1.0
    assert reward_gain(tmp_path / "none.jsonl") is None and reward_gain(write([[1.0]])) is None


def test_item_reward_gain_pairs_each_item_with_itself(tmp_path):
    """Easy items drawn early and hard ones late: the windows see a fall, while every item
    rose between its visits, which the item-paired gain shows."""
    from websailor.train.rl_log import item_reward_gain, reward_gain

    rows = []
    plan = [("easy1", 0.5), ("easy2", 0.5), ("hard1", 0.0), ("hard2", 0.0)]  # first visits, steps 1-4
    plan += [("easy1", 0.75), ("easy2", 0.75), ("hard1", 0.25), ("hard2", 0.25)]  # second visits, steps 5-8
    for step, (item, rate) in enumerate(plan, 1):
        rows += [{"step": step, "id": item, "reward": float(k < rate * 4)} for k in range(4)]
    rows.append({"step": 8, "id": "hard2", "reward": None})  # ungraded: left out
    rows.append({"step": 1, "id": "once", "reward": 1.0})  # visited once: no pair
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    g = item_reward_gain(path)
    assert (g["items"], g["visits"], g["up"], g["down"], g["same"]) == (4, 8, 4, 0, 0)
    assert (g["first"], g["last"], g["diff"]) == (0.25, 0.5, 0.25)
    assert 0 < g["diff_ci95"][0] <= 0.25 <= g["diff_ci95"][1]
    assert (g["distinct_items"], g["items_per_step"]) == (5, 1.12)  # "once" shares step 1 with easy1
    assert reward_gain(path, window=2)["diff"] < 0  # the windows mistake the draw for a fall
    assert item_reward_gain(tmp_path / "none.jsonl") is None
    path.write_text(json.dumps({"step": 1, "id": "a", "reward": 1.0}) + "\n")
    assert item_reward_gain(path) is None


def test_forward_passes_skip_the_batch_padding(smollm2_path: Path, tmp_path: Path):
    """Each micro-batch's forward sees only its own tokens, and its log-probabilities and
    entropies on the completion equal those of the row run alone; padding positions are 0."""
    import torch
    from transformers import AutoModelForCausalLM

    from tests.test_sft import _save_tiny
    from websailor.train.rl.trim import live_columns, trimmed_logps

    model = AutoModelForCausalLM.from_pretrained(_save_tiny(tmp_path / "tiny", None)).eval()
    seen = []

    def forward(ids, mask, keep, rows=None, compute_entropy=False):
        seen.append(tuple(ids.shape))
        logits = model(input_ids=ids, attention_mask=mask).logits[:, -keep - 1 : -1].float()
        logps = logits.log_softmax(-1).gather(-1, ids[:, -keep:, None]).squeeze(-1)
        entropy = -(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1) if compute_entropy else None
        return logps, entropy, None

    # rows of (prompt length, completion length): left-padded prompts, right-padded completions
    shapes, width_p, width_c = [(5, 9), (3, 2), (5, 4)], 5, 9
    gen = torch.Generator().manual_seed(0)
    ids = torch.zeros(len(shapes), width_p + width_c, dtype=torch.long)
    mask = torch.zeros_like(ids)
    rows = []
    for i, (p, c) in enumerate(shapes):
        row = torch.randint(1, 49152, (p + c,), generator=gen)
        ids[i, width_p - p : width_p + c], mask[i, width_p - p : width_p + c] = row, 1
        rows.append(row)
    assert live_columns(mask[1:2], width_c) == (2, 7) and live_columns(mask, width_c) == (0, 14)
    with torch.no_grad():
        logps, entropy, aux = trimmed_logps(forward, ids, mask, width_c, batch_size=1, compute_entropy=True)
        alone = [
            forward(r[None], torch.ones(1, len(r), dtype=torch.long), c, compute_entropy=True)
            for r, (_, c) in zip(rows, shapes)
        ]
    assert seen[:3] == [(1, 14), (1, 5), (1, 9)] and aux is None
    assert logps.shape == entropy.shape == (3, width_c)
    for i, (_, c) in enumerate(shapes):
        assert torch.allclose(logps[i, :c], alone[i][0][0], atol=1e-5)
        assert torch.allclose(entropy[i, :c], alone[i][1][0], atol=1e-5)
        assert not logps[i, c:].any() and not entropy[i, c:].any()
