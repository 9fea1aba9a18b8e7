"""The grounded cold start, from nothing, on questions we did not write (issue 38): one command
synthesizes level-1 and 2 items, builds grounded constructive trajectories (a candidate picked
for what the search showed, checked condition by condition, wrong candidates rejected), fine-tunes
the embedded SmolLM2-135M on them for one epoch, and evaluates it on any question file
(``--questions``, default the 20 hand-written ones of ``benchmarks/data/vital_questions.jsonl``)
beside a baseline that searches the question's text and answers with the top result's title; with
``--test``, also on a synthesized test split (default the committed ladder's, whose SFT model
scored Avg@4 9.6).

The training items are a pool of ``--pool`` items (``websailor synth``, compact observations;
items whose answer is an answer of the test split are left out), each replayed as a constructive
trajectory; ``--items`` of them are kept, ``--lookup-share`` of those lookups (the search of the
question's own text lists the answer's page: the short path) and the rest items that must follow
a clue (:mod:`websailor.train.traj_stats`). ``before`` in the results is the warm start issue 38
began from (``experiments/results/transfer_opening/eval_question``), measured by the same figures.

    python experiments/grounded.py --out ~/runs/grounded
    python experiments/grounded.py --out ~/runs/grounded --questions my_questions.jsonl --no-test
    python experiments/grounded.py --out ~/runs/grounded --publish experiments/results/grounded
    python experiments/grounded.py --out ~/runs/grounded --no-test --self-rollouts 50   # then its own rollouts

With ``--self-rollouts N``, the fine-tuned model then answers N pool items it was not trained on
``--self-k`` times; its correct rollouts whose every visit and answer is grounded fine-tune it for
one more epoch (rejection sampling with the policy as its own expert), and that model is
evaluated on the question file too (``after_self``).

Every stage resumes from ``--out`` (a finished one is skipped; SFT continues from its last
checkpoint). Writes OUT/grounded.json and OUT/results.md, and with ``--publish`` copies them, the
trajectory figures, the SFT step log and each evaluation's summary, scores and rollouts (no model).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "experiments"))

from _common import claim_for_model, too_small, write_results  # noqa: E402
from pipeline_common import VITAL_QUESTIONS, WS, figures, note_checkout, publish, search_baseline, served  # noqa: E402

LADDER = ROOT / "experiments" / "results" / "ladder"
BEFORE = ROOT / "experiments" / "results" / "transfer_opening" / "eval_question"
#: the small outputs --publish copies (globs under OUT)
PUBLISHED = (
    "grounded.json",
    "results.md",
    "traj_stats.json",
    "compare_test.md",
    "qa.jsonl",
    "sft_model/sft_log.jsonl",
    "sft_model/sft_summary.json",
    "eval_*/summary.json",
    "eval_*/scores.jsonl",
    "eval_*/report.md",
    "eval_*/trajectories.jsonl",
    "self_trajectories.counts.json",
    "self_model/sft_log.jsonl",
    "self_model/sft_summary.json",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--out", type=Path, default=Path("runs/grounded"))
    p.add_argument("--questions", type=Path, default=VITAL_QUESTIONS, help="the question file to evaluate on")
    p.add_argument(
        "--test", type=Path, default=LADDER / "qa.jsonl", help="synthesized items whose test split is evaluated"
    )
    p.add_argument("--no-test", dest="test", action="store_const", const=None, help="skip the synthesized test split")
    p.add_argument(
        "--test-limit",
        type=int,
        default=60,
        help="test items evaluated (the first ones, as eval --limit; the ladder's SFT model was rated on 60)",
    )
    p.add_argument("--pool", type=int, default=400, help="level-1 and 2 items synthesized")
    p.add_argument("--items", type=int, default=100, help="trajectories trained on")
    p.add_argument(
        "--lookup-share", type=float, default=0.5, help="share of them whose question search lists the answer"
    )
    p.add_argument(
        "--described-share",
        type=float,
        default=0.5,
        help="share of the pool whose question also states the answer's own description (synth --described-share)",
    )
    p.add_argument("--distractor-share", type=float, default=0.3)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--k", type=int, default=4, help="rollouts per question")
    p.add_argument("--max-calls", type=int, default=6)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument(
        "--self-rollouts",
        type=int,
        default=0,
        help="pool items the fine-tuned model answers --self-k times; its correct and grounded rollouts fine-tune it "
        "once more (rejection sampling with the policy as its own expert), evaluated as 'after_self' (0: off)",
    )
    p.add_argument("--self-k", type=int, default=4, help="rollouts per item of --self-rollouts")
    p.add_argument("--engine", choices=("auto", "vllm", "local"), default="auto")
    p.add_argument("--publish", type=Path, help="copy the figures and the evaluations' small files here")
    return p.parse_args(argv)


def check_args(a: argparse.Namespace) -> None:
    """Refuse, in one line and before any work, sizes out of range (``--items`` above ``--pool``
    too), a share outside [0, 1], missing question or test files, and an ``--out`` or ``--publish`` that is a file."""
    refusal = too_small(
        ("--pool", a.pool, 1), ("--items", a.items, 1), ("--k", a.k, 1), ("--max-calls", a.max_calls, 1)
    )
    refusal = refusal or too_small(
        ("--max-tokens", a.max_tokens, 16), ("--batch-size", a.batch_size, 1), ("--test-limit", a.test_limit, 1)
    )
    refusal = refusal or too_small(("--self-rollouts", a.self_rollouts, 0), ("--self-k", a.self_k, 1))
    if refusal:
        raise SystemExit(refusal)
    if a.items > a.pool:
        raise SystemExit(f"--items {a.items} is above --pool {a.pool}: the trajectories are drawn from the pool")
    if not 0 < a.lr < float("inf"):
        raise SystemExit(f"--lr {a.lr}: give a finite learning rate above 0")
    from websailor.errors import ConfigError
    from websailor.models.vllm_launch import env_vllm_args

    try:  # read now, not when the first server starts after fine-tuning
        env_vllm_args()
    except ConfigError as e:
        raise SystemExit(str(e)) from None
    for flag, share in (
        ("--lookup-share", a.lookup_share),
        ("--distractor-share", a.distractor_share),
        ("--described-share", a.described_share),
    ):
        if not 0.0 <= share <= 1.0:
            raise SystemExit(f"{flag} must be in [0, 1], got {share}")
    for flag, path in (("--questions", a.questions), ("--test", a.test)):
        if path is not None and not path.is_file():
            raise SystemExit(f"{flag} {path}: no such file")
    for flag, path in (("--out", a.out), ("--publish", a.publish)):
        if path is not None and path.exists() and not path.is_dir():
            raise SystemExit(f"{flag} {path} is a file; give a directory")
        file_above = next((up for up in (path.parents if path is not None else ()) if up.is_file()), None)
        if file_above is not None:
            raise SystemExit(f"{flag} {path}: {file_above} is a file, not a directory")


def test_answers(a: argparse.Namespace) -> set[str]:
    """The answers of the synthesized test split (kept out of training)."""
    if a.test is None:
        return set()
    items = [json.loads(line) for line in a.test.read_text().splitlines() if line.strip()]
    return {str(it.get("answer")).casefold() for it in items if it.get("split") == "test"}


def pool_items(a: argparse.Namespace) -> Path:
    """``--pool`` level-1 and 2 items (synthesized once, resumable), none answered by a test item;
    ``--described-share`` of them state the answer's own description."""
    from websailor.corpus import Corpus
    from websailor.synth import SynthConfig, load_or_build, read_items, synthesize
    from websailor.synth.levels import ItemConfig
    from websailor.tools.environment import COMPACT_OBSERVATIONS
    from websailor.tools.local import build_local_tools

    every, qa = a.out / "pool_qa.jsonl", a.out / "qa.jsonl"
    if not qa.exists():
        corpus = Corpus.open()
        item = ItemConfig(level=1, described_p=a.described_share)
        cfg = SynthConfig(n=a.pool, seed=a.seed, test_fraction=0.0, levels=(1, 2), item=item)
        synthesize(load_or_build(corpus), every, cfg, tools=build_local_tools(corpus, **COMPACT_OBSERVATIONS))
        held = test_answers(a)
        kept = [it for it in read_items(every) if str(it["answer"]).casefold() not in held]
        print(f"[items] {len(kept)} of {a.pool} items kept ({a.pool - len(kept)} answer a test item)", flush=True)
        qa.write_text("".join(json.dumps(it, ensure_ascii=False) + "\n" for it in kept))
    return qa


def trajectories(a: argparse.Namespace, qa: Path) -> Path:
    """The pool's constructive trajectories (compact observations), then ``--items`` of them
    with ``--lookup-share`` lookups (drawn with ``--seed``); their figures in traj_stats.json."""
    from websailor.corpus import Corpus
    from websailor.synth import load_or_build, read_items
    from websailor.tools.environment import COMPACT_OBSERVATIONS
    from websailor.tools.local import build_local_tools
    from websailor.train.constructive import build_constructive
    from websailor.train.traj_select import select_trajectories
    from websailor.train.traj_stats import format_stats, trajectory_stats

    pool, chosen = a.out / "traj_pool.jsonl", a.out / "trajectories.jsonl"
    if not chosen.exists():
        corpus = Corpus.open()
        tools = build_local_tools(corpus, **COMPACT_OBSERVATIONS)
        kg = load_or_build(corpus)
        build_constructive(read_items(qa), tools, pool, split="all", distractor_share=a.distractor_share, kg=kg)
        c = select_trajectories(pool, chosen, a.items, a.lookup_share, a.seed)
        print(
            f"[traj] {c['kept']} trajectories: {c['lookups']} lookups of {c['pool_lookups']}, {c['clue']} following a clue"
        )
    stats = trajectory_stats(chosen)
    (a.out / "traj_stats.json").write_text(json.dumps({"pool": trajectory_stats(pool), "trained": stats}, indent=2))
    print(format_stats(stats), flush=True)
    return chosen


def one_epoch(a: argparse.Namespace, data: Path, model: str, out: Path) -> str:
    """One epoch of SFT of ``model`` on ``data`` into ``out`` with the run's settings (resumes
    from its last checkpoint; skipped when finished); returns the new model's spec."""
    from websailor.train.sft import SFTSettings, train_sft

    if not (out / "sft_summary.json").exists():
        settings = SFTSettings(
            epochs=1,
            batch_size=a.batch_size,
            learning_rate=a.lr,
            warmup_ratio=0.1,
            max_length=4096,
            precision="auto",
            gradient_checkpointing=False,
            memory_limits=False,
            save_steps=10,
            seed=a.seed,
        )
        train_sft(data, model, out, settings)
    return f"hf:{out}"


def fine_tune(a: argparse.Namespace, data: Path) -> str:
    """One epoch of SFT of the embedded model on ``data``."""
    return one_epoch(a, data, "smollm2", a.out / "sft_model")


def self_rollouts(a: argparse.Namespace, qa: Path, data: Path, model: str, engine: str) -> Path:
    """Rejection sampling with the policy as its own expert (issue 38, 4; the paper's pipeline
    does it with a stronger model): ``--self-rollouts`` pool items that were not trained on
    (drawn with ``--seed``) are answered ``--self-k`` times by ``model`` with the evaluation's
    budgets (``websailor traj build --source expert``), and the correct rollouts whose every
    visit and answer is grounded are kept. Resumes (the build appends); returns the kept file."""
    items, out = a.out / "self_qa.jsonl", a.out / "self_trajectories.jsonl"
    done = a.out / "self_trajectories.counts.json"
    if not items.exists():
        trained = {json.loads(line)["id"] for line in data.read_text().splitlines() if line.strip()}
        rest = [json.loads(line) for line in qa.read_text().splitlines() if line.strip()]
        rest = [it for it in rest if it["id"] not in trained]
        random.Random(a.seed).shuffle(rest)
        items.write_text("".join(json.dumps(it, ensure_ascii=False) + "\n" for it in rest[: a.self_rollouts]))
    if not done.exists():
        with served(model, engine, a.out / "logs", "grounded_self", 8192) as spec:
            args = ["traj", "build", "--source", "expert", "--expert", spec, "--qa", str(items), "--split", "all"]
            args += ["--k", str(a.self_k), "--max-calls", str(a.max_calls), "--max-turn-tokens", str(a.max_tokens)]
            args += ["--observations", "compact", "--tokenizer", model, "--grounded", "--concurrency", "8"]
            args += ["--engine", "local"] if engine == "local" else []
            print(f"\n[self] $ websailor {' '.join(args)} --out {out}", flush=True)
            subprocess.run([WS, *args, "--out", str(out)], check=True, cwd=ROOT)
        kept = sum(1 for line in out.read_text().splitlines() if line.strip()) if out.exists() else 0
        asked = sum(1 for line in items.read_text().splitlines() if line.strip())  # the pool may hold fewer
        done.write_text(json.dumps({"items": asked, "k": a.self_k, "kept": kept}))
    return out


def self_fine_tune(a: argparse.Namespace, data: Path, model: str) -> str:
    """One more epoch, from ``model`` (the fine-tuned one), on its own kept rollouts ``data``."""
    if not data.exists() or not data.read_text().strip():
        raise SystemExit(f"[self] no rollout of {model} was correct and grounded ({data}): nothing to fine-tune on")
    return one_epoch(a, data, model, a.out / "self_model")


def evaluate(
    a: argparse.Namespace, model: str, name: str, bench: Path, split: str | None, engine: str, limit: int | None = None
) -> dict:
    """``websailor eval`` of ``model`` on ``bench`` (``k`` rollouts, the transfer budgets; the
    first ``limit`` items when given); its figures with the grounding ones."""
    eval_dir = a.out / f"eval_{name}"
    claim_for_model(eval_dir, model)
    done = json.loads((eval_dir / "summary.json").read_text()) if (eval_dir / "summary.json").exists() else {}
    if not (done.get("k") == a.k and done.get("trajectories") == a.k * done.get("questions", -1)):
        with served(model, engine, a.out / "logs", f"grounded_{name}", 8192) as spec:
            inside = bench.resolve().is_relative_to(ROOT)  # named relative to the checkout: no path of this machine
            shown = os.path.relpath(bench.resolve(), ROOT) if inside else str(bench.resolve())
            args = ["eval", "--bench", shown, "--rollouts", str(a.k)]
            args += ["--model", spec, "--max-calls", str(a.max_calls), "--max-tokens", str(a.max_tokens)]
            args += ["--observations", "compact", *(["--split", split] if split else [])]
            args += ["--limit", str(limit)] if limit else []
            args += ["--engine", "local"] if engine == "local" else []
            print(f"\n[eval_{name}] $ websailor {' '.join(args)} --out {eval_dir}", flush=True)
            subprocess.run([WS, *args, "--out", str(eval_dir)], check=True, cwd=ROOT)
    summary = json.loads((eval_dir / "summary.json").read_text())
    return {**figures(eval_dir), "grounding": summary.get("grounding") or {}}


def paired_with_ladder(eval_dir: Path) -> dict:
    """The test split's evaluation against the ladder's SFT model on the questions both rated:
    the paired difference in Avg@k (a fraction) with its bootstrap interval, and the verdict;
    the table goes to ``eval_dir/../compare_test.md``."""
    from websailor.eval.compare import compare_runs, load_scores, to_markdown

    c = compare_runs(load_scores(LADDER / "eval_sft"), load_scores(eval_dir), ("ladder SFT", "grounded"))
    (eval_dir.parent / "compare_test.md").write_text(to_markdown(c))
    return {"avg_diff": c.avg_diff, "avg_diff_ci95": list(c.avg_diff_ci95), "verdict": c.verdict}


def before_figures() -> dict:
    """The warm start issue 38 began from, on the hand-written questions: its committed summary
    and the grounding figures of its committed rollouts."""
    from websailor.eval.grounding import grounding_figures, record_grounding

    rollouts = [json.loads(line) for line in (BEFORE / "trajectories.jsonl").read_text().splitlines() if line]
    return {**figures(BEFORE), "grounding": grounding_figures([record_grounding(r) for r in rollouts])}


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def markdown(r: dict) -> str:
    """The results as tables: the question file before and after, and the test split."""
    rows = ["| model | Avg@k (95% CI) | Pass@k | grounded answers | listed | visited | picked | checks (rejecting) |"]
    rows.append("|---|---|---|---|---|---|---|---|")
    for name in ("before", "after", "after_self"):
        f = r.get(name)
        if not f:
            continue
        g, ci = f.get("grounding") or {}, f.get("avg_at_k_ci95") or [None, None]
        rows.append(
            f"| {name} | {_pct(f['avg_at_k'])} ({_pct(ci[0])} to {_pct(ci[1])}) | {_pct(f['pass_at_k'])} | "
            f"{_pct(g.get('grounded'))}% of {g.get('answered', 0)} | {_pct(g.get('listed'))} | {_pct(g.get('visited'))} | "
            f"{_pct(g.get('picked'))} | {g.get('checks', 0)} ({_pct(g.get('rejecting'))}%) |"
        )
    lines = [f"Questions: {r['questions']} (k = {r['k']})", "", *rows]
    if r.get("self"):
        n = r["self"]
        lines += [
            "",
            f"after_self: one more epoch on {n['kept']} correct, grounded rollouts of its own "
            f"({n['items']} training items, k = {n['k']})",
        ]
    if r.get("baseline"):
        lines += ["", f"Search baseline (top title of a search of the question): {_pct(r['baseline']['accuracy'])}%"]
    if r.get("test"):
        t, ci = r["test"], r["test"].get("avg_at_k_ci95") or [None, None]
        lines += [
            "",
            f"Synthesized test split: Avg@{r['k']} {_pct(t['avg_at_k'])} ({_pct(ci[0])} to {_pct(ci[1])}), "
            f"Pass@{r['k']} {_pct(t['pass_at_k'])}; the ladder's SFT model: {_pct(r.get('test_before'))}",
        ]
        if r.get("test_paired"):
            d = r["test_paired"]
            lo, hi = d["avg_diff_ci95"]
            lines += [
                f"Paired with it: {100 * d['avg_diff']:+.1f} points ({100 * lo:+.1f} to {100 * hi:+.1f}); {d['verdict']}"
            ]
    lines += ["", "Wall time by stage (s): " + ", ".join(f"{k} {v:.0f}" for k, v in r["wall_s"].items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from websailor.models.vllm_launch import rollout_engine
    from websailor.signals import interrupt_on_termination

    a = parse_args(argv)
    check_args(a)
    interrupt_on_termination()  # a killed run stops the vLLM server of its stage
    a.out.mkdir(parents=True, exist_ok=True)
    note_checkout(a.out)
    engine = rollout_engine(a.engine)
    # seconds spent in each stage, over every sitting (a resumed stage adds, a finished one adds ~0)
    wall_path = a.out / "wall_s.json"
    wall: dict[str, float] = json.loads(wall_path.read_text()) if wall_path.exists() else {}

    def stage(name, fn, *args):
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:  # an interrupted stage's seconds count too (it resumes, and its time was spent)
            wall[name] = wall.get(name, 0.0) + time.perf_counter() - t0
            wall_path.write_text(json.dumps({k: round(v, 1) for k, v in wall.items()}))

    qa = stage("items", pool_items, a)
    data = stage("trajectories", trajectories, a, qa)
    model = stage("sft", fine_tune, a, data)
    results: dict = {"questions": str(a.questions.name), "k": a.k, "model": model}
    try:
        results["baseline"] = {k: v for k, v in search_baseline(a.questions).items() if k != "answers"}
    except Exception as e:  # a question file without answers has no baseline to grade
        print(f"[baseline] not graded: {e}")
    if a.questions.resolve() == VITAL_QUESTIONS.resolve():
        results["before"] = before_figures()
    results["after"] = stage("eval_questions", evaluate, a, model, "questions", a.questions, None, engine)
    if a.self_rollouts:
        kept = stage("self_rollouts", self_rollouts, a, qa, data, model, engine)
        results["self"] = json.loads((a.out / "self_trajectories.counts.json").read_text())
        self_model = stage("self_sft", self_fine_tune, a, kept, model)
        results["after_self"] = stage(
            "eval_questions_self", evaluate, a, self_model, "questions_self", a.questions, None, engine
        )
    if a.test is not None:
        results["test"] = stage("eval_test", evaluate, a, model, "test", a.test, "test", engine, a.test_limit)
        if a.test.resolve() == (LADDER / "qa.jsonl").resolve():
            results["test_before"] = json.loads((LADDER / "eval_sft" / "summary.json").read_text())["avg_at_k"]
            results["test_paired"] = paired_with_ladder(a.out / "eval_test")
    results["wall_s"] = {k: round(v, 1) for k, v in wall.items()}
    results["traj_stats"] = json.loads((a.out / "traj_stats.json").read_text())["trained"]
    (a.out / "grounded.json").write_text(json.dumps(results, indent=2))
    (a.out / "results.md").write_text(markdown(results))
    print("\n" + markdown(results))
    write_results("grounded", results, a)
    if a.publish:
        print(f"published {publish(a.out, a.publish, PUBLISHED) / 1e6:.1f} MB to {a.publish}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
