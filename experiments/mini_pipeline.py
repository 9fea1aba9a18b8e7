"""The base -> SFT -> RL experiment on two CPU cores: synthesize a difficulty ladder, build
verifying constructive trajectories with compact observations, fine-tune SmolLM2-135M, check
that RL can overfit a handful of items, train with V2 RL on the moderate items (and DUPO at the
same budget), and evaluate the base, SFT and RL models on the held-out items by level.

Every stage is a `websailor` command, printed before it runs, so the experiment is also a
recipe; each one resumes, so rerunning the script after an interruption continues it. The run
directory keeps every stage's files and ``settings.json``; a rerun with other settings (levels,
observations, model, seed, sizes) is refused before anything runs.

    python experiments/mini_pipeline.py --out runs/ladder                       # every stage
    python experiments/mini_pipeline.py --out runs/ladder --until eval_sft      # the cold start only
    python experiments/mini_pipeline.py --out runs/ladder --rl-steps 60         # continue RL further

Writes OUT/results.json and OUT/results.md (the tables and the per-stage wall time, items or
rollouts and peak resident memory) and the same figures with the context of the run to
experiments/results/mini_pipeline.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import write_results  # noqa: E402

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
)
#: the settings a resumed run must keep (the others, such as --until, may change)
IDENTITY = (
    "items",
    "levels",
    "test_fraction",
    "seed",
    "observations",
    "distractor_share",
    "sft_config",
    "model",
    "k",
    "eval_limit",
    "max_calls",
    "max_tokens",
    "concurrency",
    "prefilter_limit",
    "sanity_items",
    "sanity_group_size",
    "sanity_lr",
    "group_size",
    "rl_lr",
    "rl_config",
)


def run_stage(name: str, args: list[str], stages: dict) -> None:
    """Run one `websailor` command; record its wall time and peak resident memory (MB)."""
    print(f"\n[{name}] $ websailor " + " ".join(shlex.quote(a) for a in args), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen([WS, *args])
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"[{name}] failed with exit code {proc.returncode}; rerun the script to resume")
    rec = stages.setdefault(name, {"wall_s": 0.0, "peak_rss_mb": 0.0, "runs": 0})
    rec["wall_s"] = round(rec["wall_s"] + time.perf_counter() - t0, 1)
    rec["peak_rss_mb"] = max(rec["peak_rss_mb"], round(usage.ru_maxrss / 1024, 1))
    rec["runs"] += 1


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


def reward_gain(rl_dir: Path, n: int = 10, resamples: int = 2000, seed: int = 0) -> dict | None:
    """Mean reward of the rollouts of the last ``n`` steps minus the first ``n``, with a 95%
    bootstrap interval (rollouts resampled within each window)."""
    import numpy as np

    path = rl_dir / "rollouts.jsonl"
    if not path.is_file():
        return None
    by_step: dict[int, list[float]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("reward") is not None:
            by_step.setdefault(int(rec["step"]), []).append(float(rec["reward"]))
    steps = sorted(by_step)
    if len(steps) < 2:
        return None
    n = min(n, len(steps) // 2)
    head = np.array([r for s in steps[:n] for r in by_step[s]])
    tail = np.array([r for s in steps[-n:] for r in by_step[s]])
    rng = np.random.default_rng(seed)
    diffs = np.sort(
        rng.choice(tail, (resamples, len(tail))).mean(axis=1) - rng.choice(head, (resamples, len(head))).mean(axis=1)
    )
    return {
        "steps": len(steps),
        "window": n,
        "first": round(float(head.mean()), 4),
        "last": round(float(tail.mean()), 4),
        "diff": round(float(tail.mean() - head.mean()), 4),
        "diff_ci95": [round(float(diffs[int(0.025 * resamples)]), 4), round(float(diffs[int(0.975 * resamples)]), 4)],
        "reward_per_step": [round(sum(by_step[s]) / len(by_step[s]), 4) for s in steps],
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("runs/ladder"))
    p.add_argument("--items", type=int, default=600, help="items to synthesize (train + test)")
    p.add_argument("--levels", default="1-2", help="difficulty levels of the ladder (synth --level)")
    p.add_argument("--test-fraction", type=float, default=0.15)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--observations", default="compact", help="observation setting of SFT data, RL and eval")
    p.add_argument("--distractor-share", type=float, default=0.3)
    p.add_argument("--sft-config", type=Path, default=ROOT / "configs" / "sft" / "cpu_ladder.yaml")
    p.add_argument("--model", default="smollm2", help="the base model")
    p.add_argument("--k", type=int, default=4, help="rollouts per test item")
    p.add_argument("--eval-limit", type=int, default=60, help="test items evaluated")
    p.add_argument("--max-calls", type=int, default=6)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--prefilter-limit", type=int, default=48, help="training items the SFT model is rated on")
    p.add_argument("--sanity-items", type=int, default=8, help="moderate items of the overfitting check (at most)")
    p.add_argument("--sanity-steps", type=int, default=16)
    p.add_argument("--sanity-group-size", type=int, default=8, help="rollouts per group (and per step) of the check")
    p.add_argument("--sanity-lr", type=float, default=5e-5, help="learning rate of the check (overfitting is its aim)")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--rl-lr", type=float, default=2e-5)
    p.add_argument("--rl-config", type=Path, default=ROOT / "configs" / "rl" / "cpu_ladder.yaml")
    p.add_argument("--rl-steps", type=int, default=40, help="RL steps of the main run (V2, and DUPO)")
    p.add_argument("--until", choices=STAGES, default=STAGES[-1], help="stop after this stage")
    p.add_argument("--only", help="run only these stages (comma-separated; their inputs must exist)")
    a = p.parse_args()
    out = a.out
    out.mkdir(parents=True, exist_ok=True)
    settings = {key: str(v) if isinstance(v, Path) else v for key, v in vars(a).items()}
    saved_path = out / "settings.json"
    if saved_path.exists():
        saved = json.loads(saved_path.read_text())
        changed = [key for key in IDENTITY if key in saved and saved[key] != settings[key]]
        if changed:
            raise SystemExit(
                f"{out} holds a run with other settings: "
                + ", ".join(f"--{key.replace('_', '-')} {saved[key]} (now {settings[key]})" for key in changed)
                + "; use the same settings to resume it, or another --out"
            )
    saved_path.write_text(json.dumps(settings, indent=2))
    results_path = out / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    stages = results.setdefault("stages", {})
    results["settings"] = settings
    wanted = STAGES[: STAGES.index(a.until) + 1]
    if a.only:
        wanted = tuple(x.strip() for x in a.only.split(","))
        unknown = [x for x in wanted if x not in STAGES]
        if unknown:
            raise SystemExit(f"--only: no stage {', '.join(unknown)}; the stages are {', '.join(STAGES)}")

    qa, traj, sft = out / "qa.jsonl", out / "sft_trajectories.jsonl", out / "sft_model"
    obs = ["--observations", a.observations]
    agent = ["--max-calls", str(a.max_calls), "--max-tokens", str(a.max_tokens), "--concurrency", str(a.concurrency)]
    test = ["--bench", str(qa), "--split", "test", "--limit", str(a.eval_limit), "--rollouts", str(a.k)]
    rl_common = [
        *["--config", str(a.rl_config)],
        *["--group-size", str(a.group_size), "--batch", str(a.group_size), "--lr", str(a.rl_lr)],
        *["--max-calls", str(a.max_calls), "--max-tokens", str(a.max_tokens), "--concurrency", str(a.concurrency)],
        *obs,
    ]

    def stage(name: str, args: list[str]) -> None:
        if name in wanted:
            run_stage(name, args, stages)
            results_path.write_text(json.dumps(results, indent=2))

    n = str(a.items)
    stage(
        "synth",
        ["synth", "--n", n, "--out", str(qa), "--seed", str(a.seed), "--level", a.levels]
        + ["--test-fraction", str(a.test_fraction), *obs],
    )
    stage("synth", ["synth", "stats", str(qa)])
    stage(
        "traj",
        ["traj", "build", "--source", "constructive", "--qa", str(qa), "--split", "train", "--out", str(traj)]
        + ["--distractor-share", str(a.distractor_share), *obs],
    )
    stage(
        "sft",
        ["train", "sft", "--data", str(traj), "--out", str(sft), "--model", a.model, "--config", str(a.sft_config)],
    )
    evals = {"base": a.model, "sft": f"hf:{sft}"}
    for name in ("base", "sft"):
        stage(f"eval_{name}", ["eval", *test, "--model", evals[name], "--out", str(out / f"eval_{name}"), *agent, *obs])
    # the SFT model on training items: the prefilter that RL reads with --prefilter-from
    rated = out / "eval_sft_train"
    train_items = ["--bench", str(qa), "--split", "train", "--limit", str(a.prefilter_limit), "--rollouts", str(a.k)]
    stage("prefilter", ["eval", *train_items, "--model", f"hf:{sft}", "--out", str(rated), *agent, *obs])
    sanity_qa, sanity = out / "sanity_qa.jsonl", out / "rl_sanity"
    if "sanity" in wanted:
        if not sanity_qa.exists():
            chosen = moderate_items(qa, rated, a.k, a.sanity_items, a.seed)
            if not chosen:
                raise SystemExit(f"no training item in {rated} was solved sometimes but not always: no sanity check")
            sanity_qa.write_text("".join(json.dumps(it) + "\n" for it in chosen))
        stage(
            "sanity",
            ["train", "rl", "--data", str(sanity_qa), "--split", "all", "--model", f"hf:{sft}", "--out", str(sanity)]
            + ["--max-steps", str(a.sanity_steps), *rl_common]
            + ["--group-size", str(a.sanity_group_size), "--batch", str(a.sanity_group_size)]
            + ["--lr", str(a.sanity_lr)],
        )
    rl_runs = {"rl": ("v2", out / "rl_model"), "dupo": ("dupo", out / "dupo_model")}
    for name, (algo, path) in rl_runs.items():
        stage(
            name,
            ["train", "rl", "--data", str(qa), "--split", "train", "--model", f"hf:{sft}", "--out", str(path)]
            + ["--algo", algo, "--prefilter-from", str(rated), "--max-steps", str(a.rl_steps), *rl_common],
        )
        stage(
            f"eval_{name}", ["eval", *test, "--model", f"hf:{path}", "--out", str(out / f"eval_{name}"), *agent, *obs]
        )

    results["eval"] = {
        m: figures(out / f"eval_{m}") for m in evals | rl_runs if (out / f"eval_{m}" / "summary.json").exists()
    }
    results["reward_gain"] = {
        label: reward_gain(path)
        for label, path in (("sanity", sanity), *((m, d) for m, (_, d) in rl_runs.items()))
        if path.exists()
    }
    compare = {}
    for a_name, b_name in (("base", "sft"), ("sft", "rl"), ("sft", "dupo")):
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
    write_results("mini_pipeline", results, a, results_dir=ROOT / "experiments" / "results")


if __name__ == "__main__":
    main()
