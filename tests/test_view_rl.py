"""The viewer's RL and SFT views over a real ``rollouts.jsonl`` (written by
:meth:`AgentRollouts.batch` from scripted rollouts in the local environment) and a step log
written by :class:`StepLogger`, in TestClient and in a real browser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.fakes import XSS, HostileTool, ScriptedModel, call
from websailor.agent.loop import Agent, AgentConfig
from websailor.judge import Gold
from websailor.questions import Question
from websailor.view import create_view_app
from websailor.view.context import script_json

ITEMS = [
    Question("paris", f"Which city is the capital of France? {XSS}", Gold.parse("Paris")),
    Question("nile", "Which river flows through Cairo?", Gold.parse("Nile")),
]


class _Judge:
    name = "test"

    def grade(self, cases):
        from websailor.judge.base import Grade

        return [Grade(c.prediction == c.gold.answer, 1.0) for c in cases]


def _rollout(tools, item: Question, r: int, answer: str):
    model = ScriptedModel(
        [call("search", query=[item.question[:30]]), f"<think>Found it.</think><answer>{answer}</answer>"]
    )
    return Agent(model, tools, AgentConfig(max_calls=4)).run(item.question, item.id, r, item.gold.answer)


def _step(run: Path, ro, tools, tok, step: int, logger) -> None:
    answers = {"paris": ["Paris", "Lyon"], "nile": ["Nile", "Nile"]}
    items = [it for it in ITEMS for _ in range(2)]
    trajs = [_rollout(tools, it, i % 2, answers[it.id][i % 2]) for i, it in enumerate(items)]
    ro.batch(items, trajs, step=step, tokenizer=tok)
    logger.write(step + 1, {**ro.last, "entropy": 0.5 - 0.1 * step, "clip_ratio/region_mean": 0.01, "time/step_s": 2.0})


@pytest.fixture(scope="module")
def rl_run(vital, smollm2_path: Path, tmp_path_factory) -> Path:
    """A run folder with two steps: each step a group of ``paris`` (one right, one wrong) and
    a group of ``nile`` (both right: zero spread)."""
    from websailor.tools.local import build_local_tools
    from websailor.train.rl.rollouts import AgentRollouts, RolloutSettings
    from websailor.train.rl_log import StepLogger
    from websailor.train.sft import load_tokenizer

    root = tmp_path_factory.mktemp("rlroot")
    run = root / "rl"
    run.mkdir()
    tok = load_tokenizer(smollm2_path)
    tools = build_local_tools(vital)
    tools["search"] = HostileTool(tools["search"])
    settings = RolloutSettings(2, "v2", AgentConfig(max_calls=4), concurrency=1)
    (run / "rl_settings.json").write_text(json.dumps({"model": "smollm2", "group_size": 2, "algo": "v2"}))
    ro = AgentRollouts({it.question: it for it in ITEMS}, tools, _Judge(), settings, run / "rollouts.jsonl")
    logger = StepLogger(run)
    for step in range(2):
        _step(run, ro, tools, tok, step, logger)
    logger.close()
    return root


def _client(root: Path) -> TestClient:
    return TestClient(create_view_app(root))


def test_the_run_page_carries_the_curves_and_the_steps(rl_run: Path):
    client = _client(rl_run)
    html = client.get("/rl/rl").text
    assert 'id="rl-data"' in html and "/static/charts.js" in html
    assert 'href="/rl/rl?step=1"' in html and 'href="/rl/rl?step=2"' in html
    data = client.get("/api/rl/rl").json()
    curves = {c["key"]: c["points"] for c in data["curves"]}
    assert data["steps"] == 2 and curves["reward/mean"] == [[1, 0.75], [2, 0.75]]
    assert curves["groups/zero_spread_share"] == [[1, 0.5], [2, 0.5]] and curves["entropy"][1] == [2, 0.4]
    assert "groups/env_failed" in curves  # logged (as 0) by the real batch
    assert data["rollout_steps"] == [[1, 4], [2, 4]]
    assert "<script>alert" not in html


def test_the_call_limit_and_engine_difference_curves_are_drawn_when_logged():
    from websailor.view.rl_views import log_curves

    logged = [
        {"step": 1, "reward/mean": 0.5, "termination/answer": 1.0},  # no rollout hit the limit: not logged
        {"step": 2, "reward/mean": 0.25, "termination/max_calls": 0.25, "sampling/sampling_logp_difference/mean": 0.01},
        {
            "step": 3,
            "termination/answer": 1.0,
            "rollouts/in_loss_share": 0.0,
            "sampling/sampling_logp_difference/mean": 0,
        },
    ]
    curves = {c["key"]: c["points"] for c in log_curves(logged)["curves"]}
    assert curves["termination/max_calls"] == [[1, 0.0], [2, 0.25], [3, 0.0]]
    assert curves["sampling/sampling_logp_difference/mean"] == [[2, 0.01]]  # step 3 trained on nothing
    curves = {c["key"] for c in log_curves([{"step": 1, "reward/mean": 0.5}])["curves"]}  # a log without them
    assert "reward/mean" in curves and "termination/max_calls" not in curves and "groups/env_failed" not in curves


def test_script_json_cannot_end_its_script_element():
    text = str(script_json({"q": "</script><script>alert(1)</script>", "b": "<!-- & >"}))
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"q": "</script><script>alert(1)</script>", "b": "<!-- & >"}


def test_the_step_page_shows_groups_better_and_worse(rl_run: Path):
    html = _client(rl_run).get("/rl/rl?step=1").text
    assert html.count('class="group"') == 2
    assert 'class="rollout good"' in html and 'class="rollout worse"' in html  # paris: Paris and Lyon
    assert "+1.000" in html and "-1.000" in html  # the paris group's advantages
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert" not in html
    assert 'href="/rl/rl?step=1&amp;group=1&amp;rollout=1"' in html and 'href="/rl/rl?step=2"' in html


def test_a_published_run_with_packed_rollouts_shows_the_same_step(rl_run: Path, tmp_path: Path):
    import shutil

    from websailor.packed import pack, packed_twin

    root = tmp_path / rl_run.name  # the same root name: the pages are compared whole
    shutil.copytree(rl_run / "rl", root / "rl")
    plain = root / "rl" / "rollouts.jsonl"
    packed_twin(plain).write_bytes(pack(plain.read_bytes()))
    plain.unlink()
    for url in ("/rl/rl?step=1", "/rl/rl?step=1&group=1&rollout=2"):
        assert _client(root).get(url).text == _client(rl_run).get(url).text


def test_the_rollout_page_shows_its_steps(rl_run: Path):
    client = _client(rl_run)
    html = client.get("/rl/rl?step=1&group=1&rollout=2").text
    assert "Lyon" in html and '<details class="step observation">' in html and "search" in html
    assert "Found it." in html and "rollouts.jsonl line 2" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html and "<img src=x" not in html
    assert client.get("/rl/rl?step=1&group=1&rollout=99").status_code == 404


def test_a_rollout_has_one_name_on_the_step_page_its_own_page_and_its_link(rl_run: Path):
    import html
    import re

    client = _client(rl_run)
    step = client.get("/rl/rl?step=2").text
    seen = []
    for g, section in re.findall(r'<section class="group" id="group-(\d+)">(.*?)</section>', step, re.S):
        for href, title, text, prediction in re.findall(
            r'<td><a href="([^"]+)" title="([^"]+)">([^<]+)</a></td>\s*<td class="text">([^<]*)</td>', section
        ):
            r = text.removeprefix("rollout ")
            assert (
                href == f"/rl/rl?step=2&amp;group={g}&amp;rollout={r}" and title == f"step 2 · group {g} · rollout {r}"
            )
            page = client.get(html.unescape(href)).text
            assert f"<h1>rl · step 2 · group {g} · rollout {r}</h1>" in page
            assert f'id="rollout-name">step 2 · group {g} · rollout {r} (question ' in page
            assert html.unescape(re.search(r'id="final-answer">([^<]*)<', page).group(1)) == html.unescape(prediction)
            assert f'href="/rl/rl?step=2#group-{g}">group {g}</a>' in page
            seen.append((g, r, html.unescape(prediction)))
    assert seen == [("1", "1", "Paris"), ("1", "2", "Lyon"), ("2", "1", "Nile"), ("2", "2", "Nile")]
    assert ">#" not in step  # no other numbering of the rollouts


def test_a_run_in_folders_named_step_and_rollout(rl_run: Path, tmp_path: Path):
    import shutil

    shutil.copytree(rl_run / "rl", tmp_path / "step" / "3")
    shutil.copytree(rl_run / "rl", tmp_path / "rollout" / "step" / "1")
    client = _client(tmp_path)
    assert {r["rel"] for r in client.get("/api/runs").json()} == {"step/3", "rollout/step/1"}
    for rel in ("step/3", "rollout/step/1"):
        run = client.get(f"/rl/{rel}")
        assert run.status_code == 200 and f"RL run {rel}</h1>" in run.text
        assert f'href="/rl/{rel}?step=2"' in run.text and f'data-poll="/api/rl/{rel}"' in run.text
        assert client.get(f"/api/rl/{rel}").json()["steps"] == 2
        step = client.get(f"/rl/{rel}?step=2")
        assert f"{rel} · step 2</h1>" in step.text and step.text.count('class="group"') == 2
        one = client.get(f"/rl/{rel}?step=2&group=1&rollout=2")
        assert f"{rel} · step 2 · group 1 · rollout 2</h1>" in one.text and "Lyon" in one.text


def test_a_truncated_last_line_and_a_record_missing_fields(rl_run: Path, tmp_path: Path):
    import shutil

    root = tmp_path / "root"
    shutil.copytree(rl_run, root)
    lines = (root / "rl" / "rollouts.jsonl").read_text().splitlines()
    bad = json.loads(lines[1])
    del bad["reward"]
    lines[1] = json.dumps(bad)
    (root / "rl" / "rollouts.jsonl").write_text("\n".join(lines) + "\n" + lines[2][:40])  # a half line: being written
    client = _client(root)
    html = client.get("/rl/rl?step=1").text
    assert "rollouts.jsonl line 2: not a rollout record (no reward)" in html
    assert html.count('class="rollout ') == 3  # the others are shown; the half line is not read yet
    assert client.get("/rl/rl").status_code == 200 and client.get("/").status_code == 200
    # a half-written last line of the step log: the complete steps are shown, and the page says so
    with (root / "rl" / "rl_log.jsonl").open("a") as fh:
        fh.write('{"step": 3, "reward/me')
    r = client.get("/rl/rl")
    assert r.status_code == 200 and 'id="rl-log-tail"' in r.text and "rl_log.jsonl line 3 is unfinished" in r.text
    assert '<span id="rl-steps">2 steps</span>' in r.text
    data = client.get("/api/rl/rl").json()
    assert data["steps"] == 2 and data["unfinished"].startswith("rl_log.jsonl line 3 is unfinished")
    assert client.get("/").status_code == 200
    assert next(x for x in client.get("/api/runs").json() if x["rel"] == "rl")["figures"]["steps"] == 2
    # a step log line that is not a record: the page names the file and the line
    with (root / "rl" / "rl_log.jsonl").open("a") as fh:
        fh.write('ard/mean": 1.0}\nnot a step\n')
    r = client.get("/rl/rl")
    assert r.status_code == 422 and "rl_log.jsonl line 4 is not JSON" in r.text
    assert client.get("/api/rl/rl").status_code == 422
    assert client.get("/").status_code == 200 and client.get("/rl/rl?step=2").status_code == 200


def _rollout_record(step: int, qid: str, rollout: int, prediction: str) -> dict:
    return {
        "step": step,
        "id": qid,
        "rollout": rollout,
        "question": f"Question {qid}?",
        "messages": [{"role": "user", "content": f"Question {qid}?"}],
        "prediction": prediction,
        "reward": 1.0,
        "advantage": 0.0,
        "in_loss": True,
    }


def test_rollouts_rewritten_larger_in_place_are_read_again(tmp_path: Path):
    run = tmp_path / "rl"
    run.mkdir()
    (run / "rl_settings.json").write_text('{"group_size": 1}')
    path = run / "rollouts.jsonl"
    path.write_text("".join(json.dumps(_rollout_record(1, q, 0, "before-" + q)) + "\n" for q in ("a", "b")))
    client = _client(tmp_path)
    html = client.get("/rl/rl?step=1").text
    assert "before-a" in html and "before-b" in html
    inode = path.stat().st_ino
    # a resumed run (or an editor) writes the file again, in place, larger than before
    with path.open("r+", encoding="utf-8") as fh:
        fh.truncate(0)
        fh.write("".join(json.dumps(_rollout_record(s, q, 0, f"new {q}{s}")) + "\n" for s in (1, 2) for q in "abc"))
    assert path.stat().st_ino == inode
    html = client.get("/rl/rl?step=1").text
    assert "before-a" not in html and "new a1" in html and "new c1" in html and html.count('class="rollout ') == 3
    assert client.get("/api/rl/rl").json()["rollout_steps"] == [[1, 3], [2, 3]]
    line = client.get("/rl/rl?step=2&group=2&rollout=1").text
    assert "new b2" in line
    # then it only grows: the index reads on from where it stopped
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(_rollout_record(3, "a", 0, "new a3")) + "\n")
    assert client.get("/api/rl/rl").json()["rollout_steps"] == [[1, 3], [2, 3], [3, 1]]


def test_a_last_rollout_without_its_newline_is_read_once(tmp_path: Path):
    run = tmp_path / "rl"
    run.mkdir()
    (run / "rl_settings.json").write_text('{"group_size": 1}')
    path = run / "rollouts.jsonl"
    path.write_text(json.dumps(_rollout_record(1, "a", 0, "pa")) + "\n" + json.dumps(_rollout_record(1, "b", 0, "pb")))
    client = _client(tmp_path)
    assert client.get("/api/rl/rl").json()["rollout_steps"] == [[1, 2]]
    with path.open("a", encoding="utf-8") as fh:
        fh.write("\n" + json.dumps(_rollout_record(2, "a", 0, "pa2")) + "\n")
    assert client.get("/api/rl/rl").json()["rollout_steps"] == [[1, 2], [2, 1]]
    assert "pb" in client.get("/rl/rl?step=1&group=2&rollout=1").text


def test_paths_outside_and_folders_that_are_no_run(rl_run: Path):
    client = _client(rl_run)
    assert client.get("/rl/..%2F..%2Fetc").status_code == 404
    assert client.get("/rl/rl/rollouts.jsonl").status_code == 404


def test_the_sft_page(tmp_path: Path):
    run = tmp_path / "sft"
    run.mkdir()
    summary = {
        "model": "smollm2",
        "data": ["train.jsonl"],
        "settings": {"learning_rate": 1e-5, "epochs": 1},
        "counts": {"kept": 10},
        "steps": 3,
        "memory": {"gradient_checkpointing": True},
        "train_loss": 1.5,
        "train_seconds": 4.2,
        "loss_history": [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}, {"step": 3, "loss": 1.0}],
    }
    (run / "sft_summary.json").write_text(json.dumps(summary))
    html = _client(tmp_path).get("/sft/sft").text
    assert 'id="sft-data"' in html and "gradient_checkpointing" in html and "train_seconds" in html
    (run / "sft_summary.json").write_text("{not json")
    r = _client(tmp_path).get("/sft/sft")
    assert r.status_code == 422 and "sft_summary.json" in r.text


# -- in a real browser ----------------------------------------------------------------------------
def test_in_a_browser_curves_follow_the_run_and_a_click_reaches_a_rollout(rl_run: Path, tmp_path: Path, page):
    import shutil

    from browser import serve_view

    root = tmp_path / "root"
    shutil.copytree(rl_run, root)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    with serve_view(root) as url:
        page.goto(url + "/rl/rl")
        page.wait_for_selector('svg.chart[data-key="reward/mean"] path.curve', state="attached")
        assert page.locator('svg.chart[data-key="reward/mean"] circle.dot').count() == 2
        page.locator('svg.chart[data-key="reward/mean"]').hover()
        assert page.locator('svg.chart[data-key="reward/mean"] .hover-label').text_content().startswith("step ")
        with (root / "rl" / "rl_log.jsonl").open("a") as fh:
            fh.write(json.dumps({"step": 3, "reward/mean": 1.0, "reward/accuracy": 1.0}) + "\n")
        page.wait_for_function(
            "document.querySelectorAll('svg.chart[data-key=\"reward/mean\"] circle.dot').length === 3", timeout=15000
        )
        assert page.locator("#rl-steps").text_content() == "3 steps"
        # a step being written: the page says its line is unfinished, then draws it once whole
        assert page.locator("#rl-log-tail").is_hidden()
        with (root / "rl" / "rl_log.jsonl").open("a") as fh:
            fh.write('{"step": 4, "reward/me')
        page.wait_for_selector("#rl-log-tail", state="visible", timeout=15000)
        assert "rl_log.jsonl line 4 is unfinished" in page.locator("#rl-log-tail").text_content()
        with (root / "rl" / "rl_log.jsonl").open("a") as fh:
            fh.write('an": 0.5}\n')
        page.wait_for_selector("#rl-log-tail", state="hidden", timeout=15000)
        assert page.locator('svg.chart[data-key="reward/mean"] circle.dot').count() == 4
        page.click('a[href="/rl/rl?step=1"]')
        page.wait_for_selector("section.group")
        assert page.locator("tr.rollout.good").count() >= 1 and page.locator("tr.rollout.worse").count() >= 1
        assert XSS in page.locator("section.group .question").first.text_content()
        page.locator("tr.rollout.worse a").first.click()
        page.wait_for_selector("#timeline")
        assert page.locator("#final-answer").text_content() == "Lyon"
        obs = page.locator("details.step.observation").first
        obs.locator("summary").click()
        assert XSS in obs.locator("pre").text_content()
    assert dialogs == []


def test_in_a_browser_a_run_of_one_step_draws_its_point_with_its_value(rl_run: Path, tmp_path: Path, page):
    import shutil

    from browser import serve_view

    root = tmp_path / "root"
    shutil.copytree(rl_run, root)
    log = root / "rl" / "rl_log.jsonl"
    log.write_text(log.read_text().splitlines(keepends=True)[0])  # the first step only
    with serve_view(root) as url:
        page.goto(url + "/rl/rl")
        chart = page.locator('svg.chart[data-key="reward/mean"]')
        chart.locator("circle.dot").wait_for(state="attached")
        assert page.locator("#rl-steps").text_content() == "1 step"
        assert chart.locator("text.tick").all_text_contents() == ["0.750", "step 1"]  # no 0.900 .. 1.10 steps
        assert chart.locator("text.point-value").text_content() == "0.750"
        dot = chart.locator("circle.dot")
        assert dot.count() == 1
        cx, cy = float(dot.get_attribute("cx")), float(dot.get_attribute("cy"))
        assert abs(cx - (48 + (340 - 48 - 10) / 2)) < 0.5 and abs(cy - (22 + (190 - 26 - 22) / 2)) < 0.5  # centred
        # a constant curve of several steps has one value tick and no value label
        with log.open("a") as fh:
            fh.write(json.dumps({"step": 2, "reward/mean": 0.75}) + "\n")
        page.wait_for_function(
            "document.querySelectorAll('svg.chart[data-key=\"reward/mean\"] circle.dot').length === 2", timeout=15000
        )
        assert chart.locator("text.tick").all_text_contents() == ["0.750", "step 1", "step 2"]
        assert chart.locator("text.point-value").count() == 0 and page.locator("#rl-steps").text_content() == "2 steps"
