"""The base -> SFT -> RL experiment on two CPU cores: synthesize a difficulty ladder, build
verifying constructive trajectories with compact observations, fine-tune SmolLM2-135M, check
that RL can overfit a handful of items, train with V2 RL on the moderate items (and DUPO at the
same budget), and evaluate the base, SFT and RL models on the held-out items by level.

Every stage is a `websailor` command, printed before it runs, so the experiment is also a
recipe; each one resumes, so rerunning the script after an interruption continues it. The run
directory keeps every stage's files and ``settings.json``; a rerun with other settings (levels,
observations, model, seed, sizes) is refused before anything runs, and so is a stage whose
inputs are missing (the message names the stage that makes them).

Rollouts (evaluations, the prefilter, RL) are sampled on a vLLM server that the script starts
for the stage's model (``--engine vllm``; ``auto`` when ``make vllm`` built one), and RL syncs
its weights to that server every step; ``--engine local`` uses the in-process engine.

    python experiments/mini_pipeline.py --out runs/ladder                       # every stage
    python experiments/mini_pipeline.py --out runs/ladder --until eval_sft      # the cold start only
    python experiments/mini_pipeline.py --out runs/ladder --rl-steps 60         # continue RL further
    python experiments/mini_pipeline.py --out runs/ladder --publish experiments/results/ladder
    python experiments/mini_pipeline.py status --out runs/ladder                # where it stands, what is left

The run folder can live anywhere (``--out ~/runs/ladder``, outside the checkout: a checkout laid
anew does not lose it); every stage resumes from its files, SFT and RL at step granularity.

Writes OUT/results.json and OUT/results.md (the tables and the per-stage wall time, items or
rollouts and peak resident memory) and the same figures with the context of the run (machine,
commit, arguments) to OUT/mini_pipeline.json; ``--publish DIR`` copies the run's small outputs
(settings, summaries, scores, RL step logs and rollouts; no model) there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "experiments"))

from _common import too_small, write_results  # noqa: E402

from websailor.models.vllm_launch import rollout_engine  # noqa: E402
from websailor.train.rl_log import reward_gain  # noqa: E402

WS = str(Path(sys.executable).with_name("websailor"))
#: the stages in order; --until stops after one of them
STAGES = (
    "synth",
    "traj",
    "sft",
    "eval_base",
    "eval_sft",
    "prefilter",
    "sanity",
    "rl",
    "eval_rl",
    "dupo",
    "eval_dupo",
    "throughput",
    "transfer",
)
#: the run directory's layout; directories of an earlier layout are refused (:data:`LAYOUT_CHANGES`)
LAYOUT = 5
#: what each layout changed (a run folder of an earlier one is refused, naming the change)
LAYOUT_CHANGES = {
    2: "trajectories that open with the question's own words, rollouts on vLLM, a prefilter at k = 8",
    3: "SFT and RL run folders that resume at step granularity (run format 2: an SFT step log, RL "
    "checkpoints after every step), the loss-position LM head and the measured precision",
    4: "questions that also describe their answer (--described-share, 0.5 by default) and grounded "
    "trajectories (every page opened has its reason in what was read before; checks that can reject)",
    5: "SFT on trajectories drawn from a pool with a share of lookups (--sft-items, --lookup-share; traj_pool.jsonl)",
}
#: what each stage reads, and the stage that makes it
NEEDS = {
    "traj": (("qa.jsonl", "synth"),),
    "sft": (("sft_trajectories.jsonl", "traj"),),
    "eval_base": (("qa.jsonl", "synth"),),
    "eval_sft": (("sft_model/sft_summary.json", "sft"), ("qa.jsonl", "synth")),
    "prefilter": (("sft_model/sft_summary.json", "sft"), ("qa.jsonl", "synth")),
    "sanity": (
        ("sft_model/sft_summary.json", "sft"),
        ("eval_sft_train/summary.json", "prefilter"),
        ("qa.jsonl", "synth"),
    ),
    "rl": (("sft_model/sft_summary.json", "sft"), ("eval_sft_train/summary.json", "prefilter"), ("qa.jsonl", "synth")),
    "eval_rl": (("rl_model/rl_summary.json", "rl"), ("qa.jsonl", "synth")),
    "dupo": (
        ("sft_model/sft_summary.json", "sft"),
        ("eval_sft_train/summary.json", "prefilter"),
        ("qa.jsonl", "synth"),
    ),
    "eval_dupo": (("dupo_model/rl_summary.json", "dupo"), ("qa.jsonl", "synth")),
    "throughput": (("sft_model/sft_summary.json", "sft"), ("qa.jsonl", "synth")),
}
#: the hand-written questions of the transfer check (stage ``transfer``)
VITAL_QUESTIONS = ROOT / "benchmarks" / "data" / "vital_questions.jsonl"
#: the models of the test tables, in order, and the run directory of each trained one
MODELS = ("base", "sft", "rl", "dupo")
MODEL_DIRS = {"sft": "sft_model", "rl": "rl_model", "dupo": "dupo_model"}
#: the settings a resumed run must keep (the others, such as --until, may change)
IDENTITY = (
    "items",
    "levels",
    "test_fraction",
    "seed",
    "observations",
    "distractor_share",
    "described_share",
    "sft_config",
    "model",
    "k",
    "eval_limit",
    "max_calls",
    "max_tokens",
    "concurrency",
    "prefilter_limit",
    "prefilter_k",
    "question_query",
    "sft_items",
    "lookup_share",
    "sanity_items",
    "sanity_group_size",
    "sanity_lr",
    "group_size",
    "rl_lr",
    "rl_config",
)
#: identity settings that only later stages read, and what those stages write: such a setting may
#: change while none of it exists (a learning rate chosen after the overfitting check, say)
READ_LATER = {
    "sanity_items": ("sanity_qa.jsonl", "rl_sanity"),
    "sanity_group_size": ("rl_sanity",),
    "sanity_lr": ("rl_sanity",),
    "group_size": ("rl_model", "dupo_model", "dupo_stream.jsonl"),
    "rl_lr": ("rl_model", "dupo_model"),
    "rl_config": ("rl_sanity", "rl_model", "dupo_model"),
}


#: Seconds a stopped stage gets to end its step and clean up (stop its server) before SIGKILL.
STOP_WAIT_S = 180


def run_stage(name: str, args: list[str], stages: dict, program: str = WS) -> None:
    """Run one `websailor` command (or ``program``); record its wall time and peak resident
    memory (MB), also when it fails or is interrupted (``status`` reads the time spent)."""
    shown = "websailor" if program == WS else "python"
    print(f"\n[{name}] $ {shown} " + " ".join(shlex.quote(a) for a in args), flush=True)
    t0 = time.perf_counter()
    rec = stages.setdefault(name, {"wall_s": 0.0, "peak_rss_mb": 0.0, "runs": 0})
    proc = subprocess.Popen([program, *args])
    usage = None
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except BaseException:  # Ctrl-C or SIGTERM of the script: the stage stops too, and cleans up
        proc.terminate()
        print(f"[{name}] stopping (a training step ends first; at most {STOP_WAIT_S} s)", file=sys.stderr, flush=True)
        try:
            proc.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    finally:
        rec["wall_s"] = round(rec["wall_s"] + time.perf_counter() - t0, 1)
        if usage is not None:
            rec["peak_rss_mb"] = max(rec["peak_rss_mb"], round(usage.ru_maxrss / 1024, 1))
        rec["runs"] += 1
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"[{name}] failed with exit code {proc.returncode}; rerun the script to resume")
    rec["finished"] = True


class Finished:
    """``finished(stage)``: whether a stage's files say it is done (:func:`pipeline_status.stage_progress`;
    for ``transfer_MODEL``, its summary after a run that ended), so that a resumed run neither
    runs its command again nor starts a vLLM server for it (about 100 s each, on two cores)."""

    def __init__(self, out: Path, settings: dict, results: dict) -> None:
        self.out, self.settings, self.results = out, settings, results
        self.said: set[str] = set()

    def __call__(self, name: str) -> bool:
        stages = self.results.get("stages") or {}
        if name.startswith("transfer_"):
            done = bool((stages.get(name) or {}).get("finished")) and (self.out / name / "summary.json").exists()
        else:
            from pipeline_status import stage_progress

            # a copy: stage_progress adds the transfer stage's record, which is no stage of the script
            row = stage_progress(self.out, self.settings, json.loads(json.dumps(self.results))).get(name)
            done = row is not None and row["state"] == "done"
        if done and name not in self.said:
            self.said.add(name)
            print(f"[{name}] done (its files say so): skipped", flush=True)
        return done


def missing_inputs(out: Path, wanted: tuple[str, ...]) -> list[str]:
    """What the wanted stages read that is not there and that no wanted stage earlier in the
    run makes: one line per missing file, naming the stage that makes it."""
    lines = []
    for name in wanted:
        for rel, maker in NEEDS.get(name, ()):
            made_now = maker in wanted and STAGES.index(maker) < STAGES.index(name)
            if not made_now and not (out / rel).exists():
                lines.append(f"stage {name} needs {out / rel}, which stage {maker} makes (--only {maker})")
    return lines


def model_dir(model: str) -> Path:
    """The transformers directory of ``smollm2``, ``hf:DIR`` or a directory."""
    if model == "smollm2":
        from websailor.models.embedded import ensure_smollm2

        return ensure_smollm2()
    return Path(model.removeprefix("hf:"))


@contextlib.contextmanager
def served(model: str, engine: str, logs: Path, label: str, max_model_len: int) -> Iterator[str]:
    """The model spec a stage's commands take: a vLLM server started for ``model`` and stopped
    after the stage (``engine == "vllm"``), or ``model`` itself for the local engine."""
    if engine != "vllm":
        yield model
        return
    from websailor.models.vllm_launch import VLLMServer

    logs.mkdir(parents=True, exist_ok=True)
    server = VLLMServer(
        model_dir(model), name=label, port=0, max_model_len=max_model_len, log_path=logs / f"{label}.log"
    )
    print(f"[{label}] starting a vLLM server for {model} (log {server.log_path})", flush=True)
    server.start()
    try:
        server.wait_ready(progress=True)
        print(f"[{label}] {server.spec} ready in {server.startup_s:.0f} s", flush=True)
        yield server.spec
    finally:
        server.stop()


def search_baseline(bench: Path, corpus: str | None = None) -> dict:
    """The transfer check's baseline: a BM25 search of each question's own text over the corpus,
    answering with the top result's title, graded by exact match (deterministic: one answer a
    question). Returns ``{"questions", "correct", "accuracy", "answers": [...]}``."""
    from websailor.corpus import Corpus
    from websailor.judge import load_judge
    from websailor.judge.base import Case
    from websailor.questions import load_questions

    items = load_questions(str(bench))
    corpus_ = Corpus.open(corpus)
    hits = corpus_.search([it.question for it in items], k=1)
    titles = [h[0].title if h else None for h in hits]
    grades = load_judge("em").grade([Case(it.question, t, it.gold) for it, t in zip(items, titles)])
    answers = [
        {"id": it.id, "question": it.question, "answer": str(it.gold.answer), "top_title": t, "correct": g.correct}
        for it, t, g in zip(items, titles, grades)
    ]
    right = sum(bool(a["correct"]) for a in answers)
    return {"questions": len(items), "correct": right, "accuracy": round(right / len(items), 4), "answers": answers}


#: the run's files that --publish copies (globs under OUT): small outputs, never a model
PUBLISHED = (
    "settings.json",
    "results.json",
    "results.md",
    "mini_pipeline.json",
    "qa_stats.txt",
    "compare_*.md",
    "dupo_stream.jsonl",
    "dupo_throughput.json",
    "transfer_baseline.json",
    "sft_model/sft_log.jsonl",
    "sft_model/sft_summary.json",
    "sft_model/sft_settings.json",
    "eval_*/summary.json",
    "eval_*/scores.jsonl",
    "eval_*/report.md",
    "eval_*/trajectories.jsonl",
    "transfer_*/summary.json",
    "transfer_*/scores.jsonl",
    "transfer_*/trajectories.jsonl",
    "*_model/rl_settings.json",
    "*_model/rl_summary.json",
    "*_model/rl_log.jsonl",
    "*_model/rollouts.jsonl",
    "*_model/*.png",
    "rl_sanity*/rl_settings.json",
    "rl_sanity*/rl_summary.json",
    "rl_sanity*/rl_log.jsonl",
    "rl_sanity*/rollouts.jsonl",
    "rl_sanity*/*.png",
    "sanity_qa.jsonl",
    "qa.jsonl",
)


def machine_paths(out: Path) -> list[tuple[bytes, bytes]]:
    """What :func:`publish` writes instead of this machine's paths: the run folder's (``OUT``,
    wherever it lives), the checkout's (paths relative to it) and ``$WEBSAILOR_HOME``'s; longest
    first, so a run folder inside the checkout reads ``OUT``."""
    from websailor.config import websailor_home

    pairs = [
        (f"{out.resolve()}".encode(), b"OUT"),
        (f"{ROOT}/".encode(), b""),
        (f"{websailor_home().resolve()}".encode(), b"$WEBSAILOR_HOME"),
    ]
    return sorted(pairs, key=lambda p: -len(p[0]))


def publish(out: Path, dest: Path, patterns: tuple[str, ...] = PUBLISHED) -> int:
    """Copy the run's small outputs (``patterns``, globs under ``out``; :data:`PUBLISHED` for this
    pipeline) from ``out`` to ``dest`` (same relative
    paths; files of an earlier publish are replaced); returns the bytes written. No path of the
    machine that ran the experiment is published (:func:`machine_paths`): the run folder reads
    ``OUT``, paths under the checkout (the configs in the settings) are relative to it."""
    total = 0
    replace = machine_paths(out)
    for pattern in patterns:
        for src in sorted(out.glob(pattern)):
            if not src.is_file() or "checkpoint" in src.as_posix():
                continue
            target = dest / src.relative_to(out)
            target.parent.mkdir(parents=True, exist_ok=True)
            data = src.read_bytes()
            if src.suffix != ".png":
                for old, new in replace:
                    data = data.replace(old, new)
            target.write_bytes(data)
            total += len(data)
    return total


def figures(eval_dir: Path) -> dict:
    """The headline figures of an evaluation, overall and by level."""
    s = json.loads((eval_dir / "summary.json").read_text())
    keep = (
        "questions",
        "k",
        "trajectories",
        "ungraded",
        "format_validity",
        "avg_at_k",
        "avg_at_k_ci95",
        "pass_at_k",
        "mean_tool_calls",
        "terminations",
        "total_wall_s",
    )
    out = {key: s.get(key) for key in keep}
    out["by_level"] = s.get("by_level") or {}
    return out


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


def read_pages(rollout: dict) -> dict[str, str]:
    """The pages a rollout's ``visit`` calls read: ``{url: title}``, the title read from the
    URL's last path segment (``.../wiki/Nicholas_I_of_Russia`` -> "Nicholas I of Russia")."""
    pages = {}
    for call in rollout.get("tool_calls") or []:
        url = (call.get("arguments") or {}).get("url") if call.get("name") == "visit" else None
        for u in [url] if isinstance(url, str) else url if isinstance(url, list) else []:
            if isinstance(u, str):
                pages[u] = unquote(u.rstrip("/").rsplit("/", 1)[-1]).replace("_", " ")
    return pages


def moderate_items(qa: Path, scores_dir: Path, k: int, limit: int, seed: int) -> list[dict]:
    """Training items that the SFT model solved sometimes but not always in ``scores_dir``."""
    from websailor.eval.compare import load_scores
    from websailor.synth.dataset import read_items
    from websailor.synth.difficulty import verdict

    correct: dict[str, list[bool]] = {}
    for s in load_scores(scores_dir):
        if s.correct is not None:
            correct.setdefault(s.id, []).append(s.correct)
    ids = [q for q, v in correct.items() if len(v) == k and verdict(sum(v), k, "moderate") == "kept"]
    random.Random(seed).shuffle(ids)
    by_id = {it["id"]: it for it in read_items(qa)}
    return [by_id[q] for q in ids[:limit]]


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
    for name, gain in (results.get("reward_gain") or {}).items():
        if gain:
            lo, hi = gain["diff_ci95"]
            lines += [
                "",
                f"{name}: training reward {gain['first']:.3f} over the first {gain['window']} steps, "
                f"{gain['last']:.3f} over the last {gain['window']} (difference {gain['diff']:+.3f}, "
                f"95% CI {lo:+.3f} to {hi:+.3f}; {gain['steps']} steps)",
            ]
    for name, text in (results.get("compare") or {}).items():
        lines += ["", f"### {name}", "", text]
    stages = results.get("stages") or {}
    if stages:
        lines += ["", "| stage | wall time (s) | peak RSS (MB) |", "|---|---|---|"]
        lines += [f"| {s} | {v['wall_s']} | {v['peak_rss_mb']} |" for s, v in stages.items()]
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    """The script's options (``status`` has its own: :mod:`pipeline_status`)."""
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="`python experiments/mini_pipeline.py status --out DIR` prints where a run stands, the time left "
        "and the command that continues it.",
    )
    p.add_argument("--out", type=Path, default=Path("runs/ladder"))
    p.add_argument("--items", type=int, default=600, help="items to synthesize (train + test)")
    p.add_argument("--levels", default="1-2", help="difficulty levels of the ladder (synth --level)")
    p.add_argument("--test-fraction", type=float, default=0.15)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--observations", default="compact", help="observation setting of SFT data, RL and eval")
    p.add_argument("--distractor-share", type=float, default=0.3)
    p.add_argument(
        "--described-share",
        type=float,
        default=0.5,
        help="share of items whose question also states the answer's own description (synth --described-share)",
    )
    p.add_argument(
        "--question-query",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="constructive trajectories open with a search of the question's own text (traj build --question-query)",
    )
    p.add_argument(
        "--sft-items",
        type=int,
        default=0,
        help="trajectories SFT trains on, drawn from the training items' pool (default 0: all of them, and "
        "--lookup-share is unused; grounded.py's recipe: 100)",
    )
    p.add_argument(
        "--lookup-share",
        type=float,
        default=0.5,
        help="share of the SFT trajectories whose question search lists the answer (traj select; default 0.5)",
    )
    p.add_argument("--sft-config", type=Path, default=ROOT / "configs" / "sft" / "cpu_ladder.yaml")
    p.add_argument("--model", default="smollm2", help="the base model")
    p.add_argument("--engine", choices=("auto", "vllm", "local"), default="auto", help="where rollouts are sampled")
    p.add_argument("--max-model-len", type=int, default=8192, help="the vLLM server's context (tokens)")
    p.add_argument("--k", type=int, default=4, help="rollouts per test item")
    p.add_argument("--eval-limit", type=int, default=60, help="test items evaluated")
    p.add_argument("--max-calls", type=int, default=6)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--prefilter-limit", type=int, default=48, help="training items the SFT model is rated on")
    p.add_argument("--prefilter-k", type=int, default=8, help="rollouts per training item of the prefilter")
    p.add_argument("--sanity-items", type=int, default=8, help="moderate items of the overfitting check (at most)")
    p.add_argument("--sanity-steps", type=int, default=16)
    p.add_argument("--sanity-group-size", type=int, default=8, help="rollouts per group (and per step) of the check")
    p.add_argument(
        "--sanity-lr",
        type=float,
        default=3e-5,
        help="learning rate of the check (1e-5 moved too little: experiments.md)",
    )
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument(
        "--rl-lr", type=float, default=3e-5, help="learning rate of V2 and DUPO (the check's: experiments.md)"
    )
    p.add_argument("--rl-config", type=Path, default=ROOT / "configs" / "rl" / "cpu_ladder.yaml")
    p.add_argument("--rl-steps", type=int, default=40, help="RL steps of the main run (V2, and DUPO)")
    p.add_argument("--throughput-groups", type=int, default=4, help="groups per batch of the DUPO throughput stage")
    p.add_argument("--throughput-max-groups", type=int, default=24, help="most groups the throughput stage samples")
    p.add_argument("--until", choices=STAGES, default=STAGES[-1], help="stop after this stage")
    p.add_argument("--only", help="run only these stages (comma-separated; their inputs must exist)")
    p.add_argument("--publish", type=Path, help="copy the run's small outputs to this folder at the end")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The run's options; a size below its least, a share outside [0, 1] or a test fraction
    outside [0, 1) is refused in one line before any work."""
    a = build_parser().parse_args(argv)
    sizes = ("items", "k", "eval_limit", "max_calls", "concurrency", "prefilter_limit", "prefilter_k")
    sizes += ("sanity_items", "sanity_steps", "sanity_group_size", "group_size", "rl_steps", "max_model_len")
    sizes += ("throughput_groups", "throughput_max_groups")
    refusal = too_small(*((f"--{k.replace('_', '-')}", getattr(a, k), 1) for k in sizes))
    refusal = refusal or too_small(("--max-tokens", a.max_tokens, 16), ("--sft-items", a.sft_items, 0))
    if refusal:
        raise SystemExit(refusal)
    if not 0.0 <= a.test_fraction < 1.0:
        raise SystemExit(f"--test-fraction must be in [0, 1), got {a.test_fraction}")
    shares = (("--distractor-share", a.distractor_share), ("--described-share", a.described_share))
    for flag, share in (*shares, ("--lookup-share", a.lookup_share)):
        if not 0.0 <= share <= 1.0:
            raise SystemExit(f"{flag} must be in [0, 1], got {share}")
    return a


def _option(key: str, value: object) -> str:
    """How ``--key value`` reads on the command line (a flag for a boolean)."""
    flag = key.replace("_", "-")
    if isinstance(value, bool):
        return f"--{flag}" if value else f"--no-{flag}"
    return f"--{flag} {value}"


def layout_difference(layout: object) -> str:
    """What a run folder of ``layout`` is, against this script's :data:`LAYOUT`, in words."""
    if isinstance(layout, int) and not isinstance(layout, bool) and layout < LAYOUT:
        since = "; ".join(LAYOUT_CHANGES[n] for n in range(layout + 1, LAYOUT + 1) if n in LAYOUT_CHANGES)
        return f"an earlier version of this script (layout {layout}, now {LAYOUT}: since then {since})"
    return f"an unknown layout ({layout!r}; this script writes layout {LAYOUT})"


def check_settings(out: Path, settings: dict) -> None:
    """Refuse, in one line, an ``--out`` that is a file, a run directory whose ``settings.json``
    cannot be read, one of another layout, or one with other identity settings (:data:`IDENTITY`;
    those of :data:`READ_LATER` only once a stage that reads them has written something)."""
    if out.exists() and not out.is_dir():
        raise SystemExit(f"--out {out} is a file; the experiment writes a directory")
    saved_path = out / "settings.json"
    if not saved_path.exists():
        return
    try:
        saved = json.loads(saved_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SystemExit(f"{saved_path} cannot be read ({type(e).__name__}: {e}); use another --out") from None
    if not isinstance(saved, dict):
        raise SystemExit(f"{saved_path} is a JSON {type(saved).__name__}, not the settings object; use another --out")
    layout = saved.get("layout", 1)
    if layout != LAYOUT:
        raise SystemExit(
            f"{out} holds a run of {layout_difference(layout)}; start it again under another --out (or delete it)"
        )
    changed = [
        key
        for key in IDENTITY
        if key in saved
        and saved[key] != settings[key]
        and (key not in READ_LATER or any((out / made).exists() for made in READ_LATER[key]))
    ]
    if changed:
        raise SystemExit(
            f"{out} holds a run with other settings: "
            + ", ".join(f"{_option(key, saved[key])} (now {_option(key, settings[key])})" for key in changed)
            + "; use the same settings to resume it, or another --out"
        )


def status_command(argv: list[str]) -> int:
    """``status --out DIR``: each stage's state, progress, time spent and left, and the command
    that continues the run (:mod:`pipeline_status`)."""
    from pipeline_status import status

    defaults = {a.dest: a.default for a in build_parser()._actions if a.dest != "help"}
    return status(argv, LAYOUT, layout_difference, defaults, _option)


def main() -> None:
    from websailor.signals import interrupt_on_termination

    if sys.argv[1:2] == ["status"]:
        sys.exit(status_command(sys.argv[2:]))

    interrupt_on_termination()  # a killed run stops the vLLM server of its stage
    a = parse_args()
    out = a.out
    # paths as absolute ones, so that the same file written another way is the same setting
    settings = {key: str(v.resolve()) if isinstance(v, Path) else v for key, v in vars(a).items()}
    settings |= {"out": str(a.out), "layout": LAYOUT}
    check_settings(out, settings)
    wanted = STAGES[: STAGES.index(a.until) + 1]
    if a.only is not None:
        wanted = tuple(x.strip() for x in a.only.split(",") if x.strip())
        if not wanted:
            raise SystemExit(f"--only {a.only!r} names no stage; the stages are {', '.join(STAGES)}")
        unknown = [x for x in wanted if x not in STAGES]
        if unknown:
            raise SystemExit(f"--only: no stage {', '.join(unknown)}; the stages are {', '.join(STAGES)}")
    missing = missing_inputs(out, wanted)
    if missing:
        raise SystemExit("\n".join(missing))
    out.mkdir(parents=True, exist_ok=True)
    (out / "settings.json").write_text(json.dumps(settings, indent=2))
    results_path = out / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    stages = results.setdefault("stages", {})
    results["settings"] = settings
    engine = rollout_engine(a.engine)
    logs = out / "logs"

    qa, pool, traj, sft = out / "qa.jsonl", out / "traj_pool.jsonl", out / "sft_trajectories.jsonl", out / "sft_model"
    obs = ["--observations", a.observations]
    # --engine local: the stages' own commands must not start a server either (the script starts them for vllm)
    local = ["--engine", "local"] if engine == "local" else []
    agent = ["--max-calls", str(a.max_calls), "--max-tokens", str(a.max_tokens), "--concurrency", str(a.concurrency)]
    agent += local
    test = ["--bench", str(qa), "--split", "test", "--limit", str(a.eval_limit), "--rollouts", str(a.k)]
    rl_common = [
        *["--config", str(a.rl_config)],
        *["--group-size", str(a.group_size), "--batch", str(a.group_size), "--lr", str(a.rl_lr)],
        *["--max-calls", str(a.max_calls), "--max-tokens", str(a.max_tokens), "--concurrency", str(a.concurrency)],
        *obs,
        *local,
    ]

    finished = Finished(out, settings, results)

    def stage(name: str, args: list[str]) -> None:
        if name in wanted and not finished(name):
            try:
                run_stage(name, args, stages)
            finally:
                results_path.write_text(json.dumps(results, indent=2))

    def stage_script(name: str, args: list[str]) -> None:
        if name in wanted and not finished(name):
            try:
                run_stage(name, args, stages, program=sys.executable)
            finally:
                results_path.write_text(json.dumps(results, indent=2))

    def serve(name: str, model: str) -> contextlib.AbstractContextManager[str]:
        if name not in wanted or finished(name):  # no server for a stage that is done
            return contextlib.nullcontext(model)
        return served(model, engine, logs, name, a.max_model_len)

    stage(
        "synth",
        ["synth", "--n", str(a.items), "--out", str(qa), "--seed", str(a.seed), "--level", a.levels]
        + ["--test-fraction", str(a.test_fraction), "--described-share", str(a.described_share), *obs],
    )
    if "synth" in wanted and not (out / "qa_stats.txt").exists():
        stats = subprocess.run([WS, "synth", "stats", str(qa)], check=True, capture_output=True, text=True).stdout
        (out / "qa_stats.txt").write_text(stats)
        print(stats)
    stage(
        "traj",
        ["traj", "build", "--source", "constructive", "--qa", str(qa), "--split", "train", "--out", str(pool)]
        + ["--distractor-share", str(a.distractor_share), *obs]
        + ["--question-query" if a.question_query else "--no-question-query"],
    )
    # --sft-items of the pool (0: all), --lookup-share of them lookups (grounded.py's recipe: 100, half)
    stage(
        "traj",
        ["traj", "select", "--from", str(pool), "--out", str(traj), "--n", str(a.sft_items)]
        + ["--lookup-share", str(a.lookup_share), "--seed", str(a.seed)],
    )
    stage(
        "sft",
        ["train", "sft", "--data", str(traj), "--out", str(sft), "--model", a.model, "--config", str(a.sft_config)],
    )
    models = {"base": a.model, "sft": f"hf:{sft}"}
    for name in ("base", "sft"):
        with serve(f"eval_{name}", models[name]) as spec:
            stage(f"eval_{name}", ["eval", *test, "--model", spec, "--out", str(out / f"eval_{name}"), *agent, *obs])
    # the SFT model on training items: the prefilter that RL reads with --prefilter-from
    rated = out / "eval_sft_train"
    train_items = ["--bench", str(qa), "--split", "train", "--limit", str(a.prefilter_limit)]
    with serve("prefilter", models["sft"]) as spec:
        stage(
            "prefilter",
            [
                "eval",
                *train_items,
                "--rollouts",
                str(a.prefilter_k),
                "--model",
                spec,
                "--out",
                str(rated),
                *agent,
                *obs,
            ],
        )
    sanity_qa, sanity = out / "sanity_qa.jsonl", out / "rl_sanity"
    if "sanity" in wanted and not sanity_qa.exists():
        from websailor.errors import WebsailorError

        try:
            chosen = moderate_items(qa, rated, a.prefilter_k, a.sanity_items, a.seed)
        except WebsailorError as e:
            raise SystemExit(
                f"[sanity] the prefilter's rollouts in {rated} cannot be read: {e}; rerun --only prefilter"
            ) from None
        if not chosen:
            raise SystemExit(f"no training item in {rated} was solved sometimes but not always: no sanity check")
        sanity_qa.write_text("".join(json.dumps(it) + "\n" for it in chosen))
    with serve("sanity", models["sft"]) as spec:
        server = ["--rollout-server", spec] if engine == "vllm" and "sanity" in wanted else []
        stage(
            "sanity",
            ["train", "rl", "--data", str(sanity_qa), "--split", "all", "--model", models["sft"], "--out", str(sanity)]
            + ["--max-steps", str(a.sanity_steps), *rl_common, *server]
            + ["--group-size", str(a.sanity_group_size), "--batch", str(a.sanity_group_size)]
            + ["--lr", str(a.sanity_lr)],
        )
    rl_runs = {"rl": ("v2", out / "rl_model"), "dupo": ("dupo", out / "dupo_model")}
    for name, (algo, path) in rl_runs.items():
        with serve(name, models["sft"]) as spec:
            server = ["--rollout-server", spec] if engine == "vllm" and name in wanted else []
            stage(
                name,
                ["train", "rl", "--data", str(qa), "--split", "train", "--model", models["sft"], "--out", str(path)]
                + ["--algo", algo, "--prefilter-from", str(rated), "--max-steps", str(a.rl_steps), *rl_common, *server],
            )
        with serve(f"eval_{name}", f"hf:{path}") as spec:
            stage(f"eval_{name}", ["eval", *test, "--model", spec, "--out", str(out / f"eval_{name}"), *agent, *obs])
    # DUPO against dynamic sampling on one live stream of groups of the SFT model (training items)
    with serve("throughput", models["sft"]) as spec:
        stage_script(
            "throughput",
            [str(ROOT / "benchmarks" / "dupo_throughput.py"), "--model", spec, "--qa", str(qa)]
            + ["--stream", str(out / "dupo_stream.jsonl"), "--groups", str(a.throughput_groups)]
            + ["--group-size", str(a.group_size), "--batches", "3", "--max-groups", str(a.throughput_max_groups)]
            + ["--max-calls", str(a.max_calls), "--max-tokens", str(a.max_tokens), "--observations", a.observations]
            + ["--results-dir", str(out)],
        )
    models |= {name: f"hf:{path}" for name, (_, path) in rl_runs.items()}
    if "transfer" in wanted:
        transfer(out, a, models, engine, agent, obs, stages, results, results_path, finished)

    report(out, a, results, results_path, sanity, rl_runs)


def transfer(out, a, models, engine, agent, obs, stages, results, results_path, finished) -> None:
    """The hand-written questions (:data:`VITAL_QUESTIONS`) for every model that exists, and
    the search baseline, whose figures go to ``results["transfer"]``; a model whose questions
    are done (``finished(f"transfer_{name}")``) is skipped."""
    baseline = search_baseline(VITAL_QUESTIONS)
    (out / "transfer_baseline.json").write_text(json.dumps(baseline, indent=2))
    bench = ["--bench", str(VITAL_QUESTIONS), "--rollouts", str(a.k)]
    for name in MODELS:
        if name != "base" and not (out / MODEL_DIRS[name] / "config.json").exists():
            continue
        if finished(f"transfer_{name}"):
            continue
        try:
            with served(models[name], engine, out / "logs", f"transfer_{name}", a.max_model_len) as spec:
                run_stage(
                    f"transfer_{name}",
                    ["eval", *bench, "--model", spec, "--out", str(out / f"transfer_{name}"), *agent, *obs],
                    stages,
                )
        finally:
            results_path.write_text(json.dumps(results, indent=2))


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
    results["reward_gain"] = {
        label: reward_gain(path / "rollouts.jsonl")
        for label, path in (("sanity", sanity), *((m, d) for m, (_, d) in rl_runs.items()))
        if path.exists()
    }
    compare = {}
    for a_name, b_name in (("base", "sft"), ("sft", "rl"), ("sft", "dupo"), ("rl", "dupo")):
        if a_name in results["eval"] and b_name in results["eval"]:
            md = out / f"compare_{a_name}_{b_name}.md"
            subprocess.run(
                [WS, "compare", str(out / f"eval_{a_name}"), str(out / f"eval_{b_name}")]
                + ["--name", a_name, "--name", b_name, "--out", str(md)],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            compare[f"{a_name} -> {b_name}"] = md.read_text()
    results["compare"] = compare
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


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the stage's server is stopped, its files kept
        print("stopped: rerun the same command to resume from the stage's files", file=sys.stderr)
        sys.exit(130)
