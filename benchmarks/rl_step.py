"""An RL step end to end (rollouts on a vLLM server, weight sync, update) at the ladder
experiment's settings, and the update's speed per rollout token on today's path against the
path before it, measured in the same run.

Every run trains the embedded SmolLM2-135M with ``configs/rl/cpu_ladder.yaml`` (V2, one group
of 8 rollouts a step, up to 6 model calls of up to 256 tokens, compact observations) on the same
synthesized level-1 items, from the same seed, its rollouts sampled by one vLLM server that the
script starts (``.venv-vllm``) and that each run syncs its weights to before every step:

- ``after``: today's update (:class:`websailor.train.rl.update.AgentGRPOTrainer`: only the reply
  tokens through the LM head, the importance-sampling correction from the loss's own forward)
  at the precision ``auto`` measures;
- ``before``: the update before it: TRL's fused head over every completion column and a
  separate old-log-probability pass, at the precision the config shipped with then (bf16);
- ``before_same_precision``: that path at ``after``'s precision, so the code path's own gain
  shows apart from the precision's;
- ``local`` (not run by default): today's update with the rollouts on the local engine.

The base model rarely answers right, so most groups would have no reward spread and no update
to time; ``--spread`` (on by default) gives every group rewards 0 and 1 by rollout parity, so
every rollout enters the loss and the update is timed at its full cost (the grading and the
advantages are otherwise the real ones). Prints each step's ``time/rollout_s``,
``sync/seconds``, ``time/update_s``, ``time/step_s`` and rollout tokens, the update's seconds per
1,000 rollout tokens of each run and their ratios, and writes them to
benchmarks/results/rl_step.json::

    python benchmarks/rl_step.py [--steps 2] [--runs before,before_same_precision,after]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import write_results  # noqa: E402

KEYS = ("time/rollout_s", "sync/seconds", "time/update_s", "time/step_s", "rollouts/response_tokens", "num_tokens")
#: each run: settings over the config, whether it takes the update path before today's, and its rollout engine
RUNS = {
    "after": ({}, False, "vllm"),
    "before": ({"precision": "bf16", "lm_head": "trl"}, True, "vllm"),
    "before_same_precision": ({"lm_head": "trl"}, True, "vllm"),
    "local": ({}, False, "local"),
}


@contextlib.contextmanager
def update_path(before: bool) -> Iterator[None]:
    """While it is open, ``train_rl`` builds its trainer with the separate old-log-probability
    pass (TRL's path) when ``before``."""
    import websailor.train.rl.update as update

    if not before:
        yield
        return
    today = update.AgentGRPOTrainer

    class Before(today):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "defer_old_logprobs": False})

    update.AgentGRPOTrainer = Before
    try:
        yield
    finally:
        update.AgentGRPOTrainer = today


def one_run(name: str, qa: Path, out: Path, a: argparse.Namespace, server_spec: str | None) -> dict:
    """Train ``a.steps`` steps as run ``name`` (:data:`RUNS`); the step log's timings."""
    import websailor.train.rl.rollouts as rr
    from websailor.tools.environment import COMPACT_OBSERVATIONS, EnvSpec
    from websailor.train.rl import load_settings, train_rl

    if a.spread:
        rr.reward = lambda traj, correct, algo: float(traj.rollout % 2)
    overrides, before, engine = RUNS[name]
    settings = load_settings(
        ROOT / "configs" / "rl" / "cpu_ladder.yaml",
        max_steps=a.steps,
        max_tokens_per_turn=256,
        save_steps=1000,
        rollout_server=server_spec if engine == "vllm" else None,
        **overrides,
    )
    with update_path(before):
        summary = train_rl(qa, "smollm2", out, settings, env=EnvSpec(**COMPACT_OBSERVATIONS), progress=False)
    steps = [{k: r.get(k) for k in KEYS} for r in summary["log"]]
    seen = 0
    for s in steps:  # TRL's num_tokens is cumulative: each step's own is the difference
        s["rollout_tokens"], seen = (s["num_tokens"] or 0) - seen, s["num_tokens"] or 0
    update_s = sum(s["time/update_s"] or 0.0 for s in steps)
    tokens = sum(s["rollout_tokens"] for s in steps)
    means = {k: round(sum(s[k] or 0.0 for s in steps) / len(steps), 2) for k in (*KEYS, "rollout_tokens")}
    return {
        "steps": steps,
        "mean": means,
        "precision": summary["precision"],
        "lm_head": summary["lm_head"],
        "old_logprob_pass": before,
        "update_s_per_1k_tokens": round(1000 * update_s / tokens, 3) if tokens else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--runs", default="before,before_same_precision,after")
    p.add_argument("--items", type=int, default=40)
    p.add_argument("--no-spread", dest="spread", action="store_false", help="the judge's real rewards only")
    a = p.parse_args()
    import subprocess

    from websailor.models.embedded import ensure_smollm2
    from websailor.precision import choose_precision

    runs = [r for r in a.runs.split(",") if r]
    unknown = [r for r in runs if r not in RUNS]
    if unknown or not runs:
        raise SystemExit(f"--runs: {unknown or 'none'}; choose from {', '.join(RUNS)}")
    if a.steps < 1:
        raise SystemExit("--steps: give at least 1")
    measured = choose_precision("auto")
    print(measured.describe(), flush=True)
    results: dict = {"steps": a.steps, "spread": a.spread, "config": "configs/rl/cpu_ladder.yaml"}
    results["precision_auto"] = measured.record()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        qa = tmp / "qa.jsonl"
        synth = [sys.executable, "-m", "websailor.cli", "synth", "--n", str(a.items), "--level", "1"]
        synth += ["--out", str(qa), "--seed", "7", "--observations", "compact"]
        subprocess.run(synth, check=True, capture_output=True)
        server = None
        if any(RUNS[r][2] == "vllm" for r in runs):
            from websailor.models.vllm_launch import VLLMServer

            server = VLLMServer(ensure_smollm2(), port=0, max_model_len=8192).start()
        try:
            if server is not None:
                server.wait_ready(900, progress=True)
                results["server_startup_s"] = round(server.startup_s or 0.0, 1)
            for name in runs:
                r = one_run(name, qa, tmp / name, a, server.spec if server else None)
                results[name] = r
                m = r["mean"]
                print(
                    f"{name} ({r['precision']['precision']}, {r['lm_head']} head"
                    f"{', old-log-probability pass' if r['old_logprob_pass'] else ''}): rollouts "
                    f"{m['time/rollout_s']:.1f} s, sync {m['sync/seconds']:.2f} s, update {m['time/update_s']:.1f} s, "
                    f"step {m['time/step_s']:.1f} s; {m['rollout_tokens']:.0f} rollout tokens a step; update "
                    f"{r['update_s_per_1k_tokens']} s per 1,000 rollout tokens",
                    flush=True,
                )
        finally:
            if server is not None:
                server.stop()
    if "after" in results:
        for base in ("before", "before_same_precision"):
            if base in results and results[base]["update_s_per_1k_tokens"]:
                ratio = results[base]["update_s_per_1k_tokens"] / results["after"]["update_s_per_1k_tokens"]
                results[f"after_over_{base}"] = round(ratio, 2)
                print(f"after / {base}: the update {ratio:.2f}x as fast per rollout token", flush=True)
    write_results("rl_step", results, a)


if __name__ == "__main__":
    main()
