"""The cold-start and RL experiments: synthesize, build constructive trajectories, fine-tune
SmolLM2-135M on CPU, train the SFT model further with V2 RL in the local environment, and
evaluate the base, SFT and RL models on held-out items.

Every stage is a `websailor` command, printed before it runs, so the experiment is also a
recipe; each one resumes, so rerunning the script after an interruption continues it.

    python experiments/mini_pipeline.py --out runs/mini            # the default sizes: 1,100 items, 100 evaluated
    python experiments/mini_pipeline.py --out runs/mini --eval-limit 30

Prints, for the base, SFT and RL models: format validity (share of assistant turns that parse
into a tool call or an answer), terminations, mean tool calls, Avg@k and Pass@k; writes them
to OUT/results.json and OUT/results.md, and the same figures with the context of the run to
experiments/results/mini_pipeline.json.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import write_results  # noqa: E402

WS = str(Path(sys.executable).with_name("websailor"))


def step(args: list[str]) -> float:
    print("$ websailor " + " ".join(shlex.quote(a) for a in args), flush=True)
    t0 = time.perf_counter()
    subprocess.run([WS, *args], check=True)
    return time.perf_counter() - t0


def figures(eval_dir: Path) -> dict:
    s = json.loads((eval_dir / "summary.json").read_text())
    k = s["k"]
    return {
        "format_validity": s["format_validity"],
        "assistant_turns": s["assistant_turns"],
        "terminations": s["terminations"],
        "mean_tool_calls": s["mean_tool_calls"],
        f"avg_at_{k}": s["avg_at_k"],
        f"pass_at_{k}": s["pass_at_k"],
        "questions": s["questions"],
        "k": k,
        "ungraded": s["ungraded"],
        "wall_s": s["total_wall_s"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("runs/mini"))
    p.add_argument("--items", type=int, default=1100, help="items to synthesize (train + test)")
    p.add_argument("--test-fraction", type=float, default=0.09)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument(
        "--sft-config",
        type=Path,
        default=ROOT / "configs" / "sft" / "cpu_mini.yaml",
        help="SFT settings (the default: all weights, lr 1e-4, 80 steps of 2 trajectories up to 3,072 tokens)",
    )
    p.add_argument("--eval-limit", type=int, default=100, help="test items evaluated")
    p.add_argument("--rollouts", type=int, default=3)
    p.add_argument("--max-calls", type=int, default=10)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--skip-base", action="store_true", help="evaluate only the fine-tuned models")
    p.add_argument(
        "--rl-config",
        type=Path,
        default=ROOT / "configs" / "rl" / "cpu_mini.yaml",
        help="RL settings (the default: V2, 24 steps of one group of 4 rollouts, lr 2e-5)",
    )
    p.add_argument(
        "--rl-max-steps",
        type=int,
        help="override the RL config's max_steps (a finished run is continued "
        "when larger; an unfinished one stops at its checkpoint of that step)",
    )
    p.add_argument("--skip-rl", action="store_true", help="stop after SFT")
    a = p.parse_args()
    out = a.out
    out.mkdir(parents=True, exist_ok=True)
    qa, traj, model, rl_model = out / "qa.jsonl", out / "sft_trajectories.jsonl", out / "sft_model", out / "rl_model"
    times = {}
    times["synth_s"] = step(
        ["synth", "--n", str(a.items), "--out", str(qa), "--seed", str(a.seed), "--test-fraction", str(a.test_fraction)]
    )
    times["trajectories_s"] = step(
        ["traj", "build", "--source", "constructive", "--qa", str(qa), "--split", "train", "--out", str(traj)]
    )
    times["train_s"] = step(
        ["train", "sft", "--data", str(traj), "--out", str(model), "--model", "smollm2", "--config", str(a.sft_config)]
    )
    if not a.skip_rl:
        times["train_rl_s"] = step(
            [
                "train",
                "rl",
                "--data",
                str(qa),
                "--split",
                "train",
                "--model",
                f"hf:{model}",
                "--out",
                str(rl_model),
                "--config",
                str(a.rl_config),
                *(["--max-steps", str(a.rl_max_steps)] if a.rl_max_steps else []),
            ]
        )
        step(["train", "plot", str(rl_model)])
    common = [
        "--bench",
        str(qa),
        "--split",
        "test",
        "--limit",
        str(a.eval_limit),
        "--rollouts",
        str(a.rollouts),
        "--max-calls",
        str(a.max_calls),
        "--max-tokens",
        str(a.max_tokens),
        "--concurrency",
        str(a.concurrency),
    ]
    results = {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()}}
    runs = [("sft", f"hf:{model}")] + ([] if a.skip_rl else [("rl", f"hf:{rl_model}")])
    runs += [] if a.skip_base else [("base", "smollm2")]
    for name, spec in runs:
        times[f"eval_{name}_s"] = step(["eval", *common, "--model", spec, "--out", str(out / f"eval_{name}")])
        results[name] = figures(out / f"eval_{name}")
    results["train"] = {
        k: v
        for k, v in json.loads((model / "sft_summary.json").read_text()).items()
        if k in ("counts", "tokens", "steps", "train_loss", "train_seconds", "max_length")
    }
    if not a.skip_rl:
        rl = json.loads((rl_model / "rl_summary.json").read_text())
        log = rl["log"]
        rewards = [r["reward/mean"] for r in log if r.get("reward/mean") is not None]
        results["rl_train"] = {
            "steps": rl["steps"],
            "train_seconds": rl["train_seconds"],
            "questions": rl["questions"],
            "reward_first_10": sum(rewards[:10]) / max(1, len(rewards[:10])),
            "reward_last_10": sum(rewards[-10:]) / max(1, len(rewards[-10:])),
            "reward_per_step": rewards,
            "zero_spread_share": sum(r.get("groups/zero_spread_share", 0) for r in log) / max(1, len(log)),
        }
    results["times_s"] = {k: round(v, 1) for k, v in times.items()}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    rows = [
        "| model | format validity | Avg@k | Pass@k | mean tool calls | terminations |",
        "|---|---|---|---|---|---|",
    ]
    for name, _ in runs:
        r = results[name]
        k = r["k"]
        rows.append(
            f"| {name} | {100 * r['format_validity']:.1f}% | {100 * r[f'avg_at_{k}']:.1f} | "
            f"{100 * r[f'pass_at_{k}']:.1f} | {r['mean_tool_calls']} | "
            + ", ".join(f"{t} {n}" for t, n in r["terminations"].items())
            + " |"
        )
    table = "\n".join(rows)
    (out / "results.md").write_text(table + "\n")
    print(json.dumps(results, indent=2))
    print(table)
    write_results("mini_pipeline", results, a, results_dir=ROOT / "experiments" / "results")


if __name__ == "__main__":
    main()
