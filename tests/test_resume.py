"""Long runs survive interruption: SFT and RL killed with SIGKILL mid-run resume from their
last whole checkpoint and end at the same step count with each step's log line written once
(SFT: with the losses of an uninterrupted run); a checkpoint cut short or damaged is skipped
for the one before, never loaded; only the newest checkpoints are kept; a run folder of another
run format is refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from websailor.errors import ConfigError
from websailor.train import run_folder
from websailor.train.run_folder import check_resume, checkpoint_problem, latest_checkpoint

ROOT = Path(__file__).resolve().parents[1]

_CHILD = """
import json, sys
cfg = json.loads(sys.argv[1])
if cfg["kind"] == "sft":
    from websailor.train.sft import SFTSettings, train_sft
    train_sft(cfg["data"], cfg["model"], cfg["out"], SFTSettings(**cfg["settings"]), progress=False)
else:
    import websailor.train.rl.rollouts as rr
    from websailor.tools.environment import EnvSpec
    from websailor.train.rl import load_settings, train_rl
    rr.reward = lambda traj, correct, algo: float(traj.rollout % 2)  # every group has spread
    train_rl(cfg["data"], cfg["model"], cfg["out"], load_settings(None, **cfg["settings"]),
             env=EnvSpec(corpus=cfg["corpus"]), progress=False)
"""


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


def _kill_after(cfg: dict, log: Path, lines: int, timeout_s: float = 300) -> None:
    """Run one training in a child process and SIGKILL it once ``log`` holds ``lines`` lines."""
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(cfg)], cwd=ROOT, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout_s
    try:
        while _lines(log) < lines:
            if proc.poll() is not None:
                raise AssertionError(f"the run ended before it was killed: {proc.stderr.read().decode()[-2000:]}")
            assert time.monotonic() < deadline, "the run did not reach the step to kill it at"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


@pytest.fixture(scope="module")
def tiny(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.test_sft import _save_tiny

    return _save_tiny(tmp_path_factory.mktemp("tiny") / "llama", smollm2_path)


@pytest.mark.trainer
def test_sft_killed_mid_run_resumes_with_each_step_logged_once(tiny: Path, generated_chatml, tmp_path: Path):
    from tests.test_sft import _import_first
    from websailor.train.sft import SFTSettings, train_sft

    data = _import_first(generated_chatml.path, tmp_path / "sft.jsonl", n=6)
    values = dict(max_steps=24, batch_size=1, learning_rate=1e-3, max_length=8192, save_steps=4, keep_checkpoints=2)
    reference = train_sft(data, f"hf:{tiny}", tmp_path / "ref", SFTSettings(**values), progress=False)
    out = tmp_path / "killed"
    cfg = {"kind": "sft", "data": str(data), "model": f"hf:{tiny}", "out": str(out), "settings": values}
    _kill_after(cfg, out / "sft_log.jsonl", 10)
    killed_at = _lines(out / "sft_log.jsonl")
    assert killed_at < 24 and not (out / "sft_summary.json").exists()
    summary = train_sft(data, f"hf:{tiny}", out, SFTSettings(**values), progress=False)
    log = [json.loads(x) for x in (out / "sft_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == list(range(1, 25)) and summary["steps"] == 24
    # model, optimizer, scheduler, random states and the position in the data came back: the same losses
    ref_log = [json.loads(x) for x in (tmp_path / "ref" / "sft_log.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in log] == pytest.approx([r["loss"] for r in ref_log], rel=1e-4)
    assert [h["loss"] for h in summary["loss_history"]] == pytest.approx(
        [h["loss"] for h in reference["loss_history"]], rel=1e-4
    )
    assert all(r["tokens"] > r["loss_tokens"] > 0 and r["tokens/s"] > 0 and r["time/step_s"] > 0 for r in log)
    # only the newest checkpoints are kept
    assert [p.name for p in run_folder.checkpoints(out / "checkpoints")] == ["checkpoint-20", "checkpoint-24"]


@pytest.mark.trainer
def test_sft_killed_after_its_last_checkpoint_ends_at_its_step_count(tiny: Path, generated_chatml, tmp_path: Path):
    """Killed after the last step's checkpoint and before the model and summary were written:
    the rerun writes them from that checkpoint, without a step past --max-steps."""
    import shutil

    from tests.test_sft import _import_first
    from websailor.train.sft import SFTSettings, train_sft

    data = _import_first(generated_chatml.path, tmp_path / "sft.jsonl", n=4)
    values = dict(max_steps=4, batch_size=1, learning_rate=1e-3, lr_scheduler="constant_with_warmup", save_steps=2)
    out = tmp_path / "run"
    first = train_sft(data, f"hf:{tiny}", out, SFTSettings(**values), progress=False)
    weights = (out / "model.safetensors").read_bytes()
    for f in out.iterdir():  # back to the moment after checkpoint-4 was saved
        if f.is_file() and f.name not in ("sft_settings.json", "sft_log.jsonl"):
            f.unlink()
    shutil.rmtree(out / "tensorboard", ignore_errors=True)
    summary = train_sft(data, f"hf:{tiny}", out, SFTSettings(**values), progress=False)
    assert summary["steps"] == 4 and summary["train_loss"] == pytest.approx(first["train_loss"])
    assert [json.loads(x)["step"] for x in (out / "sft_log.jsonl").read_text().splitlines()] == [1, 2, 3, 4]
    assert (out / "model.safetensors").read_bytes() == weights


@pytest.mark.trainer
def test_rl_killed_mid_run_resumes_with_each_step_logged_once(tiny: Path, vital_dir: Path, tmp_path: Path):
    qa = tmp_path / "qa.jsonl"
    qa.write_text(
        json.dumps({"id": "q1", "question": "Which city is the capital of France?", "answer": "Paris"})
        + "\n"
        + json.dumps({"id": "q2", "question": "Which river flows through Paris?", "answer": "Seine"})
        + "\n"
    )
    values = dict(
        group_size=2,
        batch_size=2,
        max_steps=6,
        max_calls=2,
        max_tokens_per_turn=8,
        learning_rate=1e-4,
        concurrency=2,
        epochs=10,
    )
    out = tmp_path / "rl"
    cfg = {"kind": "rl", "data": str(qa), "model": f"hf:{tiny}", "out": str(out), "settings": values}
    cfg["corpus"] = str(vital_dir)
    _kill_after(cfg, out / "rl_log.jsonl", 3)
    assert not (out / "rl_summary.json").exists()
    # concurrency only schedules the rollouts: a resumed run may take another
    cfg["settings"] = {**values, "concurrency": 1}
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(cfg)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "rl_summary.json").read_text())
    assert summary["settings"]["concurrency"] == 1
    assert summary["steps"] == 6
    log = [json.loads(x) for x in (out / "rl_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2, 3, 4, 5, 6]
    rollouts = [json.loads(x)["step"] for x in (out / "rollouts.jsonl").read_text().splitlines()]
    assert sorted(rollouts) == [s for s in range(1, 7) for _ in range(2)]
    # a checkpoint after every step, the newest two kept
    assert [p.name for p in run_folder.checkpoints(out / "checkpoints")] == ["checkpoint-5", "checkpoint-6"]


# -- checkpoints ----------------------------------------------------------------------------


def _fake_checkpoint(folder: Path, step: int) -> Path:
    """A checkpoint folder with the files a trainer writes: weights, optimizer, scheduler, RNG
    states (torch archives) and the trainer state."""
    import torch
    from safetensors.torch import save_file

    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    save_file({"w": torch.arange(1000, dtype=torch.float32)}, str(path / "model.safetensors"))
    torch.save({"state": torch.ones(500)}, path / "optimizer.pt")
    torch.save({"last_epoch": 1}, path / "scheduler.pt")
    torch.save({"rng": torch.zeros(10)}, path / "rng_state.pth")
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return path


def _safetensors_with_header(path: Path, header: bytes) -> None:
    import struct

    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 64)


def _cut(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda p: (p / "trainer_state.json").unlink(), "no trainer_state.json"),
        (lambda p: _cut(p / "model.safetensors"), "model.safetensors: cut short"),
        (lambda p: _cut(p / "optimizer.pt"), "optimizer.pt: not a whole torch archive"),
        (lambda p: (p / "trainer_state.json").write_text('{"global_st'), "trainer_state.json: unreadable"),
        (lambda p: (p / "model.safetensors").write_bytes(b"\xff" * 20), "model.safetensors"),
        (lambda p: (p / "model.safetensors").unlink(), "no model weights"),
        # training_args.bin is not the weights
        (
            lambda p: ((p / "model.safetensors").unlink(), (p / "training_args.bin").write_bytes(b"x")),
            "no model weights",
        ),
        (lambda p: (p / "optimizer.pt").unlink(), "no optimizer.pt"),
        (lambda p: (p / "scheduler.pt").unlink(), "no scheduler.pt"),
        (lambda p: (p / "trainer_state.json").write_text("{}"), "no integer global_step"),
        (lambda p: _safetensors_with_header(p / "model.safetensors", b"[1, 2]"), "not a safetensors header"),
        (lambda p: _safetensors_with_header(p / "model.safetensors", b'{"w": {"dtype": "F32"}}'), "KeyError"),
    ],
)
def test_a_damaged_checkpoint_is_skipped_for_the_one_before(tmp_path: Path, caplog, damage, problem: str):
    folder = tmp_path / "checkpoints"
    _fake_checkpoint(folder, 2)
    newest = _fake_checkpoint(folder, 4)
    assert checkpoint_problem(newest) is None
    damage(newest)
    assert problem in (checkpoint_problem(newest) or "")
    with caplog.at_level("WARNING"):
        assert latest_checkpoint(folder).name == "checkpoint-2"
    assert "checkpoint-4 is damaged" in caplog.text and "resuming from checkpoint-2" in caplog.text
    # moved aside, never loaded, out of the trainer's way when it saves step 4 again
    assert not newest.exists() and (folder / "damaged-checkpoint-4").is_dir()


def test_only_the_newest_damaged_checkpoint_is_kept_aside(tmp_path: Path):
    folder = tmp_path / "checkpoints"
    _fake_checkpoint(folder, 2)
    (_fake_checkpoint(folder, 4) / "optimizer.pt").unlink()
    (folder / "damaged-checkpoint-3").mkdir()  # from an earlier session
    assert latest_checkpoint(folder).name == "checkpoint-2"
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint-2", "damaged-checkpoint-4"]


def test_a_deepspeed_checkpoint_keeps_its_optimizer_state_in_its_own_folder(tmp_path: Path):
    path = _fake_checkpoint(tmp_path, 5)
    (path / "optimizer.pt").unlink()
    (path / "scheduler.pt").unlink()
    assert "no optimizer.pt" in checkpoint_problem(path)
    (path / "global_step5").mkdir()
    assert checkpoint_problem(path) is None


def test_a_flipped_byte_inside_a_torch_archive_is_found(tmp_path: Path):
    path = _fake_checkpoint(tmp_path, 1)
    data = bytearray((path / "optimizer.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF  # in the stored tensor's bytes: the zip's checksum fails
    (path / "optimizer.pt").write_bytes(bytes(data))
    assert "optimizer.pt" in (checkpoint_problem(path) or "")


def test_a_run_of_another_run_format_is_refused(tmp_path: Path):
    out = tmp_path / "run"
    _fake_checkpoint(out / "checkpoints", 3)
    record = {"model": "m", "lr": 1, run_folder.FORMAT_KEY: run_folder.RUN_FORMAT}
    (out / "settings.json").write_text(json.dumps({"model": "m", "lr": 1}))  # written before run formats
    with pytest.raises(ConfigError, match="another version of websailor .run format 1, this version writes 2"):
        check_resume(out, record, "settings.json", "summary.json", "SFT")
    (out / "settings.json").write_text(json.dumps(record))
    assert check_resume(out, record, "settings.json", "summary.json", "SFT").name == "checkpoint-3"
    with pytest.raises(ConfigError, match="other lr"):
        check_resume(out, {**record, "lr": 2}, "settings.json", "summary.json", "SFT")
    # a refused folder is left as it was, damaged checkpoints included
    _cut(out / "checkpoints" / "checkpoint-3" / "model.safetensors")
    with pytest.raises(ConfigError):
        check_resume(out, {**record, "lr": 2}, "settings.json", "summary.json", "SFT")
    assert (out / "checkpoints" / "checkpoint-3").is_dir()


def test_a_step_log_line_without_its_step_is_named_on_resume(tmp_path: Path):
    """A resumed run replays its step log into TensorBoard: a line without an integer ``step`` (a
    hand edit, another tool's record) is refused naming the file and line, not a KeyError."""
    from websailor.errors import InputFormatError
    from websailor.train.step_log import StepLogger

    log = tmp_path / "rl_log.jsonl"
    log.write_text('{"step": 1, "reward": 0.5}\n{"reward": 0.25}\n')
    with pytest.raises(InputFormatError, match=r"rl_log.jsonl line 2 is not a step record \(no integer 'step'\)"):
        StepLogger(log, tmp_path / "tb", replay=True)
    log.write_text('{"step": 1, "reward": 0.5}\n{"step": 2, "reward": 0.25}\n')
    StepLogger(log, tmp_path / "tb", replay=True).close()
    assert any((tmp_path / "tb").iterdir())


def test_keep_checkpoints_takes_a_count_not_true():
    from websailor.train.sft import load_settings

    with pytest.raises(ConfigError, match="keep_checkpoints"):
        load_settings(None, keep_checkpoints=True)
    assert load_settings(None, keep_checkpoints=3).keep_checkpoints == 3
