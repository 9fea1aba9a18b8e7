"""Vagueness functions behind SailorFog-QA-V2's uncertainty operators (WebSailor V1 section
3.1 "obfuscation"; WebSailor-V2 section 3): each turns an exact value into a vague one that
still holds for it, and returns the interval (or pattern) that a verifier can evaluate over the
whole graph, the phrase a question uses, and the parameters to record.

Examples (all tested):

* :func:`vague_period`: 1452 -> "in the mid-15th century" ``(1434, 1466)``, "in the 1450s"
  ``(1450, 1459)`` or "in the 15th century" ``(1401, 1500)``; -44 -> "in the 1st century BC".
* :func:`vague_number`: 7088 km -> "more than 5,000 km" ``(5000, inf)`` or "between 1,000 and
  10,000 km" ``(1000, 10000)``; 2,040,000 people -> "between 1 and 10 million" or "more than 2 million".
* :func:`mask_name`: "Leonardo da Vinci" -> initials "L. D. V."; or "a name of 3 words, the
  first with 8 letters, starting with L".
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Vague:
    """A blurred value: ``phrase`` for the question, the closed interval ``[lo, hi]`` it
    allows (``inf`` for open ends), and ``params`` to record (granularity etc.)."""

    phrase: str
    lo: float
    hi: float
    params: dict = field(default_factory=dict)

    def holds(self, value: float) -> bool:
        return self.lo <= value <= self.hi


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def vague_period(year: int, rng: random.Random, granularity: str | None = None) -> Vague:
    """Blur a year (negative = BC) to a decade, a century, or an early/mid/late third of a
    century. ``granularity`` is ``decade``, ``century`` or ``part``; random if ``None``. Years
    BC give decades and centuries only (a ``part`` of a BC century becomes the century, and
    the returned ``params`` say so); years below 10 BC give the century.

    Raises:
        ValueError: year 0 (there is none: 1 BC is followed by AD 1), or an unknown granularity.
    """
    if year == 0:
        raise ValueError("there is no year 0: 1 BC (-1) is followed by AD 1")
    if granularity not in (None, "decade", "century", "part"):
        raise ValueError(f"granularity must be decade, century or part, got {granularity!r}")
    g = granularity or rng.choice(["decade", "century", "part"])
    if year < 0:  # BC: centuries and decades count backwards
        c = (-year - 1) // 100 + 1
        lo, hi = -(c * 100), -((c - 1) * 100 + 1)
        if g == "decade" and -year >= 10:
            d = (-year) // 10 * 10
            return Vague(f"in the {d}s BC", -(d + 9), -d, {"granularity": "decade"})
        return Vague(f"in the {_ordinal(c)} century BC", lo, hi, {"granularity": "century"})
    c = (year - 1) // 100 + 1
    start = (c - 1) * 100 + 1
    if g == "decade":
        d = year // 10 * 10
        return Vague(f"in the {d}s", d, d + 9, {"granularity": "decade"})
    if g == "part":
        third = min(2, (year - start) // 33)
        name = ["early", "mid", "late"][third]
        lo = start + 33 * third
        hi = start + 99 if third == 2 else lo + 32
        return Vague(f"in the {name}-{_ordinal(c)} century", lo, hi, {"granularity": "part", "part": name})
    return Vague(f"in the {_ordinal(c)} century", start, start + 99, {"granularity": "century"})


_UNITS = {"length": "km", "area": "km2", "height": "m", "population": ""}


def _fmt(x: float, kind: str) -> str:
    if kind == "population" and x >= 1e6:
        return f"{x / 1e9:g} billion" if x >= 1e9 else f"{x / 1e6:g} million"
    return f"{x:,.0f}"


def vague_number(value: float, kind: str, rng: random.Random, style: str | None = None) -> Vague:
    """Blur a quantity of at least 1 (km, km2, m or people) to an order of magnitude ("between 1,000 and 10,000 km") or a
    lower bound on the 1-2-5 series ("more than 5,000 km"). ``style`` is ``magnitude`` or ``bound``."""
    if not value >= 1:
        raise ValueError(f"vague_number needs a value of at least 1 (in the kind's unit), got {value}")
    s = style or rng.choice(["magnitude", "bound"])
    unit = _UNITS.get(kind, "")
    exp = math.floor(math.log10(value))
    lo, hi = 10.0**exp, 10.0 ** (exp + 1)
    if s == "bound":  # the largest of 1, 2, 5 x 10^k below the value: 7,088 -> 5,000; 2.04M -> 2 million
        bound = max(m * lo for m in (1, 2, 5) if m * lo <= value)
        phrase = f"{'at least' if bound == value else 'more than'} {_fmt(bound, kind)}{' ' + unit if unit else ''}"
        return Vague(
            phrase.replace("more than 1 million", "more than a million"),
            bound,
            math.inf,
            {"style": "bound", "bound": bound},
        )
    if kind == "population" and lo >= 1e6:
        lo_s, hi_s = _fmt(lo, kind), _fmt(hi, kind)
        same_scale = (
            lo_s.split()[-1] == hi_s.split()[-1]
        )  # "between 1 and 10 million", not "between 100 million and 1 billion"
        phrase = f"between {lo_s.split()[0] if same_scale else lo_s} and {hi_s}"
    else:
        phrase = f"between {_fmt(lo, kind)} and {_fmt(hi, kind)}{' ' + unit if unit else ''}"
    return Vague(phrase, lo, hi, {"style": "magnitude", "exponent": exp})


def bare_name(title: str) -> str:
    """A title without its disambiguation in parentheses: "Eris (dwarf planet)" -> "Eris"."""
    return re.sub(r"\s*\([^)]*\)\s*$", "", title).strip() or title


def _letters(word: str) -> int:
    return sum(ch.isalpha() for ch in word)


def _count(letters: int) -> str:
    return f"{letters} letter" + ("" if letters == 1 else "s")


def name_words(title: str) -> list[str]:
    """The words a name mask is made of: the bare name (:func:`bare_name`) up to its first
    comma, without numbers and ordinals ("John Churchill, 1st Duke of Marlborough" -> ["John",
    "Churchill"]; "Apollo 11" -> ["Apollo"]); a name of numbers only keeps its words."""
    words = bare_name(title).split(",")[0].split()
    named = [w for w in words if not any(ch.isdigit() for ch in w)]
    return named or words


@dataclass(frozen=True)
class NameMask:
    """A partial view of a name: ``phrase`` for the question; :meth:`matches` checks a title
    (its bare name, see :func:`bare_name`)."""

    phrase: str
    style: str
    pattern: tuple

    def matches(self, title: str) -> bool:
        words = name_words(title)
        if not words:
            return False
        if self.style == "initials":
            return tuple(w[0].upper() for w in words) == tuple(p.upper() for p in self.pattern)
        n_words, first_len, first_letter = self.pattern
        return len(words) == n_words and _letters(words[0]) == first_len and words[0][0].upper() == first_letter


def mask_name(title: str, rng: random.Random, style: str | None = None) -> NameMask:
    """Mask a name (its :func:`name_words`: no disambiguation, nothing after a comma, no
    numbers or ordinals) as its initials in capitals
    ("whose initials are L. D. V.") or as word and letter counts ("whose name has 3 words, the first
    with 8 letters, starting with L"; letters only, hyphens and apostrophes not counted).
    ``style`` is ``initials`` or ``letters``."""
    words = name_words(title)
    s = style or rng.choice(["initials", "letters"])
    if s == "initials":
        initials = tuple(w[0].upper() for w in words)  # "E. G.", not "E. g." (which reads as "e.g.")
        return NameMask("whose initials are " + " ".join(f"{i}." for i in initials), "initials", initials)
    first = words[0]
    n = len(words)
    if n == 1:
        phrase = f"whose name is one word of {_count(_letters(first))}, starting with {first[0].upper()}"
    else:
        phrase = f"whose name has {n} words, the first with {_count(_letters(first))}, starting with {first[0].upper()}"
    return NameMask(phrase, "letters", (n, _letters(first), first[0].upper()))
