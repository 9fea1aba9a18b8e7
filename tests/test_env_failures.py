"""Environment failures are kept out of grades, rewards and resumes: a rollout whose tool calls
the environment degraded is recorded as such, left ungraded by eval (and rerun), and given no
reward in RL, with the allowance ``max_env_failures``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.fakes import ScriptedModel, call
from websailor.agent.loop import Agent, AgentConfig
from websailor.agent.trajectory import Trajectory, environment_failed
from websailor.errors import InputFormatError, ModelError
from websailor.eval.harness import EvalConfig, evaluate
from websailor.eval.scoring import read_trajectories, score_trajectories
from websailor.judge import Gold, load_judge
from websailor.questions import Question
from websailor.tools.base import TOOL_ERROR, Tool, ToolResult


class OutageSearch(Tool):
    """The local ``search`` over the corpus, behind a switch: while ``down``, each call fails as
    the web layer reports a provider outage (every provider answered HTTP 500 after retries)."""

    def __init__(self, inner: Tool) -> None:
        self.inner = inner
        self.name, self.description, self.parameters = inner.name, inner.description, inner.parameters
        self.down = True

    def execute(self, arguments=None) -> ToolResult:
        if not self.down:
            return self.inner.execute(arguments)
        why = "serper: server_error, HTTP 500; searxng: server_error, HTTP 502"
        return ToolResult(f"[search] Error: The search failed ({why}). Try again.", why, TOOL_ERROR, ("server_error",))

    def forward(self, **kwargs):
        return self.inner.forward(**kwargs)


def _tools(vital) -> dict[str, Tool]:
    from websailor.tools.local import build_local_tools

    tools = build_local_tools(vital)
    tools["search"] = OutageSearch(tools["search"])
    return tools


ITEMS = [
    Question("paris", "Which city is the capital of France?", Gold.parse("Paris")),
    Question("nile", "Which river flows through Cairo?", Gold.parse("Nile")),
]
REPLIES = {
    "paris": [call("search", query=["capital of France"]), "<answer>Paris</answer>"],
    "nile": [call("search", query=["Cairo river"]), call("search", query=["Nile"]), "<answer>Nile</answer>"],
}


def _scripted() -> ScriptedModel:
    """Answers each question after its searches, whatever the observations said."""

    def reply(messages):
        q = next(it for it in ITEMS if it.question == messages[1]["content"])
        turn = sum(m["role"] == "assistant" for m in messages)
        return REPLIES[q.id][min(turn, len(REPLIES[q.id]) - 1)]

    return ScriptedModel(reply)


def test_the_trajectory_records_the_degraded_calls_and_keeps_its_termination(vital):
    tools = _tools(vital)
    traj = Agent(_scripted(), tools, AgentConfig(max_calls=5)).run(ITEMS[1].question, "nile", 0, "Nile")
    assert traj.termination == "answer" and traj.prediction == "Nile"
    assert traj.env_failures == {"calls": 2, "tools": {"search": 2}, "kinds": {"server_error": 2}}
    rec = traj.to_dict()
    assert [c["env_failures"] for c in rec["tool_calls"]] == [["server_error"], ["server_error"]]
    assert environment_failed(rec) and environment_failed(rec, 1) and not environment_failed(rec, 2)
    assert Trajectory.from_dict(json.loads(json.dumps(rec))).env_failures == traj.env_failures
    tools["search"].down = False
    held = Agent(_scripted(), tools, AgentConfig(max_calls=5)).run(ITEMS[1].question, "nile", 0, "Nile").to_dict()
    assert "env_failures" not in held and all("env_failures" not in c for c in held["tool_calls"])


def test_eval_leaves_outage_rollouts_ungraded_reports_them_and_reruns_them(tmp_path: Path, vital):
    tools = _tools(vital)
    agent = Agent(_scripted(), tools, AgentConfig(max_calls=5))
    s = evaluate(ITEMS, agent, load_judge("em"), tmp_path, EvalConfig(rollouts=2, concurrency=1), progress=False)
    # every answer was right, but none of it may count: the environment failed every search
    assert s["ungraded"] == 4 and s["avg_at_k"] is None and s["ungraded_for"] == {"environment": 4}
    assert s["terminations"] == {"answer": 4}
    assert s["env_failures"] == {
        "rollouts": 4,
        "ungraded": 4,
        "calls": 6,
        "tools": {"search": 6},
        "kinds": {"server_error": 6},
        "max_env_failures": 0,
    }
    report = (tmp_path / "report.md").read_text()
    assert "ungraded: 4 (environment 4; left out of every figure)" in report
    assert "in 4 rollouts the environment degraded 6 tool calls (search 6; failed operations: server_error 6)" in report
    assert "4 of them ungraded, which the same eval or run command runs again" in report
    scores = [json.loads(x) for x in (tmp_path / "scores.jsonl").read_text().splitlines()]
    assert {x["ungraded_for"] for x in scores} == {"environment"} and all(x["correct"] is None for x in scores)
    # the next run of the same command reruns them, now that the environment answers
    tools["search"].down = False
    s = evaluate(ITEMS, agent, load_judge("em"), tmp_path, EvalConfig(rollouts=2, concurrency=1), progress=False)
    assert s["ungraded"] == 0 and s["avg_at_k"] == 1.0 and "env_failures" not in s
    assert len((tmp_path / "trajectories.jsonl").read_text().splitlines()) == 8  # 4 superseded, 4 new


def test_an_allowance_grades_rollouts_with_few_degraded_calls(tmp_path: Path, vital):
    agent = Agent(_scripted(), _tools(vital), AgentConfig(max_calls=5))
    cfg = EvalConfig(rollouts=1, concurrency=1, max_env_failures=1)
    s = evaluate(ITEMS, agent, load_judge("em"), tmp_path, cfg, progress=False)
    # paris had one degraded search (allowed), nile two (not)
    assert s["ungraded"] == 1 and s["avg_at_k"] == 1.0 and s["questions"] == 2
    assert s["env_failures"]["rollouts"] == 2 and s["env_failures"]["ungraded"] == 1
    assert s["env_failures"]["max_env_failures"] == 1
    # the same run again keeps the graded one and reruns only nile (still down)
    s2 = evaluate(ITEMS, agent, load_judge("em"), tmp_path, cfg, progress=False)
    assert len((tmp_path / "trajectories.jsonl").read_text().splitlines()) == 3 and s2["ungraded"] == 1


def test_rescoring_with_a_large_allowance_shows_what_the_outage_cost(tmp_path: Path, vital):
    agent = Agent(_scripted(), _tools(vital), AgentConfig(max_calls=5))
    evaluate(ITEMS, agent, load_judge("em"), tmp_path, EvalConfig(rollouts=1, concurrency=1), progress=False)
    records = read_trajectories([tmp_path / "trajectories.jsonl"])
    strict = score_trajectories(records, load_judge("em"), tmp_path / "scores.jsonl", progress=False)
    assert all(s.correct is None and s.ungraded_for == "environment" for s in strict)
    lenient = score_trajectories(records, load_judge("em"), tmp_path / "scores.jsonl", False, max_env_failures=99)
    assert all(s.correct is True and s.ungraded_for is None for s in lenient)
    # and a stored grade is never reused for a rollout the strict allowance leaves ungraded
    again = score_trajectories(records, load_judge("em"), tmp_path / "scores.jsonl", progress=False)
    assert all(s.correct is None for s in again)


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ({"calls": "two"}, "env_failures must be an object with a count 'calls'"),
        (3, "env_failures must be an object with a count 'calls'"),
        ({"calls": True}, "env_failures must be an object with a count 'calls'"),
        ({"calls": 1, "tools": 5}, "env_failures.tools must map names to counts"),
        ({"calls": 1, "kinds": ["x"]}, "env_failures.kinds must map names to counts"),
        ({"calls": 1, "tools": {"search": "a"}}, "env_failures.tools must map names to counts"),
    ],
)
def test_a_malformed_env_failures_field_is_refused_with_its_line(tmp_path: Path, field, message):
    rec = {"id": "a", "rollout": 0, "question": "q?", "answer": "x", "prediction": "x", "termination": "answer"}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(rec) + "\n" + json.dumps({**rec, "id": "b", "env_failures": field}) + "\n")
    with pytest.raises(InputFormatError, match=rf"t.jsonl line 2: {re.escape(message)}"):
        read_trajectories([path])


def test_a_malformed_record_superseded_by_its_rerun_does_not_block_the_file(tmp_path: Path, vital):
    agent = Agent(_scripted(), _tools(vital), AgentConfig(max_calls=5))
    agent.tools["search"].down = False
    cfg = EvalConfig(rollouts=1, concurrency=1)
    evaluate(ITEMS, agent, load_judge("em"), tmp_path, cfg, progress=False)
    path = tmp_path / "trajectories.jsonl"
    lines = path.read_text().splitlines()
    broken = {**json.loads(lines[0]), "env_failures": 3}
    path.write_text("\n".join([json.dumps(broken), lines[1]]) + "\n")
    s = evaluate(ITEMS, agent, load_judge("em"), tmp_path, cfg, progress=False)  # reruns it, then grades
    assert s["ungraded"] == 0 and s["avg_at_k"] == 1.0 and len(path.read_text().splitlines()) == 3


def test_the_cli_score_takes_the_allowance(tmp_path: Path, vital):
    from typer.testing import CliRunner

    from websailor.cli.main import app

    agent = Agent(_scripted(), _tools(vital), AgentConfig(max_calls=5))
    evaluate(ITEMS, agent, load_judge("em"), tmp_path / "ev", EvalConfig(rollouts=1), progress=False)
    path = str(tmp_path / "ev" / "trajectories.jsonl")
    strict = CliRunner().invoke(app, ["score", path, "--json"])
    # nothing could be graded: the figures are printed, and the exit code tells a script so
    assert strict.exit_code == 3, strict.output
    assert json.loads(strict.stdout)["ungraded"] == 2
    assert "none of the 2 rollouts could be graded (environment 2)" in strict.stderr
    lenient = CliRunner().invoke(app, ["score", path, "--json", "--max-env-failures", "5"])
    assert lenient.exit_code == 0 and json.loads(lenient.stdout)["avg_at_k"] == 1.0


# -- RL -----------------------------------------------------------------------------------------
class _Judge:
    name = "test"

    def grade(self, cases):
        from websailor.judge.base import Grade

        return [Grade(c.prediction == "Paris", 1.0) for c in cases]


def _group(vital, tools, down: list[bool]) -> list[Trajectory]:
    out = []
    for r, d in enumerate(down):
        tools["search"].down = d
        agent = Agent(_scripted(), tools, AgentConfig(max_calls=4))
        out.append(agent.run(ITEMS[0].question, "paris", r, "Paris"))
    return out


def test_rl_gives_no_reward_to_outage_rollouts_and_skips_their_group(tmp_path: Path, vital, smollm2_path: Path):
    from websailor.train.rl.rollouts import AgentRollouts, RolloutSettings
    from websailor.train.sft import load_tokenizer

    tok = load_tokenizer(smollm2_path)
    tools = _tools(vital)
    settings = RolloutSettings(2, "v2", AgentConfig(max_calls=4), concurrency=1)
    ro = AgentRollouts({ITEMS[0].question: ITEMS[0]}, tools, _Judge(), settings, tmp_path / "rollouts.jsonl")
    # group 1: both rollouts held, one right and one wrong
    held = _group(vital, tools, [False, False])
    held[1] = Agent(ScriptedModel([call("search", query=["x"]), "<answer>Lyon</answer>"]), tools).run(
        ITEMS[0].question, "paris", 1, "Paris"
    )
    outage = _group(vital, tools, [False, True])  # group 2: one rollout hit the outage
    out = ro.batch([ITEMS[0]] * 4, held + outage, step=0, tokenizer=tok)
    assert ro.last["groups/env_failed"] == 1.0 and ro.last["rollouts/env_failed"] == 1.0
    assert ro.last["groups/skipped"] == 1.0 and out["advantage"][2:] == [0.0, 0.0]
    records = [json.loads(x) for x in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert [r["reward"] for r in records] == [1.0, 0.0, 1.0, None]
    assert [r["in_loss"] for r in records] == [True, True, False, False]
    assert not any(r["in_loss"] for r in records if r.get("env_failures"))
    # the same group with an allowance of one degraded call is trained on
    ro2 = AgentRollouts(
        {ITEMS[0].question: ITEMS[0]},
        tools,
        _Judge(),
        RolloutSettings(2, "v2", AgentConfig(max_calls=4), concurrency=1, max_env_failures=1),
        tmp_path / "rollouts2.jsonl",
    )
    ro2.batch([ITEMS[0]] * 4, held + outage, step=0, tokenizer=tok)
    assert ro2.last["rollouts/env_failed"] == 0.0 and ro2.last["reward/ungraded"] == 0.0


def test_rl_stops_after_batches_in_a_row_with_only_outages(tmp_path: Path, vital, smollm2_path: Path):
    from websailor.train.rl.rollouts import AgentRollouts, RolloutSettings
    from websailor.train.sft import load_tokenizer

    tok = load_tokenizer(smollm2_path)
    tools = _tools(vital)
    settings = RolloutSettings(2, "v2", AgentConfig(max_calls=4), concurrency=1, max_failed_steps=2)
    ro = AgentRollouts({ITEMS[0].question: ITEMS[0]}, tools, _Judge(), settings, tmp_path / "rollouts.jsonl")
    ro.batch([ITEMS[0]] * 2, _group(vital, tools, [True, False]), step=0, tokenizer=tok)
    with pytest.raises(ModelError, match=r"2 batches in a row \(1 of the last batch's 2 rollouts had environment"):
        ro.batch([ITEMS[0]] * 2, _group(vital, tools, [False, True]), step=1, tokenizer=tok)


def test_rl_stops_a_batch_whose_judge_went_down(tmp_path: Path, vital, smollm2_path: Path):
    """A judge declared down is not a batch without rewards (which would train on nothing, or
    be skipped): the step stops before its update, nothing of it written, and a rerun resumes."""
    from websailor.breaker import ServiceBreaker
    from websailor.errors import ServiceDown
    from websailor.train.rl.rollouts import AgentRollouts, RolloutSettings
    from websailor.train.sft import load_tokenizer

    class DeadJudge:
        name = "llm:dead"

        def __init__(self) -> None:
            self.breaker = ServiceBreaker("judge", "http://127.0.0.1:9/v1", failures=1, min_down_s=0)

        def grade(self, cases):
            self.breaker.failure(ConnectionRefusedError("connection refused"))

    tok = load_tokenizer(smollm2_path)
    tools = _tools(vital)
    settings = RolloutSettings(2, "v2", AgentConfig(max_calls=4), concurrency=1)
    ro = AgentRollouts({ITEMS[0].question: ITEMS[0]}, tools, DeadJudge(), settings, tmp_path / "rollouts.jsonl")
    with pytest.raises(ServiceDown, match="the judge at http://127.0.0.1:9/v1 is down"):
        ro.batch([ITEMS[0]] * 2, _group(vital, tools, [False, False]), step=0, tokenizer=tok)
    assert not (tmp_path / "rollouts.jsonl").exists() or not (tmp_path / "rollouts.jsonl").read_text()


# -- real failures: the provider imitation and a tool server killed mid-run ----------------------
@pytest.fixture
def providers(monkeypatch, tmp_path):
    from tests.fakes import web_providers

    with web_providers(monkeypatch, tmp_path) as server:
        yield server


def test_eval_over_a_web_outage_then_after_it(tmp_path: Path, providers):
    """Every search provider answers 500: the web layer degrades the search, the rollout is
    ungraded; once the providers answer, the same command reruns and grades it."""
    from websailor.tools.web import WebSettings
    from websailor.tools.web.tools import build_web_tools

    settings = WebSettings(
        serper_api_key=providers.api_key,
        serper_base_url=providers.url,
        searxng_base_url=f"{providers.url}/searxng",
        cache=False,
        policies={"search": {"retries": 0}},
    )
    tools, executor = build_web_tools(settings, names=("search",))
    item = Question("t1", "Who founded Topic town?", Gold.parse("Result 1 for Who founded Topic town?"))

    def reply(messages):
        if len(messages) == 2:
            return call("search", query=[item.question])
        seen = messages[-1]["content"]
        return f"<answer>{'Result 1 for ' + item.question if 'Result 1 for' in seen else 'unknown'}</answer>"

    try:
        agent = Agent(ScriptedModel(reply), tools, AgentConfig(max_calls=3), env="web")
        providers.plan.always.update(serper="500", searxng="500")
        cfg = EvalConfig(rollouts=1, concurrency=1)
        s = evaluate([item], agent, load_judge("em"), tmp_path, cfg, progress=False)
        assert s["ungraded_for"] == {"environment": 1} and s["avg_at_k"] is None
        assert s["env_failures"]["kinds"] == {"server_error": 1} and s["env_failures"]["tools"] == {"search": 1}
        providers.plan.always.clear()
        s = evaluate([item], agent, load_judge("em"), tmp_path, cfg, progress=False)
        assert s["ungraded"] == 0 and s["avg_at_k"] == 1.0
    finally:
        executor.close()


SEARCH_SERVER = """
import sys
from websailor.corpus import Corpus
from websailor.server import serve_tools
from websailor.tools.local import build_local_tools

tools = build_local_tools(Corpus.open(sys.argv[1]))
serve_tools({"search": tools["search"]}, "local", port=int(sys.argv[2]))
"""


def _start_search_server(corpus_dir: Path, port: int):
    import subprocess
    import sys
    import time

    import httpx

    proc = subprocess.Popen([sys.executable, "-c", SEARCH_SERVER, str(corpus_dir), str(port)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 90
    while True:
        assert proc.poll() is None, f"the tool server exited: {proc.stderr.read().decode()[-2000:]}"
        assert time.monotonic() < deadline, "the tool server did not start within 90 s"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.1)


def test_rl_over_a_tool_server_killed_and_restarted(tmp_path: Path, vital_dir: Path, smollm2_path: Path):
    """Batches before, during and after a tool server outage: the outage's groups get no
    reward and nothing of them enters the loss; after the restart training signal returns."""
    from websailor.server.app import bind_socket
    from websailor.server.client import RetryPolicy, connect_tools
    from websailor.train.rl.rollouts import AgentRollouts, RolloutSettings
    from websailor.train.sft import load_tokenizer

    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()
    tok = load_tokenizer(smollm2_path)
    proc = _start_search_server(vital_dir, port)
    fast = RetryPolicy(max_attempts=2, backoff_s=0.05, max_backoff_s=0.1)
    try:
        tools, env = connect_tools(f"http://127.0.0.1:{port}", timeout_s=30, retry=fast, health_retry=fast)
        item = ITEMS[0]
        settings = RolloutSettings(2, "v2", AgentConfig(max_calls=4), concurrency=1)
        ro = AgentRollouts({item.question: item}, tools, _Judge(), settings, tmp_path / "rollouts.jsonl", env=env)

        def group() -> list[Trajectory]:
            right = Agent(_scripted(), tools, AgentConfig(max_calls=4), env=env)
            wrong = Agent(ScriptedModel([call("search", query=["France"]), "<answer>Lyon</answer>"]), tools, env=env)
            return [right.run(item.question, "paris", 0, "Paris"), wrong.run(item.question, "paris", 1, "Paris")]

        ro.batch([item] * 2, group(), step=0, tokenizer=tok)
        assert ro.last["groups/env_failed"] == 0.0 and ro.last["rollouts/in_loss_share"] == 1.0
        proc.kill()
        proc.wait(10)
        ro.batch([item] * 2, group(), step=1, tokenizer=tok)
        assert ro.last["groups/env_failed"] == 1.0 and ro.last["rollouts/in_loss_share"] == 0.0
        proc = _start_search_server(vital_dir, port)
        ro.batch([item] * 2, group(), step=2, tokenizer=tok)
        assert ro.last["groups/env_failed"] == 0.0 and ro.last["rollouts/in_loss_share"] == 1.0
        records = [json.loads(x) for x in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
        outage = [r for r in records if r["step"] == 2]
        assert all(r["env_failures"]["kinds"] == {"tool_server_unreachable": 1} for r in outage)
        assert [r["reward"] for r in outage] == [None, None] and not any(r["in_loss"] for r in outage)
        assert [r["reward"] for r in records if r["step"] != 2] == [1.0, 0.0, 1.0, 0.0]
        tools["search"].client.close()
    finally:
        proc.kill()
        proc.wait(10)


def test_an_output_under_a_file_is_refused_before_the_tools_are_tried(tmp_path: Path):
    import time

    from typer.testing import CliRunner

    from websailor.cli.main import app

    (tmp_path / "afile").write_text("x")
    qs = tmp_path / "q.jsonl"
    qs.write_text(json.dumps({"question": "Which river flows through Cairo?", "answer": "Nile"}) + "\n")
    dead = "http://127.0.0.1:9"  # nothing listens: the tool check would take seconds
    for args in (
        ["eval", "--bench", str(qs), "--out", str(tmp_path / "afile" / "sub"), "--tools-url", dead],
        ["run", "--questions", str(qs), "--out", str(tmp_path / "afile" / "t.jsonl"), "--tools-url", dead],
    ):
        t0 = time.perf_counter()
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2 and "afile is a file, not a folder" in result.output, result.output
        assert time.perf_counter() - t0 < 2


def test_rl_over_the_faulted_web_providers_keeps_outage_rollouts_out_of_the_loss(
    tmp_path: Path, providers, smollm2_path: Path
):
    from websailor.tools.web import WebSettings
    from websailor.tools.web.tools import build_web_tools
    from websailor.train.rl.rollouts import AgentRollouts, RolloutSettings
    from websailor.train.sft import load_tokenizer

    settings = WebSettings(
        serper_api_key=providers.api_key,
        serper_base_url=providers.url,
        cache=False,
        policies={"search": {"retries": 0}},
    )
    tools, executor = build_web_tools(settings, names=("search",))
    tok = load_tokenizer(smollm2_path)
    item = ITEMS[0]
    try:
        ro = AgentRollouts(
            {item.question: item},
            tools,
            _Judge(),
            RolloutSettings(2, "v2", AgentConfig(max_calls=3), concurrency=1),
            tmp_path / "rollouts.jsonl",
            env="web",
        )

        def rollout(answer: str, r: int) -> Trajectory:
            script = [call("search", query=["capital of France"]), f"<answer>{answer}</answer>"]
            return Agent(ScriptedModel(script), tools, env="web").run(item.question, "paris", r, "Paris")

        providers.plan.script("serper", "ok", "ok", "500", "ok")  # the third rollout's search fails
        trajs = [rollout("Paris", 0), rollout("Lyon", 1), rollout("Paris", 2), rollout("Lyon", 3)]
        ro.batch([item] * 4, trajs, step=0, tokenizer=tok)
    finally:
        executor.close()
    records = [json.loads(x) for x in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert [bool(r.get("env_failures")) for r in records] == [False, False, True, False]
    assert records[2]["env_failures"]["kinds"] == {"server_error": 1}
    assert [r["reward"] for r in records] == [1.0, 0.0, None, 0.0]
    assert [r["in_loss"] for r in records] == [True, True, False, False]
    assert ro.last["groups/env_failed"] == 1.0 and ro.last["groups/skipped"] == 1.0
