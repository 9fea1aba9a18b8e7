"""The knowledge graph SailorFog-QA-V2 samples from, built over a corpus.

Nodes are the corpus's pages (entities) with typed attributes
(:mod:`websailor.synth.attributes`); an undirected edge joins two pages when one mentions the
other, and keeps every mention as evidence (sentence, the URL of the page it is on, and which
page mentions which). The procedure that found each edge is this evidence, which is what lets a
question's solution path be rebuilt later.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import networkx as nx

from websailor.corpus.corpus import Corpus
from websailor.log import get_logger
from websailor.synth.attributes import Attributes, parse_attributes
from websailor.synth.relations import read_relation
from websailor.synth.sampling import walk_starts

logger = get_logger(__name__)

GRAPH_FILE = "knowledge_graph.v5.json"
#: a life span or period at the end of a description: "Italian polymath (1452–1519)"
SPAN_IN_DESC = re.compile(r"\s*\([^)]*\d[^)]*\)\s*$")


def description_key(description: str) -> str:
    """A description without its span, lower-cased: "Country in Oceania" -> "country in oceania"."""
    return " ".join(SPAN_IN_DESC.sub("", description).lower().split())


@dataclass
class KnowledgeGraph:
    """An undirected :class:`networkx.Graph` keyed by page title.

    Node attributes: ``url``, ``attributes`` (:class:`Attributes`) and ``findable`` (a BM25
    search of the page's description returns it in the top 10, so a question may name it by
    its description and expect a solver to find it). Edge attributes:
    ``evidence``, a list of ``{"source", "target", "sentence", "url", "relation"}`` (``source``
    mentions ``target`` in ``sentence``, on the page at ``url``; ``relation`` is the phrase the
    sentence states from ``source`` to ``target``, "is an oil-on-canvas painting by", or
    ``None`` where :func:`websailor.synth.relations.read_relation` reads none).
    """

    graph: nx.Graph

    @cached_property
    def walk_starts(self) -> list[str]:
        """Nodes a subgraph walk may start from (computed once; the graph is not mutated after build)."""
        return walk_starts(self.graph)

    @cached_property
    def common_words(self) -> dict[str, bool]:
        """For each word written after the first of a description or an evidence sentence:
        whether it is lower case more often than capitalized there ("country": True; "hindu",
        "disney": False). It decides how a description's first word is cased when put
        mid-sentence."""
        lower: Counter = Counter()
        upper: Counter = Counter()
        texts = [d["attributes"].description for _, d in self.graph.nodes(data=True)]
        texts += [e["sentence"] for _, _, d in self.graph.edges(data=True) for e in d["evidence"]]
        for text in texts:
            for word in text.split()[1:]:
                word = word.strip(".,;:()\"'")
                if word[:1].isalpha():
                    (lower if word[:1].islower() else upper)[word.lower()] += 1
        # lower case when the word is common in lower case at all ("canal", despite "Suez Canal")
        return {w: lower[w] >= max(3, upper[w] // 10) or lower[w] > upper[w] for w in lower.keys() | upper.keys()}

    @cached_property
    def same_description(self) -> dict[str, list[str]]:
        """Pages by normalized description (lower case, span removed), for descriptions that
        several pages share ("country in oceania": Australia, Fiji, Papua New Guinea, ...)."""
        groups: dict[str, list[str]] = {}
        for node, data in self.graph.nodes(data=True):
            key = description_key(data["attributes"].description)
            if key:
                groups.setdefault(key, []).append(node)
        return {k: sorted(v) for k, v in groups.items() if len(v) > 1}

    def referents(self, node: str) -> list[str]:
        """Every page that ``node``'s description may name (itself included), sorted."""
        return self.same_description.get(description_key(self.attributes(node).description), [node])

    def __len__(self) -> int:
        return self.graph.number_of_nodes()

    @cached_property
    def worded_edges(self) -> frozenset[frozenset]:
        """Edges with at least one evidence sentence that states a relation phrase."""
        return frozenset(
            frozenset((a, b))
            for a, b, d in self.graph.edges(data=True)
            if any(e.get("relation") for e in d["evidence"])
        )

    def is_worded(self, a: str, b: str) -> bool:
        """Whether the link between ``a`` and ``b`` has a relation phrase to state."""
        return frozenset((a, b)) in self.worded_edges

    def relation_counts(self) -> tuple[int, int]:
        """(evidence sentences with a relation phrase, all evidence sentences)."""
        evidence = [e for _, _, d in self.graph.edges(data=True) for e in d["evidence"]]
        return sum(bool(e.get("relation")) for e in evidence), len(evidence)

    def attributes(self, node: str) -> Attributes:
        return self.graph.nodes[node]["attributes"]

    def evidence(self, a: str, b: str) -> list[dict]:
        return self.graph.edges[a, b]["evidence"]

    def save(self, path: Path) -> None:
        """Write node-link JSON atomically."""
        data = {
            "nodes": [
                {"id": n, "url": d["url"], "attributes": d["attributes"].to_dict(), "findable": d["findable"]}
                for n, d in self.graph.nodes(data=True)
            ],
            "edges": [{"a": a, "b": b, "evidence": d["evidence"]} for a, b, d in self.graph.edges(data=True)],
        }
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(data, ensure_ascii=True), encoding="utf-8")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> KnowledgeGraph:
        data = json.loads(path.read_text(encoding="utf-8"))
        g = nx.Graph()
        for n in data["nodes"]:
            g.add_node(
                n["id"],
                url=n["url"],
                attributes=Attributes.from_dict(n["attributes"]),
                findable=bool(n.get("findable")),
            )
        for e in data["edges"]:
            g.add_edge(e["a"], e["b"], evidence=e["evidence"])
        return cls(g)


def build_knowledge_graph(corpus: Corpus) -> KnowledgeGraph:
    """Nodes from every page, edges from the corpus's entity links, each evidence sentence with
    the relation phrase it states (about 5 s for the 10,033-page vital corpus). Warns when no
    relation phrase could be read at all (a corpus whose link sentences are not lead-section
    prose): every link is then worded as an association."""
    t0 = time.perf_counter()
    g = nx.Graph()
    for doc in corpus.iter_documents():
        body = "\n\n".join(p for p in doc.paragraphs if not p.startswith("## "))
        g.add_node(doc.title, url=doc.url, attributes=parse_attributes(doc.description, doc.topic, body))
    _mark_findable(g, corpus)
    for m in corpus.iter_links():
        relation = read_relation(m.sentence, m.source, m.target)
        ev = {
            "source": m.source,
            "target": m.target,
            "sentence": m.sentence,
            "url": g.nodes[m.source]["url"],
            "relation": relation.phrase if relation else None,
        }
        if g.has_edge(m.source, m.target):
            evidence = g.edges[m.source, m.target]["evidence"]
            if all(e["sentence"] != m.sentence for e in evidence):
                evidence.append(ev)
        else:
            g.add_edge(m.source, m.target, evidence=[ev])
    kg = KnowledgeGraph(g)
    worded, total = kg.relation_counts()
    logger.info(
        "knowledge graph: %d nodes, %d edges, %d of %d evidence sentences with a relation phrase (%.1f s)",
        g.number_of_nodes(),
        g.number_of_edges(),
        worded,
        total,
        time.perf_counter() - t0,
    )
    if total and not worded:
        logger.warning(
            "no relation phrase could be read from the %d link sentences of corpus %s: every link will be "
            "worded 'is associated with' (synth stats counts the share)",
            total,
            corpus.path,
        )
    return kg


def _mark_findable(g: nx.Graph, corpus: Corpus, k: int = 10) -> None:
    """Set ``findable`` on every node: its description, searched with BM25, returns the page
    among the top ``k`` pages (about 1 s for 10k pages: index only, no snippets)."""
    titles = list(g.nodes)
    descs = [g.nodes[t]["attributes"].description for t in titles]
    rows = corpus.index.retrieve([d or "\x00" for d in descs], k=k * 3)
    doc_of = corpus.store.passages(sorted({r for hits in rows for r, _ in hits}))
    ids = {t: i for i, t in enumerate(corpus.titles)}
    for title, desc, hits in zip(titles, descs, rows):
        top: list[int] = []
        for r, _ in hits:
            d = doc_of[r][0]
            if d not in top:
                top.append(d)
        g.nodes[title]["findable"] = bool(desc) and ids[title] in top[:k]


def load_or_build(corpus: Corpus) -> KnowledgeGraph:
    """The graph cached in the corpus directory's ``synth/`` folder, built on first use."""
    cache = corpus.path / "synth" / GRAPH_FILE
    if cache.exists():
        try:
            return KnowledgeGraph.load(cache)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            logger.warning(
                "the cached knowledge graph %s is unreadable (%s: %s); building it again", cache, type(e).__name__, e
            )
    kg = build_knowledge_graph(corpus)
    try:
        cache.parent.mkdir(exist_ok=True)
        kg.save(cache)
    except OSError as e:  # a read-only corpus still works, just without the cache
        logger.warning("could not cache the knowledge graph in %s: %s", cache.parent, e.strerror)
    return kg
