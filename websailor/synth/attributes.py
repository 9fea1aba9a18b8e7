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
_QUANTITIES = [
    ("area", re.compile(_NUM + r"\s*(km2|km²|square kilomet(?:re|er)s)"), 1.0),
    ("area", re.compile(_NUM + r"\s*(sq mi|mi2|square miles)"), 2.58999),
    ("length", re.compile(_NUM + r"\s*(km|kilomet(?:re|er)s)(?![2²\w])"), 1.0),
    ("length", re.compile(_NUM + r"\s*(mi|miles)(?![2²\w])"), 1.60934),
    ("height", re.compile(_NUM + r"\s*(m|metres|meters)(?![\w²2])"), 1.0),
]
# "population of 2.04 million", "population of the city proper was over 14 million"
_POPULATION = re.compile(r"population\b[^.\d;]{0,40}?" + _NUM + r"(?:\s*(million|billion))?")
_SCALE = {"million": 1e6, "billion": 1e9, None: 1.0}
_HEIGHT_WORDS = re.compile(r"\b(height|tall|high|elevation|summit|altitude)\b", re.I)
# sentences whose length or area is not the entity's own size (a river's basin, a country's
# coastline or border): their km and km2 are not read
_NOT_OWN_SIZE = re.compile(r"\b(basin|drainage|catchment|watershed|coast(?:line)?s?|borders?|shoreline|exclusive economic zone|"
                           r"radius|diameter|orbit|distance)\b", re.I)


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

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Attributes":
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
    """Quantities with units in ``text``; the first of each kind per sentence."""
    out: list[Quantity] = []
    for sentence in split_sentences(text):
        kinds: set[str] = set()
        for kind, pattern, factor in _QUANTITIES:
            if kind in kinds or (kind == "height" and not _HEIGHT_WORDS.search(sentence)) \
                    or (kind in ("length", "area") and _NOT_OWN_SIZE.search(sentence)):
                continue
            m = pattern.search(sentence)
            if m:
                out.append(Quantity(kind, round(_number(m.group(1), m.group(2)) * factor, 3), sentence))
                kinds.add(kind)
        m = _POPULATION.search(sentence)
        if m:
            out.append(Quantity("population", _number(m.group(1), m.group(2)) * _SCALE[m.group(3)], sentence))
    return out


def parse_attributes(description: str, topic: str, text: str) -> Attributes:
    """All attributes of one page."""
    return Attributes(description=description, topic=topic, span=parse_span(description),
                      years=parse_years(text), quantities=parse_quantities(text))
