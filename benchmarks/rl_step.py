"""An RL step end to end (rollouts, weight sync, update) at the ladder experiment's settings,
with the rollouts on the local engine against a vLLM server, and the time split of each step.

Both runs train the embedded SmolLM2-135M with ``configs/rl/cpu_ladder.yaml`` (V2, one group
of 8 rollouts a step, up to 6 model calls of up to 256 tokens, compact observations) on the same
synthesized level-1 items, from the same seed:

- ``engine``: rollouts sampled by the local engine from the trainer's weights;
- ``vllm``: rollouts sampled by a vLLM server (``.venv-vllm``, started here; its start-up is
  reported apart), the weights synced to it before every step.

The base model rarely answers right, so most groups would have no reward spread and no update
to time; ``--spread`` (on by default) gives every group rewards 0 and 1 by rollout parity, so
every rollout enters the loss and the update is timed at its full cost (the grading and the
advantages are otherwise the real ones). Prints each step's ``time/rollout_s``,
``sync/seconds``, ``time/update_s`` and ``time/step_s`` and the means, and writes them to
benchmarks/results/rl_step.json::

    python benchmarks/rl_step.py [--steps 2] [--runs engine,vllm]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import write_results  # noqa: E402

KEYS = ("time/rollout_s", "sync/seconds", "time/update_s", "time/step_s", "rollouts/response_tokens")


def one_run(kind: str, qa: Path, out: Path, a: argparse.Namespace) -> dict:
    """Train ``a.steps`` steps with rollouts on ``kind``; the step log's timings."""
    import websailor.train.rl.rollouts as rr
    from websailor.models.embedded import ensure_smollm2
    from websailor.tools.environment import COMPACT_OBSERVATIONS, EnvSpec
    from websailor.train.rl import load_settings, train_rl

    if a.spread:
        rr.reward = lambda traj, correct, algo: float(traj.rollout % 2)
    server, extra = None, {}
    if kind == "vllm":
        from websailor.models.vllm_launch import VLLMServer

        server = VLLMServer(ensure_smollm2(), port=0, max_model_len=8192).start()
        server.wait_ready(900, progress=True)
        extra = {"startup_s": round(server.startup_s or 0.0, 1)}
    try:
        settings = load_settings(
            ROOT / "configs" / "rl" / "cpu_ladder.yaml",
            max_steps=a.steps,
            max_tokens_per_turn=256,
            save_steps=1000,
            rollout_server=server.spec if server else None,
        )
        env = EnvSpec(**COMPACT_OBSERVATIONS)
        summary = train_rl(qa, "smollm2", out, settings, env=env, progress=False)
    finally:
        if server is not None:
            server.stop()
    steps = [{k: r.get(k) for k in KEYS} for r in summary["log"]]
    means = {k: round(sum(s[k] or 0.0 for s in steps) / len(steps), 2) for k in KEYS}
    return {"steps": steps, "mean": means, **extra}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--runs", default="engine,vllm")
    p.add_argument("--items", type=int, default=40)
    p.add_argument("--no-spread", dest="spread", action="store_false", help="the judge's real rewards only")
    a = p.parse_args()
    import subprocess

    results: dict = {"steps": a.steps, "spread": a.spread, "config": "configs/rl/cpu_ladder.yaml"}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        qa = tmp / "qa.jsonl"
        synth = [sys.executable, "-m", "websailor.cli", "synth", "--n", str(a.items), "--level", "1"]
        synth += ["--out", str(qa), "--seed", "7", "--observations", "compact"]
        subprocess.run(synth, check=True, capture_output=True)
        for kind in [k for k in a.runs.split(",") if k]:
            r = one_run(kind, qa, tmp / kind, a)
            results[kind] = r
            m = r["mean"]
            print(
                f"{kind}: rollouts {m['time/rollout_s']:.1f} s, sync {m['sync/seconds']:.2f} s, update "
                f"{m['time/update_s']:.1f} s, step {m['time/step_s']:.1f} s "
                f"({m['rollouts/response_tokens']:.0f} response tokens a rollout)"
                + (f"; server start-up {r['startup_s']:.0f} s" if "startup_s" in r else ""),
                flush=True,
            )
    if "engine" in results and "vllm" in results:
        e, v = results["engine"]["mean"], results["vllm"]["mean"]
        results["vllm_over_engine_rollout_speed"] = round(e["time/rollout_s"] / v["time/rollout_s"], 2)
        results["vllm_over_engine_step_speed"] = round(e["time/step_s"] / v["time/step_s"], 2)
        print(
            f"vllm / engine: rollouts {results['vllm_over_engine_rollout_speed']:.2f}x as fast, "
            f"whole step {results['vllm_over_engine_step_speed']:.2f}x"
        )
    print(json.dumps(results["vllm"]["mean"] if "vllm" in results else {}, indent=None))
    write_results("rl_step", results, a)


if __name__ == "__main__":
    main()
