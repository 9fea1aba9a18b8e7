"""The evaluation report: figures (``summary.json``, rates as fractions 0..1), a Markdown
table (``report.md``, rates in %) and plots (``*.png``): accuracy against the number of tool
calls, termination reasons, and Pass@j for j = 1..k."""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter, defaultdict
from pathlib import Path

from websailor.eval.grounding import describe_figures, grounding_figures
from websailor.eval.metrics import avg_at_k, best_pass_at_1, bootstrap_ci, pass_at_k, per_run_accuracy
from websailor.eval.scoring import Score, score_table

#: tool-call buckets of the accuracy plot
BUCKETS = [(0, 0), (1, 2), (3, 5), (6, 10), (11, 20), (21, 50), (51, 10**9)]


def _bucket(n: int) -> str:
    for lo, hi in BUCKETS:
        if lo <= n <= hi:
            return str(lo) if lo == hi else (f"{lo}-{hi}" if hi < 10**9 else f"{lo}+")
    return "?"


def _r(x: float) -> float | None:
    return None if math.isnan(x) else round(x, 4)


def _ci95(ids: list[str], table: list[list[bool | None]], n_resamples: int) -> tuple[float, float]:
    """The bootstrap interval of Avg@k over the questions in id order: the same grades give the
    same interval whatever order their rollouts finished in (a resumed run writes another order)."""
    return bootstrap_ci([row for _, row in sorted(zip(ids, table), key=lambda x: x[0])], n_resamples=n_resamples)


def level_figures(scores: list[Score], n_resamples: int = 1000) -> dict:
    """The headline figures of one group of questions (a level): questions, trajectories,
    ungraded, Avg@k with its 95% bootstrap interval, Pass@k, format validity (of how many
    assistant turns), mean tool calls and terminations, with the same keys as the whole
    summary's."""
    ids, table = score_table(scores)
    ci = _ci95(ids, table, n_resamples)
    turns = sum(s.assistant_turns for s in scores)
    return {
        "questions": len(ids),
        "trajectories": len(scores),
        "ungraded": sum(s.correct is None for s in scores),
        "avg_at_k": _r(avg_at_k(table)),
        "avg_at_k_ci95": [_r(ci[0]), _r(ci[1])],
        "pass_at_k": _r(pass_at_k(table)),
        "format_validity": _r(sum(s.valid_turns for s in scores) / turns) if turns else None,
        "assistant_turns": turns,
        "mean_tool_calls": round(statistics.mean(s.num_tool_calls for s in scores), 2),
        "terminations": dict(Counter(s.termination for s in scores).most_common()),
    }


def by_level(scores: list[Score], n_resamples: int = 1000) -> dict[str, dict]:
    """:func:`level_figures` for each level of the questions, by level (``"1"``, ``"2"``, ...;
    ``"none"`` for questions without one among questions with one); empty when no question
    has a level."""
    levels = {s.level for s in scores}
    if levels == {None}:
        return {}
    order = sorted(levels, key=lambda v: (v is None, v or 0))
    return {
        "none" if v is None else str(v): level_figures([s for s in scores if s.level == v], n_resamples) for v in order
    }


def environment_figures(scores: list[Score]) -> dict:
    """What the environment's failures did to a run: ``rollouts`` in which the environment
    degraded a tool call, how many of them are ``ungraded`` for it (left out of every figure),
    the degraded ``calls`` by tool and the failed operations by ``kinds``; ``{}`` when the
    environment held throughout."""
    hit = [s for s in scores if s.env_failures]
    if not hit:
        return {}
    tools: Counter = Counter()
    kinds: Counter = Counter()
    for s in hit:
        tools.update(s.env_failures.get("tools") or {})
        kinds.update(s.env_failures.get("kinds") or {})
    return {
        "rollouts": len(hit),
        "ungraded": sum(s.ungraded_for == "environment" for s in scores),
        "calls": sum(int(s.env_failures.get("calls") or 0) for s in hit),
        "tools": dict(tools.most_common()),
        "kinds": dict(kinds.most_common()),
    }


def summarize(
    scores: list[Score], bench: str = "", n_resamples: int = 1000, max_env_failures: int | None = None
) -> dict:
    """Every figure of the report, as a JSON-able dict; ``ungraded_for`` (the ungraded rollouts
    by reason: ``model_error``, ``environment``, ``judge``) when any is ungraded,
    ``env_failures`` (:func:`environment_figures`, with the allowance ``max_env_failures`` when
    given) when the environment failed any tool call, ``by_level`` (:func:`by_level`) when the
    questions have levels, ``env_settings`` (the distinct observation settings that were not
    the paper's) when there are any, ``sampling`` (the distinct sampling settings and budgets
    the rollouts recorded, each with its count of rollouts, most common first) when they
    recorded any, ``summarized_rollouts`` (rollouts that summarized their
    context, and the summaries written) when any did.

    Raises:
        ValueError: no scores, or questions with different numbers of rollouts.
    """
    if not scores:
        raise ValueError("no scores to summarize")
    ids, table = score_table(scores)
    k = len(table[0])
    graded = [s for s in scores if s.correct is not None]
    ci = _ci95(ids, table, n_resamples)
    by_calls: dict[str, list[bool]] = defaultdict(list)
    for s in graded:
        by_calls[_bucket(s.num_tool_calls)].append(bool(s.correct))
    order = [_bucket(lo) for lo, _ in BUCKETS]

    r = _r
    out = {
        "bench": bench,
        "judge": scores[0].judge,
        "model": sorted({s.model for s in scores}),
        "env": sorted({s.env for s in scores}),
        "questions": len(ids),
        "k": k,
        "trajectories": len(scores),
        "ungraded": len(scores) - len(graded),
        "avg_at_k": r(avg_at_k(table)),
        "avg_at_k_ci95": [r(ci[0]), r(ci[1])],
        "pass_at_k": r(pass_at_k(table)),
        "best_pass_at_1": r(best_pass_at_1(table)),
        "per_run_accuracy": [r(a) for a in per_run_accuracy(table)],
        "pass_at_j": {j: r(pass_at_k(table, j)) for j in range(1, k + 1)},
        "mean_tool_calls": round(statistics.mean(s.num_tool_calls for s in scores), 2),
        "mean_model_calls": round(statistics.mean(s.num_model_calls for s in scores), 2),
        "terminations": dict(Counter(s.termination for s in scores).most_common()),
        "assistant_turns": sum(s.assistant_turns for s in scores),
        "format_validity": r(sum(s.valid_turns for s in scores) / turns)
        if (turns := sum(s.assistant_turns for s in scores))
        else None,
        "mean_prompt_tokens": round(statistics.mean(s.prompt_tokens for s in scores), 1),
        "mean_completion_tokens": round(statistics.mean(s.completion_tokens for s in scores), 1),
        "mean_wall_s": round(statistics.mean(s.wall_s for s in scores), 2),
        "total_wall_s": round(sum(s.wall_s for s in scores), 1),
        "accuracy_by_tool_calls": {
            b: {"n": len(by_calls[b]), "accuracy": round(sum(by_calls[b]) / len(by_calls[b]), 4)}
            for b in order
            if by_calls.get(b)
        },
    }
    if out["ungraded"]:
        out["ungraded_for"] = dict(
            Counter(s.ungraded_for or "judge" for s in scores if s.correct is None).most_common()
        )
    env = environment_figures(scores)
    if env:
        out["env_failures"] = {
            **env,
            **({"max_env_failures": max_env_failures} if max_env_failures is not None else {}),
        }
    levels = by_level(scores, n_resamples)
    if levels:
        out["by_level"] = levels
    settings = [dict(t) for t in sorted({tuple(sorted(s.env_settings.items())) for s in scores if s.env_settings})]
    if settings:
        out["env_settings"] = settings
    sampled = Counter(tuple(s.sampling.items()) for s in scores if s.sampling)
    if sampled:
        out["sampling"] = [{**dict(t), "rollouts": n} for t, n in sampled.most_common()]
    grounding = grounding_figures([s.grounding for s in scores])
    if grounding:
        out["grounding"] = grounding
    summarized = [s for s in scores if s.summaries]
    if summarized:
        out["summarized_rollouts"] = {"rollouts": len(summarized), "summaries": sum(s.summaries for s in summarized)}
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def to_markdown(s: dict) -> str:
    """The report as Markdown: the setting, the main table, then the details."""
    lo, hi = s["avg_at_k_ci95"]
    lines = [
        f"# Evaluation: {s['bench'] or 'trajectories'}",
        "",
        f"- model: {', '.join(s['model']) or '?'}; environment: {', '.join(s['env']) or '?'}; judge: {s['judge']}",
        f"- {s['questions']} questions x k = {s['k']} rollouts = {s['trajectories']} trajectories; "
        f"ungraded: {_ungraded_text(s)}",
        "",
        f"| Avg@{s['k']} (95% CI) | Pass@{s['k']} | Best Pass@1 | per-run accuracy | mean tool calls | mean model calls |",
        "|---|---|---|---|---|---|",
        f"| {_pct(s['avg_at_k'])} ({_pct(lo)}-{_pct(hi)}) | {_pct(s['pass_at_k'])} | {_pct(s['best_pass_at_1'])} | "
        f"{' / '.join(_pct(a) for a in s['per_run_accuracy'])} | {s['mean_tool_calls']} | {s['mean_model_calls']} |",
        "",
        "Accuracies in %. Terminations: " + ", ".join(f"{k} {v}" for k, v in s["terminations"].items()) + ".",
        f"Format validity: {_pct(s.get('format_validity'))}% of {s.get('assistant_turns', 0)} assistant turns parse into a "
        "tool call or a final answer.",
        f"Tokens per trajectory: {s['mean_prompt_tokens']} prompt, {s['mean_completion_tokens']} completion; "
        f"wall time {s['mean_wall_s']} s per trajectory, model queueing included ({s['total_wall_s']} s summed over "
        "trajectories, which run concurrently).",
        "",
        "| tool calls | trajectories | accuracy |",
        "|---|---|---|",
    ]
    if s.get("by_level"):  # after the main table and its blank line
        lines[9:9] = ["Figures by level of the questions:", "", *_level_table(s["by_level"], s["k"])]
    if s.get("env_failures"):
        lines.insert(3, _env_failures_line(s["env_failures"]))
    if s.get("sampling"):
        lines.insert(3, _sampling_line(s["sampling"]))
    if s.get("env_settings"):
        from websailor.tools.environment import OPTIONS

        shown = "; ".join(", ".join(f"{OPTIONS[f]} {v}" for f, v in e.items()) for e in s["env_settings"])
        lines.insert(3, f"- observation settings: {shown} (the rest the paper's)")
    if s.get("summarized_rollouts"):
        sr = s["summarized_rollouts"]
        lines.insert(
            3,
            f"- context summaries: {sr['rollouts']} of {s['trajectories']} rollouts summarized ({sr['summaries']} summaries)",
        )
    if s.get("grounding"):
        at = lines.index("| tool calls | trajectories | accuracy |")
        lines[at:at] = [describe_figures(s["grounding"]), ""]
    lines += [f"| {b} | {v['n']} | {_pct(v['accuracy'])} |" for b, v in s["accuracy_by_tool_calls"].items()]
    lines += ["", "| j | Pass@j |", "|---|---|"] + [f"| {j} | {_pct(v)} |" for j, v in s["pass_at_j"].items()]
    return "\n".join(lines) + "\n"


def _ungraded_text(s: dict) -> str:
    """``3 (model error 1, environment 2; left out of every figure)``, or ``0``."""
    if not s["ungraded"]:
        return "0"
    why = ", ".join(f"{reason.replace('_', ' ')} {n}" for reason, n in (s.get("ungraded_for") or {}).items())
    return f"{s['ungraded']} ({why + '; ' if why else ''}left out of every figure)"


def _n(count: int, noun: str) -> str:
    """``1 rollout``, ``2 rollouts``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _sampling_line(sampling: list[dict]) -> str:
    """The report's line on how the rollouts sampled: each distinct setting (``summary["sampling"]``)
    as temperature, top-p, presence penalty and budgets, with its share when there are several."""
    total = sum(e["rollouts"] for e in sampling)

    def shown(e: dict) -> str:
        text = (
            f"temperature {e.get('temperature')}, top-p {e.get('top_p')}, presence penalty "
            f"{e.get('presence_penalty')}, at most {e.get('max_calls')} calls of {e.get('max_tokens_per_turn')} "
            f"tokens in {e.get('max_context_tokens')} tokens of context"
        )
        return text if len(sampling) == 1 else f"{text} ({e['rollouts']} of {total} rollouts)"

    mixed = "" if len(sampling) == 1 else " (MIXED: the rollouts were sampled with different settings)"
    return f"- sampling{mixed}: " + "; ".join(shown(e) for e in sampling)


def _env_failures_line(env: dict) -> str:
    """The report's line on environment failures."""
    tools = ", ".join(f"{t} {n}" for t, n in env["tools"].items())
    kinds = ", ".join(f"{k} {n}" for k, n in env["kinds"].items())
    allowed = env.get("max_env_failures")
    rule = f" (more than {_n(allowed, 'degraded call')})" if allowed else ""
    return (
        f"- environment failures: in {_n(env['rollouts'], 'rollout')} the environment degraded "
        f"{_n(env['calls'], 'tool call')} ({tools}; failed operations: {kinds}); {env['ungraded']} of them "
        f"ungraded{rule}, which the same eval or run command runs again"
    )


def _level_table(levels: dict[str, dict], k: int) -> list[str]:
    """The by-level rows of the report (inserted after the main table)."""
    lines = [
        f"| level | questions | trajectories | Avg@{k} (95% CI) | Pass@{k} | format validity | mean tool calls "
        "| terminations |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for level, v in levels.items():
        lo, hi = v["avg_at_k_ci95"]
        terms = ", ".join(f"{t} {n}" for t, n in v["terminations"].items())
        lines.append(
            f"| {level} | {v['questions']} | {v['trajectories']} | {_pct(v['avg_at_k'])} ({_pct(lo)}-{_pct(hi)}) | "
            f"{_pct(v['pass_at_k'])} | {_pct(v['format_validity'])} | {v['mean_tool_calls']} | {terms} |"
        )
    return [*lines, ""]


def write_plots(s: dict, out_dir: Path) -> list[Path]:
    """``accuracy_by_tool_calls.png``, ``terminations.png``, ``pass_at_j.png`` (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    acc = s["accuracy_by_tool_calls"]
    figures = [
        (
            "accuracy_by_tool_calls.png",
            "accuracy by tool calls",
            "tool calls (trajectories)",
            "accuracy (%)",
            [f"{b}\n(n={v['n']})" for b, v in acc.items()],
            [100 * v["accuracy"] for v in acc.values()],
            True,
        ),
        (
            "terminations.png",
            "termination reasons",
            "termination",
            "trajectories",
            list(s["terminations"]),
            list(s["terminations"].values()),
            False,
        ),
        (
            "pass_at_j.png",
            "Pass@j",
            "j (rollouts)",
            "Pass@j (%)",
            [str(j) for j in s["pass_at_j"]],
            [100 * (v or 0) for v in s["pass_at_j"].values()],
            True,
        ),
    ]
    for name, title, xlabel, ylabel, xs, ys, percent in figures:
        fig, ax = plt.subplots(figsize=(5.5, 3.4))
        bars = ax.bar(xs, ys, color="#3b6ea5")
        ax.bar_label(bars, labels=[f"{y:.1f}" if percent else f"{y:g}" for y in ys], fontsize=8)
        if percent:
            ax.set_ylim(0, 105)  # a 0% bar still shows as a labelled 0 on a full scale
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        fig.tight_layout()
        path = out_dir / name
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths


def write_report(scores: list[Score], out_dir: Path, bench: str = "", max_env_failures: int | None = None) -> dict:
    """Write ``summary.json``, ``report.md`` and the plots into ``out_dir``; return the summary."""
    out_dir.mkdir(parents=True, exist_ok=True)
    s = summarize(scores, bench, max_env_failures=max_env_failures)
    (out_dir / "summary.json").write_text(json.dumps(s, indent=1) + "\n", encoding="utf-8")
    (out_dir / "report.md").write_text(to_markdown(s), encoding="utf-8")
    write_plots(s, out_dir)
    return s
