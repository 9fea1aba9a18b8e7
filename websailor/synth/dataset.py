"""The synthesis loop: items appended as they are accepted, resumable, deterministic per seed,
with the topology and cycle balancing of SailorFog-QA-V2, and the dataset report.

Balancing (WebSailor-V2 section 3): an item whose topology already holds ``max_topology_share``
of the accepted items is rejected (``topology_cap``), and while the share of items with a cycle
is below ``min_cycle_share`` an acyclic candidate is rejected (``need_cycle``). Both apply once
a few items exist (the shares are noisy before). Item ``i`` is drawn from its own random stream
(``seed``, ``i``), so a resumed run continues exactly as an uninterrupted one would.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import networkx as nx
from tqdm import tqdm

from websailor.errors import CorpusError, InputFormatError, InvalidArgumentError
from websailor.jsonio import appending, read_appended_jsonl
from websailor.log import get_logger
from websailor.synth.constraints import Constraint
from websailor.synth.graph import KnowledgeGraph
from websailor.synth.items import ItemConfig, build_item
from websailor.synth.rewrite import rewrite_question

if TYPE_CHECKING:
    from websailor.models.base import ChatModel
    from websailor.synth.difficulty import DifficultyFilter

logger = get_logger(__name__)


@dataclass
class SynthConfig:
    """Dataset-level settings: no topology above a quarter of the items, at least 40% with a cycle
    (the balance targets of the synthesis; docs/synthesis.md)."""

    n: int = 500
    seed: int = 0
    test_fraction: float = 0.1
    max_topology_share: float = 0.25
    min_cycle_share: float = 0.40
    warmup: int = 20  # items before balancing applies
    max_attempts_per_item: int = 200
    max_llm_failures: int = 3  # rewrite failures in a row before the run stops asking the model
    item: ItemConfig = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        self.item = self.item or ItemConfig()
        if self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}")
        if not 0.0 <= self.test_fraction <= 1.0:
            raise ValueError(f"test_fraction must be in [0, 1], got {self.test_fraction}")


def _split(item_id: str, test_fraction: float) -> str:
    h = int(hashlib.sha1(item_id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "test" if h < test_fraction else "train"


def item_key(item: dict) -> str:
    """Identity of an item's content: its answer and its set of constraints (in any order), so
    the same question rendered twice, or with its clauses reordered, counts once."""
    cs = sorted(json.dumps([c["kind"], c["params"]], sort_keys=True) for c in item["constraints"])
    return hashlib.sha1(json.dumps([item["answer"], cs]).encode()).hexdigest()


#: fields every QA item has, with their types (checked when a file is read)
ITEM_FIELDS: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "question": str,
    "answer": str,
    "topology_hash": str,
    "has_cycle": bool,
    "constraints": list,
    "uncertainty": list,
    "subgraph": dict,
    "procedure": list,
    "seed": int,
    "attempt": int,
}


def question_key(question: str) -> str:
    """Normalized question text: two items that read the same are duplicates."""
    return " ".join(question.lower().split())


def _check_items(path: Path, records: list[tuple[int, dict]]) -> list[dict]:
    for lineno, rec in records:
        for name, kind in ITEM_FIELDS.items():
            value = rec.get(name)
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                what = (
                    "missing"
                    if name not in rec
                    else f"a {type(value).__name__}, expected {getattr(kind, '__name__', kind)}"
                )
                raise InputFormatError(
                    f"{path} line {lineno} is not a QA item: field {name!r} is {what}; use another file or repair it"
                )
    return [rec for _, rec in records]


def read_items(path: Path) -> list[dict]:
    """Items of a QA file, checked (reads only; an unfinished last line is skipped).

    Raises:
        InputFormatError: a line is not a QA item (which field is missing or of the wrong type).
    """
    return _check_items(Path(path), read_appended_jsonl(Path(path), "a QA item"))


def check_graph(kg: KnowledgeGraph, cfg: SynthConfig) -> None:
    """Fail early on a graph too small to sample from.

    Raises:
        CorpusError: no connected group of ``min(cfg.item.n_nodes)`` linked pages (3 by
            default), so no subgraph can ever be drawn.
    """
    need = min(cfg.item.n_nodes)
    largest = max((len(c) for c in nx.connected_components(kg.graph)), default=0)
    if largest < need or not kg.walk_starts:
        raise CorpusError(
            f"the corpus's link graph is too small to synthesize from: {kg.graph.number_of_nodes()} pages, "
            f"{kg.graph.number_of_edges()} links, largest group of linked pages {largest}; items need at least "
            f"{need} pages linked together (one of them linked to two others). Build a larger corpus "
            "(the embedded vital corpus gives a graph of 10,033 pages and 27,455 links)"
        )


def synthesize(
    kg: KnowledgeGraph,
    out: str | Path,
    cfg: SynthConfig,
    progress: bool = True,
    llm: ChatModel | None = None,
    difficulty: DifficultyFilter | None = None,
) -> Counter:
    """Append accepted items to ``out`` until it holds ``cfg.n``; returns the reasons of every
    candidate (``accepted``, ``not_unique``, ``leak``, ``topology_cap``, ...). Each item also
    records, in ``rejected_before``, the candidates rejected since the item before it, so the
    report can give rejection shares for a whole file. Stops early, with a warning, when
    ``max_attempts_per_item`` candidates in a row are rejected.

    With ``llm``, each accepted question is rewritten into fluent prose when the rewrite keeps
    every constraint and leaks nothing (:mod:`websailor.synth.rewrite`); otherwise, and when
    the model fails, the template text is kept and the reason recorded in ``rendering``.
    With ``difficulty``, each item is then rated by the reference agent and kept only in the
    filter's band (rejections: ``too_easy``, ``too_hard``).

    Raises:
        CorpusError: the graph is too small (:func:`check_graph`).
        InvalidArgumentError: ``out`` holds items of another seed or test fraction, or
            another process is writing it.
        InputFormatError: ``out`` holds lines that are not QA items.
        ModelError: the difficulty filter's model fails (items so far are kept).
    """
    out = Path(out)
    check_graph(kg, cfg)
    with appending(out, "a QA item") as (fh, records):
        return _synthesize(kg, out, fh, _check_items(out, records), cfg, progress, llm, difficulty)


def _synthesize(
    kg: KnowledgeGraph,
    out: Path,
    fh: TextIO,
    items: list[dict],
    cfg: SynthConfig,
    progress: bool,
    llm: ChatModel | None,
    difficulty: DifficultyFilter | None,
) -> Counter:
    seeds = sorted({it["seed"] for it in items} - {cfg.seed})
    if seeds:
        raise InvalidArgumentError(
            f"{out} holds items synthesized with seed {seeds[0]}; this run uses seed {cfg.seed}. Resuming would "
            f"mix two streams: pass --seed {seeds[0]} to continue that file, or use another --out"
        )
    odd = next((it for it in items if it.get("split") != _split(it["id"], cfg.test_fraction)), None)
    if odd is not None:
        raise InvalidArgumentError(
            f"{out} was made with another --test-fraction (item {odd['id']} is in split "
            f"{odd.get('split')!r}); pass the same fraction to continue it, or use another --out"
        )
    topo = Counter(it["topology_hash"] for it in items)
    keys = {item_key(it) for it in items} | {question_key(it["question"]) for it in items}
    cycles = sum(it["has_cycle"] for it in items)
    reasons: Counter = Counter()
    since_last: Counter = Counter()  # rejections since the last accepted item
    attempt = max((it.get("attempt", -1) for it in items), default=-1) + 1
    misses = 0
    llm_failures = 0  # rewrite failures in a row
    with tqdm(total=cfg.n, initial=min(len(items), cfg.n), desc="items", unit="item", disable=not progress) as bar:
        while len(items) < cfg.n:
            if misses >= cfg.max_attempts_per_item:
                logger.warning(
                    "stopping at %d items: the last %d candidates were all rejected (%s); the graph "
                    "gives no more items that pass under these settings",
                    len(items),
                    misses,
                    dict(reasons),
                )
                break
            rng = random.Random(f"{cfg.seed}/{attempt}")
            item, why = build_item(kg, rng, cfg.item)
            attempt += 1
            if item is not None and (item_key(item) in keys or question_key(item["question"]) in keys):
                item, why = None, "duplicate"
            if item is not None and len(items) >= cfg.warmup:
                if (topo[item["topology_hash"]] + 1) / (len(items) + 1) > cfg.max_topology_share:
                    item, why = None, "topology_cap"
                elif not item["has_cycle"] and cycles / len(items) < cfg.min_cycle_share:
                    item, why = None, "need_cycle"
            if item is None:
                reasons[why] += 1
                since_last[why] += 1
                misses += 1
                continue
            rendering = {"mode": "template"}
            if llm is not None:
                cs = [Constraint.from_dict(c) for c in item["constraints"]]
                item["question"], rendering = rewrite_question(llm, item["question"], cs, item["answer"])
                reasons[f"rendered_{rendering['mode']}"] += 1
                if rendering["mode"] == "template" and rendering["reason"].startswith("model error"):
                    llm_failures += 1
                    logger.warning("LLM rewrite failed, kept the template question: %s", rendering["reason"])
                    if llm_failures >= cfg.max_llm_failures:
                        logger.warning(
                            "the rewrite model failed %d times in a row: the rest of this run keeps the "
                            "template questions (rerun with --llm into another file once it works)",
                            llm_failures,
                        )
                        llm = None
                else:
                    llm_failures = 0
            item["rendering"] = rendering
            item_id = f"sf-{cfg.seed}-{attempt - 1}"
            item = {
                "id": item_id,
                **item,
                "split": _split(item_id, cfg.test_fraction),
                "seed": cfg.seed,
                "attempt": attempt - 1,
            }
            if difficulty is not None:
                item["difficulty"] = difficulty.rate(item)
                why = difficulty.keeps(item["difficulty"])
                if why != "kept":
                    reasons[why] += 1
                    since_last[why] += 1
                    misses += 1
                    bar.set_postfix(rejected_by_difficulty=reasons["too_easy"] + reasons["too_hard"])
                    continue
            reasons["accepted"] += 1
            misses = 0
            item["rejected_before"] = dict(since_last)
            since_last.clear()
            fh.write(json.dumps(item, ensure_ascii=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
            items.append(item)
            keys.update((item_key(item), question_key(item["question"])))
            topo[item["topology_hash"]] += 1
            cycles += item["has_cycle"]
            bar.update(1)
    return reasons


def dataset_report(items: list[dict]) -> dict:
    """Figures of a QA file: counts, topologies, cycle ratio, operators, sizes, lengths."""
    if not items:
        return {"items": 0}
    topo = Counter(it["topology_hash"] for it in items)
    ops = Counter(o["op"] for it in items for o in it["uncertainty"])
    rejected: Counter = Counter()
    for it in items:
        rejected.update(it.get("rejected_before") or {})
    n_candidates = len(items) + sum(rejected.values())
    rated = [it["difficulty"] for it in items if it.get("difficulty")]
    return {
        "items": len(items),
        "splits": dict(Counter(it.get("split", "?") for it in items)),
        "distinct_topologies": len(topo),
        "largest_topology_share": round(max(topo.values()) / len(items), 3),
        "cycle_ratio": round(sum(it["has_cycle"] for it in items) / len(items), 3),
        "operators": dict(ops.most_common()),
        "mean_nodes": round(statistics.mean(len(it["subgraph"]["nodes"]) for it in items), 2),
        "mean_edges": round(statistics.mean(len(it["subgraph"]["edges"]) for it in items), 2),
        "mean_constraints": round(statistics.mean(len(it["constraints"]) for it in items), 2),
        "mean_question_words": round(statistics.mean(len(it["question"].split()) for it in items), 1),
        "candidates": n_candidates,
        "rejected_share": {k: round(v / n_candidates, 3) for k, v in rejected.most_common()},
        "with_aliases": sum(bool(it.get("aliases")) for it in items),
        "difficulty": (
            {
                "rated": len(rated),
                "mean_correct": round(statistics.mean(d["correct"] for d in rated), 2),
                "k": sorted({d["k"] for d in rated}),
            }
            if rated
            else None
        ),
        "rendering": dict(Counter((it.get("rendering") or {}).get("mode", "template") for it in items)),
    }
