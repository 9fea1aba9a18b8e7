"""Training speed and peak memory of the embedded model (SmolLM2-135M) at long contexts:
tokens per second of the fast defaults against TRL's own path, measured in the same run.

Each configuration runs in a fresh Python process (peak RSS by ``resource.getrusage``):

* ``sft``: ``train_sft`` for ``--steps`` optimizer steps of each ``--sizes`` entry
  (``BATCHxTOKENS``: that many trajectories of about that many tokens per step, one per
  micro-batch). Speed is read from the run's step log (``sft_log.jsonl``) over the steps after
  the first (its allocations and kernel choices are a warm-up): all tokens and loss tokens
  (the assistant replies) per second, and seconds per step.
* ``rl``: ``train_rl`` for one step on a group of ``--rollouts`` rollouts of about the first
  size's tokens each (two answer right, the others wrong, so every rollout carries an
  advantage). The rollout function is replaced by one that hands the trainer these finished
  rollouts through :meth:`~websailor.train.rl.rollouts.AgentRollouts.batch`: grading,
  advantages, tokenization and the trainer's loss are the real ones, only the sampling is
  skipped (so there is no rollout server and no importance-sampling pass:
  ``benchmarks/rl_step.py`` times that).

The trajectories are real multi-turn agent runs over the embedded corpus: a scripted model
searches and visits pages until the conversation holds the size's tokens, then answers. The
settings (``--labels``; ratios against ``trl`` and ``before`` in the same run):

* ``trl``: TRL's own defaults: ``SFTTrainer`` / ``GRPOTrainer`` with bf16 autocast (TRL's
  ``bf16`` default), activation checkpointing of whole layers, TRL's fused LM head (every
  position, fp32 tiles off CUDA), glibc's allocator as it is;
* ``before``: websailor's defaults before the fast path: TRL's head, checkpointing of whole
  layers, the memory limits, and the precision the CPU flags chose (bf16 where
  ``/proc/cpuinfo`` lists ``avx512_bf16`` or ``amx_bf16``);
* ``default``: today's defaults: precision by measurement, the loss-position head, selective
  checkpointing (attention outputs kept), the memory limits;
* ``no_limits``: today's defaults without the memory limits;
* ``fast``: today's defaults without checkpointing or the memory limits (more memory).

The precision measurement (``choose_precision("auto")``: bf16 and fp32 GFLOPS of the model's
shapes on this machine) is printed and saved beside the figures.

Usage::

    python benchmarks/train_memory.py [--sizes 2x1730,1x4096] [--steps 3] [--rollouts 8] [--only sft] [--labels trl,default]
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
if cfg["settings"].pop("plain_checkpointing", False):  # the checkpointing before it kept the attention
    import websailor.train.common as common
    common.selective_checkpointing = lambda model: None
if cfg["kind"] == "sft":
    from websailor.train.sft import load_settings, train_sft
    s = load_settings(None, learning_rate=1e-4, weight_decay=0.1, max_steps=cfg["steps"], batch_size=cfg["batch"],
                      max_length=cfg["tokens"] + 512, warmup_ratio=0.0, save_steps=1000, **cfg["settings"])
    summary = train_sft(cfg["trajs"], "smollm2", out, s, progress=False)
    log = [json.loads(x) for x in (out / "sft_log.jsonl").read_text().splitlines()][1:]  # the first step warms up
    seconds = sum(r["time/step_s"] for r in log)
    result = {"step_s": seconds / len(log), "tokens_per_s": sum(r["tokens"] for r in log) / seconds,
              "loss_tokens_per_s": sum(r["loss_tokens"] for r in log) / seconds,
              "precision": summary["precision"]["precision"], "lm_head": summary["lm_head"]}
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
    if cfg.get("padded"):  # TRL's own forward passes, over the whole batch's padding (benchmarks/rl_padding.py)
        import trl
        import websailor.train.rl.update as update

        class Padded(trl.GRPOTrainer):
            def __init__(self, *args, lm_head=None, **kwargs):
                super().__init__(*args, **kwargs)
                self.lm_head = "trl"

        update.AgentGRPOTrainer = Padded
    n = len(trajs)
    s = load_settings(None, algo="v2", learning_rate=3e-5, group_size=n, batch_size=n, max_steps=1,
                      max_context_tokens=cfg["tokens"] * 2, save_steps=1000, **cfg["settings"])
    summary = train_rl(cfg["qa"], "smollm2", out, s, env=EnvSpec(corpus=cfg["corpus"]), progress=False)
    step = summary["log"][0]
    result = {"step_s": step["time/update_s"], "tokens_per_s": step["num_tokens"] / step["time/update_s"],
              "precision": summary["precision"]["precision"], "lm_head": summary["lm_head"]}
result["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(result))
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


def flags_precision() -> str:
    """The precision ``auto`` chose before it measured: bf16 where ``/proc/cpuinfo`` lists a
    bf16 instruction set (``avx512_bf16`` or ``amx_bf16``), else fp32."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "fp32"
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return "bf16" if {"avx512_bf16", "amx_bf16"} & set(flags) else "fp32"


#: the settings measured (see the module docstring); ``before`` takes its precision from the flags
SETTINGS = {
    "trl": {
        "precision": "bf16",
        "lm_head": "trl",
        "gradient_checkpointing": True,
        "memory_limits": False,
        "plain_checkpointing": True,
    },
    "before": {
        "precision": None,
        "lm_head": "trl",
        "gradient_checkpointing": True,
        "memory_limits": True,
        "plain_checkpointing": True,
    },
    "default": {},
    "no_limits": {"memory_limits": False},
    "fast": {"gradient_checkpointing": False, "memory_limits": False},
}
BASELINES = ("trl", "before")


def parse_sizes(text: str) -> list[tuple[int, int]]:
    """``2x1730,1x4096`` as ``[(2, 1730), (1, 4096)]``."""
    sizes = []
    for part in text.split(","):
        batch, _, tokens = part.strip().partition("x")
        if not (batch.isdigit() and tokens.isdigit()) or int(batch) < 1 or int(tokens) < 300:
            raise SystemExit(f"--sizes: {part!r} is not BATCHxTOKENS (e.g. 2x1730, at least 300 tokens)")
        sizes.append((int(batch), int(tokens)))
    return sizes


def main() -> None:
    """Measure SFT and RL under each setting, print the figures and the ratios, save them."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="2x1730,1x4096", help="SFT steps as BATCHxTOKENS, comma-separated")
    ap.add_argument("--rollouts", type=int, default=8, help="rollouts in the RL group (of the first size's tokens)")
    ap.add_argument("--steps", type=int, default=3, help="SFT optimizer steps (the first is not timed)")
    ap.add_argument("--only", choices=("sft", "rl"), help="measure one of the two")
    ap.add_argument("--labels", default=",".join(SETTINGS), help="which settings to run (comma-separated)")
    a = ap.parse_args()
    from _common import vital_source

    from websailor.corpus import CorpusBuildConfig, build_corpus
    from websailor.precision import choose_precision

    labels = [x for x in a.labels.split(",") if x]
    unknown = [x for x in labels if x not in SETTINGS]
    if unknown:
        raise SystemExit(f"--labels: unknown {unknown}; choose from {list(SETTINGS)}")
    if a.steps < 2 or a.rollouts < 2:
        raise SystemExit("--steps and --rollouts: give at least 2")
    sizes = parse_sizes(a.sizes)
    measured = choose_precision("auto")
    print(measured.describe(), flush=True)
    old = flags_precision()
    results: dict = {"sizes": a.sizes, "rollouts": a.rollouts, "sft_steps": a.steps}
    results["precision"] = {"auto": measured.record(), "by_cpu_flags": old}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = build_corpus(
            CorpusBuildConfig(source=vital_source(), format="vital", out=tmp / "corpus", show_progress=False)
        )
        qa = tmp / "qa.jsonl"
        qa.write_text(json.dumps({"id": "river", "question": QUESTION, "answer": "Seine"}) + "\n")
        runs_by_size = {}
        for batch, tokens in sizes:
            runs = long_trajectories(max(batch, 2 if a.only == "sft" else a.rollouts), tokens, corpus)
            runs_by_size[(batch, tokens)] = runs
            print(f"{batch}x{tokens}: trajectories of {[r['_tokens'] for r in runs]} tokens", flush=True)
        jobs = []
        if a.only != "rl":
            jobs += [("sft", size) for size in sizes]
        if a.only != "sft":
            jobs.append(("rl", sizes[0]))
        for kind, (batch, tokens) in jobs:
            runs = runs_by_size[(batch, tokens)]
            data = tmp / f"{kind}-{batch}x{tokens}.jsonl"
            chosen = runs[:batch] if kind == "sft" else runs[: a.rollouts]
            data.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "_tokens"}) + "\n" for r in chosen))
            key = f"{kind}_{batch}x{tokens}" if kind == "sft" else f"rl_{len(chosen)}x{tokens}"
            figures = results.setdefault(key, {"trajectory_tokens": [r["_tokens"] for r in chosen]})
            for label in labels:
                settings = dict(SETTINGS[label])
                if settings.get("precision", "") is None:
                    settings["precision"] = old
                cfg = {
                    "kind": kind,
                    "label": label,
                    "out": str(tmp / f"{key}-{label}"),
                    "settings": settings,
                    "tokens": tokens,
                    "steps": a.steps,
                    "batch": batch,
                    "trajs": str(data),
                    "qa": str(qa),
                    "corpus": str(corpus),
                }
                r = measure(cfg)
                figures[label] = r
                loss_rate = f", {r['loss_tokens_per_s']:.1f} loss tokens/s" if "loss_tokens_per_s" in r else ""
                print(
                    f"{key} {label} ({r['precision']}, {r['lm_head']} head): {r['tokens_per_s']:.1f} tokens/s{loss_rate}, "
                    f"{r['step_s']:.1f} s/step, peak {r['peak_mb']:,.0f} MB",
                    flush=True,
                )
            for base in BASELINES:
                if base not in figures:
                    continue
                for label in labels:
                    if label in BASELINES:
                        continue
                    ratio = figures[label]["tokens_per_s"] / figures[base]["tokens_per_s"]
                    figures[label][f"speed_vs_{base}"] = round(ratio, 2)
                    print(f"{key} {label}: {ratio:.2f}x the tokens/s of {base}", flush=True)
    write_results("train_memory" + (f"_{a.only}" if a.only else ""), results, a)


if __name__ == "__main__":
    main()
