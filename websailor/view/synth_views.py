"""Views of synthesized QA files (``websailor synth``).

The file's path is the whole URL path after ``/qa/`` (``/qa`` for the root itself); the item
shown is in the query string, so no file path or item id can be read as another.

- ``GET /qa/{rel}``: the items (id, question, answer, split, level, topology, operators,
  verification), filtered by split, level and text (``?split=&level=&q=&page=``), and the
  figures of ``synth stats`` (:func:`websailor.synth.dataset.dataset_report`) as SVG bar charts.
- ``GET /qa/{rel}?item=ID``: one item's subgraph drawn as SVG (laid out with networkx on the
  server: nodes with their names, edges with their relation, the evidence sentence on hover
  and listed below), its constraints and uncertainty operators, and its solution path,
  highlighted on the graph and listed in order.

Files are read with :func:`websailor.synth.dataset.read_items_and_tail` (the checks of
:func:`websailor.synth.dataset.read_items`, its error with the file and line), once per change of
the file; an unfinished last line (a synthesis still writing, or killed mid-write) is left out and
the file page says so.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from websailor.errors import InvalidArgumentError
from websailor.jsonio import Unfinished
from websailor.synth.dataset import dataset_report, read_items_and_tail
from websailor.synth.levels import DEFAULT_LEVEL
from websailor.view.context import context, query_int, run_url

router = APIRouter()

PAGE_SIZE = 50
#: the graph's drawing area (SVG user units) and node radius
GRAPH_W, GRAPH_H, NODE_R = 760, 520, 9
#: bar charts of the report: ``(report key, title)``
BAR_CHARTS = (
    ("splits", "items per split"),
    ("levels", "items per level"),
    ("operators", "uncertainty operators"),
    ("rejected_share", "rejected candidates (share of all candidates)"),
    ("rendering", "question rendering"),
)


@dataclass
class QAFile:
    """A QA file as read: its checked ``items``, their ``report``
    (:func:`websailor.synth.dataset.dataset_report`) and its ``unfinished`` last line (left
    out; ``None`` when there is none)."""

    items: list[dict]
    report: dict
    unfinished: Unfinished | None = None


@dataclass
class _Cached:
    key: tuple[int, float, int]
    file: QAFile


_CACHE: dict[Path, _Cached] = {}
_LOCK = threading.Lock()


def load_items(path: Path) -> tuple[list[dict], dict]:
    """The items of a QA file and their :func:`dataset_report`, read again when the file changes.

    Raises:
        InvalidArgumentError: ``path`` is not a file.
        InputFormatError: as :func:`websailor.synth.dataset.read_items` (file and line of the bad record).
    """
    qa = load_qa_file(path)
    return qa.items, qa.report


def load_qa_file(path: Path) -> QAFile:
    """The :class:`QAFile` of ``path``, cached until the file changes (inode, modification
    time or size).

    Raises:
        InvalidArgumentError: ``path`` is not a file.
        InputFormatError: as :func:`websailor.synth.dataset.read_items` (file and line of the bad record).
    """
    if not path.is_file():
        raise InvalidArgumentError(f"{path.name} is not a QA file")
    st = path.stat()
    key = (st.st_ino, st.st_mtime, st.st_size)
    with _LOCK:
        hit = _CACHE.get(path)
        if hit and hit.key == key:
            return hit.file
    items, unfinished = read_items_and_tail(path)
    qa = QAFile(items, dataset_report(items), unfinished)
    with _LOCK:
        _CACHE[path] = _Cached(key, qa)
    return qa


def bar_chart(title: str, counts: dict[Any, float], width: int = 360, bar_h: int = 18) -> dict[str, Any]:
    """Geometry of a horizontal bar chart: ``{title, width, height, bars: [{label, value, y,
    w}]}`` (labels and values are text for the template to escape)."""
    rows = list(counts.items())
    top = max((v for _, v in rows if isinstance(v, (int, float))), default=0) or 1
    label_w, value_w = 150, 50
    span = width - label_w - value_w
    bars = [
        {
            "label": str(k),
            "value": v,
            "y": 22 + i * (bar_h + 4),
            "w": max(1.0, span * v / top) if isinstance(v, (int, float)) and v > 0 else 0,
        }
        for i, (k, v) in enumerate(rows)
    ]
    return {"title": title, "width": width, "height": 26 + len(rows) * (bar_h + 4), "bars": bars, "x0": label_w}


def _matches(it: dict, split: str, level: str, q: str) -> bool:
    if split and it.get("split", "") != split:
        return False
    if level and str(it.get("level", DEFAULT_LEVEL)) != level:
        return False
    if q:
        hay = " ".join((it["id"], it["question"], it["answer"], " ".join(it.get("aliases") or []))).lower()
        return all(word in hay for word in q.lower().split())
    return True


def _page_url(rel: str, **params: Any) -> str:
    return run_url("qa", rel, **{k: v for k, v in params.items() if v not in ("", None, 1)})


def item_url(rel: str, item_id: str) -> str:
    """The URL of item ``item_id`` of QA file ``rel``: ``/qa/FILE?item=ID``."""
    return run_url("qa", rel, item=item_id)


def _qa_page(request: Request, rel: str) -> Response:
    rel = rel.rstrip("/") or "."
    item_id = request.query_params.get("item")
    return qa_file(request, rel) if item_id is None else qa_item(request, rel, item_id)


@router.get("/qa", response_class=HTMLResponse)
def qa_root(request: Request) -> Response:
    """The QA file that is the root itself: its items, or one (``?item=ID``)."""
    return _qa_page(request, ".")


@router.get("/qa/{rel:path}", response_class=HTMLResponse)
def qa_run(rel: str, request: Request) -> Response:
    """A QA file's items, filtered and paginated, with its figures; or one item (``?item=ID``)."""
    return _qa_page(request, rel)


def qa_item(request: Request, rel: str, item_id: str) -> Response:
    """One item: its subgraph, constraints, operators and solution path.

    Raises:
        InvalidArgumentError: no such file or item (the 404 page).
        InputFormatError: as :func:`load_items`.
    """
    ctx = context(request)
    items, _ = load_items(ctx.path(rel))
    item = next((it for it in items if it["id"] == item_id), None)
    if item is None:
        raise InvalidArgumentError(f"{rel} has no item {item_id!r}")
    return ctx.page(
        "synth_item.html",
        title=f"QA item {item_id}",
        rel=rel,
        item=item,
        graph=draw_subgraph(item),
        path=solution_path(item),
    )


def qa_file(request: Request, rel: str) -> Response:
    """The items of a QA file, filtered (``split``, ``level``, ``q``) and paginated (``page``),
    with its figures.

    Raises:
        RequestValidationError: a ``page`` that is not a whole number.
        InvalidArgumentError: not a QA file (the 404 page).
        InputFormatError: as :func:`load_items`.
    """
    ctx = context(request)
    qp = request.query_params
    split, level, q = qp.get("split", ""), qp.get("level", ""), qp.get("q", "").strip()
    page = query_int(request, "page") or 1
    qa = load_qa_file(ctx.path(rel))
    items, report = qa.items, qa.report
    shown = [it for it in items if _matches(it, split, level, q)]
    pages = max(1, math.ceil(len(shown) / PAGE_SIZE))
    page = min(max(1, page), pages)
    charts = [bar_chart(title, report[key]) for key, title in BAR_CHARTS if report.get(key)]
    scalars = {k: v for k, v in report.items() if not isinstance(v, (dict, list))}
    on_page = shown[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
    return ctx.page(
        "synth_file.html",
        title=f"QA file {rel}",
        rel=rel,
        base=run_url("qa", rel),
        items=on_page,
        item_urls={it["id"]: item_url(rel, it["id"]) for it in on_page},
        matched=len(shown),
        total=len(items),
        page=page,
        pages=pages,
        prev_url=_page_url(rel, split=split, level=level, q=q, page=page - 1) if page > 1 else None,
        next_url=_page_url(rel, split=split, level=level, q=q, page=page + 1) if page < pages else None,
        split=split,
        level=level,
        q=q,
        splits=sorted({it.get("split", "") for it in items} - {""}),
        levels=sorted({it.get("level", DEFAULT_LEVEL) for it in items}),
        charts=charts,
        scalars=scalars,
        difficulty=report.get("difficulty"),
        unfinished=qa.unfinished,
    )


# -- the item's graph ---------------------------------------------------------------------------
def _hops(item: dict) -> set[frozenset[str]]:
    """The edges the solution walks: each linked entity of a constraint to the answer."""
    return {
        frozenset((c["params"]["other"], item["answer"]))
        for c in item["constraints"]
        if c.get("kind") == "linked" and isinstance(c.get("params"), dict) and "other" in c["params"]
    }


def _relation(item: dict, src: str, dst: str) -> str:
    """The label of edge ``src``-``dst``: the phrase of the constraint it states, else
    ``mentions`` (the source's page mentions the target)."""
    for c in item["constraints"]:
        p = c.get("params") if isinstance(c.get("params"), dict) else {}
        if c.get("kind") == "linked" and {p.get("other"), item["answer"]} == {src, dst}:
            phrase = str(c.get("phrase") or "linked")
            return phrase if len(phrase) <= 40 else phrase[:39] + "…"
    return "mentions"


def draw_subgraph(item: dict) -> dict[str, Any]:
    """Geometry of the item's subgraph for the template's SVG: ``{width, height, nodes: [{id,
    label, x, y, answer, on_path, order, url}], edges: [{src, dst, x1, y1, x2, y2, lx, ly,
    label, evidence, url, on_path}]}``. Laid out by ``nx.spring_layout(seed=0)`` (the same
    picture every time); the answer and the nodes the solution visits are marked."""
    sub = item["subgraph"]
    nodes = [n for n in sub.get("nodes", []) if isinstance(n, dict) and "id" in n]
    edges = [e for e in sub.get("edges", []) if isinstance(e, dict) and "src" in e and "dst" in e]
    g = nx.Graph()
    g.add_nodes_from(str(n["id"]) for n in nodes)
    g.add_edges_from((str(e["src"]), str(e["dst"])) for e in edges)
    pos = nx.spring_layout(g, seed=0) if len(g) > 1 else {n: (0.0, 0.0) for n in g}
    margin = {GRAPH_W: 130, GRAPH_H: 40}  # room for the names either side of a node
    xs = [p[0] for p in pos.values()] or [0.0]
    ys = [p[1] for p in pos.values()] or [0.0]

    def scale(v: float, lo: float, hi: float, size: int) -> float:
        m = margin[size]
        return size / 2 if hi == lo else m + (v - lo) / (hi - lo) * (size - 2 * m)

    xy = {n: (scale(p[0], min(xs), max(xs), GRAPH_W), scale(p[1], min(ys), max(ys), GRAPH_H)) for n, p in pos.items()}
    order = {node: i for i, node in enumerate(solution_path(item)["nodes"], 1)}
    hops = _hops(item)
    out_nodes = [
        {
            "id": str(n["id"]),
            "label": str(n.get("title", n["id"])),
            "url": str(n.get("url", "")),
            "x": round(xy[str(n["id"])][0], 1),
            "y": round(xy[str(n["id"])][1], 1),
            "answer": str(n["id"]) == item["answer"],
            "on_path": str(n["id"]) in order,
            "order": order.get(str(n["id"])),
        }
        for n in nodes
    ]
    out_edges = []
    for e in edges:
        (x1, y1), (x2, y2) = xy[str(e["src"])], xy[str(e["dst"])]
        out_edges.append(
            {
                "src": str(e["src"]),
                "dst": str(e["dst"]),
                "x1": round(x1, 1),
                "y1": round(y1, 1),
                "x2": round(x2, 1),
                "y2": round(y2, 1),
                "lx": round((x1 + x2) / 2, 1),
                "ly": round((y1 + y2) / 2 - 4, 1),
                "label": _relation(item, str(e["src"]), str(e["dst"])),
                "evidence": str(e.get("evidence", "")),
                "url": str(e.get("url", "")),
                "on_path": frozenset((str(e["src"]), str(e["dst"]))) in hops,
            }
        )
    return {"width": GRAPH_W, "height": GRAPH_H, "r": NODE_R, "nodes": out_nodes, "edges": out_edges}


def solution_path(item: dict) -> dict[str, Any]:
    """The item's solution ``procedure`` as steps to list (``{action, query, url, node,
    expect_node, evidence, mentions}``) and ``nodes``: the subgraph nodes it visits, in order,
    each once."""
    by_url = {str(n.get("url")): str(n["id"]) for n in item["subgraph"].get("nodes", []) if isinstance(n, dict)}
    steps, visited = [], []
    for s in item["procedure"]:
        if not isinstance(s, dict):
            continue
        node = by_url.get(str(s.get("url"))) if s.get("url") else None
        if node and node not in visited:
            visited.append(node)
        steps.append(
            {
                "action": str(s.get("action", "")),
                "query": s.get("query"),
                "url": s.get("url"),
                "node": node,
                "expect_node": by_url.get(str(s.get("expect"))) if s.get("expect") else None,
                "evidence": s.get("evidence") or "",
                "mentions": [str(m) for m in s.get("mentions") or []],
            }
        )
    return {"steps": steps, "nodes": visited}
