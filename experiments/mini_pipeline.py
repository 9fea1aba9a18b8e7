"""The base -> SFT -> RL experiment on two CPU cores: synthesize a difficulty ladder, build
verifying constructive trajectories with compact observations, fine-tune SmolLM2-135M, check
that RL can overfit a handful of items, train with V2 RL on the moderate items (and DUPO at the
same budget), and evaluate the base, SFT and RL models on the held-out items by level.

Every stage is a `websailor` command, printed before it runs, so the experiment is also a
recipe; each one resumes, so rerunning the script after an interruption continues it. The run
directory keeps every stage's files and ``settings.json``; a rerun with other settings (levels,
observations, model, seed, sizes) is refused before anything runs, and so is a stage whose
inputs are missing (the message names the stage that makes them).

Rollouts (evaluations, the prefilter, RL) are sampled on a vLLM server that the script starts
for the stage's model (``--engine vllm``; ``auto`` when ``make vllm`` built one), and RL syncs
its weights to that server every step; ``--engine local`` uses the in-process engine.

    python experiments/mini_pipeline.py --out runs/ladder                       # every stage
    python experiments/mini_pipeline.py --out runs/ladder --until eval_sft      # the cold start only
    python experiments/mini_pipeline.py --out runs/ladder --rl-steps 60         # continue RL further
    python experiments/mini_pipeline.py --out runs/ladder --publish experiments/results/ladder
    python experiments/mini_pipeline.py status --out runs/ladder                # where it stands, what is left

The run folder can live anywhere (``--out ~/runs/ladder``, outside the checkout: a checkout laid
anew does not lose it); every stage resumes from its files, SFT and RL at step granularity.

Writes OUT/results.json and OUT/results.md (the tables and the per-stage wall time, items or
rollouts and peak resident memory) and the same figures with the context of the run (machine,
commit, arguments) to OUT/mini_pipeline.json; ``--publish DIR`` copies the run's small outputs
(settings, summaries, scores, RL step logs and rollouts; no model) there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline_common import ROOT, VITAL_QUESTIONS, WS, note_checkout, search_baseline, served  # noqa: E402
from pipeline_report import MODELS, report  # noqa: E402
from pipeline_settings import (  # noqa: E402
    ADDED,
    LAYOUT,
    build_parser,
    check_settings,
    layout_difference,
    option_text,
    parse_args,
    with_config_digests,
)
from pipeline_status import STAGES, read_results  # noqa: E402

from websailor.models.vllm_launch import rollout_engine  # noqa: E402

#: what each stage reads, and the stage that makes it
NEEDS = {
    "traj": (("qa.jsonl", "synth"),),
    "sft": (("sft_trajectories.jsonl", "traj"),),
    "eval_base": (("qa.jsonl", "synth"),),
    "eval_sft": (("sft_model/sft_summary.json", "sft"), ("qa.jsonl", "synth")),
    "prefilter": (("sft_model/sft_summary.json", "sft"), ("qa.jsonl", "synth")),
    "sanity": (
        ("sft_model/sft_summary.json", "sft"),
        ("eval_sft_train/summary.json", "prefilter"),
        ("qa.jsonl", "synth"),
    ),
    "rl": (("sft_model/sft_summary.json", "sft"), ("eval_sft_train/summary.json", "prefilter"), ("qa.jsonl", "synth")),
    "eval_rl": (("rl_model/rl_summary.json", "rl"), ("qa.jsonl", "synth")),
    "dupo": (
        ("sft_model/sft_summary.json", "sft"),
        ("eval_sft_train/summary.json", "prefilter"),
        ("qa.jsonl", "synth"),
    ),
    "eval_dupo": (("dupo_model/rl_summary.json", "dupo"), ("qa.jsonl", "synth")),
    "throughput": (("sft_model/sft_summary.json", "sft"), ("qa.jsonl", "synth")),
}
#: the models of the test tables, in order, and the run directory of each trained one
MODEL_DIRS = {"sft": "sft_model", "rl": "rl_model", "dupo": "dupo_model"}


#: Seconds a stopped stage gets to end its step and clean up (stop its server) before SIGKILL.
STOP_WAIT_S = 180
#: Seconds between two records of a running stage's time (``results.json``), and between two
#: looks at whether it has ended.
RECORD_EVERY_S, POLL_S = 60.0, 0.5


def run_stage(
    name: str, args: list[str], stages: dict, program: str = WS, save: Callable[[], None] | None = None
) -> None:
    """Run one `websailor` command (or ``program``); record its wall time and peak resident
    memory (MB), also when it fails or is interrupted (``status`` reads the time spent). While it
    runs, the time so far is recorded and ``save`` called every :data:`RECORD_EVERY_S` seconds, so
    a run killed outright (SIGKILL, a machine handed back) loses at most that much of its record."""
    shown = "websailor" if program == WS else "python"
    print(f"\n[{name}] $ {shown} " + " ".join(shlex.quote(a) for a in args), flush=True)
    t0 = time.perf_counter()
    rec = stages.setdefault(name, {"wall_s": 0.0, "peak_rss_mb": 0.0, "runs": 0})
    before = rec["wall_s"]
    rec["runs"] += 1
    proc = subprocess.Popen([program, *args])
    usage = None
    try:
        recorded = t0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            time.sleep(POLL_S)
            if save is not None and time.perf_counter() - recorded >= RECORD_EVERY_S:
                recorded = time.perf_counter()
                rec["wall_s"] = round(before + recorded - t0, 1)
                save()
    except BaseException:  # Ctrl-C or SIGTERM of the script: the stage stops too, and cleans up
        usage = None
        proc.terminate()
        print(f"[{name}] stopping (a training step ends first; at most {STOP_WAIT_S} s)", file=sys.stderr, flush=True)
        try:
            proc.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    finally:
        rec["wall_s"] = round(before + time.perf_counter() - t0, 1)
        if usage is not None:
            rec["peak_rss_mb"] = max(rec["peak_rss_mb"], round(usage.ru_maxrss / 1024, 1))
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"[{name}] failed with exit code {proc.returncode}; rerun the script to resume")
    rec["finished"] = True


def stage_of(name: str) -> str:
    """The stage (of :data:`STAGES`) a step belongs to: ``transfer`` for ``transfer_MODEL``, each
    model's evaluation of the hand-written questions; the name itself otherwise."""
    return "transfer" if name.startswith("transfer_") else name


class Finished:
    """``finished(stage)``: whether a stage's files say it is done (:func:`pipeline_status.stage_progress`:
    an evaluation with every rollout in, none to run or grade again; an RL run of the steps
    asked for; ``transfer_MODEL`` as an evaluation of the hand-written questions), so that a resumed
    run neither runs its command again nor starts a vLLM server for it (about 100 s each, on two
    cores). A stage in ``forced`` (named by ``--only``) is never done."""

    def __init__(self, out: Path, settings: dict, results: dict, forced: tuple[str, ...] = ()) -> None:
        self.out, self.settings, self.results, self.forced = out, settings, results, set(forced)
        self.said: set[str] = set()

    def __call__(self, name: str) -> bool:
        if stage_of(name) in self.forced:
            return False
        if name.startswith("transfer_"):
            from pipeline_status import TRANSFER_QUESTIONS, evaluation_done

            done = evaluation_done(self.out / name, TRANSFER_QUESTIONS * int(self.settings["k"]))[1]
        else:
            from pipeline_status import stage_progress

            # a copy: stage_progress adds the transfer stage's record, which is no stage of the script
            row = stage_progress(self.out, self.settings, json.loads(json.dumps(self.results))).get(name)
            done = row is not None and row["state"] == "done"
        if done and name not in self.said:
            self.said.add(name)
            print(f"[{name}] done (its files say so): skipped", flush=True)
        return done


def missing_inputs(out: Path, wanted: tuple[str, ...]) -> list[str]:
    """What the wanted stages read that is not there and that no wanted stage earlier in the
    run makes: one line per missing file, naming the stage that makes it."""
    lines = []
    for name in wanted:
        for rel, maker in NEEDS.get(name, ()):
            made_now = maker in wanted and STAGES.index(maker) < STAGES.index(name)
            if not made_now and not (out / rel).exists():
                lines.append(f"stage {name} needs {out / rel}, which stage {maker} makes (--only {maker})")
    return lines


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


def status_command(argv: list[str]) -> int:
    """``status --out DIR``: each stage's state, progress, time spent and left, and the command
    that continues the run (:mod:`pipeline_status`)."""
    from pipeline_status import status

    defaults = {a.dest: a.default for a in build_parser()._actions if a.dest != "help"}
    return status(argv, LAYOUT, layout_difference, defaults, option_text, ADDED)


class Run:
    """One run of the script over its folder: the arguments, the stages wanted, the records in
    ``OUT/results.json`` (written after every stage), the rollout engine; runs a stage's command
    unless its files say it is done, and starts a stage's vLLM server only for a stage it runs.

    Raises:
        SystemExit: (on construction) a folder of other settings or layout, an ``--only`` that
            names no stage, or a wanted stage whose inputs no wanted stage makes.
    """

    def __init__(self, a: argparse.Namespace) -> None:
        self.a, self.out = a, a.out
        # paths as absolute ones, so that the same file written another way is the same setting
        settings = {key: str(v.resolve()) if isinstance(v, Path) else v for key, v in vars(a).items()}
        self.settings = with_config_digests(settings) | {"out": str(a.out), "layout": LAYOUT}
        check_settings(self.out, self.settings)
        self.wanted = wanted_stages(a)
        missing = missing_inputs(self.out, self.wanted)
        if missing:
            raise SystemExit("\n".join(missing))
        self.results_path = self.out / "results.json"
        self.results = read_results(self.results_path)
        self.out.mkdir(parents=True, exist_ok=True)
        note_checkout(self.out)  # --publish from another checkout strips this one's paths too
        (self.out / "settings.json").write_text(json.dumps(self.settings, indent=2))
        self.stages = self.results.setdefault("stages", {})
        self.results["settings"] = self.settings
        self.engine = rollout_engine(a.engine)
        # a stage named in --only runs (and gets its server) even when its files say done
        self.finished = Finished(self.out, self.settings, self.results, forced=self.wanted if a.only else ())
        # the run's files
        out = self.out
        self.qa, self.pool, self.traj = out / "qa.jsonl", out / "traj_pool.jsonl", out / "sft_trajectories.jsonl"
        self.rated = out / "eval_sft_train"  # the SFT model on training items: RL's --prefilter-from
        self.sanity_qa, self.sanity = out / "sanity_qa.jsonl", out / "rl_sanity"
        self.rl_runs = {"rl": ("v2", out / "rl_model"), "dupo": ("dupo", out / "dupo_model")}
        self.models = {"base": a.model, **{name: f"hf:{out / d}" for name, d in MODEL_DIRS.items()}}

    # -- the stages' shared arguments ------------------------------------------------------
    @property
    def obs(self) -> list[str]:
        return ["--observations", self.a.observations]

    @property
    def local(self) -> list[str]:
        """--engine local: the stages' own commands start no server either (the script starts them for vllm)."""
        return ["--engine", "local"] if self.engine == "local" else []

    @property
    def agent(self) -> list[str]:
        a = self.a
        return ["--max-calls", str(a.max_calls), "--max-tokens", str(a.max_tokens), "--concurrency", str(a.concurrency)]

    def rl_common(self, group_size: int, batch: int, lr: float) -> list[str]:
        """The options every ``train rl`` of the run shares, with a step of ``batch`` rollouts in
        groups of ``group_size`` at learning rate ``lr``."""
        a = self.a
        return [
            *["--config", str(a.rl_config)],
            *["--group-size", str(group_size), "--batch", str(batch), "--lr", str(lr)],
            *self.agent,
            *self.obs,
            *self.local,
        ]

    @property
    def test_items(self) -> list[str]:
        """The held-out items every model is evaluated on, ``--k`` rollouts each."""
        a = self.a
        return ["--bench", str(self.qa), "--split", "test", "--limit", str(a.eval_limit), "--rollouts", str(a.k)]

    def rollout_server(self, name: str, spec: str) -> list[str]:
        """``--rollout-server SPEC`` for an RL stage that runs on a vLLM server."""
        return ["--rollout-server", spec] if self.engine == "vllm" and stage_of(name) in self.wanted else []

    # -- running ---------------------------------------------------------------------------
    def save(self) -> None:
        self.results_path.write_text(json.dumps(self.results, indent=2))

    def stage(self, name: str, args: list[str], program: str = WS) -> None:
        """Run stage ``name``'s command (``websailor ARGS``, or ``program ARGS``) when it is
        wanted and not done; the records are written whatever happens."""
        if self.runs(name):
            try:
                run_stage(name, args, self.stages, program=program, save=self.save)
            finally:
                self.save()

    def evaluate(self, name: str, model: str, items: list[str]) -> None:
        """Stage ``name`` (or a ``transfer_MODEL`` step): ``websailor eval`` of ``model`` on
        ``items`` into ``OUT/name`` (the prefilter: ``OUT/eval_sft_train``), on a server of its own."""
        folder = self.rated if name == "prefilter" else self.out / name
        rl_sampler = name == "prefilter" and self.a.prefilter_sampler == "rl" and self.runs(name)
        sampler = self.rl_sampler() if rl_sampler else []
        with self.serve(name, model) as spec:
            self.stage(
                name,
                ["eval", *items, "--model", spec, "--out", str(folder), *self.agent, *self.local, *self.obs, *sampler],
            )

    def rl_sampler(self) -> list[str]:
        """``eval``'s options that sample as the RL runs do (``--rl-config``'s temperature and
        top-p, no presence penalty: the sampler of
        :func:`websailor.train.rl.settings.build_agent_config`)."""
        from websailor.models.base import sampling_options
        from websailor.train.rl import load_settings
        from websailor.train.rl.settings import build_agent_config

        return sampling_options(build_agent_config(load_settings(self.a.rl_config)).sampling.distribution())

    def runs(self, name: str) -> bool:
        """Whether stage ``name`` runs now: wanted, and its files do not say it is done."""
        return stage_of(name) in self.wanted and not self.finished(name)

    def serve(self, name: str, model: str) -> contextlib.AbstractContextManager[str]:
        """The model spec stage ``name`` samples from: a vLLM server for ``model`` while the
        stage runs; ``model`` itself for a stage not run (not wanted, or done: no server)."""
        if not self.runs(name):
            return contextlib.nullcontext(model)
        return served(model, self.engine, self.out / "logs", name, self.a.max_model_len)


def wanted_stages(a: argparse.Namespace) -> tuple[str, ...]:
    """The stages ``--until`` or ``--only`` ask for, in order.

    Raises:
        SystemExit: an ``--only`` that names no stage, or one that is not a stage.
    """
    if a.only is None:
        return STAGES[: STAGES.index(a.until) + 1]
    wanted = tuple(x.strip() for x in a.only.split(",") if x.strip())
    if not wanted:
        raise SystemExit(f"--only {a.only!r} names no stage; the stages are {', '.join(STAGES)}")
    unknown = [x for x in wanted if x not in STAGES]
    if unknown:
        raise SystemExit(f"--only: no stage {', '.join(unknown)}; the stages are {', '.join(STAGES)}")
    return wanted


def cold_start(run: Run) -> None:
    """Synthesis, trajectories, SFT, and the base and SFT models on the test split."""
    a, qa = run.a, run.qa
    run.stage(
        "synth",
        ["synth", "--n", str(a.items), "--out", str(qa), "--seed", str(a.seed), "--level", a.levels]
        + ["--test-fraction", str(a.test_fraction), "--described-share", str(a.described_share), *run.obs],
    )
    if qa.exists():
        check_splits(qa, a.test_fraction)
    if "synth" in run.wanted and not (run.out / "qa_stats.txt").exists():
        stats = subprocess.run([WS, "synth", "stats", str(qa)], check=True, capture_output=True, text=True).stdout
        (run.out / "qa_stats.txt").write_text(stats)
        print(stats)
    run.stage(
        "traj",
        ["traj", "build", "--source", "constructive", "--qa", str(qa), "--split", "train", "--out", str(run.pool)]
        + ["--distractor-share", str(a.distractor_share), *run.obs]
        + ["--question-query" if a.question_query else "--no-question-query"],
    )
    # --sft-items of the pool (0: all), --lookup-share of them lookups (grounded.py's recipe: 100, half)
    run.stage(
        "traj",
        ["traj", "select", "--from", str(run.pool), "--out", str(run.traj), "--n", str(a.sft_items)]
        + ["--lookup-share", str(a.lookup_share), "--seed", str(a.seed)],
    )
    sft = run.out / MODEL_DIRS["sft"]
    run.stage(
        "sft",
        ["train", "sft", "--data", str(run.traj), "--out", str(sft), "--model", a.model, "--config", str(a.sft_config)],
    )
    for name in ("base", "sft"):
        run.evaluate(f"eval_{name}", run.models[name], run.test_items)


def check_splits(qa: Path, test_fraction: float) -> None:
    """Refuse, in one line, a ``qa.jsonl`` whose train or test split is empty.

    Synthesis draws each item's split from its id, so no ``--items`` count guarantees both; a
    split left empty would otherwise stop the run only at the stage that reads it (trajectories
    for train, the evaluations for test).

    Raises:
        SystemExit: a split without items (with the counts and what to do).
    """
    counts = {"train": 0, "test": 0}
    for number, line in enumerate(qa.read_text().splitlines(), 1):
        if line.strip():
            try:
                split = json.loads(line).get("split")
            except (json.JSONDecodeError, AttributeError):
                raise SystemExit(
                    f"[synth] {qa} line {number} is not a QA item; rerun synth into another --out"
                ) from None
            counts[split] = counts.get(split, 0) + 1
    empty = [name for name in ("train", "test") if not counts[name]]
    if empty:
        raise SystemExit(
            f"[synth] {qa} has no item in split {empty[0]!r} ({counts['train']} train, {counts['test']} test at "
            f"--test-fraction {test_fraction:g}): synthesize more with a larger --items and another --out"
        )


def rl_stages(run: Run) -> None:
    """The prefilter, the overfitting check on a few moderate items, V2 and DUPO from the SFT
    model (each then on the test split), and DUPO's throughput against dynamic sampling."""
    a, sft = run.a, run.models["sft"]
    train_items = ["--bench", str(run.qa), "--split", "train", "--limit", str(a.prefilter_limit)]
    run.evaluate("prefilter", sft, [*train_items, "--rollouts", str(a.prefilter_k)])
    if "sanity" in run.wanted and not run.sanity_qa.exists():
        draw_sanity_items(run)
    with run.serve("sanity", sft) as spec:
        run.stage(
            "sanity",
            ["train", "rl", "--data", str(run.sanity_qa), "--split", "all", "--model", sft, "--out", str(run.sanity)]
            + [
                "--max-steps",
                str(a.sanity_steps),
                *run.rl_common(a.sanity_group_size, a.sanity_group_size, a.sanity_lr),
            ]
            + run.rollout_server("sanity", spec),
        )
    for name, (algo, path) in run.rl_runs.items():
        with run.serve(name, sft) as spec:
            run.stage(
                name,
                ["train", "rl", "--data", str(run.qa), "--split", "train", "--model", sft, "--out", str(path)]
                + ["--algo", algo, "--prefilter-from", str(run.rated), "--max-steps", str(a.rl_steps)]
                + run.rl_common(a.group_size, a.group_size * a.rl_groups, a.rl_lr)
                + run.rollout_server(name, spec),
            )
        run.evaluate(f"eval_{name}", run.models[name], run.test_items)
    # DUPO against dynamic sampling on one live stream of groups of the SFT model (training items)
    with run.serve("throughput", sft) as spec:
        run.stage(
            "throughput",
            [str(ROOT / "benchmarks" / "dupo_throughput.py"), "--model", spec, "--qa", str(run.qa)]
            + ["--stream", str(run.out / "dupo_stream.jsonl"), "--groups", str(a.throughput_groups)]
            + ["--group-size", str(a.group_size), "--batches", "3", "--max-groups", str(a.throughput_max_groups)]
            + ["--max-calls", str(a.max_calls), "--max-tokens", str(a.max_tokens), "--observations", a.observations]
            + ["--results-dir", str(run.out)],
            program=sys.executable,
        )


def draw_sanity_items(run: Run) -> None:
    """``OUT/sanity_qa.jsonl``: ``--sanity-items`` moderate training items of the prefilter.

    Raises:
        SystemExit: the prefilter's rollouts cannot be read, or no item is moderate.
    """
    from websailor.errors import WebsailorError

    a = run.a
    try:
        chosen = moderate_items(run.qa, run.rated, a.prefilter_k, a.sanity_items, a.seed)
    except WebsailorError as e:
        raise SystemExit(
            f"[sanity] the prefilter's rollouts in {run.rated} cannot be read: {e}; rerun --only prefilter"
        ) from None
    if not chosen:
        raise SystemExit(f"no training item in {run.rated} was solved sometimes but not always: no sanity check")
    run.sanity_qa.write_text("".join(json.dumps(it) + "\n" for it in chosen))


def transfer(run: Run) -> None:
    """The hand-written questions (:data:`VITAL_QUESTIONS`) for every model that exists, and
    the search baseline, whose figures go to ``results["transfer"]``; a model whose questions
    are done is skipped."""
    baseline = search_baseline(VITAL_QUESTIONS)
    (run.out / "transfer_baseline.json").write_text(json.dumps(baseline, indent=2))
    bench = ["--bench", str(VITAL_QUESTIONS), "--rollouts", str(run.a.k)]
    for name in MODELS:
        if name != "base" and not (run.out / MODEL_DIRS[name] / "config.json").exists():
            continue
        run.evaluate(f"transfer_{name}", run.models[name], bench)


def main() -> None:
    from websailor.signals import interrupt_on_termination

    if sys.argv[1:2] == ["status"]:
        sys.exit(status_command(sys.argv[2:]))
    interrupt_on_termination()  # a killed run stops the vLLM server of its stage
    run = Run(parse_args())
    cold_start(run)
    rl_stages(run)
    if "transfer" in run.wanted:
        transfer(run)
    report(run.out, run.a, run.results, run.results_path, run.sanity, run.rl_runs)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the stage's server is stopped, its files kept
        print("stopped: rerun the same command to resume from the stage's files", file=sys.stderr)
        sys.exit(130)
