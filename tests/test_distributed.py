"""Several trainer processes on CPU (``accelerate launch --config_file
configs/accelerate/cpu.yaml``, gloo): two processes with half the batch each reach the weights
of one process with the whole batch, for SFT and for RL steps; an RL run on a rollout server
under the launcher numbers its rollouts as one process would, writes its logs and checkpoints
once, pushes each step's weights once, and resumes under the launcher."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import serving, vllm_imitation

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "accelerate" / "cpu.yaml"
pytestmark = pytest.mark.trainer


@pytest.fixture(scope="module")
def tiny_model(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.test_sft import _save_tiny

    return _save_tiny(tmp_path_factory.mktemp("tiny") / "llama", smollm2_path)


def _env() -> dict[str, str]:
    # one core each; no port clash with another test's launch
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_PORT": str(port), "TRL_EXPERIMENTAL_SILENCE": "1"}


def _launch(args: list[str], processes: int, timeout: int = 600, ok: bool = True) -> subprocess.CompletedProcess:
    """``args`` (a module's or a script's) as one plain process, or under ``accelerate launch``
    with ``processes``; ``ok``: it must exit 0."""
    accelerate = Path(sys.executable).with_name("accelerate")
    env = _env()
    if processes == 1:
        cmd = [sys.executable, *args]
    else:
        cmd = [str(accelerate), "launch", "--config_file", str(CONFIG), "--num_processes", str(processes)]
        cmd += ["--main_process_port", env["MASTER_PORT"], *args]
    # its own session, so that a launch that times out leaves no process behind
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT, start_new_session=True
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    r = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    errors = [line for line in (r.stdout + r.stderr).splitlines() if line.startswith(("error", "Error", "[rank"))]
    assert r.returncode == 0 or not ok, "\n".join(errors[:20]) or r.stderr[-3000:]
    return r


def _weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


def _close(a: dict, b: dict, base: dict) -> tuple[float, float]:
    """The largest difference of ``a`` and ``b`` and the largest step ``a`` took from ``base``
    (over ``base``'s tensors: a tied LM head is saved under one name or two)."""
    diff = max(float((a[k] - b[k]).abs().max()) for k in base)
    step = max(float((a[k] - base[k]).abs().max()) for k in base)
    return diff, step


def test_two_sft_processes_reach_the_weights_of_one(tiny_model: Path, generated_chatml, tmp_path: Path):
    """Two steps of 2 trajectories: two processes with 1 each (no accumulation) and one process
    with 2 (accumulating) log the same losses and reach the same weights; one process writes
    the step log and the summary, and the summary says how each process accumulated."""
    from tests.test_sft import _import_first

    data = _import_first(generated_chatml.path, tmp_path / "sft.jsonl", n=4)
    runs = {}
    for n in (1, 2):
        out = tmp_path / f"p{n}"
        args = ["-m", "websailor.cli", "train", "sft", "--data", str(data), "--model", f"hf:{tiny_model}"]
        args += ["--out", str(out), "--max-steps", "2", "--batch-size", "2", "--lr", "1e-2", "--warmup-ratio", "0"]
        r = _launch([*args, "--precision", "fp32", "--full"], n)
        assert r.stdout.count("model saved to") == 1  # one process reports
        runs[n] = out
    one, two = (json.loads((runs[n] / "sft_summary.json").read_text()) for n in (1, 2))
    assert (one["gradient_accumulation"], two["gradient_accumulation"]) == (2, 1)
    assert [h["loss"] for h in two["loss_history"]] == pytest.approx([h["loss"] for h in one["loss_history"]], 1e-5)
    assert len((runs[2] / "sft_log.jsonl").read_text().splitlines()) == 2  # written once, not per process
    base = _weights(tiny_model / "model.safetensors")
    diff, step = _close(_weights(runs[1] / "model.safetensors"), _weights(runs[2] / "model.safetensors"), base)
    assert step > 1e-3 and diff < 0.01 * step, (diff, step)


def test_two_rl_processes_reach_the_weights_of_one(tiny_model: Path, tmp_path: Path):
    """Two RL steps on scripted rollouts (tests/distributed_rl_step.py): each of two processes
    gets one whole group of the two, and they log the loss and gradient norm, and reach the
    weights, of one process with both groups."""
    script = str(ROOT / "tests" / "distributed_rl_step.py")
    for n in (1, 2):
        _launch([script, str(tiny_model), str(tmp_path / f"p{n}")], n)
    one, two = (json.loads((tmp_path / f"p{n}" / "logs.json").read_text()) for n in (1, 2))
    assert two["world"] == 2
    first = two["prompts"][0][0]  # process 0's prompts of step 1: one question, its whole group
    assert len(first) == 2 and len(set(first)) == 1 and two["prompts"][1][0] != first
    assert sorted(two["prompts"][0][0] + two["prompts"][1][0]) == sorted(one["prompts"][0][0])
    for a, b in zip(one["logs"], two["logs"]):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5) and b["grad_norm"] == pytest.approx(a["grad_norm"], 1e-5)
    base = _weights(tiny_model / "model.safetensors")
    diff, step = _close(
        _weights(tmp_path / "p1" / "model.safetensors"), _weights(tmp_path / "p2" / "model.safetensors"), base
    )
    assert step > 1e-3 and diff < 0.01 * step, (diff, step)


REPLY = "<think>\nThe capital of France is Paris.\n</think>\n<answer>Paris</answer>"


def test_rl_on_a_server_under_the_launcher(tiny_model: Path, vital_dir: Path, tmp_path: Path):
    """``train rl`` on a vLLM imitation under two processes: the rollouts of each step are the
    ones one process would sample (the same rollout numbers), one process writes the step log
    (with the whole batch's figures), the rollouts and the checkpoints, each sync is one push,
    and a rerun with more steps resumes under the launcher."""
    from websailor.train.common import load_tokenizer

    qa = tmp_path / "qa.jsonl"
    rows = [("a", "Which city is the capital of France?", "Paris"), ("b", "Which river flows through Paris?", "Seine")]
    qa.write_text("".join(json.dumps({"id": i, "question": q, "answer": a}) + "\n" for i, q, a in rows))
    # each group gets one Paris and one Seine reply: every group has spread, so every step trains
    seine = REPLY.replace("The capital of France is Paris", "The Seine").replace(">Paris<", ">Seine<")
    app = vllm_imitation(load_tokenizer(tiny_model), [REPLY, seine], root=str(tiny_model))
    with serving(app) as url:

        def run(n: int, out: Path, steps: int) -> subprocess.CompletedProcess:
            args = ["-m", "websailor.cli", "train", "rl", "--data", str(qa), "--model", f"hf:{tiny_model}"]
            args += ["--out", str(out), "--group-size", "2", "--batch", "4", "--max-steps", str(steps)]
            args += ["--max-calls", "2", "--concurrency", "2", "--corpus", str(vital_dir)]
            args += ["--rollout-server", f"vllm:policy@{url}/v1", "--sync-dir", str(tmp_path / "sync")]
            return _launch([*args, "--precision", "fp32"], n)

        run(1, tmp_path / "one", 2)
        reloads = len(app.state.reloads)
        r = run(2, tmp_path / "two", 2)
        assert r.stdout.count("model saved to") == 1
        assert len(app.state.reloads) - reloads == 1 + 2  # the probe and one push a step, not one per process
        log = [json.loads(line) for line in (tmp_path / "two" / "rl_log.jsonl").read_text().splitlines()]
        assert [rec["step"] for rec in log] == [1, 2] and all(rec["processes"] == 2 for rec in log)
        assert log[0]["reward/accuracy"] == 0.5  # one right in each group, in both processes' groups
        # the importance-sampling figures cover both processes' tokens, as one process's cover its whole batch
        one = json.loads((tmp_path / "one" / "rl_log.jsonl").read_text().splitlines()[0])
        assert log[0]["rollouts/in_loss_share"] == one["rollouts/in_loss_share"] == 1.0
        figures = [k for k in one if k.startswith("sampling/")]
        assert len(figures) == 5, sorted(one)
        for key in figures:  # measured: within 2e-6 (float32 padding); the main process's tokens alone: 1.1e-4 off
            assert log[0][key] == pytest.approx(one[key], rel=2e-5), key

        def rollouts(out: Path) -> list[tuple]:
            records = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
            return sorted((r["step"], r["id"], r["rollout"]) for r in records)

        assert rollouts(tmp_path / "two") == rollouts(tmp_path / "one") and len(rollouts(tmp_path / "one")) == 8
        assert sorted(p.name for p in (tmp_path / "two" / "checkpoints").iterdir())[-1] == "checkpoint-2"
        run(2, tmp_path / "two", 3)  # one more step, from checkpoint 2
        log = [json.loads(line) for line in (tmp_path / "two" / "rl_log.jsonl").read_text().splitlines()]
        assert [rec["step"] for rec in log] == [1, 2, 3] and len(rollouts(tmp_path / "two")) == 12


def test_a_sampling_prefilter_is_refused_under_several_processes(tiny_model: Path, vital_dir, tmp_path, monkeypatch):
    """The prefilter samples in one process: under a launcher of two it is one line before any
    work, pointing at --prefilter-from."""
    from websailor.errors import ConfigError
    from websailor.tools.environment import EnvSpec
    from websailor.train.rl import load_settings, train_rl

    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps({"id": "a", "question": "Which city is the capital of France?", "answer": "Paris"}) + "\n")
    monkeypatch.setenv("WORLD_SIZE", "2")
    settings = load_settings(None, group_size=2, batch_size=4, prefilter=4)
    with pytest.raises(ConfigError, match="--prefilter samples its rollouts in one process, and this run has 2"):
        train_rl(qa, f"hf:{tiny_model}", tmp_path / "out", settings, env=EnvSpec(corpus=vital_dir), progress=False)
    assert not (tmp_path / "out").exists()


def test_a_failed_first_sync_stops_every_process_at_once(tiny_model: Path, vital_dir: Path, tmp_path: Path):
    """The servers are told a sync folder they cannot read: the main process's probe fails, and
    the other process stops with it (it used to go on into the trainer and wait there until
    the launcher killed it, 30 s later)."""
    import time

    from websailor.train.common import load_tokenizer

    qa = tmp_path / "qa.jsonl"
    rows = [("a", "Which city is the capital of France?", "Paris"), ("b", "Which river flows through Paris?", "Seine")]
    qa.write_text("".join(json.dumps({"id": i, "question": q, "answer": a}) + "\n" for i, q, a in rows))
    # each group gets one Paris and one Seine reply: every group has spread, so every step trains
    seine = REPLY.replace("The capital of France is Paris", "The Seine").replace(">Paris<", ">Seine<")
    app = vllm_imitation(load_tokenizer(tiny_model), [REPLY, seine], root=str(tiny_model))
    with serving(app) as url:
        args = ["-m", "websailor.cli", "train", "rl", "--data", str(qa), "--model", f"hf:{tiny_model}"]
        args += ["--out", str(tmp_path / "out"), "--group-size", "2", "--batch", "4", "--max-steps", "1"]
        args += ["--corpus", str(vital_dir), "--rollout-server", f"vllm:policy@{url}/v1", "--precision", "fp32"]
        args += ["--sync-dir", str(tmp_path / "sync"), "--server-sync-dir", "/nonexistent/sync"]
        t0 = time.monotonic()
        r = _launch(args, 2, ok=False)
        seconds = time.monotonic() - t0
    assert r.returncode != 0
    text = r.stdout + r.stderr
    assert "the first weight sync failed before any rollout" in text and "/nonexistent/sync" in text
    assert "the first weight sync failed on the main process of this launch" in text
    assert "SIGKILL" not in text and seconds < 25 + 30, seconds  # both stopped; no 30 s wait for a kill
    assert not app.state.requests  # no rollout
