"""How SailorFog-QA-V2 questions read, and how often one search answers them.

For each QA file given (and for the files this script synthesizes: 200 items at levels 3 and 4
with seed 0, and the demo's ladder, 40 items at levels 1 to 4 with seed 42):

* the wording report of ``websailor synth stats`` (distinct relation phrases, share of links
  worded "is associated with", share of items with a name mask by level, words and sentences
  per question, constraints per item);
* the BM25 rank-1 solve share: a search of the whole question text over the corpus returns the
  answer's page first (an item that a one-hop lookup of its text answers is not a multi-hop
  item).

A file made by an earlier version of the project (``--before``) is measured beside the files
made now, which is how docs/synthesis.md compares the wording before and after.

    python benchmarks/synth_wording.py [--before OLD_L34.jsonl OLD_DEMO.jsonl] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from _common import RESULTS, unwritable, write_results

from websailor.corpus import Corpus
from websailor.errors import InputFormatError
from websailor.synth.dataset import SynthConfig, read_items, synthesize
from websailor.synth.graph import load_or_build
from websailor.synth.wording import wording_report
from websailor.tools import build_local_tools

#: the files made now: (name, items, levels, seed)
MADE = (("levels_3_4_seed_0", 200, "3-4", 0), ("demo_ladder_seed_42", 40, "1-4", 42))


def rank1_share(corpus: Corpus, items: list[dict]) -> float:
    """Share of ``items`` whose whole question text, searched with BM25, ranks the answer's
    page first."""
    hits = corpus.search([it["question"] for it in items], k=1)
    return round(sum(bool(h) and h[0].title == it["answer"] for h, it in zip(hits, items)) / len(items), 3)


def figures(corpus: Corpus, items: list[dict]) -> dict:
    report = wording_report(items)
    by_level = {}
    for level in sorted({it.get("level", 4) for it in items}):
        sub = [it for it in items if it.get("level", 4) == level]
        by_level[level] = {"items": len(sub), "bm25_rank1": rank1_share(corpus, sub), **wording_report(sub)}
    return {"items": len(items), "bm25_rank1": rank1_share(corpus, items), **report, "by_level": by_level}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", type=Path, nargs="*", default=[], help="QA files of an earlier version to measure too")
    p.add_argument("--out", type=Path, default=None, help="results folder (default benchmarks/results)")
    a = p.parse_args()
    for f in a.before:
        if not f.is_file():
            print(f"--before {f}: {'a directory' if f.is_dir() else 'no such file'}, give a QA file", file=sys.stderr)
            return 2
    results_dir = a.out or RESULTS
    bad = unwritable(results_dir)
    if bad:
        print(bad, file=sys.stderr)
        return 2
    before = {}
    for path in a.before:
        try:
            before[path] = read_items(path)
        except InputFormatError as e:
            print(f"--before {path}: {e}", file=sys.stderr)
            return 2
        if not before[path]:
            print(f"--before {path}: no items", file=sys.stderr)
            return 2
    corpus = Corpus.open()
    kg = load_or_build(corpus)
    results: dict[str, dict] = {}
    for path, items in before.items():
        results[f"before:{path.name}"] = figures(corpus, items)
    with tempfile.TemporaryDirectory() as tmp:
        tools = build_local_tools(corpus)
        for name, n, levels, seed in MADE:
            made = Path(tmp) / f"{name}.jsonl"
            synthesize(kg, made, SynthConfig(n=n, seed=seed, levels=levels), progress=False, tools=tools)
            results[f"now:{name}"] = figures(corpus, read_items(made))
    for name, r in results.items():
        print(
            f"{name}: {r['items']} items, BM25 rank-1 {r['bm25_rank1']:.1%}, {r['distinct_relations']} relation "
            f"phrases, association share {r['association_share']}, name masks {r['name_mask_share_by_level']}, "
            f"{r['mean_words']} words and {r['mean_sentences']} sentences a question, {r['mean_constraints']} "
            "constraints an item"
        )
    write_results("synth_wording", results, a, results_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
