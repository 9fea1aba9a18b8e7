"""Streamed replies (websailor.models.streaming): both HTTP backends ask for their completions
streamed, put the chunks back together exactly as a whole reply, and find a server that stops
mid-reply after the read timeout instead of the request timeout; servers that do not stream
still work."""

from __future__ import annotations

import json
import logging
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


@contextmanager
def scripted(script: list[tuple[bytes, float]], content_type: str = "text/event-stream", headers: dict | None = None):
    """A hostile server: every POST gets HTTP 200 with ``content_type`` and the bytes of
    ``script``, each piece followed by a pause of its seconds, then the connection closed (no
    length: the body ends there); ``GET /models`` lists the model ``fake``. Yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            data = json.dumps({"data": [{"id": "fake", "max_model_len": 4096}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            try:
                for piece, pause in script:
                    self.wfile.write(piece)
                    self.wfile.flush()
                    time.sleep(pause)
            except OSError:  # the client gave up
                pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _chat_chunk(**choice) -> bytes:
    chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "fake",
             "choices": [{"index": 0, "delta": {}, **choice}]}  # fmt: skip
    return f"data: {json.dumps(chunk)}\n\n".encode()


def _completion_chunk(ids: object, logprobs: object, finish: str | None = None) -> bytes:
    choice = {"index": 0, "text": "", "token_ids": ids, "logprobs": {"token_logprobs": logprobs},
              "finish_reason": finish}  # fmt: skip
    return f"data: {json.dumps({'choices': [choice]})}\n\n".encode()


def _vllm(url: str, smollm2_path: Path, **kwargs) -> VLLMServerModel:
    return VLLMServerModel("fake", url, tokenizer_dir=smollm2_path, max_attempts=1, **kwargs)


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


@pytest.mark.parametrize(
    ("server", "streamed"),
    [({"no_stream": True}, [True, False]), ({"refuse_params": ("stream",)}, [True, False, False])],
)
def test_a_server_that_does_not_stream_is_asked_whole_from_then_on(server, streamed):
    """A whole chat completion answering a streamed request (read as it is), or HTTP 400 on
    ``stream`` (asked again without it): one warning, the reply is right, and later requests
    go without ``stream``."""
    with _Warnings() as warnings, FakeOpenAIServer(token_ids=[1, 2], logprobs=[-1.0, -2.0], **server) as srv:
        model = _openai(srv)
        first, second = model.chat(QUESTION, SamplingParams()), model.chat(QUESTION, SamplingParams())
    assert first == second and first.text == "<answer>Paris</answer>" and first.token_ids == [1, 2]
    assert ["stream" in b for b in srv.bodies] == streamed
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


@pytest.mark.parametrize("value", ["0", "-1", "1e-300", "nan", "inf", "soon"])
def test_a_bad_read_timeout_is_named(monkeypatch, value):
    monkeypatch.setenv(READ_TIMEOUT_ENV, value)
    with pytest.raises(ConfigError, match=f"{READ_TIMEOUT_ENV} '{value}'.*(at least 0.1|seconds)"):
        read_timeout()
    with pytest.raises(ConfigError, match=READ_TIMEOUT_ENV):  # a backend refuses it when made
        load_model("openai:fake@http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match=f"read_timeout_s '{value}'"):
        read_timeout(value, "read_timeout_s")


KEEPALIVE = [(b": keep-alive\n\n", 0.25)] * 40  # ten seconds of comments, as OpenRouter sends them
TRICKLE = [(b"d", 0.25)] * 40  # ten seconds of one event, a byte at a time


@pytest.mark.parametrize("filler", [KEEPALIVE, TRICKLE], ids=["keep-alive comments", "a byte at a time"])
def test_a_reply_kept_alive_past_the_request_timeout_is_cut_at_it(filler, smollm2_path: Path):
    """Bytes keep coming, but no reply: both backends stop at the request timeout (1.5 s)."""
    first = _chat_chunk(delta={"content": "Par"})
    with scripted([(first, 0.1), *filler]) as url:
        model = load_model(f"openai:fake@{url}", max_attempts=1, timeout_s=1.5, read_timeout_s=5)
        t0 = time.monotonic()
        with pytest.raises(ModelError, match="APITimeoutError"):
            model.chat(QUESTION, SamplingParams())
        assert time.monotonic() - t0 < 3
    with scripted([(_completion_chunk([1], [-0.5]), 0.1), *filler]) as url:
        chat = _vllm(url, smollm2_path, timeout_s=1.5, read_timeout_s=5)
        chat.check()  # the tokenizer loaded before the clock starts
        t0 = time.monotonic()
        with pytest.raises(ModelError, match="ReadTimeout.*past the request timeout"):
            chat.chat(QUESTION, SamplingParams(max_tokens=8))
        assert time.monotonic() - t0 < 3


def test_a_stream_cut_before_its_end_is_no_reply(smollm2_path: Path, monkeypatch):
    """Chunks, then the connection closed without a finish reason: a transport failure (retried,
    counted by the breaker), never a reply that looks finished."""
    monkeypatch.setenv("WEBSAILOR_SKIP_MODEL_CHECK", "1")
    with scripted([(_chat_chunk(delta={"content": "Par"}, token_ids=[3]), 0)]) as url:
        model = load_model(f"openai:fake@{url}", max_attempts=1)
        with pytest.raises(ModelError, match="APIConnectionError.*ended before the reply did"):
            model.chat(QUESTION, SamplingParams())
        assert model.breaker._in_a_row == 1
    with scripted([(b"data: [DONE]\n\n", 0)]) as url:  # no chunk at all: cut too, and still asked streamed
        model = load_model(f"openai:fake@{url}", max_attempts=1)
        with pytest.raises(ModelError, match="ended without a chunk"):
            model.chat(QUESTION, SamplingParams())
        assert model._stream
    with scripted([(_completion_chunk([3, 4], [-0.5, -0.25]), 0)]) as url:
        chat = _vllm(url, smollm2_path)
        with pytest.raises(ModelError, match="RemoteProtocolError.*ended before the reply did"):
            chat.chat(QUESTION, SamplingParams(max_tokens=8))


@pytest.mark.parametrize(
    ("chunks", "what"),
    [
        ([([3, 4], [-0.5]), ([5, 2], [-1.0, -0.1, -0.2])], "chunk 1 of the streamed reply carries 2 token ids but 1"),
        ([([3, 4], None), ([5], [-1.0, -0.1, -0.2])], "chunk 1 of the streamed reply carries 2 token ids but 0"),
        ([([3.9, 4.2], [-0.5, -0.5])], "not a list of non-negative integers"),
        ([([True, 4], [-0.5, -0.5])], "not a list of non-negative integers"),
        ([([3, 4], ["-0.5", -0.5])], "not all finite numbers"),
        ([([3, 4], [5.0, 7.0])], "not all finite numbers of at most 0"),
        ([([1] * 20, [-0.1] * 20)], "20 token ids, more than max_tokens 8"),
        ([([10**12], [-0.5])], "token id 1000000000000 is past the model's vocabulary"),
        ([([3], [-0.5]), ([49152 + 7], [-0.5])], "token id 49159 is past the model's vocabulary .49152 ids"),
    ],
)
def test_vllm_token_ids_and_logprobs_are_checked_chunk_by_chunk_never_coerced(chunks, what, smollm2_path: Path):
    pieces = [(_completion_chunk(ids, lps, "stop" if i == len(chunks) - 1 else None), 0) for i, (ids, lps) in
              enumerate(chunks)]  # fmt: skip
    with scripted([*pieces, (b"data: [DONE]\n\n", 0)]) as url:
        chat = _vllm(url, smollm2_path)
        with pytest.raises(ModelError, match=what) as err:
            chat.chat(QUESTION, SamplingParams(max_tokens=8))
    assert str(err.value).startswith(chat.where)


def test_an_id_in_the_models_padded_rows_is_kept_one_past_them_refused(smollm2_path: Path, tmp_path: Path):
    """A model whose embedding has rows past the tokenizer's ids (Qwen: 151,936 for about
    151,669): vLLM samples from every row, so such an id is a reply token (no text), which the
    next turn's assembly and the trainer take; an id past the rows is still refused."""
    import shutil

    padded = tmp_path / "padded"
    shutil.copytree(smollm2_path, padded, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    config = json.loads((padded / "config.json").read_text())
    (padded / "config.json").write_text(json.dumps({**config, "vocab_size": 49152 + 64}))
    tok = load_tokenizer(smollm2_path)
    ids = [*tok("Paris", add_special_tokens=False)["input_ids"], 49152 + 7]
    with scripted([(_completion_chunk(ids, [-0.5] * len(ids), "stop"), 0), (b"data: [DONE]\n\n", 0)]) as url:
        chat = _vllm(url, padded)
        g = chat.chat(QUESTION, SamplingParams(max_tokens=8))
        assert g.token_ids == ids and g.text == "Paris"
        turn = {"role": "assistant", "content": g.text, "token_ids": g.token_ids}
        conv = chat.turns.conversation([*QUESTION, turn, {"role": "user", "content": "Sure?"}])
        assert [t for t, m in zip(conv.ids, conv.mask) if m][: len(ids)] == ids
    past = [ids[0], 49152 + 64]
    with scripted([(_completion_chunk(past, [-0.5] * 2, "stop"), 0), (b"data: [DONE]\n\n", 0)]) as url:
        with pytest.raises(ModelError, match="token id 49216 is past the model's vocabulary .49216 ids"):
            _vllm(url, padded).chat(QUESTION, SamplingParams(max_tokens=8))


@pytest.mark.parametrize("payload", [b"[1, 2]", b"null", b'{"choices": "abc"}', b'{"choices": [7]}', b"{oops"])
def test_a_vllm_chunk_that_is_no_completion_chunk_is_named(payload: bytes, smollm2_path: Path):
    with scripted([(b"data: " + payload + b"\n\n", 0)]) as url:
        chat = _vllm(url, smollm2_path)
        with pytest.raises(
            ModelError, match=r"streamed reply is not (JSON|a completion chunk)|choice is not an object"
        ):
            chat.chat(QUESTION, SamplingParams(max_tokens=8))


def test_an_event_over_several_data_lines_and_crlf_endings_are_read(smollm2_path: Path):
    tok = load_tokenizer(smollm2_path)
    ids = tok("Paris", add_special_tokens=False)["input_ids"]
    body = json.dumps({"choices": [{"index": 0, "text": "Paris", "token_ids": ids,
                                    "logprobs": {"token_logprobs": [-0.5] * len(ids)}, "finish_reason": "stop"}]})  # fmt: skip
    half = body.index('"logprobs"')
    event = f"data: {body[:half]}\r\ndata: {body[half:]}\r\n\r\ndata: [DONE]\r\n\r\n".encode()
    with scripted([(event[:7], 0.05), (event[7:], 0)]) as url:
        g = _vllm(url, smollm2_path).chat(QUESTION, SamplingParams(max_tokens=8))
    assert g.text == "Paris" and g.token_ids == ids and g.logprobs == [-0.5] * len(ids)


def test_a_chat_stream_without_the_first_choice_is_no_reply():
    """Chunks whose choices are empty, of another index or not objects: no reply (as a whole
    reply without choices), not an empty one."""
    usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    other = (b'data: {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "fake", "choices": '
             b'[{"index": 1, "delta": {"content": "x"}, "finish_reason": "stop"}]}\n\n')  # fmt: skip
    empty = f"data: {json.dumps({'id': 'x', 'object': 'chat.completion.chunk', 'created': 0, 'model': 'fake', 'choices': [], 'usage': usage})}\n\n"
    with scripted([(other, 0), (empty.encode(), 0), (b"data: [DONE]\n\n", 0)]) as url:
        model = load_model(f"openai:fake@{url}", max_attempts=1)
        with pytest.raises(ModelError, match="not a chat completion"):
            model.chat(QUESTION, SamplingParams())


def test_reply_content_that_is_no_text_is_refused_not_emptied():
    """A chunk's content, or a whole reply's, that is neither text nor null (a number, a list):
    refused with what it is, never read as an empty reply."""
    chunks = [_chat_chunk(delta={"role": "assistant", "content": None}), _chat_chunk(delta={"content": 5}),
              _chat_chunk(delta={"content": "x"}, finish_reason="stop"), b"data: [DONE]\n\n"]  # fmt: skip
    with scripted([(c, 0) for c in chunks]) as url:
        with pytest.raises(ModelError, match="a chunk's content is a int, not text"):
            load_model(f"openai:fake@{url}", max_attempts=1).chat(QUESTION, SamplingParams())
    whole = {"id": "x", "object": "chat.completion", "created": 0, "model": "fake",
             "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": ["P"]}}]}  # fmt: skip
    with scripted([(json.dumps(whole).encode(), 0)], content_type="application/json") as url:
        with pytest.raises(ModelError, match="the reply's content is a list, not text"):
            load_model(f"openai:fake@{url}", max_attempts=1).chat(QUESTION, SamplingParams())


def test_token_ids_sent_in_only_some_chunks_are_refused_not_trained_on(smollm2_path: Path):
    """A server that sends token ids with some chunks of reply text and not others (chat or
    completions): the ids would not be the text, so the reply is refused with the chunk; a chunk
    with ids and no text (a piece of a character held back) is fine."""
    chunks = [_chat_chunk(delta={"role": "assistant", "content": ""}),
              _chat_chunk(delta={"content": "Pa"}, token_ids=[3]), _chat_chunk(delta={"content": ""}, token_ids=[7]),
              _chat_chunk(delta={"content": "ris"}), _chat_chunk(delta={}, finish_reason="stop"), b"data: [DONE]\n\n"]  # fmt: skip
    with scripted([(c, 0) for c in chunks]) as url:
        with pytest.raises(ModelError, match="chunk 4 of the streamed reply carries text but no token ids"):
            load_model(f"openai:fake@{url}", max_attempts=1).chat(QUESTION, SamplingParams())
    gap = [_completion_chunk([3], [-0.5]), _completion_chunk(None, None).replace(b'"text": ""', b'"text": "ris"')]
    pieces = [*gap, _completion_chunk([], [], "stop"), b"data: [DONE]\n\n"]
    with scripted([(c, 0) for c in pieces]) as url:
        with pytest.raises(ModelError, match="chunk 2 of the streamed reply carries text but no token ids"):
            _vllm(url, smollm2_path).chat(QUESTION, SamplingParams(max_tokens=8))
    held = [_completion_chunk([3], [-0.5]), _completion_chunk([4], [-0.25]).replace(b'"text": ""', b'"text": "Pa"')]
    with scripted([(c, 0) for c in [*held, _completion_chunk([], [], "stop"), b"data: [DONE]\n\n"]]) as url:
        g = _vllm(url, smollm2_path).chat(QUESTION, SamplingParams(max_tokens=8))
    assert g.token_ids == [3, 4]  # the text is decoded from the ids


def test_a_whole_reply_that_stalls_is_a_timeout_the_breaker_counts():
    """A server that answers a streamed request with a whole JSON body and stops sending
    mid-body: the read timeout ends it as the client's timeout (retried, counted by the breaker
    as a timeout), not as a raw error of the client's HTTP library."""
    with scripted([(b'{"choices": [', 3.0)], content_type="application/json") as url:
        model = load_model(f"openai:fake@{url}", max_attempts=1, read_timeout_s=0.5)
        t0 = time.perf_counter()
        with pytest.raises(ModelError, match="timed out"):
            model.chat(QUESTION, SamplingParams())
        assert time.perf_counter() - t0 < 2.5  # the read timeout, not the stall
    assert (model.breaker._in_a_row, model.breaker._timeouts) == (1, 1)


def test_more_of_a_reply_after_its_finish_is_refused(smollm2_path: Path):
    """A chunk with content after the chunk that gave the finish reason: refused by both
    backends, never joined to the reply; a finish reason that is no string too."""
    chunks = [_chat_chunk(delta={"content": "Par"}), _chat_chunk(delta={"content": "is"}, finish_reason="stop"),
              _chat_chunk(delta={"content": " EVIL"}), b"data: [DONE]\n\n"]  # fmt: skip
    with scripted([(c, 0) for c in chunks]) as url:
        with pytest.raises(ModelError, match="came after its finish_reason"):
            load_model(f"openai:fake@{url}", max_attempts=1).chat(QUESTION, SamplingParams())
    chunks = [_completion_chunk([28], [-0.1]), _completion_chunk([29], [-0.1], "stop"),
              _completion_chunk([30], [-0.1]), b"data: [DONE]\n\n"]  # fmt: skip
    with scripted([(c, 0) for c in chunks]) as url:
        with pytest.raises(ModelError, match="came after its finish_reason"):
            _vllm(url, smollm2_path).chat(QUESTION, SamplingParams(max_tokens=8))
    with scripted([(_completion_chunk([28], [-0.1], 7), 0), (b"data: [DONE]\n\n", 0)]) as url:
        with pytest.raises(ModelError, match="finish_reason is not a reason: 7"):
            _vllm(url, smollm2_path).chat(QUESTION, SamplingParams(max_tokens=8))


def test_a_vllm_stream_cut_inside_an_event_is_a_transport_failure(smollm2_path: Path):
    """The body ends inside an event (no blank line after it): the event is discarded, as the
    SSE rules say, and the stream is a cut one (retried, counted), not a chunk that is no JSON."""
    last = _completion_chunk([29], [-0.1], "stop")
    with scripted([(_completion_chunk([28], [-0.1]), 0), (last[:40], 0)]) as url:
        chat = _vllm(url, smollm2_path)
        with pytest.raises(ModelError, match="RemoteProtocolError.*ended before the reply did"):
            chat.chat(QUESTION, SamplingParams(max_tokens=8))
        assert chat.breaker._in_a_row == 1


def test_the_questions_own_time_running_out_is_no_failure_of_the_server(smollm2_path: Path):
    """A reply cut because the question's time ran out (the caller's limit, shorter than the
    server's timeout) ends the call, but the server's breaker does not count it."""
    with FakeOpenAIServer(stall_s=0.6) as srv:
        model = _openai(srv)
        with pytest.raises(ModelError, match="the question's time ran out mid-reply"):
            model.chat(QUESTION, SamplingParams(timeout_s=1.0))
        assert model.breaker._in_a_row == 0
    tok = load_tokenizer(smollm2_path)
    with serving(vllm_imitation(tok, "<answer>Paris</answer>", stall_s=30)) as url:
        chat = VLLMServerModel("policy", f"{url}/v1", tokenizer_dir=smollm2_path, max_attempts=2, backoff_s=0.01)
        with pytest.raises(ModelError, match="the question's time ran out mid-reply"):
            chat.chat(QUESTION, SamplingParams(max_tokens=64, timeout_s=1.0))
        assert chat.breaker._in_a_row == 0
        chat.close()


def test_a_proxy_page_is_an_error_and_streaming_stays_on():
    """One HTTP 200 HTML page (a proxy's) to a streamed request: a model error naming it; the
    server is still asked for streamed replies (only a whole chat completion turns that off)."""
    with scripted([(b"<html><body>502 Bad Gateway</body></html>", 0)], content_type="text/html") as url:
        model = load_model(f"openai:fake@{url}", max_attempts=1)
        with pytest.raises(ModelError, match="answered with an HTML page"):
            model.chat(QUESTION, SamplingParams())
        assert model._stream


def test_odd_usage_and_a_body_that_does_not_decode_are_named(smollm2_path: Path):
    usage = b'data: {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "fake", "choices": [], "usage": "lots"}\n\n'
    chunks = [_chat_chunk(delta={"content": "Paris"}, finish_reason="stop"), usage, b"data: [DONE]\n\n"]
    with scripted([(c, 0) for c in chunks]) as url:
        g = load_model(f"openai:fake@{url}", max_attempts=1).chat(QUESTION, SamplingParams())
    assert g.text == "Paris" and g.completion_tokens == len("Paris") // 4
    with scripted([(_completion_chunk([28], [-0.1], "stop"), 0)], headers={"Content-Encoding": "gzip"}) as url:
        with pytest.raises(ModelError, match="does not decode"):
            _vllm(url, smollm2_path).chat(QUESTION, SamplingParams(max_tokens=8))
