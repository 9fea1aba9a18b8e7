"""Report rollouts in the question view: the report rendered safely
(:mod:`websailor.view.safe_markdown`), each citation with what FACT found of it or the parse's
own problem, and the RACE table; read from the eval folder's ``race.jsonl`` and ``fact.jsonl``
(one line per task and rollout, :meth:`websailor.eval.race.RaceScore.to_dict` and
:meth:`websailor.eval.fact.FactResult.to_dict` with ``rollout``).

Those two files are read leniently, as a page must show what it can: a line that is blank, not
JSON, cut off (a run killed mid-write) or not a record of its kind is skipped, and the page
names it (:attr:`ScoreFiles.notes`); a later line of the same task and rollout replaces an
earlier one. A file that leads out of its run folder, or is larger than :data:`MAX_BYTES`, is
not read (a note says so).
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websailor.errors import InputFormatError, InvalidArgumentError
from websailor.eval.fact import FactResult, PairCheck
from websailor.eval.race import RaceScore
from websailor.eval.report_eval import report_key
from websailor.jsonio import JsonlStream, loads_object
from websailor.reports.citations import REFERENCE_HEADINGS, parse_report, visited_urls
from websailor.view.discover import run_file
from websailor.view.safe_markdown import Cite, css_name, linkable, render_markdown

#: The score files read beside an eval run's trajectories.
RACE_FILE, FACT_FILE = "race.jsonl", "fact.jsonl"
#: Largest score file read (bytes).
MAX_BYTES = 64 << 20
#: What a line that is not a usable record may raise while it is read.
_UNUSABLE = (InputFormatError, ValueError, TypeError, KeyError, AttributeError, OverflowError, UnicodeDecodeError)
#: Notes kept per file (the rest are counted).
MAX_NOTES = 20
#: What each FACT verdict or reference problem means, as the page says it.
MEANINGS = {
    "supported": "the cited page supports the statement",
    "unsupported": "the cited page does not support the statement",
    "unreachable": "the cited page could not be read (not judged)",
    "unjudged": "the judge gave no usable verdict",
    "mixed": "the page supports some statements that cite it and not others",
    "no_url": "the entry names no URL",
    "malformed_url": "not an http or https URL with a host",
    "private_url": "a private or local address, never read",
    "not_visited": "a page the agent never opened",
    "duplicate": "the number was listed before (the first entry counts)",
    "dangling": "cited, but not in the reference list",
    "uncited": "listed, but no statement cites it",
    "unchecked": "no FACT check of this rollout",
}
#: What each RACE mode means, as the page labels it.
MODES = {
    "relative": "relative: target / (target + reference); 0.5 is as good as the task's reference report",
    "absolute": "absolute: no reference report; the target's weighted score / 10",
}

# -- the score files ------------------------------------------------------------------------------


@dataclass
class ScoreFile:
    """The usable records of one score file by ``(task id, rollout)``, each with the ``key``
    of the report it scored (``None``: not written), and ``notes`` on the lines skipped."""

    by_key: dict[tuple[str, int], tuple[str | None, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    skipped: int = 0

    def note(self, text: str) -> None:
        """Record a skipped line (the first :data:`MAX_NOTES` are named)."""
        self.skipped += 1
        if len(self.notes) < MAX_NOTES:
            self.notes.append(text)


@dataclass
class ScoreFiles:
    """The RACE and FACT records of an eval run (empty without the files)."""

    race: ScoreFile = field(default_factory=ScoreFile)
    fact: ScoreFile = field(default_factory=ScoreFile)

    def of(self, rec: dict[str, Any]) -> tuple[RaceScore | None, FactResult | None, list[str]]:
        """The RACE score and FACT result of the rollout ``rec`` (a trajectory record, or its
        ``id``, ``rollout``, ``prediction`` and ``termination``), and notes: a record scored
        for another report of the rollout (its ``key`` is not the report's, see
        :func:`websailor.eval.report_eval.report_key`: the rollout was run again since) is not
        shown."""
        if not self.race.by_key and not self.fact.by_key:
            return None, None, []
        rid, key, notes = (str(rec.get("id")), rec.get("rollout")), report_key(rec), []
        found = []
        for name, f in ((RACE_FILE, self.race), (FACT_FILE, self.fact)):
            stored, value = f.by_key.get(rid, (None, None))
            if value is not None and stored is not None and stored != key:
                notes.append(f"{name} scored an earlier report of this rollout (run again since): not shown")
                value = None
            found.append(value)
        return found[0], found[1], notes

    def figures(self, rec: dict[str, Any]) -> str | None:
        """One line for the table's cell of rollout ``rec`` (as :meth:`of` takes it): RACE
        overall with its mode and citation accuracy; ``None`` without either."""
        race, fact, _ = self.of(rec)
        parts = [f"RACE {race.mode} {number(race.overall)}"] if race is not None else []
        if fact is not None:
            parts.append(f"citation accuracy {number(fact.citation_accuracy)}")
        return ", ".join(parts) or None

    @property
    def notes(self) -> list[str]:
        """Every note of both files, with a count of the ones not named."""
        out = []
        for f in (self.race, self.fact):
            out += f.notes
            if f.skipped > len(f.notes):
                out.append(f"... and {f.skipped - len(f.notes)} more lines skipped")
        return out


def _race_record(rec: dict[str, Any]) -> RaceScore:
    score = RaceScore.from_dict(rec)
    if not all(isinstance(c.reason, str | None) for c in score.criteria):
        raise InputFormatError("a criterion's reason is not text")
    return score


def _fact_record(rec: dict[str, Any]) -> FactResult:
    try:
        return FactResult.from_dict(rec)
    except (KeyError, ValueError, TypeError, AttributeError, OverflowError) as e:
        raise InputFormatError(f"not a FACT result ({type(e).__name__}: {e})"[:300]) from None


def _key(rec: dict[str, Any]) -> tuple[str, int]:
    rollout = rec.get("rollout", 0)
    if isinstance(rollout, bool) or not isinstance(rollout, int) or not isinstance(rec.get("task_id"), str | int):
        raise InputFormatError("no task_id, or a rollout that is not a whole number")
    return str(rec["task_id"]), rollout


def _read(path: Path, name: str, parse: Callable[[dict[str, Any]], Any]) -> ScoreFile:
    """The records of score file ``path`` (shown as ``name``), each line checked by ``parse``."""
    out = ScoreFile()
    stream = JsonlStream(path, f"a {name} line")
    try:
        for _, lineno, raw in stream.lines():
            if not raw.strip():
                continue
            try:
                rec = loads_object(raw.decode("utf-8"))
                key = rec.get("report_key", rec.get("key"))  # the report it scored (older lines: key)
                key = key if isinstance(key, str) else None
                out.by_key[_key(rec)] = (key, parse(rec))
            except _UNUSABLE as e:
                out.note(f"{name} line {lineno} skipped: {str(e)[:200] or type(e).__name__}")
    except (InputFormatError, OSError) as e:
        out.note(f"{name}: reading stopped ({str(e)[:200]})")
    if stream.unfinished is not None:
        out.note(f"{name} line {stream.unfinished.lineno} skipped: unfinished (a run still writing it?)")
    return out


_CACHE: dict[Path, tuple[tuple[int, float, int], ScoreFile]] = {}
_LOCK = threading.Lock()


def score_file(run: Path, name: str, parse: Callable[[dict[str, Any]], Any]) -> ScoreFile:
    """The records of the score file ``name`` of eval folder ``run`` (none without one),
    cached per size and modification time; never raises for what the file holds."""
    try:
        path = run_file(run, name)
        if not path.is_file():
            return ScoreFile()
        st = path.stat()
    except (InvalidArgumentError, OSError) as e:
        return ScoreFile(notes=[f"{name} not read: {e}"], skipped=1)
    if st.st_size > MAX_BYTES:
        return ScoreFile(notes=[f"{name} not read: {st.st_size >> 20} MB, more than {MAX_BYTES >> 20} MB"], skipped=1)
    stamp = (st.st_size, st.st_mtime, st.st_ino)
    with _LOCK:
        hit = _CACHE.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    out = _read(path, name, parse)
    with _LOCK:
        _CACHE[path] = (stamp, out)
    return out


def score_files(run: Path) -> ScoreFiles:
    """The RACE and FACT records of the eval folder ``run`` (:data:`RACE_FILE`,
    :data:`FACT_FILE`)."""
    return ScoreFiles(score_file(run, RACE_FILE, _race_record), score_file(run, FACT_FILE, _fact_record))


# -- figures --------------------------------------------------------------------------------------


def number(value: Any, digits: int = 3) -> str:
    """A finite number as text with ``digits`` decimals; ``n/a`` for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "n/a"
    try:
        x = float(value)
    except OverflowError:  # an integer beyond any float
        return "n/a"
    return f"{x:.{digits}f}" if math.isfinite(x) else "n/a"


def race_table(score: RaceScore) -> dict[str, Any]:
    """What the page shows of a RACE score: ``mode`` with its label, ``overall``, one row per
    dimension (weight, target, reference, score) and its criteria (weight, scores, reason),
    the totals, the judge and the problems; every figure as text."""
    dims = []
    for name, d in score.dimensions.items():
        criteria = [
            {
                "id": str(c.id),
                "criterion": str(c.criterion),
                "weight": number(c.weight),
                "target": number(c.target, 1),
                "reference": number(c.reference, 1),
                "reason": c.reason or "",
            }
            for c in score.criteria
            if c.dimension == name
        ]
        row = {"name": name, "weight": number(d.weight), "target": number(d.target, 2)}
        dims.append({**row, "reference": number(d.reference, 2), "score": number(d.score), "criteria": criteria})
    return {
        "mode": score.mode,
        "mode_label": MODES.get(score.mode, score.mode),
        "overall": number(score.overall),
        "target_total": number(score.target_total, 2),
        "reference_total": number(score.reference_total, 2),
        "dimensions": dims,
        "judge": str(score.judge),
        "criteria_source": str(score.criteria_source),
        "problems": [str(p) for p in score.problems] if isinstance(score.problems, list) else [],
    }


def fact_figures(result: FactResult) -> dict[str, Any]:
    """What the page shows of a FACT result: citation accuracy (with why it is n/a), effective
    citations, the pairs by verdict, the judge and the problems."""
    return {
        "accuracy": number(result.citation_accuracy),
        "note": result.accuracy_note,
        "effective": result.effective_citations,
        "counts": result.counts(),
        "judge": result.judge,
        "problems": result.problems,
    }


# -- citations ------------------------------------------------------------------------------------


def _norm(text: str) -> str:
    """Text compared between a statement and the words before a marker: no markers, no
    Markdown emphasis, spaces collapsed, lower case, no trailing punctuation."""
    text = re.sub(r"\[\d[\d\s,;–-]*\]", " ", text)
    return " ".join(re.sub(r"[*_`~]", "", text).split()).lower().rstrip(" .,;:!?。，；：！？")


def _verdict_of(pairs: list[PairCheck]) -> str:
    verdicts = {p.verdict for p in pairs}
    return verdicts.pop() if len(verdicts) == 1 else "mixed"


def _pair_title(p: PairCheck) -> str:
    return f"{p.verdict}: {p.reason or MEANINGS.get(p.verdict, '')}"


@dataclass
class Citations:
    """A report's references with what is known of each: the parse's problem, and FACT's
    verdicts when a FACT result is given; :meth:`cite` answers for an inline marker."""

    references: list[dict[str, Any]]
    prefix: str
    fact: FactResult | None = None

    def __post_init__(self) -> None:
        self.pairs: dict[int, list[PairCheck]] = {}
        for p in self.fact.pairs if self.fact else []:
            self.pairs.setdefault(p.n, []).append(p)
        self.unusable = {u.n: u.problem for u in self.fact.unusable} if self.fact else {}
        self.first = {}
        for r in self.references:
            self.first.setdefault(r["n"], r)

    def anchor(self, n: int) -> str:
        """The id of reference ``n``'s entry in the list."""
        return f"{self.prefix}ref-{n}"

    def verdict(self, ref: dict[str, Any]) -> str:
        """FACT's verdict on reference ``ref`` (``mixed`` when its pairs differ); else the
        reference's problem, ``uncited`` or ``unchecked``."""
        pairs = self.pairs.get(ref["n"])
        if pairs:
            return _verdict_of(pairs)
        problem = self.unusable.get(ref["n"]) or ref["problem"]
        if problem:
            return problem
        return "uncited" if not ref["cited"] else "unchecked"

    def cite(self, n: int, before: str) -> Cite:
        """How marker number ``n`` shows, ``before`` being the text before it: the verdict of
        the pair whose statement ends there when one does, else the reference's."""
        ref = self.first.get(n)
        if ref is None:
            return Cite("dangling", f"dangling: {MEANINGS['dangling']}")
        pairs = self.pairs.get(n) or []
        fragment = _norm(re.split(r"(?<=[.!?。！？])\s+", before)[-1])
        chosen = [p for p in pairs if fragment and fragment in _norm(p.statement)] or pairs
        if len({p.verdict for p in chosen}) == 1:
            return Cite(chosen[0].verdict, _pair_title(chosen[0]), self.anchor(n))
        verdict = self.verdict(ref)
        return Cite(verdict, f"{verdict}: {MEANINGS.get(verdict, '')}", self.anchor(n))

    def entries(self) -> list[dict[str, Any]]:
        """The reference list as the page shows it: each entry's anchor (the first of its
        number), verdict, what the verdict means, and FACT's pairs."""
        out, seen = [], set()
        for ref in self.references:
            verdict = self.verdict(ref) if ref["n"] not in seen else (ref["problem"] or "duplicate")
            pairs = self.pairs.get(ref["n"], []) if ref["n"] not in seen else []
            out.append(
                {
                    **ref,
                    "id": self.anchor(ref["n"]) if ref["n"] not in seen else "",
                    "verdict": verdict,
                    "css": css_name(verdict),
                    "meaning": MEANINGS.get(verdict, ""),
                    "also": MEANINGS.get(ref["problem"], ref["problem"])
                    if ref["problem"] not in (None, verdict)
                    else "",
                    "checks": [
                        {"statement": p.statement, "verdict": p.verdict, "css": css_name(p.verdict), "reason": p.reason}
                        for p in pairs
                    ],
                }
            )
            seen.add(ref["n"])
        return out


def _reference(r: Any) -> dict[str, Any] | None:
    """A reference of the record's ``report`` field in a checked form, ``None`` when it is not one."""
    if not isinstance(r, dict) or isinstance(r.get("n"), bool) or not isinstance(r.get("n"), int):
        return None
    url = r.get("url") if isinstance(r.get("url"), str) else None
    problem = r.get("problem") if isinstance(r.get("problem"), str) else None
    return {
        "n": r["n"],
        "url": url,
        "href": url if linkable(url) else None,
        "title": str(r.get("title") or ""),
        "visited": r.get("visited") is True,
        "cited": r.get("cited") is True,
        "problem": problem,
    }


def parsed_report(rec: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The record's ``report`` field, or the report parsed again when that field is missing
    or malformed (with a note saying so)."""
    report = rec.get("report")
    if isinstance(report, dict) and isinstance(report.get("references"), list):
        return report, None
    calls = rec.get("tool_calls") if isinstance(rec.get("tool_calls"), list) else []
    prediction = rec.get("prediction") if isinstance(rec.get("prediction"), str) else None
    note = "the record has no parsed report: its citations were parsed again here"
    return parse_report(prediction, visited_urls(calls)).to_dict(), note


def report_body(text: str) -> str:
    """The report without its reference list (from the last heading named like one of
    :data:`~websailor.reports.citations.REFERENCE_HEADINGS`); the whole text without one."""
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        name = lines[i].strip().lstrip("#").strip().strip("*_").strip().rstrip(":：").strip().lower()
        if name in REFERENCE_HEADINGS:
            return "\n".join(lines[:i])
    return text


def _texts(values: Any) -> list[str]:
    return [str(v) for v in values] if isinstance(values, list) else []


def report_view(rec: dict[str, Any], scores: ScoreFiles | None = None, prefix: str = "") -> dict[str, Any] | None:
    """What the question view shows of a report rollout (``None`` for any other): the body
    rendered (its markers classed by verdict), the reference list with each entry's verdict,
    the report's problems, and the RACE table and FACT figures when ``scores`` has them
    (:meth:`ScoreFiles.of`). ``prefix`` keeps the ids of several rollouts on one page apart."""
    if rec.get("task") != "report":
        return None
    race, fact, notes = (scores or ScoreFiles()).of(rec)
    report, note = parsed_report(rec)
    refs = [r for r in map(_reference, report["references"]) if r is not None]
    citations = Citations(refs, prefix, fact)
    text = rec.get("prediction") if isinstance(rec.get("prediction"), str) else ""
    counts = report.get("counts") if isinstance(report.get("counts"), dict) else {}
    return {
        "html": render_markdown(report_body(text), citations.cite) if text.strip() else None,
        "references": citations.entries(),
        "dangling": _texts(report.get("dangling")),
        "problems": _texts(report.get("problems")),
        "words": report.get("words") if isinstance(report.get("words"), int) else None,
        "statements": counts.get("cited_statements") if isinstance(counts.get("cited_statements"), int) else None,
        "race": race_table(race) if race is not None else None,
        "fact": fact_figures(fact) if fact is not None else None,
        "notes": [*notes, *([note] if note else [])],
    }


def _get(d: Any, *path: str) -> Any:
    for key in path:
        d = d.get(key) if isinstance(d, dict) else None
    return d


def _pct(value: Any) -> str:
    shown = number(value, 3)
    return shown if shown == "n/a" else f"{100 * float(shown):.1f}"


def report_headline(summary: dict[str, Any]) -> str:
    """The runs index's line for a report evaluation's ``summary.json``
    (:func:`websailor.eval.report_eval.report_summary`): reports and tasks, RACE overall per
    mode (x 100), citation accuracy (%) and effective citations per report; whatever the
    summary lacks is left out."""
    parts = [f"{summary.get('rollouts', '?')} reports on {summary.get('tasks', '?')} tasks"]
    for mode in ("relative", "absolute"):
        if isinstance(_get(summary, "race", mode, "n"), int) and _get(summary, "race", mode, "n"):
            parts.append(f"RACE {mode} {_pct(_get(summary, 'race', mode, 'overall'))}")
    accuracy = _get(summary, "fact", "citation_accuracy")
    if accuracy is not None:
        parts.append(f"citation accuracy {_pct(accuracy)}%")
    effective = _get(summary, "fact", "effective_citations")
    if effective is not None:
        parts.append(f"{number(effective, 2)} effective citations per report")
    return ", ".join(parts)
