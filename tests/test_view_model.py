"""The viewer over an evaluation the embedded model really ran (SmolLM2-135M-Instruct over the
local tools of the vital corpus), read in a real browser from the index down to a rollout's
steps: whatever the model wrote, the pages show every turn of every rollout, and the console
stays clean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from websailor.agent.loop import Agent, AgentConfig
from websailor.eval.harness import EvalConfig, evaluate
from websailor.judge import Gold, load_judge
from websailor.questions import Question

pytestmark = pytest.mark.browser

ITEMS = [
    Question("paris", "Which city is the capital of France?", Gold.parse("Paris")),
    Question("nile", "Which river flows through Cairo?", Gold.parse("Nile")),
]


@pytest.fixture(scope="module")
def model_run(vital, smollm2, tmp_path_factory) -> Path:
    """``eval`` of the embedded model, k = 2, at most 3 model calls of 96 tokens a rollout."""
    from websailor.tools.local import build_local_tools

    root = tmp_path_factory.mktemp("modelview")
    agent = Agent(smollm2, build_local_tools(vital), AgentConfig(max_calls=3, max_tokens_per_turn=96))
    evaluate(ITEMS, agent, load_judge("em"), root / "smollm2-eval", EvalConfig(rollouts=2), progress=False)
    return root


def _records(run: Path) -> dict[tuple[str, int], dict]:
    lines = (run / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()
    return {(r["id"], r["rollout"]): r for r in map(json.loads, lines)}


def test_in_a_browser_every_turn_of_the_models_rollouts_is_shown(model_run: Path, page):
    from browser import serve_view

    records = _records(model_run / "smollm2-eval")
    summary = json.loads((model_run / "smollm2-eval" / "summary.json").read_text())
    assert len(records) == 4 and summary["k"] == 2
    with serve_view(model_run) as url:
        page.goto(url + "/")
        assert "smollm2" in page.locator("#runs tbody tr").inner_text()
        page.click("#runs a")
        page.wait_for_selector("#questions")
        assert page.locator("#questions tbody tr").count() == 2
        for qid in ("paris", "nile"):
            row = page.locator(f'tr[data-id="{qid}"]')
            assert row.locator("a.cell").count() == 2
            row.locator("td a").first.click()  # the question: its two rollouts side by side
            page.wait_for_selector(".columns .rollout")
            rollouts = page.locator(".columns .rollout")
            assert rollouts.count() == 2
            for r in range(2):
                rec = records[(qid, r)]
                turns = sum(m["role"] == "assistant" for m in rec["messages"])
                section = page.locator(f'.columns .rollout[data-rollout="{r}"]')
                assert section.locator("li.step").count() == turns
                text = section.inner_text()
                assert rec["termination"] in text
                if rec["prediction"] is not None:
                    assert section.locator(".prediction").inner_text().strip() == rec["prediction"].strip()
            page.go_back()
            page.wait_for_selector("#questions")
