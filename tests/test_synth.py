"""SailorFog-QA-V2 building blocks on the real vital-articles corpus."""

import json
import random
import re
from collections import Counter

import networkx as nx
import pytest

from websailor.corpus import Corpus
from websailor.errors import InputFormatError, InvalidArgumentError
from websailor.synth import (
    KnowledgeGraph,
    build_knowledge_graph,
    has_cycle,
    load_or_build,
    parse_attributes,
    sample_subgraph,
    structural_roles,
    topology_hash,
)
from websailor.synth.attributes import parse_span, parse_years
from websailor.synth.graph import GRAPH_DIR, Link, Page, build_graph


@pytest.fixture(scope="module")
def kg(vital_kg: KnowledgeGraph) -> KnowledgeGraph:
    return vital_kg


def _attrs(vital: Corpus, title: str):
    doc = vital.get(title)
    return parse_attributes(doc.description, doc.topic, doc.text)


def test_attributes_of_real_pages(vital: Corpus):
    nile = _attrs(vital, "Nile")
    assert [(q.kind, q.value) for q in nile.quantities] == [("length", 7088.0)]
    assert "7,088 kilometers" in nile.quantities[0].sentence
    paris = {q.kind: q.value for q in _attrs(vital, "Paris").quantities}
    assert paris["area"] == 105.4 and paris["population"] == 2_040_000
    assert {q.kind: q.value for q in _attrs(vital, "Mount Everest").quantities} == {"height": 8848.86}
    assert _attrs(vital, "Albert Einstein").span == (1879, 1955)
    caesar = _attrs(vital, "Julius Caesar")
    assert caesar.span == (-100, -44) and caesar.years[:2] == [-49, -44]


@pytest.mark.parametrize(
    "text, span",
    [
        ("Italian polymath (1452–1519)", (1452, 1519)),
        ("Roman general (100–44 BC)", (-100, -44)),
        ("Greek philosopher (c. 470 – 399 BC)", (-470, -399)),
        ("Capital of France", None),
    ],
)
def test_spans(text, span):
    assert parse_span(text) == span


def test_years_skip_quantities():
    assert parse_years("It is 1,285 km long and 4404 mi wide; built in 1889 and rebuilt in 1905.") == [1889, 1905]


def test_graph_has_every_page_and_evidence_for_every_edge(kg: KnowledgeGraph, vital: Corpus):
    assert len(kg) == len(vital) == 10033
    assert kg.number_of_edges() > 20000
    ev = kg.evidence("Mona Lisa", "Leonardo da Vinci")[0]
    assert ev["source"] == "Mona Lisa" and ev["url"] == "https://en.wikipedia.org/wiki/Mona_Lisa"
    assert "Leonardo da Vinci" in ev["sentence"]
    for a, b in list(kg.edges())[:2000]:
        evidence = kg.evidence(a, b)
        assert evidence and all({e["source"], e["target"]} == {a, b} for e in evidence)
        assert kg.has_edge(a, b) and kg.has_edge(b, a) and b in kg.neighbors(a)


def test_graph_cache_round_trip(kg: KnowledgeGraph, tmp_path):
    path = tmp_path / "kg"
    kg.save(path)
    back = KnowledgeGraph.load(path)
    assert len(back) == len(kg) and back.number_of_edges() == kg.number_of_edges()
    assert back.attributes("Paris") == kg.attributes("Paris") and back.common_words == kg.common_words
    assert back.evidence("Mona Lisa", "Leonardo da Vinci") == kg.evidence("Mona Lisa", "Leonardo da Vinci")
    assert back.walk_starts == kg.walk_starts and back.relation_counts() == kg.relation_counts()


def test_load_or_build_caches_in_the_corpus(vital: Corpus):
    kg = load_or_build(vital)
    assert (vital.path / "synth" / GRAPH_DIR / "meta.json").exists()
    assert load_or_build(vital).number_of_edges() == kg.number_of_edges()


def test_sampling_is_connected_induced_deterministic_and_forms_cycles(kg: KnowledgeGraph):
    subs = [sample_subgraph(kg, random.Random(7), n_nodes=5) for _ in range(2)]
    assert list(subs[0].nodes()) == list(subs[1].nodes())
    rng = random.Random(0)
    many = [sample_subgraph(kg, rng, n_nodes=rng.choice([4, 5, 6])) for _ in range(200)]
    for s in many:
        assert nx.is_connected(s)
        for a in s:
            for b in s:
                assert s.has_edge(a, b) == kg.has_edge(a, b)  # densified: every edge kept
    assert sum(has_cycle(s) for s in many) / len(many) > 0.15
    assert len({topology_hash(s) for s in many}) > 10


def test_topology_hash_and_roles_by_hand():
    path = nx.path_graph(["a", "b", "c", "d"])
    relabelled = nx.relabel_nodes(path, {"a": "x", "b": "y", "c": "z", "d": "w"})
    assert topology_hash(path) == topology_hash(relabelled) != topology_hash(nx.star_graph(3))
    assert structural_roles(path) == [frozenset({"a", "d"}), frozenset({"b", "c"})]  # ends, middle
    star = nx.star_graph(3)  # hub 0, leaves 1..3
    assert structural_roles(star) == [frozenset({0}), frozenset({1, 2, 3})]
    assert structural_roles(nx.cycle_graph(4)) == [frozenset({0, 1, 2, 3})]
    assert has_cycle(nx.cycle_graph(3)) and not has_cycle(path)


def test_sampling_bad_input():
    with pytest.raises(InvalidArgumentError, match="n_nodes"):
        sample_subgraph(nx.path_graph(5), random.Random(0), n_nodes=1)
    with pytest.raises(InvalidArgumentError, match="backtrack_p"):
        sample_subgraph(nx.path_graph(5), random.Random(0), backtrack_p=2)
    assert sample_subgraph(nx.path_graph(2), random.Random(0), n_nodes=3) is None  # too small
    assert sample_subgraph(nx.path_graph(4), random.Random(0), n_nodes=9, max_tries=3) is None


# -- vagueness functions (hand-computed) -------------------------------------------------------
from websailor.synth.vague import mask_name, vague_number, vague_period  # noqa: E402


@pytest.mark.parametrize(
    "year, g, phrase, lo, hi",
    [
        (1452, "decade", "in the 1450s", 1450, 1459),
        (1452, "century", "in the 15th century", 1401, 1500),
        (1452, "part", "in the mid-15th century", 1434, 1466),
        (1401, "part", "in the early-15th century", 1401, 1433),
        (1500, "part", "in the late-15th century", 1467, 1500),
        (1921, "century", "in the 20th century", 1901, 2000),
        (-44, "century", "in the 1st century BC", -100, -1),
        (-470, "decade", "in the 470s BC", -479, -470),
        (-5, "decade", "in the 1st century BC", -100, -1),
    ],
)
def test_vague_period(year, g, phrase, lo, hi):
    v = vague_period(year, random.Random(0), g)
    assert (v.phrase, v.lo, v.hi) == (phrase, lo, hi) and v.holds(year)


@pytest.mark.parametrize(
    "value, kind, style, phrase, lo, hi",
    [
        (7088, "length", "bound", "more than 5,000 km", 5000, float("inf")),
        (7088, "length", "magnitude", "between 1,000 and 10,000 km", 1000, 10000),
        (105.4, "area", "magnitude", "between 100 and 1,000 km2", 100, 1000),
        (2_040_000, "population", "magnitude", "between 1 and 10 million", 1e6, 1e7),
        (2_040_000, "population", "bound", "more than 2 million", 2e6, float("inf")),
        (144_000_000, "population", "magnitude", "between 100 million and 1 billion", 1e8, 1e9),
        (1_500_000, "population", "bound", "more than a million", 1e6, float("inf")),
        (8848.86, "height", "bound", "more than 5,000 m", 5000, float("inf")),
    ],
)
def test_vague_number(value, kind, style, phrase, lo, hi):
    v = vague_number(value, kind, random.Random(0), style)
    assert (v.phrase, v.lo, v.hi) == (phrase, lo, hi) and v.holds(value)


def test_vague_number_rejects_non_positive():
    for bad in (0, 0.5, float("nan")):
        with pytest.raises(ValueError, match="at least 1"):
            vague_number(bad, "length", random.Random(0))
    assert vague_number(5000, "length", random.Random(0), "bound").phrase == "at least 5,000 km"


def test_vague_period_edge_years():
    with pytest.raises(ValueError, match="no year 0"):
        vague_period(0, random.Random(0))
    with pytest.raises(ValueError, match="granularity"):
        vague_period(1900, random.Random(0), "week")
    v = vague_period(-44, random.Random(0), "part")
    assert v.phrase == "in the 1st century BC" and v.params == {"granularity": "century"} and v.holds(-44)


def test_mask_name():
    m = mask_name("Leonardo da Vinci", random.Random(0), "initials")
    assert m.phrase == "whose initials are L. D. V." and m.matches("Leonardo da Vinci")
    assert not m.matches("Leonardo Fibonacci")
    m = mask_name("Leonardo da Vinci", random.Random(0), "letters")
    assert m.phrase == "whose name has 3 words, the first with 8 letters, starting with L"
    assert m.matches("Lysander di Sparta") and not m.matches("Leonardo Vinci")
    # the disambiguation is not part of the name; only letters are counted
    m = mask_name("Eris (dwarf planet)", random.Random(0), "initials")
    assert m.phrase == "whose initials are E." and m.matches("Eris (dwarf planet)") and m.matches("Eris")
    m = mask_name("Saint-Jean-de-Luz", random.Random(0), "letters")
    assert m.phrase == "whose name is one word of 14 letters, starting with S"


def test_mask_name_ordinals_digits_and_titles_after_a_comma():
    # item sf-7-125 of the demo read "J. C. 1. D. O. M.": a title after the comma, an ordinal
    m = mask_name("John Churchill, 1st Duke of Marlborough", random.Random(0), "initials")
    assert m.phrase == "whose initials are J. C." and m.matches("John Churchill, 1st Duke of Marlborough")
    assert m.matches("John Calvin") and not m.matches("John Churchill Smith")
    m = mask_name("Apollo 11", random.Random(0), "letters")
    assert m.phrase == "whose name is one word of 6 letters, starting with A" and m.matches("Apollo 11")
    assert mask_name("Apollo 11", random.Random(0), "initials").phrase == "whose initials are A."
    m = mask_name("W and Z bosons", random.Random(0), "letters")
    assert m.phrase == "whose name has 4 words, the first with 1 letter, starting with W" and m.matches(
        "W and Z bosons"
    )
    # a name of numbers only keeps them
    assert mask_name("1984", random.Random(0), "initials").phrase == "whose initials are 1."
    assert all(not ch.isdigit() for ch in mask_name("Louis XIV of France, 2nd", random.Random(0), "initials").phrase)


# -- constraints and verification ---------------------------------------------------------------
from websailor.synth.constraints import Constraint, candidates, distinctive_words, is_leak_free, is_supported, is_unique  # noqa: E402


def _ev(kg, a, b):
    return tuple({"sentence": e["sentence"], "url": e["url"]} for e in kg.evidence(a, b))


def test_constraints_narrow_to_a_unique_target(kg: KnowledgeGraph):
    # "an Italian polymath linked to the Mona Lisa, born in the mid-15th century"
    target = "Leonardo da Vinci"
    linked = Constraint("linked", {"other": "Mona Lisa"}, "is linked to the Mona Lisa", _ev(kg, target, "Mona Lisa"))
    assert target in candidates(kg, [linked])
    born = Constraint(
        "span_start",
        {"lo": 1434, "hi": 1466},
        "born in the mid-15th century",
        ({"sentence": kg.attributes(target).description, "url": "https://en.wikipedia.org/wiki/Leonardo_da_Vinci"},),
    )
    assert is_unique(kg, [linked, born], target)
    # without the link, many people were born then: not unique
    assert len(candidates(kg, [born])) > 5
    assert is_supported([linked, born])
    assert not is_supported([Constraint("topic", {"topic": "People"}, "a person")])
    back = [Constraint.from_dict(c.to_dict()) for c in (linked, born)]
    assert is_unique(kg, back, target)


def test_quantity_and_name_constraints(kg: KnowledgeGraph):
    long_river = Constraint("quantity", {"kind": "length", "lo": 5000, "hi": float("inf")}, "more than 5,000 km long")
    rivers = candidates(kg, [long_river, Constraint("linked", {"other": "Mediterranean Sea"}, "flows to a sea")])
    assert "Nile" in rivers
    name = Constraint("name", {"style": "initials", "pattern": ["N"]}, "whose initials are N.")
    assert candidates(kg, [long_river, name, Constraint("linked", {"other": "Mediterranean Sea"}, "")]) == ["Nile"]


def test_leak_checks():
    assert distinctive_words("Leonardo da Vinci") == {"leonardo", "vinci"}
    assert is_leak_free("Which polymath born in the 1450s painted a famous portrait?", "Leonardo da Vinci")
    assert not is_leak_free("Which Vinci-born painter made the portrait?", "Leonardo da Vinci")
    assert not is_leak_free("Who painted the Mona Lisa, L. da Vinci?", "Leonardo da Vinci", aliases=["L. da Vinci"])
    assert not is_leak_free("Which river is the nile?", "Nile")
    assert is_leak_free("Which river flows north into a sea?", "Nile")


# -- items (template mode) --------------------------------------------------------------------
from websailor.synth.items import aliases_of, build_item  # noqa: E402
from websailor.synth.phrasing import _lower_first, type_word  # noqa: E402


def test_built_items_pass_all_three_checks(kg: KnowledgeGraph):
    rng = random.Random(3)
    items = [it for it, _ in (build_item(kg, rng) for _ in range(250)) if it]
    assert len(items) >= 30
    for it in items:
        cs = [Constraint.from_dict(c) for c in it["constraints"]]
        assert candidates(kg, cs) == [it["answer"]]  # unique over the whole graph
        assert is_leak_free(it["question"], it["answer"]) and is_supported(cs)
        assert it["question"].endswith("?")
        # "Which <type> ...?", or sentences about "a certain <type>" ending "Which <type> is it?"
        assert it["question"].startswith("Which ") or it["question"].endswith(
            f"Which {type_word(kg, it['answer'])} is it?"
        )
        assert it["uncertainty"] and all("op" in o and "params" in o for o in it["uncertainty"])
        assert (
            it["target_url"] == "https://en.wikipedia.org/wiki/" + it["answer"].replace(" ", "_")
            or "%" in it["target_url"]
        )
    ops = {o["op"] for it in items for o in it["uncertainty"]}
    assert {"describe", "vague_relation", "intersection", "mask_name"} <= ops
    # deterministic for a seed
    assert build_item(kg, random.Random(11)) == build_item(kg, random.Random(11))


@pytest.mark.parametrize(
    "desc, out",
    [
        ("Italian polymath", "Italian polymath"),
        ("Country in West Africa", "country in West Africa"),
        ("Bronze Age civilization", "Bronze Age civilization"),
        ("Romanian-French playwright", "Romanian-French playwright"),
    ],
)
def test_description_case(desc, out):
    assert _lower_first(desc) == out


def test_description_case_follows_the_corpus(kg: KnowledgeGraph):
    # the corpus writes "country" in lower case and "Hindu" capitalized when not first
    assert kg.common_words["country"] and not kg.common_words["hindu"]
    assert (
        _lower_first("Hindu pilgrimage and festival in India", kg.common_words)
        == "Hindu pilgrimage and festival in India"
    )
    assert _lower_first("Country in West Africa", kg.common_words) == "country in West Africa"


def test_aliases():
    assert aliases_of("Mercury (planet)") == ["Mercury"]
    assert aliases_of("The Tale of Genji") == ["Tale of Genji"]
    assert aliases_of("Nile") == []


def test_items_state_at_least_three_constraints_when_they_can(kg: KnowledgeGraph):
    rng = random.Random(5)
    items = [it for it, _ in (build_item(kg, rng) for _ in range(150)) if it]
    assert sum(len(it["constraints"]) >= 3 for it in items) / len(items) >= 0.6
    for it in items:
        assert is_leak_free(it["question"], it["answer"], it["aliases"])


# -- dataset loop -------------------------------------------------------------------------------
from websailor.synth.dataset import SynthConfig, dataset_report, read_items, synthesize  # noqa: E402


def test_synthesize_is_resumable_deterministic_and_balanced(kg: KnowledgeGraph, tmp_path):
    whole = tmp_path / "whole.jsonl"
    synthesize(kg, whole, SynthConfig(n=60, seed=5), progress=False)
    parts = tmp_path / "parts.jsonl"
    synthesize(kg, parts, SynthConfig(n=25, seed=5), progress=False)
    with parts.open("a") as fh:
        fh.write('{"id": "sf-5-9')  # a kill mid-write
    synthesize(kg, parts, SynthConfig(n=60, seed=5), progress=False)
    assert whole.read_text() == parts.read_text()
    items = read_items(whole)
    assert len({it["id"] for it in items}) == 60
    report = dataset_report(items)
    assert report["largest_topology_share"] <= 0.25 and report["cycle_ratio"] >= 0.35
    assert set(report["splits"]) <= {"train", "test"}


def test_synthesize_refuses_a_graph_too_small(tmp_path):
    from websailor.errors import CorpusError

    pages = [Page(t, f"https://example.org/{t}", parse_attributes("", "", "")) for t in ("Aa", "Bb")]
    tiny = build_graph(pages, [Link("Aa", "Bb", "Aa is next to Bb.")])
    with pytest.raises(CorpusError, match="2 pages, 1 links, largest group of linked pages 2; items need at least 3"):
        synthesize(tiny, tmp_path / "q.jsonl", SynthConfig(n=5), progress=False)
    assert read_items(tmp_path / "q.jsonl") == []


def test_synthesize_stops_with_what_it_found_when_the_graph_runs_dry(kg: KnowledgeGraph, tmp_path, caplog):
    # a small piece of the real graph: few distinct items exist, so candidates keep failing
    nodes = ["Nile", *kg.neighbors("Nile")][:12]
    small = kg.restrict(nodes)
    out = tmp_path / "q.jsonl"
    reasons = synthesize(small, out, SynthConfig(n=500, max_attempts_per_item=30), progress=False)
    got = read_items(out)
    assert len(got) < 500 and reasons["accepted"] == len(got)
    assert "the last 30 candidates were all rejected" in caplog.text


def test_resuming_with_another_seed_is_refused(kg: KnowledgeGraph, tmp_path):
    from websailor.errors import InvalidArgumentError

    out = tmp_path / "q.jsonl"
    synthesize(kg, out, SynthConfig(n=3, seed=1), progress=False)
    with pytest.raises(InvalidArgumentError, match="seed 1; this run uses seed 2"):
        synthesize(kg, out, SynthConfig(n=6, seed=2), progress=False)
    assert len(read_items(out)) == 3


def test_report_counts_rejections_per_check(kg: KnowledgeGraph, tmp_path):
    out = tmp_path / "q.jsonl"
    reasons = synthesize(kg, out, SynthConfig(n=40, seed=3), progress=False)
    report = dataset_report(read_items(out))
    assert report["candidates"] == sum(reasons.values()) - sum(
        v for k, v in reasons.items() if k.startswith("rendered_")
    )
    rejected = {k: v for k, v in reasons.items() if k != "accepted"}
    assert report["rejected_share"] == {
        k: round(v / report["candidates"], 3) for k, v in Counter(rejected).most_common()
    }


def test_synth_config_rejects_bad_values():
    with pytest.raises(ValueError, match="n must be"):
        SynthConfig(n=0)
    with pytest.raises(ValueError, match="test_fraction"):
        SynthConfig(test_fraction=2)


def test_comparison_and_relative_time_constraints(kg: KnowledgeGraph):
    # the Nile (7,088 km) is longer than the Danube (2,850 km)
    longer = Constraint("compare", {"kind": "length", "other": "Danube", "more": True}, "is longer than a river")
    assert longer.matches(kg, "Nile") and not longer.matches(kg, "Danube")
    # Einstein (1879) was born 427 years after Leonardo (1452)
    after = Constraint(
        "relative_start", {"other": "Leonardo da Vinci", "lo": 422, "hi": 432}, "born about 43 decades after"
    )
    assert after.matches(kg, "Albert Einstein")  # 1879 - 1452 = 427
    assert not after.matches(kg, "Nile")  # no span


def test_solution_procedures_replay_through_the_real_tools(kg: KnowledgeGraph, vital: Corpus, tmp_path):
    """Every hop, not only the first: each search returns the page it expects, each visited
    page exists, the first hop's page names the answer and the last step opens the answer's
    page, for every stored item (the synthesis refuses the others as path_unreachable)."""
    from websailor.tools.local import SearchTool, VisitTool, build_local_tools

    out = tmp_path / "qa.jsonl"
    reasons = synthesize(kg, out, SynthConfig(n=40, seed=1), progress=False, tools=build_local_tools(vital))
    search, visit = SearchTool(vital), VisitTool(vital)  # fresh tools, no cache shared with the synthesis
    items = read_items(out)
    assert len(items) == 40 and all(it["verification"]["path_replayed"] for it in items)
    assert reasons["path_unreachable"] > 0  # later hops whose description search misses are refused
    for it in items:
        steps = it["procedure"]
        for s in steps:
            if s["action"] == "search":
                assert s["expect"] in search({"query": [s["query"]]}), (it["id"], s)
            else:
                assert visit({"url": s["url"], "goal": "what it is related to"}).startswith("Page "), (it["id"], s)
        page = visit({"url": steps[1]["url"], "goal": "what it is related to"})
        assert it["answer"].lower() in page.lower() or steps[1]["evidence"] in page  # the hop leads to the answer
        assert steps[1]["evidence"] and steps[-1]["url"] == it["target_url"]


# -- the difficulty ladder ------------------------------------------------------------------------
from websailor.synth.dataset import parse_levels  # noqa: E402
from websailor.synth.levels import ATTRIBUTE_OPS, ItemConfig  # noqa: E402
from websailor.synth.replay import PathReplayer, replay_procedure  # noqa: E402


@pytest.fixture(scope="module")
def tools(vital: Corpus):
    from websailor.tools.local import build_local_tools

    return build_local_tools(vital)


@pytest.fixture(scope="module")
def ladder(kg: KnowledgeGraph, tools, tmp_path_factory) -> list[dict]:
    """Twelve items of a 1-4 ladder, every path replayed."""
    out = tmp_path_factory.mktemp("ladder") / "qa.jsonl"
    synthesize(kg, out, SynthConfig(n=12, seed=2, levels="1-4"), progress=False, tools=tools)
    return read_items(out)


def test_a_ladder_assigns_levels_round_robin_and_records_them(ladder: list[dict]):
    assert [it["level"] for it in ladder] == [1, 2, 3, 4] * 3
    for it in ladder:
        hops = sum(c["kind"] == "linked" for c in it["constraints"])
        ops = {o["op"] for o in it["uncertainty"]}
        assert it["verification"]["path_replayed"]
        if it["level"] == 1:
            assert hops == 1 and len(it["constraints"]) <= 2 and "describe" not in ops
            assert len(it["procedure"]) == 2  # one search, then the answer's page
        elif it["level"] == 2:
            assert hops == 1 and "describe" in ops and len(it["constraints"]) <= 3
        elif it["level"] == 3:
            assert hops >= 2 and "intersection" in ops


def test_level_1_items_are_one_search_away(kg: KnowledgeGraph, vital: Corpus, tools, tmp_path):
    from websailor.tools.local import SearchTool

    out = tmp_path / "qa.jsonl"
    synthesize(kg, out, SynthConfig(n=10, seed=3, levels=1), progress=False, tools=tools)
    search = SearchTool(vital)
    for it in read_items(out):
        (linked,) = [c for c in it["constraints"] if c["kind"] == "linked"]
        clue = linked["params"]["other"]
        assert clue in it["question"]  # named plainly, not described
        assert it["procedure"][0] == {"action": "search", "query": clue, "expect": it["target_url"]}
        assert it["target_url"] in search({"query": [clue]})


def test_report_by_level(ladder: list[dict]):
    report = dataset_report(ladder)
    assert report["levels"] == {1: 3, 2: 3, 3: 3, 4: 3}
    assert set(report["by_level"]) == {1, 2, 3, 4}
    assert sum(f["items"] for f in report["by_level"].values()) == report["items"] == 12
    assert report["by_level"][1]["mean_hops"] == 1 and report["by_level"][3]["mean_hops"] >= 2
    assert report["by_level"][1]["attribute_op_share"] == 0
    assert all(f["path_replayed"] == f["items"] for f in report["by_level"].values())


def test_attribute_operators_in_at_least_a_quarter_of_items_above_level_1(kg: KnowledgeGraph):
    """On a realistic sample (accepted candidates of 250 draws per level), at least a quarter
    of the items of levels 2 to 4 blur one of the target's attributes."""
    for level in (2, 3, 4):
        built = [build_item(kg, random.Random(f"7/{i}"), ItemConfig(level=level)) for i in range(250)]
        items = [it for it, _ in built if it]
        assert len(items) >= 25 and all(it["level"] == level for it in items)
        share = sum(any(o["op"] in ATTRIBUTE_OPS for o in it["uncertainty"]) for it in items) / len(items)
        assert share >= 0.25, (level, share)


def test_path_replay_refuses_a_broken_procedure(ladder: list[dict], tools, kg: KnowledgeGraph, tmp_path):
    import copy

    item = next(it for it in ladder if it["level"] == 3)
    replay = PathReplayer(tools)
    assert replay(item) == (True, "")

    def broken(edit) -> tuple[bool, str]:
        it = copy.deepcopy(item)
        edit(it["procedure"])
        return replay_procedure(it, tools)

    later = [i for i, s in enumerate(item["procedure"]) if s["action"] == "search"][-1]  # the last hop's search
    ok, why = broken(lambda p: p[later].update(query="zzqx unfindable words"))
    assert not ok and f"step {later + 1}: searching 'zzqx unfindable words' does not return" in why
    ok, why = broken(lambda p: p[1].update(url="https://en.wikipedia.org/wiki/No_such_page_here"))
    assert not ok and "is not in the corpus" in why
    ok, why = broken(lambda p: p[1].update(mentions=["Atlantis Nowhere"], evidence=""))
    assert not ok and "does not mention 'Atlantis Nowhere'" in why
    ok, why = broken(lambda p: p.pop())
    assert not ok and "does not open the answer's page" in why
    with pytest.raises(ValueError, match="search and visit"):
        PathReplayer({"search": tools["search"]})
    # in the loop: a search tool that finds nothing refuses every candidate as path_unreachable
    blind = {"search": lambda arguments: "No results.", "visit": tools["visit"]}
    out = tmp_path / "q.jsonl"
    reasons = synthesize(kg, out, SynthConfig(n=2, seed=1, max_attempts_per_item=15), progress=False, tools=blind)
    assert read_items(out) == [] and reasons["path_unreachable"] > 0 and reasons["accepted"] == 0


def test_bad_levels_are_refused():
    for bad in (0, 5, "5", "0-2", "x", "", "3-1", (), (1, 7)):
        with pytest.raises(ValueError, match="--level"):
            SynthConfig(levels=bad)
    with pytest.raises(ValueError, match="--level"):
        ItemConfig(level=9)
    assert parse_levels("1-2") == (1, 2) and parse_levels("1,2,4") == (1, 2, 4) and parse_levels(3) == (3,)
    assert parse_levels("1-2,4") == (1, 2, 4) and SynthConfig().levels == (4,)
    assert SynthConfig(item=ItemConfig(level=2)).levels == (2,)
    with pytest.raises(ValueError, match="omits"):
        SynthConfig(levels="1", item=ItemConfig(level=2))


def test_resuming_with_another_level_is_refused(kg: KnowledgeGraph, tools, tmp_path):
    out = tmp_path / "q.jsonl"
    synthesize(kg, out, SynthConfig(n=2, seed=1, levels="1"), progress=False, tools=tools)
    with pytest.raises(InvalidArgumentError, match="another --level .* pass the same --level"):
        synthesize(kg, out, SynthConfig(n=4, seed=1, levels="2"), progress=False, tools=tools)
    with pytest.raises(InvalidArgumentError, match="--level 2,1 puts level 2 there"):
        synthesize(kg, out, SynthConfig(n=4, seed=1, levels="2,1"), progress=False, tools=tools)
    synthesize(kg, out, SynthConfig(n=4, seed=1, levels="1"), progress=False, tools=tools)  # the same: resumes
    assert [it["level"] for it in read_items(out)] == [1, 1, 1, 1]


def test_a_level_the_graph_cannot_supply_stops_naming_it(kg: KnowledgeGraph, tools, tmp_path, caplog):
    # a star of the pages the Nile's page mentions and that do not mention it: a leaf has one hop,
    # and no leaf's page leads to the hub, so no item has two hops converging (level 3)
    leaves = [n for n in sorted(kg.neighbors("Nile")) if all(e["source"] == "Nile" for e in kg.evidence("Nile", n))]
    assert len(leaves) >= 3
    star = kg.restrict(["Nile", *leaves[:8]], edges=[("Nile", n) for n in leaves[:8]])
    out = tmp_path / "q.jsonl"
    reasons = synthesize(star, out, SynthConfig(n=4, levels="3", max_attempts_per_item=20), progress=False)
    assert reasons["accepted"] == 0 and read_items(out) == []
    assert "stopping at 0 items (none yet)" in caplog.text and "at level 3 of --level 3" in caplog.text


# -- LLM writer (the writer's own checks: tests/test_writer.py) ----------------------------------


def test_llm_failing_mid_run_loses_nothing(kg: KnowledgeGraph, tmp_path):
    from fakes import ScriptedModel

    from websailor.errors import ModelError

    calls = iter(range(1000))
    # every other request fails; the others answer in prose: never 3 model errors in a row
    flaky = ScriptedModel(lambda msgs: (_ for _ in ()).throw(ModelError("503")) if next(calls) % 2 else "No?")
    out = tmp_path / "qa.jsonl"
    reasons = synthesize(kg, out, SynthConfig(n=15, seed=2), progress=False, llm=flaky)
    items = read_items(out)
    assert len(items) == 15 and reasons["rendered_template"] == 15
    assert reasons["writer_model_error"] == 7 and reasons["writer_not_json"] == 8
    assert all(it["rendering"]["mode"] == "template" for it in items)


# -- difficulty filter ---------------------------------------------------------------------------
from websailor.synth.difficulty import DifficultyConfig, DifficultyFilter, verdict  # noqa: E402


@pytest.mark.parametrize(
    "correct, k, keep, out",
    [
        (0, 8, "moderate", "too_hard"),
        (3, 8, "moderate", "kept"),
        (8, 8, "moderate", "too_easy"),
        (0, 8, "hard", "kept"),
        (1, 8, "hard", "too_easy"),
        (8, 8, "all", "kept"),
    ],
)
def test_verdict(correct, k, keep, out):
    assert verdict(correct, k, keep) == out


def _reference_agent(vital: Corpus, answers: dict[str, str], solve_first: int):
    """An agent whose model answers the gold answer in the first ``solve_first`` rollouts of
    each question (counted per question) and a wrong one after."""
    import threading

    from fakes import ScriptedModel

    from websailor.agent import Agent, AgentConfig
    from websailor.tools.local import build_local_tools

    seen: Counter = Counter()
    lock = threading.Lock()

    def reply(msgs):
        q = msgs[1]["content"]
        with lock:
            seen[q] += 1
            n = seen[q]
        return f"<think>done</think><answer>{answers.get(q, 'Atlantis') if n <= solve_first else 'Atlantis'}</answer>"

    model = ScriptedModel(reply)
    return Agent(model, build_local_tools(vital), AgentConfig(max_calls=3)), model


def test_difficulty_filter_keeps_moderate_items_and_reuses_rollouts(kg: KnowledgeGraph, vital: Corpus, tmp_path):
    from websailor.agent.trajectory import Trajectory

    plain = tmp_path / "plain.jsonl"
    synthesize(kg, plain, SynthConfig(n=4, seed=9), progress=False)
    answers = {it["question"]: it["answer"].upper() for it in read_items(plain)}  # graded after normalization

    agent, model = _reference_agent(vital, answers, solve_first=1)
    rollouts = tmp_path / "qa.rollouts.jsonl"
    out = tmp_path / "qa.jsonl"
    with DifficultyFilter(agent, rollouts, DifficultyConfig(k=3, keep="moderate", concurrency=1)) as rater:
        synthesize(kg, out, SynthConfig(n=4, seed=9), progress=False, difficulty=rater)
    items = read_items(out)
    assert [it["question"] for it in items] == list(answers)
    assert all(it["difficulty"] == {"k": 3, "correct": 1, "model": "scripted"} for it in items)
    assert model.calls == 12
    trajs = [Trajectory.from_dict(json.loads(line)) for line in rollouts.read_text().splitlines()]
    assert sorted((t.id, t.rollout) for t in trajs) == sorted((it["id"], r) for it in items for r in range(3))

    # a second run over the same rollouts file reruns nothing and keeps the same items
    again = tmp_path / "again.jsonl"
    with DifficultyFilter(agent, rollouts, DifficultyConfig(k=3, keep="moderate", concurrency=1)) as rater2:
        synthesize(kg, again, SynthConfig(n=4, seed=9), progress=False, difficulty=rater2)
    assert model.calls == 12 and [it["id"] for it in read_items(again)] == [it["id"] for it in items]

    # another model does not reuse them
    other, other_model = _reference_agent(vital, answers, solve_first=1)
    other_model.name = "other"
    with DifficultyFilter(other, rollouts, DifficultyConfig(k=3, keep="moderate", concurrency=1)) as rater3:
        synthesize(kg, tmp_path / "third.jsonl", SynthConfig(n=1, seed=9), progress=False, difficulty=rater3)
    assert other_model.calls == 3


def test_difficulty_filter_stops_when_the_model_fails(kg: KnowledgeGraph, vital: Corpus, tmp_path):
    from fakes import ScriptedModel

    from websailor.agent import Agent, AgentConfig
    from websailor.errors import ModelError
    from websailor.tools.local import build_local_tools

    out = tmp_path / "qa.jsonl"
    dead = Agent(ScriptedModel([ModelError("HTTP 503")]), build_local_tools(vital), AgentConfig(max_calls=2))
    with DifficultyFilter(dead, tmp_path / "r.jsonl", DifficultyConfig(k=2, keep="hard")) as rater:
        with pytest.raises(ModelError, match="failed on 2 of 2 rollouts of item sf-0-"):
            synthesize(kg, out, SynthConfig(n=2), progress=False, difficulty=rater)
    assert read_items(out) == []  # nothing was called hard because the endpoint was down


def test_a_second_writer_is_refused(kg: KnowledgeGraph, tmp_path):
    from websailor.jsonio import appending

    out = tmp_path / "q.jsonl"
    with appending(out, "a QA item"):
        with pytest.raises(InvalidArgumentError, match="another process is writing to"):
            synthesize(kg, out, SynthConfig(n=2), progress=False)


def test_readers_never_change_the_file(kg: KnowledgeGraph, tmp_path):
    out = tmp_path / "q.jsonl"
    synthesize(kg, out, SynthConfig(n=3), progress=False)
    whole = out.read_bytes()
    out.write_bytes(whole[:-1])  # a whole last item without its newline: kept
    assert len(read_items(out)) == 3 and out.read_bytes() == whole[:-1]
    out.write_bytes(whole[:-40])  # a half-written last item: skipped, but the file is left alone
    assert len(read_items(out)) == 2 and out.read_bytes() == whole[:-40]
    (tmp_path / "bad.jsonl").write_text('{"id": "x", "seed": 0}\n')
    with pytest.raises(InputFormatError, match="line 1 is not a QA item: field 'question' is missing"):
        read_items(tmp_path / "bad.jsonl")
    first = json.loads(whole.decode().splitlines()[0])
    for level in (None, "2", 2.0, True, 9):  # a level the ladder does not have is named, never sorted or shown
        (tmp_path / "lvl.jsonl").write_text(json.dumps({**first, "level": level}) + "\n")
        with pytest.raises(InputFormatError, match="field 'level' is"):
            read_items(tmp_path / "lvl.jsonl")
    # a damaged constraint or step is named where it is, never a KeyError in a later stage
    described = {"kind": "described", "params": {"key": "major river"}, "phrase": "is a major river"}
    for damage, says in (
        (
            {"constraints": [{**described, "params": {}}]},
            "field 'constraints.0' is an object: value error, a described",
        ),
        ({"constraints": [{**described, "params": {"key": 3}}]}, "field 'constraints.0.params.key' is a number"),
        ({"constraints": [{**described, "kind": "describd"}]}, "field 'constraints.0.kind' is text: input should be"),
        ({"constraints": [{"kind": "linked", "params": {"other": "Nile"}}]}, "field 'constraints.0.phrase' is missing"),
        (
            {"procedure": [{"action": "search", "expect": "u"}]},
            "field 'procedure.0' is an object: value error, a search",
        ),
    ):
        (tmp_path / "dmg.jsonl").write_text(json.dumps({**first, **damage}) + "\n")
        with pytest.raises(InputFormatError, match=re.escape(says)):
            read_items(tmp_path / "dmg.jsonl")


def test_difficulty_filter_drops_items_outside_the_band(kg: KnowledgeGraph, vital: Corpus, tmp_path):
    plain = tmp_path / "plain.jsonl"
    synthesize(kg, plain, SynthConfig(n=3, seed=4), progress=False)
    answers = {it["question"]: it["answer"] for it in read_items(plain)}
    agent, _ = _reference_agent(vital, answers, solve_first=99)  # always right
    # seed 4's first items are candidates 2, 18 and 23 (the next, 25, is not in answers): stop after 24
    out = tmp_path / "hard.jsonl"
    with DifficultyFilter(agent, tmp_path / "r.jsonl", DifficultyConfig(k=2, keep="hard", concurrency=2)) as rater:
        reasons = synthesize(
            kg, out, SynthConfig(n=3, seed=4, max_attempts_per_item=24), progress=False, difficulty=rater
        )
    assert read_items(out) == [] and reasons["too_easy"] == 3 and reasons["accepted"] == 0
    assert all(
        json.loads(line)["prediction"] in answers.values() for line in (tmp_path / "r.jsonl").read_text().splitlines()
    )


def test_difficulty_config_rejects_bad_values():
    with pytest.raises(ValueError, match="keep must be one of moderate, hard, all"):
        DifficultyConfig(keep="easy")
    with pytest.raises(ValueError, match="k must be at least 1"):
        DifficultyConfig(k=0)


def test_a_dead_rewrite_endpoint_is_given_up_after_a_few_failures(kg: KnowledgeGraph, tmp_path, caplog):
    from fakes import ScriptedModel

    from websailor.errors import ModelError

    dead = ScriptedModel([ModelError("connection refused")])
    out = tmp_path / "qa.jsonl"
    synthesize(kg, out, SynthConfig(n=10, seed=2), progress=False, llm=dead)
    items = read_items(out)
    assert len(items) == 10 and dead.calls == 3  # then the run stops asking
    assert [it["rendering"]["mode"] for it in items] == ["template"] * 10
    assert "failed 3 times in a row" in caplog.text


@pytest.fixture(scope="module")
def small_corpus(generated_kilt, tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """A 60-page corpus of real text (the generated KILT sample): its graph builds in a blink."""
    from websailor.corpus import CorpusBuildConfig, build_corpus

    out = tmp_path_factory.mktemp("small") / "kilt"
    return Corpus.open(
        build_corpus(CorpusBuildConfig(source=generated_kilt.path, format="kilt", out=out, show_progress=False))
    )


@pytest.mark.parametrize(
    "part, garbage",
    [("meta.json", ""), ("meta.json", "{not json"), ("meta.json", '{"pages": 5}'), ("nodes.json", '{"titles": 5}'),
     ("adjacency.npz", "not an archive"), ("evidence.sqlite", "not a database")],
)  # fmt: skip
def test_a_corrupt_graph_cache_is_rebuilt(small_corpus: Corpus, part, garbage, caplog):
    kg = load_or_build(small_corpus)
    assert kg.number_of_edges() > 0
    cache = small_corpus.path / "synth" / GRAPH_DIR / part
    saved = cache.read_bytes()
    try:
        cache.write_text(garbage)
        again = load_or_build(small_corpus)
        assert again.number_of_edges() == kg.number_of_edges() and "building it again" in caplog.text
        assert again.evidence(*next(again.edges()))
    finally:
        cache.write_bytes(saved)


def test_a_graph_over_the_memory_limit_is_refused_with_its_figure(vital: Corpus, kg: KnowledgeGraph, tmp_path):
    from websailor.synth.graph import estimate_memory_gb

    need = estimate_memory_gb(len(vital), vital.meta["n_links"])
    assert 0.001 < need < 1 and estimate_memory_gb(6_800_000, 23_000_000) > 10 * need
    with pytest.raises(
        InvalidArgumentError, match=r"10,033 pages and 33,858 links needs about 0\.0\d+ GB.*--max-memory-gb 0\.001"
    ):
        build_knowledge_graph(vital, max_memory_gb=0.001)
    kg.save(tmp_path / "kg")
    with pytest.raises(InvalidArgumentError, match="over --max-memory-gb 0.001"):
        KnowledgeGraph.load(tmp_path / "kg", max_memory_gb=0.001)
    assert len(KnowledgeGraph.load(tmp_path / "kg", max_memory_gb=1.0)) == len(kg)


def test_a_cache_missing_a_part_out_of_step_or_of_another_corpus_build_is_rebuilt(small_corpus: Corpus, caplog):
    import shutil

    kg = load_or_build(small_corpus)
    cache = small_corpus.path / "synth" / GRAPH_DIR
    keep = cache.with_name("kept")
    shutil.rmtree(keep, ignore_errors=True)
    shutil.copytree(cache, keep)

    def shift(folder):  # the titles out of step with the arrays: items would link the wrong pages
        nodes = json.loads((folder / "nodes.json").read_text())
        nodes["titles"] = nodes["titles"][1:] + nodes["titles"][:1]
        (folder / "nodes.json").write_text(json.dumps(nodes))

    def rebuild_corpus(folder):
        meta = json.loads((folder / "meta.json").read_text())
        meta["source"]["built_at"] = "2001-01-01T00:00:00Z"
        (folder / "meta.json").write_text(json.dumps(meta))

    damages = {
        "unable to open database": lambda f: (f / "evidence.sqlite").unlink(),
        "no such table": lambda f: (f / "evidence.sqlite").write_bytes(b""),
        "does not hold the pages": shift,
        "another build of the corpus": rebuild_corpus,
    }
    try:
        for says, damage in damages.items():
            shutil.rmtree(cache)
            shutil.copytree(keep, cache)
            damage(cache)
            caplog.clear()
            again = load_or_build(small_corpus)
            assert "building it again" in caplog.text and says in caplog.text, says
            assert again.number_of_edges() == kg.number_of_edges() and again.titles == kg.titles
            a, b = next(again.edges())
            assert again.evidence(a, b) == kg.evidence(a, b)
            assert not (cache / "evidence.sqlite").stat().st_size == 0
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        shutil.copytree(keep, cache)
        shutil.rmtree(keep)


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda it: it["constraints"][0]["params"].update(relation=["x"]), "constraints.0.params.relation"),
        (lambda it: it["constraints"][0]["params"].update(relation=42), "constraints.0.params.relation"),
        (lambda it: it["constraints"][0]["params"].update(form="sideways"), "constraints.0.params.form"),
        (lambda it: it.update(rendering={"mode": "template", "reason": 5}), "rendering.reason"),
        (lambda it: it.update(rendering={"mode": ["llm"]}), "rendering.mode"),
        (lambda it: it.update(difficulty={"k": 8, "correct": None}), "difficulty.correct"),
        (lambda it: it.update(rejected_before={"leak": -5}), "rejected_before.leak"),
        (lambda it: it.update(question="Which \udcff is it?"), "question"),
    ],
)
def test_a_hand_edited_item_gets_one_line_naming_the_field(kg: KnowledgeGraph, tmp_path, edit, field):
    out = tmp_path / "qa.jsonl"
    synthesize(kg, out, SynthConfig(n=1, seed=3), progress=False)
    item = read_items(out)[0]
    edit(item)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(item) + "\n")
    with pytest.raises(InputFormatError, match=rf"line 1 is not a QA item: field '{re.escape(field)}'"):
        read_items(bad)


def test_initialisms_leak_and_take_the_article_of_their_first_letter(kg: KnowledgeGraph):
    from websailor.synth.phrasing import describe

    assert not is_leak_free("A meeting place of the UK Parliament", "United Kingdom")
    assert not is_leak_free("a body of the EU", "European Union") and is_leak_free("a uk-based firm", "United Kingdom")
    si = next(n for n in kg.nodes() if kg.attributes(n).description.startswith("SI "))
    assert describe(kg, si).startswith("an SI ")


def test_an_item_states_at_most_one_figure_of_each_kind(kg: KnowledgeGraph):
    # London's page gives the city's population and the metro area's: one of them, never both
    # ("more than 10 million" and "between 1 and 10 million" read as a contradiction)
    items = [build_item(kg, random.Random(f"q/{i}"), ItemConfig(level=4))[0] for i in range(300)]
    for it in [it for it in items if it]:
        kinds = [c["params"]["kind"] for c in it["constraints"] if c["kind"] == "quantity"]
        assert len(kinds) == len(set(kinds)), it["question"]


def test_described_items_state_the_answers_own_description(kg: KnowledgeGraph, vital: Corpus, tools, tmp_path):
    """``described_p``: the question also says what the answer is, in its page's own
    description, with the page's first sentence as evidence; the procedure is the short path
    (search that description, read the answer's page), replayed through the real tools."""
    from websailor.synth.graph import description_key
    from websailor.synth.phrasing import describe

    out = tmp_path / "qa.jsonl"
    cfg = SynthConfig(n=8, seed=4, test_fraction=0.0, levels="1-2", item=ItemConfig(level=1, described_p=1.0))
    synthesize(kg, out, cfg, progress=False, tools=tools)
    items = read_items(out)
    assert [it["level"] for it in items] == [1, 2] * 4
    for it in items:
        first = Constraint.from_dict(it["constraints"][0])
        answer, attrs = it["answer"], kg.attributes(it["answer"])
        assert first.kind == "described" and first.phrase == f"is {describe(kg, answer)}"
        assert first.phrase in it["question"] and first.params["key"] == description_key(attrs.description)
        assert first.evidence[0]["sentence"] == attrs.lead and vital.get(answer).text.startswith(attrs.lead)
        assert first.matches(kg, answer)
        other = next(n for n in kg.nodes() if description_key(kg.attributes(n).description) != first.params["key"])
        assert not first.matches(kg, other)
        assert [s["action"] for s in it["procedure"]] == ["search", "visit"]
        query = it["procedure"][0]["query"]  # the description as the question states it, no life span
        assert query.lower() in first.phrase.lower() and "(" not in query
        assert it["procedure"][1]["url"] == it["target_url"]
        assert len({c["phrase"] for c in it["constraints"]}) == len(it["constraints"])  # nothing said twice
        assert it["verification"]["path_replayed"]
        assert {"op": "self_description", "params": {"description": attrs.description}} in it["uncertainty"]
    assert all(it["described_share"] == 1.0 for it in items)
    # resuming the file with another share would mix two streams: refused, naming both shares
    with pytest.raises(InvalidArgumentError, match=r"--described-share 1; this run uses 0.5"):
        synthesize(
            kg,
            out,
            SynthConfig(n=10, seed=4, test_fraction=0.0, levels="1-2", item=ItemConfig(level=1, described_p=0.5)),
            progress=False,
        )
    # off by default, and a share of 0 draws nothing: a seed's items stay as they were
    assert build_item(kg, random.Random(11), ItemConfig(level=2)) == build_item(
        kg, random.Random(11), ItemConfig(level=2, described_p=0.0)
    )
    with pytest.raises(ValueError, match="--described-share must be in"):
        ItemConfig(described_p=1.5)


def test_a_pages_lead_is_its_first_sentence(vital: Corpus):
    nile = _attrs(vital, "Nile")
    assert nile.lead.startswith("The Nile is") and nile.lead.endswith(".") and "\n" not in nile.lead
    assert parse_attributes("", "", "").lead == ""
