"""Services that die stop a run within seconds (websailor.breaker): the model server, the
judge and the tool server each get a circuit breaker; what finished is kept, nothing cut by the
outage is graded or kept as done, and rerunning resumes to the undisturbed run's result."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes import FakeOpenAIServer, dead_url

from websailor.breaker import FAILURES_ENV, ServiceBreaker, check_threshold, set_threshold, threshold
from websailor.errors import ConfigError, ServiceDown

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = [
    ("q0", "Who painted the Mona Lisa?", "Leonardo da Vinci"),
    ("q1", "Which river flows through Cairo?", "Nile"),
    ("q2", "What is the capital of France?", "Paris"),
    ("q3", "Who wrote Hamlet?", "William Shakespeare"),
    ("q4", "Which planet is the largest?", "Jupiter"),
    ("q5", "What is the chemical symbol of gold?", "Au"),
]


def _reply(messages: list[dict]) -> str:
    """The right answer to the question asked (the agent answers at once, no tool call)."""
    question = next(m["content"] for m in messages if m["role"] == "user")
    return "<answer>" + next(a for _, q, a in QUESTIONS if q in question) + "</answer>"


def test_a_service_is_down_after_its_threshold_of_failures_in_a_row():
    breaker = ServiceBreaker("judge", "http://127.0.0.1:9/v1", failures=3, min_down_s=0)
    for _ in range(2):
        breaker.failure(ConnectionRefusedError("refused"))
    breaker.success()  # an answer breaks the row
    for _ in range(2):
        breaker.failure("HTTP 502")
    assert not breaker.down
    with pytest.raises(ServiceDown) as down:
        breaker.failure(TimeoutError("read timed out"))
    message = str(down.value)
    assert message.startswith("the judge at http://127.0.0.1:9/v1 is down since ")
    assert "3 requests in a row failed (last: TimeoutError: read timed out)" in message
    assert (down.value.service, down.value.url, down.value.failures) == ("judge", "http://127.0.0.1:9/v1", 3)
    breaker.success()  # down is for good: a late answer does not bring it back
    with pytest.raises(ServiceDown):
        breaker.check()


def test_a_row_of_failures_must_span_the_window():
    """A burst of concurrent requests failing together (a restart of a second) is no outage; the
    same row still failing after the window is; timeouts alone say a timeout may be too short."""
    breaker = ServiceBreaker("model server", "http://m/v1", failures=3, min_down_s=0.3)
    for _ in range(6):  # a burst: 6 failures within milliseconds
        breaker.failure(TimeoutError("read timed out"))
    assert not breaker.down
    time.sleep(0.35)
    with pytest.raises(ServiceDown, match="7 requests in a row failed.*every one timed out: if the service is slow"):
        breaker.failure(TimeoutError("read timed out"))
    blip = ServiceBreaker("model server", "http://m/v1", failures=3, min_down_s=0.3)
    for _ in range(5):
        blip.failure("HTTP 503")
    blip.success()  # back within the window: the row is broken
    time.sleep(0.35)
    blip.failure("HTTP 503")
    blip.check()
    assert not blip.down


def test_requests_that_each_waited_out_a_timeout_span_the_window_from_their_sending():
    """Three requests sent 30 s ago that all timed out now are 30 s of silence, not a burst: the
    row spans the window from the first one's sending, and "since" is that time."""
    breaker = ServiceBreaker("model server", "http://m/v1", failures=3, min_down_s=10)
    sent = time.time() - 30
    breaker.failure(TimeoutError("read timed out"), sent)
    breaker.failure(TimeoutError("read timed out"), sent + 0.1)
    with pytest.raises(ServiceDown, match="3 requests in a row failed") as err:
        breaker.failure(TimeoutError("read timed out"), sent + 0.2)
    assert err.value.since == sent
    dropped = ServiceBreaker("model server", "http://m/v1", failures=3, min_down_s=10)
    for _ in range(3):  # long replies a restart dropped: they say nothing of the time before
        dropped.failure("APIConnectionError: Connection error.", sent)
    assert not dropped.down
    slow_then_restart = ServiceBreaker("model server", "http://m/v1", failures=3, min_down_s=10)
    slow_then_restart.failure(TimeoutError("read timed out"), sent)  # one slow request, then a restart
    for _ in range(2):
        slow_then_restart.failure("APIConnectionError: Connection error.", time.time())
    slow_then_restart.check()
    assert not slow_then_restart.down


def test_a_timeout_is_told_by_its_type_not_its_text():
    """httpx's, the OpenAI client's and Python's timeouts are timeouts whatever they say; a
    dropped connection whose message names a timeout is not (its row counts from the failure,
    not from a sending long ago)."""
    import httpx
    import openai

    from websailor.breaker import is_timeout

    request = httpx.Request("POST", "http://m/v1/completions")
    for timeout in (httpx.ReadTimeout(""), httpx.ConnectTimeout("x"), openai.APITimeoutError(request), TimeoutError()):
        assert is_timeout(timeout), timeout
    proxy = httpx.RemoteProtocolError("peer closed connection (upstream keepalive timeout)")
    for other in (proxy, ConnectionResetError("timed out earlier, reset now"), "HTTP 504"):
        assert not is_timeout(other), other
    breaker = ServiceBreaker("model server", "http://m/v1", failures=3, min_down_s=10)
    long_ago = time.time() - 30
    for _ in range(3):  # dropped by a restart: the row starts now, within the window
        breaker.failure(proxy, long_ago)
    assert not breaker.down


def test_thresholds_are_checked(monkeypatch):
    for bad in (0, -2, "x", "1.5"):
        with pytest.raises(ConfigError, match="--service-failures"):
            check_threshold(bad)
    monkeypatch.setenv(FAILURES_ENV, "7")
    set_threshold(None)
    assert threshold() == 7 and ServiceBreaker("judge", "u").failures == 7
    set_threshold(2)
    assert threshold() == 2
    set_threshold(None)
    monkeypatch.setenv(FAILURES_ENV, "0")
    with pytest.raises(ConfigError, match=f"{FAILURES_ENV} 0"):
        threshold()


def test_a_dead_model_server_is_declared_down_within_seconds():
    from websailor.models.base import SamplingParams
    from websailor.models.openai_compat import OpenAIModel

    model = OpenAIModel("m", dead_url(), max_attempts=10, backoff_s=0.01)
    model.breaker = ServiceBreaker("model server", model.base_url, failures=4, min_down_s=0)
    t0 = time.perf_counter()
    with pytest.raises(ServiceDown, match="4 requests in a row failed"):
        model.chat([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=8))
    assert time.perf_counter() - t0 < 5  # not the 10 attempts' back-off
    t0 = time.perf_counter()
    with pytest.raises(ServiceDown):  # every later call at once, without a request
        model.chat([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=8))
    assert time.perf_counter() - t0 < 0.1


def _agent(url: str):
    from websailor.agent.loop import Agent, AgentConfig
    from websailor.models.openai_compat import OpenAIModel

    model = OpenAIModel("m", url, backoff_s=0.05)
    return Agent(model, {}, AgentConfig(max_calls=2), env="none")


def _questions():
    from websailor.questions import Question

    return [Question(id=i, question=q, answer=a) for i, q, a in QUESTIONS]


def test_a_batch_stops_when_the_model_server_dies_and_a_rerun_resumes(tmp_path: Path, monkeypatch):
    """The server dies after 3 answers: the batch stops in seconds with ServiceDown, the file
    holds the 3 finished rollouts and no model error; brought back, a rerun runs only the rest."""
    from websailor.agent.runner import run_questions

    monkeypatch.setattr("websailor.breaker.DEFAULT_MIN_DOWN_S", 0.0)  # no window: in seconds, not 10
    out = tmp_path / "trajectories.jsonl"
    with FakeOpenAIServer(_reply, down_after=3) as srv:
        t0 = time.perf_counter()
        with pytest.raises(ServiceDown, match=f"the model server at {srv.url} is down"):
            run_questions(_agent(srv.url), _questions(), out, rollouts=2, concurrency=2, progress=False)
        assert time.perf_counter() - t0 < 15
        kept = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(kept) == 3 and all(r["termination"] == "answer" for r in kept)
        srv.down = False
        summary = run_questions(_agent(srv.url), _questions(), out, rollouts=2, concurrency=2, progress=False)
        assert (summary.finished, summary.skipped) == (9, 3)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["id"], r["rollout"]) for r in records) == sorted((i, r) for i, _, _ in QUESTIONS for r in (0, 1))
    assert all(r["prediction"] == dict((i, a) for i, _, a in QUESTIONS)[r["id"]] for r in records)


def test_a_judge_that_dies_stops_grading_and_its_verdicts_are_kept(tmp_path: Path, monkeypatch):
    from websailor.judge import Case, Gold, load_judge

    monkeypatch.setattr("websailor.breaker.DEFAULT_MIN_DOWN_S", 0.0)
    verdict = json.dumps({"extracted_final_answer": "x", "reasoning": "same", "correct": "yes", "confidence": 90})
    cases = [Case(q, a, Gold(a)) for _, q, a in QUESTIONS]
    with FakeOpenAIServer(verdict, down_after=2) as srv:
        judge = load_judge(f"llm:openai:m@{srv.url}", cache=tmp_path / "judge.sqlite", concurrency=1)
        with pytest.raises(ServiceDown, match=f"the judge at {srv.url} is down"):
            judge.grade(cases)
        asked = srv.state["answered"]
        srv.down = False
        again = load_judge(f"llm:openai:m@{srv.url}", cache=tmp_path / "judge.sqlite", concurrency=1)
        grades = again.grade(cases)
        assert all(g.correct for g in grades)
        assert asked == 2 and srv.state["answered"] - asked == len(cases) - 2  # the 2 made came from the cache


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "websailor.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )


def test_eval_exits_4_with_one_line_when_the_model_server_dies_and_resumes(tmp_path: Path):
    bench = tmp_path / "qa.jsonl"
    bench.write_text("".join(json.dumps({"id": i, "question": q, "answer": a}) + "\n" for i, q, a in QUESTIONS))
    out = tmp_path / "eval"
    with FakeOpenAIServer(_reply, down_after=4) as srv:
        args = ["eval", "--bench", str(bench), "--out", str(out), "--model", f"openai:m@{srv.url}", "--env", "none"]
        args += ["--rollouts", "2", "--concurrency", "2", "--service-failures", "3"]
        t0 = time.perf_counter()
        r = _cli(*args)
        wall = time.perf_counter() - t0
        errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
        assert r.returncode == 4, r.stderr[-2000:]
        assert len(errors) == 1 and f"the model server at {srv.url} is down since" in errors[0]
        # at least 3 failures in a row, over the 10 s window (a restart of a second is no outage)
        assert (
            re.search(r": \d+ requests in a row failed", errors[0])
            and "resume with: websailor eval --bench" in errors[0]
        )
        assert wall < 120  # the 10 s window and the CLI start-up; benchmarks/service_faults.py measures it
        kept = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
        assert len(kept) == 4 and all(rec["termination"] == "answer" for rec in kept)
        assert not (out / "summary.json").exists()
        srv.down = False
        r = _cli(*args)
        assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trajectories"] == 12 and summary["ungraded"] == 0 and summary["avg_at_k"] == 1.0


def test_run_of_one_question_without_out_exits_4_and_says_nothing_was_saved():
    """A single question with no --out keeps nothing: the line must not say it did."""
    with FakeOpenAIServer(_reply, down_after=0) as srv:
        r = _cli("run", "Who painted the Mona Lisa?", "--model", f"openai:m@{srv.url}", "--env", "none",
                 "--service-failures", "2")  # fmt: skip
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 4, r.stderr[-2000:]
    assert len(errors) == 1 and f"the model server at {srv.url} is down since" in errors[0]
    assert "nothing was saved (no --out)" in errors[0] and "what finished is kept" not in errors[0]


def test_run_exits_3_when_any_rollout_ended_in_a_model_error(tmp_path: Path):
    """One question of two is refused by the server (HTTP 400: no retry, no outage): the
    other is answered, and the exit status still says a rollout failed."""
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": i, "question": q}) + "\n" for i, q, _ in QUESTIONS[:2]))
    refuse = lambda messages: "refused" if "Cairo" in messages[-1]["content"] else None  # noqa: E731
    with FakeOpenAIServer(_reply, bad_request=refuse) as srv:
        out = tmp_path / "t.jsonl"
        r = _cli("run", "--questions", str(questions), "--out", str(out), "--model", f"openai:m@{srv.url}",
                 "--env", "none")  # fmt: skip
    assert r.returncode == 3, r.stderr[-2000:]
    assert "error: 1 of 2 rollouts run ended in a model error" in r.stderr
    assert sorted(json.loads(line)["termination"] for line in out.read_text().splitlines()) == ["answer", "model_error"]


def test_a_tool_server_that_dies_stops_the_agent_not_each_rollout(monkeypatch):
    """The tool server is killed: after the threshold of failed attempts every call, and the
    agent's rollout, raise ServiceDown instead of writing error observations."""
    from fakes import ScriptedModel, call

    from tests.test_server import start_echo_server
    from websailor.agent.loop import Agent
    from websailor.server import RetryPolicy, connect_tools

    monkeypatch.setattr("websailor.breaker.DEFAULT_MIN_DOWN_S", 0.0)
    port = int(dead_url().rsplit(":", 1)[1].split("/")[0])
    proc = start_echo_server(port)
    try:
        fast = RetryPolicy(max_attempts=3, backoff_s=0.01)
        set_threshold(4)
        try:
            tools, _ = connect_tools(f"http://127.0.0.1:{port}", timeout_s=30, retry=fast, health_retry=fast)
        finally:
            set_threshold(None)
        assert tools["echo"].execute({"text": "hi"}).observation == "hi"
        proc.kill()
        proc.wait(10)
        first = tools["echo"].execute({"text": "anyone?"})  # 3 failed attempts: an error observation
        assert first.kind == "tool_server"
        with pytest.raises(ServiceDown, match=f"the tool server at http://127.0.0.1:{port} is down"):
            tools["echo"].execute({"text": "anyone?"})  # the 4th failure in a row
        script = [call("echo", text="still there?"), "<answer>no</answer>"]
        t0 = time.perf_counter()
        with pytest.raises(ServiceDown):
            Agent(ScriptedModel(script), tools).run("Is the server up?", id="q")
        assert time.perf_counter() - t0 < 0.5  # no request made
        tools["echo"].client.close()
    finally:
        proc.kill()
        proc.wait(10)


def test_judge_limits_cap_every_judge_call_and_are_checked():
    """--judge-max-tokens and --judge-timeout reach the judge's requests; the wrapped judge
    keeps its name (its cached replies are found again) and its breaker."""
    from websailor.judge import Case, Gold, load_judge
    from websailor.judge.load import CappedJudgeModel, set_judge_limits

    verdict = json.dumps({"extracted_final_answer": "Nile", "reasoning": "same", "correct": "yes", "confidence": 90})
    for bad, says in (({"timeout_s": 0}, "--judge-timeout 0"), ({"max_tokens": 8}, "--judge-max-tokens 8")):
        with pytest.raises(ConfigError, match=says):
            set_judge_limits(**bad)
    try:
        set_judge_limits(timeout_s=30, max_tokens=64)
        with FakeOpenAIServer(verdict) as srv:
            judge = load_judge(f"llm:openai:m@{srv.url}")
            assert isinstance(judge.model, CappedJudgeModel) and judge.name == f"llm:openai:m@{srv.url}"
            assert judge.model.breaker.service == "judge"
            assert judge.grade([Case("Which river flows through Cairo?", "Nile", Gold("Nile"))])[0].correct
            assert srv.bodies[-1]["max_tokens"] == 64  # the verdict's own budget is 4,096
    finally:
        set_judge_limits()
    with FakeOpenAIServer(verdict) as srv:
        load_judge(f"llm:openai:m@{srv.url}").grade([Case("Which river?", "Nile", Gold("Nile"))])
        assert srv.bodies[-1]["max_tokens"] == 4096


def test_a_rollout_whose_model_never_answered_is_a_model_error_not_a_timeout():
    """The question's time runs out in a failed request: a timeout (graded) only when the model
    answered at least once; a model that never answered says nothing about the policy."""
    from fakes import ScriptedModel, call

    from websailor.agent.loop import Agent, AgentConfig
    from websailor.errors import ModelError

    def hangs(messages):
        time.sleep(0.3)
        return ModelError("APITimeoutError: Request timed out.")

    first = Agent(ScriptedModel(hangs), {}, AgentConfig(timeout_s=0.2), env="none").run("Where is the Nile?")
    assert first.termination == "model_error" and first.num_model_calls == 0
    replies = iter([call("search", query=["Nile"])])
    later = Agent(
        ScriptedModel(lambda m: next(replies, None) or hangs(m)), {}, AgentConfig(timeout_s=0.2), env="none"
    ).run("Where is the Nile?")
    assert later.termination == "timeout" and later.num_model_calls == 1


def test_judge_limits_with_a_rule_judge_are_named_as_ignored(tmp_path: Path):
    from typer.testing import CliRunner

    from websailor.cli.main import app

    missing = tmp_path / "none.jsonl"
    res = CliRunner().invoke(app, ["score", str(missing), "--judge", "f1", "--judge-max-tokens", "64"])
    assert res.exit_code == 2  # the missing file, after the warning
    assert "--judge-max-tokens apply to an llm: judge; the f1 judge has no model: ignored" in res.stderr


@pytest.mark.parametrize("backend", ["openai", "vllm"])
def test_one_call_alone_declares_a_dead_server_down_with_the_default_retries(backend, request, monkeypatch):
    """A dead server with one rollout at a time is declared down (exit 4), not a model error
    ending that rollout (exit 3): a call's default tries reach the breaker's default threshold,
    and its default back-offs (without jitter, the shortest) span the breaker's window."""
    from websailor.breaker import DEFAULT_FAILURES, DEFAULT_MIN_DOWN_S
    from websailor.models.base import SamplingParams
    from websailor.models.endpoint import SKIP_CHECK_ENV
    from websailor.models.openai_compat import OpenAIModel
    from websailor.models.vllm_server import VLLMServerModel

    if backend == "openai":
        model = OpenAIModel("m", dead_url())
    else:  # a server that was checked at start and has died since
        monkeypatch.setenv(SKIP_CHECK_ENV, "1")
        model = VLLMServerModel("m", dead_url(), tokenizer_dir=request.getfixturevalue("smollm2_path"))
    assert model.max_attempts >= DEFAULT_FAILURES
    waits = [min(model.backoff_s * 2**n, 10.0) for n in range(DEFAULT_FAILURES - 1)]
    assert sum(waits) >= DEFAULT_MIN_DOWN_S, waits
    model.backoff_s = 0.001  # the tries as they are, the waits short (the window is not under test here)
    model.breaker = ServiceBreaker("model server", model.base_url, min_down_s=0)
    with pytest.raises(ServiceDown, match=f"{DEFAULT_FAILURES} requests in a row failed"):
        model.chat([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=8))
