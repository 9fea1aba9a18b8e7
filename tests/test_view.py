"""The viewer's core: finding runs, keeping paths inside the root, the index (in a real
browser too), and what bad input gets."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fakes import serving
from fastapi import Request
from fastapi.responses import PlainTextResponse
from fastapi.testclient import TestClient

from websailor.errors import InputFormatError, InvalidArgumentError
from websailor.view import create_view_app, find_runs, resolve
from websailor.view.pages import file_index


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


def test_a_running_eval_is_an_eval_and_a_run_output_is_a_trajectories_file(tmp_path: Path):
    (tmp_path / "running").mkdir()  # eval's first rollouts: the gold record travels with each
    (tmp_path / "running" / "trajectories.jsonl").write_text(json.dumps(_traj("a")) + "\n")
    (tmp_path / "out").mkdir()  # `websailor run --out out/trajectories.jsonl`: the answer as given
    (tmp_path / "out" / "trajectories.jsonl").write_text(json.dumps(_traj("b", answer="Nile")) + "\n")
    assert {r.rel: r.kind for r in find_runs(tmp_path)} == {"running": "eval", "out/trajectories.jsonl": "trajectories"}
    html = TestClient(create_view_app(tmp_path)).get("/").text
    assert 'href="/eval/running"' in html and "running: no summary yet" in html


def test_a_run_size_leaves_out_the_saved_model(tmp_path: Path):
    (tmp_path / "rl_log.jsonl").write_text(json.dumps({"step": 1}) + "\n")
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 100_000)
    (tmp_path / "training_args.bin").write_bytes(b"\0" * 5_000)
    (run,) = find_runs(tmp_path)
    assert run.kind == "rl" and run.bytes == (tmp_path / "rl_log.jsonl").stat().st_size


def test_a_file_that_is_not_a_run_says_why(tmp_path: Path):
    from websailor.view.discover import not_a_run

    notes = tmp_path / "notes.jsonl"
    notes.write_text('{"hello": 1, "world": 2}\n')
    assert not_a_run(notes) == (
        "notes.jsonl is not a run: its first record is neither a trajectory (messages, termination) nor a "
        "synthesized item (question with subgraph or split); it has hello, world"
    )
    (tmp_path / "empty.jsonl").write_text("")
    assert "its first line is empty" in not_a_run(tmp_path / "empty.jsonl")
    (tmp_path / "x.csv").write_text("a,b\n")
    assert "(.jsonl)" in not_a_run(tmp_path / "x.csv")
    page = TestClient(create_view_app(notes)).get("/").text
    assert 'id="notice"' in page and "notes.jsonl is not a run" in page and str(tmp_path) not in page


def test_error_pages_name_files_under_the_root_not_where_it_lives(tmp_path: Path):
    (tmp_path / "ev").mkdir()
    (tmp_path / "ev" / "trajectories.jsonl").write_text(json.dumps(_traj("a")) + "\n" + '{"id": "b"}\n')
    (tmp_path / "ev" / "summary.json").write_text('{"k": 1}')
    response = TestClient(create_view_app(tmp_path)).get("/eval/ev")
    assert response.status_code == 422
    assert "ev/trajectories.jsonl line 2" in response.text and str(tmp_path) not in response.text


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
    assert "1 step, last reward 0.250" in html
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
        assert "1 step, last reward 0.500" in page.locator('#runs tr[data-rel="later"]').inner_text()
        # an eval still running its rollouts is an eval from its first line, and becomes graded
        (runs_root / "running").mkdir()
        (runs_root / "running" / "trajectories.jsonl").write_text(json.dumps(_traj("r")) + "\n")
        row = page.locator('#runs tr[data-rel="running"]')
        row.wait_for(timeout=15000)
        assert "eval" in row.inner_text() and "running: no summary yet" in row.inner_text()
        assert row.locator("a").get_attribute("href") == "/eval/running"
        # a run that grows is updated, and one deleted leaves the index
        with (runs_root / "later" / "rl_log.jsonl").open("a") as fh:
            fh.write(json.dumps({"step": 2, "reward/mean": 0.75}) + "\n")
        page.wait_for_function(
            """() => document.querySelector('#runs tr[data-rel="later"]').innerText.includes('2 steps, last reward 0.750')""",
            timeout=15000,
        )
        (runs_root / "t.jsonl").unlink()
        page.wait_for_selector('#runs tr[data-rel="t.jsonl"]', state="detached", timeout=15000)
        assert page.locator("#runs tbody tr").count() == 4


# --- bad input in the index ------------------------------------------------------------------


def test_the_index_names_the_bad_file_and_keeps_listing_the_others(runs_root: Path):
    (runs_root / "badsum").mkdir()
    (runs_root / "badsum" / "trajectories.jsonl").write_text(json.dumps(_traj("c")) + "\n")
    (runs_root / "badsum" / "summary.json").write_text('{"k": 1, "avg_at')  # truncated
    (runs_root / "nofields").mkdir()
    (runs_root / "nofields" / "trajectories.jsonl").write_text(json.dumps(_traj("d")) + "\n")
    (runs_root / "nofields" / "summary.json").write_text("[1, 2]")
    (runs_root / "rlbad").mkdir()
    (runs_root / "rlbad" / "rl_log.jsonl").write_text(json.dumps({"step": 1}) + "\n" + '{"step": 2, "rew\n')
    (runs_root / "rlhalf").mkdir()  # a run killed mid-write: its complete steps count
    (runs_root / "rlhalf" / "rl_log.jsonl").write_text(
        json.dumps({"step": 1, "reward/mean": 0.5}) + '\n{"step": 2, "rew'
    )
    (runs_root / "rlnostep").mkdir()
    (runs_root / "rlnostep" / "rl_log.jsonl").write_text(json.dumps({"reward/mean": 1.0}) + "\n")
    client = TestClient(create_view_app(runs_root))
    r = client.get("/")
    assert r.status_code == 200
    figures = {x["rel"]: x["figures"] for x in client.get("/api/runs").json()}
    assert figures["badsum"]["error"].startswith("badsum/summary.json is not JSON")
    assert figures["nofields"]["error"] == "nofields/summary.json is not an eval summary (no integer 'k')"
    assert figures["rlbad"]["error"].startswith("rlbad/rl_log.jsonl line 2 is not JSON")
    assert figures["rlnostep"]["error"].startswith("rlnostep/rl_log.jsonl line 1 is not an RL step record")
    assert str(runs_root) not in r.text  # names relative to the root
    assert "badsum/summary.json is not JSON" in r.text and "rlbad/rl_log.jsonl line 2" in r.text
    assert figures["ev"]["avg_at_k"] == 0.5 and figures["nested/rl"]["reward"] == 0.25  # the others still listed
    assert figures["rlhalf"] == {"steps": 1, "reward": 0.5, "accuracy": None}


def test_a_1_gb_file_does_not_stop_the_index(runs_root: Path):
    import time

    with (runs_root / "big.jsonl").open("w") as f:  # sparse: a valid first line, then 1 GB of holes
        f.write(json.dumps(_traj("big")) + "\n")
        f.truncate(1 << 30)
    (runs_root / "bigrl").mkdir()
    with (runs_root / "bigrl" / "rl_log.jsonl").open("w") as f:
        f.write(json.dumps({"step": 1, "reward/mean": 0.5}) + "\n")
        f.truncate(1 << 30)
    (runs_root / "bigsum").mkdir()
    (runs_root / "bigsum" / "trajectories.jsonl").write_text(json.dumps(_traj("e")) + "\n")
    with (runs_root / "bigsum" / "summary.json").open("w") as f:
        f.truncate(1 << 30)
    client = TestClient(create_view_app(runs_root))
    t = time.perf_counter()
    runs = {x["rel"]: x for x in client.get("/api/runs").json()}
    assert time.perf_counter() - t < 2.0  # nothing read whole
    assert runs["big.jsonl"]["kind"] == "trajectories" and runs["big.jsonl"]["bytes"] == 1 << 30
    assert runs["bigrl"]["figures"]["error"] == "bigrl/rl_log.jsonl: 1.0 GB, too large for the index"
    assert runs["bigsum"]["figures"]["error"] == "bigsum/summary.json: 1.0 GB, too large for a summary"
    html = client.get("/").text
    assert "1.0 GB" in html and "Avg@1 50.0" in html


# --- paths in real HTTP requests ---------------------------------------------------------------


def test_paths_in_raw_http_requests_cannot_leave_the_root(runs_root: Path, tmp_path_factory):
    import httpx

    from websailor.view.context import context

    outside = tmp_path_factory.mktemp("outside")
    (outside / "secret.txt").write_text("TOP-SECRET")
    os.symlink(outside, runs_root / "link")
    os.symlink(outside / "secret.txt", runs_root / "ev" / "file-link.txt")
    app = create_view_app(runs_root)

    @app.get("/probe/{rel:path}")
    async def probe(rel: str, request: Request) -> PlainTextResponse:  # reads a file the way the views do
        return PlainTextResponse(context(request).path(rel).read_text())

    escape = outside.name + "/secret.txt"
    targets = [
        f"/probe/../{escape}",
        f"/probe/ev/../../{escape}",
        f"/probe/%2e%2e/{escape}",
        f"/probe/%2E%2E%2F{escape.replace('/', '%2F')}",
        f"/probe/ev%2F..%2F..%2F{escape}",
        f"/probe/{outside}/secret.txt",
        f"/probe/%2F{str(outside).lstrip('/')}/secret.txt",
        "/probe/link/secret.txt",
        "/probe/ev/file-link.txt",
        "/probe/ev/%00x",
        "/static/../app.py",
        "/static/%2e%2e/app.py",
        "/static/..%2Fapp.py",
    ] + [f"/{kind}/..%2F{escape}" for kind in ("eval", "rl", "sft", "trajectories", "qa", "compare")]
    with serving(app) as url, httpx.Client() as client:
        ok = client.get(url + "/probe/ev/summary.json")
        assert ok.status_code == 200 and '"avg_at_k"' in ok.text  # the probe reads inside the root
        for target in targets:
            r = client.get(url + "/", extensions={"target": target.encode()})
            assert r.status_code in (400, 404, 422), (target, r.status_code)
            assert "TOP-SECRET" not in r.text and "HERE = Path" not in r.text, target
            if target.startswith("/probe/"):
                assert "viewed folder" in r.text, target  # refused by resolve, said on the error page


# --- export ------------------------------------------------------------------------------------


def test_export_writes_static_pages_with_relative_links(runs_root: Path, tmp_path_factory):
    from fastapi.responses import HTMLResponse
    from fastapi.routing import APIRoute

    from websailor.view.export import MARKER, export_site

    app = create_view_app(runs_root)
    start = (
        '<html><head><link rel="stylesheet" href="/static/view.css"></head><body>'
        '<a href="/eval/ev?outcome=wrong&amp;page=2#row-3">filtered</a> <a href="/">runs</a>'
        '<a href="/deep/a%20b/c">deep</a> <a href="https://example.org/x">out</a> <a href="#top">top</a>'
        "<a href=/unquoted>bare</a><img src='/static/none.png' alt=\"x &amp; y\"/></body></html>"
    )
    deep = '<html><body data-x="1"><a href="../../eval/ev">up</a> <a href="/">home</a></body></html>'

    async def first() -> HTMLResponse:
        return HTMLResponse(start)

    async def deep_page() -> HTMLResponse:
        return HTMLResponse(deep)

    app.router.routes.insert(0, APIRoute("/", first, methods=["GET"]))
    app.router.routes.insert(0, APIRoute("/deep/{rest:path}", deep_page, methods=["GET"]))
    out = tmp_path_factory.mktemp("export") / "site"
    written = export_site(runs_root, out, app=app)
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    pages = [f for f in files if not f.startswith("static/")]
    assert {
        MARKER,
        "deep/a b/c.html",
        "eval/ev.html",
        "eval/ev@outcome_3Dwrong_26page_3D2.html",
        "index.html",
        "unquoted.html",
    } <= set(pages)
    assert all(f == MARKER or f.endswith(".html") for f in pages)
    static = sorted(p.name for p in (Path(__file__).parents[1] / "websailor" / "view" / "static").iterdir())
    assert [f for f in files if f.startswith("static/")] == [f"static/{name}" for name in static]
    assert written == len(pages) - 1  # every page but the marker
    index = (out / "index.html").read_text()
    assert 'href="static/view.css"' in index and 'href="eval/ev@outcome_3Dwrong_26page_3D2.html#row-3"' in index
    assert 'href="deep/a%20b/c.html"' in index and 'href="https://example.org/x"' in index
    assert 'href="#top"' in index and 'href="index.html"' in index and 'href="unquoted.html"' in index
    assert '<img src="static/none.png" alt="x &amp; y" />' in index
    deep_html = (out / "deep" / "a b" / "c.html").read_text()
    assert 'href="../../eval/ev.html"' in deep_html and 'href="../../index.html"' in deep_html
    # the viewer's own pages are marked static, so view.js does not poll /api/runs
    assert '<body data-static="1">' in (out / "eval" / "ev.html").read_text()


def test_export_of_the_index_and_its_refusals(runs_root: Path, tmp_path_factory):
    from websailor.view.export import MARKER, export_site

    out = tmp_path_factory.mktemp("export") / "site"
    assert export_site(runs_root, out, max_pages=2) == 2  # cut: the index and its first run
    pages = export_site(runs_root, out)  # again over a previous export: replaced
    # the index, the three runs, and the pages they link to (the eval run's questions)
    assert pages > 4 and (out / "eval" / "ev@question_3Da.html").is_file()
    index = (out / "index.html").read_text()
    assert '<body data-static="1">' in index and 'href="nested/rl/../../eval/ev.html"' not in index
    assert {'href="eval/ev.html"', 'href="rl/nested/rl.html"', 'href="trajectories/t.jsonl.html"'} <= set(
        index.replace(">", " ").split()
    )
    assert (out / MARKER).is_file() and (out / "static" / "view.js").is_file()
    for target, says in [
        (runs_root / "exported", "is inside the viewed folder"),
        (runs_root / "ev" / "x", "is inside the viewed folder"),
        (runs_root.parent, "holds the viewed path"),
        (runs_root / "t.jsonl", "is inside the viewed folder"),
    ]:
        with pytest.raises(InvalidArgumentError, match=says):
            export_site(runs_root, target)
    busy = tmp_path_factory.mktemp("busy")
    (busy / "thesis.tex").write_text("mine")
    with pytest.raises(InvalidArgumentError, match="is not empty and holds no earlier export"):
        export_site(runs_root, busy)
    assert (busy / "thesis.tex").read_text() == "mine"
    afile = busy / "thesis.tex"
    with pytest.raises(InvalidArgumentError, match="is a file"):
        export_site(runs_root / "t.jsonl", afile)


def test_an_export_opens_from_file_urls_in_a_browser(runs_root: Path, tmp_path_factory, page):
    from websailor.view.export import export_site

    out = tmp_path_factory.mktemp("export") / "site"
    export_site(runs_root, out)
    page.goto((out / "index.html").as_uri())
    assert page.locator("#runs tbody tr").count() == 3
    assert page.evaluate("getComputedStyle(document.querySelector('header')).backgroundColor") == "rgb(246, 248, 250)"
    page.click("text=nested/rl")
    page.wait_for_load_state()
    assert page.url == (out / "rl" / "nested" / "rl.html").as_uri()
    page.click("header a.home")
    assert page.url == (out / "index.html").as_uri()
    # an eval table: no filter form (it needs the server), its questions open from file://
    page.click("text=ev")
    page.wait_for_selector("#questions")
    assert page.locator("#filters").count() == 0 and "Filters need the viewer's server" in page.inner_text("main")
    page.click('#questions a:text-is("a")')
    page.wait_for_selector(".columns .rollout")
    assert page.locator("#question").inner_text() == "Question a?"
    page.wait_for_timeout(200)  # view.js does not poll /api/runs from file:// (a console error would fail)


# --- the command line --------------------------------------------------------------------------


@pytest.fixture
def fake_serving(monkeypatch) -> list[str]:
    """``uvicorn.Server.run`` returns at once; ``webbrowser.open`` records its URL (and finds no
    browser when the list starts with ``"none"``)."""
    import webbrowser

    import uvicorn

    opened: list[str] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)

    def fake_open(url: str, *args, **kwargs) -> bool:
        opened.append(url)
        return "none" not in opened[:1]

    monkeypatch.setattr(webbrowser, "open", fake_open)
    return opened


def _cli(*args: str):
    from typer.testing import CliRunner

    from websailor.cli import app

    return CliRunner().invoke(app, ["view", *args])


def test_the_cli_prints_the_url_and_opens_a_browser(runs_root: Path, fake_serving: list[str]):
    res = _cli(str(runs_root), "--port", "0")
    assert res.exit_code == 0, res.output
    url = res.stdout.split("websailor view: ")[1].split()[0]
    assert url.startswith("http://127.0.0.1:") and fake_serving == [url]
    assert "WARNING" not in res.stderr
    res = _cli(str(runs_root), "--port", "0", "--no-browser")
    assert res.exit_code == 0 and len(fake_serving) == 1
    fake_serving[:] = ["none"]
    res = _cli(str(runs_root), "--port", "0")
    assert res.exit_code == 0 and "no browser found here: open http://127.0.0.1:" in res.stdout


def test_the_cli_warns_when_it_listens_beyond_loopback(runs_root: Path, fake_serving: list[str]):
    res = _cli(str(runs_root), "--host", "0.0.0.0", "--port", "0", "--no-browser")
    assert res.exit_code == 0, res.output
    assert "WARNING: websailor view is listening on 0.0.0.0, not on 127.0.0.1" in res.stderr
    assert str(runs_root.resolve()) in res.stderr


def test_the_cli_refuses_a_missing_path_and_a_busy_port(runs_root: Path, fake_serving: list[str], tmp_path_factory):
    import socket

    res = _cli("/nonexistent/websailor-runs", "--no-browser")
    assert res.exit_code == 2 and "error: /nonexistent/websailor-runs does not exist" in res.stderr
    res = _cli(str(runs_root / "notes.jsonl"), "--no-browser")
    assert res.exit_code == 2 and "error: notes.jsonl is not a run: its first record is neither" in res.stderr
    assert fake_serving == []
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = _cli(str(runs_root), "--port", str(port), "--no-browser")
    assert res.exit_code == 2 and f"127.0.0.1:{port}" in res.stderr and res.stderr.startswith("error: ")
    out = tmp_path_factory.mktemp("cli-export") / "site"
    res = _cli(str(runs_root), "--export", str(out))
    assert res.exit_code == 0 and f"pages written to {out}" in res.stdout and (out / "index.html").is_file()
    res = _cli(str(runs_root), "--export", str(runs_root / "site"))
    assert res.exit_code == 2 and "is inside the viewed folder" in res.stderr


def test_a_file_that_is_not_a_run_gets_an_error_page_and_the_rest_keeps_serving(runs_root: Path):
    client = TestClient(create_view_app(runs_root))
    for url in ("/trajectories/notes.jsonl", "/qa/notes.jsonl", "/eval/nested", "/no/such/page"):
        r = client.get(url)
        assert r.status_code in (404, 422) and 'id="error-message"' in r.text, url
        assert r.headers["content-type"].startswith("text/html")
    assert client.get("/api/no-such").json() == {"detail": "Not Found"}  # the API stays JSON
    assert client.get("/").status_code == 200 and client.get("/api/runs").status_code == 200


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("/eval/ev?page=abc", "page=abc in the address: not a whole number."),
        ("/eval/ev?outcome=best", "outcome=best in the address: not one of correct, wrong, no_answer"),
        ("/eval/ev?min_calls=-1", "min_calls=-1 in the address: must be at least 0."),
        ("/eval/ev?max_calls=2.5", "max_calls=2.5 in the address: not a whole number."),
        ("/eval/ev?question=a&rollout=x", "rollout=x in the address: not a whole number."),
        ("/eval/ev?question=a&rollout=-1", "rollout=-1 in the address: must be at least 0."),
        ("/eval/ev?rollout=0", "rollout=0 in the address: a rollout is shown with its question=ID."),
        ("/trajectories/t.jsonl?page=1e3", "page=1e3 in the address: not a whole number."),
        ("/rl/nested/rl?step=abc", "step=abc in the address: not a whole number."),
        ("/rl/nested/rl?step=1&group=1&rollout=-1", "rollout=-1 in the address: must be at least 1."),
        ("/rl/nested/rl?step=1&group=0&rollout=1", "group=0 in the address: must be at least 1."),
        ("/rl/nested/rl?step=1&rollout=1", "group (missing) in the address: a rollout is named by its step, group"),
        ("/rl/nested/rl?rollout=2", "step (missing) in the address"),
    ],
)
def test_a_bad_query_value_gets_the_error_page_naming_it(runs_root: Path, url: str, says: str):
    r = TestClient(create_view_app(runs_root)).get(url)
    assert r.status_code == 422 and r.headers["content-type"].startswith("text/html")
    assert "<title>A bad address" in r.text and 'id="error-message"' in r.text
    assert says in r.text.replace("&#39;", "'"), r.text


def test_a_bad_value_of_a_typed_parameter_gets_the_error_page_and_json_under_api(runs_root: Path):
    app = create_view_app(runs_root)

    @app.get("/api/probe")
    def api_probe(n: int) -> dict:
        return {"n": n}

    @app.get("/probe/{n}")
    def probe(n: int) -> dict:
        return {"n": n}

    client = TestClient(app)
    r = client.get("/probe/abc")
    assert r.status_code == 422 and "n=abc in the address: input should be a valid integer" in r.text
    assert "<title>A bad address" in r.text
    r = client.get("/api/probe?n=abc")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "n"]  # FastAPI's JSON
    assert client.get("/api/probe").json()["detail"][0]["type"] == "missing"


def test_on_loopback_a_request_for_another_host_is_refused(runs_root: Path, tmp_path: Path):
    client = TestClient(
        create_view_app(runs_root, allowed_hosts=["127.0.0.1", "localhost"]), base_url="http://127.0.0.1"
    )
    assert client.get("/api/runs").status_code == 200
    assert client.get("/api/runs", headers={"Host": "attacker.example:8765"}).status_code == 400
    os.symlink(tmp_path / "loop2", tmp_path / "loop1")
    os.symlink(tmp_path / "loop1", tmp_path / "loop2")
    for url in ("/eval/loop1", "/eval/" + "a" * 5000, "/rl/loop1"):
        r = client.get(url)
        assert r.status_code == 404 and "<html" in r.text.lower()


def test_a_giant_line_is_refused_without_being_held(tmp_path: Path):
    import resource

    from websailor.jsonio import MAX_LINE_BYTES

    (tmp_path / "ev").mkdir()
    path = tmp_path / "ev" / "trajectories.jsonl"
    path.write_text(json.dumps(_traj("a")) + "\n")
    with path.open("r+b") as fh:
        fh.truncate(MAX_LINE_BYTES * 4)  # sparse: NUL bytes, no newline
    (tmp_path / "ev" / "summary.json").write_text("{}")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Reading 64 MB takes about a second here, longer than a page waits (the page would show
    # the table as still being read): let the background read end before asking for the page.
    with pytest.raises(InputFormatError, match="line 2 is longer than 64 MB"):
        file_index(path, wait_s=120)
    r = TestClient(create_view_app(tmp_path)).get("/eval/ev")
    assert r.status_code == 422 and "line 2 is longer than 64 MB" in r.text
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 3 * (MAX_LINE_BYTES >> 10)


def test_non_finite_figures_and_odd_run_names_keep_the_index_working(tmp_path: Path):
    from urllib.parse import quote

    (tmp_path / "exp#1?x").mkdir()
    (tmp_path / "exp#1?x" / "trajectories.jsonl").write_text(json.dumps(_traj("a")) + "\n")
    (tmp_path / "exp#1?x" / "summary.json").write_text('{"k": 1, "avg_at_k": NaN, "avg_at_k_ci95": [-Infinity, NaN]}')
    (tmp_path / "rl").mkdir()
    (tmp_path / "rl" / "rl_log.jsonl").write_text('{"step": 1, "reward/mean": NaN, "entropy": Infinity}\n')
    client = TestClient(create_view_app(tmp_path))
    api = {r["rel"]: r for r in client.get("/api/runs").json()}
    assert api["exp#1?x"]["figures"]["avg_at_k"] is None and api["rl"]["figures"]["reward"] is None
    html = client.get("/").text
    link = "/eval/" + quote("exp#1?x", safe="/")
    assert f'href="{link}"' in html
    assert client.get(link).status_code == 200
    for url in ("/rl/rl", "/api/rl/rl"):
        assert client.get(url).status_code == 200, url
