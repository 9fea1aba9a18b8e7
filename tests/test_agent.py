import json
import time
from pathlib import Path

import pytest
from fakes import FakeOpenAIServer, ScriptedModel, call
from fixtures import NQSample

from websailor.agent import Agent, AgentConfig
from websailor.agent.parse import parse_turn
from websailor.agent.prompt import FINAL_ANSWER_NUDGE
from websailor.agent.runner import done_rollouts, run_questions
from websailor.corpus import Corpus
from websailor.errors import InputFormatError, ModelError
from websailor.questions import load_questions
from websailor.tools.local import build_local_tools


@pytest.fixture(scope="module")
def tools(vital: Corpus):
    return build_local_tools(vital)


# -- parsing ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, name, args",
    [
        (
            '<think>a</think>\n<tool_call>\n{"name": "search", "arguments": {"query": ["Nile"]}}\n</tool_call>',
            "search",
            {"query": ["Nile"]},
        ),
        (
            '<tool_call>\n{"name": "search", "arguments": {"query": ["Nile"]}}\n',
            "search",
            {"query": ["Nile"]},
        ),  # stopped at <tool_response>
        (
            '<tool_call>```json\n{"name": "visit", "arguments": {"url": "Nile", "goal": "g",},}\n```</tool_call>',
            "visit",
            {"url": "Nile", "goal": "g"},
        ),
        ("<tool_call>{'name': 'search', 'arguments': {'query': ['q']}}</tool_call>", "search", {"query": ["q"]}),
        (
            '<tool_call>{"name": "search", "arguments": "{\\"query\\": [\\"q\\"]}"}</tool_call>',
            "search",
            {"query": ["q"]},
        ),
    ],
)
def test_parse_tolerates_common_mistakes(text, name, args):
    action = parse_turn(text)
    assert action.error is None and action.tool_call.name == name and action.tool_call.arguments == args


def test_parse_answers_code_and_errors():
    assert parse_turn("<think>x</think><answer> Paris </answer>").answer == "Paris"
    assert parse_turn("<answer>Paris").answer == "Paris"
    py = parse_turn('<tool_call>{"name": "PythonInterpreter", "arguments": {}}\n<code>\nprint(2)\n</code></tool_call>')
    assert py.tool_call.code == "print(2)"
    assert "neither a <tool_call> nor an <answer>" in parse_turn("I think it is Paris.").error
    assert "not valid" in parse_turn("<tool_call>garbage</tool_call>").error
    assert "empty" in parse_turn("<answer>  </answer>").error
    two = parse_turn(call("search", query=["a"]) + call("search", query=["b"]))
    assert two.tool_call.arguments == {"query": ["a"]} and "first of 2" in two.warnings[0]


_ZH_CALL = '{"name": "search", "arguments": {"query": ["长江 发源地", "长江 全长 公里"]}}'


@pytest.mark.parametrize(
    "text, thought",
    [
        (  # unclosed <think>, several lines, then a call with Chinese in its JSON
            "<think>\n用户问的是长江的发源地。\nI should check two sources: the river's page and a"
            " geography atlas.\n\n"
            f"<tool_call>\n{_ZH_CALL}\n</tool_call>",
            "用户问的是长江的发源地。\nI should check two sources: the river's page and a geography atlas.",
        ),
        (  # unclosed, no line break before the call, and no </tool_call> (stopped at <tool_response>)
            f"<think>I should search <tool_call>{_ZH_CALL}\n",
            "I should search",
        ),
        (  # the chat template opened <think> in the generation prompt: only </think> is generated
            "The question asks for the source of the Yangtze.\nA search first.\n</think>\n\n"
            f"<tool_call>\n{_ZH_CALL}\n</tool_call>",
            "The question asks for the source of the Yangtze.\nA search first.",
        ),
        (  # a closed thought that mentions the tag still ends at </think>
            f"<think>I will write a <tool_call> with two queries.</think>\n<tool_call>{_ZH_CALL}</tool_call>",
            "I will write a <tool_call> with two queries.",
        ),
    ],
)
def test_parse_reads_unclosed_and_stray_think_tags_before_a_call(text, thought):
    action = parse_turn(text)
    assert action.error is None and action.warnings == [] and action.thought == thought
    assert action.tool_call.name == "search"
    assert action.tool_call.arguments == {"query": ["长江 发源地", "长江 全长 公里"]}


def test_parse_reads_unclosed_and_stray_think_tags_before_an_answer():
    unclosed = parse_turn(
        "<think>\nBoth pages agree: the Tuotuo River on the Tibetan Plateau.\n"
        "So the answer is the Tanggula Mountains.\n<answer>唐古拉山脉 (Tanggula Mountains)</answer>"
    )
    assert unclosed.answer == "唐古拉山脉 (Tanggula Mountains)" and unclosed.error is None
    assert unclosed.thought.endswith("So the answer is the Tanggula Mountains.")
    stray = parse_turn("Both sources say 1901.\n</think>\n\n<answer>1901</answer>")
    assert (stray.thought, stray.answer) == ("Both sources say 1901.", "1901")
    no_tools = parse_turn("<think>I know this one: Paris.\n<answer>Paris</answer>", tools=False)
    assert no_tools.answer == "Paris" and no_tools.error is None


def test_parse_unclosed_think_with_nothing_after_it_is_a_format_error():
    for text in ["<think>\nLet me think about which source to check first.\nMaybe the", "Still thinking</think>"]:
        action = parse_turn(text)
        assert action.tool_call is None and action.answer is None
        assert "neither a <tool_call> nor an <answer>" in action.error
    assert "no <answer>" in parse_turn("<think>I know this one: it is", tools=False).error


def test_parse_call_then_answer_runs_the_call_and_warns():
    ignored = "The <answer> after the tool call was ignored"
    action = parse_turn(
        f"<think>\n先搜索一下。\n</think>\n<tool_call>\n{_ZH_CALL}\n</tool_call>\n<answer>唐古拉山脉</answer>"
    )
    assert action.answer is None and action.error is None and action.tool_call.name == "search"
    assert len(action.warnings) == 1 and action.warnings[0].startswith(ignored)
    # with an unclosed thought, and after two calls: both warnings
    both = parse_turn(
        f"<think>Two searches, then I answer.\n<tool_call>{_ZH_CALL}</tool_call>\n"
        f"<tool_call>{_ZH_CALL}</tool_call>\n<answer>The Tanggula Mountains</answer>"
    )
    assert "first of 2" in both.warnings[0] and both.warnings[1].startswith(ignored)
    # an answer before the call still wins, and a closed call with no answer after it gives no warning
    assert parse_turn(f"<answer>Paris</answer>\n<tool_call>{_ZH_CALL}</tool_call>").answer == "Paris"
    code = '<tool_call>{"name": "PythonInterpreter", "arguments": {}}<code>print("<answer>")</code></tool_call>'
    assert parse_turn(code).warnings == []


def test_the_warning_about_an_ignored_answer_heads_the_tool_response(tools):
    model = ScriptedModel(
        [
            call("search", query=["Mona Lisa painter"]) + "\n<answer>Leonardo da Vinci</answer>",
            "<answer>Leonardo</answer>",
        ]
    )
    t = Agent(model, tools).run("Who painted the Mona Lisa?")
    assert (t.termination, t.prediction, t.num_tool_calls) == ("answer", "Leonardo", 1)
    assert t.messages[3]["content"].startswith("<tool_response>\nThe <answer> after the tool call was ignored")
    assert "A search for 'Mona Lisa painter'" in t.messages[3]["content"]


# -- the loop --------------------------------------------------------------------------------
def test_search_visit_answer_records_everything(tools):
    model = ScriptedModel(
        [
            call("search", query=["Mona Lisa painter"]),
            call("visit", url="https://en.wikipedia.org/wiki/Mona_Lisa", goal="who painted it"),
            "<think>Leonardo.</think>\n<answer>Leonardo da Vinci</answer>",
        ]
    )
    t = Agent(model, tools).run("Who painted the Mona Lisa?", id="q1", rollout=2, answer="Leonardo da Vinci")
    assert (t.termination, t.prediction, t.num_model_calls, t.num_tool_calls) == ("answer", "Leonardo da Vinci", 3, 2)
    roles = [m["role"] for m in t.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert "<tools>" in t.messages[0]["content"] and t.messages[0]["content"].rstrip().split()[-1][:4].isdigit()
    assert t.messages[3]["content"].startswith("<tool_response>\nA search for 'Mona Lisa painter'")
    assert t.messages[5]["content"].startswith(
        "<tool_response>\nPage https://en.wikipedia.org/wiki/Mona_Lisa, read for the goal"
    )
    assert [c.name for c in t.tool_calls] == ["search", "visit"] and all(c.error is None for c in t.tool_calls)
    assert t.timings["total_s"] >= t.timings["model_s"] + t.timings["tools_s"] > 0
    rec = json.loads(json.dumps(t.to_dict()))
    for key in [
        "id",
        "rollout",
        "question",
        "answer",
        "prediction",
        "termination",
        "messages",
        "num_model_calls",
        "num_tool_calls",
        "tool_calls",
        "tokens",
        "timings",
        "model",
        "env",
        "seed",
        "version",
    ]:
        assert key in rec
    assert rec["id"] == "q1" and rec["rollout"] == 2 and rec["env"] == "local"


def test_a_call_that_repeats_an_earlier_one_is_counted(tools):
    """A visit of a page already read counts as repeated whatever its goal; another page, another
    query or the same query as another tool's does not (from the run, and from its record)."""
    from websailor.agent.trajectory import repeated_tool_calls

    mona = "https://en.wikipedia.org/wiki/Mona_Lisa"
    model = ScriptedModel(
        [
            call("search", query=["Mona Lisa painter"]),
            call("visit", url=mona, goal="who painted it"),
            call("visit", url=mona, goal="when it was painted"),  # the same page again
            call("search", query=["Mona Lisa painter"]),  # the same search again
            call("search", query=["Mona Lisa museum"]),
            call("visit", url="https://en.wikipedia.org/wiki/Louvre", goal="who painted it"),
            "<answer>Leonardo da Vinci</answer>",
        ]
    )
    t = Agent(model, tools).run("Who painted the Mona Lisa?")
    assert t.num_tool_calls == 6 and repeated_tool_calls(t.tool_calls) == 2
    assert repeated_tool_calls(json.loads(json.dumps(t.to_dict()))["tool_calls"]) == 2
    assert repeated_tool_calls([]) == 0


def test_bad_calls_become_observations_and_count(tools):
    model = ScriptedModel([call("browse", url="x"), call("search"), "<answer>x</answer>"])
    t = Agent(model, tools).run("q")
    assert t.termination == "answer" and t.num_model_calls == 3
    assert "there is no tool named 'browse'" in t.messages[3]["content"]
    assert "'query' is a required property" in t.messages[5]["content"]
    assert [c.error is not None for c in t.tool_calls] == [True, True]


@pytest.mark.parametrize(
    "script, cfg, termination",
    [
        ([call("search", query=["a"])], AgentConfig(max_calls=3), "max_calls"),
        (["I am not sure."], AgentConfig(max_format_errors=3), "format_error"),
        (["x " * 50_000], AgentConfig(max_format_errors=2), "format_error"),  # 50,000 tokens of garbage
        ([ModelError("http://x: APIConnectionError after 5 attempts")], AgentConfig(), "model_error"),
        ([RuntimeError("backend bug")], AgentConfig(), "model_error"),
    ],
)
def test_budgets_end_with_a_recorded_termination(tools, script, cfg, termination):
    t = Agent(ScriptedModel(script), tools, cfg).run("q")
    assert t.termination == termination
    assert t.prediction is None


def test_context_budget_nudges_then_stops(tools):
    # a small context (words count as tokens here): search results soon cross the nudge threshold
    model = ScriptedModel([call("search", query=["Nile"])], max_context=3000)
    t = Agent(model, tools, AgentConfig(max_context_tokens=3000, answer_nudge_tokens=1000)).run("q")
    nudged = [i for i, m in enumerate(t.messages) if FINAL_ANSWER_NUDGE in m["content"]]
    assert len(nudged) == 1 and t.messages[nudged[0]]["role"] == "user"
    # the model kept calling tools after the nudge: the trajectory ends there
    assert t.termination == "context" and nudged[0] == len(t.messages) - 2


def test_context_nudge_then_answer(tools):
    def script(messages):
        if FINAL_ANSWER_NUDGE in messages[-1]["content"]:
            return "<answer>Nile</answer>"
        return call("search", query=["Nile"])

    t = Agent(
        ScriptedModel(script, max_context=3000), tools, AgentConfig(max_context_tokens=3000, answer_nudge_tokens=1000)
    ).run("q")
    assert t.termination == "answer" and t.prediction == "Nile"


def test_timeout(tools):
    slow = ScriptedModel(lambda msgs: (time.sleep(0.3), call("search", query=["a"]))[1])
    t = Agent(slow, tools, AgentConfig(timeout_s=0.5)).run("q")
    assert t.termination == "timeout"


# -- batch runs ------------------------------------------------------------------------------
def _questions(tmp_path: Path, n: int) -> Path:
    p = tmp_path / "q.jsonl"
    p.write_text(
        "".join(json.dumps({"id": f"q{i}", "question": f"question {i}?", "answer": "x"}) + "\n" for i in range(n))
    )
    return p


def test_batch_appends_and_resumes_without_duplicates(tools, tmp_path: Path):
    out = tmp_path / "traj.jsonl"
    agent = Agent(ScriptedModel([call("search", query=["Nile"]), "<answer>x</answer>"]), tools)
    qs = load_questions(_questions(tmp_path, 5))
    s = run_questions(agent, qs[:3], out, rollouts=2, concurrency=3, progress=False)
    assert s.finished == 6
    # a kill in the middle of a write leaves a partial line
    with out.open("a") as fh:
        fh.write('{"id": "q4", "rollout": 0, "quest')
    s = run_questions(agent, qs, out, rollouts=2, concurrency=3, progress=False)
    assert (s.skipped, s.finished) == (6, 4)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["id"], r["rollout"]) for r in lines) == [(f"q{i}", r) for i in range(5) for r in range(2)]
    assert done_rollouts(out) == {(f"q{i}", r) for i in range(5) for r in range(2)}


def test_one_bad_question_never_stops_the_batch(tools, tmp_path: Path):
    def script(messages):
        if "question 1?" in messages[1]["content"]:
            raise ModelError("server exploded")
        return "<answer>x</answer>"

    s = run_questions(
        Agent(ScriptedModel(script), tools),
        load_questions(_questions(tmp_path, 4)),
        tmp_path / "o.jsonl",
        concurrency=2,
        progress=False,
    )
    assert s.finished == 4 and s.terminations == {"answer": 3, "model_error": 1}


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"question": "ok"}\n{"question": "a", \n', "line 2: not valid JSON"),
        ('{"question": ""}\n', "line 1: 'question' must be a non-empty string"),
        ('{"id": 1, "question": "a"}\n{"id": 1, "question": "b"}\n', "line 2: duplicate id '1'"),
        ("\n\n", "no questions"),
    ],
)
def test_questions_file_errors_name_the_line(tmp_path: Path, content: str, message: str):
    p = tmp_path / "q.jsonl"
    p.write_text(content)
    with pytest.raises(InputFormatError, match=message):
        load_questions(p, require_answer=False)


def test_nq_sample_loads_golden_answers(nq_sample: NQSample):
    path = nq_sample.path
    qs = load_questions(path, require_answer=False)
    assert (
        len(qs) == len(path.read_text().split("\n")) - path.read_text().split("\n").count("")
        and len(qs) == nq_sample.n_items
        and qs[0].id == nq_sample.first_id
        and isinstance(qs[0].answer, list)
    )


# -- OpenAI-compatible backend ---------------------------------------------------------------
def test_openai_backend_retries_5xx_then_answers(tools):
    from websailor.models import load_model

    with FakeOpenAIServer(fail_first=2) as srv:
        model = load_model(f"openai:fake@{srv.url}", backoff_s=0.01)
        t = Agent(model, tools).run("Capital of France?")
        assert t.termination == "answer" and t.prediction == "Paris"
        assert srv.state["requests"] == 3 and t.tokens == {"prompt": 10, "completion": 3}


def test_unreachable_server_is_a_model_error(tools):
    import socket

    from websailor.models import load_model

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = load_model(f"openai:fake@http://127.0.0.1:{port}/v1", backoff_s=0.01, max_attempts=3)
    t = Agent(model, tools).run("q")
    assert t.termination == "model_error" and "APIConnectionError after 3 attempts" in t.error


@pytest.mark.parametrize("spec", ["gpt4", "openai:model", "openai:m@localhost:8000", "hf:/no/such/dir", ""])
def test_unknown_model_specs(spec):
    from websailor.errors import ConfigError
    from websailor.models import load_model

    with pytest.raises(ConfigError, match="model spec"):
        load_model(spec)


def test_huge_and_empty_questions(tools):
    from websailor.errors import InvalidArgumentError

    t = Agent(ScriptedModel(["<answer>x</answer>"], max_context=8192), tools).run(
        "word " * 20_000
    )  # 100,000 characters
    assert t.termination == "context" and t.prediction is None
    with pytest.raises(InvalidArgumentError, match="empty"):
        Agent(ScriptedModel(["<answer>x</answer>"]), tools).run("   ")


def test_hostile_model_output_and_resume(tools, tmp_path: Path):
    # lone surrogates and line separators in model output must not break or split the file
    agent = Agent(ScriptedModel(["<answer>Par\ud800is\u2028x\x85y</answer>"]), tools)
    qs = load_questions(_questions(tmp_path, 2))
    out = tmp_path / "t.jsonl"
    assert run_questions(agent, qs, out, progress=False).finished == 2
    assert run_questions(agent, qs, out, rollouts=2, progress=False).finished == 2
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recs) == 4 and recs[0]["prediction"] == "Par\ufffdis\u2028x\x85y"


def test_timeout_covers_a_call_in_flight(tools):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from websailor.models import load_model

    release = threading.Event()

    class Hang(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            release.wait(10)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Hang)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        model = load_model(f"openai:m@http://127.0.0.1:{srv.server_address[1]}/v1", backoff_s=0.01)
        t0 = time.perf_counter()
        t = Agent(model, tools, AgentConfig(timeout_s=1.0)).run("q")
        # the budget cut the call in time; the model never answered, so it is a model error (not
        # graded, rerun), not the policy's timeout
        assert t.termination == "model_error" and time.perf_counter() - t0 < 4
    finally:
        release.set()
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("raw", [b"{not json", b'{"object": "error"}', b'{"choices": []}', b"[1, 2]"])
def test_a_broken_server_reply_is_a_model_error(tools, raw):
    from websailor.models import load_model

    with FakeOpenAIServer(raw=raw) as srv:
        model = load_model(f"openai:fake@{srv.url}", backoff_s=0.01, max_attempts=2)
        t = Agent(model, tools).run("q")
    assert t.termination == "model_error" and "not a chat completion" in t.error


def test_no_tools_baseline_asks_only_for_an_answer():
    model = ScriptedModel([call("search", query=["Nile"]), "<answer>Nile</answer>"])
    t = Agent(model, [], env="none").run("Which river flows through Cairo?")
    assert t.termination == "answer" and t.prediction == "Nile" and t.num_tool_calls == 0
    assert "There are no tools here" in t.messages[3]["content"] and "<tools>" not in t.messages[0]["content"]


def test_a_backend_that_returns_no_generation_ends_the_rollout_as_a_model_error():
    """A model whose chat returns something else than a Generation (a backend bug): the rollout
    ends as a model error naming what came back, never silently without a termination."""

    class Broken(ScriptedModel):
        def generate(self, conversations, params):
            return [None for _ in conversations]

    traj = Agent(Broken(["unused"]), []).run("What?")
    assert traj.termination == "model_error" and traj.num_model_calls == 0
    assert traj.error == "TypeError: the model's chat returned a NoneType, not a Generation"
