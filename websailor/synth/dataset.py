"""The synthesis loop: items appended as they are accepted, resumable, deterministic per seed,
with the topology and cycle balancing of SailorFog-QA-V2, and the dataset report.

Balancing (WebSailor-V2 section 3): an item whose topology already holds ``max_topology_share``
of the accepted items is rejected (``topology_cap``), and while the share of items with a cycle
is below ``min_cycle_share`` an acyclic candidate is rejected (``need_cycle``). Both apply once
a few items exist (the shares are noisy before), and per difficulty level, only at the levels
where several shapes (topology, levels 3 and 4) or cycles (level 4) can occur: a one-hop item
has one shape and no cycle. Candidate ``i`` is drawn from its own random stream (``seed``,
``i``), and the level of the ``j``-th accepted item is ``levels[j % len(levels)]`` (round robin),
so a resumed run continues exactly as an uninterrupted one would.

Before an item is accepted its solution path is replayed through the real local tools
(:mod:`websailor.synth.replay`); a path that does not reach the answer is rejected
(``path_unreachable``).
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

from tqdm import tqdm

from websailor.errors import CorpusError, InputFormatError, InvalidArgumentError
from websailor.jsonio import Unfinished, appending, read_appended_jsonl, read_jsonl
from websailor.log import get_logger
from websailor.synth.graph import KnowledgeGraph
from websailor.synth.item_schema import shape_error
from websailor.synth.items import build_item
from websailor.synth.levels import ATTRIBUTE_OPS, DEFAULT_LEVEL, LEVELS, ItemConfig, check_level
from websailor.synth.replay import PathReplayer
from websailor.synth.wording import has_name_mask, wording_report
from websailor.synth.writer import write_question

if TYPE_CHECKING:
    from collections.abc import Mapping

    from websailor.models.base import ChatModel
    from websailor.synth.difficulty import DifficultyFilter
    from websailor.tools.base import Tool

logger = get_logger(__name__)


def parse_levels(text: str | int | tuple | list) -> tuple[int, ...]:
    """Difficulty levels from ``--level``: ``"3"``, a range ``"1-2"``, a list ``"1,2"`` or
    ``"1-2,4"`` (order kept, repeats allowed: ``"1,1,2"`` makes two level-1 items per level-2
    one), or a sequence of ints.

    Raises:
        ValueError: an empty value, a part that is not a number or range, a reversed range or a
            level outside 1..4 (the message names ``--level``).
    """
    if isinstance(text, int) and not isinstance(text, bool):
        return (check_level(text),)
    if isinstance(text, (tuple, list)):
        if not text:
            raise ValueError("--level needs at least one level (1 to 4)")
        return tuple(check_level(x) for x in text)
    out: list[int] = []
    for part in str(text).replace(" ", "").split(","):
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"--level takes a level 1 to 4, a range such as 1-2, or a list such as 1,2; got {text!r}")
        a, b = int(lo), int(hi) if sep else int(lo)
        if a > b:
            raise ValueError(f"--level range {part} is reversed; write {b}-{a}")
        out.extend(check_level(x) for x in range(a, b + 1))
    return tuple(out)


def format_levels(levels: tuple[int, ...]) -> str:
    """The ``--level`` text of ``levels``: ``(1, 2)`` -> ``"1,2"``."""
    return ",".join(map(str, levels))


@dataclass
class SynthConfig:
    """Dataset-level settings: no topology above a quarter of the items, at least 40% with a cycle
    (the balance targets of the synthesis; docs/synthesis.md), at the levels where they apply.

    ``levels``: the difficulty levels of the items (:data:`websailor.synth.levels.LEVELS`), one
    or several (a ladder: item ``j`` is at ``levels[j % len(levels)]``); default: ``item``'s
    level, 4 without one. ``item``: the item knobs, used for items at its level; other levels
    take their defaults.

    Raises:
        ValueError: a bad count, fraction or level, or an ``item`` at a level not in ``levels``.
    """

    n: int = 500
    seed: int = 0
    test_fraction: float = 0.1
    max_topology_share: float = 0.25
    min_cycle_share: float = 0.40
    warmup: int = 20  # items before balancing applies
    max_attempts_per_item: int = 200
    max_llm_failures: int = 3  # rewrite failures in a row before the run stops asking the model
    item: ItemConfig = None  # type: ignore[assignment]
    levels: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        self.levels = parse_levels(self.levels) if self.levels is not None else None
        if self.item is None:
            self.item = ItemConfig(level=self.levels[0] if self.levels else DEFAULT_LEVEL)
        self.levels = self.levels or (self.item.level,)
        if self.item.level not in self.levels:
            raise ValueError(f"item is at level {self.item.level}, which --level {format_levels(self.levels)} omits")
        if self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}")
        if not 0.0 <= self.test_fraction <= 1.0:
            raise ValueError(f"test_fraction must be in [0, 1], got {self.test_fraction}")

    def item_config(self, level: int) -> ItemConfig:
        """The item knobs at ``level``: ``item`` at its own level, the level's defaults
        elsewhere (with ``item``'s back-tracking probability and share of described answers)."""
        if level == self.item.level:
            return self.item
        return ItemConfig(level=level, backtrack_p=self.item.backtrack_p, described_p=self.item.described_p)

    def level_of(self, index: int) -> int:
        """The level of the ``index``-th item of the file (0-based, round robin)."""
        return self.levels[index % len(self.levels)]


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
        if why := shape_error(rec):
            raise InputFormatError(f"{path} line {lineno} is not a QA item: {why}; use another file or repair it")
        level = rec.get("level", DEFAULT_LEVEL)  # files made before the ladder have none: level 4
        if type(level) is not int or level not in LEVELS:
            raise InputFormatError(
                f"{path} line {lineno}: field 'level' is {level!r}, expected one of {', '.join(map(str, LEVELS))} "
                "(or no field: level 4); use another file or repair it"
            )
    return [rec for _, rec in records]


def read_items(path: Path) -> list[dict]:
    """Items of a QA file, checked (reads only; an unfinished last line is skipped with a warning).

    Raises:
        InputFormatError: a line is not a QA item (which field is missing or of the wrong type).
    """
    return _check_items(Path(path), read_appended_jsonl(Path(path), "a QA item"))


def read_items_and_tail(path: Path) -> tuple[list[dict], Unfinished | None]:
    """Items of a QA file, checked as :func:`read_items` checks them, and its unfinished last
    line (left out, without a warning; ``None`` when there is none), for a caller that shows it.

    Raises:
        InputFormatError: as :func:`read_items`.
    """
    records, unfinished = read_jsonl(Path(path), "a QA item")
    return _check_items(Path(path), records), unfinished


def check_graph(kg: KnowledgeGraph, cfg: SynthConfig) -> None:
    """Fail early on a graph too small to sample from.

    Raises:
        CorpusError: no connected group of ``min(cfg.item.n_nodes)`` linked pages (3 by
            default), so no subgraph can ever be drawn.
    """
    need = min(min(cfg.item_config(level).n_nodes) for level in set(cfg.levels))
    largest = kg.largest_component()
    if largest < need or not kg.walk_starts:
        raise CorpusError(
            f"the corpus's link graph is too small to synthesize from: {len(kg)} pages, "
            f"{kg.number_of_edges()} links, largest group of linked pages {largest}; items need at least "
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
    tools: Mapping[str, Tool] | None = None,
) -> Counter:
    """Append accepted items to ``out`` until it holds ``cfg.n``; returns the reasons of every
    candidate (``accepted``, ``not_unique``, ``leak``, ``topology_cap``, ``path_unreachable``,
    ...). Item ``j`` is at level ``cfg.level_of(j)`` and records it in ``level``.

    With ``tools`` (the local ``search`` and ``visit`` over the graph's corpus,
    :func:`websailor.tools.build_local_tools`), every candidate that passes the other checks
    has its whole solution path replayed through them and is rejected (``path_unreachable``)
    when it does not reach the answer; ``verification.path_replayed`` says whether it was
    replayed (the CLI always passes them; without them nothing is replayed). Each item also
    records, in ``rejected_before``, the candidates rejected since the item before it, so the
    report can give rejection shares for a whole file. Stops early, with a warning, when
    ``max_attempts_per_item`` candidates in a row are rejected.

    With ``llm``, the model writes each accepted item's question from its facts, and the result
    is kept only if it passes the checks again (:mod:`websailor.synth.writer`: no leak, every
    fact it claims stated, every link stated, still unique); otherwise, and when the model
    fails, the template text is kept, the reason recorded in ``rendering`` and counted in the
    returned reasons as ``writer_<reason>``.
    With ``difficulty``, each item is then rated by the reference agent and kept only in the
    filter's band (rejections: ``too_easy``, ``too_hard``).

    Raises:
        CorpusError: the graph is too small (:func:`check_graph`).
        InvalidArgumentError: ``out`` holds items of another seed, test fraction, level or
            share of described answers, or another process is writing it.
        InputFormatError: ``out`` holds lines that are not QA items.
        ModelError: the difficulty filter's model fails (items so far are kept).
    """
    out = Path(out)
    check_graph(kg, cfg)
    with appending(out, "a QA item") as (fh, records):
        replay = PathReplayer(tools) if tools is not None else None
        return _synthesize(kg, out, fh, _check_items(out, records), cfg, progress, llm, difficulty, replay)


def _described_share(item: dict) -> float | None:
    """The ``--described-share`` an item was made with: recorded when above 0; ``None`` (not
    known) for an item of a file made before it was recorded that describes its answer."""
    if "described_share" in item:
        return float(item["described_share"])
    return None if any(c.get("kind") == "described" for c in item["constraints"]) else 0.0


def _check_resumable(out: Path, items: list[dict], cfg: SynthConfig) -> None:
    """Refuse to continue ``out`` (holding ``items``) under other early settings: another seed,
    test fraction, described share or level schedule would mix two streams in one file.

    Raises:
        InvalidArgumentError: naming the setting, the file's value and the option to pass.
    """
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
    shares = sorted({_described_share(it) for it in items} - {cfg.item.described_p, None})
    if shares:
        raise InvalidArgumentError(
            f"{out} holds items synthesized with --described-share {shares[0]:g}; this run uses "
            f"{cfg.item.described_p:g}. Resuming would mix two shares: pass --described-share {shares[0]:g} "
            f"to continue that file, or use another --out"
        )
    for j, it in enumerate(items):
        if it.get("level", DEFAULT_LEVEL) != cfg.level_of(j):
            had = format_levels(tuple(dict.fromkeys(it.get("level", DEFAULT_LEVEL) for it in items)))
            raise InvalidArgumentError(
                f"{out} was made with another --level (item {it['id']}, number {j + 1}, is at level "
                f"{it.get('level', DEFAULT_LEVEL)}; --level {format_levels(cfg.levels)} puts level {cfg.level_of(j)} "
                f"there; the file's items are at levels {had}); pass the same --level to continue it, or use another --out"
            )


class _Balance:
    """The accepted items' counts per level (topologies, cycles, name masks) and keys, which
    refuse a candidate that is a duplicate or would tip a level's balance."""

    def __init__(self, items: list[dict]) -> None:
        self.topo: dict[int, Counter] = {level: Counter() for level in LEVELS}
        self.count: Counter = Counter()
        self.cycles: Counter = Counter()
        self.masks: Counter = Counter()
        self.keys: set[str] = set()
        for it in items:
            self.add(it)

    def add(self, item: dict) -> None:
        level = item.get("level", DEFAULT_LEVEL)
        self.topo[level][item["topology_hash"]] += 1
        self.count[level] += 1
        self.cycles[level] += item["has_cycle"]
        self.masks[level] += has_name_mask(item)
        self.keys.update((item_key(item), question_key(item["question"])))

    def refusal(self, item: dict, level: int, cfg: SynthConfig) -> str | None:
        """Why ``item`` (a candidate at ``level``) is refused: ``duplicate``, ``mask_cap``,
        ``topology_cap`` or ``need_cycle``; ``None`` when it is welcome."""
        spec, have = LEVELS[level], self.count[level]
        if item_key(item) in self.keys or question_key(item["question"]) in self.keys:
            return "duplicate"
        if (
            spec.max_mask_share < 1.0
            and has_name_mask(item)
            and (self.masks[level] + 1) / (have + 1) > spec.max_mask_share
        ):
            return "mask_cap"
        if have >= cfg.warmup:
            if (
                spec.topology_cap
                and (self.topo[level][item["topology_hash"]] + 1) / (have + 1) > cfg.max_topology_share
            ):
                return "topology_cap"
            if spec.cycle_share and not item["has_cycle"] and self.cycles[level] / have < cfg.min_cycle_share:
                return "need_cycle"
        return None


class _Writer:
    """The LLM that rewrites template questions, given up after ``cfg.max_llm_failures`` model
    errors in a row (the rest of the run keeps template questions)."""

    def __init__(self, llm: ChatModel | None, kg: KnowledgeGraph, cfg: SynthConfig) -> None:
        self.llm, self.kg, self.cfg = llm, kg, cfg
        self.failures = 0  # rewrite failures in a row

    def render(self, item: dict, reasons: Counter) -> dict:
        """Rewrite ``item["question"]`` in place when there is a model; the rendering record."""
        if self.llm is None:
            return {"mode": "template"}
        item["question"], rendering = write_question(self.llm, self.kg, item)
        reasons[f"rendered_{rendering['mode']}"] += 1
        if rendering["mode"] == "template":
            reasons[f"writer_{rendering['reason']}"] += 1
        if rendering["mode"] == "template" and rendering["reason"] == "model_error":
            self.failures += 1
            logger.warning("LLM rewrite failed, kept the template question: %s", rendering["reason"])
            if self.failures >= self.cfg.max_llm_failures:
                logger.warning(
                    "the rewrite model failed %d times in a row: the rest of this run keeps the "
                    "template questions (rerun with --llm into another file once it works)",
                    self.failures,
                )
                self.llm = None
        else:
            self.failures = 0
        return rendering


def _synthesize(
    kg: KnowledgeGraph,
    out: Path,
    fh: TextIO,
    items: list[dict],
    cfg: SynthConfig,
    progress: bool,
    llm: ChatModel | None,
    difficulty: DifficultyFilter | None,
    replay: PathReplayer | None = None,
) -> Counter:
    _check_resumable(out, items, cfg)
    balance = _Balance(items)
    writer = _Writer(llm, kg, cfg)
    reasons: Counter = Counter()
    since_last: Counter = Counter()  # rejections since the last accepted item
    attempt = max((it.get("attempt", -1) for it in items), default=-1) + 1
    misses = 0
    with tqdm(total=cfg.n, initial=min(len(items), cfg.n), desc="items", unit="item", disable=not progress) as bar:
        while len(items) < cfg.n:
            level = cfg.level_of(len(items))
            if misses >= cfg.max_attempts_per_item:
                logger.warning(
                    "stopping at %d items (%s): the last %d candidates were all rejected (%s); they were for item %d, "
                    "at level %d of --level %s, and the graph gives no more items at level %d that pass under these "
                    "settings",
                    len(items),
                    ", ".join(f"{n} at level {lv}" for lv, n in sorted(balance.count.items())) or "none yet",
                    misses,
                    dict(reasons),
                    len(items) + 1,
                    level,
                    format_levels(cfg.levels),
                    level,
                )
                break
            rng = random.Random(f"{cfg.seed}/{attempt}")
            item, why = build_item(kg, rng, cfg.item_config(level))
            attempt += 1
            if item is not None and (refused := balance.refusal(item, level, cfg)) is not None:
                item, why = None, refused
            if item is not None and replay is not None:
                reached, detail = replay(item)
                if not reached:
                    logger.debug("path_unreachable (level %d, %s): %s", level, item["answer"], detail)
                    item, why = None, "path_unreachable"
                else:
                    item["verification"]["path_replayed"] = True
            elif item is not None:
                item["verification"]["path_replayed"] = False
            if item is None:
                reasons[why] += 1
                since_last[why] += 1
                misses += 1
                continue
            item["rendering"] = writer.render(item, reasons)
            item_id = f"sf-{cfg.seed}-{attempt - 1}"
            item = {
                "id": item_id,
                **item,
                "split": _split(item_id, cfg.test_fraction),
                "seed": cfg.seed,
                "attempt": attempt - 1,
                # recorded only when on, so files made without described answers read as before
                **({"described_share": cfg.item.described_p} if cfg.item.described_p else {}),
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
            balance.add(item)
            bar.update(1)
    return reasons


def dataset_report(items: list[dict]) -> dict:
    """Figures of a QA file: counts, topologies, cycle ratio, operators (and the share of items
    with a blurred-attribute operator), sizes, lengths, rejections, and ``by_level``: the same
    figures for the items of each difficulty level (``{level: {...}}``, levels as ints; items
    without a level count as level 4)."""
    if not items:
        return {"items": 0}
    report = _figures(items)
    levels = Counter(it.get("level", DEFAULT_LEVEL) for it in items)
    report["levels"] = dict(sorted(levels.items()))
    report["by_level"] = {
        level: _figures([it for it in items if it.get("level", DEFAULT_LEVEL) == level]) for level in sorted(levels)
    }
    return report


def _figures(items: list[dict]) -> dict:
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
        "attribute_op_share": round(
            sum(any(o["op"] in ATTRIBUTE_OPS for o in it["uncertainty"]) for it in items) / len(items), 3
        ),
        "mean_hops": round(statistics.mean(sum(c["kind"] == "linked" for c in it["constraints"]) for it in items), 2),
        "mean_nodes": round(statistics.mean(len(it["subgraph"]["nodes"]) for it in items), 2),
        "mean_edges": round(statistics.mean(len(it["subgraph"]["edges"]) for it in items), 2),
        "mean_constraints": round(statistics.mean(len(it["constraints"]) for it in items), 2),
        "mean_question_words": round(statistics.mean(len(it["question"].split()) for it in items), 1),
        "path_replayed": sum(bool((it.get("verification") or {}).get("path_replayed")) for it in items),
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
        "wording": wording_report(items),
    }
