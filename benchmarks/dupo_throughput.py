"""DUPO against dynamic sampling: training-batch rollouts per second.

Both strategies fill a batch of ``B`` groups of ``G`` rollouts that all carry a learning
signal (rewards with spread):

- dynamic sampling (DAPO): keep sampling groups of new questions until ``B`` groups with
  spread are collected; groups without spread are thrown away.
- DUPO (WebSailor V1, Sec. 4): sample ``B`` groups once; replace the groups without spread by
  copies of groups of the same batch that have spread (a batch with none is sampled again).

Both read one stream of real groups, in the same order: the agent runs each question ``G``
times (concurrently, as in training) and the judge grades them with DUPO's reward (0.1 format
+ 0.9 answer). The stream is appended to ``--stream`` as it grows, so a rerun reuses it. With
``--replay RL_DIR/rollouts.jsonl`` the groups of an RL run are used instead (no generation).

    python benchmarks/dupo_throughput.py --model hf:runs/mini/sft_model --qa runs/mini/qa.jsonl \\
        --stream runs/mini/dupo_stream.jsonl --batches 3 --groups 2 --group-size 4
    python benchmarks/dupo_throughput.py --replay runs/mini/rl_model/rollouts.jsonl --groups 2

``--model`` takes any model spec, a ``vllm:NAME@URL`` server among them (the ladder experiment's
``throughput`` stage serves its SFT model and measures the live stream that way);
``--observations compact`` matches a model trained on compact observations.

Prints, per strategy: batches filled, groups sampled, wall seconds spent sampling (sum of
group wall times), training-batch rollouts per second, and the ratio DUPO / dynamic; also the
ratio expected from the measured share p of groups with spread, (1 - (1 - p)^B) / p, for B and
for the paper's 16 groups a batch; writes the same JSON to benchmarks/results/dupo_throughput.json.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _common import too_small, write_results  # noqa: E402


def spread(rewards: list[float]) -> bool:
    return max(rewards) > min(rewards)


def dynamic_sampling(groups: list[dict], B: int, batches: int) -> dict:
    """Consume groups until ``batches`` batches of ``B`` groups with spread are full."""
    used, seconds, filled, have = 0, 0.0, 0, 0
    for g in groups:
        if filled == batches:
            break
        used += 1
        seconds += g["wall_s"]
        have += spread(g["rewards"])
        if have == B:
            filled, have = filled + 1, 0
    return {"batches": filled, "groups_sampled": used, "seconds": seconds}


def dupo(groups: list[dict], B: int, batches: int) -> dict:
    """Consume ``B`` groups per batch; a batch with at least one group with spread is full
    after duplication, one without any is sampled again."""
    used, seconds, filled = 0, 0.0, 0
    for start in range(0, len(groups) - B + 1, B):
        if filled == batches:
            break
        batch = groups[start : start + B]
        used += B
        seconds += sum(g["wall_s"] for g in batch)
        filled += any(spread(g["rewards"]) for g in batch)
    return {"batches": filled, "groups_sampled": used, "seconds": seconds}


def replay_groups(path: Path, group_size: int) -> list[dict]:
    """Groups of an RL run's ``rollouts.jsonl``, in step order (consecutive records of one
    step and question); wall time of a group = its slowest rollout (they run concurrently)."""
    recs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    groups = []
    for i in range(0, len(recs) - group_size + 1, group_size):
        part = recs[i : i + group_size]
        if len({(r["step"], r["id"]) for r in part}) != 1 or any(r["reward"] is None for r in part):
            continue
        groups.append(
            {
                "id": part[0]["id"],
                "rewards": [r["reward"] for r in part],
                "wall_s": max(r["timings"]["total_s"] for r in part),
            }
        )
    return groups


def live_groups(a: argparse.Namespace, needed: int) -> list[dict]:
    """The stream of groups, extended with the agent until ``needed`` groups exist (fewer when
    ``--qa`` has fewer questions: one group a question)."""
    from websailor.agent import Agent
    from websailor.corpus import Corpus
    from websailor.judge import Case, load_judge
    from websailor.models import load_model, local_model_dir
    from websailor.tools.environment import OBSERVATION_PRESETS
    from websailor.tools.local import build_local_tools
    from websailor.train.rewards import reward
    from websailor.train.rl import RLSettings, build_agent_config, training_questions

    stream = [json.loads(x) for x in a.stream.read_text().splitlines() if x.strip()] if a.stream.exists() else []
    if len(stream) >= needed:
        return stream
    items = training_questions(a.qa)  # a synth file's train split, or every question of another file
    random.Random(a.seed).shuffle(items)
    cfg = build_agent_config(
        RLSettings(
            group_size=a.group_size,
            batch_size=a.group_size,
            max_calls=a.max_calls,
            max_tokens_per_turn=a.max_tokens,
            max_context_tokens=8192,
            seed=a.seed,
        )
    )
    # a local model batches a group's rollouts itself; a server (vllm:, openai:) batches on its side
    local = local_model_dir(a.model) is not None
    agent = Agent(
        load_model(a.model, check=not local, **({"max_batch": a.group_size} if local else {})),
        build_local_tools(Corpus.open(None), **OBSERVATION_PRESETS[a.observations]),
        cfg,
    )
    judge = load_judge("em")
    with a.stream.open("a") as fh:
        for it in items[len(stream) : needed]:
            t0 = time.perf_counter()
            with ThreadPoolExecutor(a.group_size) as pool:
                trajs = list(
                    pool.map(lambda r, it=it: agent.run(it.question, it.id, r, it.gold.answer), range(a.group_size))
                )
            wall = time.perf_counter() - t0
            grades = judge.grade([Case(it.question, t.prediction, it.gold) for t in trajs])
            g = {
                "id": it.id,
                "rewards": [reward(t, gr.correct, "dupo") for t, gr in zip(trajs, grades)],
                "wall_s": wall,
            }
            fh.write(json.dumps(g) + "\n")
            fh.flush()
            stream.append(g)
            print(f"group {len(stream)}/{needed}: rewards {g['rewards']} in {wall:.0f} s", flush=True)
    return stream


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="hf:runs/mini/sft_model")
    p.add_argument("--qa", type=Path, default=Path("runs/mini/qa.jsonl"))
    p.add_argument("--stream", type=Path, default=Path("runs/mini/dupo_stream.jsonl"))
    p.add_argument("--replay", type=Path, help="an RL run's rollouts.jsonl instead of live rollouts")
    p.add_argument("--groups", type=int, default=2, help="groups per batch (B)")
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--batches", type=int, default=3, help="batches each strategy must fill")
    p.add_argument("--max-groups", type=int, default=24, help="most groups sampled live")
    p.add_argument("--max-calls", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results-dir", type=Path, help="where dupo_throughput.json goes (default benchmarks/results)")
    p.add_argument(
        "--observations", choices=("paper", "compact"), default="paper", help="observation setting of the tools"
    )
    a = p.parse_args()
    refusal = too_small(("--groups", a.groups, 1), ("--group-size", a.group_size, 2), ("--batches", a.batches, 1))
    if refusal:
        p.error(refusal)
    if a.replay:
        groups = replay_groups(a.replay, a.group_size)
    else:
        groups = live_groups(a, a.groups * a.batches)
        while dynamic_sampling(groups, a.groups, a.batches)["batches"] < a.batches and len(groups) < a.max_groups:
            more = live_groups(a, len(groups) + 1)
            if len(more) == len(groups):  # every question of --qa has its group: the stream ends here
                print(f"{a.qa} has no question left for another group ({len(groups)} sampled)", file=sys.stderr)
                break
            groups = more
    share = sum(spread(g["rewards"]) for g in groups) / max(1, len(groups))
    batches = min(a.batches, dynamic_sampling(groups, a.groups, 10**9)["batches"])
    res = {
        "groups_in_stream": len(groups),
        "share_with_spread": round(share, 3),
        "batch_groups": a.groups,
        "group_size": a.group_size,
        "batches": batches,
    }
    for name, fn in (("dynamic_sampling", dynamic_sampling), ("dupo", dupo)):
        r = fn(groups, a.groups, batches)
        r["rollouts_per_s"] = r["batches"] * a.groups * a.group_size / r["seconds"] if r["seconds"] else 0.0
        res[name] = {k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}
    if res["dynamic_sampling"]["rollouts_per_s"]:
        res["dupo_over_dynamic"] = round(res["dupo"]["rollouts_per_s"] / res["dynamic_sampling"]["rollouts_per_s"], 2)
    if 0 < share < 1:
        # in expectation, for this share p of groups with spread: dynamic sampling draws B / p groups per batch,
        # DUPO B / (1 - (1 - p)^B); the ratio for the paper's batch of 128 / 8 = 16 groups is printed too
        res["expected_dupo_over_dynamic"] = {
            B: round((1 - (1 - share) ** B) / share, 2) for B in sorted({a.groups, 16})
        }
    print(json.dumps(res, indent=2))
    write_results("dupo_throughput", res, a, **({"results_dir": a.results_dir} if a.results_dir else {}))


if __name__ == "__main__":
    main()
