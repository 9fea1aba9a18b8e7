"""Typed attributes of an entity, parsed from its description and lead text.

SailorFog-QA-V2 blurs exact values into vague ones (a year into a decade, a number into an
order of magnitude), so each node of the knowledge graph carries the values it can be asked
about: a life span or period from the description ("Italian polymath (1452–1519)", "(100–44
BC)"), years mentioned in the text, and quantities with units (length, area, height,
population), each with the sentence it came from. Years BC are negative.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from websailor.corpus.text import split_sentences

_NUM = r"(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?"
_SPAN = re.compile(
    r"\((?:c\.\s*|born\s+)?(\d{1,4})(?:\s*(BC|BCE|AD|CE))?\s*[–-]\s*(?:c\.\s*)?(\d{1,4})(?:\s*(BC|BCE|AD|CE))?\)"
)
_YEAR = re.compile(
    r"(?<![\d,.])(?:(\d{1,4})\s*(BC|BCE)\b|(\d{3,4})(?:\s*(?:AD|CE)\b)?(?![\d,]|\.\d|\s*(?:km|m\b|mi\b|ft\b|kg|%)))"
)
# a quantity is read only where the sentence says what it measures: "6,650 km (4,130 mi) long",
# "a length of about 2,850 km", "an area of 1,000 km2", "covers 9.8 million km2" is not taken
# (no scale words for areas), "8,849 m (29,032 ft) above sea level", "a population of over 14
# million"; a distance ("187 km northwest of Tartu") or a rank ("the 12th largest") is not
_Q = (
    r"(?:(?:about|approximately|around|over|nearly|roughly|some|almost|more than|less than|just over|just under|"
    r"an estimated|estimated at|estimated|c\.|ca\.)\s+)?"
)
_PAREN = r"(?:\s*\([^)]{0,40}\))?"
_KM, _MI = r"(?:km|kilomet(?:re|er)s)(?![2²\w])", r"(?:mi|miles)(?![2²\w])"
_KM2, _MI2 = r"(?:km2|km²|square kilomet(?:re|er)s)", r"(?:sq mi|mi2|square miles)"
_M = r"(?:m|metres|meters)(?![\w²2])"
_FLOWS = r"\b(?:flows|runs|stretches|extends|winds)(?:\s+[a-z]+){0,2}\s+for\s+"
_HEIGHT_WORDS = re.compile(r"\b(height|tall|high|elevation|summit|altitude)\b", re.I)
_QUANTITIES = [
    (
        "length",
        re.compile(
            _NUM
            + r"\s*"
            + _KM
            + _PAREN
            + r"\s+(?:long|in length)\b|\blength of "
            + _Q
            + _NUM
            + r"\s*"
            + _KM
            + r"|"
            + _FLOWS
            + _Q
            + _NUM
            + r"\s*"
            + _KM
        ),
        1.0,
    ),
    (
        "length",
        re.compile(
            _NUM
            + r"\s*"
            + _MI
            + _PAREN
            + r"\s+(?:long|in length)\b|\blength of "
            + _Q
            + _NUM
            + r"\s*"
            + _MI
            + r"|"
            + _FLOWS
            + _Q
            + _NUM
            + r"\s*"
            + _MI
        ),
        1.60934,
    ),
    (
        "area",
        re.compile(
            r"\b(?:area of|covers|covering|spans|spanning|occupies|occupying) (?:an area of )?"
            + _Q
            + _NUM
            + r"\s*"
            + _KM2
            + "|"
            + _NUM
            + r"\s*"
            + _KM2
            + _PAREN
            + r"\s+in area\b"
        ),
        1.0,
    ),
    (
        "area",
        re.compile(
            r"\b(?:area of|covers|covering|spans|spanning|occupies|occupying) (?:an area of )?"
            + _Q
            + _NUM
            + r"\s*"
            + _MI2
            + "|"
            + _NUM
            + r"\s*"
            + _MI2
            + _PAREN
            + r"\s+in area\b"
        ),
        2.58999,
    ),
    ("height", re.compile(_NUM + r"\s*" + _M), 1.0),  # only in a sentence about height (_HEIGHT_WORDS)
]
_POPULATION = re.compile(
    r"\bpopulation(?:\s+(?:of|was|is|were|at|stood|totals?|totalled|totaled|reached|exceeding|exceeds|exceeded|around|"
    r"about|approximately|over|nearly|roughly|some|almost|more|than|an|estimated|just))*\s+"
    + _NUM
    + r"(?:\s*(million|billion))?(?!\d|,\d|st\b|nd\b|rd\b|th\b|\s*%|\s*(?:and|to|–|-)\s*\d)"
)
_SCALE = {"million": 1e6, "billion": 1e9, None: 1.0}
# projections and forecasts are not the entity's size
_NOT_NOW = re.compile(r"\b(projected|projection|expected to|forecast|predicted|will|by 2[01]\d\d)\b", re.I)
# sentences whose length or area is not the entity's own size (a river's basin, a country's
# coastline or border): their km and km2 are not read
_NOT_OWN_SIZE = re.compile(
    r"\b(basin|drainage|catchment|watershed|coast(?:line)?s?|borders?|shoreline|exclusive economic zone|"
    r"radius|diameter|orbit|distance|depth|deep)\b",
    re.I,
)


@dataclass(frozen=True)
class Quantity:
    """A measured value: ``kind`` (length km, area km2, height m, population people), the
    value in that canonical unit, and the sentence it was read from."""

    kind: str
    value: float
    sentence: str


@dataclass
class Attributes:
    """What can be asked or blurred about an entity."""

    description: str = ""
    topic: str = ""
    span: tuple[int, int] | None = None  # life span for people, period for others
    years: list[int] = field(default_factory=list)
    quantities: list[Quantity] = field(default_factory=list)
    #: the first sentence of the page's text ("The Nile is a major north-flowing river in
    #: northeast Africa ..."): the evidence for a question that describes the page
    lead: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Attributes:
        d = dict(d)
        d["span"] = tuple(d["span"]) if d.get("span") else None
        d["quantities"] = [Quantity(**q) for q in d.get("quantities", [])]
        return cls(**d)


def _number(whole: str, frac: str | None) -> float:
    return float(whole.replace(",", "") + (f".{frac}" if frac else ""))


def _signed(year: str, era: str | None) -> int:
    return -int(year) if era in ("BC", "BCE") else int(year)


def parse_span(description: str) -> tuple[int, int] | None:
    """``"Roman general and dictator (100–44 BC)"`` -> ``(-100, -44)``; ``None`` if absent."""
    m = _SPAN.search(description)
    if not m:
        return None
    a, era_a, b, era_b = m.groups()
    era_a = era_a or (era_b if era_b in ("BC", "BCE") else None)
    start, end = _signed(a, era_a), _signed(b, era_b)
    return (start, end) if start <= end else None


def parse_years(text: str) -> list[int]:
    """Distinct plausible years in ``text`` (500 to 2100 AD, or any year marked BC), in order."""
    out: list[int] = []
    for m in _YEAR.finditer(text):
        year = -int(m.group(1)) if m.group(1) else int(m.group(3))
        if (year < 0 or 500 <= year <= 2100) and year not in out:
            out.append(year)
    return out


def parse_quantities(text: str) -> list[Quantity]:
    """Quantities with units in ``text`` where the sentence says what is measured (see the
    patterns above); the first of each kind per sentence. Projections ("expected to reach")
    and the sizes of basins, coastlines, borders, orbits or depths are not read, nor a
    population below 100 (a rank or a count of something else)."""
    out: list[Quantity] = []
    for sentence in split_sentences(text):
        if _NOT_NOW.search(sentence):
            continue
        kinds: set[str] = set()
        for kind, pattern, factor in _QUANTITIES:
            if (
                kind in kinds
                or (kind in ("length", "area") and _NOT_OWN_SIZE.search(sentence))
                or (kind == "height" and not _HEIGHT_WORDS.search(sentence))
            ):
                continue
            m = pattern.search(sentence)
            if m:
                whole, frac = next((m.group(i), m.group(i + 1)) for i in range(1, m.re.groups, 2) if m.group(i))
                out.append(Quantity(kind, round(_number(whole, frac) * factor, 3), sentence))
                kinds.add(kind)
        m = _POPULATION.search(sentence)
        if m:
            value = _number(m.group(1), m.group(2)) * _SCALE[m.group(3)]
            if value >= 100:
                out.append(Quantity("population", value, sentence))
    return out


def parse_attributes(description: str, topic: str, text: str) -> Attributes:
    """All attributes of one page."""
    first = next((para for para in text.split("\n") if para.strip()), "")
    return Attributes(
        description=description,
        topic=topic,
        span=parse_span(description),
        years=parse_years(text),
        quantities=parse_quantities(text),
        lead=next(iter(split_sentences(first)), ""),
    )
