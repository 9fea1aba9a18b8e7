import json
import re

import pytest

from websailor.corpus import Corpus
from websailor.tools import call_tool
from websailor.tools.local import SearchTool, VisitTool, build_local_tools


@pytest.fixture(scope="module")
def tools(vital: Corpus):
    return build_local_tools(vital)


def test_schemas_match_the_paper(tools):
    search = tools["search"].schema()
    assert search["name"] == "search"
    assert search["parameters"]["properties"]["query"]["type"] == "array"
    assert search["parameters"]["properties"]["query"]["items"] == {"type": "string"}
    assert search["parameters"]["required"] == ["query"]
    visit = tools["visit"].schema()
    assert set(visit["parameters"]["properties"]["url"]["type"]) == {"string", "array"}
    assert visit["parameters"]["required"] == ["url", "goal"]
    json.dumps([search, visit])  # schemas are plain JSON


def test_search_observation_layout(tools):
    obs = call_tool(tools, "search", '{"query": ["Mona Lisa", "Great Wall of China"]}')
    blocks = obs.split("\n=======\n")
    assert len(blocks) == 2
    assert re.match(r"A search for 'Mona Lisa' found \d+ results:", blocks[0])
    assert (
        blocks[0]
        .split(" results:", 1)[1]
        .startswith("\n\n## Web Results\n1. [Mona Lisa](https://en.wikipedia.org/wiki/Mona_Lisa)\n")
    )
    entries = re.findall(r"^(\d+)\. \[(.+?)\]\((https://en\.wikipedia\.org/wiki/\S+)\)\n(.+)$", blocks[1], re.M)
    assert [int(e[0]) for e in entries] == list(range(1, 11))
    assert entries[0][1] == "Great Wall of China"


def test_search_tolerates_a_string_query_and_notes_long_ones(tools):
    assert call_tool(tools, "search", {"query": "Mona Lisa"}).startswith("A search for 'Mona Lisa' found")
    obs = call_tool(tools, "search", {"query": ["Roman Empire " * 900]})
    assert obs.startswith("Note: query 1 was 11699 characters long and was cut to 500.")
    assert "found 10 results" in obs
    assert "No results found for 'qwxzzy'" in call_tool(tools, "search", {"query": ["qwxzzy"]})
    assert "Empty query" in call_tool(tools, "search", {"query": ["   "]})


def test_visit_puts_goal_evidence_first_then_summary(tools):
    obs = call_tool(
        tools, "visit", {"url": "https://en.wikipedia.org/wiki/Nile", "goal": "How long is the river in kilometers?"}
    )
    assert obs.startswith(
        "Page https://en.wikipedia.org/wiki/Nile, read for the goal: How long is the river in kilometers?\n\nEvidence in page:\n"
    )
    evidence = obs.split("Evidence in page:\n", 1)[1].split("\n\nSummary:\n")[0].splitlines()
    assert evidence[0].startswith("At 7,088 kilometers")
    summary = obs.split("Summary:\n", 1)[1]
    assert summary.startswith("The Nile is a major north-flowing river") and "7,088" in summary


def test_visit_unknown_url_suggests_closest_titles(tools):
    obs = call_tool(
        tools, "visit", {"url": ["https://en.wikipedia.org/wiki/Leonardo_DaVinci", "Mona Lisa"], "goal": "painter"}
    )
    first, second = obs.split("\n=======\n")
    assert "could not be found" in first
    assert "1. [Leonardo da Vinci](https://en.wikipedia.org/wiki/Leonardo_da_Vinci)" in first
    assert second.startswith("Page https://en.wikipedia.org/wiki/Mona_Lisa")


@pytest.mark.parametrize(
    "name, args, expected",
    [
        ("search", '{"query": ["a", }', "Invalid arguments: not valid JSON"),
        ("search", "[1, 2]", "Invalid arguments: expected a JSON object, got list"),
        ("search", '{"query": []}', "query: [] should be non-empty"),
        ("search", '{"q": ["x"]}', "'query' is a required property"),
        ("search", '{"query": [3]}', "query/0: 3 is not of type 'string'"),
        ("visit", '{"url": "https://en.wikipedia.org/wiki/Nile"}', "'goal' is a required property"),
        ("visit", '{"url": 3, "goal": "x"}', "url: 3 is not of type 'string', 'array'"),
        ("browse", "{}", "there is no tool named 'browse'. Available tools: search, visit."),
    ],
)
def test_bad_tool_calls_give_observations_not_exceptions(tools, name, args, expected):
    obs = call_tool(tools, name, args)
    assert expected in obs


def test_tool_objects_are_callable_directly(vital: Corpus):
    assert SearchTool(vital, top_k=3)({"query": ["Nile"]}).count("\n1. [") == 1
    obs = VisitTool(vital, max_urls=1)({"url": ["Nile", "Amazon River"], "goal": "length"})
    assert obs.startswith("Note: only the first 1 of 2 URLs were visited.")


def test_agent_inputs_that_once_crashed_give_observations(tools):
    # extra fields are ignored with a note
    obs = call_tool(tools, "search", '{"query": ["Nile"], "top_k": 3}')
    assert obs.startswith("Note: ignored unknown argument(s) 'top_k'.\nA search for 'Nile'")
    # a malformed URL, a non-Wikipedia host and a javascript: URI are pages that do not exist
    for url in ["https://[/wiki/Nile", "https://example.com/wiki/Nile", "javascript://en.wikipedia.org/wiki/Nile"]:
        assert "could not be found" in call_tool(tools, "visit", {"url": url, "goal": "x"})
    # lone surrogates (valid JSON escapes, invalid text) become U+FFFD and print fine
    for name, args in [("visit", '{"url": "\\ud800", "goal": "\\ud800"}'), ("search", '{"query": ["\\ud800"]}')]:
        call_tool(tools, name, args).encode("utf-8")
    # deeply nested JSON
    assert "nested too deeply" in call_tool(tools, "search", "[" * 100_000)
    # the goal is echoed, but not a million characters of it
    obs = call_tool(tools, "visit", {"url": "Nile", "goal": "length " * 200_000})
    assert len(obs) < 6000
    assert call_tool(tools, ["search"], "{}").startswith("Error: the tool name must be a string, got list")
    assert "Empty URL" in call_tool(tools, "visit", {"url": "", "goal": "x"})


def test_underscores_separate_query_words(vital: Corpus):
    assert vital.search(["longest_river_in_Africa"], k=3) == vital.search(["longest river in Africa"], k=3)


def test_llm_extractor_for_visit_and_its_fallback(vital: Corpus):
    from fakes import ScriptedModel

    good = ScriptedModel(
        [json.dumps({"rational": "r", "evidence": "It is 7,088 km long.", "summary": "The Nile's length."})]
    )
    obs = VisitTool(vital, summary_model=good)({"url": "Nile", "goal": "length"})
    assert "Evidence in page:\nIt is 7,088 km long.\n\nSummary:\nThe Nile's length." in obs
    assert good.calls == 1
    # empty, then unparsable, then empty: the page is cut in half each time, then the passage extractor answers
    bad = ScriptedModel(["", "not json at all", ""])
    obs = VisitTool(vital, summary_model=bad)({"url": "Nile", "goal": "length in kilometers"})
    assert bad.calls >= 1 and "At 7,088 kilometers" in obs.split("Evidence in page:\n")[1]
