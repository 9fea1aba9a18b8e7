"""The viewer's core: finding runs, keeping paths inside the root, the index (in a real
browser too), and what bad input gets."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from websailor.errors import InvalidArgumentError
from websailor.view import create_view_app, find_runs, resolve


def _traj(qid: str, rollout: int = 0, **extra) -> dict:
    return {
        "id": qid,
        "rollout": rollout,
        "question": f"Question {qid}?",
        "answer": {"answer": "Nile", "aliases": [], "parts": []},
        "prediction": "Nile",
        "termination": "answer",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": f"Question {qid}?"}],
        **extra,
    }


@pytest.fixture
def runs_root(tmp_path: Path) -> Path:
    (tmp_path / "ev").mkdir()
    (tmp_path / "ev" / "trajectories.jsonl").write_text(json.dumps(_traj("a")) + "\n")
    (tmp_path / "ev" / "summary.json").write_text(
        json.dumps(
            {
                "model": ["m"],
                "env": ["local"],
                "k": 1,
                "avg_at_k": 0.5,
                "avg_at_k_ci95": [0.1, 0.9],
                "pass_at_k": 1.0,
                "format_validity": 0.75,
            }
        )
    )
    (tmp_path / "nested" / "rl").mkdir(parents=True)
    (tmp_path / "nested" / "rl" / "rl_log.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.25}) + "\n")
    (tmp_path / "t.jsonl").write_text(json.dumps(_traj("b")) + "\n")
    (tmp_path / "notes.jsonl").write_text('{"hello": 1}\n')
    return tmp_path


def test_runs_are_found_by_their_files(runs_root: Path):
    runs = {r.rel: r.kind for r in find_runs(runs_root)}
    assert runs == {"ev": "eval", "nested/rl": "rl", "t.jsonl": "trajectories"}


def test_paths_cannot_leave_the_root(runs_root: Path, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    (outside / "secret.jsonl").write_text(json.dumps(_traj("s")) + "\n")
    os.symlink(outside, runs_root / "link")
    for rel in ("../x", "/etc/passwd", "ev/../../x", "link/secret.jsonl"):
        with pytest.raises(InvalidArgumentError):
            resolve(runs_root, rel)
    assert resolve(runs_root, "ev") == (runs_root / "ev").resolve()
    assert "link/secret.jsonl" not in {r.rel for r in find_runs(runs_root)}  # links are not followed
    client = TestClient(create_view_app(runs_root))
    for url in ("/trajectories/..%2F..%2Fetc%2Fpasswd", "/trajectories/link/secret.jsonl"):
        r = client.get(url)
        assert r.status_code == 404 and "secret" not in r.text.replace("link/secret.jsonl", "")


def test_the_index_lists_runs_with_their_figures(runs_root: Path):
    client = TestClient(create_view_app(runs_root))
    html = client.get("/").text
    assert 'href="/eval/ev"' in html and "Avg@1 50.0 (10.0-90.0), Pass@1 100.0, format validity 75.0" in html
    assert "1 steps, last reward 0.250" in html
    api = {r["rel"]: r for r in client.get("/api/runs").json()}
    assert api["ev"]["figures"]["avg_at_k"] == 0.5 and api["nested/rl"]["kind"] == "rl"


def test_a_missing_root_is_refused():
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        create_view_app(Path("/nonexistent/websailor-view"))


def test_the_index_in_a_browser_follows_a_run_being_written(runs_root: Path, page):
    from browser import serve_view

    with serve_view(runs_root) as url:
        page.goto(url + "/")
        assert page.locator("#runs tbody tr").count() == 3
        (runs_root / "later").mkdir()
        (runs_root / "later" / "rl_log.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.5}) + "\n")
        page.wait_for_selector('#runs tr[data-rel="later"]', timeout=15000)
        assert "1 steps, last reward 0.500" in page.locator('#runs tr[data-rel="later"]').inner_text()
