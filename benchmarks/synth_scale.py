"""Synthesis at Wikipedia scale: graph build, subgraph sampling and verification on link graphs
of 10k to millions of pages, with time and peak memory, for the knowledge-graph store and, as the
baseline measured in the same run, the networkx graph the project used before.

The large graphs are synthetic, made from the real statistics of the vital-articles corpus: page
``i`` copies template page ``i mod T`` (its description, topic, attributes and whether BM25
finds it; copy ``k`` is titled "Title (k)", as Wikipedia disambiguates), and each link of the
template, with its real evidence sentence, goes to a random copy of the template's target. So
out-degrees, relation sentences and attribute rates are the corpus's, and in-degrees scale with
the graph as a hub's do. Descriptions are shared by the copies, so described entities are more
ambiguous as the graph grows (as "American actor" is on Wikipedia); the accepted share reflects
it. The path replay through the search tool needs a BM25 index over the pages and is measured
on the real corpus only (benchmarks/synth_figures.py).

Each size runs in a child process of its own, so peak memory (``ru_maxrss``) is its own.

    python benchmarks/synth_scale.py [--pages 10000,1000000] [--attempts 400] [--baseline-pages 1000000]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import RESULTS, too_small, unwritable, write_results

#: English Wikipedia's article count (2025), the size the figures are extrapolated to
WIKIPEDIA_PAGES = 6_800_000

_BUILD = r"""
import json, resource, sys, time
from pathlib import Path
cfg = json.loads(sys.argv[1])
sys.path.insert(0, cfg["bench_dir"])
from synth_scale import synthetic_graph_inputs, save_networkx
t0 = time.perf_counter()
pages, links = synthetic_graph_inputs(cfg["corpus"], cfg["pages"], cfg["seed"])
out = {"pages": cfg["pages"], "links": len(links), "inputs_seconds": round(time.perf_counter() - t0, 1)}
folder = Path(cfg["tmp"]) / "graph"
t = time.perf_counter()
if cfg["store"] == "networkx":
    save_networkx(pages, links, folder)
else:
    from websailor.synth.graph import build_graph
    folder.mkdir()
    kg = build_graph(iter(pages), iter(links), folder / "build.sqlite")
    out["edges"] = kg.number_of_edges()
    kg.save(folder)
out["build_seconds"] = round(time.perf_counter() - t, 1)
out["disk_mb"] = round(sum(p.stat().st_size for p in folder.iterdir() if p.name != "build.sqlite") / 1e6, 1)
out["build_peak_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
print(json.dumps(out))
"""

_USE = r"""
import json, random, resource, sys, time
from pathlib import Path
cfg = json.loads(sys.argv[1])
sys.path.insert(0, cfg["bench_dir"])
from synth_scale import rss_mb, load_networkx
from websailor.synth.graph import KnowledgeGraph
from websailor.synth.items import build_item
from websailor.synth.levels import ItemConfig
folder = Path(cfg["tmp"]) / "graph"
before = rss_mb()
t = time.perf_counter()
kg = load_networkx(folder) if cfg["store"] == "networkx" else KnowledgeGraph.load(folder)
out = {"load_seconds": round(time.perf_counter() - t, 1), "graph_mb": round(rss_mb() - before, 1)}
if cfg["store"] != "networkx":
    t = time.perf_counter()
    kg.same_description
    out["first_use_seconds"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    accepted, reasons = 0, {}
    for i in range(cfg["attempts"]):
        item, why = build_item(kg, random.Random(f"scale/{i}"), ItemConfig(level=cfg["level"]))
        reasons[why] = reasons.get(why, 0) + 1
        accepted += item is not None
    s = time.perf_counter() - t
    out.update(sample_seconds=round(s, 1), attempts_per_s=round(cfg["attempts"] / s, 1),
               accepted_per_min=round(60 * accepted / s, 1), accepted=accepted, reasons=reasons)
out["use_peak_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
print(json.dumps(out))
"""


def rss_mb() -> float:
    """Resident memory of this process now (MB)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 1e6


def synthetic_graph_inputs(corpus_dir: str | None, n_pages: int, seed: int) -> tuple[list, list]:
    """Pages and links of an ``n_pages`` graph made from the corpus's statistics (the module
    docstring says how)."""
    from websailor.corpus import Corpus
    from websailor.synth.attributes import Attributes
    from websailor.synth.graph import SPAN_IN_DESC, Link, Page, corpus_pages

    corpus = Corpus.open(corpus_dir) if corpus_dir else Corpus.open()
    templates = list(corpus_pages(corpus))
    index = {p.title: i for i, p in enumerate(templates)}
    out_links: list[list[tuple[int, str]]] = [[] for _ in templates]
    for m in corpus.iter_links():
        if m.source in index and m.target in index:
            out_links[index[m.source]].append((index[m.target], m.sentence))
    n_t = len(templates)
    copies = -(-n_pages // n_t)
    rng = random.Random(seed)

    def title(t: int, k: int) -> str:
        return templates[t].title if k == 0 else f"{templates[t].title} ({k})"

    pages, links = [], []
    for i in range(n_pages):
        t, k = i % n_t, i // n_t
        tp = templates[t]
        name = title(t, k)
        attrs = Attributes.from_dict(tp.attributes.to_dict())
        if k:  # a description of its own: "Country in Oceania, variant bc", before a span if any
            span = SPAN_IN_DESC.search(attrs.description)
            cut = span.start() if span else len(attrs.description)
            attrs.description = f"{attrs.description[:cut]}, variant {_letters(k)}{attrs.description[cut:]}"
        pages.append(Page(name, tp.url + (f"_({k})" if k else ""), attrs, tp.findable))
        for u, sentence in out_links[t]:
            # a random copy of the target that exists in a graph of this size
            ku = rng.randrange(copies)
            if ku * n_t + u >= n_pages:
                ku = 0
            if u >= n_pages:  # a graph smaller than the corpus has no page for it
                continue
            links.append(Link(name, title(u, ku), sentence))
    return pages, links


def _letters(k: int) -> str:
    """1 -> "b", 26 -> "ba": a copy's mark in letters (a digit would read as a span)."""
    out = ""
    while True:
        k, r = divmod(k, 26)
        out = "abcdefghijklmnopqrstuvwxyz"[r] + out
        if k == 0:
            return out


def save_networkx(pages: list, links: list, folder: Path) -> None:
    """Build the graph as the project stored it before (networkx, evidence dicts on the edges)
    and write it in that version's cache format (node-link JSON)."""
    import networkx as nx

    g = nx.Graph()
    for p in pages:
        g.add_node(p.title, url=p.url, attributes=p.attributes, findable=p.findable)
    for m in links:
        ev = {"source": m.source, "target": m.target, "sentence": m.sentence, "url": g.nodes[m.source]["url"],
              "relation": None}  # fmt: skip
        if g.has_edge(m.source, m.target):
            evidence = g.edges[m.source, m.target]["evidence"]
            if all(e["sentence"] != m.sentence for e in evidence):
                evidence.append(ev)
        else:
            g.add_edge(m.source, m.target, evidence=[ev])
    data = {
        "nodes": [{"id": n, "url": d["url"], "attributes": d["attributes"].to_dict(), "findable": d["findable"]}
                  for n, d in g.nodes(data=True)],
        "edges": [{"a": a, "b": b, "evidence": d["evidence"]} for a, b, d in g.edges(data=True)],
    }  # fmt: skip
    folder.mkdir()
    (folder / "graph.json").write_text(json.dumps(data, ensure_ascii=True), encoding="utf-8")


def load_networkx(folder: Path):
    """The networkx graph read back as that version loaded its cache."""
    import networkx as nx

    from websailor.synth.attributes import Attributes

    data = json.loads((folder / "graph.json").read_text(encoding="utf-8"))
    g = nx.Graph()
    for n in data["nodes"]:
        g.add_node(n["id"], url=n["url"], attributes=Attributes.from_dict(n["attributes"]), findable=n["findable"])
    for e in data["edges"]:
        g.add_edge(e["a"], e["b"], evidence=e["evidence"])
    del data
    return g


def _child(script: str, cfg: dict) -> dict:
    proc = subprocess.run([sys.executable, "-c", script, json.dumps(cfg)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the {cfg['store']} run at {cfg['pages']:,} pages failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(cfg: dict) -> dict:
    """Build the graph in one child process, then load and use it in another."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = {**cfg, "tmp": tmp, "bench_dir": str(Path(__file__).resolve().parent)}
        return {**_child(_BUILD, cfg), **_child(_USE, cfg)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pages", default="10000,1000000", help="graph sizes, comma-separated")
    p.add_argument("--baseline-pages", default="10000,1000000", help="sizes for the networkx baseline ('' for none)")
    p.add_argument("--attempts", type=int, default=400, help="items attempted at each size")
    p.add_argument("--level", type=int, default=4)
    p.add_argument("--corpus", default=None, help="corpus folder (default: the embedded vital corpus)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args()
    try:
        sizes = [int(x) for x in a.pages.split(",") if x]
        baseline = [int(x) for x in a.baseline_pages.split(",") if x]
    except ValueError:
        print(f"--pages and --baseline-pages are comma-separated page counts, got {a.pages!r}, {a.baseline_pages!r}",
              file=sys.stderr)  # fmt: skip
        return 2
    if not sizes:
        print("--pages: give at least one page count", file=sys.stderr)
        return 2
    bad = too_small(("--attempts", a.attempts, 1), *(("--pages", n, 100) for n in sizes + baseline))
    if bad:
        print(bad, file=sys.stderr)
        return 2
    if a.level not in (1, 2, 3, 4):
        print(f"--level {a.level}: give 1, 2, 3 or 4", file=sys.stderr)
        return 2
    bad = unwritable(a.out)
    if bad:
        print(bad, file=sys.stderr)
        return 2
    common = {"corpus": a.corpus, "seed": a.seed, "attempts": a.attempts, "level": a.level}
    results: dict = {"store": {}, "networkx": {}}
    for n in baseline:
        r = run({**common, "pages": n, "store": "networkx"})
        results["networkx"][n] = r
        print(
            f"networkx {n:>9,} pages, {r['links']:,} links: built in {r['build_seconds']} s (peak {r['build_peak_mb']:,} "
            f"MB), {r['disk_mb']:,} MB on disk; loaded in {r['load_seconds']} s: {r['graph_mb']:,} MB resident"
        )
    for n in sizes:
        r = run({**common, "pages": n, "store": "store"})
        results["store"][n] = r
        print(
            f"store    {n:>9,} pages, {r['links']:,} links: built in {r['build_seconds']} s (peak {r['build_peak_mb']:,} "
            f"MB), {r['disk_mb']:,} MB on disk; loaded in {r['load_seconds']} s: {r['graph_mb']:,} MB resident, "
            f"peak in use {r['use_peak_mb']:,} MB; {r['attempts_per_s']} attempts/s, {r['accepted_per_min']} accepted "
            f"items/min ({r['accepted']} of {a.attempts})"
        )
    # linear in pages from the two ends of the measured sizes (the slope leaves out what any run holds:
    # the interpreter, the libraries, the corpus the inputs are made from)
    small, big = min(results["store"]), max(results["store"])

    def at_wikipedia(runs: dict, key: str) -> float | None:
        # below 100k pages the fixed cost of a process (about 100 MB) swamps the slope
        if small not in runs or big not in runs or big - small < 90_000:
            return None
        slope = (runs[big][key] - runs[small][key]) / (big - small)
        return round((runs[big][key] + slope * (WIKIPEDIA_PAGES - big)) / 1e3, 1)

    store = results["store"]
    results["extrapolated_to_wikipedia"] = {
        "pages": WIKIPEDIA_PAGES,
        "from_pages": [small, big],
        "store_graph_gb": at_wikipedia(store, "graph_mb"),
        "store_use_peak_gb": at_wikipedia(store, "use_peak_mb"),
        "store_build_peak_gb": at_wikipedia(store, "build_peak_mb"),
        "store_build_minutes": round(store[big]["build_seconds"] * WIKIPEDIA_PAGES / big / 60, 1)
        if big >= 100_000
        else None,
        "networkx_graph_gb": at_wikipedia(results["networkx"], "graph_mb"),
        "networkx_build_peak_gb": at_wikipedia(results["networkx"], "build_peak_mb"),
    }
    if big in results["networkx"]:
        results["graph_memory_ratio_networkx_to_store"] = round(
            results["networkx"][big]["graph_mb"] / store[big]["graph_mb"], 2
        )
    print(json.dumps(results["extrapolated_to_wikipedia"]), results.get("graph_memory_ratio_networkx_to_store"))
    write_results("synth_scale", results, a, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
