"""The vLLM rollout path against a real vLLM server (the CPU build that ``make vllm`` installs
into .venv-vllm; CI builds it): ``run`` and ``eval`` with token ids recorded, the weight sync,
two RL steps with a sync between them, and a server killed mid-run. Skipped when no vLLM is
found (``make test`` without ``make vllm``; CI sets ``WEBSAILOR_REQUIRE_VLLM=1`` and fails instead); marked ``vllm`` (``make test-fast`` leaves them out).

The tests share two servers and run in file order: one of the embedded model for the replies,
``run`` and ``eval`` (the ones that change its weights come last), and one of a tiny random
model (two layers, 3 M parameters, SmolLM2's tokenizer) for the RL steps, whose updates,
checkpoints and weight syncs of the 135 M model took minutes on two cores.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path

import pytest

from websailor.errors import ConfigError

pytestmark = pytest.mark.vllm


def _vllm_python() -> str:
    from websailor.models.vllm_launch import find_vllm_python

    root = Path(__file__).resolve().parent.parent
    local = root / ".venv-vllm" / "bin" / "python"
    try:
        return find_vllm_python(local if local.is_file() else None)
    except ConfigError as e:
        if os.environ.get("WEBSAILOR_REQUIRE_VLLM") == "1":  # CI: the vLLM path must run
            pytest.fail(f"WEBSAILOR_REQUIRE_VLLM=1 but no vLLM: {e}")
        pytest.skip(f"no vLLM: {e}")


@contextmanager
def _served(model: Path, logs: Path):
    """A vLLM server for ``model`` (2 GiB of key/value cache, 4,096 tokens of context, eager
    unless ``WEBSAILOR_VLLM_ARGS`` says otherwise), started as a job's ``--engine vllm`` starts
    one (:func:`websailor.models.serving.serve_for_job`); on exit it is stopped, and nothing of
    it is left: no process of its group, no shared-memory file its workers made."""
    from websailor.models import serving

    _vllm_python()  # skipped (or failed under WEBSAILOR_REQUIRE_VLLM) without vLLM
    before = {k: os.environ.get(k) for k in ("VLLM_CPU_KVCACHE_SPACE", "WEBSAILOR_VLLM_ARGS")}
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # read by every start of the server (one test restarts it)
    # no compilation: a start takes about 60 s instead of 160 s on two cores (docs/agent.md)
    os.environ.setdefault("WEBSAILOR_VLLM_ARGS", "--enforce-eager")
    shm_before = serving._shm_names()
    served = serving.serve_for_job(
        f"hf:{model}", "vllm", 100, max_model_len=4096, log_path=logs / "vllm.log", startup_timeout_s=900
    )
    srv = served.server
    try:
        yield srv
    finally:
        group = srv.proc.pid
        served.close()
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
    try:
        os.killpg(group, 0)
        left = [p.name for p in Path("/proc").glob("[0-9]*") if _in_group(p, group)]
    except ProcessLookupError:
        left = []
    assert not left, f"processes of the vLLM server's group survived: {left}"
    new_shm = serving._shm_names() - shm_before - {n for n in serving._shm_names() if n.startswith("websailor-policy")}
    assert not {n for n in new_shm if n not in serving._mapped_shm()}, f"left in /dev/shm: {new_shm}"


@pytest.fixture(scope="module")
def server(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """One vLLM server of the embedded model (:func:`_served`)."""
    with _served(smollm2_path, tmp_path_factory.mktemp("vllm")) as srv:
        yield srv


@pytest.fixture(scope="module")
def tiny_path(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.test_sft import _save_tiny

    return _save_tiny(tmp_path_factory.mktemp("tiny") / "llama", smollm2_path, hidden_size=64)


@pytest.fixture(scope="module")
def tiny_server(tiny_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """One vLLM server of the tiny model, for the RL steps (:func:`_served`)."""
    with _served(tiny_path, tmp_path_factory.mktemp("vllm_tiny")) as srv:
        yield srv


def _in_group(proc: Path, group: int) -> bool:
    try:
        fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[2]) == group and fields[0] != "Z"
    except (OSError, IndexError, ValueError):
        return False


def _hf_logprobs(model, prompt: list[int], ids: list[int]) -> list[float]:
    """The log-probability of each of ``ids`` after ``prompt`` under ``model`` (temperature 1)."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0].float().log_softmax(-1)
    return [logits[len(prompt) - 1 + i, t].item() for i, t in enumerate(ids)]


def _greedy(chat, conv) -> tuple[list[int], list[float]]:
    from websailor.models.base import SamplingParams

    g = chat.chat(conv, SamplingParams(temperature=1e-6, top_p=1.0, presence_penalty=0.0, max_tokens=16, stop=[]))
    return g.token_ids, g.logprobs


CONV = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Name three fruits."}]


def test_replies_carry_the_sampled_ids_and_logprobs(server, smollm2_path: Path):
    """The server continues the template's ids; its reply's ids and bf16 log-probabilities
    match the fp32 transformers model on the same ids; a stop string is cut from the ids."""
    import torch
    from transformers import AutoModelForCausalLM

    from websailor.models import load_model
    from websailor.models.base import SamplingParams

    chat = load_model(server.spec, check=True)
    assert chat.max_context == 4096
    g = chat.chat(CONV, SamplingParams(temperature=1.0, top_p=1.0, presence_penalty=0.0, max_tokens=24))
    assert g.token_ids and len(g.logprobs) == len(g.token_ids)
    hf = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32)
    ref = _hf_logprobs(hf, chat.prompt_ids(CONV), g.token_ids)
    diffs = [abs(a - b) for a, b in zip(g.logprobs, ref)]
    assert sum(diffs) / len(diffs) < 0.1, diffs
    ids, _ = _greedy(chat, CONV)
    text = chat.tokenizer.decode(ids, skip_special_tokens=True)
    stop = text.strip().split()[1]  # a word in the middle of the greedy reply
    cut = chat.chat(CONV, SamplingParams(temperature=1e-6, top_p=1.0, presence_penalty=0.0, max_tokens=16, stop=[stop]))
    assert stop not in cut.text and text.startswith(cut.text.rstrip())
    assert len(cut.token_ids) < len(ids) and chat.tokenizer.decode(cut.token_ids).startswith(cut.text)
    chat.close()


def test_run_and_eval_through_the_server(server, vital_dir: Path, tmp_path: Path):
    """`run` and `eval` with a vllm: spec record every turn's sampled ids and log-probabilities."""
    from typer.testing import CliRunner

    from websailor.cli import app

    runner = CliRunner()
    out = tmp_path / "run.jsonl"
    r = runner.invoke(
        app,
        ["run", "Who painted the Mona Lisa?", "--model", server.spec, "--corpus", str(vital_dir)]
        + ["--max-calls", "3", "--out", str(out)],
    )
    assert r.exit_code == 0, r.output
    rec = json.loads(out.read_text().splitlines()[0])
    turns = [m for m in rec["messages"] if m["role"] == "assistant"]
    assert rec["model"] == server.spec and turns
    assert all(len(m["token_ids"]) == len(m["logprobs"]) > 0 for m in turns)
    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps({"id": "q1", "question": "Which river flows through Paris?", "answer": "Seine"}) + "\n")
    r = runner.invoke(
        app,
        ["eval", "--bench", str(qa), "--model", server.spec, "--corpus", str(vital_dir), "--rollouts", "2"]
        + ["--max-calls", "2", "--out", str(tmp_path / "eval")],
    )
    assert r.exit_code == 0, r.output
    trajs = [json.loads(x) for x in (tmp_path / "eval" / "trajectories.jsonl").read_text().splitlines()]
    assert len(trajs) == 2 and all(m.get("token_ids") for t in trajs for m in t["messages"] if m["role"] == "assistant")


def test_a_sync_changes_the_servers_weights(server, smollm2_path: Path):
    """After a sync, the log-probabilities the server samples with (temperature 1) are the trainer
    model's within bf16 and no longer the old ones; syncing the old weights back restores them."""
    import torch
    from transformers import AutoModelForCausalLM

    from websailor.models import load_model
    from websailor.models.base import SamplingParams
    from websailor.train.rl.sync import ServerWeightSync

    chat = load_model(server.spec, check=True)
    sync = ServerWeightSync(server.spec)
    sync.check()
    base = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32)
    moved = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    prompt = chat.prompt_ids(CONV)

    def distance_to(*models) -> list[float]:
        g = chat.chat(CONV, SamplingParams(temperature=1.0, top_p=1.0, presence_penalty=0.0, max_tokens=24, stop=[]))
        refs = [_hf_logprobs(m, prompt, g.token_ids) for m in models]
        return [sum(abs(a - b) for a, b in zip(g.logprobs, ref)) / len(ref) for ref in refs]

    assert distance_to(base)[0] < 0.1
    sync.push(moved, 1)
    assert sync.version == 1 and sync.last_sync_s > 0
    to_moved, to_base = distance_to(moved, base)
    assert to_moved < 0.1 and to_base > 3 * to_moved, (to_moved, to_base)
    sync.push(base, 0)
    to_moved, to_base = distance_to(moved, base)
    assert to_base < 0.1 and to_moved > 3 * to_base, (to_moved, to_base)
    chat.close()


def _rl_settings(spec: str | list[str], **kw):
    from websailor.train.rl import load_settings

    settings = {
        "group_size": 2,
        "batch_size": 2,
        "max_steps": 2,
        "max_calls": 2,
        "max_tokens_per_turn": 24,
        "max_context_tokens": 4096,
        "learning_rate": 1e-2,  # a random tiny model: a step that moves its log-probabilities well past bf16 noise
        "concurrency": 2,
        "save_steps": 1,
        "precision": "auto",  # fp32 where bf16 products are slow (170x on some CPUs)
        "rollout_server": spec,
    }
    return load_settings(None, **(settings | kw))


def _distances(rollout: dict, tok, step1, start) -> tuple[float, float]:
    """Mean |server log-prob - HF log-prob| of the rollout's first model turn under the
    checkpoint of step 1 and under the starting weights."""
    from websailor.models.turns import TurnTemplate

    turn = next(m for m in rollout["messages"] if m["role"] == "assistant")
    prompt = TurnTemplate(tok).prompt_ids(rollout["messages"][:2])
    n = len(turn["token_ids"])
    return tuple(
        sum(abs(a - b) for a, b in zip(turn["logprobs"], _hf_logprobs(m, prompt, turn["token_ids"]))) / n
        for m in (step1, start)
    )


def _qa(path: Path) -> Path:
    path.write_text(
        json.dumps({"id": "a", "question": "Which city is the capital of France?", "answer": "Paris"}) + "\n"
    )
    return path


def test_two_rl_steps_sync_the_weights_between_them(
    tiny_server, tiny_path: Path, vital_dir: Path, tmp_path: Path, monkeypatch
):
    """Step 1 samples from the starting weights, step 2 from the weights after one update: the
    second step's sampled log-probabilities are those of checkpoint 1, not of the start."""
    import torch
    from transformers import AutoModelForCausalLM

    import websailor.train.rl.rollouts as rr
    from websailor.tools.environment import EnvSpec
    from websailor.train.rl import train_rl
    from websailor.train.rl_log import read_log

    # rewards that differ inside the group, so that the first update moves the weights
    monkeypatch.setattr(rr, "reward", lambda traj, correct, algo: float(traj.rollout % 2))
    out = tmp_path / "rl"
    summary = train_rl(
        _qa(tmp_path / "qa.jsonl"),
        f"hf:{tiny_path}",
        out,
        _rl_settings(tiny_server.spec),
        env=EnvSpec(corpus=vital_dir),
        progress=False,
    )
    assert summary["steps"] == 2
    log = read_log(out)
    assert [r["policy/version"] for r in log] == [0.0, 1.0]
    assert all(r["sync/seconds"] > 0 for r in log) and log[0]["grad_norm"] > 0
    assert all("sampling/sampling_logp_difference/mean" in r for r in log)
    rollouts = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
    assert {r["step"]: r["policy_version"] for r in rollouts} == {1: 0, 2: 1}
    second = next(r for r in rollouts if r["step"] == 2)
    from websailor.train.common import load_tokenizer

    step1 = AutoModelForCausalLM.from_pretrained(out / "checkpoints" / "checkpoint-1", dtype=torch.float32)
    start = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32)
    to_step1, to_start = _distances(second, load_tokenizer(tiny_path), step1, start)
    assert to_step1 < to_start / 2, (to_step1, to_start)


def test_two_servers_share_the_rollouts_and_take_every_sync(
    tiny_server, tiny_path: Path, vital_dir: Path, tmp_path: Path, monkeypatch
):
    """Two real servers (the module's and a second bound to one core): every batch's rollouts
    are spread over both, both take every step's weights, and step 2's rollouts on each server
    are sampled from the weights of checkpoint 1."""
    import torch
    from transformers import AutoModelForCausalLM

    import websailor.train.rl.rollouts as rr
    from websailor.models import serving
    from websailor.tools.environment import EnvSpec
    from websailor.train.common import load_tokenizer
    from websailor.train.rl import train_rl
    from websailor.train.rl_log import read_log

    monkeypatch.setattr(rr, "reward", lambda traj, correct, algo: float(traj.rollout % 2))
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", str(sorted(os.sched_getaffinity(0))[-1]))
    other = serving.serve_for_job(
        f"hf:{tiny_path}", "vllm", 100, max_model_len=4096, log_path=tmp_path / "second.log", startup_timeout_s=900
    )
    try:
        out = tmp_path / "rl"
        settings = _rl_settings([tiny_server.spec, other.spec], batch_size=4, concurrency=4)
        qa = _qa(tmp_path / "qa.jsonl")  # and a second question: a batch of two groups
        with qa.open("a") as fh:
            fh.write(json.dumps({"id": "b", "question": "Which river flows through Cairo?", "answer": "Nile"}) + "\n")
        summary = train_rl(qa, f"hf:{tiny_path}", out, settings, env=EnvSpec(corpus=vital_dir), progress=False)
    finally:
        other.close()
    assert summary["steps"] == 2
    log = read_log(out)
    assert all(r["server/0/rollouts"] + r["server/1/rollouts"] == 4 and r["servers/live"] == 2 for r in log)
    assert all(r["server/0/sync_s"] > 0 and r["server/1/sync_s"] > 0 for r in log)
    rollouts = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
    roots = {tiny_server.spec.split("@")[1].removesuffix("/v1"), other.spec.split("@")[1].removesuffix("/v1")}
    assert {r["server"] for r in rollouts} == roots and {r["step"]: r["policy_version"] for r in rollouts} == {
        1: 0,
        2: 1,
    }
    step1 = AutoModelForCausalLM.from_pretrained(out / "checkpoints" / "checkpoint-1", dtype=torch.float32)
    start = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32)
    tok = load_tokenizer(tiny_path)
    for root in roots:
        rollout = next(r for r in rollouts if r["step"] == 2 and r["server"] == root)
        to_step1, to_start = _distances(rollout, tok, step1, start)
        assert to_step1 < to_start / 2, (root, to_step1, to_start)


def test_a_killed_server_stops_the_step_and_the_run_resumes(
    tiny_server, tiny_path: Path, vital_dir: Path, tmp_path: Path, monkeypatch
):
    """The server dies during step 2's rollouts: the step stops with a clear error, nothing of
    it is trained or logged; with the server back, the same command resumes from checkpoint 1
    and finishes. A server that is down before the run starts is named before any rollout."""
    import websailor.train.rl.rollouts as rr
    from websailor.errors import ModelError
    from websailor.tools.environment import EnvSpec
    from websailor.train.rl import train_rl
    from websailor.train.rl_log import read_log

    monkeypatch.setattr(rr, "reward", lambda traj, correct, algo: float(traj.rollout % 2))
    run = rr.AgentRollouts._run

    def dies_at_step_2(self, agent, items, step, numbers=None):
        if step == 1:
            tiny_server.stop()
        return run(self, agent, items, step, numbers)

    monkeypatch.setattr(rr.AgentRollouts, "_run", dies_at_step_2)
    qa, out, settings = _qa(tmp_path / "qa.jsonl"), tmp_path / "rl", _rl_settings(tiny_server.spec)
    with pytest.raises(ModelError, match="failed on the rollout server.*rerun the same command"):
        train_rl(qa, f"hf:{tiny_path}", out, settings, env=EnvSpec(corpus=vital_dir), progress=False)
    assert [r["step"] for r in read_log(out)] == [1]
    assert (out / "checkpoints" / "checkpoint-1").is_dir() and not (out / "checkpoints" / "checkpoint-2").exists()
    with pytest.raises(ConfigError, match="still starting"):
        train_rl(qa, f"hf:{tiny_path}", out, settings, env=EnvSpec(corpus=vital_dir), progress=False)
    monkeypatch.setattr(rr.AgentRollouts, "_run", run)
    tiny_server.start()
    tiny_server.wait_ready(900)
    summary = train_rl(qa, f"hf:{tiny_path}", out, settings, env=EnvSpec(corpus=vital_dir), progress=False)
    assert summary["steps"] == 2 and [r["step"] for r in read_log(out)] == [1, 2]
