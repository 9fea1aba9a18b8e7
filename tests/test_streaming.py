"""Streamed replies (websailor.models.streaming): both HTTP backends ask for their completions
streamed, put the chunks back together exactly as a whole reply, and find a server that stops
mid-reply after the read timeout instead of the request timeout; servers that do not stream
still work."""

from __future__ import annotations

import logging
import time
from logging.handlers import BufferingHandler
from pathlib import Path

import pytest
from fakes import FakeOpenAIServer, serving, vllm_imitation

from websailor.errors import ConfigError, ModelError
from websailor.models import SamplingParams, load_model
from websailor.models.streaming import READ_TIMEOUT_ENV, READ_TIMEOUT_S, read_timeout
from websailor.models.vllm_server import VLLMServerModel
from websailor.train.common import load_tokenizer

QUESTION = [{"role": "user", "content": "Capital of France?"}]


def _openai(srv, **kwargs):
    return load_model(f"openai:fake@{srv.url}", backoff_s=0.01, max_attempts=2, **kwargs)


class _Warnings:
    """The warnings the OpenAI backend logs inside the block."""

    def __enter__(self) -> list[str]:
        self.logger = logging.getLogger("websailor.models.openai_compat")
        self.handler = BufferingHandler(100)
        self.logger.addHandler(self.handler)
        self.messages: list[str] = []
        return self.messages

    def __exit__(self, *exc) -> None:
        self.logger.removeHandler(self.handler)
        self.messages += [r.getMessage() for r in self.handler.buffer if r.levelno == logging.WARNING]


def test_a_streamed_chat_reply_is_put_back_together_whole():
    """Content, thought, token ids and log-probabilities come in pieces; the reply is the same
    as the server's whole one, and the usage is read from the last chunk."""
    ids, lps = [9, 0, 4, 7], [-0.5, 0.0, -2.25, -1.0]
    with FakeOpenAIServer(
        "<answer>Paris</answer>", token_ids=ids, logprobs=lps, reasoning="It is Paris.", finish_reason="length"
    ) as srv:
        g = _openai(srv).chat(QUESTION, SamplingParams())
    body = srv.bodies[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert g.text == "<think>\nIt is Paris.\n</think>\n\n<answer>Paris</answer>"
    assert g.token_ids == ids and g.logprobs == lps and g.finish_reason == "length"
    assert (g.prompt_tokens, g.completion_tokens) == (10, 3)  # the fake's usage, not a guess from the text


def test_a_chat_server_that_stops_mid_reply_is_found_after_the_read_timeout():
    """The server sends its first chunk, then nothing for 30 s: each attempt ends after the
    read timeout (0.5 s), not after the request timeout (600 s), and counts for the breaker."""
    with FakeOpenAIServer(stall_s=30) as srv:
        model = _openai(srv, read_timeout_s=0.5)
        t0 = time.monotonic()
        with pytest.raises(ModelError, match="APITimeoutError after 2 attempts"):
            model.chat(QUESTION, SamplingParams())
        spent = time.monotonic() - t0
    assert spent < 5, spent
    assert model.breaker._in_a_row == 2 and "timed out" in model.breaker._last_error.lower()


def test_a_reply_past_the_request_timeout_is_cut_though_chunks_keep_coming():
    """The request timeout bounds the whole streamed reply, checked at each chunk."""
    with FakeOpenAIServer(stall_s=0.6) as srv:  # a chunk every 0.6 s, three chunks
        model = load_model(f"openai:fake@{srv.url}", max_attempts=1, timeout_s=1.0, read_timeout_s=5)
        t0 = time.monotonic()
        with pytest.raises(ModelError, match="APITimeoutError"):
            model.chat(QUESTION, SamplingParams())
        assert 1.0 < time.monotonic() - t0 < 1.5  # the chunk after the deadline ended it
        assert _openai(srv).chat(QUESTION, SamplingParams()).text == "<answer>Paris</answer>"  # in time: whole


@pytest.mark.parametrize("server", [{"no_stream": True}, {"refuse_params": ("stream",)}])
def test_a_server_that_does_not_stream_is_asked_whole_from_then_on(server):
    """A whole JSON answer to a streamed request, or HTTP 400 on ``stream``: one warning, the
    reply is right, and later requests go without ``stream``."""
    with _Warnings() as warnings, FakeOpenAIServer(token_ids=[1, 2], logprobs=[-1.0, -2.0], **server) as srv:
        model = _openai(srv)
        first, second = model.chat(QUESTION, SamplingParams()), model.chat(QUESTION, SamplingParams())
    assert first == second and first.text == "<answer>Paris</answer>" and first.token_ids == [1, 2]
    assert ["stream" in b for b in srv.bodies] == [True, False, False]
    assert len(warnings) == 1 and "does not stream" in warnings[0] and model.name in warnings[0]


def test_a_server_that_refuses_the_usage_option_is_asked_without_it():
    """``stream_options`` refused (HTTP 400 naming it): left out from then on, the reply still
    streams (its usage then guessed from the text, as for a server that states none)."""
    with _Warnings() as warnings, FakeOpenAIServer(refuse_params=("stream_options",)) as srv:
        model = _openai(srv)
        first, second = model.chat(QUESTION, SamplingParams()), model.chat(QUESTION, SamplingParams())
    assert first.text == second.text == "<answer>Paris</answer>" and first.completion_tokens == len(first.text) // 4
    assert [("stream" in b, "stream_options" in b) for b in srv.bodies] == [(True, True), (True, False), (True, False)]
    assert len(warnings) == 1 and "stream_options" in warnings[0]


def test_vllm_completions_stream_in_and_match_the_whole_reply(smollm2_path: Path):
    """The same ids, log-probabilities and text streamed (three ids a chunk) as whole; the stop
    string's tokens are cut either way."""
    tok = load_tokenizer(smollm2_path)
    reply = "<think>look it up</think>\n<tool_call>\n{}\n</tool_call>\n"
    got = {}
    for streams in (True, False):
        app = vllm_imitation(tok, reply, stop_tail="<tool_response>", streams=streams)
        with serving(app) as url:
            chat = VLLMServerModel("policy", f"{url}/v1", tokenizer_dir=smollm2_path)
            got[streams] = chat.chat(QUESTION, SamplingParams(max_tokens=64))
            chat.close()
        assert app.state.requests[0]["stream"] is True
    assert got[True] == got[False] and got[True].text == reply.rstrip("\n") and len(got[True].token_ids) > 6


def test_a_vllm_server_that_stops_mid_reply_is_found_after_the_read_timeout(smollm2_path: Path):
    tok = load_tokenizer(smollm2_path)
    with serving(vllm_imitation(tok, "<answer>Paris</answer>", stall_s=30)) as url:
        chat = VLLMServerModel("policy", f"{url}/v1", tokenizer_dir=smollm2_path, max_attempts=2, backoff_s=0.01)
        chat.read_timeout_s = 0.5
        t0 = time.monotonic()
        with pytest.raises(ModelError, match="does not answer after 2 attempts.*ReadTimeout"):
            chat.chat(QUESTION, SamplingParams(max_tokens=64))
        assert time.monotonic() - t0 < 5 and chat.breaker._in_a_row == 2
        chat.close()


def test_the_read_timeout_comes_from_the_argument_the_environment_or_the_default(monkeypatch):
    monkeypatch.delenv(READ_TIMEOUT_ENV, raising=False)
    assert read_timeout() == READ_TIMEOUT_S and read_timeout(2) == 2.0
    monkeypatch.setenv(READ_TIMEOUT_ENV, "7.5")
    assert read_timeout() == 7.5 and read_timeout("3") == 3.0


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_a_bad_read_timeout_is_named(monkeypatch, value):
    monkeypatch.setenv(READ_TIMEOUT_ENV, value)
    with pytest.raises(ConfigError, match=f"{READ_TIMEOUT_ENV} '{value}'"):
        read_timeout()
    with pytest.raises(ConfigError, match=READ_TIMEOUT_ENV):  # a backend refuses it when made
        load_model("openai:fake@http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match=f"read_timeout_s '{value}'"):
        read_timeout(value, "read_timeout_s")
