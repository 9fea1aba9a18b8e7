"""The RL overfitting check: a few RL steps on a handful of synthesized items must raise the
training reward. It guards every change to rollouts, masks, advantages and weight sync: a sign
flip, a stale policy (rollouts from old weights) or a mask that drops the answer's tokens leaves
the reward flat or falling, and the check turns red (exit 1).

1. ``--warm-items`` level-1 items (``synth --level 1``, compact observations) give verifying
   constructive trajectories; the embedded SmolLM2-135M is fine-tuned on them for
   ``--warm-steps`` steps of 2 (the warm start, made once and kept; the base model rarely
   writes the protocol, so RL from it has no reward to raise). ``--model hf:DIR`` skips this.
2. The first ``--pool`` of those items are rated by the warm model (``websailor eval``,
   ``--prefilter-k`` rollouts each at RL's temperature), and the ``--rl-items`` (default 2)
   solved closest to half the time are RL's items: V2 (groups of ``--group-size``, clip-higher,
   no KL) trains on them, one group a step, for ``--steps`` steps at ``--lr``, an overfitting
   rate. Each half of the run visits every item equally often (each epoch visits each item
   once), so the two halves' rewards compare the same items: a first version drew 8 steps from
   7 items, each seen about once, and compared different items (red, -0.19, on item
   difficulty alone). The pool is part of what the warm start learnt, on purpose: a check of
   the RL path needs items the model half knows, and one epoch of SFT leaves more of its own
   items half known than new ones (the ladder's SFT model: Avg@8 26.3 on its training items,
   9.6 on the test split). Rollouts
   are sampled on a vLLM server this script starts (``--engine vllm``; ``auto`` when
   ``make vllm`` built one) with the weights synced every step, or by the local engine.
3. The training reward of the last half of the steps minus the first half, with a 95% bootstrap
   interval over rollouts (:func:`websailor.train.rl_log.reward_gain`): green when the
   interval's lower end is above 0. One run is weak evidence: on one warm start (2026-12-08)
   the on-policy run was green once in three seeds though all three rose (+0.10 to +0.23), so
   read a red run again with ``--rl-seed`` before calling it a regression (docs/benchmarks.md).

Everything is kept under ``--work`` and resumes: a rerun reuses the warm model and continues
or re-reads the RL run (delete ``WORK/rl`` to train again after a change). Prints the reward of
the first and last steps, the interval and the wall time, and writes them to
benchmarks/results/rl_overfit.json::

    python benchmarks/rl_overfit.py                    # warm start (once, about 20 min), then RL (12 steps of 8, ~35 min)
    rm -rf runs/rl_overfit/rl && python benchmarks/rl_overfit.py   # RL again after a change (the rating is kept)
    python benchmarks/rl_overfit.py --flip-advantages  # the control: must be red (~30 min)
    python benchmarks/rl_overfit.py --async 1          # rollouts sampled ahead (max_staleness 1)
    python benchmarks/rl_overfit.py --rl-seed 2        # RL again on the same warm start (WORK/rl-seed2)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import claim_for_model, too_small, write_results  # noqa: E402

WS = str(Path(sys.executable).with_name("websailor"))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--work", type=Path, default=Path("runs/rl_overfit"), help="working folder (resumes)")
    p.add_argument("--model", help="the model RL starts from (hf:DIR); default: the warm start built here")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument(
        "--rl-seed",
        type=int,
        help="the RL run's own seed (sampling, data order), for several runs on one warm start and pool "
        "(in WORK/rl-seedN; results file suffixed _seedN); default --seed",
    )
    p.add_argument("--warm-items", type=int, default=80, help="items whose trajectories the warm start learns")
    p.add_argument("--warm-steps", type=int, default=40, help="SFT steps of 2 trajectories of the warm start")
    p.add_argument("--pool", type=int, default=12, help="warm-start items the prefilter rates for RL")
    p.add_argument("--prefilter-k", type=int, default=4, help="rollouts per pool item of the prefilter")
    p.add_argument("--rl-items", type=int, default=2, help="moderate pool items RL trains on")
    p.add_argument("--steps", type=int, default=12, help="RL steps (a multiple of twice --rl-items)")
    p.add_argument("--group-size", type=int, default=8, help="rollouts a step (the paper's group)")
    p.add_argument(
        "--lr", type=float, default=3e-5, help="RL learning rate (overfitting is the aim; 5e-5 broke groups of 8)"
    )
    p.add_argument("--max-calls", type=int, default=4, help="tool calls per rollout (level 1 needs 2)")
    p.add_argument("--max-tokens", type=int, default=192)
    p.add_argument("--engine", choices=("auto", "vllm", "local"), default="auto")
    p.add_argument(
        "--async",
        dest="max_staleness",
        type=int,
        default=0,
        help="max_staleness K: sample the next batch while one trains (run in WORK/rl-async-K); 0: on-policy",
    )
    p.add_argument(
        "--flip-advantages",
        action="store_true",
        help="the broken-path control: every advantage negated (run in WORK/rl-flipped); exits 0 when the check is red",
    )
    return p.parse_args()


def items(work: Path, a: argparse.Namespace) -> tuple[Path, Path]:
    """Level-1 items, synthesized once: the warm start's, and RL's pool (the first of them)."""
    from websailor.corpus import Corpus
    from websailor.synth import SynthConfig, load_or_build, read_items, synthesize
    from websailor.tools.environment import COMPACT_OBSERVATIONS
    from websailor.tools.local import build_local_tools

    warm, rl = work / "warm_qa.jsonl", work / "rl_qa.jsonl"
    if warm.exists() and rl.exists():
        return warm, rl
    corpus = Corpus.open()
    tools = build_local_tools(corpus, **COMPACT_OBSERVATIONS)
    every = work / "qa.jsonl"
    cfg = SynthConfig(n=a.warm_items, seed=a.seed, test_fraction=0.0, levels=(1,))
    synthesize(load_or_build(corpus), every, cfg, progress=False, tools=tools)
    made = read_items(every)
    rl.write_text("".join(json.dumps(it) + "\n" for it in made[: a.pool]))
    warm.write_text("".join(json.dumps(it) + "\n" for it in made))
    return warm, rl


def warm_start(work: Path, qa: Path, a: argparse.Namespace, question_query: bool = True) -> str:
    """SFT of the embedded model on the constructive trajectories of ``qa`` (opening with a
    search of the question's own text unless ``question_query`` is false); ``hf:DIR``. Resumes:
    a finished model is reused."""
    from websailor.corpus import Corpus
    from websailor.synth import read_items
    from websailor.tools.environment import COMPACT_OBSERVATIONS
    from websailor.tools.local import build_local_tools
    from websailor.train.constructive import build_constructive
    from websailor.train.sft import SFTSettings, train_sft

    trajs, out = work / "warm_trajectories.jsonl", work / "warm_model"
    if (out / "config.json").exists():
        return f"hf:{out}"
    tools = build_local_tools(Corpus.open(), **COMPACT_OBSERVATIONS)
    build_constructive(read_items(qa), tools, trajs, split="all", progress=False, question_query=question_query)
    settings = SFTSettings(
        max_steps=a.warm_steps,
        batch_size=2,
        learning_rate=1e-4,
        warmup_ratio=0.1,
        max_length=4096,
        precision="auto",
        gradient_checkpointing=False,
        memory_limits=False,
        save_steps=a.warm_steps,
        seed=a.seed,
    )
    train_sft(trajs, "smollm2", out, settings)
    return f"hf:{out}"


def rate_pool(work: Path, qa: Path, model: str, spec: str, a: argparse.Namespace) -> tuple[Path, dict]:
    """The pool rated by the model (``websailor eval``, ``--prefilter-k`` rollouts an item at
    RL's temperature): the ``--rl-items`` moderate items solved closest to half the time (ties
    in pool order; counted over graded rollouts, an item needing all k of them) go to
    ``WORK/rl_items.jsonl``. Returns that file and ``{id: correct}`` of every pool item rated.
    Raises SystemExit when fewer items are moderate."""
    from websailor.eval.compare import load_scores
    from websailor.synth import read_items

    rated, chosen = work / "pool_eval", work / "rl_items.jsonl"
    claim_for_model(rated, model)
    args = ["eval", "--bench", str(qa), "--split", "all", "--rollouts", str(a.prefilter_k), "--model", spec]
    args += ["--max-calls", str(a.max_calls), "--max-tokens", str(a.max_tokens), "--observations", "compact"]
    args += ["--engine", "local"] if spec == model else []  # the local engine asked: eval starts no server either
    subprocess.run([WS, *args, "--temperature", "1.0", "--seed", str(a.seed), "--out", str(rated)], check=True)
    graded: dict[str, list[bool]] = {}
    for score in load_scores(rated):
        if score.correct is not None:  # an ungraded rollout (a model error) counts neither way
            graded.setdefault(score.id, []).append(score.correct)
    correct = {q: sum(marks) for q, marks in graded.items()}
    pool = read_items(qa)
    rated_fully = [it for it in pool if len(graded.get(it["id"], [])) == a.prefilter_k]
    moderate = [it for it in rated_fully if 0 < correct[it["id"]] < a.prefilter_k]
    moderate.sort(key=lambda it: abs(correct[it["id"]] - a.prefilter_k / 2))  # stable: pool order on ties
    if len(moderate) < a.rl_items:
        raise SystemExit(
            f"{len(moderate)} of {len(pool)} pool items are moderate (solved 1 to {a.prefilter_k - 1} times of "
            f"{a.prefilter_k}), fewer than --rl-items {a.rl_items}: a larger --pool, or a warm start of more steps"
        )
    chosen.write_text("".join(json.dumps(it) + "\n" for it in moderate[: a.rl_items]))
    return chosen, correct


def rl_dir(work: Path, a: argparse.Namespace) -> Path:
    """The RL run's folder: ``WORK/rl``, ``WORK/rl-flipped`` for the sign-flipped control,
    ``-async-K`` added with rollouts sampled ahead, ``-seedN`` with ``--rl-seed``."""
    name = "rl-flipped" if a.flip_advantages else "rl"
    name = f"{name}-async-{a.max_staleness}" if a.max_staleness else name
    return work / (f"{name}-seed{a.rl_seed}" if a.rl_seed is not None else name)


@contextlib.contextmanager
def flipped_advantages():
    """Negate every advantage the RL step plans (the control that must turn the check red).

    A correct update with the sign flipped lowers the log-probability of the rewarded rollouts,
    so the training reward falls; if it still rises, the check does not test the update.
    """
    from unittest import mock

    import websailor.train.rl.rollouts as rollouts

    plan_batch = rollouts.plan_batch

    def negated(*args, **kwargs):
        plan = plan_batch(*args, **kwargs)
        return dataclasses.replace(plan, advantages=[-x for x in plan.advantages])

    with mock.patch.object(rollouts, "plan_batch", negated):
        yield


def train(work: Path, qa: Path, model: str, a: argparse.Namespace) -> dict:
    """Rate the pool, then the RL run on the chosen items, on a vLLM server when there is one."""
    from websailor.models.vllm_launch import VLLMServer, rollout_engine
    from websailor.tools.environment import COMPACT_OBSERVATIONS, EnvSpec
    from websailor.train.rl import load_settings, train_rl

    engine = rollout_engine(a.engine)
    server = None
    with contextlib.ExitStack() as stack:
        if engine == "vllm":
            server = VLLMServer(model.removeprefix("hf:"), port=0, max_model_len=8192, log_path=work / "vllm.log")
            server.start()
            stack.callback(server.stop)
            server.wait_ready(progress=True)
        chosen, pool_correct = rate_pool(work, qa, model, server.spec if server else model, a)
        settings = load_settings(
            ROOT / "configs" / "rl" / "cpu_ladder.yaml",
            max_steps=a.steps,
            group_size=a.group_size,
            batch_size=a.group_size,
            learning_rate=a.lr,
            max_calls=a.max_calls,
            max_tokens_per_turn=a.max_tokens,
            save_steps=a.steps,
            seed=a.seed if a.rl_seed is None else a.rl_seed,
            rollout_server=server.spec if server else None,
            max_staleness=a.max_staleness,
        )
        with flipped_advantages() if a.flip_advantages else contextlib.nullcontext():
            summary = train_rl(
                chosen, model, rl_dir(work, a), settings, split="all", env=EnvSpec(**COMPACT_OBSERVATIONS)
            )
    summary["engine"] = engine
    summary["startup_s"] = round(server.startup_s or 0.0, 1) if server else None
    summary["pool_correct"] = pool_correct
    summary["rl_items"] = [json.loads(line)["id"] for line in chosen.read_text().splitlines() if line]
    return summary


def main() -> int:
    from websailor.signals import interrupt_on_termination
    from websailor.train.rl_log import reward_gain

    interrupt_on_termination()  # a killed check stops the vLLM server it started
    a = parse_args()
    if not 0 < a.pool <= a.warm_items:
        raise SystemExit(f"--pool {a.pool}: give 1 to --warm-items ({a.warm_items}) items")
    # a moderate item, or a group with spread, needs two rollouts at least
    refusal = too_small(("--prefilter-k", a.prefilter_k, 2), ("--group-size", a.group_size, 2))
    if refusal:
        raise SystemExit(refusal)
    if not 0 < a.lr < float("inf"):
        raise SystemExit(f"--lr {a.lr}: give a finite learning rate above 0")
    refusal = too_small(
        ("--max-tokens", a.max_tokens, 16), ("--max-calls", a.max_calls, 1), ("--async", a.max_staleness, 0)
    )
    if refusal:
        raise SystemExit(refusal)
    if not 0 < a.rl_items <= a.pool or a.steps < 2 or a.steps % (2 * a.rl_items):
        raise SystemExit(
            f"--steps {a.steps} --rl-items {a.rl_items}: give 1 to --pool ({a.pool}) items and a multiple of "
            "twice that many steps, so that each half of the run visits every item equally often"
        )
    a.work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    warm_qa, rl_qa = items(a.work, a)
    model = a.model or warm_start(a.work, warm_qa, a)
    warm_s = time.perf_counter() - t0
    summary = train(a.work, rl_qa, model, a)
    wall = time.perf_counter() - t0
    gain = reward_gain(rl_dir(a.work, a) / "rollouts.jsonl", window=max(1, a.steps // 2))
    if gain is None:
        print("no RL step has rewards: nothing to compare", file=sys.stderr)
        return 1
    log = summary.get("log") or []
    green = gain["diff_ci95"][0] > 0
    figures = {
        "model": model,
        "engine": summary["engine"],
        "pool": a.pool,
        "pool_correct": summary["pool_correct"],
        "prefilter_k": a.prefilter_k,
        "rl_items": summary["rl_items"],
        "steps": gain["steps"],
        "group_size": a.group_size,
        "lr": a.lr,
        "reward_per_step": gain["reward_per_step"],
        "first_window": gain["first"],
        "last_window": gain["last"],
        "diff": gain["diff"],
        "diff_ci95": gain["diff_ci95"],
        "entropy_per_step": [r.get("entropy") for r in log],
        "max_staleness": a.max_staleness,
        "staleness_per_step": [r.get("policy/staleness") for r in log],
        "step_s_per_step": [r.get("time/step_s") for r in log],
        "wall_s": round(wall, 1),
        "warm_start_s": round(warm_s, 1),
        "server_startup_s": summary["startup_s"],
        "green": green,
        "flip_advantages": a.flip_advantages,
        "rl_seed": a.seed if a.rl_seed is None else a.rl_seed,
    }
    lo, hi = gain["diff_ci95"]
    print(f"reward per step: {', '.join(f'{r:.2f}' for r in gain['reward_per_step'])}")
    print(
        f"first {gain['window']} steps {gain['first']:.3f}, last {gain['window']} steps {gain['last']:.3f}: "
        f"difference {gain['diff']:+.3f} (95% CI {lo:+.3f} to {hi:+.3f}); wall {wall:.0f} s "
        f"(warm start {warm_s:.0f} s), engine {summary['engine']}"
    )
    print("GREEN: RL raised the training reward" if green else "RED: the training reward did not rise clearly")
    if a.flip_advantages:
        print(
            "(advantages flipped: red is the expected result, exit 0)"
            if not green
            else "the flipped run rose: the check does not test the update"
        )
        write_results("rl_overfit_flipped", figures, a)
        return 1 if green else 0
    name = f"rl_overfit_async{a.max_staleness}" if a.max_staleness else "rl_overfit"
    write_results(f"{name}_seed{a.rl_seed}" if a.rl_seed is not None else name, figures, a)
    return 0 if green else 1


if __name__ == "__main__":
    sys.exit(main())
