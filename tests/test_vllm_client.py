"""The vLLM rollout path without vLLM: the ``vllm:`` backend, the weight sync's checks and the
server launcher, each against a small HTTP imitation of the parts of vLLM's API they use (the
same paths and JSON fields vLLM 0.32 answers with, as measured against a real server). The
real server is exercised in tests/test_vllm_server.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fakes import serving, vllm_imitation

from websailor.errors import ConfigError, ModelError
from websailor.models.base import SamplingParams
from websailor.models.vllm_server import VLLMServerModel, parse_spec
from websailor.train.common import load_tokenizer

CONV = [{"role": "system", "content": "s"}, {"role": "user", "content": "Capital of France?"}]


def test_token_ids_go_out_and_come_back(smollm2_path: Path):
    """The prompt goes out as the template's ids; the reply's sampled ids (with the
    end-of-turn token) and log-probabilities come back, and a second turn's prompt starts
    with the first turn's ids exactly."""
    tok = load_tokenizer(smollm2_path)
    reply = "<think>x</think>\n<tool_call>\n{}\n</tool_call>"
    app = vllm_imitation(tok, reply)
    with serving(app) as url:
        chat = VLLMServerModel("policy", f"{url}/v1", tokenizer_dir=smollm2_path)
        chat.check()
        assert chat.max_context == 4096 and chat.turn_tokens == 256
        g = chat.chat(CONV, SamplingParams(max_tokens=64, temperature=1.0, top_p=1.0, presence_penalty=0.0))
        assert g.text == reply and g.token_ids[-1] == tok.eos_token_id and g.logprobs == [-0.25] * len(g.token_ids)
        first = app.state.requests[0]
        assert first["prompt"] == chat.prompt_ids(CONV) and first["return_token_ids"] is True
        assert first["logprobs"] == 0 and "seed" not in first and tok.eos_token_id in first["stop_token_ids"]
        turn = {"role": "assistant", "content": g.text, "token_ids": g.token_ids, "logprobs": g.logprobs}
        chat.chat([*CONV, turn, {"role": "user", "content": "<tool_response>r</tool_response>"}], SamplingParams())
        second = app.state.requests[1]["prompt"]
        assert second[: len(first["prompt"]) + len(g.token_ids)] == first["prompt"] + g.token_ids
        chat.close()


def test_the_stop_strings_tokens_are_cut_from_the_ids(smollm2_path: Path):
    """vLLM returns the tokens of the stop string it stopped at among the ids: they are cut,
    so the ids are what the text says (and what the next turn continues from)."""
    tok = load_tokenizer(smollm2_path)
    reply = "<think>look</think>\n<tool_call>\n{}\n</tool_call>\n"
    with serving(vllm_imitation(tok, reply, stop_tail="<tool_response>")) as url:
        chat = VLLMServerModel("policy", f"{url}/v1", tokenizer_dir=smollm2_path)
        g = chat.chat(CONV, SamplingParams(max_tokens=64))
        assert g.text == reply.rstrip("\n")  # cut before the earliest stop string, "\n<tool_response>"
        assert tok.decode(g.token_ids).startswith(g.text) and "<tool_response>" not in tok.decode(g.token_ids)
        assert len(g.logprobs) == len(g.token_ids)
        chat.close()


def test_a_server_that_is_gone_is_a_model_error(smollm2_path: Path):
    """Checked while it served, then gone: each request is tried again, then a ModelError."""
    tok = load_tokenizer(smollm2_path)
    with serving(vllm_imitation(tok, "x")) as url:
        chat = VLLMServerModel("policy", f"{url}/v1", tokenizer_dir=smollm2_path, max_attempts=2, backoff_s=0.01)
        chat.check()
    with pytest.raises(ModelError, match="does not answer after 2 attempts"):
        chat.chat(CONV, SamplingParams(max_tokens=8))


def test_the_tokenizer_must_be_found():
    """The server's model directory is not readable here and the name is no model directory."""
    from fastapi import FastAPI

    app = FastAPI()

    @app.get("/v1/models")
    def models():
        return {"data": [{"id": "policy", "root": "/nonexistent/model", "max_model_len": 4096}]}

    with serving(app) as url:
        chat = VLLMServerModel("policy", f"{url}/v1")
        with pytest.raises(ConfigError, match="served-model-name"):
            chat.check()


@pytest.mark.parametrize(
    "spec",
    [
        "vllm:policy",
        "vllm:@http://h:1/v1",
        "vllm:policy@ftp://h/v1",
        "vllm:policy@http:///v1",
        "policy@http://h/v1",
        "vllm:policy@http://127.0.0.1:99999/v1",
        "vllm:policy@http://127.0.0.1:0/v1",
    ],
)
def test_bad_specs_are_named(spec: str):
    with pytest.raises(ConfigError, match="vllm:NAME@|has no host|invalid|out of range"):
        parse_spec(spec)


def test_sync_check_names_what_is_missing(smollm2_path: Path, caplog):
    """Nothing listening, no dev-mode endpoints, another model, raw log-probabilities: each is
    named before any rollout."""
    from websailor.train.rl.sync import ServerWeightSync

    with pytest.raises(ConfigError, match="still starting"):
        ServerWeightSync("vllm:policy@http://127.0.0.1:9/v1").check()
    tok = load_tokenizer(smollm2_path)
    with serving(vllm_imitation(tok, "x", dev_mode=False)) as url:
        with pytest.raises(ConfigError, match="VLLM_SERVER_DEV_MODE=1"):
            ServerWeightSync(f"vllm:policy@{url}/v1").check()
        with pytest.raises(ConfigError, match="does not serve") as refused:
            ServerWeightSync(f"vllm:other@{url}/v1").check()
        # the sync cannot go without this check: no hint to skip it
        assert "the weight sync needs this check" in str(refused.value) and "SKIP" not in str(refused.value)
    with serving(vllm_imitation(tok, "x", logprobs_mode="raw_logprobs")) as url:
        ServerWeightSync(f"vllm:policy@{url}/v1").check()
        assert "processed_logprobs" in caplog.text


def test_the_sync_writes_weights_in_the_servers_dtype(smollm2_path: Path, monkeypatch):
    """An fp32 server gets fp32 weights (rounding them to bf16 would be a mismatch of the sync's
    own making), a bf16 one bf16, and a server that does not say gets bf16, vLLM's CPU default;
    tied weights are written under both names (safetensors refuses tensors that share memory,
    and save_pretrained would drop one: the real server kept its old LM head)."""
    import torch
    from safetensors.torch import load_file

    from websailor.train.rl.sync import ServerWeightSync

    tok = load_tokenizer(smollm2_path)
    model = torch.nn.Module()
    model.embed, model.head = torch.nn.Linear(4, 4, bias=False), torch.nn.Linear(4, 4, bias=False)
    model.head.weight = model.embed.weight  # tied, as SmolLM2's embeddings and LM head
    written = {}

    def save_pretrained(folder, state_dict, safe_serialization):
        from safetensors.torch import save_file

        Path(folder).mkdir(parents=True)
        save_file(state_dict, str(Path(folder) / "model.safetensors"))
        written["state"] = load_file(str(Path(folder) / "model.safetensors"))

    model.save_pretrained = save_pretrained
    for dtype, expected in (
        ("torch.float32", torch.float32),
        ("torch.bfloat16", torch.bfloat16),
        (None, torch.bfloat16),
    ):
        with serving(vllm_imitation(tok, "x", dtype=dtype)) as url:
            sync = ServerWeightSync(f"vllm:policy@{url}/v1")
            sync.check()
            sync.push(model, 1)
        assert {v.dtype for v in written["state"].values()} == {expected}, dtype
        assert set(written["state"]) == {"embed.weight", "head.weight"}  # both names of the tied tensor
        assert torch.equal(written["state"]["head.weight"], model.embed.weight.detach().to(expected))
        assert sync.version == 1 and not sync._dir.exists()


def test_a_failed_sync_stops_and_says_so(tmp_path: Path):
    """A reload the server refuses, and a server that is gone, are WeightSyncErrors; a batch
    whose server holds other weights is refused."""
    import torch
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    from websailor.train.rl.sync import ServerWeightSync, WeightSyncError

    app = FastAPI()

    @app.post("/collective_rpc")
    def rpc():
        return JSONResponse({"error": "size mismatch for lm_head"}, status_code=500)

    model = torch.nn.Linear(2, 2)
    model.save_pretrained = lambda d, state_dict, safe_serialization: Path(d).mkdir(parents=True)  # noqa: ARG005
    with serving(app) as url:
        sync = ServerWeightSync(f"vllm:policy@{url}/v1")
        with pytest.raises(WeightSyncError, match="HTTP 500.*size mismatch"):
            sync.push(model, 3)
        assert sync.version is None and not sync._dir.exists()  # nothing left in shared memory
    gone = ServerWeightSync("vllm:policy@http://127.0.0.1:9/v1")
    with pytest.raises(WeightSyncError, match="still running"):
        gone.push(model, 1)
    with pytest.raises(WeightSyncError, match="off-policy"):
        gone.require_current(1)


def test_the_launcher_names_a_missing_vllm_and_an_early_exit(tmp_path: Path, smollm2_path: Path, monkeypatch):
    """No vLLM anywhere: one line on how to get it. A server that exits at start-up (an
    architecture vLLM cannot serve): the reason it printed, and the log."""
    from websailor.models import vllm_launch
    from websailor.models.vllm_launch import VLLMServer, find_vllm_python

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(vllm_launch.sys, "prefix", str(tmp_path / "env" / ".venv"))
    monkeypatch.delenv(vllm_launch.VLLM_PYTHON_ENV, raising=False)
    monkeypatch.setattr(vllm_launch.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="make vllm"):
        find_vllm_python()
    with pytest.raises(ConfigError, match="no such file"):
        find_vllm_python(tmp_path / "nope")
    beside = tmp_path / "env" / ".venv-vllm" / "bin" / "python"  # make vllm's, found from any directory
    beside.parent.mkdir(parents=True)
    beside.write_text("")
    assert find_vllm_python() == str(beside)
    beside.unlink()
    fake = tmp_path / "fake_python"
    fake.write_text(
        f"#!{sys.executable}\nimport sys\n"
        "print('INFO vLLM API server version 0.32.0')\n"
        "print('ValueError: Model architectures [\\'FooForCausalLM\\'] are not supported for now. Supported "
        "architectures: dict_keys([\\'LlamaForCausalLM\\'])')\nsys.exit(1)\n"
    )
    fake.chmod(0o755)
    server = VLLMServer(smollm2_path, port=0, python=fake, log_path=tmp_path / "vllm.log")
    assert server.spec.startswith("vllm:policy@http://127.0.0.1:") and server.spec.endswith("/v1")
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    cmd, env = server.command(), server.environment()
    assert cmd[cmd.index("--logprobs-mode") + 1] == "processed_logprobs" and "--enable-prefix-caching" in cmd
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["VLLM_CPU_KVCACHE_SPACE"] == "4"
    assert env["VLLM_CPU_OMP_THREADS_BIND"]  # every core this process may use, not vLLM's all-but-one
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    assert server.environment()["VLLM_CPU_KVCACHE_SPACE"] == "1"  # the user's setting wins
    # WEBSAILOR_VLLM_ARGS: more arguments for every server, split as a shell splits them
    monkeypatch.setenv(vllm_launch.VLLM_ARGS_ENV, "--enforce-eager --served-model-name 'a b'")
    eager = VLLMServer(smollm2_path, port=0, python=fake, extra_args=["--seed", "1"]).command()
    assert eager[-5:] == ["--seed", "1", "--enforce-eager", "--served-model-name", "a b"]
    monkeypatch.setenv(vllm_launch.VLLM_ARGS_ENV, "--enforce-eager 'open")
    with pytest.raises(ConfigError, match="WEBSAILOR_VLLM_ARGS=.*cannot be split"):
        VLLMServer(smollm2_path, port=0, python=fake)
    monkeypatch.delenv(vllm_launch.VLLM_ARGS_ENV)
    server.start()
    with pytest.raises(ConfigError, match=r"vLLM 0\.32\.0 cannot serve the architecture \['FooForCausalLM'\]"):
        server.wait_ready(30)
    with pytest.raises(ConfigError, match="not a transformers model directory"):
        VLLMServer(tmp_path, python=fake)


def test_server_dtype_is_the_faster_one_on_this_machine(smollm2_path, tmp_path, monkeypatch):
    """``auto`` serves in bf16 only where bf16 products of the model's shapes ran faster (a CPU
    without bf16 instructions computes them several times slower); a dtype given is kept, and
    one vLLM would not know is refused before any process starts."""
    from websailor import precision
    from websailor.models.vllm_launch import VLLMServer

    monkeypatch.setenv("WEBSAILOR_HOME", str(tmp_path))
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    fake = tmp_path / "python"
    fake.write_text(f"#!{sys.executable}\n")
    fake.chmod(0o755)

    def dtype_when(gflops: dict[str, float]) -> str:
        (tmp_path / precision.CACHE_FILE).unlink(missing_ok=True)
        monkeypatch.setattr(precision, "time_matmuls", lambda shapes, seconds=precision.TIME_S: gflops)
        cmd = VLLMServer(smollm2_path, port=0, python=fake).command()
        return cmd[cmd.index("--dtype") + 1]

    assert dtype_when({"fp32": 107.5, "bf16": 0.6}) == "float32"  # the EPYC without AVX-512 BF16
    assert dtype_when({"fp32": 120.0, "bf16": 400.0}) == "bfloat16"  # one with it
    given = VLLMServer(smollm2_path, port=0, python=fake, dtype="float32")
    assert given.dtype == "float32" and given.command().count("--dtype") == 1
    with pytest.raises(ConfigError, match="dtype 'fp16': use one of auto, bfloat16, float32"):
        VLLMServer(smollm2_path, port=0, python=fake, dtype="fp16")


def test_rl_settings_refuse_a_bad_rollout_server():
    from websailor.train.rl import load_settings

    with pytest.raises(ConfigError, match="rollout_server"):
        load_settings(None, rollout_server="http://127.0.0.1:8000/v1")
    with pytest.raises(ConfigError, match="lora"):
        load_settings(None, rollout_server="vllm:policy@http://127.0.0.1:8000/v1", lora=True)
    s = load_settings(None, rollout_server="vllm:policy@http://127.0.0.1:8000/v1")
    assert s.importance_sampling == "token_truncate" and s.importance_sampling_cap == 2.0


def test_stop_ends_a_server_that_ignores_sigterm_and_its_workers(tmp_path: Path, smollm2_path: Path):
    """vLLM ignores SIGTERM while it starts: stop() kills the process group after its wait,
    workers included, and a taken port is refused before anything starts."""
    import os
    import socket
    import time

    from websailor.models.vllm_launch import VLLMServer

    pids = tmp_path / "pids"
    fake = tmp_path / "fake_python"
    fake.write_text(
        f"#!{sys.executable}\nimport os, signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        f"signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "time.sleep(600)\n"
    )
    fake.chmod(0o755)
    server = VLLMServer(smollm2_path, port=0, python=fake, log_path=tmp_path / "vllm.log").start()
    deadline = time.monotonic() + 30
    while not (pids.exists() and len(pids.read_text().split()) == 2) and time.monotonic() < deadline:
        time.sleep(0.1)
    leader, worker = map(int, pids.read_text().split())
    t0 = time.monotonic()
    server.stop(timeout_s=1.0)
    assert time.monotonic() - t0 < 10
    time.sleep(0.2)
    for pid in (leader, worker):
        try:
            os.kill(pid, 0)
            alive = open(f"/proc/{pid}/stat").read().split()[2] != "Z"
        except (ProcessLookupError, FileNotFoundError):
            alive = False
        assert not alive, f"process {pid} survived stop()"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"port {port} on 127.0.0.1 is taken"):
            VLLMServer(smollm2_path, port=port, python=fake).start()


def test_rollout_engine_falls_back_to_local_without_vllm(monkeypatch, tmp_path):
    from websailor.models.vllm_launch import rollout_engine

    assert rollout_engine("local") == "local" and rollout_engine("vllm") == "vllm"
    monkeypatch.setenv("WEBSAILOR_VLLM_PYTHON", str(tmp_path / "no-python"))  # named, and missing
    assert rollout_engine("auto") == "local"
    monkeypatch.setenv("WEBSAILOR_VLLM_PYTHON", sys.executable)
    assert rollout_engine("auto") == "vllm"
