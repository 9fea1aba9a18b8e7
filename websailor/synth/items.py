"""Building one SailorFog-QA-V2 item in template mode (no LLM): sample a subgraph, pick the
target by structural role, turn its neighbours and attributes into vague constraints, add them
until the target is the only node of the whole graph that satisfies them (and at least
``min_constraints`` are stated), render the question and verify it. The dataset loop
(:mod:`websailor.synth.dataset`) balances topologies and cycles and may rewrite the text with an
LLM (:mod:`websailor.synth.writer`).

Difficulty levels (:data:`~websailor.synth.levels.LEVELS`, docs/synthesis.md "Difficulty levels"): 1, a lookup (one
neighbour named by its title, one search away from the answer's page); 2, one described hop and
a blurred value; 3, two or more described hops converging on the answer; 4 (the default), the
multi-hop, obfuscated items with cycles of SailorFog-QA-V2.

Uncertainty operators recorded in ``uncertainty`` (each with its parameters):

* ``describe``: a linked entity is named only by its description ("a 1968 film by Stanley
  Kubrick" instead of "2001: A Space Odyssey"), so it must be found first.
* ``vague_relation``: the link is stated as an unspecified association ("is associated with"),
  which happens only where no relation phrase could be read from its evidence sentences
  (:mod:`websailor.synth.relations`); otherwise the link is worded as its evidence states it
  ("is an oil-on-canvas painting by a Dutch painter").
* ``intersection``: two or more linked entities converge on the target (a cycle or a hub of the
  subgraph), each alone too weak to identify it.
* ``vague_period``: a year blurred to a decade, century or part of a century.
* ``vague_number``: a quantity blurred to an order of magnitude or a lower bound.
* ``mask_name``: the answer's name as initials or letter counts (at levels 3 and 4 offered in
  only :attr:`~websailor.synth.levels.Level.mask_p` of items, so that most of their uncertainty comes from the other
  operators).
* ``comparison``: the target is compared with a described neighbour on a quantity ("is longer
  than a major river in northeast Africa").
* ``relative_time`` (ours): the target's date is given only relative to a described
  neighbour's ("was born about 3 decades after an Italian polymath was born"). Neither date
  appears, so the solver must find both entities and do the arithmetic: this blurs a value and
  ties it to a second hop at once, which none of the other operators does.
"""

from __future__ import annotations

import random
import re

from websailor import __version__
from websailor.synth.constraints import Constraint, candidates, is_leak_free, is_supported
from websailor.synth.graph import SPAN_IN_DESC, KnowledgeGraph, description_key
from websailor.synth.levels import ItemConfig
from websailor.synth.phrasing import (
    describe,
    is_named,
    is_person,
    render,
    worded_relation,
)
from websailor.synth.sampling import has_cycle, sample_subgraph, structural_roles, topology_hash
from websailor.synth.vague import bare_name, mask_name, vague_number, vague_period

_QUANTITY_VERB = {"length": "is", "area": "covers", "height": "rises", "population": "has a population of"}
_COMPARE = {
    "length": ("is longer than", "is shorter than"),
    "area": ("covers a larger area than", "covers a smaller area than"),
    "height": ("rises higher than", "is lower than"),
    "population": ("is more populous than", "is less populous than"),
}


def aliases_of(title: str) -> list[str]:
    """Other forms a judge should accept for a page title: without the disambiguation in
    parentheses ("Mercury (planet)" -> "Mercury") and without a leading article ("The
    Beatles" -> "Beatles")."""
    out: list[str] = []
    bare = bare_name(title)
    for form in (bare, re.sub(r"^(?:The|A|An)\s+", "", bare)):
        if form and form != title and form not in out:
            out.append(form)
    return out


def _link_constraint(kg: KnowledgeGraph, target: str, other: str, name: str) -> tuple[Constraint, list[dict]]:
    """A ``linked`` constraint naming ``other`` as ``name`` (its description or its title),
    worded with the evidence's relation phrase when there is one, else as an association
    (``vague_relation``)."""
    evidence = tuple({"sentence": e["sentence"], "url": e["url"]} for e in kg.evidence(target, other))
    params = {"other": other, "others": kg.referents(other) if name != other else [other]}
    worded = worded_relation(kg, target, other)
    if worded is None:
        c = Constraint("linked", params, f"is associated with {name}", evidence)
        return c, [{"op": "vague_relation", "params": {"entity": other}}]
    relation, form = worded
    phrase = f"{relation} {name}" if form == "subject" else f"{name} {relation}"
    return Constraint("linked", {**params, "relation": relation, "form": form}, phrase, evidence), []


def _linked(kg: KnowledgeGraph, target: str, other: str, rng: random.Random) -> tuple[Constraint, list[dict]] | None:
    phrase = describe(kg, other)
    if phrase is None:
        return None
    c, ops = _link_constraint(kg, target, other, phrase)
    return c, [{"op": "describe", "params": {"entity": other}}, *ops]


def _attribute_constraints(kg: KnowledgeGraph, target: str, rng: random.Random) -> list[tuple[Constraint, dict]]:
    attrs = kg.attributes(target)
    url = kg.url(target)
    out: list[tuple[Constraint, dict]] = []
    if attrs.span:
        which = rng.choice(["span_start", "span_end"])
        year = attrs.span[0 if which == "span_start" else 1]
        v = vague_period(year, rng)
        if is_person(kg, target):
            verb = "was born" if which == "span_start" else "died"
        elif attrs.topic in ("", "Uncategorized"):  # a life or a period: the corpus does not say which
            verb = "whose life or period began" if which == "span_start" else "whose life or period ended"
        else:
            verb = "began" if which == "span_start" else "ended"
        ev = ({"sentence": attrs.description, "url": url},)
        out.append(
            (
                Constraint(which, {"lo": v.lo, "hi": v.hi}, f"{verb} {v.phrase}", ev),
                {"op": "vague_period", "params": {"year": year, **v.params}},
            )
        )
    # one quantity of each kind: a city's population and its metro area's would read as two
    # contradictory figures ("more than 10 million" and "between 1 and 10 million")
    first_of_kind = list({q.kind: q for q in reversed(attrs.quantities)}.values())[::-1]
    for q in [q for q in attrs.quantities if q in first_of_kind][:2]:
        if q.value >= 1:
            v = vague_number(q.value, q.kind, rng)
            out.append(
                (
                    Constraint(
                        "quantity",
                        {"kind": q.kind, "lo": v.lo, "hi": v.hi},
                        f"{_QUANTITY_VERB[q.kind]} {v.phrase}" + (" long" if q.kind == "length" else ""),
                        ({"sentence": q.sentence, "url": url},),
                    ),
                    {"op": "vague_number", "params": {"kind": q.kind, "value": q.value, **v.params}},
                )
            )
    m = mask_name(target, rng)
    out.append(
        (
            Constraint(
                "name", {"style": m.style, "pattern": list(m.pattern)}, m.phrase, ({"sentence": target, "url": url},)
            ),
            {"op": "mask_name", "params": {"style": m.style}},
        )
    )
    return out


def _relational_constraints(
    kg: KnowledgeGraph, target: str, neighbours: list[str], rng: random.Random
) -> list[tuple[Constraint, dict]]:
    """Comparisons on a shared quantity kind, and dates relative to a neighbour's."""
    mine = kg.attributes(target)
    url = kg.url(target)
    out: list[tuple[Constraint, dict]] = []
    for other in neighbours:
        theirs = kg.attributes(other)
        phrase = describe(kg, other)
        if phrase is None:
            continue
        other_url = kg.url(other)
        for q in mine.quantities:
            oq = next((x for x in theirs.quantities if x.kind == q.kind), None)
            if oq is None or oq.value == q.value or q is not next(x for x in mine.quantities if x.kind == q.kind):
                continue
            more = q.value > oq.value
            ev = ({"sentence": q.sentence, "url": url}, {"sentence": oq.sentence, "url": other_url})
            out.append(
                (
                    Constraint(
                        "compare",
                        {"kind": q.kind, "other": other, "others": kg.referents(other), "more": more},
                        f"{_COMPARE[q.kind][0 if more else 1]} {phrase}",
                        ev,
                    ),
                    {"op": "comparison", "params": {"kind": q.kind, "entity": other, "more": more}},
                )
            )
        if mine.span and theirs.span:
            delta = mine.span[0] - theirs.span[0]
            decades = round(abs(delta) / 10)
            if decades >= 1:
                # the interval is what the phrase says: "about 3 decades" is 25 to 35 years,
                # "about 19 centuries" 1,850 to 1,950 years
                sign = 1 if delta > 0 else -1
                if decades < 20:
                    gap, center, half = f"{decades} decade{'s' if decades > 1 else ''}", sign * decades * 10, 5
                else:
                    centuries = round(abs(delta) / 100)
                    gap, center, half = f"{centuries} centuries", sign * centuries * 100, 50
                lo, hi = center - half, center + half
                side = "after" if delta > 0 else "before"
                ev = ({"sentence": mine.description, "url": url}, {"sentence": theirs.description, "url": other_url})
                mine_verb = "was born" if is_person(kg, target) else "began"
                their_verb = "was born" if is_person(kg, other) else "began"
                out.append(
                    (
                        Constraint(
                            "relative_start",
                            {"other": other, "others": kg.referents(other), "lo": lo, "hi": hi},
                            f"{mine_verb} about {gap} {side} {phrase} {their_verb}",
                            ev,
                        ),
                        {"op": "relative_time", "params": {"entity": other, "delta_years": delta}},
                    )
                )
    return out


def _unworded(choice: tuple[Constraint, list[dict]]) -> bool:
    """A link worded as a mere association (sorted after everything else)."""
    c = choice[0]
    return c.kind == "linked" and "relation" not in c.params


def _valued(kg: KnowledgeGraph, node: str) -> bool:
    a = kg.attributes(node)
    return bool(a.span or any(q.value >= 1 for q in a.quantities))


def _plain_link(kg: KnowledgeGraph, target: str, other: str) -> tuple[Constraint, list[dict]]:
    """A link stated with the other page's title (level 1: no ``describe``)."""
    return _link_constraint(kg, target, other, other)


def build_item(kg: KnowledgeGraph, rng: random.Random, cfg: ItemConfig | None = None) -> tuple[dict | None, str]:
    """One item at ``cfg.level`` (default 4), or ``(None, reason)`` with reason
    ``no_subgraph``, ``common_noun`` (no member of a role is a named entity, :func:`is_named`),
    ``no_forward_hop``, ``not_describable``, ``too_few_hops``, ``repeated`` (two constraints
    worded alike), ``not_unique``, ``leak`` or ``unsupported``. The item's solution ``procedure`` is built here; replaying it through the
    real tools is the dataset loop's check (:mod:`websailor.synth.replay`).

    Level 1 (a lookup) states one neighbour by its title and the answer's name mask, and its
    procedure is one search of that title, expected to return the answer's page. Levels 2 to 4
    follow SailorFog-QA-V2 (WebSailor-V2 section 3): described neighbours, blurred values, and
    at level 3 and 4 several hops converging on the answer."""
    cfg = cfg or ItemConfig()
    spec = cfg.spec
    described = cfg.described_p > 0 and rng.random() < cfg.described_p
    for _ in range(spec.value_tries):
        sub = sample_subgraph(
            kg,
            rng,
            n_nodes=rng.choice(cfg.n_nodes),
            backtrack_p=cfg.backtrack_p,
            starts=kg.walk_starts,
            prefer=kg.is_worded,
            prefer_p=cfg.worded_p,
        )
        if sub is None:
            return None, "no_subgraph"
        if any(_valued(kg, n) for n in sub):
            break
    # the answer is a named entity: roles are drawn evenly among those with a named member
    roles = [r for r in structural_roles(sub) if any(is_named(kg, n) for n in r)]
    if not roles:
        return None, "common_noun"
    role = rng.choice(roles)
    # within the drawn role, prefer a node with a value to blur (a date or a quantity): values
    # are rarer than links, and the role stays evenly drawn
    members = sorted(n for n in role if is_named(kg, n))
    valued = [n for n in members if kg.attributes(n).span or kg.attributes(n).quantities]
    if not valued and spec.attributes:
        # the ladder keeps blurred values frequent: a role without one gives way to a role with one
        with_values = [r for r in roles if any(_valued(kg, n) and is_named(kg, n) for n in r)]
        if with_values:
            role = rng.choice(with_values)
            members = sorted(n for n in role if is_named(kg, n))
            valued = [n for n in members if _valued(kg, n)]
    if not spec.describe:  # level 1: a lookup
        return _build_lookup(kg, rng, sub, role, cfg, described)
    if described:
        members = [n for n in members if _self_described(kg, n)]
        valued = [n for n in valued if n in members]
        if not members:
            return None, "not_describable"
    target = rng.choice(valued or members)
    pool: list[tuple[Constraint, list[dict]]] = []
    for other in sorted(sub.neighbors(target)):
        got = _linked(kg, target, other, rng)
        if got:
            pool.append(got)
    rng.shuffle(pool)
    pool.sort(key=_unworded)  # links worded by their evidence first, in random order among them
    # the first hop must be findable by its description and its own page must mention the
    # target, so that the solution procedure (search it, read its page) leads to the answer
    forward = [
        i
        for i, (c, _) in enumerate(pool)
        if kg.is_findable(c.params["other"]) and any(e["url"] != kg.url(target) for e in c.evidence)
    ]
    if not forward:
        return None, "no_forward_hop"
    pool.insert(0, pool.pop(forward[0]))
    # one hop first (every item is multi-hop), then a blurred value when the target has one
    # (values are rarer than links, so they would otherwise seldom be drawn), then links and
    # the other blurred attributes in random order
    attrs = _attribute_constraints(kg, target, rng) + _relational_constraints(
        kg, target, sorted(sub.neighbors(target)), rng
    )
    if spec.mask_p < 1.0 and rng.random() >= spec.mask_p:
        attrs = [(c, op) for c, op in attrs if c.kind != "name"]
    rest = pool[1:] + [(c, [op]) for c, op in attrs]
    rng.shuffle(rest)
    rest.sort(key=_unworded)
    values = [i for i, (c, _) in enumerate(rest) if c.kind not in ("linked", "name")]
    if values:
        rest.insert(0, rest.pop(values[0]))
    if spec.hops >= 2:  # the hops a level asks for come right after the value
        links = [i for i, (c, _) in enumerate(rest) if c.kind == "linked"]
        if len(links) + 1 < spec.hops:
            return None, "too_few_hops"
        for k, i in enumerate(links[: spec.hops - 1]):
            rest.insert(int(bool(values)) + k, rest.pop(i))
    pool = pool[:1] + rest
    chosen: list[tuple[Constraint, list[dict]]] = []
    if described:  # the answer's own description first; the level's constraints after it
        chosen.append(_self_described(kg, target))
    for c, ops in pool:
        if len(chosen) >= cfg.max_constraints + described:
            break
        chosen.append((c, ops))
        if len(chosen) >= cfg.min_constraints and candidates(kg, [x for x, _ in chosen]) == [target]:
            break
    return _finish(kg, sub, role, target, chosen, cfg, described)


def _self_described(kg: KnowledgeGraph, target: str) -> tuple[Constraint, list[dict]] | None:
    """The ``described`` constraint of ``target``: "is <its description>" (:func:`describe`),
    with its page's first sentence as evidence, or ``None`` when the page has no description
    a question can state in the singular, no first sentence, or a description whose search
    does not find the page (``findable``)."""
    attrs = kg.attributes(target)
    desc = describe(kg, target)
    if not desc or not desc.startswith(("a ", "an ", "the ")) or not attrs.lead or not kg.is_findable(target):
        return None
    c = Constraint(
        "described",
        {"key": description_key(attrs.description)},
        f"is {desc}",
        ({"sentence": attrs.lead, "url": kg.url(target)},),
    )
    return c, [{"op": "self_description", "params": {"description": attrs.description}}]


def _build_lookup(
    kg: KnowledgeGraph, rng: random.Random, sub, role, cfg: ItemConfig, described: bool = False
) -> tuple[dict | None, str]:
    """Level 1: the answer is linked to a page named plainly, and its own page mentions that
    page, so a search of the title finds the answer among the pages that mention it. The
    neighbour with fewer links is the clue (a specific name, whose search hits few pages).
    ``described``: the question also states the answer's own description, first."""
    pairs = []
    for target in sorted(n for n in role if is_named(kg, n) and (not described or _self_described(kg, n))):
        url = kg.url(target)
        for other in sorted(sub.neighbors(target)):
            if any(e["url"] == url for e in kg.evidence(target, other)):
                pairs.append((kg.degree(other), rng.random(), target, other))
    if not pairs:
        return None, "not_describable" if described and any(is_named(kg, n) for n in role) else "no_forward_hop"
    _, _, target, other = min(pairs)
    chosen = ([_self_described(kg, target)] if described else []) + [_plain_link(kg, target, other)]
    attrs = [(c, [op]) for c, op in _attribute_constraints(kg, target, rng) if c.kind == "name"]
    for c, ops in attrs:
        if len(chosen) >= cfg.max_constraints + described:
            break
        if len(chosen) >= cfg.min_constraints and candidates(kg, [x for x, _ in chosen]) == [target]:
            break
        chosen.append((c, ops))
    return _finish(kg, sub, role, target, chosen, cfg, described)


def _finish(
    kg: KnowledgeGraph,
    sub,
    role,
    target: str,
    chosen: list[tuple[Constraint, list[dict]]],
    cfg: ItemConfig,
    described: bool = False,
) -> tuple[dict | None, str]:
    """Verify the chosen constraints (unique, leak-free, supported) and assemble the item;
    ``described``: the question states the answer's own description, and its procedure is the
    short path (search that description, read the answer's page)."""
    constraints = [c for c, _ in chosen]
    if len({c.phrase for c in constraints}) < len(constraints):
        return None, "repeated"  # a neighbour worded as the answer's own description says the same twice
    if candidates(kg, constraints) != [target]:
        return None, "not_unique"
    ops = [op for _, o in chosen for op in o]
    n_linked = sum(c.kind == "linked" for c in constraints)
    if n_linked < cfg.spec.hops:
        return None, "too_few_hops"
    if n_linked >= 2:
        ops.append(
            {
                "op": "intersection",
                "params": {"entities": [c.params["other"] for c in constraints if c.kind == "linked"]},
            }
        )
    question = render(kg, target, constraints)
    aliases = aliases_of(target)
    if not is_leak_free(question, target, aliases):
        return None, "leak"
    if not is_supported(constraints):
        return None, "unsupported"
    item = {
        "question": question,
        "answer": target,
        "aliases": aliases,
        "target_url": kg.url(target),
        "level": cfg.level,
        "subgraph": {
            "nodes": [{"id": n, "title": n, "url": kg.url(n)} for n in sorted(sub)],
            "edges": _edges(kg, sub),
        },
        "topology_hash": topology_hash(sub),
        "has_cycle": has_cycle(sub),
        "target_role_size": len(role),
        "uncertainty": ops,
        "constraints": [c.to_dict() for c in constraints],
        "procedure": _procedure(kg, target, constraints, lookup=not cfg.spec.describe, described=described),
        "verification": {"unique": True, "leak_free": True, "supported": True},
        "difficulty": None,
        "version": __version__,
    }
    return item, "accepted"


def _edges(kg: KnowledgeGraph, sub) -> list[dict]:
    """The subgraph's edges, each directed as its evidence reads (``src``'s page mentions
    ``dst`` in ``evidence``, found at ``url``), in a fixed order (the same in every process)."""
    out = []
    for a, b in sub.edges():
        ev = min(kg.evidence(a, b), key=lambda e: (e["source"], e["target"], e["sentence"]))
        out.append({"src": ev["source"], "dst": ev["target"], "evidence": ev["sentence"], "url": ev["url"]})
    return sorted(out, key=lambda e: (e["src"], e["dst"]))


def _procedure(
    kg: KnowledgeGraph, target: str, constraints: list[Constraint], lookup: bool = False, described: bool = False
) -> list[dict]:
    """Steps that solve the item in the local environment: for each linked entity, search its
    description and read its page (for the first hop that page mentions the target: the
    ``evidence``), then open the target's page to check the other constraints. A ``lookup``
    (level 1) searches the linked page's title, expects the target's page among the results,
    and reads it; a ``described`` item searches the target's own description instead (the
    short path, whatever the level).

    Each visit also lists in ``mentions`` the names its observation must contain for the path
    to hold (the target on a hop's page that mentions it; on the target's page, the hops whose
    link only the target's page states); :func:`websailor.synth.replay.replay_procedure`
    checks them."""
    steps: list[dict] = []
    target_url = kg.url(target)
    linked = [c for c in constraints if c.kind == "linked"]
    if described:  # the description as the question states it: no life span ("(1596–1650)")
        desc = SPAN_IN_DESC.sub("", kg.attributes(target).description.split(";")[0]).strip().rstrip(",")
        steps.append({"action": "search", "query": desc, "expect": target_url})
        steps.append({"action": "visit", "url": target_url, "evidence": kg.attributes(target).lead, "mentions": []})
        return steps
    if lookup:
        other = linked[0].params["other"]
        on_target = [e for e in linked[0].evidence if e["url"] == target_url]
        steps.append({"action": "search", "query": other, "expect": target_url})
        steps.append({"action": "visit", "url": target_url, "evidence": on_target[0]["sentence"], "mentions": [other]})
        return steps
    back: list[str] = []  # hops whose link only the target's page states
    for c in linked:
        other = c.params["other"]
        other_url = kg.url(other)
        on_other = [e for e in c.evidence if e["url"] == other_url]
        if not on_other:
            back.append(other)
        steps.append({"action": "search", "query": kg.attributes(other).description or other, "expect": other_url})
        steps.append(
            {
                "action": "visit",
                "url": other_url,
                "evidence": on_other[0]["sentence"] if on_other else "",
                "mentions": [target] if on_other else [],
            }
        )
    steps.append({"action": "visit", "url": target_url, "evidence": "", "mentions": back})
    return steps
