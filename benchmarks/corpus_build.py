"""Corpus build figures: time and peak memory for each real layout, links included.

Target (issue 2): the 10,033-page vital-articles build in at most 60 s and 2 GB on two cores.

    python benchmarks/corpus_build.py
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

from _common import SHARED, build_in_child

from websailor.corpus import Corpus


def link_precision(corpus: Corpus) -> tuple[float, int]:
    gold_path = Path(__file__).resolve().parents[1] / "tests" / "data" / "entity_links_gold.jsonl"
    gold = [json.loads(line) for line in gold_path.read_text().splitlines()]
    produced = {
        (m.source, m.surface, m.target, hashlib.sha1(m.sentence.encode()).hexdigest()) for m in corpus.iter_links()
    }
    found = [g for g in gold if (g["source"], g["surface"], g["target"], g["sentence_sha1"]) in produced]
    return sum(g["correct"] for g in found) / max(1, len(found)), len(found)


def main() -> int:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, fmt in [
            ("vital_articles_en.json", "vital"),
            ("wiki18_sample_1000.jsonl", "wiki18"),
            ("kilt_sample_100.jsonl", "kilt"),
        ]:
            out = Path(tmp) / fmt
            fig = build_in_child(source=SHARED / name, format=fmt, out=out, show_progress=False)
            meta = Corpus.open(out).meta
            rows.append((fmt, meta["n_docs"], meta["n_passages"], meta["n_links"], fig["seconds"], fig["peak_mb"]))
        vital = Corpus.open(Path(tmp) / "vital")
        precision, n = link_precision(vital)
    print(f"{'layout':<8} {'pages':>7} {'passages':>9} {'links':>7} {'seconds':>8} {'peak MB':>8}")
    for fmt, docs, passages, links, sec, mb in rows:
        print(f"{fmt:<8} {docs:>7} {passages:>9} {links:>7} {sec:>8.1f} {mb:>8.0f}")
    sec, mb = rows[0][4], rows[0][5]
    print(
        f"vital build: {sec:.1f} s (target <= 60 s), peak {mb:.0f} MB (target <= 2048 MB): "
        f"{'OK' if sec <= 60 and mb <= 2048 else 'MISSED'}"
    )
    print(
        f"entity-link precision on the hand-labelled sample: {precision:.3f} over {n} produced mentions (target >= 0.90)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
