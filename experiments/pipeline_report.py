"""The ladder experiment's report (``mini_pipeline.py``): every stage's figures gathered into
``OUT/results.json`` and ``OUT/results.md`` (the test tables overall and by level, what the wrong
answers are, the transfer questions beside the search baseline, the RL reward gains, the
``websailor compare`` tables, each stage's wall time and memory), and the run published."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from pipeline_common import ROOT, WS, figures, publish, read_pages

sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import write_results  # noqa: E402

from websailor.train.rl_log import item_reward_gain, reward_gain, tool_use_shift  # noqa: E402

#: the models of the ladder, in the order the tables list them
MODELS = ("base", "sft", "rl", "dupo")


def wrong_answers(qa: Path, eval_dir: Path, examples: int = 3) -> dict:
    """What the wrong answers of an evaluation are: the share of graded, answered, wrong rollouts
    whose answer is a hop's entity (the page a ``linked`` constraint names, e.g. "Maratha Empire"
    for "which place is associated with Maratha Empire, initials I."), the share that is the title
    of a page the rollout read (``visit``), the share whose rollout read the target's page and
    still answered otherwise, and a few examples of the first. Returns ``{"answered_wrong",
    "hop_entity", "hop_entity_share", "read_page", "read_page_share", "target_read",
    "target_read_share", "examples": [...]}``."""
    from websailor.eval.compare import load_scores
    from websailor.eval.scoring import read_trajectories
    from websailor.judge.em import normalize_answer
    from websailor.synth.dataset import read_items

    items = read_items(qa)
    hops = {
        str(it["id"]): {
            normalize_answer(o)
            for c in it.get("constraints") or []
            if c["kind"] == "linked"
            for o in c["params"].get("others") or [c["params"]["other"]]
        }
        for it in items
    }
    questions = {str(it["id"]): it for it in items}
    rollouts = {(str(r["id"]), r["rollout"]): r for r in read_trajectories([eval_dir / "trajectories.jsonl"])}
    read = {key: read_pages(r) for key, r in rollouts.items()}
    wrong = [
        (s.id, s.rollout, (rollouts.get((s.id, s.rollout)) or {}).get("prediction"))
        for s in load_scores(eval_dir)
        if s.correct is False
    ]
    wrong = [(i, n, p) for i, n, p in wrong if p]
    hop = [(i, p) for i, _, p in wrong if normalize_answer(p) in hops.get(i, set())]
    read_page = sum(normalize_answer(p) in {normalize_answer(t) for t in read[(i, n)].values()} for i, n, p in wrong)
    target_read = sum(questions[i].get("target_url") in read[(i, n)] for i, n, _ in wrong)
    shown = [
        {"id": i, "question": questions[i]["question"], "answer": questions[i]["answer"], "said": p}
        for i, p in hop[:examples]
    ]
    return {
        "answered_wrong": len(wrong),
        "hop_entity": len(hop),
        "hop_entity_share": round(len(hop) / len(wrong), 3) if wrong else None,
        "read_page": read_page,
        "read_page_share": round(read_page / len(wrong), 3) if wrong else None,
        "target_read": target_read,
        "target_read_share": round(target_read / len(wrong), 3) if wrong else None,
        "examples": shown,
    }


def _row(name: str, f: dict, k: int | None = None) -> str:
    lo, hi = f["avg_at_k_ci95"] or (None, None)
    k = f.get("k", k)
    pct = lambda x: "n/a" if x is None else f"{100 * x:.1f}"  # noqa: E731
    return (
        f"| {name} | {f['questions']} x {k} | {pct(f['format_validity'])}% | {pct(f['avg_at_k'])} "
        f"({pct(lo)}-{pct(hi)}) | {pct(f['pass_at_k'])} | {f['mean_tool_calls']} | "
        + ", ".join(f"{t} {c}" for t, c in (f["terminations"] or {}).items())
        + " |"
    )


def grounding_text(model: str, g: dict) -> str:
    """``model``'s grounded-answer share (of its answered rollouts), the share of rollouts whose
    search listed the answer's page, and of those the share that picked it, in words."""
    pct = lambda x: "n/a" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    return (
        f"{model} {pct(g.get('grounded'))} of {g.get('answered')} answers (answer's page listed in "
        f"{pct(g.get('listed'))} of rollouts, picked in {pct(g.get('picked'))} of those)"
    )


def tool_use_text(name: str, shift: dict) -> str:
    """An RL run's :func:`~websailor.train.rl_log.tool_use_shift`, in words."""

    def window(w: dict) -> str:
        reward = lambda x: "n/a" if x is None else f"{x:.3f}"  # noqa: E731
        return (
            f"{w['tool_calls']:.2f} tool calls a rollout ({w['repeated_calls']:.2f} repeating an earlier one), "
            f"{100 * w['max_calls_share']:.1f}% ended at the call limit, reward {reward(w['reward_with_repeats'])} "
            f"with a repeated call and {reward(w['reward_without_repeats'])} without"
        )

    n = shift["window"]
    return f"{name}, tool use: first {n} steps {window(shift['first'])}; last {n} steps {window(shift['last'])}"


#: the pairs of models the compare tables set side by side
PAIRS = (("base", "sft"), ("sft", "rl"), ("sft", "dupo"), ("rl", "dupo"))


def tables(results: dict) -> str:
    """The test tables, overall and by level, as Markdown."""
    head = "| model | questions x k | format validity | Avg@k (95% CI) | Pass@k | mean tool calls | terminations |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    models = [m for m in ("base", "sft", "rl", "dupo") if m in results.get("eval", {})]
    lines += [_row(m, results["eval"][m]) for m in models]
    levels = sorted({lv for m in models for lv in results["eval"][m]["by_level"]})
    for lv in levels:
        lines += ["", f"Level {lv}:", "", head, "|---|---|---|---|---|---|---|"]
        lines += [
            _row(m, results["eval"][m]["by_level"][lv], results["eval"][m]["k"])
            for m in models
            if lv in results["eval"][m]["by_level"]
        ]
    for m in models:
        w = results["eval"][m].get("wrong_answers")
        if w and w["answered_wrong"]:
            lines += [
                "",
                f"{m}: of {w['answered_wrong']} wrong answers, {w['hop_entity']} name a hop's entity, not the target"
                + f"; {w['read_page']} are the title of a page the rollout read; in {w['target_read']} the"
                " rollout had read the target's page"
                + "".join(f'; "{e["question"]}" -> {e["said"]} (gold {e["answer"]})' for e in w["examples"][:2]),
            ]
    transfer = results.get("transfer") or {}
    if transfer:
        lines += ["", "Transfer: the hand-written questions of benchmarks/data/vital_questions.jsonl:", "", head]
        lines += ["|---|---|---|---|---|---|---|"] + [_row(m, f) for m, f in transfer.items()]
        base = results.get("transfer_baseline")
        if base:
            lines += [
                f"| search the question, answer the top title | {base['questions']} x 1 | - | "
                f"{100 * base['accuracy']:.1f} | - | 1 | - |"
            ]
        grounded = [grounding_text(m, f.get("grounding")) for m, f in transfer.items() if f.get("grounding")]
        if grounded:
            lines += ["", "Grounded answers on the hand-written questions: " + "; ".join(grounded)]
    for name, gain in (results.get("reward_gain") or {}).items():
        if gain:
            lo, hi = gain["diff_ci95"]
            lines += [
                "",
                f"{name}: training reward {gain['first']:.3f} over the first {gain['window']} steps, "
                f"{gain['last']:.3f} over the last {gain['window']} (difference {gain['diff']:+.3f}, "
                f"95% CI {lo:+.3f} to {hi:+.3f}; {gain['steps']} steps)",
            ]
        paired = (results.get("item_reward_gain") or {}).get(name)
        if paired:
            lo, hi = paired["diff_ci95"]
            lines += [
                f"{name}, item by item: {paired['distinct_items']} distinct items visited, "
                f"{paired['items_per_step']} a step; the {paired['items']} items visited twice or more, "
                f"{paired['first']:.3f} at their first visit, {paired['last']:.3f} at their last "
                f"(difference {paired['diff']:+.3f}, 95% CI {lo:+.3f} to {hi:+.3f}; "
                f"{paired['up']} up, {paired['down']} down, {paired['same']} unchanged)",
            ]
    for name, shift in (results.get("tool_use") or {}).items():
        if shift:
            lines += ["", tool_use_text(name, shift)]
    for name, text in (results.get("compare") or {}).items():
        lines += ["", f"### {name}", "", text]
    stages = results.get("stages") or {}
    if stages:
        lines += ["", "| stage | wall time (s) | peak RSS (MB) |", "|---|---|---|"]
        lines += [f"| {s} | {v['wall_s']} | {v['peak_rss_mb']} |" for s, v in stages.items()]
    return "\n".join(lines) + "\n"


def compare_tables(out: Path, results: dict) -> dict[str, str]:
    """``websailor compare`` of each pair of :data:`PAIRS` that both ran, on the test split
    (``eval_*``, written to ``compare_A_B.md``) and on the hand-written questions
    (``transfer_*``, to ``compare_transfer_A_B.md``): ``{"A -> B" or "A -> B, hand-written": the
    table}``."""
    compare = {}
    for prefix, label in (("eval", ""), ("transfer", ", hand-written")):
        for a_name, b_name in PAIRS:
            if a_name in results.get(prefix, {}) and b_name in results.get(prefix, {}):
                md = out / f"compare_{'' if prefix == 'eval' else prefix + '_'}{a_name}_{b_name}.md"
                subprocess.run(
                    [WS, "compare", str(out / f"{prefix}_{a_name}"), str(out / f"{prefix}_{b_name}")]
                    + ["--name", a_name, "--name", b_name, "--out", str(md)],
                    check=True,
                    stdout=subprocess.DEVNULL,
                )
                compare[f"{a_name} -> {b_name}{label}"] = md.read_text()
    return compare


def report(out: Path, a: argparse.Namespace, results: dict, results_path: Path, sanity: Path, rl_runs: dict) -> None:
    """Gather every stage's figures into OUT/results.json and OUT/results.md (and publish)."""
    results["eval"] = {m: figures(out / f"eval_{m}") for m in MODELS if (out / f"eval_{m}" / "summary.json").exists()}
    for m, f in results["eval"].items():
        f["wrong_answers"] = wrong_answers(out / "qa.jsonl", out / f"eval_{m}")
    results["transfer"] = {
        m: figures(out / f"transfer_{m}") for m in MODELS if (out / f"transfer_{m}" / "summary.json").exists()
    }
    if (out / "transfer_baseline.json").exists():
        base = json.loads((out / "transfer_baseline.json").read_text())
        results["transfer_baseline"] = {key: base[key] for key in ("questions", "correct", "accuracy")}
    stream = out / "dupo_throughput.json"
    if "throughput" in results.get("stages", {}) and stream.exists():
        results["dupo_throughput"] = json.loads(stream.read_text())["figures"]
    runs = (("sanity", sanity), *((m, d) for m, (_, d) in rl_runs.items()))
    results["reward_gain"] = {label: reward_gain(path / "rollouts.jsonl") for label, path in runs if path.exists()}
    results["item_reward_gain"] = {
        label: item_reward_gain(path / "rollouts.jsonl") for label, path in runs if path.exists()
    }
    results["tool_use"] = {label: tool_use_shift(path / "rollouts.jsonl") for label, path in runs if path.exists()}
    results["compare"] = compare_tables(out, results)
    for path in (sanity, *(d for _, d in rl_runs.values())):
        if (path / "rl_log.jsonl").exists():
            subprocess.run([WS, "train", "plot", str(path)], check=True, stdout=subprocess.DEVNULL)
    results_path.write_text(json.dumps(results, indent=2))
    table = tables(results)
    (out / "results.md").write_text(table)
    print(table)
    write_results("mini_pipeline", results, a, results_dir=out)  # the figures with the machine and the commit
    if a.publish:
        size = publish(out, a.publish)
        print(f"published {size / 1e6:.1f} MB of {out} to {a.publish}")
