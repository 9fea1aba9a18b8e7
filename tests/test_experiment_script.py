"""experiments/mini_pipeline.py refuses what it cannot resume before any work, and its
in-process pieces (the transfer baseline, publishing) do what the docs say."""

import contextlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "mini_pipeline.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pipeline():
    return _load(SCRIPT)


@pytest.fixture(scope="module")
def settings(pipeline):
    """The script's options, layout and identity settings (experiments/pipeline_settings.py)."""
    return sys.modules["pipeline_settings"]


@pytest.fixture(scope="module")
def common(pipeline):
    """The pieces the experiment scripts share (experiments/pipeline_common.py)."""
    return _load(SCRIPT.with_name("pipeline_common.py"))


def test_missing_inputs_name_the_stage_that_makes_them(tmp_path):
    res = _run("--out", str(tmp_path / "run"), "--only", "eval_sft,rl")
    assert res.returncode != 0
    assert (
        f"stage eval_sft needs {tmp_path / 'run' / 'sft_model' / 'sft_summary.json'}, which stage sft makes"
        in res.stderr
    )
    assert "stage rl needs" in res.stderr and "which stage prefilter makes (--only prefilter)" in res.stderr
    assert not (tmp_path / "run").exists()  # refused before anything was written
    res = _run("--out", str(tmp_path / "run"), "--only", "sft,fine_tune")
    assert res.returncode != 0 and "--only: no stage fine_tune" in res.stderr
    res = _run("--out", str(tmp_path / "run"), "--only", " , ")  # never "every stage"
    assert res.returncode != 0 and "names no stage" in res.stderr
    # every stage that reads the items says so, even when its model is there
    (tmp_path / "run" / "rl_model").mkdir(parents=True)
    (tmp_path / "run" / "rl_model" / "rl_summary.json").write_text("{}")
    res = _run("--out", str(tmp_path / "run"), "--only", "eval_rl")
    assert (
        res.returncode != 0
        and "stage eval_rl needs" in res.stderr
        and "qa.jsonl, which stage synth makes" in res.stderr
    )


def test_sizes_and_shares_out_of_range_are_refused_before_any_work(tmp_path):
    """Every setting a later stage reads is checked before the first stage runs: a bad one
    must not cost the hours of the stages before the one that reads it."""
    (tmp_path / "afile").write_text("x")
    bad_rl = tmp_path / "rl.yaml"
    bad_rl.write_text("unanswered_negatives: maybe\n")
    for args, says in (
        (["--rl-steps", "-3"], "--rl-steps -3: give at least 1"),
        (["--group-size", "1"], "--group-size 1: give at least 2"),
        (["--sanity-group-size", "1"], "--sanity-group-size 1: give at least 2"),
        (["--max-tokens", "8"], "--max-tokens 8: give at least 16"),
        (["--test-fraction", "1"], "--test-fraction must be in (0, 1)"),
        (["--test-fraction", "0"], "--test-fraction must be in (0, 1)"),
        (["--rl-lr", "-1"], "--rl-lr must be a positive number, got -1.0"),
        (["--sanity-lr", "nan"], "--sanity-lr must be a positive number, got nan"),
        (["--levels", "9"], "--levels must be 1, 2, 3 or 4"),
        (["--levels", "abc"], "--levels takes a level 1 to 4"),
        (["--observations", "verbose"], "invalid choice: 'verbose'"),
        (["--rl-config", str(tmp_path / "none.yaml")], f"--rl-config {tmp_path / 'none.yaml'}: no such file"),
        (
            ["--rl-config", str(bad_rl)],
            "is refused: RL settings: unanswered_negatives: Input should be 'exclude' or 'keep'",
        ),
        (["--sft-config", str(tmp_path)], f"--sft-config {tmp_path}: no such file"),
        (["--publish", str(tmp_path / "afile")], "--publish " + str(tmp_path / "afile") + " is a file; give a folder"),
        (["--publish", str(tmp_path / "run")], "is the run folder itself"),
        (["--distractor-share", "nan"], "--distractor-share must be in [0, 1], got nan"),
        (["--described-share", "1.5"], "--described-share must be in [0, 1], got 1.5"),
        (["--lookup-share", "-0.1"], "--lookup-share must be in [0, 1], got -0.1"),
        (["--sft-items", "-1"], "--sft-items -1: give at least 0"),
        (["--publish", ""], "argument --publish: give a folder, not an empty path"),
        (["--out", " "], "argument --out: give a folder, not an empty path"),
    ):
        res = _run("--out", str(tmp_path / "run"), *args)
        assert res.returncode != 0 and says in res.stderr and "Traceback" not in res.stderr, (args, res.stderr)
    assert not (tmp_path / "run").exists()
    res = _run("--out", str(tmp_path / "afile" / "run"))
    assert res.returncode != 0 and f"lies under {tmp_path / 'afile'}, a file; give a folder" in res.stderr
    # a folder no file can be written to (/proc refuses even root) is refused now, not after the stages
    if Path("/proc/self").is_dir():
        res = _run("--out", str(tmp_path / "run"), "--publish", "/proc/websailor_publish")
        assert (
            res.returncode != 0
            and "--publish /proc/websailor_publish (its nearest existing folder /proc)" in res.stderr
        )
        assert "cannot be written" in res.stderr and "Traceback" not in res.stderr
        res = _run("--out", "/proc/websailor_run")
        assert res.returncode != 0 and "cannot be written" in res.stderr and "Traceback" not in res.stderr
        assert not (tmp_path / "run").exists()


def test_a_running_stage_records_its_time_as_it_goes(pipeline, monkeypatch):
    """A stage's wall time is saved while it runs, so a run killed outright (a machine handed
    back) keeps what it spent; a failed stage counts its run, not as finished."""
    monkeypatch.setattr(pipeline, "RECORD_EVERY_S", 0.3)
    monkeypatch.setattr(pipeline, "POLL_S", 0.05)
    stages, saved = {"sft": {"wall_s": 10.0, "peak_rss_mb": 1.0, "runs": 1}}, []
    sleep = ["-c", "import time; time.sleep(1.5)"]
    pipeline.run_stage("sft", sleep, stages, program=sys.executable, save=lambda: saved.append(stages["sft"]["wall_s"]))
    rec = stages["sft"]
    assert len(saved) >= 2 and saved == sorted(saved) and 10.3 <= saved[0] < saved[-1] <= rec["wall_s"], saved
    assert rec["runs"] == 2 and rec["finished"] and rec["wall_s"] >= 11.5 and rec["peak_rss_mb"] > 1.0
    with pytest.raises(SystemExit, match=r"\[traj\] failed with exit code 3"):
        pipeline.run_stage("traj", ["-c", "raise SystemExit(3)"], stages, program=sys.executable)
    assert stages["traj"]["runs"] == 1 and "finished" not in stages["traj"]


def test_a_split_left_empty_by_synthesis_stops_the_run_at_synth(pipeline, tmp_path):
    """Synthesis draws each item's split from its id: one item leaves a split empty, which
    would otherwise stop the run only at the stage that reads it."""
    res = _run("--out", str(tmp_path / "run"), "--items", "1", "--until", "synth")
    qa = tmp_path / "run" / "qa.jsonl"
    split = json.loads(qa.read_text())["split"]
    empty = "train" if split == "test" else "test"
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert f"has no item in split {empty!r}" in res.stderr and "a larger --items and another --out" in res.stderr
    qa.write_text(qa.read_text() + json.dumps({"id": "x", "split": empty}) + "\n")
    pipeline.check_splits(qa, 0.15)  # both splits hold an item: no error
    qa.write_text(qa.read_text() + "{broken\n")
    with pytest.raises(SystemExit, match="line 3 is not a QA item"):
        pipeline.check_splits(qa, 0.15)


def test_an_earlier_layout_and_other_settings_are_refused(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    (old / "settings.json").write_text(json.dumps({"items": 600, "seed": 42}))
    res = _run("--out", str(old), "--until", "synth")
    assert res.returncode != 0 and "an earlier version of this script (layout 1, now 5" in res.stderr
    assert "another --out" in res.stderr and not (old / "qa.jsonl").exists()
    (old / "settings.json").write_text(json.dumps({"layout": 2}))
    res = _run("--out", str(old), "--until", "synth")
    assert "(layout 2, now 5: since then SFT and RL run folders that resume at step granularity" in res.stderr
    (old / "settings.json").write_text(json.dumps({"layout": 3}))
    res = _run("--out", str(old), "--until", "synth")
    assert "(layout 3, now 5: since then questions that also describe their answer" in res.stderr
    (old / "settings.json").write_text(json.dumps({"layout": 4}))
    res = _run("--out", str(old), "--until", "synth")
    assert "(layout 4, now 5: since then SFT on trajectories drawn from a pool with a share of lookups" in res.stderr
    new = tmp_path / "new"
    new.mkdir()
    (new / "settings.json").write_text(json.dumps({"layout": 5, "items": 600, "seed": 42}))
    # the first stage has written nothing (it failed on a bad setting): the records are read first
    (new / "results.json").write_text("{garbage")
    res = _run("--out", str(new), "--items", "300", "--until", "synth")
    assert res.returncode != 0 and "results.json cannot be read (JSONDecodeError" in res.stderr
    assert "Traceback" not in res.stderr
    (new / "results.json").write_text("[1]")
    res = _run("--out", str(new), "--items", "300", "--until", "synth")
    assert res.returncode != 0 and "is not the run's records" in res.stderr and "Traceback" not in res.stderr
    (new / "results.json").unlink()
    (new / "qa.jsonl").write_text("")  # once it has, the settings are the run's
    res = _run("--out", str(new), "--items", "300", "--until", "synth")
    assert res.returncode != 0 and "--items 600 (now --items 300)" in res.stderr
    (new / "settings.json").write_text(json.dumps({"layout": 5, "question_query": False}))
    res = _run("--out", str(new), "--until", "synth")
    assert "--no-question-query (now --question-query)" in res.stderr
    (new / "settings.json").write_text(json.dumps({"layout": 5, "described_share": 0.0}))
    res = _run("--out", str(new), "--until", "synth")
    assert "--described-share 0.0 (now --described-share 0.5)" in res.stderr
    (new / "settings.json").write_text(json.dumps({"layout": 5, "sft_items": 100, "lookup_share": 0.5}))
    res = _run("--out", str(new), "--until", "synth")
    assert "--sft-items 100 (now --sft-items 0)" in res.stderr
    for text, message in (
        ('{"layout": 5,', "cannot be read (JSONDecodeError"),
        ("[1, 2]", "is a JSON list, not the settings object"),
        ("null", "is a JSON null, not the settings object"),
        ('{"layout": 6}', "an unknown layout (6; this script writes layout 5)"),
        ('{"layout": "5"}', "an unknown layout ('5'"),
    ):
        (new / "settings.json").write_text(text)
        res = _run("--out", str(new), "--until", "synth")
        assert res.returncode != 0 and message in res.stderr and "Traceback" not in res.stderr, res.stderr
    (tmp_path / "afile").write_text("x")
    res = _run("--out", str(tmp_path / "afile"), "--only", "traj")
    assert res.returncode != 0 and "afile is a file; give a folder" in res.stderr


def test_transfer_baseline_searches_the_question_text(common, vital_dir, tmp_path):
    bench = tmp_path / "q.jsonl"
    rows = [
        {"id": "a", "question": "Who painted the Mona Lisa?", "answer": "Mona Lisa"},  # the top title is the painting
        {"id": "b", "question": "Who painted the Mona Lisa?", "answer": "Leonardo da Vinci"},
    ]
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = common.search_baseline(bench, corpus=str(vital_dir))
    assert base["questions"] == 2 and base["correct"] == 1 and base["accuracy"] == 0.5
    assert [a["top_title"] for a in base["answers"]] == ["Mona Lisa", "Mona Lisa"]
    assert [a["correct"] for a in base["answers"]] == [True, False]


def test_publish_copies_small_outputs_and_never_a_model(common, tmp_path):
    run, dest = tmp_path / "run", tmp_path / "pub"
    files = {
        "settings.json": "{}",
        "qa.jsonl": "{}\n",
        "rl_sanity_lr3e-5/rl_log.jsonl": "{}\n",
        "rl_sanity_lr3e-5/checkpoints/checkpoint-2/rl_log.jsonl": "{}\n",
        "eval_sft/summary.json": "{}",
        "eval_sft/scores.jsonl": "{}\n",
        "rl_model/rl_log.jsonl": "{}\n",
        "rl_model/rollouts.jsonl": "{}\n",
        "rl_model/model.safetensors": "weights",
        "rl_model/checkpoints/checkpoint-2/rl_log.jsonl": "{}\n",
        "sft_model/sft_summary.json": "{}",
        "sft_model/model.safetensors": "weights",
    }
    for rel, text in files.items():
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        (run / rel).write_text(text)
    config = common.ROOT / "configs" / "rl" / "cpu_ladder.yaml"
    # the run folder lives outside the checkout: its own path is published as OUT
    (run / "settings.json").write_text(json.dumps({"rl_config": str(config), "out": str(run.resolve())}))
    (run / "eval_sft" / "summary.json").write_text(json.dumps({"model": f"hf:{run.resolve()}/sft_model"}))
    # a stage ran from another checkout (a tree laid anew elsewhere): its paths are stripped too
    elsewhere = tmp_path / "other checkout"
    (run / "eval_sft" / "summary.json").write_text(
        json.dumps({"model": f"hf:{run.resolve()}/sft_model", "bench": f"{elsewhere}/benchmarks/data/q.jsonl"})
    )
    common.note_checkout(run)
    (run / common.CHECKOUTS).write_text((run / common.CHECKOUTS).read_text() + f"{elsewhere}\n")
    common.note_checkout(run)  # once a checkout
    assert (run / common.CHECKOUTS).read_text().splitlines() == [str(common.ROOT), str(elsewhere)]
    files["settings.json"] = json.dumps({"rl_config": "configs/rl/cpu_ladder.yaml", "out": "OUT"})
    files["eval_sft/summary.json"] = json.dumps({"model": "hf:OUT/sft_model", "bench": "benchmarks/data/q.jsonl"})
    size = common.publish(run, dest)
    assert json.loads((dest / "settings.json").read_text()) == {"rl_config": "configs/rl/cpu_ladder.yaml", "out": "OUT"}
    assert json.loads((dest / "eval_sft" / "summary.json").read_text()) == {
        "model": "hf:OUT/sft_model",
        "bench": "benchmarks/data/q.jsonl",
    }
    assert str(tmp_path).encode() not in b"".join(p.read_bytes() for p in dest.rglob("*") if p.is_file())
    copied = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert copied == sorted(r for r in files if "safetensors" not in r and "checkpoint" not in r)
    assert size == sum(len(files[r]) for r in copied)


def test_wrong_answers_count_the_hops_entity(pipeline, vital, vital_kg, tmp_path):
    """The failure the reduced run showed (the hop's entity answered instead of the target) is
    counted from real eval files: a scripted agent reads the hop's page and answers the hop for
    one item, answers the target for another, and reads the target's page but answers a third
    name for a third."""
    from tests.fakes import ScriptedModel
    from websailor.agent.loop import Agent, AgentConfig
    from websailor.eval.harness import EvalConfig, evaluate
    from websailor.judge import load_judge
    from websailor.questions import load_questions
    from websailor.synth import SynthConfig, synthesize
    from websailor.tools.local import build_local_tools

    qa = tmp_path / "qa.jsonl"
    synthesize(vital_kg, qa, SynthConfig(n=3, seed=5, test_fraction=0.0, levels=(1,)), progress=False)
    items = [json.loads(x) for x in qa.read_text().splitlines()]
    hop = next(c["params"]["other"] for c in items[0]["constraints"] if c["kind"] == "linked")
    hop_url = next(n["url"] for n in items[0]["subgraph"]["nodes"] if n["title"] == hop)
    plan = {
        items[0]["question"]: (hop_url, hop),
        items[1]["question"]: (None, items[1]["answer"]),
        items[2]["question"]: (items[2]["target_url"], "Nobody"),
    }

    def reply(messages: list[dict]) -> str:
        url, answer = plan[messages[1]["content"]]
        if url and len(messages) == 2:
            call = {"name": "visit", "arguments": {"url": url, "goal": "the answer"}}
            return f"<tool_call>{json.dumps(call)}</tool_call>"
        return f"<answer>{answer}</answer>"

    agent = Agent(ScriptedModel(reply), build_local_tools(vital), AgentConfig(max_calls=2))
    out = tmp_path / "eval"
    evaluate(load_questions(str(qa), split="all"), agent, load_judge("em"), out, EvalConfig(rollouts=2), progress=False)
    w = _load(SCRIPT.with_name("pipeline_report.py")).wrong_answers(qa, out)
    assert (w["answered_wrong"], w["hop_entity"], w["hop_entity_share"]) == (4, 2, 0.5)
    assert (w["read_page"], w["target_read"], w["target_read_share"]) == (2, 2, 0.5)
    assert w["examples"][0] == {
        "id": items[0]["id"],
        "question": items[0]["question"],
        "answer": items[0]["answer"],
        "said": hop,
    }


def test_transfer_opening_counts_where_the_first_search_comes_from(tmp_path):
    path = SCRIPT.with_name("transfer_opening.py")
    spec = importlib.util.spec_from_file_location("transfer_opening", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    question = "Which physicist shared a Nobel Prize with his wife?"

    listed = (
        "<tool_response>\n1. [Pierre Curie](https://en.wikipedia.org/wiki/Pierre_Curie)\nA French...</tool_response>"
    )

    def rollout(*calls, shown="<tool_response>No results.</tool_response>"):
        messages = [{"role": "system", "content": "Results come in <tool_response> tags."}]
        messages += [{"role": "user", "content": question}]
        for n, _ in calls:
            messages += [{"role": "assistant", "content": f"<tool_call>{n}</tool_call>"}]
            messages += [
                {"role": "user", "content": shown if n == "search" else "<tool_response>a page</tool_response>"}
            ]
        return {
            "question": question,
            "answer": {"answer": "Pierre Curie"},
            "messages": messages,
            "tool_calls": [{"name": n, "arguments": args} for n, args in calls],
        }

    rollouts = [
        # the question's own words: every word of the query is in the question; the results list
        # the answer's page, and the rollout reads it
        rollout(
            ("search", {"query": ["physicist shared Nobel Prize with his wife"]}),
            ("visit", {"url": "https://en.wikipedia.org/wiki/Pierre_Curie"}),
            shown=listed,
        ),
        # an invented entity (the template's first move): no word from the question
        rollout(("search", {"query": ["Einstein"]}), ("visit", {"url": "https://en.wikipedia.org/wiki/Einstein"})),
        # the first search is what counts, after a visit; a string query is read too; 2 of 3 words
        rollout(("visit", {"url": "x"}), ("search", {"query": "Nobel Prize Curie"}), ("search", {"query": ["wife"]})),
        rollout(),  # no search at all
    ]
    # a format reminder before the first search is no tool response: the search's results still count
    rollouts[0]["messages"][2:2] = [
        {"role": "assistant", "content": "no call"},
        {"role": "user", "content": "Write a tool call or an answer."},
    ]
    rollouts.append(
        {"question": question, "answer": "Pierre Curie", "tool_calls": [{"name": "search", "arguments": {"query": 5}}]}
    )
    rollouts[1]["messages"][5]["content"] = listed  # listed by a visit's page, not by the first search
    rollouts[2]["messages"][5]["content"] = listed  # the first search is the second call: its results count
    got = module.first_search_sources(rollouts)
    assert got["rollouts"] == 5 and got["with_search"] == 3  # a query that is no text is no search words
    assert got["from_question"] == 2
    assert got["answer_page_shown"] == 2 and got["answer_page_read"] == 1
    assert got["question_word_share"] == pytest.approx((1 + 0 + 2 / 3) / 3, abs=1e-4)
    assert module.words("The Nobel prize, of 1903") == {"nobel", "prize", "1903"}


def test_a_setting_of_a_stage_not_yet_run_may_change(settings, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "settings.json").write_text(json.dumps({"layout": settings.LAYOUT, "items": 400, "rl_lr": 1e-5}))
    now = {"items": 400, "rl_lr": 3e-5} | {key: None for key in settings.IDENTITY if key not in ("items", "rl_lr")}
    settings.check_settings(run, now | {"items": 600})  # no stage has written: every setting may change
    (run / settings.FIRST_OUTPUT).write_text("")
    settings.check_settings(run, now)  # V2 and DUPO have not started: the new learning rate is taken
    (run / "dupo_model").mkdir()  # once one of them has written something, it is the run's
    with pytest.raises(SystemExit, match=r"--rl-lr 1e-05 \(now --rl-lr 3e-05\)"):
        settings.check_settings(run, now)
    with pytest.raises(SystemExit, match=r"--items 400 \(now --items 600\)"):  # an early stage's: always
        settings.check_settings(run, now | {"items": 600, "rl_lr": 1e-5})
    (run / "settings.json").write_text(json.dumps({"layout": settings.LAYOUT, "items": "400", "rl_lr": 1e-5}))
    with pytest.raises(SystemExit, match=r'--items 400 \(now --items 400, saved as "400": was settings.json edited'):
        settings.check_settings(run, now | {"rl_lr": 1e-5})  # a hand-edited number written as text


def test_a_config_file_is_the_same_setting_by_its_contents(settings, tmp_path):
    """A checkout laid anew at another path keeps its run: the config file is compared by its
    contents; an edited file at the same path is refused, and settings saved before the digests
    still compare by path."""
    import pipeline_status

    run = tmp_path / "run"
    run.mkdir()
    (run / settings.FIRST_OUTPUT).write_text("")
    (run / "rl_model").mkdir()  # RL has started: rl_config is the run's
    old, new = tmp_path / "old" / "rl.yaml", tmp_path / "new" / "rl.yaml"
    for path in (old, new):
        path.parent.mkdir()
        path.write_text("epsilon_high: 0.28\n")
    base = {key: None for key in settings.IDENTITY} | {"layout": settings.LAYOUT}
    saved = settings.with_config_digests(base | {"sft_config": str(old), "rl_config": str(old)})
    (run / "settings.json").write_text(json.dumps(saved))
    moved = settings.with_config_digests(base | {"sft_config": str(new), "rl_config": str(new)})
    assert moved["rl_config_sha256"] == saved["rl_config_sha256"] and len(moved["rl_config_sha256"]) == 64
    settings.check_settings(run, moved)  # the same contents under another path
    new.write_text("epsilon_high: 0.2\n")
    with pytest.raises(SystemExit, match=r"--rl-config \S+new/rl.yaml\)"):
        settings.check_settings(run, settings.with_config_digests(moved))  # another path, other contents
    old.write_text("epsilon_high: 0.2\n")
    with pytest.raises(SystemExit, match=r"its contents changed: sha256 [0-9a-f]{12}, now [0-9a-f]{12}"):
        settings.check_settings(run, settings.with_config_digests(saved))  # the same path, edited
    (run / "settings.json").write_text(json.dumps(base | {"sft_config": str(old), "rl_config": str(old)}))
    with pytest.raises(SystemExit, match=r"--sft-config \S+old/rl.yaml \(now --sft-config \S+new/rl.yaml\)"):
        settings.check_settings(run, moved)  # saved before the digests: by path
    # the command that continues names a config only when its contents are not the default's
    default = settings.ROOT / "configs" / "rl" / "cpu_ladder.yaml"
    copy = tmp_path / "copy.yaml"
    copy.write_bytes(default.read_bytes())
    ran = settings.with_config_digests({"out": str(run), "rl_config": str(copy)})
    option = settings.option_text
    assert "--rl-config" not in pipeline_status.continue_command(ran, {"rl_config": default}, option)
    copy.write_text("lr: 1.0\n")
    ran = settings.with_config_digests(ran)
    assert f"--rl-config {copy}" in pipeline_status.continue_command(ran, {"rl_config": default}, option)


def test_the_prefilter_sampler_of_a_run_is_kept(settings, tmp_path):
    """A run saved before --prefilter-sampler existed sampled its prefilter at the evaluation
    sampler: once the prefilter has written, rl is refused; a prefilter at the RL sampler makes
    --rl-config the run's from then on."""
    run = tmp_path / "run"
    run.mkdir()
    (run / settings.FIRST_OUTPUT).write_text("")
    base = {key: None for key in settings.IDENTITY} | {"layout": settings.LAYOUT}
    older = {k: v for k, v in base.items() if k != "prefilter_sampler"}
    (run / "settings.json").write_text(json.dumps(older))
    settings.check_settings(run, base | {"prefilter_sampler": "rl"})  # the prefilter has not run: it may change
    (run / "eval_sft_train").mkdir()
    with pytest.raises(SystemExit, match=r"--prefilter-sampler eval \(now --prefilter-sampler rl\)"):
        settings.check_settings(run, base | {"prefilter_sampler": "rl"})
    settings.check_settings(run, base | {"prefilter_sampler": "eval"})
    (run / "settings.json").write_text(json.dumps(base | {"prefilter_sampler": "rl", "rl_config": "a.yaml"}))
    with pytest.raises(SystemExit, match=r"--rl-config a.yaml \(now --rl-config b.yaml\)"):
        settings.check_settings(run, base | {"prefilter_sampler": "rl", "rl_config": "b.yaml"})
    (run / "settings.json").write_text(json.dumps(base | {"prefilter_sampler": "eval", "rl_config": "a.yaml"}))
    settings.check_settings(run, base | {"prefilter_sampler": "eval", "rl_config": "b.yaml"})  # RL has not begun


def test_rl_overfit_refuses_halves_that_visit_items_unequally(tmp_path):
    script = SCRIPT.parents[1] / "benchmarks" / "rl_overfit.py"
    for args, message in (
        (["--steps", "10", "--rl-items", "3"], "--steps 10 --rl-items 3: give 1 to --pool (12) items and a multiple"),
        (["--rl-items", "13"], "--rl-items 13: give 1 to --pool (12)"),
        (["--pool", "0"], "--pool 0: give 1 to --warm-items (80) items"),
    ):
        res = subprocess.run(
            [sys.executable, str(script), "--work", str(tmp_path / "w"), *args], capture_output=True, text=True
        )
        assert res.returncode != 0 and message in res.stderr, res.stderr
        assert not (tmp_path / "w").exists()  # refused before any work


def test_rl_overfit_control_negates_the_advantages_the_rl_step_plans(monkeypatch):
    """``--flip-advantages`` must change what the RL step trains on (the name the rollouts
    module calls), and only inside its block."""
    import random

    import websailor.train.rl.rollouts as rollouts

    path = SCRIPT.parents[1] / "benchmarks" / "rl_overfit.py"
    monkeypatch.syspath_prepend(str(path.parent))
    spec = importlib.util.spec_from_file_location("rl_overfit", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rewards, terms = [1.0, 0.0, 0.0, 1.0], ["answer"] * 4
    plain = rollouts.plan_batch(rewards, terms, 4, "v2", random.Random(0)).advantages
    assert any(x != 0 for x in plain)
    with module.flipped_advantages():
        flipped = rollouts.plan_batch(rewards, terms, 4, "v2", random.Random(0)).advantages
    assert flipped == [-x for x in plain]
    assert rollouts.plan_batch(rewards, terms, 4, "v2", random.Random(0)).advantages == plain


def test_dupo_throughput_samples_a_live_stream_from_a_server(vital_dir, tmp_path, monkeypatch):
    """The throughput stage's live groups come from a served model (``vllm:`` or ``openai:``),
    which batches on its side: the script must not hand it a local engine's options."""
    from fakes import FakeOpenAIServer

    path = SCRIPT.parents[1] / "benchmarks" / "dupo_throughput.py"
    monkeypatch.syspath_prepend(str(path.parent))  # its helpers, as when it runs as a script
    spec = importlib.util.spec_from_file_location("dupo_throughput", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    home = tmp_path / "home"
    (home / "corpora").mkdir(parents=True)
    (home / "corpora" / "vital_en").symlink_to(vital_dir)  # the default corpus the script opens
    monkeypatch.setenv("WEBSAILOR_HOME", str(home))
    qa = tmp_path / "qa.jsonl"
    qa.write_text(
        '{"id": "v01", "question": "Which river flows north into the Mediterranean Sea?", "answer": "Nile"}\n'
        '{"id": "v02", "question": "Who painted the Mona Lisa?", "answer": "Leonardo da Vinci"}\n'
    )
    a = module.argparse.Namespace(
        qa=qa,
        stream=tmp_path / "stream.jsonl",
        seed=0,
        group_size=2,
        max_calls=2,
        max_tokens=64,
        observations="compact",
    )
    with FakeOpenAIServer(reply="<think>Sure.</think>\n<answer>Nile</answer>") as srv:
        a.model = f"openai:fake@{srv.url}"
        groups = module.live_groups(a, 2)
    assert sorted(g["id"] for g in groups) == ["v01", "v02"]
    for g in groups:  # DUPO's reward: 0.1 for the format, 0.9 more for the right answer
        assert g["rewards"] == ([1.0, 1.0] if g["id"] == "v01" else [0.1, 0.1]) and g["wall_s"] > 0
    assert [json.loads(line)["id"] for line in a.stream.read_text().splitlines()] == [g["id"] for g in groups]


def test_transfer_opening_refuses_bad_arguments_before_any_work(tmp_path):
    script = SCRIPT.with_name("transfer_opening.py")
    (tmp_path / "afile").write_text("x")
    for args, message in (
        (["--k", "0"], "--k 0: give at least 1"),
        (["--warm-steps", "-1"], "--warm-steps -1: give at least 1"),
        (["--question-model", str(tmp_path)], "give hf:DIR, DIR a model directory"),
        (["--publish", str(tmp_path / "afile")], "is a file; give a directory"),
    ):
        res = subprocess.run(
            [sys.executable, str(script), "--out", str(tmp_path / "w"), *args], capture_output=True, text=True
        )
        assert res.returncode != 0 and message in res.stderr, res.stderr
        assert not (tmp_path / "w").exists()


def test_status_reports_each_stage_and_the_command_that_continues(pipeline, tmp_path):
    """``status`` reads a run folder: states, progress in each stage's units, time spent (the
    script's record, or the step log's seconds), estimates from a stage's own rate or a like
    stage's, and the command with the settings that differ from the defaults."""
    run = tmp_path / "ladder"
    (run / "sft_model").mkdir(parents=True)
    settings = {
        key: str(v.resolve()) if isinstance(v, Path) else v
        for key, v in vars(pipeline.build_parser().parse_args([])).items()
    }
    settings |= {"out": str(run), "layout": pipeline.LAYOUT, "items": 10, "k": 2, "eval_limit": 3, "rl_steps": 20}
    settings["until"] = "synth"  # run with --until: the command that continues runs every stage
    (run / "settings.json").write_text(json.dumps(settings))
    items = [{"id": f"i{n}", "split": "test" if n < 3 else "train"} for n in range(10)]
    (run / "qa.jsonl").write_text("".join(json.dumps(it) + "\n" for it in items))
    (run / "qa_stats.txt").write_text("stats")
    (run / "traj_pool.jsonl").write_text("{}\n" * 7)
    (run / "sft_trajectories.jsonl").write_text("{}\n" * 7)
    (run / "sft_model" / "sft_log.jsonl").write_text(
        "".join(json.dumps({"step": s, "time/step_s": 10.0}) + "\n" for s in (1, 2)) + '{"step": 3, "ti'
    )
    (run / "eval_base").mkdir()
    (run / "eval_base" / "trajectories.jsonl").write_text(
        "".join(json.dumps({"id": f"i{n}", "rollout": r}) + "\n" for n in range(3) for r in range(2))
    )
    (run / "eval_base" / "summary.json").write_text(json.dumps({"questions": 3, "ungraded": 0}))
    stages = {
        "synth": {"wall_s": 5.0, "runs": 1, "finished": True},
        "traj": {"wall_s": 7.0, "runs": 1, "finished": True},
    }
    stages["eval_base"] = {"wall_s": 60.0, "runs": 1, "finished": True}
    (run / "results.json").write_text(json.dumps({"stages": stages}))
    res = _run("status", "--out", str(run))
    assert res.returncode == 0, res.stderr
    rows = {line.split()[0]: line for line in res.stdout.splitlines()[3:] if line and not line.startswith(" ")}
    stages_in_order = "synth traj sft eval_base eval_sft prefilter sanity rl eval_rl dupo eval_dupo throughput transfer"
    assert [name for name in rows if name not in ("spent", "next:")] == stages_in_order.split()  # the run's order
    assert "done" in rows["synth"] and "10 of 10 items" in rows["synth"]
    assert "done" in rows["traj"] and "7 of 7 train items" in rows["traj"]  # built, then drawn
    assert "partial" in rows["sft"] and "2 of 4 steps" in rows["sft"]  # 7 trajectories, batch 2, one epoch
    assert "0m20s" in rows["sft"] and rows["sft"].split()[-1] == "0m20s"  # 2 steps left at 10 s each
    assert "done" in rows["eval_base"] and "6 of 6 rollouts" in rows["eval_base"]
    # not started, estimated at eval_base's 10 s a rollout
    assert "not started" in rows["eval_sft"] and rows["eval_sft"].split()[-1] == "1m00s"
    assert "not started" in rows["rl"] and "0 of 20 RL steps" in rows["rl"] and rows["rl"].split()[-1] == "?"
    assert "next: sft; continue with:" in res.stdout
    command = res.stdout.strip().splitlines()[-1].strip()
    assert command.startswith(f"python experiments/mini_pipeline.py --out {run}")
    assert "--items 10" in command and "--k 2" in command and "--rl-steps 20" in command and "--seed" not in command
    assert "--until" not in command
    assert "--prefilter-sampler" not in command  # the default (rl)
    data = json.loads(_run("status", "--out", str(run), "--json").stdout)
    assert data["stages"]["sft"]["done"] == 2 and data["stages"]["sft"]["left_s"] == 20.0
    # a run saved before --prefilter-sampler sampled at eval: the command says so (the default is now rl)
    older = {k: v for k, v in settings.items() if k != "prefilter_sampler"}
    (run / "settings.json").write_text(json.dumps(older))
    command = json.loads(_run("status", "--out", str(run), "--json").stdout)["continue"]
    assert "--prefilter-sampler eval" in command, command
    (run / "settings.json").write_text(json.dumps(settings))
    # a folder that is not an experiment, and one of another layout
    res = _run("status", "--out", str(tmp_path))
    assert res.returncode == 2 and "is not a ladder experiment folder (no settings.json)" in res.stderr
    res = _run("status", "--out", "")
    assert res.returncode == 2 and "argument --out: give a folder, not an empty path" in res.stderr
    (run / "settings.json").write_text(json.dumps({**settings, "layout": 2}))
    res = _run("status", "--out", str(run))
    assert res.returncode == 2 and "layout 2, now 5" in res.stderr and "Traceback" not in res.stderr
    (run / "settings.json").write_text("{}")  # the first layout wrote no "layout": as a run reads it
    res = _run("status", "--out", str(run))
    assert res.returncode == 2 and "an earlier version of this script (layout 1, now 5" in res.stderr
    # a folder moved since it was made: the command continues it where it is now
    moved = tmp_path / "moved"
    run.rename(moved)
    (moved / "settings.json").write_text(json.dumps(settings))
    res = _run("status", "--out", str(moved))
    assert res.returncode == 0 and res.stdout.strip().splitlines()[-1].strip().startswith(
        f"python experiments/mini_pipeline.py --out {moved}"
    )
    # damaged records: one line, no traceback
    for name, text in (("settings.json", json.dumps({**settings, "k": "four"})),
                       ("settings.json", json.dumps(settings).replace("}", ', "eval_limit": Infinity}')),
                       ("results.json", json.dumps({"stages": {"synth": {"wall_s": float("nan"), "finished": True}}}))):  # fmt: skip
        (moved / name).write_text(text)
        res = _run("status", "--out", str(moved))
        assert res.returncode == 2 and "damaged experiment records" in res.stderr and "Traceback" not in res.stderr
        (moved / name).write_text(json.dumps(settings) if name == "settings.json" else "{}")
    # records the run itself would refuse: status names the file, not a table of zeros
    for text, says in (
        (json.dumps({"stages": {"synth": 5}}), "the record of stage 'synth' is not an object with a number wall_s"),
        (json.dumps({"stages": {"synth": {"wall_s": "abc"}}}), "the record of stage 'synth'"),
        ('{"stages": {"synth": {"wall_s": 5.0, "ru', "results.json cannot be read (JSONDecodeError"),
    ):
        (moved / "results.json").write_text(text)
        res = _run("status", "--out", str(moved))
        assert res.returncode == 2 and says in res.stderr and "Traceback" not in res.stderr, res.stderr
        same = ("--items", "10", "--k", "2", "--eval-limit", "3", "--rl-steps", "20")
        res = _run("--out", str(moved), *same, "--until", "synth")  # the run refuses it before any stage
        assert res.returncode != 0 and says in res.stderr and "Traceback" not in res.stderr, res.stderr
    (moved / "results.json").write_text("{}")
    (moved / "qa_stats.txt").unlink()  # synth unfinished: its time left comes from its total, the settings' items
    (moved / "results.json").write_text(json.dumps({"stages": {"synth": {"wall_s": 5.0, "runs": 1}}}))
    (moved / "settings.json").write_text(json.dumps({**settings, "items": "abc"}))
    res = _run("status", "--out", str(moved))
    assert res.returncode == 2 and "damaged experiment records" in res.stderr and "Traceback" not in res.stderr


def test_grounded_refuses_bad_arguments_and_measures_where_it_began(tmp_path):
    """experiments/grounded.py: one line for each bad argument, before any work; ``before`` is the
    committed warm start's rollouts measured by the grounding figures (issue 38's starting point)."""
    script = SCRIPT.with_name("grounded.py")
    afile = tmp_path / "afile"
    afile.write_text("x")
    for args, says in (
        (["--items", "0"], "--items"),
        (["--lookup-share", "1.5"], "--lookup-share must be in [0, 1], got 1.5"),
        (["--described-share", "-0.1"], "--described-share must be in [0, 1], got -0.1"),
        (["--self-k", "0"], "--self-k 0: give at least 1"),
        (["--items", "50", "--pool", "40"], "--items 50 is above --pool 40"),
        (["--lr", "nan"], "--lr nan: give a finite learning rate above 0"),
        (["--out", str(afile / "sub")], "is a file, not a directory"),
        (["--questions", str(tmp_path / "none.jsonl")], "--questions"),
        (["--out", str(afile)], "is a file; give a directory"),
    ):
        res = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120)
        assert res.returncode != 0 and says in res.stderr, (args, res.stderr)
    assert not (tmp_path / "runs").exists()
    spec = importlib.util.spec_from_file_location("grounded", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    before = module.before_figures()
    g = before["grounding"]
    assert before["trajectories"] == 80 and before["avg_at_k"] == 0.0125
    assert g["answered"] == 54 and g["grounded"] == 0.7778 and g["checks"] == 111 and g["rejecting"] == 0.0
    table = module.markdown({"questions": "q.jsonl", "k": 4, "before": before, "wall_s": {"sft": 60.0}})
    assert "| before | 1.2 (0.0 to 3.8) | 5.0 | 77.8% of 54 |" in table and "sft 60" in table


def test_a_resumed_run_skips_the_stages_its_files_say_are_done(
    pipeline, vital, vital_kg, tmp_path, monkeypatch, capsys
):
    """A rerun runs no command and starts no vLLM server for a stage that is done (about 100 s
    of server start each on two cores), and runs every stage a rerun has work for: an evaluation
    with a rollout to run again (a model error) or without its summary, an RL run of fewer steps
    than now asked, a throughput stream of other sizes, and any stage named by --only."""
    from tests.fakes import ScriptedModel
    from websailor.agent.loop import Agent, AgentConfig
    from websailor.eval.harness import EvalConfig, evaluate
    from websailor.judge import load_judge
    from websailor.questions import load_questions
    from websailor.synth import SynthConfig, synthesize
    from websailor.tools.local import build_local_tools

    run = tmp_path / "ladder"
    settings = {
        key: str(v.resolve()) if isinstance(v, Path) else v
        for key, v in vars(pipeline.build_parser().parse_args([])).items()
    }
    settings |= {"out": str(run), "layout": pipeline.LAYOUT}
    (run / "sft_model").mkdir(parents=True)
    (run / "settings.json").write_text(json.dumps(settings))
    qa = run / "qa.jsonl"
    synthesize(vital_kg, qa, SynthConfig(n=4, seed=5, test_fraction=0.5, levels=(1,)), progress=False)
    (run / "qa_stats.txt").write_text("stats")
    (run / "traj_pool.jsonl").write_text("{}\n" * 2)
    (run / "sft_trajectories.jsonl").write_text("{}\n" * 2)
    (run / "sft_model" / "sft_summary.json").write_text("{}")
    agent = Agent(ScriptedModel(lambda messages: "<answer>Nobody</answer>"), build_local_tools(vital), AgentConfig())
    test_items = load_questions(str(qa), split="test")
    evaluate(test_items, agent, load_judge("em"), run / "eval_base", EvalConfig(rollouts=4), progress=False)
    record = {"wall_s": 1.0, "peak_rss_mb": 100.0, "runs": 1, "finished": True}
    stages = {name: dict(record) for name in ("synth", "traj", "eval_base")}
    (run / "results.json").write_text(json.dumps({"stages": stages}))
    ran = []

    @contextlib.contextmanager
    def serve(model, engine, logs, label, max_model_len):
        ran.append(f"server {label}")
        yield "vllm:x@http://127.0.0.1:1/v1"

    monkeypatch.setattr(pipeline, "run_stage", lambda name, *args, **kwargs: ran.append(name))
    monkeypatch.setattr(pipeline, "served", serve)
    monkeypatch.setattr(sys, "argv", ["mini_pipeline.py", "--out", str(run), "--until", "eval_base"])
    pipeline.main()
    assert ran == []  # no command, no server
    printed = capsys.readouterr().out
    for name in ("synth", "traj", "sft", "eval_base"):
        assert f"[{name}] done (its files say so): skipped" in printed
    assert json.loads((run / "results.json").read_text())["eval"]["base"]["avg_at_k"] == 0.0
    monkeypatch.setattr(sys, "argv", ["mini_pipeline.py", "--out", str(run), "--only", "eval_base"])
    pipeline.main()
    assert ran == ["server eval_base", "eval_base"]  # named by --only: it runs, done or not

    results = json.loads((run / "results.json").read_text())
    finished = pipeline.Finished(run, settings, results)
    assert finished("eval_base") and finished("sft") and not finished("eval_sft")
    first = json.loads((run / "eval_base" / "trajectories.jsonl").read_text().splitlines()[0])
    with (run / "eval_base" / "trajectories.jsonl").open("a") as fh:  # one rollout rerun, cut by an outage
        fh.write(json.dumps(first | {"termination": "model_error"}) + "\n")
    assert not finished("eval_base")
    (run / "rl_model").mkdir()
    (run / "rl_model" / "rl_summary.json").write_text(json.dumps({"steps": 40}))
    assert finished("rl") and not pipeline.Finished(run, settings | {"rl_steps": 60}, results)("rl")
    results["stages"]["throughput"] = dict(record)
    sizes = {"groups": settings["throughput_groups"], "max_groups": settings["throughput_max_groups"]}
    (run / "dupo_throughput.json").write_text(json.dumps({"context": {"args": sizes}}))
    assert finished("throughput")
    assert not pipeline.Finished(run, settings | {"throughput_groups": 9}, results)("throughput")
    (run / "eval_base" / "summary.json").unlink()
    assert not finished("eval_base")
    assert not finished("transfer_base")


def test_the_recipe_runs_every_stage_in_order_on_its_model_and_server(pipeline, monkeypatch, tmp_path):
    """The commands a fresh run would run, recorded in place of running them: each stage once, in
    order; every rollout stage on a vLLM server started for its own model (the SFT model's for
    the prefilter, RL and the throughput stream; each RL model's for its evaluation); the RL
    stages sample on that server and read the prefilter's ratings."""
    run = tmp_path / "ladder"
    ran, servers = [], []

    def record(name, args, stages, program=pipeline.WS, save=None):
        ran.append((name, args))
        if name == "synth":
            (run / "qa_stats.txt").write_text("")  # the script's stats of the items, once written
        if name in pipeline.MODEL_DIRS:  # a training stage's model
            (run / pipeline.MODEL_DIRS[name]).mkdir()
            (run / pipeline.MODEL_DIRS[name] / "config.json").write_text("{}")
        stages[name] = {"wall_s": 0.0, "peak_rss_mb": 0.0, "runs": 1, "finished": True}

    @contextlib.contextmanager
    def serve(model, engine, logs, label, max_model_len):
        servers.append((label, model))
        yield f"vllm:{label}@http://127.0.0.1:1/v1"

    monkeypatch.setattr(pipeline, "run_stage", record)
    monkeypatch.setattr(pipeline, "served", serve)
    monkeypatch.setattr(pipeline, "search_baseline", lambda bench: {"questions": 20, "correct": 0, "accuracy": 0.0})
    run.mkdir()
    (run / "sanity_qa.jsonl").write_text("")  # the sanity items, drawn from the prefilter's ratings
    monkeypatch.setattr(sys, "argv", ["mini_pipeline.py", "--out", str(run), "--engine", "vllm"])
    pipeline.main()
    names = [name for name, _ in ran]
    stages = "synth traj traj sft eval_base eval_sft prefilter sanity rl eval_rl dupo eval_dupo throughput"
    assert names == stages.split() + ["transfer_base", "transfer_sft", "transfer_rl", "transfer_dupo"]
    sft = f"hf:{run / 'sft_model'}"
    assert servers == [
        ("eval_base", "smollm2"),
        ("eval_sft", sft),
        ("prefilter", sft),
        ("sanity", sft),
        ("rl", sft),
        ("eval_rl", f"hf:{run / 'rl_model'}"),
        ("dupo", sft),
        ("eval_dupo", f"hf:{run / 'dupo_model'}"),
        ("throughput", sft),
        ("transfer_base", "smollm2"),
        ("transfer_sft", sft),
        ("transfer_rl", f"hf:{run / 'rl_model'}"),
        ("transfer_dupo", f"hf:{run / 'dupo_model'}"),
    ]
    commands = dict(reversed(ran))  # the first command of a name (traj: build)
    for name in ("eval_base", "eval_sft", "prefilter", "eval_rl", "eval_dupo", "transfer_base"):
        args = commands[name]
        assert args[0] == "eval" and args[args.index("--model") + 1] == f"vllm:{name}@http://127.0.0.1:1/v1"
    for name, algo in (("rl", "v2"), ("dupo", "dupo")):
        args = commands[name]
        assert args[:2] == ["train", "rl"] and args[args.index("--algo") + 1] == algo
        assert args[args.index("--rollout-server") + 1] == f"vllm:{name}@http://127.0.0.1:1/v1"
        assert args[args.index("--prefilter-from") + 1] == str(run / "eval_sft_train")
        assert args[args.index("--max-steps") + 1] == "40" and args[args.index("--model") + 1] == sft
        assert (args[args.index("--group-size") + 1], args[args.index("--batch") + 1]) == ("8", "16")  # 2 items a step
    sanity = commands["sanity"]
    assert sanity[sanity.index("--data") + 1] == str(run / "sanity_qa.jsonl")
    assert [sanity[i + 1] for i, x in enumerate(sanity) if x in ("--group-size", "--batch", "--lr")] == [
        "8",
        "8",
        "3e-05",
    ]
    assert commands["throughput"][0].endswith("dupo_throughput.py")
    prefilter = commands["prefilter"]  # by default at the RL runs' sampler (--rl-config's)
    assert prefilter[prefilter.index("--temperature") :] == ["--temperature", "1", "--top-p", "1"] + [
        "--presence-penalty",
        "0",
    ]
    # --prefilter-sampler eval: the paper's evaluation sampler, eval's default (a fresh folder: an identity setting)
    run, ran[:] = tmp_path / "eval_sampler", []
    run.mkdir()
    (run / "sanity_qa.jsonl").write_text("")
    monkeypatch.setattr(sys, "argv", ["mini_pipeline.py", "--out", str(run), "--engine", "vllm"])
    monkeypatch.setattr(sys, "argv", [*sys.argv, "--prefilter-sampler", "eval", "--until", "prefilter"])
    pipeline.main()
    assert "--temperature" not in dict(ran)["prefilter"]


def test_results_state_each_rl_run_reward_gain_by_window_and_item_by_item(tmp_path, monkeypatch):
    """results.md says both readings of an RL run's training reward, computed from its rollouts."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))  # its helpers, as when it runs as a script
    report = _load(SCRIPT.with_name("pipeline_report.py"))
    path = tmp_path / "rollouts.jsonl"
    rows = [
        {"step": s, "id": item, "reward": r}
        for s, item, r in [(1, "a", 0.0), (2, "b", 1.0), (3, "a", 1.0), (4, "b", 1.0)]
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    gains = {"reward_gain": {"rl": report.reward_gain(path)}, "item_reward_gain": {"rl": report.item_reward_gain(path)}}
    text = report.tables(gains)
    assert "rl: training reward 0.500 over the first 2 steps, 1.000 over the last 2 (difference +0.500" in text
    assert (
        "rl, item by item: 2 distinct items visited, 1.0 a step; the 2 items visited twice or more, "
        "0.500 at their first visit, 1.000 at their last" in text
    )
    assert "(difference +0.500, 95% CI +0.000 to +1.000; 1 up, 0 down, 1 unchanged)" in text
    # tool use by window: the calls, the repeats among them, the call-limit share, reward with and without
    visit = {"name": "visit", "arguments": {"url": "https://en.wikipedia.org/wiki/Nile"}}
    looped = {
        "tool_calls": [visit, {**visit, "arguments": {**visit["arguments"], "goal": "g"}}],
        "termination": "max_calls",
    }
    answered = [{**r, "tool_calls": [visit], "termination": "answer"} for r in rows[:2]]
    rows = answered + [{**r, **looped, "reward": 0.0} for r in rows[2:]]  # cut by the call limit: no answer
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    shift = report.tool_use_shift(path)
    assert shift["first"] == {
        "rollouts": 2,
        "tool_calls": 1.0,
        "repeated_calls": 0.0,
        "max_calls_share": 0.0,
        "reward_with_repeats": None,
        "reward_without_repeats": 0.5,
    }
    assert shift["last"]["repeated_calls"] == 1.0 and shift["last"]["max_calls_share"] == 1.0
    assert shift["last"]["reward_with_repeats"] == 0.0 and shift["last"]["reward_without_repeats"] is None
    text = report.tables({"tool_use": {"rl": shift}})
    assert "rl, tool use: first 2 steps 1.00 tool calls a rollout (0.00 repeating an earlier one), 0.0% ended" in text
    assert "last 2 steps 2.00 tool calls a rollout (1.00 repeating an earlier one), 100.0% ended at the call" in text
    from websailor.errors import InputFormatError

    for bad, says in (({"reward": 1.0}, "integer step"), ({"step": 1, "tool_calls": ["visit"]}, "not an object")):
        path.write_text(json.dumps(rows[0]) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(InputFormatError, match=f"rollouts.jsonl line 2: .*{says}"):
            report.tool_use_shift(path)


def test_compare_tables_on_the_test_split_and_the_hand_written_questions(tmp_path, monkeypatch):
    """Each pair that both ran gets a paired table on the test split and on the hand-written
    questions; the grounded-answer share of each model's hand-written answers is stated."""
    from fakes import ScriptedModel

    from websailor.agent import Agent
    from websailor.eval.harness import EvalConfig, evaluate
    from websailor.judge import Gold, load_judge
    from websailor.questions import Question

    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    report = _load(SCRIPT.with_name("pipeline_report.py"))
    common = _load(SCRIPT.with_name("pipeline_common.py"))
    rivers = {"Cairo": "Nile", "Vienna": "Danube", "Paris": "Seine", "Rome": "Tiber"}
    items = [
        Question(f"q{i}", f"Which river flows through {c}?", Gold.parse(r)) for i, (c, r) in enumerate(rivers.items())
    ]

    def policy(right: set[str]):
        def reply(messages):
            q = next(m["content"] for m in messages if m["role"] == "user")
            city = next(c for c in rivers if c in q)
            return f"<answer>{rivers[city] if city in right else 'Amazon'}</answer>"

        return reply

    results: dict = {"eval": {}, "transfer": {}}
    for prefix in ("eval", "transfer"):
        for model, right in (("sft", {"Cairo"}), ("rl", set(rivers)), ("base", set())):
            agent = Agent(ScriptedModel(policy(right)), [], env="none")
            evaluate(
                items, agent, load_judge("em"), tmp_path / f"{prefix}_{model}", EvalConfig(rollouts=2), progress=False
            )
            results[prefix][model] = common.figures(tmp_path / f"{prefix}_{model}")
    del results["transfer"]["base"]  # a pair runs only where both models did
    compare = report.compare_tables(tmp_path, results)
    assert list(compare) == ["base -> sft", "sft -> rl", "sft -> rl, hand-written"]
    assert (tmp_path / "compare_transfer_sft_rl.md").read_text() == compare["sft -> rl, hand-written"]
    assert "rl is better than sft" in compare["sft -> rl, hand-written"]
    g = results["transfer"]["rl"]["grounding"]
    assert g["answered"] == 8 and g["grounded"] == 0.0  # no tool read the answer: every answer is from memory
    text = report.tables(results)
    assert "Grounded answers on the hand-written questions: sft 0.0% of 8 answers" in text
