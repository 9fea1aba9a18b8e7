"""``--engine auto|local|vllm``: a job starts a vLLM server for a local model when its rollouts
pay for the start-up, uses it, and stops it (process group, workers, shared memory) on exit, on
Ctrl-C and on error; below the break-even or without vLLM it runs the local engine; records name
the model the same way whichever engine served it. The server here is a stand-in with vLLM's
HTTP API, a worker and a mapped ``/dev/shm`` file (tests/fakes.py); tests/test_vllm_server.py
starts the real one the same way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes import alive, write_fake_vllm

from websailor.errors import ConfigError
from websailor.models import serving
from websailor.models.serving import BREAK_EVEN_ROLLOUTS, serve_for_job

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = [
    ("Which city is the capital of France?", "Paris"),
    ("Which river flows through Paris?", "Seine"),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci"),
    ("Which museum displays the Mona Lisa?", "Louvre"),
    ("What is the largest planet of the Solar System?", "Jupiter"),
    ("Which city hosts the Eiffel Tower?", "Paris"),
]


@pytest.fixture
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    python, pids = write_fake_vllm(tmp_path)
    monkeypatch.setenv("WEBSAILOR_VLLM_PYTHON", str(python))
    monkeypatch.setenv("FAKE_VLLM_PIDS", str(pids))
    yield pids
    for line in pids.read_text().splitlines() if pids.exists() else []:  # a failed test's leftovers
        for pid in map(int, line.split()[:2]):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def _qa(path: Path) -> Path:
    path.write_text(
        "".join(json.dumps({"id": f"q{i}", "question": q, "answer": a}) + "\n" for i, (q, a) in enumerate(QUESTIONS))
    )
    return path


def _left_behind(pids: Path) -> list[str]:
    """What a stopped stand-in left: live processes and /dev/shm files."""
    left = []
    for line in pids.read_text().splitlines():
        server, worker, shm = line.split()
        left += [f"process {p}" for p in (int(server), int(worker)) if alive(p)]
        left += [shm] if os.path.exists(shm) else []
    return left


def _eval(args: list[str], env: dict, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "websailor.cli", "eval", *args], cwd=ROOT, env=env, stderr=subprocess.PIPE, **kw
    )


def _finished(proc: subprocess.Popen, timeout: float) -> str:
    """The stderr of ``proc`` once it exits; killed when it has not within ``timeout`` seconds
    (a loaded machine: the test fails, and no child of it runs on into the next test)."""
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"eval did not finish within {timeout:g} s:\n" + _stopped(proc)[-3000:])
    return err.decode()


def _stopped(proc: subprocess.Popen) -> str:
    """Stop ``proc`` as a user would (SIGTERM: it stops the server it started), SIGKILL after a
    minute; its stderr."""
    proc.terminate()
    try:
        return proc.communicate(timeout=60)[1].decode()
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[1].decode()


@pytest.mark.model
def test_auto_starts_a_server_for_enough_rollouts_and_stops_it(
    fake_vllm: Path, smollm2_home: Path, vital_dir: Path, tmp_path: Path
):
    qa, out = _qa(tmp_path / "qa.jsonl"), tmp_path / "eval"
    args = ["--bench", str(qa), "--out", str(out), "--rollouts", "3", "--corpus", str(vital_dir), "--max-calls", "2"]
    proc = _eval([*args, "--engine", "auto"], dict(os.environ))  # 6 x 3 = 18 rollouts: past the break-even
    err = _finished(proc, 300)
    assert proc.returncode == 0, err[-3000:]
    assert "starting a vLLM server for smollm2 (18 rollouts" in err
    assert len(fake_vllm.read_text().splitlines()) == 1 and _left_behind(fake_vllm) == []
    records = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(records) == 18 and {r["model"] for r in records} == {"smollm2"}  # not the server's port
    assert all(r["prediction"] == "Paris" for r in records)
    # a resumed run of more rollouts continues the same run, whichever engine serves it now
    proc = _eval([*args, "--rollouts", "4", "--engine", "local", "--max-tokens", "8"], dict(os.environ))
    err = _finished(proc, 600)  # the local engine: minutes on two loaded cores
    assert proc.returncode == 0 and "holds trajectories of model" not in err, err[-3000:]
    assert len((out / "trajectories.jsonl").read_text().splitlines()) == 24


@pytest.mark.model
def test_ctrl_c_stops_the_server_it_started(fake_vllm: Path, smollm2_home: Path, vital_dir: Path, tmp_path: Path):
    qa, out = _qa(tmp_path / "qa.jsonl"), tmp_path / "eval"
    # every reply takes 10 minutes: stopped while in flight; a process that hangs on Ctrl-C dumps
    # every thread's stack when the test gives up (SIGABRT under PYTHONFAULTHANDLER)
    env = {**os.environ, "FAKE_VLLM_DELAY": "600", "PYTHONFAULTHANDLER": "1"}
    args = ["--bench", str(qa), "--out", str(out), "--rollouts", "4", "--corpus", str(vital_dir)]
    # a suite started in the background by a non-interactive shell inherits SIGINT ignored, and
    # Python then installs no Ctrl-C handler: the child gets the default one back, as in a terminal
    restore = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    proc = _eval([*args, "--engine", "vllm", "--concurrency", "2"], env, preexec_fn=restore)
    deadline = time.monotonic() + 240
    while not (fake_vllm.exists() and (tmp_path / "eval").exists()):
        if proc.poll() is not None or time.monotonic() > deadline:  # no child of this test runs on
            pytest.fail("the server or the eval folder did not come: " + _stopped(proc)[-3000:])
        time.sleep(0.2)
    time.sleep(3)  # rollouts waiting on the server
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        _, err = proc.communicate(timeout=30)
        pytest.fail("eval did not exit within 120 s of Ctrl-C; its threads:\n" + err.decode()[-6000:])
    assert proc.returncode == 130, err.decode()[-3000:]
    assert _left_behind(fake_vllm) == []


@pytest.mark.model
def test_an_error_stops_the_server_and_the_local_engine_runs_below_the_break_even(
    fake_vllm: Path, smollm2_home: Path, caplog
):
    from websailor.agent.session import open_agent
    from websailor.tools.environment import EnvSpec

    with pytest.raises(RuntimeError, match="boom"):
        with open_agent("smollm2", EnvSpec(kind="none"), engine="vllm", rollouts=1) as session:
            assert session.served.engine == "vllm" and session.agent.model.name == "smollm2"
            raise RuntimeError("boom")
    assert _left_behind(fake_vllm) == []
    with caplog.at_level("INFO"):
        served = serve_for_job("smollm2", "auto", BREAK_EVEN_ROLLOUTS - 1)
    assert served.engine == "local" and served.spec == "smollm2" and "fewer than the 15" in caplog.text
    assert not fake_vllm.read_text().strip().splitlines()[1:]  # no second server


def test_without_vllm_auto_says_so_and_vllm_names_the_install(monkeypatch: pytest.MonkeyPatch, tmp_path, caplog):
    monkeypatch.setattr(serving, "vllm_available", lambda: None)
    with caplog.at_level("WARNING"):
        served = serve_for_job("smollm2", "auto", 100)
    assert served.engine == "local" and "vLLM is not installed (make vllm" in caplog.text
    with pytest.raises(ConfigError, match=r"--engine vllm: vLLM is not installed: make vllm .* or --engine local"):
        serve_for_job("smollm2", "vllm", 100)
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    with pytest.raises(ConfigError, match="pip install vllm"):
        serve_for_job("smollm2", "vllm", 100)
    # specs that name a server are used as they are; --engine vllm on them is refused
    assert serve_for_job("vllm:policy@http://127.0.0.1:9/v1", "auto", 100).engine == "server"
    with pytest.raises(ConfigError, match="is served already"):
        serve_for_job("openai:m@http://127.0.0.1:9/v1", "vllm", 100)
    with pytest.raises(ConfigError, match="--engine 'gpu'"):
        serve_for_job("smollm2", "gpu", 100)


def test_a_full_dev_shm_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    import shutil

    monkeypatch.setattr(serving, "SHM", tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(100, 100, 10 * 2**20))
    with pytest.raises(ConfigError, match=r"has 10 MB free and a vLLM server needs about 64 MB"):
        serving.check_shm(serving.SHM_NEED_MB, "a vLLM server")


def test_orphaned_shared_memory_is_removed_and_mapped_files_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    import mmap

    monkeypatch.setattr(serving, "SHM", tmp_path)
    (tmp_path / "old").write_bytes(b"x")
    before = serving._shm_names()
    (tmp_path / "psm_orphan").write_bytes(b"x" * 10)
    held = tmp_path / "psm_held"
    held.write_bytes(b"x" * 4096)
    with held.open("r+b") as fh, mmap.mmap(fh.fileno(), 4096):
        monkeypatch.setattr(serving, "_mapped_shm", lambda: {"psm_held"})
        assert serving.remove_orphaned_shm(before) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old", "psm_held"]


def test_a_weight_sync_into_a_full_dev_shm_is_refused_before_writing(monkeypatch: pytest.MonkeyPatch):
    import shutil

    import torch

    from websailor.train.rl.sync import ServerWeightSync

    model = torch.nn.Linear(512, 1024)  # 0.5M parameters: 1 MB in bf16
    sync = ServerWeightSync("vllm:policy@http://127.0.0.1:9/v1")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9, 0))
    with pytest.raises(ConfigError, match=r"has 0 MB free and the weight sync needs about 2 MB"):
        sync.push(model, 0)
    assert not sync._dir.exists() and sync.version is None


def test_a_missing_vllm_python_named_by_the_environment_is_an_error_not_a_fallback(monkeypatch: pytest.MonkeyPatch):
    from websailor.models import serving

    monkeypatch.setenv("WEBSAILOR_VLLM_PYTHON", "/nonexistent/python")
    with pytest.raises(ConfigError, match="WEBSAILOR_VLLM_PYTHON /nonexistent/python: no such file"):
        serving.vllm_available()


def test_the_default_log_of_a_server_that_ran_is_removed_on_stop(
    fake_vllm: Path, smollm2_path: Path, tmp_path: Path, monkeypatch
):
    """A server started without ``log_path`` writes to the temporary folder; stopping one that became
    ready removes that file (many runs left dozens behind), one given a log_path keeps it."""
    import tempfile

    from websailor.models.vllm_launch import VLLMServer

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    model = smollm2_path
    for given in (None, tmp_path / "kept.log"):
        server = VLLMServer(model, port=0, log_path=given)
        server.start()
        try:
            server.wait_ready()
            assert server.log_path.exists()
        finally:
            server.stop()
        assert server.log_path.exists() == (given is not None)
    for line in fake_vllm.read_text().splitlines():  # the stand-in's shared memory (the job layer removes vLLM's)
        Path(line.split()[2]).unlink(missing_ok=True)
