"""The embedded model and the local backend, on the real SmolLM2 weights and tokenizer; the
OpenAI-compatible backend's token ids and log-probabilities, against a local fake server."""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
from fakes import ScriptedModel, call

from websailor.agent import Agent, Trajectory
from websailor.models import SamplingParams


def test_token_view_masks_exactly_the_assistant_replies(smollm2, vital):
    from websailor.tools.local import build_local_tools

    model = ScriptedModel([call("search", query=["Nile"]), "<think>Done.</think>\n<answer>Nile</answer>"])
    traj = Agent(model, build_local_tools(vital)).run("Which river flows through Egypt?")
    tok = smollm2.tokenizer
    ids, mask = traj.token_view(tok)
    assert len(ids) == len(mask)
    whole = tok(tok.apply_chat_template(traj.messages, tokenize=False), add_special_tokens=False)["input_ids"]
    # ChatML renders every prefix unchanged: the pieces are the whole render through the last end-of-turn
    assert ids == whole[: len(ids)] and ids[-1] == tok.eos_token_id and not tok.decode(whole[len(ids) :]).strip()
    # decode the masked (trained-on) tokens: exactly the two replies, each with its end-of-turn token
    trained = tok.decode([t for t, m in zip(ids, mask) if m])
    replies = [m["content"] for m in traj.messages if m["role"] == "assistant"]
    assert trained == "".join(r + tok.eos_token for r in replies)
    # nothing of the system prompt, the question or the tool response is in the loss
    untrained = tok.decode([t for t, m in zip(ids, mask) if not m])
    assert "<tool_response>" in untrained and "Which river flows through Egypt?" in untrained
    assert "<tool_response>" not in trained and "<|im_start|>" not in trained
    # a record read back from JSON gives the same view
    assert Trajectory.from_dict(traj.to_dict()).token_view(tok) == (ids, mask)


def test_smollm2_chat_template_renders_the_protocol(smollm2):
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "<think>t</think>\n<tool_call>\n{}\n</tool_call>"},
        {"role": "user", "content": "<tool_response>\nobs\n</tool_response>"},
    ]
    text = smollm2.tokenizer.decode(smollm2.prompt_ids(msgs))
    assert text.startswith("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n")
    assert text.endswith("<|im_start|>user\n<tool_response>\nobs\n</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_static_backend_batches_concurrent_calls(smollm2):
    from websailor.models.hf_static import StaticTransformersModel

    static = StaticTransformersModel.from_loaded(smollm2.model, smollm2.tokenizer, name="static")
    params = SamplingParams(temperature=0, max_tokens=6, stop=["<tool_response>"])
    msgs = [[{"role": "user", "content": f"Count from {i} to {i + 5}."}] for i in range(4)]
    direct = static.generate(msgs, params)
    assert [g.completion_tokens <= 6 for g in direct] == [True] * 4
    calls = []
    original = static.generate

    def spy(conversations, p, limits=None):
        calls.append(len(conversations))
        return original(conversations, p, limits)

    # rollouts differ in seed and token limit (each has its own): they still share a generate
    per_call = [replace(params, seed=100 + i, max_tokens=6 if i % 2 else 3) for i in range(4)]
    static.generate = spy
    try:
        with ThreadPoolExecutor(4) as pool:
            threaded = list(pool.map(lambda mp: static.chat(*mp), zip(msgs, per_call)))
    finally:
        del static.generate
        static.close()
    assert max(calls) > 1  # concurrent rollouts shared a generate call
    for i, (g, d) in enumerate(zip(threaded, direct)):
        if i % 2:
            assert g.text == d.text  # greedy: batching changes nothing
        else:
            assert g.completion_tokens <= 3 and d.text.startswith(g.text)  # cut at its own limit


def test_closing_the_backend_stops_its_worker_and_a_later_call_restarts_it(smollm2):
    params = SamplingParams(temperature=0, max_tokens=2)
    msgs = [{"role": "user", "content": "Hi"}]
    smollm2.chat(msgs, params)
    worker = smollm2.engine._worker
    assert worker is not None and worker.is_alive()
    smollm2.close()
    assert not worker.is_alive()  # idle: close waited for it
    assert smollm2.chat(msgs, params).completion_tokens <= 2  # a new worker serves it
    assert smollm2.engine._worker is not worker


def test_close_does_not_wait_for_a_generation_in_flight():
    """An interrupted run closes its model while a reply is still being generated: close()
    returns at once instead of waiting for a generation nobody will read."""
    import threading
    import time

    from websailor.models.base import Generation
    from websailor.models.batching import BatchedChat

    class Slow(BatchedChat):
        def __init__(self) -> None:
            self.release = threading.Event()
            self.start_batching(max_batch=1, batch_wait_s=0.0)

        def generate(self, conversations, params, limits=None):
            self.release.wait(30)
            return [Generation("x", 1, 1) for _ in conversations]

    model = Slow()
    caller = threading.Thread(
        target=model.chat, args=([{"role": "user", "content": "Hi"}], SamplingParams(max_tokens=1)), daemon=True
    )
    caller.start()
    deadline = time.monotonic() + 10
    while not model._generating:
        assert time.monotonic() < deadline, "the generation never started"
        time.sleep(0.01)
    t0 = time.perf_counter()
    model.close()
    assert time.perf_counter() - t0 < 1
    model.release.set()
    caller.join(10)
    assert not caller.is_alive()  # the reply in flight was still delivered


def test_a_run_with_the_local_model_exits_cleanly(smollm2_path: Path, tmp_path: Path):
    """The command closes the model at its end; a batcher thread still ending during interpreter
    shutdown used to abort the process (exit 134, "terminate called without an active exception")."""
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "websailor.cli", "run", "Who painted the Mona Lisa?", "--model", f"hf:{smollm2_path}",
           "--env", "none", "--max-calls", "1", "--max-tokens", "4"]  # fmt: skip
    env = {**os.environ, "WEBSAILOR_HOME": str(tmp_path), "OMP_NUM_THREADS": "1"}
    for _ in range(2):  # the abort came from a race at exit (seen in 14 of 16 runs): try twice
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0 and "terminate called" not in done.stderr, done.stderr[-2000:]
        assert "termination: max_calls" in done.stdout


def test_stop_at_tool_response(smollm2):
    params = SamplingParams(temperature=0, max_tokens=40, stop=["Paris"])
    g = smollm2.chat([{"role": "user", "content": "What is the capital of France?"}], params)
    assert "Paris" not in g.text and g.finish_reason == "stop"


# -- the OpenAI-compatible backend: sampled token ids and log-probabilities -------------------
def _openai(srv):
    from websailor.models import load_model

    return load_model(f"openai:fake@{srv.url}", backoff_s=0.01, max_attempts=2)


QUESTION = [{"role": "user", "content": "Capital of France?"}]


def test_openai_backend_returns_the_servers_token_ids_and_logprobs():
    from fakes import FakeOpenAIServer

    ids, lps = [9, 0, 4], [-0.5, 0.0, -2.25]
    with FakeOpenAIServer("<answer>Paris</answer><tool_response>x", token_ids=ids, logprobs=lps) as srv:
        g = _openai(srv).chat(QUESTION, SamplingParams())
    assert srv.bodies[0]["logprobs"] is True and srv.bodies[0]["return_token_ids"] is True
    # the text is cut at the stop string; the ids and logprobs stay as the server sent them
    assert g.text == "<answer>Paris</answer>" and g.token_ids == ids and g.logprobs == lps


def test_openai_backend_stops_asking_a_server_that_refuses_the_token_parameters():
    import logging
    from logging.handlers import BufferingHandler

    from fakes import FakeOpenAIServer

    logger, captured = logging.getLogger("websailor.models.openai_compat"), BufferingHandler(100)
    logger.addHandler(captured)
    try:
        with FakeOpenAIServer(refuse_tokens=True, token_ids=[1], logprobs=[-1.0]) as srv:
            model = _openai(srv)
            first, second = model.chat(QUESTION, SamplingParams()), model.chat(QUESTION, SamplingParams())
    finally:
        logger.removeHandler(captured)
    assert first.text == second.text == "<answer>Paris</answer>" and first.token_ids is first.logprobs is None
    asked = ["logprobs" in b or "return_token_ids" in b for b in srv.bodies]
    assert asked == [True, False, False]  # one retry without them, and later calls go without them
    warnings = [r.getMessage() for r in captured.buffer if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and model.name in warnings[0]


def test_openai_backend_without_token_ids_or_logprobs_returns_none():
    from fakes import FakeOpenAIServer

    with FakeOpenAIServer() as srv:
        g = _openai(srv).chat(QUESTION, SamplingParams())
    assert g.text == "<answer>Paris</answer>" and g.token_ids is None and g.logprobs is None
    assert srv.state["requests"] == 1


def test_openai_backend_with_logprobs_only():
    from fakes import FakeOpenAIServer

    with FakeOpenAIServer(logprobs=[-0.1, -0.2]) as srv:  # a hosted API: logprobs, no token ids
        g = _openai(srv).chat(QUESTION, SamplingParams())
    assert g.token_ids is None and g.logprobs == [-0.1, -0.2]


@pytest.mark.parametrize(
    ("ids", "lps", "what"),
    [
        ([1, -2], None, "token_ids"),
        ([1, "2"], None, "token_ids"),
        ([1.5], None, "token_ids"),
        ([True], None, "token_ids"),
        ("12", None, "token_ids"),
        ({"0": 1}, None, "token_ids"),
        ([1, 2], [-0.1, float("nan")], "finite"),
        ([1], [float("-inf")], "finite"),
        (None, ["x"], "finite"),  # (a numeric string is read as its number by the openai client)
        (None, [None], "finite"),
        ([1, 2, 3], [-0.1, -0.2], "3 token ids but 2 logprobs"),
    ],
)
def test_openai_backend_malformed_token_ids_or_logprobs_are_a_model_error(ids, lps, what):
    from fakes import FakeOpenAIServer

    from websailor.errors import ModelError

    with FakeOpenAIServer(token_ids=ids, logprobs=lps) as srv:
        model = _openai(srv)
        with pytest.raises(ModelError) as err:
            model.chat(QUESTION, SamplingParams())
    assert str(err.value).startswith(f"{model.name}: ") and what in str(err.value)


def test_a_model_with_sliding_window_caches_is_served_by_static_generate(smollm2_path: Path, tmp_path: Path):
    """The engine holds full-attention caches only: load_model picks the static backend for the
    others, loading the weights once."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from websailor.models import load_model
    from websailor.models.hf_static import StaticTransformersModel

    cfg = AutoConfig.for_model("qwen2", vocab_size=49152, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                               num_key_value_heads=1, intermediate_size=64, use_sliding_window=True,
                               sliding_window=64, max_window_layers=0)  # fmt: skip
    AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(smollm2_path).save_pretrained(tmp_path)
    model = load_model(f"hf:{tmp_path}")
    try:
        assert isinstance(model, StaticTransformersModel) and model.name == f"hf:{tmp_path}"
        assert model.chat([{"role": "user", "content": "Hi"}], SamplingParams(max_tokens=3)).completion_tokens <= 3
    finally:
        model.close()
