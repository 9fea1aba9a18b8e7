"""Two evaluations of the same questions side by side (base against SFT, SFT against RL): the
headline figures of each on the questions both graded, the paired difference in Avg@k with a
bootstrap interval, and which questions flipped either way.

The difference is paired: each resample draws questions with replacement and takes the mean,
over those questions, of (accuracy of B) - (accuracy of A), a question's accuracy being the
share of its graded rollouts that are correct. A gain is claimed only when the 95% interval
of that difference lies above zero; otherwise the verdict says plainly that none is shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from websailor.errors import InputFormatError, InvalidArgumentError
from websailor.eval.report import _pct, summarize
from websailor.eval.scoring import Score, read_scores
from websailor.log import get_logger
from websailor.packed import unpacked

logger = get_logger(__name__)


@dataclass
class Comparison:
    """Figures of runs A and B on their common questions.

    Attributes:
        names: the two runs' labels.
        summaries: :func:`~websailor.eval.report.summarize` of each run on the common questions.
        avg_diff: Avg@k of B minus Avg@k of A (a fraction; +0.05 is 5 points).
        avg_diff_ci95: paired bootstrap interval of ``avg_diff``.
        only_a, only_b: ids of the questions that one run solves at least once and the other never.
        both, neither: ids solved by both, by neither.
        verdict: one sentence: a gain, a loss, or no difference shown.
        graded: graded questions of each run (the comparison uses the ones both have).
    """

    names: tuple[str, str]
    summaries: tuple[dict, dict]
    avg_diff: float
    avg_diff_ci95: tuple[float, float]
    only_a: list[str]
    only_b: list[str]
    both: list[str]
    neither: list[str]
    verdict: str
    graded: tuple[int, int] = (0, 0)


def load_scores(run: Path) -> list[Score]:
    """The scores of an evaluation output directory (``scores.jsonl`` of ``websailor eval`` or
    ``websailor score --out``), or of a scores file itself.

    Raises:
        InvalidArgumentError: no such directory or file, or a directory without scores.
        InputFormatError: a line that is not a score record.
    """
    run = Path(run)
    path = unpacked(run / "scores.jsonl") if run.is_dir() else run  # a published run's may be packed
    if not path.is_file():
        raise InvalidArgumentError(
            f"{run}: no {'scores.jsonl in this directory' if run.is_dir() else 'such file'}; give the --out "
            "directory of `websailor eval` (or of `websailor score --out`)"
        )
    scores = read_scores(path)
    if not scores:
        raise InputFormatError(f"{path} holds no scores: the evaluation has not graded anything yet")
    return scores


def _accuracy(scores: list[Score]) -> dict[str, float]:
    """Share of correct rollouts per question, over its graded rollouts (ungraded ones left out)."""
    got: dict[str, list[bool]] = {}
    for s in scores:
        if s.correct is not None:
            got.setdefault(s.id, []).append(bool(s.correct))
    return {q: sum(v) / len(v) for q, v in got.items()}


def paired_bootstrap(a: list[float], b: list[float], n_resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of mean(b - a) over paired questions, resampled with replacement.

    Args:
        a, b: per-question accuracies of the two runs, in the same question order (length n >= 1).

    Raises:
        ValueError: the lists are empty or of different lengths.
    """
    import numpy as np

    if not a or len(a) != len(b):
        raise ValueError(f"need two equally long non-empty lists, got {len(a)} and {len(b)}")
    d = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    rng = np.random.default_rng(seed)
    means = np.sort(d[rng.integers(0, len(d), size=(n_resamples, len(d)))].mean(axis=1))
    return float(means[int(0.025 * n_resamples)]), float(means[min(n_resamples - 1, int(0.975 * n_resamples))])


def compare_runs(a: list[Score], b: list[Score], names: tuple[str, str] = ("A", "B")) -> Comparison:
    """Compare two graded runs on the questions both have graded rollouts for, matched by id
    (:func:`check_same_questions` checks that the ids stand for the same texts).

    Raises:
        InvalidArgumentError: the runs have no graded question in common.
    """
    acc_a, acc_b = _accuracy(a), _accuracy(b)
    common = [q for q in acc_a if q in acc_b]
    if not common:
        raise InvalidArgumentError(
            f"{names[0]} and {names[1]} have no graded question in common ({len(acc_a)} and {len(acc_b)} "
            "graded questions): compare two evaluations of the same benchmark"
        )
    judges = [sorted({s.judge for s in run}) for run in (a, b)]
    if judges[0] != judges[1]:
        raise InvalidArgumentError(
            f"{names[0]} was graded by {', '.join(judges[0])} and {names[1]} by {', '.join(judges[1])}: regrade one "
            "with `websailor score --judge` so both use the same judge"
        )
    keep = set(common)
    sums = tuple(summarize([s for s in run if s.id in keep]) for run in (a, b))
    if sums[0]["k"] != sums[1]["k"]:
        raise InvalidArgumentError(
            f"{names[0]} has k = {sums[0]['k']} rollouts per question and {names[1]} k = {sums[1]['k']}: Avg@k and "
            "Pass@k are only comparable at the same k; evaluate both with the same --rollouts"
        )
    diff = sums[1]["avg_at_k"] - sums[0]["avg_at_k"]
    lo, hi = paired_bootstrap([acc_a[q] for q in common], [acc_b[q] for q in common])
    solved_a = {q for q in common if acc_a[q] > 0}
    solved_b = {q for q in common if acc_b[q] > 0}
    k = sums[1]["k"]
    pts = f"{100 * diff:+.1f} points of Avg@{k} (95% CI {100 * lo:+.1f} to {100 * hi:+.1f}, {len(common)} questions)"
    if lo > 0:
        verdict = f"{names[1]} is better than {names[0]}: {pts}."
    elif hi < 0:
        verdict = f"{names[1]} is worse than {names[0]}: {pts}."
    else:
        verdict = (
            f"No difference in accuracy is shown between {names[0]} and {names[1]}: {pts}; the interval includes 0."
        )
    fa, fb = sums[0].get("format_validity"), sums[1].get("format_validity")
    if fa is not None and fb is not None and abs(fb - fa) >= 0.005:
        verdict += (
            f" Format validity: {100 * fa:.1f}% of the turns of {names[0]}, {100 * fb:.1f}% of those of {names[1]}."
        )
    return Comparison(
        names=names,
        summaries=sums,  # type: ignore[arg-type]
        avg_diff=round(diff, 4),
        avg_diff_ci95=(round(lo, 4), round(hi, 4)),
        only_a=sorted(solved_a - solved_b),
        only_b=sorted(solved_b - solved_a),
        both=sorted(solved_a & solved_b),
        neither=sorted(set(common) - solved_a - solved_b),
        verdict=verdict,
        graded=(len(acc_a), len(acc_b)),
    )


def check_same_questions(a: Path, b: Path) -> None:
    """Refuse two evaluation directories whose trajectories give one id two question texts
    (evaluations of two question sets). Directories without ``trajectories.jsonl`` (``score --out``) are not
    checked; a warning says so.

    Raises:
        InvalidArgumentError: an id with another question in each run (the first in sorted order is named).
    """
    from websailor.eval.scoring import read_trajectories

    paths = [unpacked(Path(p) / "trajectories.jsonl") for p in (a, b)]  # a published run's may be packed
    if not all(p.is_file() for p in paths):
        logger.warning(
            "%s: no trajectories.jsonl beside the scores, so the question texts behind the ids are not checked; "
            "make sure both runs evaluated the same benchmark",
            " and ".join(str(p.parent) for p in paths if not p.is_file()),
        )
        return
    texts = [{str(r["id"]): r["question"] for r in read_trajectories([p])} for p in paths]
    # the first such id in sorted order: a file's order is the order rollouts finished in
    odd = next((q for q in sorted(texts[0]) if q in texts[1] and texts[0][q] != texts[1][q]), None)
    if odd is not None:
        raise InvalidArgumentError(
            f"{a} and {b} are evaluations of different questions: id {odd!r} is {texts[0][odd][:80]!r} in one and "
            f"{texts[1][odd][:80]!r} in the other; compare two runs of the same benchmark"
        )


def to_markdown(c: Comparison) -> str:
    """The comparison as a Markdown table (rates in %), the verdict and the flipped questions."""
    sa, sb = c.summaries
    k = sa["k"]

    def row(label: str, fa: str, fb: str) -> str:
        return f"| {label} | {fa} | {fb} |"

    def avg(s: dict) -> str:
        lo, hi = s["avg_at_k_ci95"]
        return f"{_pct(s['avg_at_k'])} ({_pct(lo)}-{_pct(hi)})"

    def terms(s: dict) -> str:
        return ", ".join(f"{t} {n}" for t, n in s["terminations"].items())

    lines = [
        f"| | {c.names[0]} | {c.names[1]} |",
        "|---|---|---|",
        row("model", ", ".join(sa["model"]), ", ".join(sb["model"])),
        row("questions x rollouts", f"{sa['questions']} x {sa['k']}", f"{sb['questions']} x {sb['k']}"),
        row("format validity (% of turns)", _pct(sa.get("format_validity")), _pct(sb.get("format_validity"))),
        row(f"Avg@{k} (95% CI)", avg(sa), avg(sb)),
        row(f"Pass@{k}", _pct(sa["pass_at_k"]), _pct(sb["pass_at_k"])),
        row("mean tool calls", str(sa["mean_tool_calls"]), str(sb["mean_tool_calls"])),
        row("terminations", terms(sa), terms(sb)),
        row("ungraded", str(sa["ungraded"]), str(sb["ungraded"])),
        "",
        c.verdict,
        *(
            [
                f"Compared on the {len(c.both) + len(c.only_a) + len(c.only_b) + len(c.neither)} questions both graded "
                f"({c.names[0]} graded {c.graded[0]}, {c.names[1]} {c.graded[1]})."
            ]
            if c.graded[0] != c.graded[1] or len(c.both) + len(c.only_a) + len(c.only_b) + len(c.neither) != c.graded[0]
            else []
        ),
        f"Solved at least once: by both {len(c.both)}, only by {c.names[0]} {len(c.only_a)}, "
        f"only by {c.names[1]} {len(c.only_b)}, by neither {len(c.neither)}.",
    ]
    for name, ids in ((c.names[0], c.only_a), (c.names[1], c.only_b)):
        if ids:
            lines.append(f"Only {name}: {', '.join(ids[:20])}" + (" ..." if len(ids) > 20 else ""))
    return "\n".join(lines) + "\n"


def to_dict(c: Comparison) -> dict:
    """The comparison as a JSON-able dict."""
    return {
        "names": list(c.names),
        "summaries": list(c.summaries),
        "avg_diff": c.avg_diff,
        "avg_diff_ci95": list(c.avg_diff_ci95),
        "only_a": c.only_a,
        "only_b": c.only_b,
        "both": c.both,
        "neither": c.neither,
        "verdict": c.verdict,
        "graded": list(c.graded),
    }
