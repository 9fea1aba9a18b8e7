"""Peak memory and seconds per step of training the embedded model (SmolLM2-135M) at long
contexts, under each precision and memory setting.

Each configuration runs in a fresh Python process (peak RSS by ``resource.getrusage``):

* ``sft``: ``train_sft`` for ``--steps`` optimizer steps at batch ``--batch`` (one trajectory of
  about ``--tokens`` tokens per micro-batch);
* ``rl``: ``train_rl`` for one step on a group of ``--rollouts`` rollouts of about ``--tokens``
  tokens each (two answer right, the others wrong, so every rollout carries an advantage).
  The rollout function is replaced by one that hands the trainer these finished rollouts
  through :meth:`~websailor.train.rl.rollouts.AgentRollouts.batch`: grading, advantages,
  tokenization and the trainer's loss are the real ones, only the sampling is skipped.

The trajectories are real multi-turn agent runs over the embedded corpus: a scripted model
searches and visits pages until the conversation holds ``--tokens`` tokens, then answers.
The settings (``--labels``, each against ``fp32`` in the same run):

* ``fp32``: fp32, gradient checkpointing, the memory limits (the tiled LM head and the 1 MiB
  mmap threshold, :func:`websailor.train.common.limit_training_memory`): the CPU default before
  bf16;
* ``memory``: bf16 autocast with checkpointing and the memory limits (the ladder experiment's
  SFT settings before);
* ``bf16``: bf16 autocast, no checkpointing, no memory limits;
* ``bf16_ckpt``: bf16 autocast with checkpointing, no memory limits (the defaults now).

Usage::

    python benchmarks/train_memory.py [--tokens 1730] [--batch 2] [--rollouts 8] [--only sft] [--labels fp32,bf16_ckpt]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, write_results  # noqa: E402

PAGES = ["Paris", "Seine", "France", "Eiffel Tower", "Louvre", "Napoleon", "French Revolution", "Europe"]
QUESTION = "Which river flows through Paris?"

_CHILD = """
import json, resource, sys, time
from pathlib import Path
cfg = json.loads(sys.argv[1])
out = Path(cfg["out"])
if cfg["kind"] == "sft":
    from websailor.train.sft import load_settings, train_sft
    s = load_settings(str(cfg["config"]), max_steps=cfg["steps"], batch_size=cfg["batch"], max_length=cfg["tokens"] + 512,
                      warmup_ratio=0.0, save_steps=1000, **cfg["settings"])
    summary = train_sft(cfg["trajs"], "smollm2", out, s, progress=False)
    step_s = summary["train_seconds"] / summary["steps"]
else:
    from websailor.agent.trajectory import Trajectory
    from websailor.tools.environment import EnvSpec
    from websailor.train.rl import rollouts as rl_rollouts
    from websailor.train.rl import load_settings, train_rl
    trajs = [Trajectory.from_dict(json.loads(x)) for x in Path(cfg["trajs"]).read_text().splitlines()]

    def finished_rollouts(self, prompts, trainer):
        items = self._questions(prompts)
        return self.batch(items, trajs, trainer.state.global_step, trainer.processing_class)

    rl_rollouts.AgentRollouts.__call__ = finished_rollouts
    if cfg.get("padded"):  # TRL's own forward passes, over the whole batch's padding
        import trl
        import websailor.train.rl.trim as trim
        trim.TrimmedGRPOTrainer = trl.GRPOTrainer
    n = len(trajs)
    s = load_settings(str(cfg["config"]), group_size=n, batch_size=n, max_steps=1, max_context_tokens=cfg["tokens"] * 2,
                      save_steps=1000, **cfg["settings"])
    summary = train_rl(cfg["qa"], "smollm2", out, s, env=EnvSpec(corpus=cfg["corpus"]), progress=False)
    step_s = summary["log"][0]["time/update_s"]
print(json.dumps({"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "step_s": step_s}))
"""


def long_trajectories(n: int, tokens: int | list[int], corpus: Path) -> list[dict]:
    """``n`` agent runs of about ``tokens`` tokens each (or ``tokens[i]`` for run ``i``) over
    ``corpus``: searches and visits of real pages, then an answer (``Seine`` for the even
    ones, ``Loire`` for the odd)."""
    import json as _json

    from transformers import AutoTokenizer

    from websailor.agent.loop import Agent, AgentConfig
    from websailor.models.base import ChatModel, Generation
    from websailor.models.embedded import ensure_smollm2
    from websailor.tools.environment import EnvSpec, open_environment

    tok = AutoTokenizer.from_pretrained(ensure_smollm2())

    def length(messages: list[dict]) -> int:
        return len(tok(tok.apply_chat_template(messages, tokenize=False))["input_ids"])

    class Browser(ChatModel):
        """Searches and visits :data:`PAGES` in turn until the conversation is long enough."""

        def __init__(self, answer: str, offset: int, tokens: int) -> None:
            self.name, self.max_context, self.answer, self.offset = "smollm2", 10**6, answer, offset
            self.tokens = tokens

        def generate(self, conversations, params):  # noqa: ANN001
            out = []
            for messages in conversations:
                used = length(messages)
                turn = sum(m["role"] == "assistant" for m in messages)
                page = PAGES[(turn // 2 + self.offset) % len(PAGES)]
                if used > self.tokens - 200:
                    reply = (
                        f"<think>The pages say the river is the {self.answer}.</think>\n<answer>{self.answer}</answer>"
                    )
                else:
                    name, args = (
                        ("search", {"query": [f"{page} history"]})
                        if turn % 2 == 0
                        else (
                            "visit",
                            {"url": f"https://en.wikipedia.org/wiki/{page.replace(' ', '_')}", "goal": QUESTION},
                        )
                    )
                    call = _json.dumps({"name": name, "arguments": args})
                    reply = f"<think>I will look at {page}.</think>\n<tool_call>\n{call}\n</tool_call>"
                out.append(Generation(reply, used, len(tok(reply)["input_ids"])))
            return out

    env = open_environment(EnvSpec(corpus=corpus))
    try:
        runs = []
        for i in range(n):
            agent = Agent(
                Browser("Seine" if i % 2 == 0 else "Loire", i, tokens if isinstance(tokens, int) else tokens[i]),
                env.tools,
                AgentConfig(max_calls=100, max_context_tokens=10**6),
            )
            run = agent.run(QUESTION, "river", i, "Seine").to_dict()
            runs.append({**run, "_tokens": length(run["messages"])})
        return runs
    finally:
        env.close()


def measure(cfg: dict) -> dict:
    """Run one configuration in a fresh process; its peak RSS (MB) and seconds per step."""
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(cfg)], capture_output=True, text=True, cwd=ROOT, check=False
    )
    if proc.returncode:
        raise SystemExit(f"{cfg['kind']} {cfg['label']} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


#: the settings measured (see the module docstring)
SETTINGS = {
    "fp32": {"precision": "fp32", "gradient_checkpointing": True, "memory_limits": True},
    "memory": {"precision": "bf16", "gradient_checkpointing": True, "memory_limits": True},
    "bf16": {"precision": "bf16", "gradient_checkpointing": False, "memory_limits": False},
    "bf16_ckpt": {"precision": "bf16", "gradient_checkpointing": True, "memory_limits": False},
}


def main() -> None:
    """Measure SFT and RL under each setting, print the figures and the ratios to fp32, save them."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=1730, help="tokens per trajectory")
    ap.add_argument("--batch", type=int, default=2, help="SFT trajectories per optimizer step")
    ap.add_argument("--rollouts", type=int, default=8, help="rollouts in the RL group")
    ap.add_argument("--steps", type=int, default=3, help="SFT optimizer steps")
    ap.add_argument("--only", choices=("sft", "rl"), help="measure one of the two")
    ap.add_argument("--labels", default=",".join(SETTINGS), help="which settings to run (comma-separated)")
    a = ap.parse_args()
    from _common import vital_source

    from websailor.corpus import CorpusBuildConfig, build_corpus

    labels = [x for x in a.labels.split(",") if x]
    unknown = [x for x in labels if x not in SETTINGS]
    if unknown:
        raise SystemExit(f"--labels: unknown {unknown}; choose from {list(SETTINGS)}")
    results: dict = {"tokens": a.tokens, "batch": a.batch, "rollouts": a.rollouts, "sft_steps": a.steps}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = build_corpus(
            CorpusBuildConfig(source=vital_source(), format="vital", out=tmp / "corpus", show_progress=False)
        )
        runs = long_trajectories(max(2, a.rollouts, a.batch), a.tokens, corpus)
        results["trajectory_tokens"] = [r.pop("_tokens") for r in runs]
        print(f"trajectories: {results['trajectory_tokens']} tokens")
        sft_file = tmp / "sft.jsonl"
        sft_file.write_text("".join(json.dumps(r) + "\n" for r in runs[: a.batch]))
        rl_file = tmp / "rl.jsonl"
        rl_file.write_text("".join(json.dumps(r) + "\n" for r in runs[: a.rollouts]))
        qa = tmp / "qa.jsonl"
        qa.write_text(json.dumps({"id": "river", "question": QUESTION, "answer": "Seine"}) + "\n")
        for kind in ("sft", "rl"):
            if a.only and kind != a.only:
                continue
            for label in labels:
                cfg = {
                    "kind": kind,
                    "label": label,
                    "out": str(tmp / f"{kind}-{label}"),
                    "config": str(ROOT / "configs" / kind / "cpu_mini.yaml"),
                    "settings": SETTINGS[label],
                    "tokens": a.tokens,
                    "steps": a.steps,
                    "batch": a.batch,
                    "trajs": str(sft_file if kind == "sft" else rl_file),
                    "qa": str(qa),
                    "corpus": str(corpus),
                }
                r = measure(cfg)
                results[f"{kind}_{label}"] = r
                print(f"{kind} {label}: peak {r['peak_mb']:,.0f} MB, {r['step_s']:.1f} s/step", flush=True)
            base = results.get(f"{kind}_fp32")
            for label in labels:
                if base is None or label == "fp32":
                    continue
                f = results[f"{kind}_{label}"]
                results[f"{kind}_{label}"]["speedup_vs_fp32"] = base["step_s"] / f["step_s"]
                results[f"{kind}_{label}"]["peak_vs_fp32"] = f["peak_mb"] / base["peak_mb"]
                print(
                    f"{kind} {label}: {base['step_s'] / f['step_s']:.2f}x the speed of fp32, "
                    f"{f['peak_mb'] / base['peak_mb']:.2f}x its peak memory"
                )
    write_results("train_memory" + (f"_{a.only}" if a.only else ""), results, a)


if __name__ == "__main__":
    main()
