"""Relation phrases read from an edge's evidence sentence.

Every edge of the knowledge graph keeps the sentences in which one page mentions the other
(:mod:`websailor.synth.graph`). :func:`read_relation` reads, with patterns, what such a sentence
says links the two pages, as a directed phrase that a question can place between them: for
"The Starry Night is an oil-on-canvas painting by the Dutch Post-Impressionist painter Vincent
van Gogh", the source *The Starry Night* "is an oil-on-canvas painting by" the target *Vincent
van Gogh*; "Xinjiang, officially the Xinjiang Uygur Autonomous Region (XUAR), is an autonomous
region of the People's Republic of China" gives "is an autonomous region of".

The reading is deliberately narrow (precision over coverage; docs/synthesis.md gives the
precision measured on a hand-labelled sample):

1. the sentence opens with the source: its title, its name without a disambiguation or a
   leading article, a person's surname, or a pronoun (it, he, she, they), after an optional
   "In <field>," and an optional parenthesis or "officially/also known as ..." apposition;
2. a verb group follows: a form of *be* or *become*, or one of :data:`RELATION_VERBS`;
3. the target is named within :data:`MAX_GAP_WORDS` words of it, with no comma, colon,
   semicolon, parenthesis or quote between, as the head of its noun phrase (what follows it is
   the sentence's end, a punctuation mark, a preposition, a conjunction or a relative pronoun);
4. the target is not the end of a longer name ("the Church of England" names no relation to
   England);
5. the phrase is the verb group and the words up to the last preposition before the target;
   the words after that preposition (articles and modifiers of the target: "the Dutch
   Post-Impressionist painter") are left out, since a question names the target its own way.

Anything else (the target inside a list, a clause after a comma, a bare "X is a Y") gives
``None``, and the question words that link as an association.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from websailor.synth.vague import bare_name

#: at most this many words between the verb group and the target
MAX_GAP_WORDS = 10
#: at most this many words (articles, adjectives, a title) between the phrase and the target's name
MAX_MODIFIER_WORDS = 5
#: words that show the gap after the last preposition is a clause, not the target's modifiers
_NOT_MODIFIERS = frozenset(
    """and or but nor not which who whom whose that what when where while why how because if than as since until
    although though is was are were be been being has have had do does did can could will would may might""".split()
)
#: words that show the phrase is a clause of its own, not a relation
_NOT_IN_PHRASE = frozenset("not what whether how why which who that whereby where when is was are were".split())
#: a plural subject's verb, put in the singular a question about one answer needs
_SINGULAR = {"are": "is", "were": "was", "have been": "has been"}
#: first words of a complement that read the same after a plural subject is made singular
_SINGULAR_OK = frozenset("native endemic found located known famous common widespread".split())
#: a phrase longer than this is not kept (it would carry a second fact into the question)
MAX_PHRASE_WORDS = 10

PREPOSITIONS = frozenset(
    """of in by for from to with on at into through between near along across against under over within during
    after before about among around toward towards upon via throughout beyond behind beside alongside outside
    inside onto off""".split()
)
_DETERMINERS = frozenset("the a an its his her their this that these those".split())
#: what may follow the target's mention when it heads its noun phrase
_FOLLOWERS = PREPOSITIONS | frozenset(
    "and or but which who whom whose that where when while as is was are were has had".split()
)
_COPULA = r"(?:is|was|are|were|has been|had been|have been|became|becomes|remains|remained)"
#: lexical verbs that state a relation between two entities, in the tenses lead sections use
RELATION_VERBS = tuple(
    """borders bordered flows flowed runs ran lies lay founded co-founded established wrote composed painted directed
    produced invented discovered developed designed built ruled led conquered invaded defeated married succeeded
    preceded created introduced formulated proposed published won joined served studied taught influenced inspired
    includes included contains contained comprises comprised covers connects separates drains surrounds hosts
    hosted houses belongs belonged originated emerged lived starred depicts portrays describes
    orbits replaced unified united fought signed attended received shares shared governs governed rules
    dominates dominated overlooks""".split()
)
_VERB = (
    r"(?:(?:also|later|then|first|still|now|originally|formerly|primarily|mainly|mostly|largely|often|once)\s+)?"
    r"(?:"
    + _COPULA
    + r"|"
    + "|".join(re.escape(v) for v in RELATION_VERBS)
    + r"|"
    + r"(?-i:[a-z][a-z-]{2,}(?:s|ed))(?<!ss)(?<!us)(?<!is)(?=\s+(?-i:the|a|an|its|his|her|their|to|from|in|on|at|by|with|into|of|for|as|over|across|through|along|between|[A-Z]))"
    + r")\b"
)
_INTRO = r"(?:In [a-z][a-z ]{1,30}, )?"
_APPOSITION = (
    r"(?:\s*\([^()]*(?:\([^()]*\)[^()]*)*\)"
    r"|,\s*(?:officially|also known as|also called|formerly|known as|or|born|nicknamed|sometimes)\b[^,;]{0,80},)*"
)
_PRONOUNS = ("It", "He", "She", "They")
_NAME_WORD = re.compile(r"[A-Z][\w'’.-]*$")


@dataclass(frozen=True)
class Relation:
    """What an evidence sentence says links its source page to its target page: ``phrase``
    reads "<source> <phrase> <target>" ("is an autonomous region of"), ``verb`` is the verb
    group it starts with."""

    phrase: str
    verb: str


def subject_forms(title: str) -> list[str]:
    """Ways a lead sentence names its page: the title, the name without a disambiguation or a
    leading article, and for a name of two or more capitalized words its last word (a
    surname: "Spinoza" for "Baruch Spinoza"), longest first."""
    bare = bare_name(title)
    forms = {title, bare, re.sub(r"^(?:The|A|An)\s+", "", bare)}
    words = bare.split()
    if len(words) >= 2 and all(w[:1].isupper() for w in words) and len(words[-1]) >= 4:
        forms.add(words[-1])
    return sorted((f for f in forms if f), key=len, reverse=True)


def _mention(sentence: str, title: str, start: int) -> tuple[int, int] | None:
    """(start, end) of the first mention of ``title`` at or after ``start`` (case-insensitive,
    whole words; the title, its bare name, or the bare name without an article; the longest
    form where several start at one place)."""
    low = _lower(sentence)
    best = None
    for form in _target_forms(title):  # longest first
        i = low.find(_lower(form), start)
        while i >= 0 and not _word_at(sentence, low, form, i):
            i = low.find(_lower(form), i + 1)
        if i >= 0 and (best is None or i < best[0]):
            best = (i, i + len(form))
    return best


def _target_forms(title: str) -> list[str]:
    bare = bare_name(title)
    return sorted({f for f in (title, bare, re.sub(r"^(?:The|A|An)\s+", "", bare)) if f}, key=len, reverse=True)


def _heads_its_phrase(sentence: str, end: int) -> bool:
    """Whether the mention ending at ``end`` is the head of its noun phrase: nothing follows,
    or a punctuation mark, or a function word (not "'s", not another name, not a noun)."""
    rest = sentence[end:]
    if not rest.strip() or re.match(r"\s*[.,;:!?)\]]", rest):
        return True
    m = re.match(r"\s+([\w-]+)", rest)
    return bool(m) and m.group(1) in _FOLLOWERS


#: an opening before the subject: "In mathematics, ", "The "
_OPENING = re.compile(r"\s*" + _INTRO + r"(?:The\s+)?", re.I)
#: what follows the subject: an optional apposition, then the verb group (shared by every page)
_PREDICATE = re.compile(_APPOSITION + r"\s+(" + _VERB + r")", re.I)


def _lower(text: str) -> str:
    """``text`` lower-cased, one character for one: a character whose lower case is longer
    ("İ" is "i" and a combining dot) stays as it is, so offsets in the result are offsets in
    ``text``."""
    low = text.lower()
    return low if len(low) == len(text) else "".join(c if len(c.lower()) != 1 else c.lower() for c in text)


def _word_at(text: str, low: str, form: str, start: int) -> bool:
    """Whether ``form`` occurs at ``start`` of ``text`` as whole words (``low`` is
    :func:`_lower` of ``text``)."""
    end = start + len(form)
    return (
        low.startswith(_lower(form), start)
        and (start == 0 or not (text[start - 1].isalnum() or text[start - 1] in "_-"))
        and (end == len(text) or not (text[end].isalnum() or text[end] in "_-"))
    )


def _head(sentence: str, source: str) -> re.Match | None:
    """The apposition and verb group after the sentence's opening names ``source``."""
    low = _lower(sentence)
    for start in sorted({0, _OPENING.match(sentence).end()}, reverse=True):
        for form in (*subject_forms(source), *_PRONOUNS):
            if _word_at(sentence, low, form, start):
                return _PREDICATE.match(sentence, start + len(form))
    return None


def read_relation(sentence: str, source: str, target: str) -> Relation | None:
    """The relation ``sentence`` states from page ``source`` to page ``target``, or ``None``
    when the patterns above do not read one (the caller words the link as an association).

    Args:
        sentence: an evidence sentence from ``source``'s page that mentions ``target``.
        source, target: page titles.
    """
    head = _head(sentence, source)
    if not head:
        return None
    verb = " ".join(head.group(1).split())
    plural = verb.split()[-1] in ("are", "were") or verb.endswith("have been")
    for many, one in _SINGULAR.items():
        verb = re.sub(rf"\b{many}$", one, verb)
    if sentence.lstrip()[:1].islower():
        return None
    mention = _mention(sentence, target, head.end())
    if mention is None or not _heads_its_phrase(sentence, mention[1]):
        return None
    if re.match(r"\s+of\s+(?:the\s+)?[A-Z]", sentence[mention[1] :]):
        return None  # the start of a longer name: "the Republic of Karelia" is not the page Republic
    if mention[0] > 0 and sentence[mention[0] - 1] == "-":
        return None
    gap = sentence[head.end() : mention[0]]
    if re.search(r"[,;:()\"“”]", gap):
        return None
    words = gap.split()
    if len(words) > MAX_GAP_WORDS:
        return None
    if len(words) >= 2 and words[-1] == "of" and _NAME_WORD.match(words[-2]):
        return None  # the target inside a longer name: "the Church of England", "the Kingdom of Mysore"
    preps = [i for i, w in enumerate(words) if w in PREPOSITIONS]
    if preps:
        kept, modifiers = words[: preps[-1] + 1], words[preps[-1] + 1 :]
    else:
        kept, modifiers = [], words
    if len(modifiers) > MAX_MODIFIER_WORDS or any(w.lower() in _NOT_MODIFIERS for w in modifiers):
        return None
    if plural and kept and not (kept[0] in ("a", "an", "one") or kept[0].endswith("ed") or kept[0] in _SINGULAR_OK):
        return None  # "the samurai were members of": the complement is plural too
    if kept and kept[-1] == "to" and modifiers and modifiers[0].islower() and modifiers[0] not in _DETERMINERS:
        return None  # an infinitive: "is credited with helping to establish the Soviet Union"
    if any(w.islower() and w.endswith("ing") for w in modifiers):
        return None  # a gerund clause: "the characteristic of having a kinship"
    if any(w.lower() in _NOT_IN_PHRASE for w in kept):
        return None  # a clause ("It is not known what spurred this increase in ...")
    if kept and kept[-1] in ("between", "among"):
        return None  # "the border between Africa and Asia" is not a relation to Africa alone
    if not kept and re.fullmatch(_COPULA, verb.split()[-1] if verb.split() else "", re.I):
        return None  # "X is a Y": a class, not a relation between two entities
    phrase = " ".join([verb, *kept]).strip()
    if len(phrase.split()) > MAX_PHRASE_WORDS or phrase.split()[-1] in _DETERMINERS:
        return None
    return Relation(phrase, verb)
