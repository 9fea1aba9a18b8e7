"""What sampling ahead buys: the wall time of an RL step with ``max_staleness`` 1 (the next batch
sampled on the vLLM server while the current one trains) against 0 (on-policy), on the same items,
model and server, in one run.

The embedded SmolLM2-135M (or ``--model``) trains V2 on ``--items`` level-1 items, one group a
step, for ``--steps`` steps with each K; rewards do not matter here, only time. Both runs use one
vLLM server this script starts. The figures per K are the means over the steps after the first
(the first samples on-policy in both): the step's wall time, the rollouts' sampling time, the
part of it the step waited for, the weight sync and the update. On two cores the server and the
trainer share the cores, so overlap buys little here: the figures say how much, and the
rollout and update shares say what it would buy where they run on separate hardware (at best
the step takes max(rollout, update) instead of their sum).

    python benchmarks/rl_async.py                      # 6 steps each (about 25 min on two cores)
    python benchmarks/rl_async.py --steps 4 --group-size 4

Writes benchmarks/results/rl_async.json; the run folders stay in ``--work``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from statistics import mean

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import too_small, write_results  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--work", type=Path, default=Path("runs/rl_async"), help="working folder")
    p.add_argument("--model", default="smollm2", help="the policy (smollm2 or hf:DIR)")
    p.add_argument("--steps", type=int, default=6, help="RL steps with each max_staleness")
    p.add_argument("--group-size", type=int, default=8, help="rollouts a step (one group)")
    p.add_argument("--max-calls", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=192)
    p.add_argument("--seed", type=int, default=7)
    return p.parse_args()


def _items(work: Path, n: int, seed: int) -> Path:
    """``n`` level-1 items, synthesized once (one epoch holds every step, so the next step's
    prompts are always known)."""
    from websailor.corpus import Corpus
    from websailor.synth import SynthConfig, load_or_build, synthesize
    from websailor.tools.environment import COMPACT_OBSERVATIONS
    from websailor.tools.local import build_local_tools

    qa = work / "qa.jsonl"
    if not qa.exists():
        corpus = Corpus.open()
        tools = build_local_tools(corpus, **COMPACT_OBSERVATIONS)
        synthesize(load_or_build(corpus), qa, SynthConfig(n=n, seed=seed, test_fraction=0.0, levels=(1,)), tools=tools)
    return qa


def _figures(log: list[dict]) -> dict:
    """Means over the steps after the first."""
    later = log[1:] or log

    def avg(key: str, default: float = 0.0) -> float:
        return round(mean(float(r.get(key) or default) for r in later), 2)

    return {
        "steps": len(log),
        "step_s": avg("time/step_s"),
        "rollout_s": avg("time/rollout_s"),
        "rollout_waited_s": round(
            mean(float(r.get("time/rollout_blocked_s", r.get("time/rollout_s")) or 0) for r in later), 2
        ),
        "sync_s": avg("sync/seconds"),
        "sync_wait_s": avg("sync/wait_s"),
        "update_s": avg("time/update_s"),
        "staleness": [r.get("policy/staleness") for r in log],
    }


def main() -> int:
    from websailor.models.vllm_launch import VLLMServer
    from websailor.signals import interrupt_on_termination
    from websailor.tools.environment import COMPACT_OBSERVATIONS, EnvSpec
    from websailor.train.common import resolve_model_dir
    from websailor.train.rl import load_settings, train_rl

    interrupt_on_termination()  # a killed benchmark stops the vLLM server it started
    a = parse_args()
    refusal = too_small(("--steps", a.steps, 2), ("--group-size", a.group_size, 2), ("--max-calls", a.max_calls, 1))
    if refusal:
        raise SystemExit(refusal)
    a.work.mkdir(parents=True, exist_ok=True)
    qa = _items(a.work, a.steps + 1, a.seed)
    model_dir = resolve_model_dir(a.model)
    runs = {}
    with contextlib.ExitStack() as stack:
        server = VLLMServer(str(model_dir), port=0, max_model_len=8192, log_path=a.work / "vllm.log")
        server.start()
        stack.callback(server.stop)
        server.wait_ready(progress=True)
        for k in (0, 1):
            settings = load_settings(
                Path(__file__).resolve().parents[1] / "configs" / "rl" / "cpu_ladder.yaml",
                max_steps=a.steps,
                group_size=a.group_size,
                batch_size=a.group_size,
                max_calls=a.max_calls,
                max_tokens_per_turn=a.max_tokens,
                save_steps=a.steps,
                seed=a.seed,
                rollout_server=server.spec,
                max_staleness=k,
            )
            t0 = time.perf_counter()
            summary = train_rl(qa, f"hf:{model_dir}", a.work / f"k{k}", settings, split="all",
                               env=EnvSpec(**COMPACT_OBSERVATIONS))  # fmt: skip
            runs[k] = {**_figures(summary["log"]), "wall_s": round(time.perf_counter() - t0, 1)}
    on, ahead = runs[0], runs[1]
    share = on["rollout_s"] / max(1e-9, on["rollout_s"] + on["update_s"])
    figures = {
        "model": a.model,
        "group_size": a.group_size,
        "k0": on,
        "k1": ahead,
        "step_ratio_k1_over_k0": round(ahead["step_s"] / on["step_s"], 3) if on["step_s"] else None,
        "rollout_share_k0": round(share, 3),
        # where rollouts and the update run on separate hardware, a step takes their maximum
        "ideal_ratio_separate_hardware": round(max(share, 1 - share), 3),
    }
    for k, r in runs.items():
        print(
            f"max_staleness {k}: step {r['step_s']:.1f} s (rollouts {r['rollout_s']:.1f} s, waited "
            f"{r['rollout_waited_s']:.1f} s; sync {r['sync_s']:.1f} s, of it waiting {r['sync_wait_s']:.1f} s; "
            f"update {r['update_s']:.1f} s), staleness {r['staleness']}"
        )
    print(
        f"step time with K=1 / K=0: {figures['step_ratio_k1_over_k0']}; rollouts are {share:.0%} of an on-policy "
        f"step: on separate hardware a step could take {figures['ideal_ratio_separate_hardware']:.0%} of it"
    )
    write_results("rl_async", figures, a)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
