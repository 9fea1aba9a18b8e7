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
from typing import TYPE_CHECKING

from tqdm import tqdm

from websailor.jsonio import read_appended_jsonl
from websailor.log import get_logger
from websailor.synth.graph import KnowledgeGraph
from websailor.synth.constraints import Constraint
from websailor.synth.items import ItemConfig, build_item
from websailor.synth.rewrite import rewrite_question

if TYPE_CHECKING:
    from websailor.models.base import ChatModel

logger = get_logger(__name__)


@dataclass
class SynthConfig:
    """Dataset-level settings (defaults from the issue's targets)."""

    n: int = 500
    seed: int = 0
    test_fraction: float = 0.1
    max_topology_share: float = 0.25
    min_cycle_share: float = 0.40
    warmup: int = 20  # items before balancing applies
    max_attempts_per_item: int = 200
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


def read_items(path: Path) -> list[dict]:
    """Items of a QA file; a half-written last line (a killed run) is dropped from the file."""
    return [rec for _, rec in read_appended_jsonl(path, "a QA item")]


def synthesize(kg: KnowledgeGraph, out: str | Path, cfg: SynthConfig, progress: bool = True,
               llm: "ChatModel | None" = None) -> Counter:
    """Append accepted items to ``out`` until it holds ``cfg.n``; returns the reasons of every
    candidate (``accepted``, ``not_unique``, ``leak``, ``topology_cap``, ...). Stops early, with
    a warning, when ``max_attempts_per_item`` candidates in a row are rejected.

    With ``llm``, each accepted question is rewritten into fluent prose when the rewrite keeps
    every constraint and leaks nothing (:mod:`websailor.synth.rewrite`); otherwise, and when
    the model fails, the template text is kept and the reason recorded in ``rendering``."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    items = read_items(out)
    topo = Counter(it["topology_hash"] for it in items)
    cycles = sum(it["has_cycle"] for it in items)
    reasons: Counter = Counter()
    attempt = max((it.get("attempt", -1) for it in items), default=-1) + 1
    misses = 0
    with out.open("a", encoding="utf-8") as fh, \
            tqdm(total=cfg.n, initial=min(len(items), cfg.n), desc="items", unit="item", disable=not progress) as bar:
        while len(items) < cfg.n:
            if misses >= cfg.max_attempts_per_item:
                logger.warning("stopping at %d items: the last %d candidates were all rejected (%s); the graph "
                               "cannot supply more under these settings", len(items), misses, dict(reasons))
                break
            rng = random.Random(f"{cfg.seed}/{attempt}")
            item, why = build_item(kg, rng, cfg.item)
            attempt += 1
            if item is not None and len(items) >= cfg.warmup:
                if (topo[item["topology_hash"]] + 1) / (len(items) + 1) > cfg.max_topology_share:
                    item, why = None, "topology_cap"
                elif not item["has_cycle"] and cycles / len(items) < cfg.min_cycle_share:
                    item, why = None, "need_cycle"
            reasons[why] += 1
            if item is None:
                misses += 1
                continue
            misses = 0
            rendering = {"mode": "template"}
            if llm is not None:
                cs = [Constraint.from_dict(c) for c in item["constraints"]]
                item["question"], rendering = rewrite_question(llm, item["question"], cs, item["answer"])
                reasons[f"rendered_{rendering['mode']}"] += 1
                if rendering["mode"] == "template" and rendering["reason"].startswith("model error"):
                    logger.warning("LLM rewrite failed, kept the template question: %s", rendering["reason"])
            item["rendering"] = rendering
            item_id = f"sf-{cfg.seed}-{attempt - 1}"
            item = {"id": item_id, **item, "split": _split(item_id, cfg.test_fraction), "seed": cfg.seed,
                    "attempt": attempt - 1}
            fh.write(json.dumps(item, ensure_ascii=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
            items.append(item)
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
    }
