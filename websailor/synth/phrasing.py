"""How an item is put into words: the noun a question uses for the answer, entities named by
their descriptions, links worded by the relation their evidence states (the subject or the object
form, :mod:`websailor.synth.relations`), and the template question itself (one sentence, or
sentences about "a certain <type>"). :mod:`websailor.synth.items` builds the constraints these
words state; the LLM writer (:mod:`websailor.synth.writer`) may write the question instead.
"""

from __future__ import annotations

import re

from websailor.synth.constraints import Constraint
from websailor.synth.graph import SPAN_IN_DESC, KnowledgeGraph
from websailor.synth.vague import name_words

_TYPE_WORD = {
    "People": "person",
    "Geography": "place",
    "Arts": "work or artist",
    "History": "historical subject",
    "Biology and health sciences": "living thing or health topic",
    "Physical sciences": "subject of physical science",
    "Technology": "technology",
    "Mathematics": "mathematical subject",
    "Philosophy and religion": "subject of thought or faith",
    "Society and social sciences": "social subject",
    "Everyday life": "everyday subject",
}


def _lower_first(desc: str, common: dict[str, bool] | None = None) -> str:
    """Lower-case a short description's first letter when it is put mid-sentence, unless the
    word is a name: "Country in West Africa" becomes "country in West Africa"; "Italian
    polymath", "Hindu pilgrimage", "Bronze Age civilization", "Romanian-French playwright"
    keep theirs. ``common`` (:attr:`KnowledgeGraph.common_words`) decides for words the
    descriptions use elsewhere; a rule on the next word and the suffix for the others."""
    words = desc.split()
    first = words[0]
    if sum(ch.isupper() for ch in first) > 1:  # an acronym or a compound name: "US-backed", "NATO"
        return desc
    if common and first.lower() in common:
        proper = not common[first.lower()] or re.search(r"-[A-Z]", first)
    else:
        proper = (
            (len(words) > 1 and words[1][:1].isupper())
            or re.search(r"-[A-Z]", first)
            or first.endswith(("an", "ese", "ish", "ch"))
        )
    return desc if proper else first[0].lower() + desc[1:]


_COUNT_WORDS = frozenset("two three four five six seven eight nine ten several many various multiple".split())
_SINGULAR_S = frozenset(
    """series species means news physics mathematics economics politics linguistics ethics genetics
    statistics aesthetics electronics mechanics athletics gymnastics acoustics optics logistics lens bus gas atlas canvas
    chaos class glass grass process status virus bonus campus census corpus genus apparatus analysis thesis basis crisis
    axis iris tennis diabetes measles rabies herpes billiards darts checkers draughts""".split()
)


def _plural(word: str) -> bool:
    w = word.lower().strip(",;:")
    return w.endswith("s") and not w.endswith(("ss", "us", "is", "'s")) and w not in _SINGULAR_S


def describe(kg: KnowledgeGraph, node: str) -> str | None:
    """The noun phrase naming ``node`` by its description: "an Italian polymath"; no article
    before a count or a plural ("two equalities that ...", "mammals of the family
    Leporidae"), "the" before a possessive ("the Earth's highest mountain"). The description
    is cut at a semicolon."""
    desc = SPAN_IN_DESC.sub("", kg.attributes(node).description.split(";")[0]).strip().rstrip(",")
    desc = re.sub(r"^In [a-z ]+, ", "", desc)  # "In mathematics, invertible homomorphism"
    if not desc:
        return None
    desc = _lower_first(desc, kg.common_words)
    first = desc.split()[0]
    if first.lower() in _COUNT_WORDS or first.lower() in ("one", "any", "some", "the") or _plural(first):
        return desc
    if first.endswith(("'s", "’s")):
        return "the " + desc
    if re.match(r"[A-Z]{2,}\b", first):  # an initialism is read letter by letter: "an SI unit", "a UN body"
        vowel_sound = first[0] in "AEFHILMNORSX"
    else:
        vowel_sound = desc[0].lower() in "aeiou" and not re.match(r"(?i)(eu|uni|use|usu|one\b|once\b|uk)", desc)
    return ("an " if vowel_sound else "a ") + desc


_NOT_A_LIFE = re.compile(
    r"\b(wars?|dynasty|empire|period|era|age|reign|kingdom|republic|state|movement|revolution|battle|caliphate|"
    r"sultanate|civilization|culture|crisis|rebellion|uprising|pandemic|epidemic|expedition|siege|conflict|treaty|"
    r"council|union|confederation|khanate|shogunate|principality|duchy|colony|regime|government|occupation|invasion|"
    r"campaign|crusade|schism|reformation|renaissance|depression|famine|plague|genocide|series|band|group|company|"
    r"party|league|club|team|magazine|newspaper|journal|building|church|cathedral|temple|bridge|ship)\b",
    re.I,
)


def is_person(kg: KnowledgeGraph, node: str) -> bool:
    """A person: the corpus says so (topic ``People``), or, for an uncategorized page, the
    description gives a span of 15 to 110 years and names no war, dynasty, period, group or
    building ("English naturalist (1809–1882)" is a person; "global war (1939–1945)" is not)."""
    a = kg.attributes(node)
    if a.topic == "People":
        return True
    return (
        a.topic in ("", "Uncategorized")
        and a.span is not None
        and 15 <= a.span[1] - a.span[0] <= 110
        and not _NOT_A_LIFE.search(a.description)
    )


#: the longest relation phrase taken from the answer's own page (a longer one is a verbatim
#: piece of that page: "is the 18th-most populous city in")
MAX_SUBJECT_WORDS = 4


def worded_relation(kg: KnowledgeGraph, target: str, other: str) -> tuple[str, str] | None:
    """The relation phrase an item states for the link between ``target`` and ``other``, and
    its form: ``"subject"`` when the target's own page states it ("<target> is a novel by
    <other>"), ``"object"`` when the other page does ("<other> is a novel by <target>"). The
    object form is preferred: a phrase from the target's own page is a verbatim piece of it,
    which a search of the question's text would find in one hop, so a subject-form phrase is
    used only when it is short (:data:`MAX_SUBJECT_WORDS`: "borders", "is a branch of").
    ``None`` when no evidence sentence has a usable phrase."""
    found = sorted(
        (e["source"] == target, e["sentence"], e["relation"])
        for e in kg.evidence(target, other)
        if e.get("relation") and (e["source"] != target or len(e["relation"].split()) <= MAX_SUBJECT_WORDS)
    )
    if not found:
        return None
    subject_form, _, relation = found[0]
    return relation, "subject" if subject_form else "object"


def is_named(kg: KnowledgeGraph, node: str) -> bool:
    """Whether a page is a named entity, which an answer must be: a person, a name with a
    capitalized word after its first ("Indian Ocean", "Museo del Prado", "World War I"), or a
    single word the corpus writes capitalized more often than not mid-sentence ("Islam",
    "Cambodia"). Common nouns are not ("Juice", "Stock", "Black pepper", "Philosophy of
    science")."""
    if is_person(kg, node):
        return True
    words = name_words(node)
    if len(words) > 1:
        return any(w[:1].isupper() for w in words[1:])
    word = words[0].strip(".,;:()\"'").lower()
    return not kg.common_words.get(word, False)


def type_word(kg: KnowledgeGraph, node: str) -> str:
    """The noun a question uses for the answer, from its topic ("person", "place", ...)."""
    return "person" if is_person(kg, node) else _TYPE_WORD.get(kg.attributes(node).topic, "entity")


def _join(phrases: list[str]) -> str:
    return phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + ", and " + phrases[-1]


#: a name mask's relative clause as a statement about "this <type>"
_MASK_STATEMENT = (
    ("whose initials are ", "has the initials "),
    ("whose name is one word of ", "has a one-word name of "),
    ("whose name has ", "has a name of "),
)


def _as_statement(phrase: str) -> str:
    for clause, statement in _MASK_STATEMENT:
        if phrase.startswith(clause):
            return statement + phrase[len(clause) :]
    return phrase


def render(kg: KnowledgeGraph, target: str, constraints: list[Constraint]) -> str:
    """Template rendering. When every constraint is said of the target: "Which <type> <c1>,
    <c2>, and <c3>?" (name masks last). When a link's relation is stated by the other page
    (``form`` ``object``: "a 1968 film by Stanley Kubrick is a film scored by <target>"), one
    sentence per such link, then the rest as a statement, then the question: "A Dutch painter's
    1889 work is an oil-on-canvas painting by a certain person. This person died in the 1890s
    and has the initials V. V. G. Which person is it?". An entity mentioned twice is "the
    same ..." the second time."""
    word = type_word(kg, target)
    ordered = [c for c in constraints if c.kind != "name"] + [c for c in constraints if c.kind == "name"]
    subject: list[str] = []
    objects: list[str] = []
    named: set[str] = set()
    for c in ordered:
        phrase = c.phrase
        other = c.params.get("other")
        if other is not None:
            desc = describe(kg, other)
            if other in named and desc and desc[:2] in ("a ", "an"):
                # the same entity again: "... before the same English poet was born", not a second one
                phrase = phrase.replace(desc, "the same " + desc.split(" ", 1)[1], 1)
            named.add(other)
        (objects if c.params.get("form") == "object" else subject).append(phrase)
    if not objects:
        return f"Which {word} {_join(subject)}?"
    sentences = [
        f"{phrase[0].upper() + phrase[1:]} {'a certain' if i == 0 else 'the same'} {word}."
        for i, phrase in enumerate(objects)
    ]
    if subject:
        statement = f"This {word} {_join([_as_statement(p) for p in subject])}"
        sentences.append(statement if statement.endswith(".") else statement + ".")  # "the initials N."
    sentences.append(f"Which {word} is it?")
    return " ".join(sentences)


def statement(c: dict | Constraint, subject: str) -> str:
    """What constraint ``c`` (a :class:`Constraint` or its dict) says of ``subject``, as a
    clause: "Dublin has a population of more than a million", "Indore has the initials I.";
    for a link the other page states (``form`` ``object``), "A 1741 sacred oratorio by Handel
    was first performed in Dublin". Trajectory thoughts use it to name what they check."""
    phrase, params = (c["phrase"], c["params"]) if isinstance(c, dict) else (c.phrase, c.params)
    if params.get("form") == "object":
        return f"{phrase[0].upper()}{phrase[1:]} {subject}"
    return f"{subject} {_as_statement(phrase)}"
