"""The local generation engine on the real SmolLM2 weights: batching and prefix reuse change no
token, the batch refills as requests end, memory waits instead of failing, and the sampled ids
and log-probabilities of real rollouts are exactly what RL trains on."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from websailor.agent import Agent, AgentConfig
from websailor.models import SamplingParams
from websailor.models.engine import repeats

pytestmark = pytest.mark.model

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
QUESTIONS = ["What is the capital of France? Explain.", "Write a poem about the sea.", "How do airplanes fly?"]


def _conv(q: str) -> list[dict]:
    return [SYSTEM, {"role": "user", "content": q}]


@pytest.fixture(scope="module")
def engine_model(smollm2):
    """A model of its own over the session's weights (tests change its budget and stats)."""
    from websailor.models.hf import TransformersModel

    model = TransformersModel.from_loaded(smollm2.model, smollm2.tokenizer, name="smollm2", max_batch=4)
    yield model
    model.close()


def test_batched_greedy_replies_equal_the_static_backends(engine_model, smollm2):
    from websailor.models.hf_static import StaticTransformersModel

    params = SamplingParams(temperature=0, max_tokens=40)
    with ThreadPoolExecutor(3) as pool:
        batched = list(pool.map(lambda q: engine_model.chat(_conv(q), params), QUESTIONS))
    assert engine_model.engine.stats["peak_rows"] >= 2  # the three shared decode steps
    static = StaticTransformersModel.from_loaded(smollm2.model, smollm2.tokenizer, name="static")
    try:
        for q, g in zip(QUESTIONS, batched):
            s = static.chat(_conv(q), params)
            assert g.text == s.text and g.finish_reason == s.finish_reason
            assert len(g.token_ids) == len(g.logprobs) == g.completion_tokens
            assert all(lp <= 0 for lp in g.logprobs)
    finally:
        static.close()


def test_the_next_turn_reuses_the_cache_and_changes_nothing(engine_model):
    params = SamplingParams(temperature=0, max_tokens=30)
    first = engine_model.chat(_conv(QUESTIONS[0]), params)
    turn = {"role": "assistant", "content": first.text, "token_ids": first.token_ids}
    follow = [*_conv(QUESTIONS[0]), turn, {"role": "user", "content": "And the capital of Germany?"}]
    stats = engine_model.engine.stats
    before = dict(stats)
    reused = engine_model.chat(follow, params)
    prompt = stats["prompt_tokens"] - before["prompt_tokens"]
    # every token of the first turn's prompt and reply was reused (the reply's last token never
    # had its key/value computed); only the new user turn was encoded
    assert stats["reused_tokens"] - before["reused_tokens"] == first.prompt_tokens + len(first.token_ids) - 1
    assert stats["computed_tokens"] - before["computed_tokens"] == prompt - (
        stats["reused_tokens"] - before["reused_tokens"]
    )
    engine_model.engine.clear()  # as after an optimizer step: nothing kept
    fresh = engine_model.chat(follow, params)
    assert fresh.token_ids == reused.token_ids
    assert stats["reused_tokens"] == before["reused_tokens"] + first.prompt_tokens + len(first.token_ids) - 1


def test_a_short_request_does_not_wait_for_a_long_one(engine_model):
    long_params = SamplingParams(temperature=0, max_tokens=120, stop=[])
    short_params = SamplingParams(temperature=0, max_tokens=4, stop=[])
    done: dict[str, float] = {}

    def run(name, conv, params):
        engine_model.chat(conv, params)
        done[name] = time.perf_counter()

    long_thread = threading.Thread(target=run, args=("long", _conv(QUESTIONS[1]), long_params))
    long_thread.start()
    time.sleep(1.0)  # the long one is decoding
    run("short", _conv(QUESTIONS[2]), short_params)  # joins the running batch
    assert "long" not in done  # the short one came back while the long one still ran
    long_thread.join(120)
    assert done["short"] < done["long"]


def test_a_full_cache_makes_requests_wait_not_fail(smollm2):
    from websailor.models.hf import TransformersModel

    one = TransformersModel.from_loaded(smollm2.model, smollm2.tokenizer, name="tight", max_batch=4)
    one.engine.budget_tokens = 70  # room for one request at a time (about 30 prompt + 20 new tokens)
    try:
        params = SamplingParams(temperature=0, max_tokens=20, stop=[])
        with ThreadPoolExecutor(3) as pool:
            outs = list(pool.map(lambda q: one.chat(_conv(q), params), QUESTIONS))
        assert all(g.completion_tokens > 0 for g in outs)
        assert one.engine.stats["peak_rows"] == 1 and one.engine.stats["waits"] > 0
    finally:
        one.close()


def test_stop_strings_cut_the_text_exactly_and_the_ids_at_the_token_that_reaches_it(engine_model):
    g = engine_model.chat(
        [{"role": "user", "content": "What is the capital of France?"}],
        SamplingParams(temperature=0, max_tokens=40, stop=["Paris"]),
    )
    assert "Paris" not in g.text and g.finish_reason == "stop" and g.text.strip()
    tok = engine_model.tokenizer
    # the ids cover the text; one fewer would not (a token spanning the stop's start is kept: it was sampled)
    assert tok.decode(g.token_ids).startswith(g.text) and not tok.decode(g.token_ids[:-1]).startswith(g.text)
    assert len(g.logprobs) == len(g.token_ids)


def test_a_reply_cut_inside_a_character_keeps_no_half_character(engine_model):
    from websailor.models.base import decode_reply

    tok = engine_model.tokenizer
    ids = tok("我们是独立的国家", add_special_tokens=False)["input_ids"]
    cuts = [decode_reply(tok, ids[:k], cut=True) for k in range(1, len(ids))]
    assert any("\ufffd" in tok.decode(ids[:k]) for k in range(1, len(ids)))  # the tokenizer does split characters
    assert not any("\ufffd" in c for c in cuts)
    for k in range(2, 12):  # replies of the real model cut at their limit
        g = engine_model.chat(
            [{"role": "user", "content": "长城有多长？请用中文回答。"}], SamplingParams(max_tokens=k, seed=k)
        )
        assert "\ufffd" not in g.text


def test_a_conversation_larger_than_the_context_ends_as_context(smollm2, vital):
    from websailor.models.hf import TransformersModel
    from websailor.tools.local import build_local_tools

    small = TransformersModel.from_loaded(smollm2.model, smollm2.tokenizer, name="small")
    small.max_context = 1200  # the system prompt and the first search results outgrow it
    calls = []
    real = small.generate

    def scripted(conversations, params):  # the real model computes; the first turn is made to search
        gens = real(conversations, params)
        calls.append(gens[0].prompt_tokens)
        if len(calls) == 1:
            gens[
                0
            ].text = '<tool_call>{"name": "search", "arguments": {"query": ["Nile", "Egypt", "river"]}}</tool_call>'
            gens[0].token_ids = None
        return gens

    long = [{"role": "user", "content": "Nile " * 1500}]
    over = small.chat(long, SamplingParams(max_tokens=8))  # a prompt past the context: an empty reply, no crash
    assert over.finish_reason == "length" and over.completion_tokens == 0 and over.prompt_tokens >= 1200
    small.generate = scripted
    try:
        traj = Agent(small, build_local_tools(vital), AgentConfig(max_calls=6, max_tokens_per_turn=32)).run(
            "Which river flows through Egypt?"
        )
    finally:
        small.close()
    assert traj.termination == "context" and traj.num_tool_calls == 1
    assert traj.to_dict()["messages"][-1]["role"] == "user"  # the record is whole


def test_repeated_spans_are_detected():
    assert repeats([5, 6, 7] * 40)
    assert repeats([1] * 96)
    assert not repeats(list(range(200)))
    assert not repeats([5, 6, 7] * 10)  # too short to tell


def test_real_rollouts_train_on_exactly_the_sampled_tokens(engine_model, vital, tmp_path: Path):
    """Ids sent to the trainer for model turns are the sampled ids, and the trainer's
    log-probabilities (one forward pass over prompt and completion, logits over the
    temperature, as TRL computes them) match the sampling ones."""
    import torch

    from websailor.tools.local import build_local_tools
    from websailor.train.rollout_tokens import rollout_tokens

    cfg = AgentConfig(max_calls=3, max_tokens_per_turn=48, sampling=SamplingParams(temperature=1.0, top_p=1.0))
    agent = Agent(engine_model, build_local_tools(vital), cfg)
    with ThreadPoolExecutor(2) as pool:
        trajs = list(pool.map(lambda r: agent.run("Who painted the Mona Lisa?", id="q", rollout=r), range(2)))
    model = engine_model.model
    for traj in trajs:
        tk = rollout_tokens(traj, engine_model.tokenizer)
        assert tk.retokenized == 0 and tk.turns == traj.num_model_calls
        runs, cur = [], []
        for t, m in zip(tk.completion_ids, tk.env_mask):
            if m:
                cur.append(t)
            elif cur:
                runs.append(cur)
                cur = []
        runs += [cur] if cur else []
        assert runs == [ids for ids in tk.sampled_turn_ids if ids]
        ids = torch.tensor([tk.prompt_ids + tk.completion_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(tk.prompt_ids) - 1 : -1].float() / cfg.sampling.temperature
        trainer = torch.log_softmax(logits, -1).gather(1, torch.tensor(tk.completion_ids)[:, None])[:, 0]
        mask = torch.tensor(tk.env_mask, dtype=torch.bool)
        diff = (trainer[mask] - torch.tensor(tk.logprobs)[mask]).abs()
        assert float(diff.mean()) < 1e-3, float(diff.mean())
