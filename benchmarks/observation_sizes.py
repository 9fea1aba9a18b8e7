"""Observation sizes in tokens: mean tokens of one search and one visit observation under the
paper's observation settings and under ``--observations compact`` (or any others given).

The queries are real: the short descriptions of random vital-article pages ("1968 film by
Stanley Kubrick"); each visit reads the top result of its query with a goal written from the
query, as an agent does. Tokens are the embedded model's (SmolLM2-135M-Instruct), counted on
the observation text alone (without the chat template's turn markers).

    python benchmarks/observation_sizes.py                       # paper and compact, 50 queries
    python benchmarks/observation_sizes.py --setting 3,120,600   # also results,snippet,evidence
"""

from __future__ import annotations

import argparse
import json
import random
import statistics

from _common import write_results

from websailor.corpus import Corpus
from websailor.models.embedded import ensure_smollm2
from websailor.tools.environment import COMPACT_OBSERVATIONS
from websailor.tools.local import build_local_tools


def main() -> None:
    """Measure and print the sizes; write ``benchmarks/results/observation_sizes.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=50, help="Random vital-article descriptions to search for.")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument(
        "--setting", action="append", default=[], help="RESULTS,SNIPPET,EVIDENCE: another setting to measure."
    )
    args = parser.parse_args()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(ensure_smollm2())
    corpus = Corpus.open(None)
    pages = [d for d in corpus.iter_documents() if (d.description or "").strip()]
    queries = [d.description for d in random.Random(args.seed).sample(pages, args.queries)]
    settings: dict[str, dict] = {"paper": {}, "compact": dict(COMPACT_OBSERVATIONS)}
    for text in args.setting:
        r, s, e = (int(x) for x in text.split(","))
        settings[text] = {"search_results": r, "snippet_chars": s, "evidence_chars": e}
    top = [hits[0].url for hits in corpus.search(queries, k=1) if hits]
    figures = {}
    for name, kw in settings.items():
        tools = build_local_tools(corpus, **kw)
        search = [len(tokenizer(tools["search"]({"query": [q]})).input_ids) for q in queries]
        visit = [
            len(tokenizer(tools["visit"]({"url": url, "goal": f"what the page says about: {q}"})).input_ids)
            for url, q in zip(top, queries)
        ]
        figures[name] = {
            "settings": kw,
            "search_tokens_mean": round(statistics.mean(search), 1),
            "search_tokens_max": max(search),
            "visit_tokens_mean": round(statistics.mean(visit), 1),
            "visit_tokens_max": max(visit),
            "searches": len(search),
            "visits": len(visit),
        }
        print(json.dumps({name: figures[name]}))
    write_results("observation_sizes", figures, args)


if __name__ == "__main__":
    main()
