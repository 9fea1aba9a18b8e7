"""The viewer's synthesis views over a real QA file (``synthesize`` on the vital corpus), in
TestClient and in a real browser."""

from __future__ import annotations

import json
from html import escape, unescape
from pathlib import Path
from urllib.parse import quote_plus, urlencode

import pytest
from fastapi.testclient import TestClient

from tests.fakes import XSS
from websailor.synth.dataset import read_items
from websailor.view import create_view_app
from websailor.view.synth_views import draw_subgraph, solution_path


@pytest.fixture(scope="module")
def qa_root(vital, tmp_path_factory) -> Path:
    from websailor.synth import load_or_build
    from websailor.synth.dataset import SynthConfig, synthesize

    root = tmp_path_factory.mktemp("qaroot")
    synthesize(load_or_build(vital), root / "qa.jsonl", SynthConfig(n=8, seed=5, levels=(3, 4)), progress=False)
    return root


def _tainted(qa_root: Path, tmp_path: Path) -> tuple[Path, dict]:
    """A copy of the QA file whose first item's question and one node's name try to run script."""
    items = read_items(qa_root / "qa.jsonl")
    it = items[0]
    it["question"] = it["question"] + " " + XSS
    node = next(n for n in it["subgraph"]["nodes"] if n["id"] != it["answer"])
    old, new = node["id"], node["id"] + " " + XSS
    node["id"] = node["title"] = new
    for e in it["subgraph"]["edges"]:
        e["src"], e["dst"] = (new if e["src"] == old else e["src"]), (new if e["dst"] == old else e["dst"])
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps(x) + "\n" for x in items))
    return tmp_path, it


def test_the_file_page_lists_filters_and_charts(qa_root: Path):
    items = read_items(qa_root / "qa.jsonl")
    client = TestClient(create_view_app(qa_root))
    html = client.get("/qa/qa.jsonl").text
    assert html.count("<tr data-id=") == len(items) and 'svg class="bars"' in html
    assert "uncertainty operators" in html and "items per level" in html
    for it in items[:3]:
        assert f'href="/qa/qa.jsonl?item={quote_plus(it["id"])}"' in html
    three = [it for it in items if it["level"] == 3]
    assert client.get("/qa/qa.jsonl?level=3").text.count("<tr data-id=") == len(three)
    one = items[1]
    word = one["answer"].split()[0]
    hit = client.get("/qa/qa.jsonl", params={"q": word}).text
    assert f'data-id="{one["id"]}"' in hit
    split = items[0]["split"]
    assert client.get(f"/qa/qa.jsonl?split={split}").text.count("<tr data-id=") == sum(
        it["split"] == split for it in items
    )


def test_pagination(qa_root: Path, monkeypatch):
    from websailor.view import synth_views

    monkeypatch.setattr(synth_views, "PAGE_SIZE", 3)
    client = TestClient(create_view_app(qa_root))
    html = client.get("/qa/qa.jsonl").text
    assert html.count("<tr data-id=") == 3 and 'href="/qa/qa.jsonl?page=2"' in html and "page 1 of 3" in html
    last = client.get("/qa/qa.jsonl?page=3").text
    assert last.count("<tr data-id=") == 2 and "?page=2" in last


def test_the_item_page_draws_the_graph_and_the_path(qa_root: Path):
    it = read_items(qa_root / "qa.jsonl")[0]
    g = draw_subgraph(it)
    assert len(g["nodes"]) == len(it["subgraph"]["nodes"]) and len(g["edges"]) == len(it["subgraph"]["edges"])
    assert draw_subgraph(it) == g  # the same layout every time
    path = solution_path(it)
    assert path["nodes"][-1] == it["answer"] and len(path["steps"]) == len(it["procedure"])
    assert any(e["on_path"] for e in g["edges"])
    html = TestClient(create_view_app(qa_root)).get("/qa/qa.jsonl", params={"item": it["id"]}).text
    assert html.count('<g class="node') == len(g["nodes"]) and html.count('<g class="edge') == len(g["edges"])
    assert 'class="node answer on-path"' in html
    for e in it["subgraph"]["edges"][:3]:
        assert e["evidence"][:30].replace("&", "&amp;").replace("'", "&#39;").replace('"', "&#34;") in html
    assert html.count("<li>") >= len(it["procedure"]) and it["uncertainty"][0]["op"] in html


def test_bad_input(qa_root: Path, tmp_path: Path):
    lines = (qa_root / "qa.jsonl").read_text().splitlines()
    broken = json.loads(lines[1])
    del broken["subgraph"]
    (tmp_path / "ok.jsonl").write_text(lines[0] + "\n" + lines[2][:50])  # a half last line: skipped
    (tmp_path / "bad.jsonl").write_text(lines[0] + "\n" + json.dumps(broken) + "\n")
    client = TestClient(create_view_app(tmp_path))
    assert client.get("/qa/ok.jsonl").text.count("<tr data-id=") == 1
    r = client.get("/qa/bad.jsonl")
    assert r.status_code == 422 and "bad.jsonl line 2" in r.text and "&#39;subgraph&#39; is missing" in r.text
    assert client.get("/").status_code == 200 and client.get("/qa/ok.jsonl").status_code == 200
    assert client.get("/qa/ok.jsonl?item=nope").status_code == 404
    assert client.get("/qa/..%2Fqa.jsonl").status_code == 404


def test_names_and_questions_are_escaped(qa_root: Path, tmp_path: Path):
    root, it = _tainted(qa_root, tmp_path)
    client = TestClient(create_view_app(root))
    for url in ("/qa/qa.jsonl", f"/qa/qa.jsonl?item={quote_plus(it['id'])}"):
        html = client.get(url).text
        assert "<script>alert" not in html and "<img src=x" not in html and "&lt;script&gt;alert(1)" in html


def test_item_ids_with_slashes_in_a_folder_named_item_open_their_own_item(qa_root: Path, tmp_path: Path):
    items = read_items(qa_root / "qa.jsonl")
    odd = ["a/item/b", "x/../y", "..", "c?d#e f", "Ünï/問"]
    for it, new_id in zip(items, odd):
        it["id"] = new_id
    folder = tmp_path / "item" / "x"
    folder.mkdir(parents=True)
    (folder / "qa.jsonl").write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in items))
    client = TestClient(create_view_app(tmp_path))
    page = client.get("/qa/item/x/qa.jsonl")
    assert page.status_code == 200 and "QA file item/x/qa.jsonl" in page.text
    for it in items[: len(odd)]:
        row = page.text.split(f'<tr data-id="{escape(it["id"])}">')[1]
        link = unescape(row.split('<a href="')[1].split('"')[0])
        assert link == "/qa/item/x/qa.jsonl?" + urlencode({"item": it["id"]})
        item = client.get(link)
        assert item.status_code == 200 and f"QA item {escape(it['id'])}</h1>" in item.text
        shown = unescape(item.text.split('id="qa-question">')[1].split("</td>")[0])
        assert shown == it["question"]
        assert 'href="/qa/item/x/qa.jsonl">all items</a>' in item.text


def test_in_a_browser_the_item_page_draws_the_graph_and_runs_no_script(qa_root: Path, tmp_path: Path, page):
    from browser import serve_view

    root, it = _tainted(qa_root, tmp_path)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    with serve_view(root) as url:
        page.goto(url + "/qa/qa.jsonl")
        assert XSS in page.locator(f'tr[data-id="{it["id"]}"] td').nth(1).text_content()
        page.click(f'a[href="/qa/qa.jsonl?item={quote_plus(it["id"])}"]')
        page.wait_for_selector("#qa-graph g.node")
        assert page.locator("#qa-graph g.node").count() == len(it["subgraph"]["nodes"])
        assert page.locator("#qa-graph g.edge line").count() == len(it["subgraph"]["edges"])
        labels = page.locator("#qa-graph text.node-label").all_text_contents()
        assert any(XSS in t for t in labels) and it["answer"] in labels
        assert XSS in page.locator("#qa-question").text_content()
        box = page.locator("#qa-graph").bounding_box()
        assert box["width"] > 300 and box["height"] > 200
    assert dialogs == []


def test_a_truncated_last_line_is_named_and_the_complete_items_shown(qa_root: Path, tmp_path: Path):
    lines = (qa_root / "qa.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "qa.jsonl").write_text("".join(lines) + lines[0][:60])  # a synthesis killed mid-write
    html = TestClient(create_view_app(tmp_path)).get("/qa/qa.jsonl").text
    assert html.count("<tr data-id=") == len(lines) and 'id="qa-tail-note"' in html
    assert f"The last line of qa.jsonl (line {len(lines) + 1}, 60 bytes) is unfinished" in html
    (tmp_path / "qa.jsonl").write_text("".join(lines))
    assert 'id="qa-tail-note"' not in TestClient(create_view_app(tmp_path)).get("/qa/qa.jsonl").text
