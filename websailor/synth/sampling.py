"""Subgraph sampling and topology (SailorFog-QA-V2, WebSailor-V2 section 3).

* :func:`sample_subgraph`: a random walk that, with probability ``backtrack_p``, continues
  from an earlier node instead of the newest one (WebSailor V1), then *densification*: every
  edge of the knowledge graph among the chosen nodes is kept (the induced subgraph), so that
  cycles and several constraints converging on one node appear (V2).
* :func:`topology_hash`: Weisfeiler-Leman hash, to balance non-isomorphic shapes.
* :func:`structural_roles`: the automorphism orbits of a subgraph, so that question targets
  cover structural roles evenly rather than always the leaf or the hub.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import networkx as nx
from networkx.algorithms.isomorphism import GraphMatcher

from websailor.errors import InvalidArgumentError

if TYPE_CHECKING:
    from websailor.synth.graph import KnowledgeGraph


def walk_starts(graph: nx.Graph) -> list:
    """Nodes a walk may start from (degree at least 2), in graph order."""
    return [n for n, d in graph.degree() if d >= 2]


def sample_subgraph(
    graph: nx.Graph | KnowledgeGraph,
    rng: random.Random,
    n_nodes: int = 4,
    backtrack_p: float = 0.3,
    max_tries: int = 50,
    starts: list | None = None,
    prefer: Callable[[Any, Any], bool] | None = None,
    prefer_p: float = 0.5,
) -> nx.Graph | None:
    """A connected induced subgraph of ``n_nodes`` nodes (a :class:`networkx.Graph`), or
    ``None`` if ``max_tries`` walks
    all got stuck (a small or sparse graph). ``starts``: :func:`walk_starts` of the graph,
    when the caller samples many times (computed here otherwise). ``prefer(a, b)``: edges the
    walk takes, with probability ``prefer_p`` at each step, when the current node has one to
    a new node (the synthesizer prefers links whose evidence states a relation).

    Raises:
        InvalidArgumentError: ``n_nodes`` < 2 or ``backtrack_p`` outside [0, 1].
    """
    if n_nodes < 2:
        raise InvalidArgumentError(f"n_nodes must be at least 2, got {n_nodes}")
    if not 0.0 <= backtrack_p <= 1.0:
        raise InvalidArgumentError(f"backtrack_p must be in [0, 1], got {backtrack_p}")
    if starts is None:
        starts = walk_starts(graph) if isinstance(graph, nx.Graph) else graph.walk_starts
    seeds = starts
    if not seeds:
        return None
    for _ in range(max_tries):
        chosen = [rng.choice(seeds)]
        stuck = 0
        while len(chosen) < n_nodes and stuck < 20:
            current = rng.choice(chosen[:-1]) if len(chosen) > 1 and rng.random() < backtrack_p else chosen[-1]
            options = [n for n in graph.neighbors(current) if n not in chosen]
            if not options:
                stuck += 1
                continue
            if prefer is not None and rng.random() < prefer_p:
                options = [n for n in options if prefer(current, n)] or options
            chosen.append(rng.choice(sorted(options)))
        if len(chosen) == n_nodes:
            return nx.Graph(graph.subgraph(chosen))
    return None


def topology_hash(sub: nx.Graph) -> str:
    """Weisfeiler-Leman hash of the shape (labels ignored); equal for isomorphic graphs."""
    with warnings.catch_warnings():  # networkx 3.5 notes that unlabelled hashes changed in 3.5
        warnings.simplefilter("ignore", UserWarning)
        return nx.weisfeiler_lehman_graph_hash(nx.convert_node_labels_to_integers(sub), iterations=3)


def has_cycle(sub: nx.Graph) -> bool:
    """True when the subgraph is not a forest (SailorFog-QA-V2 targets 40% of items with one)."""
    return not nx.is_forest(sub)


def structural_roles(sub: nx.Graph) -> list[frozenset]:
    """Automorphism orbits: nodes that any symmetry of the shape can swap share a role.
    Sorted by size, then by the smallest member, so the order is deterministic."""
    parent = {n: n for n in sub}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for mapping in GraphMatcher(sub, sub).isomorphisms_iter():
        for a, b in mapping.items():
            parent[find(a)] = find(b)
    orbits: dict = {}
    for n in sub:
        orbits.setdefault(find(n), set()).add(n)
    return sorted((frozenset(o) for o in orbits.values()), key=lambda o: (len(o), min(map(str, o))))
