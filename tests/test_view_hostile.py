"""The viewer against hostile or messy run folders (from a break-it review): run files that are
symbolic links out of their folder, named pipes, names that are not UTF-8, files shaped as no
reader expects, in-place edits, long names in an export, and Host headers on IPv6 loopback."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from websailor.view import create_view_app
from websailor.view.context import relative
from websailor.view.export import export_site, page_file

SECRET = "SECRET-KEY-123"


def _traj(qid: str, question: str | None = None, rollout: int = 0) -> dict:
    question = question or f"Which river is {qid}?"
    return {
        "id": qid,
        "rollout": rollout,
        "question": question,
        "answer": {"answer": "Nile", "aliases": [], "parts": []},
        "prediction": "Nile",
        "termination": "answer",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": question}],
    }


def _eval_run(folder: Path, records: list[dict]) -> Path:
    folder.mkdir(parents=True)
    (folder / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "summary.json").write_text(json.dumps({"k": 1, "avg_at_k": 1.0, "pass_at_k": 1.0}))
    return folder


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file of this machine outside the viewed folder."""
    (tmp_path / "elsewhere").mkdir()
    creds = tmp_path / "elsewhere" / "creds.json"
    creds.write_text(json.dumps({"aws_secret_access_key": SECRET}))
    (tmp_path / "elsewhere" / "trajectories.jsonl").write_text(json.dumps(_traj("x", f"{SECRET}?")) + "\n")
    return creds


def test_run_files_that_lead_out_of_their_folder_are_not_read_nor_exported(tmp_path: Path, outside: Path):
    root = tmp_path / "root"
    rl = root / "rl"
    rl.mkdir(parents=True)
    (rl / "rl_log.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.5}) + "\n")
    (rl / "rl_settings.json").symlink_to(outside)
    (root / "sft").mkdir()
    (root / "sft" / "sft_summary.json").symlink_to(outside)
    (root / "ev").mkdir()
    (root / "ev" / "scores.jsonl").write_text("")
    (root / "ev" / "trajectories.jsonl").symlink_to(outside.parent / "trajectories.jsonl")
    client = TestClient(create_view_app(root))
    page = client.get("/rl/rl")
    assert page.status_code == 200 and SECRET not in page.text  # the curves still show
    assert "rl/rl_settings.json is a symbolic link out of its run folder" in page.text
    for url in ("/sft/sft", "/eval/ev", "/eval/ev?question=x"):
        r = client.get(url)
        assert r.status_code == 404 and "symbolic link out of its run folder" in r.text and SECRET not in r.text, url
    export_site(root, tmp_path / "site")
    leaked = [p for p in (tmp_path / "site").rglob("*.html") if SECRET in p.read_text(encoding="utf-8")]
    assert leaked == []
    assert str(tmp_path) not in (tmp_path / "site" / ".websailor-view-export").read_text()


def test_a_named_pipe_does_not_hang_the_index(tmp_path: Path):
    _eval_run(tmp_path / "ev", [_traj("a")])
    os.mkfifo(tmp_path / "pipe.jsonl")
    os.mkfifo(tmp_path / "ev" / "scores.jsonl")  # a run file that is no regular file
    answers: dict[str, int] = {}

    def fetch() -> None:
        client = TestClient(create_view_app(tmp_path))
        answers["index"] = client.get("/").status_code
        answers["eval"] = client.get("/eval/ev").status_code

    worker = threading.Thread(target=fetch, daemon=True)
    worker.start()
    worker.join(20)
    if worker.is_alive():  # unblock the open, or the test process never exits
        os.close(os.open(tmp_path / "pipe.jsonl", os.O_WRONLY | os.O_NONBLOCK))
    assert answers == {"index": 200, "eval": 200}


def test_names_that_are_not_utf8_are_skipped_and_the_rest_served(tmp_path: Path):
    root = tmp_path / "r\udcfe"  # how Python holds the file name bytes b"r\xfe"
    _eval_run(root / "ev", [_traj("a")])
    (root / "q\udcfe.jsonl").write_text(json.dumps(_traj("b")) + "\n")
    client = TestClient(create_view_app(root))
    index = client.get("/")
    assert index.status_code == 200 and 'href="/eval/ev"' in index.text and "r\ufffd" in index.text
    assert [r["rel"] for r in client.get("/api/runs").json()] == ["ev"]
    assert client.get("/eval/ev").status_code == 200


def test_summaries_of_the_wrong_shape_show_what_they_can(tmp_path: Path):
    sft = tmp_path / "sft"
    sft.mkdir()
    summary = {"memory": [1], "counts": "x", "data": 5, "loss_history": 5, "final_loss": 0.5}
    (sft / "sft_summary.json").write_text("\ufeff" + json.dumps(summary))  # with a byte-order mark
    client = TestClient(create_view_app(tmp_path))
    r = client.get("/sft/sft")
    assert r.status_code == 200 and "final_loss" in r.text
    rl = tmp_path / "rl"
    rl.mkdir()
    (rl / "rl_log.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.5}) + "\n")
    (rl / "rl_settings.json").write_text("[1, 2]")
    r = client.get("/rl/rl")
    assert r.status_code == 200 and 'id="rl-settings-error"' in r.text and "rl_settings.json" in r.text
    (rl / "rl_log.jsonl").write_text(json.dumps({"step": True}) + "\n")
    r = client.get("/api/rl/rl")
    assert r.status_code == 422 and r.json()["error"].startswith("rl/rl_log.jsonl line 1 is not an RL step record")
    (tmp_path / "ev").mkdir()
    (tmp_path / "ev" / "trajectories.jsonl").write_text(json.dumps(_traj("a")) + "\n")
    (tmp_path / "ev" / "summary.json").write_text(json.dumps({"k": True}))
    run = next(r for r in client.get("/api/runs").json() if r["rel"] == "ev")
    assert "not an eval summary" in run["figures"]["error"]
    assert client.get("/rl/ev").status_code == 404 and client.get("/sft/rl").status_code == 404  # not such runs


def test_a_qa_item_of_the_wrong_shape_names_its_line_and_field(tmp_path: Path):
    good = {
        "id": "a",
        "question": "Which river?",
        "answer": "Nile",
        "topology_hash": "t",
        "has_cycle": False,
        "constraints": [],
        "uncertainty": [],
        "subgraph": {"nodes": [{"id": "Nile"}], "edges": []},
        "procedure": [],
        "seed": 0,
        "attempt": 0,
        "split": "test",
    }
    bad = {
        **good,
        "id": "b",
        "subgraph": {"nodes": [{"id": "Nile"}], "edges": [{"src": "Nile", "dst": "x", "evidence": 5}]},
    }
    (tmp_path / "qa.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    client = TestClient(create_view_app(tmp_path))
    for url in ("/qa/qa.jsonl", "/qa/qa.jsonl?item=a"):
        r = client.get(url)
        assert r.status_code == 422, url
        assert "qa.jsonl line 2 is not a QA item: field &#39;subgraph.edges.0.evidence&#39; is a number" in r.text


def test_a_page_that_breaks_is_an_error_page_and_the_export_goes_on(tmp_path: Path, monkeypatch):
    from websailor.view import sft_views

    sft = tmp_path / "sft"
    sft.mkdir()
    (sft / "sft_summary.json").write_text(json.dumps({"final_loss": 0.5}))

    def broken(run, summary):
        raise TypeError("unsupported operand")

    monkeypatch.setattr(sft_views, "_sft_losses", broken)
    r = TestClient(create_view_app(tmp_path), raise_server_exceptions=False).get("/sft/sft")
    assert r.status_code == 500 and "This page cannot be shown (TypeError: unsupported operand)" in r.text
    assert export_site(tmp_path, tmp_path.parent / (tmp_path.name + "-site")) == 2
    assert "This page broke" in (tmp_path.parent / (tmp_path.name + "-site") / "sft" / "sft.html").read_text()


def test_an_edit_in_place_that_keeps_the_size_is_shown(tmp_path: Path):
    path = _eval_run(tmp_path / "ev", [_traj("a", "Which place is first?"), _traj("b")]) / "trajectories.jsonl"
    client = TestClient(create_view_app(tmp_path))
    assert "Which place is first?" in client.get("/eval/ev").text
    text = path.read_text().replace("Which place", "WHICH PLACE")
    with path.open("r+") as fh:  # the same file, the same size, other bytes
        fh.write(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    page = client.get("/eval/ev").text
    assert "WHICH PLACE is first?" in page and "Which place" not in page


def test_rollouts_edited_in_place_at_the_same_size_are_read_again(tmp_path: Path):
    run = tmp_path / "rl"
    run.mkdir()
    (run / "rl_settings.json").write_text('{"group_size": 1}')
    rec = {"step": 1, "id": "a", "rollout": 0, "question": "Q?", "messages": [], "prediction": "aaaa"}
    rec.update(reward=1.0, advantage=0.0, in_loss=True)
    path = run / "rollouts.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    client = TestClient(create_view_app(tmp_path))
    assert "aaaa" in client.get("/rl/rl?step=1").text
    with path.open("r+") as fh:
        fh.write(json.dumps({**rec, "prediction": "bbbb"}) + "\n")
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    page = client.get("/rl/rl?step=1").text
    assert "bbbb" in page and "aaaa" not in page
    missing = client.get("/rl/rl?step=9")
    assert (
        missing.status_code == 404
        and "rl has no rollouts of step 9 in rollouts.jsonl (recorded: step 1)" in missing.text
    )


def test_an_exported_page_with_a_long_name_is_still_html():
    name = page_file("/eval/ev", "question=" + "x" * 400)
    assert name.endswith(".html") and len(name.rsplit("/", 1)[1].encode()) <= 210
    assert page_file("/static/view.js", is_html=False) == "static/view.js"


def test_only_whole_paths_of_the_root_are_left_out(tmp_path: Path):
    root = tmp_path / "r"
    root.mkdir()
    real = str(root.resolve())
    text = f"Files at {real}/x and {real}ust/y, https://e.org{real}/ok and {real}: done"
    assert relative(text, root) == f"Files at x and {real}ust/y, https://e.org{real}/ok and .: done"


def test_on_ipv6_loopback_another_host_is_refused(tmp_path: Path):
    _eval_run(tmp_path / "ev", [_traj("a")])
    client = TestClient(create_view_app(tmp_path, allowed_hosts=["127.0.0.1", "localhost", "::1"]))
    assert client.get("/api/runs", headers={"Host": "[::1]:8765"}).status_code == 200
    assert client.get("/api/runs", headers={"Host": "localhost:8765"}).status_code == 200
    for host in ("evil.example", "evil.example:8765", "[::2]:8765", "[", ""):
        assert client.get("/api/runs", headers={"Host": host}).status_code == 400, host


def test_api_errors_are_json_and_name_files_under_the_root(tmp_path: Path):
    client = TestClient(create_view_app(tmp_path))
    r = client.get("/api/rl/nothing")
    assert r.status_code == 404 and r.json() == {"error": "'nothing' is not an RL run folder"}
    r = client.get("/eval/ev?page=%EF%BC%91")  # a full-width digit is not a page number
    assert r.status_code in (404, 422)
    _eval_run(tmp_path / "ev", [_traj("a")])
    r = client.get("/eval/ev?page=%EF%BC%91")
    assert r.status_code == 422 and "not a whole number" in r.text


def test_the_cli_refuses_a_device(tmp_path: Path):
    from typer.testing import CliRunner

    from websailor.cli import app

    res = CliRunner().invoke(app, ["view", "/dev/null", "--no-browser"])
    assert res.exit_code == 2 and "is neither a file nor a folder" in res.stderr
