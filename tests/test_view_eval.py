"""The viewer's eval views: the question table and its filters and pages, a question's rollouts
as timelines, two runs compared, a trajectories file; over real eval outputs made by the
library (a scripted model over the local tools of the vital corpus), in a real browser too."""

from __future__ import annotations

import json
import re
import shutil
import time
from html import escape, unescape
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.fakes import XSS, HostileTool, ScriptedModel, call
from websailor.agent.loop import Agent, AgentConfig
from websailor.eval.harness import EvalConfig, evaluate
from websailor.judge import Gold, load_judge
from websailor.models.base import Generation
from websailor.questions import Question
from websailor.view import create_view_app
from websailor.view.pages import file_index

ITEMS = [
    Question("paris", "Which city is the capital of France?", Gold.parse("Paris")),
    Question("nile", "Which river flows through Cairo?", Gold.parse("Nile")),
    Question("xss", f"{XSS} Which planet is red?", Gold.parse("Mars")),
]
#: Each run's replies per question: base solves paris, rl solves nile; both solve xss.
ANSWERS = {
    "base": {"paris": "Paris", "nile": "Amazon", "xss": "Mars"},
    "rl": {"paris": "Lyon", "nile": "Nile", "xss": "Mars"},
}


class TokenModel(ScriptedModel):
    """A scripted model that also returns sampled token ids (one per word)."""

    def generate(self, conversations, params):
        return [
            Generation(g.text, g.prompt_tokens, g.completion_tokens, "stop", list(range(len(g.text.split()))))
            for g in super().generate(conversations, params)
        ]


def _agent(vital, run: str) -> Agent:
    from websailor.tools.local import build_local_tools

    tools = build_local_tools(vital)
    tools["search"] = HostileTool(tools["search"], lead=True)
    thought = "\n".join(f"Line {i} of a long thought about where to look." for i in range(8))

    def reply(messages):
        q = next(it for it in ITEMS if it.question == messages[1]["content"])
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn == 0:
            return call("search", query=[q.question[-30:]])
        if turn == 1 and q.id == "nile":
            return f"<think>{thought}</think>\n" + call("search", query=["Nile"]).split("</think>\n", 1)[1]
        return f"<think>done</think><answer>{ANSWERS[run][q.id]}</answer>"

    return Agent(TokenModel(reply), tools, AgentConfig(max_calls=4))


@pytest.fixture(scope="module")
def root(vital, tmp_path_factory) -> Path:
    """Two eval runs of the same questions (k = 2) and a trajectories file."""
    root = tmp_path_factory.mktemp("viewroot")
    for run in ("base", "rl"):
        evaluate(
            ITEMS,
            _agent(vital, run),
            load_judge("em"),
            root / run,
            EvalConfig(rollouts=2, concurrency=1),
            progress=False,
        )
    shutil.copy(root / "base" / "trajectories.jsonl", root / "traj.jsonl")
    return root


@pytest.fixture(scope="module")
def client(root: Path) -> TestClient:
    return TestClient(create_view_app(root))


def _rows(html: str) -> list[str]:
    return re.findall(r'<tr data-id="([^"]+)"', html)


def test_the_eval_table_shows_a_row_per_question_with_coloured_cells(client: TestClient):
    r = client.get("/eval/base")
    assert r.status_code == 200, r.text
    html = r.text
    assert _rows(html) == ["paris", "nile", "xss"]
    assert html.count('<a class="cell correct"') == 4 and html.count('<a class="cell wrong"') == 2
    assert "termination: answer\nanswer: Amazon" in html  # the hover title
    assert "Pass@2 66.7" in html and "solved" in html and "not solved" in html
    assert '<p class="grounding" id="grounding">Grounding: 100.0% of 6 answers appear in what' in html
    assert (
        'href="/eval/base?question=paris"' in html and 'href="/eval/base?question=paris&amp;rollout=1#step-1"' in html
    )
    # escaped, never markup
    assert XSS not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # the compare form offers the other eval run
    assert '<option value="rl">rl</option>' in html and 'action="/compare"' in html


@pytest.mark.parametrize(
    ("query", "ids"),
    [
        ("outcome=wrong", ["nile"]),
        ("outcome=correct", ["paris", "xss"]),
        ("termination=answer", ["paris", "nile", "xss"]),
        ("termination=max_calls", []),
        ("min_calls=2", ["nile"]),
        ("max_calls=1", ["paris", "xss"]),
        ("q=cairo", ["nile"]),
        ("q=AMAZON", ["nile"]),  # a prediction
        ("q=mars", ["xss"]),  # a gold answer
        ("outcome=wrong&min_calls=3", []),  # one rollout must match every rollout filter
    ],
)
def test_filters(client: TestClient, query: str, ids: list[str]):
    html = client.get(f"/eval/base?{query}").text
    assert _rows(html) == ids
    if not ids:
        assert "No question matches" in html


def test_pages_of_fifty_questions(tmp_path: Path, root: Path):
    rec = json.loads((root / "traj.jsonl").read_text().splitlines()[0])
    lines = [json.dumps({**rec, "id": f"q{i:03d}", "rollout": 0}) for i in range(120)]
    (tmp_path / "many.jsonl").write_text("\n".join(lines) + "\n")
    c = TestClient(create_view_app(tmp_path))
    first = c.get("/trajectories/many.jsonl").text
    assert _rows(first)[0] == "q000" and len(_rows(first)) == 50 and "page 1 of 3" in first
    assert _rows(c.get("/trajectories/many.jsonl?page=3").text) == [f"q{i:03d}" for i in range(100, 120)]
    assert _rows(c.get("/trajectories/many.jsonl?page=99").text)[0] == "q100"  # clamped
    filtered = c.get("/trajectories/many.jsonl?q=q0").text  # q000..q099: the pager keeps the filter
    assert "page 1 of 2" in filtered and 'href="/trajectories/many.jsonl?q=q0&amp;page=2"' in filtered
    assert 'id="pager"' not in c.get("/trajectories/many.jsonl?q=q01").text


def test_the_trajectories_view_has_no_grades(client: TestClient):
    html = client.get("/trajectories/traj.jsonl").text
    assert _rows(html) == ["paris", "nile", "xss"]
    assert html.count('<a class="cell ungraded"') == 6 and "Pass@" not in html.split("<table")[1]
    q = client.get("/trajectories/traj.jsonl?question=nile")
    assert q.status_code == 200 and "not graded" in q.text and "Amazon" in q.text


def test_the_question_view_shows_the_rollouts_as_timelines(client: TestClient):
    html = client.get("/eval/base?question=nile").text
    assert html.count('<section class="rollout wrong"') == 2
    assert 'id="r0-step-1"' in html and 'id="r1-step-3"' in html and 'href="#r0-step-2"' in html
    assert '<details class="thought">' in html  # the long thought is collapsed
    assert "Line 7 of a long thought" in html
    assert '<b class="tool">search</b>' in html and "&#34;query&#34;: [\n    &#34;Nile&#34;" in html
    assert re.search(r"≈ \d+ tokens \(estimate: characters / 4\)", html)
    assert "judge em</span> wrong" in html and "<b>Nile</b>" in html and '<b class="prediction">Amazon</b>' in html
    assert re.search(r"tool \d+\.\d\d s", html) and "tokens:" in html and " s model" in html
    assert re.search(r"\d+ sampled token ids</summary><pre class=\"text\">0 1 2", html)
    assert "assistant text: trained tokens" in html and 'class="trained"' in html and "observation untrained" in html
    assert XSS not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    # grounding per rollout (websailor.eval.grounding): the search for the question's end listed the
    # Nile page, and the wrong answer Amazon was read before it was given
    assert html.count('<p class="grounding">') == 2
    assert "read before giving it; a search listed the answer&#39;s page: not visited, not the answer given" in html
    # the rl run searched "Nile" before any observation named it: its answer is from memory
    rl = client.get("/eval/rl?question=nile").text
    assert "appears in nothing the agent read before giving it (memory, or made up)" in rl and ", picked;" in rl
    alone = client.get("/eval/base?question=nile&rollout=1").text
    assert alone.count('<section class="rollout') == 1 and 'id="step-1"' in alone and 'id="all-rollouts"' in alone


def test_a_question_id_with_odd_characters_round_trips(tmp_path: Path, root: Path):
    rec = json.loads((root / "traj.jsonl").read_text().splitlines()[0])
    (tmp_path / "t.jsonl").write_text(json.dumps({**rec, "id": "a/b c?#"}) + "\n")
    c = TestClient(create_view_app(tmp_path))
    html = c.get("/trajectories/t.jsonl").text
    assert 'href="/trajectories/t.jsonl?question=a%2Fb+c%3F%23"' in html
    assert c.get("/trajectories/t.jsonl?question=a%2Fb+c%3F%23").status_code == 200
    assert c.get("/trajectories/t.jsonl?question=nope").status_code == 404


def test_the_root_itself_as_an_eval_run(root: Path):
    c = TestClient(create_view_app(root / "base"))
    html = c.get("/eval").text
    assert _rows(html) == ["paris", "nile", "xss"] and 'href="/eval?question=paris"' in html
    assert c.get("/eval?question=paris").status_code == 200 and c.get("/eval/").status_code == 200
    assert 'href="/eval"' in c.get("/").text


#: Question ids that the old URL scheme (``/eval/RUN/q/ID``) misrouted or could not reach.
ODD_IDS = {"paris": "x/q/y", "nile": "..", "xss": "."}
MORE_ODD_IDS = {"paris": "a%2Fb", "nile": "a?b#c", "xss": "Ünï/çødé 問 q"}


def _relabel(src: Path, dst: Path, *maps: dict[str, str]) -> None:
    """An eval run at ``dst`` holding, for each id map, ``src``'s questions under the new ids
    (trajectories and scores alike; each question's text led by its new id, so a page shows
    whose it is)."""
    dst.mkdir(parents=True)
    for name in ("trajectories.jsonl", "scores.jsonl"):
        out = []
        for ids in maps:
            for line in (src / name).read_text().splitlines():
                rec = json.loads(line)
                rec["id"] = ids[rec["id"]]
                if "question" in rec:
                    rec["question"] = f"[{rec['id']}] {rec['question']}"
                out.append(json.dumps(rec, ensure_ascii=False) + "\n")
        (dst / name).write_text("".join(out))


def _href(page: str, row_id: str) -> str:
    """The question link of the table row of ``row_id``."""
    row = page.split(f'<tr data-id="{escape(row_id)}">')[1].split("</tr>")[0]
    return unescape(re.search(r'<td><a href="([^"]+)">', row).group(1))


def _question_text(page: str) -> str:
    """The question a question page shows."""
    return unescape(re.search(r'<p class="question" id="question">([^<]*)</p>', page).group(1))


@pytest.fixture(scope="module")
def odd_root(root: Path, tmp_path_factory) -> Path:
    """Eval runs in folders named ``q`` and ``a/q/b`` whose question ids hold ``/q/``, ``/``,
    ``..``, ``.``, percent signs, ``?`` and ``#``, and unicode."""
    odd = tmp_path_factory.mktemp("oddroot")
    _relabel(root / "base", odd / "q", ODD_IDS, MORE_ODD_IDS)
    _relabel(root / "rl", odd / "a" / "q" / "b", ODD_IDS, MORE_ODD_IDS)
    return odd


def test_runs_in_folders_named_q_and_odd_question_ids_each_open_their_own_page(odd_root: Path):
    c = TestClient(create_view_app(odd_root))
    runs = {r["rel"]: r["url"] for r in c.get("/api/runs").json()}
    assert runs == {"q": "/eval/q", "a/q/b": "/eval/a/q/b"}
    ids = [*ODD_IDS.values(), *MORE_ODD_IDS.values()]
    for rel, url in runs.items():
        table = c.get(url)
        assert table.status_code == 200 and f"Evaluation: {rel}</h1>" in table.text
        assert [unescape(i) for i in _rows(table.text)] == ids
        for qid in ids:
            link = _href(table.text, qid)
            assert link.startswith(url + "?question=")
            page = c.get(link)
            assert page.status_code == 200, (rel, qid, page.text[:300])
            assert _question_text(page.text).startswith(f"[{qid}] "), (rel, qid)
            assert page.text.count('<section class="rollout') == 2
            assert re.search(r'<a href="([^"]+)" id="back">', page.text).group(1) == url
    # the folder above a run is no run, and a question id is never read as a path
    assert 'id="error-message"' in c.get("/eval/a").text
    assert c.get("/eval/q", params={"question": "q/x/q/y"}).status_code == 404


def test_compare_runs_in_folders_named_q_with_odd_question_ids(odd_root: Path):
    c = TestClient(create_view_app(odd_root))
    table = c.get("/eval/q").text
    assert '<option value="a/q/b">a/q/b</option>' in table
    page = c.get("/compare", params={"a": "q", "b": "a/q/b"})
    assert page.status_code == 200, page.text[:300]
    links = {
        unescape(qid): unescape(url)
        for url, qid in re.findall(r'<li><a href="([^"]+)">([^<]+)</a>', page.text.split('id="gained"')[1])
    }
    # base solves paris, rl solves nile: B (a/q/b, from rl) gains nile's ids and loses paris's
    assert set(links) == {"..", "a?b#c", "x/q/y", "a%2Fb"}
    for qid, url in links.items():
        q = c.get(url)
        assert q.status_code == 200 and q.text.count('<section class="rollout') == 4, qid
        assert _question_text(q.text).startswith(f"[{qid}] "), qid


def test_compare_two_runs(client: TestClient):
    html = client.get("/compare?a=base&b=rl").text
    gained = html.split('id="gained"')[1].split("</ul>")[0]
    lost = html.split('id="lost"')[1].split("</ul>")[0]
    assert 'href="/compare?a=base&amp;b=rl&amp;question=nile"' in gained and "paris" not in gained
    assert 'href="/compare?a=base&amp;b=rl&amp;question=paris"' in lost
    assert "by both 1, only by A 1, only by B 1, by neither 0" in html
    q = client.get("/compare?a=base&b=rl&question=nile").text
    assert q.count('<section class="rollout') == 4 and "A rollout 0" in q and "B rollout 1" in q
    assert 'id="r3-step-1"' in q
    assert client.get("/compare?a=base").status_code == 404
    assert client.get("/compare?a=base&b=traj.jsonl").status_code == 404
    assert client.get("/compare?a=../x&b=rl").status_code == 404


def test_compare_refuses_runs_of_other_questions(tmp_path: Path, root: Path):
    for run in ("base", "rl"):
        shutil.copytree(root / run, tmp_path / run)
    t = tmp_path / "rl" / "trajectories.jsonl"
    t.write_text(t.read_text().replace("Which river flows through Cairo?", "Which river flows through Rome?"))
    r = TestClient(create_view_app(tmp_path)).get("/compare?a=base&b=rl")
    assert r.status_code == 422 and "different questions" in r.text


def test_bad_input_names_the_file_and_line(tmp_path: Path, root: Path):
    shutil.copytree(root / "base", tmp_path / "ev")
    t = tmp_path / "ev" / "trajectories.jsonl"
    c = TestClient(create_view_app(tmp_path))
    # a truncated last line (a run killed mid-write) is skipped and reported
    lines = t.read_text().splitlines()
    t.write_text("\n".join(lines) + "\n" + lines[0][:40])
    html = c.get("/eval/ev").text
    assert _rows(html) == ["paris", "nile", "xss"] and f"line {len(lines) + 1}" in html and "unfinished" in html
    # a record missing a field: the page names the file and the line
    broken = json.loads(lines[2])
    del broken["question"]
    t.write_text("\n".join([*lines[:2], json.dumps(broken), *lines[3:]]) + "\n")
    r = c.get("/eval/ev")
    assert r.status_code == 422 and "trajectories.jsonl line 3" in r.text and "no question" in r.text
    # the index and the other runs keep working
    (tmp_path / "ok").mkdir()
    shutil.copy(root / "base" / "trajectories.jsonl", tmp_path / "ok" / "trajectories.jsonl")
    shutil.copy(root / "base" / "scores.jsonl", tmp_path / "ok" / "scores.jsonl")
    assert c.get("/").status_code == 200 and c.get("/eval/ok").status_code == 200
    # a scores file that is not one
    (tmp_path / "ok" / "scores.jsonl").write_text('{"x": 1}\n')
    r = c.get("/eval/ok")
    assert r.status_code == 422 and "scores.jsonl line 1 is not a score record" in r.text


def test_a_file_being_appended_to_is_indexed_again(tmp_path: Path, root: Path):
    lines = (root / "traj.jsonl").read_text().splitlines(keepends=True)
    t = tmp_path / "t.jsonl"
    t.write_text("".join(lines[:2]))
    first = file_index(t)
    assert list(first.questions) == ["paris"] and first.rollouts == 2
    with t.open("a") as fh:
        fh.write("".join(lines[2:]))
    again = file_index(t)
    assert list(again.questions) == ["paris", "nile", "xss"] and again.rollouts == 6
    assert file_index(t) is again  # unchanged: cached
    c = TestClient(create_view_app(tmp_path))
    assert c.get("/trajectories/t.jsonl?question=xss").status_code == 200


def test_a_last_record_without_its_newline_then_appended_to_is_indexed_once(tmp_path: Path, root: Path):
    lines = (root / "traj.jsonl").read_text().splitlines()
    t = tmp_path / "t.jsonl"
    t.write_text("\n".join(lines[:3]))  # a whole last record without its newline: kept
    first = file_index(t)
    assert first.rollouts == 3 and first.open_line
    with t.open("a") as fh:  # a resumed run adds the newline, then appends
        fh.write("\n" + "\n".join(lines[3:]) + "\n")
    again = file_index(t)
    assert list(again.questions) == ["paris", "nile", "xss"] and again.rollouts == 6
    assert [r.lineno for q in again.questions.values() for r in q.ordered()] == [1, 2, 3, 4, 5, 6]


def test_a_file_rewritten_larger_in_place_is_indexed_again(tmp_path: Path, root: Path):
    lines = (root / "traj.jsonl").read_text().splitlines(keepends=True)
    t = tmp_path / "t.jsonl"
    t.write_text("".join(lines[:2]))
    assert file_index(t).rollouts == 2
    with t.open("r+") as fh:  # in place: the same inode, larger, earlier bytes changed
        fh.truncate(0)
        fh.write("".join(lines[2:] + lines[:2]))
    again = file_index(t)
    assert list(again.questions) == ["nile", "xss", "paris"] and again.rollouts == 6


def test_a_duplicate_rollout_is_refused_as_score_refuses_it(tmp_path: Path, root: Path):
    lines = (root / "traj.jsonl").read_text().splitlines()
    (tmp_path / "t.jsonl").write_text("\n".join([*lines, lines[0]]) + "\n")
    r = TestClient(create_view_app(tmp_path)).get("/trajectories/t.jsonl")
    assert r.status_code == 422 and "also appears in" in r.text and "line 7" in r.text


def test_in_a_browser_from_the_index_to_a_step_filter_compare_and_nothing_executes(root: Path, page):
    from browser import serve_view

    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    with serve_view(root) as url:
        page.goto(url + "/")
        page.click('#runs a[href="/eval/base"]')
        page.wait_for_selector("#questions")
        assert page.locator("#questions tbody tr").count() == 3
        assert XSS in page.locator('tr[data-id="xss"] .question').inner_text()
        # filter
        page.select_option('select[name="outcome"]', "wrong")
        page.click('#filters button[type="submit"]')
        page.wait_for_url("**outcome=wrong**")
        assert page.locator("#questions tbody tr").count() == 1
        # a question, then a step
        page.click('tr[data-id="nile"] td a')
        page.wait_for_selector(".columns .rollout")
        assert page.locator(".columns .rollout").count() == 2
        page.click('a[href="#r0-step-2"]')
        page.wait_for_selector("#r0-step-2 details.thought[open]", timeout=5000)  # unfolded
        page.click("#r0-step-1 details.observation summary")  # collapsed until opened
        assert XSS in page.locator("#r0-step-1 details.observation pre").inner_text()
        # a step's own URL reopens it
        page.goto(url + "/eval/base?question=nile&rollout=0#step-2")
        page.wait_for_selector("#step-2 details.observation[open]", timeout=5000)
        # compare
        page.goto(url + "/eval/base")
        page.select_option('#compare-form select[name="b"]', "rl")
        page.click('#compare-form button[type="submit"]')
        page.wait_for_selector("#gained")
        page.click('#gained a[href$="&question=nile"]')
        page.wait_for_selector(".columns .rollout")
        assert page.locator(".columns .rollout").count() == 4
        page.goto(url + "/eval/base?question=xss")
        assert XSS in page.locator("#question").inner_text()
        page.wait_for_timeout(200)
    assert dialogs == []


def test_a_large_file_shows_its_first_page_while_the_rest_is_read(tmp_path: Path, root: Path, monkeypatch):
    import websailor.view.eval_views as ev
    import websailor.view.pages as pages

    rec = json.loads((root / "traj.jsonl").read_text().splitlines()[0])
    (tmp_path / "big.jsonl").write_text("".join(json.dumps({**rec, "id": f"q{i}"}) + "\n" for i in range(6000)))
    index_line = pages._index_line

    def slowly(*args):  # a slow disk: the file takes over a second to read
        time.sleep(0.0002)
        index_line(*args)

    monkeypatch.setattr(pages, "_index_line", slowly)
    monkeypatch.setattr(pages, "_CHUNK", 100)
    monkeypatch.setattr(ev, "WAIT_S", 0.0)  # show at once what is read
    c = TestClient(create_view_app(tmp_path))
    html = c.get("/trajectories/big.jsonl").text
    assert 'id="reading"' in html and "this page reloads itself" in html and len(_rows(html)) <= 50
    assert c.get("/trajectories/big.jsonl?question=q5999").status_code == 200  # a question view waits for the file
    html = c.get("/trajectories/big.jsonl").text
    assert 'id="reading"' not in html and "6000 questions" in html


def _exported_link(page: Path, text: str, href_pattern: str) -> list[Path]:
    """The files an exported ``page`` links to through hrefs matching ``href_pattern``."""
    from urllib.parse import unquote

    hrefs = re.findall(rf'href="({href_pattern})"', text)
    return [(page.parent / unquote(unescape(h).split("#")[0])).resolve() for h in hrefs]


def test_an_export_writes_each_question_to_its_own_file(root: Path, tmp_path: Path):
    from websailor.view.export import export_site

    views = tmp_path / "views"
    ids = ({"paris": "a/../b", "nile": "b", "xss": ".."}, {"paris": ".", "nile": "x/q/y", "xss": "a/./b"})
    _relabel(root / "base", views / "ev", *ids)
    _relabel(root / "rl", views / "ev@question_3Db", *ids)  # its page's file would be ev's question b's
    _relabel(root / "base", views / "x", ids[0])
    _relabel(root / "rl", views / "x.html" / "y", ids[0])  # a folder where x's page is a file
    out = tmp_path / "site"
    export_site(views, out)
    index = out / "index.html"
    tables = _exported_link(index, index.read_text().split("<tbody>")[1], r"[^\"]+")
    assert len(tables) == 4 and (out / "_") in tables[3].parents  # x.html/y: under x's page's name
    shown = {}
    for table in tables:
        text = table.read_text()
        rel = re.search(r"<h1>Evaluation: ([^<]+)</h1>", text).group(1)
        rows = [unescape(i) for i in _rows(text)]
        assert len(rows) == (6 if rel.startswith("ev") else 3)
        for qid in rows:
            row = text.split(f'<tr data-id="{escape(qid)}">')[1].split("</tr>")[0]
            (file,) = _exported_link(table, row.split("</td>")[0], r"[^\"]+")
            page = file.read_text()
            assert _question_text(page).startswith(f"[{qid}] "), (rel, qid, file)
            assert f"Question {escape(qid)}</h1>" in page
            shown[(rel, qid)] = file
    assert len(shown) == 18 and len(set(shown.values())) == 18  # every question of every run: its own file
    assert (out / "eval" / "ev@question_3Db.html").is_file()  # one of the two pages keeps the name


def test_an_export_compares_runs_and_their_flipped_questions_from_file_urls(root: Path, tmp_path: Path, page):
    from urllib.parse import unquote

    from websailor.view.export import export_site

    out = tmp_path / "site"
    export_site(root, out)
    table = (out / "eval" / "base.html").read_text()
    assert 'id="filters"' not in table and 'id="compare-form"' not in table and 'id="filters-static"' in table
    assert 'href="../compare@a_3Dbase_26b_3Drl.html"' in table
    for name in (
        "compare@a_3Dbase_26b_3Drl.html",
        "compare@a_3Drl_26b_3Dbase.html",  # the swapped comparison
        "compare@a_3Dbase_26b_3Drl_26question_3Dnile.html",
        "compare@a_3Dbase_26b_3Drl_26question_3Dparis.html",
        "compare@a_3Drl_26b_3Dbase_26question_3Dnile.html",
    ):
        assert (out / name).is_file(), name
    page.goto((out / "index.html").as_uri())
    page.click('#runs a:text-is("base")')
    page.wait_for_selector("#questions")
    assert page.locator("#filters").count() == 0
    page.click('#compare-links a:text-is("rl")')
    page.wait_for_selector("#gained")
    assert unquote(page.url) == unquote((out / "compare@a_3Dbase_26b_3Drl.html").as_uri())
    page.click('#gained a:text-is("nile")')
    page.wait_for_selector(".columns .rollout")
    assert page.locator(".columns .rollout").count() == 4 and "Cairo" in page.locator("#question").inner_text()
    page.click("#back")
    page.wait_for_selector("#lost")
    page.click('#lost a:text-is("paris")')
    page.wait_for_selector(".columns .rollout")
    assert "France" in page.locator("#question").inner_text()


def test_the_compare_links_offer_only_runs_of_the_same_questions(tmp_path: Path, root: Path):
    """An experiment folder holds evaluations of other question sets (a test split beside
    hand-written questions): the eval page offers only the runs ``/compare`` can set beside it."""
    for run in ("base", "rl", "other"):
        shutil.copytree(root / ("base" if run == "other" else run), tmp_path / run)
    for name in ("scores.jsonl", "trajectories.jsonl"):
        f = tmp_path / "other" / name
        text = f.read_text()
        for qid in ("paris", "nile", "xss"):
            text = text.replace(f'"id": "{qid}"', f'"id": "hand-{qid}"')
        assert "hand-paris" in text  # the ids were rewritten
        f.write_text(text)
    c = TestClient(create_view_app(tmp_path))
    html = c.get("/eval/base").text
    assert '<option value="rl">rl</option>' in html and '<option value="other">' not in html
    assert c.get("/compare?a=base&b=other").status_code == 422  # the link it leaves out would fail
    assert '<option value="base">base</option>' not in c.get("/eval/other").text
