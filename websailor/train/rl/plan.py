"""What an RL run settles before it trains: the model, the items and the run's identity,
checked before anything is written (:func:`plan_run`), and the items narrowed to the
prefilter's moderate band (:func:`choose_items`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from websailor.errors import ConfigError
from websailor.log import get_logger
from websailor.models.turns import TurnTemplate
from websailor.questions import resolve_split
from websailor.train.common import load_tokenizer, memory_record, resolve_model_dir, world_size
from websailor.train.rl.prefilter import (
    check_prefilter_record,
    prefilter_from_file,
    prefilter_items,
    prefilter_source,
)
from websailor.train.rl.resume import check_enough, data_digest, holds_other_run
from websailor.train.rl.settings import (
    ADDED_SETTINGS,
    CONTINUABLE,
    PREFILTER_FILE,
    SETTINGS_FILE,
    SUMMARY_FILE,
    RLSettings,
    accumulation_steps,
    build_agent_config,
    training_questions,
)
from websailor.train.run_folder import FORMAT_KEY, RUN_FORMAT, check_resume

if TYPE_CHECKING:
    from websailor.tools.environment import EnvSpec

logger = get_logger(__name__)


@dataclass
class RunPlan:
    """What :func:`~websailor.train.rl.trainer.train_rl` settles before anything is written:
    the model, the items, the run's identity and whether it resumes."""

    data_path: str | Path
    model: str
    model_dir: Path
    tokenizer: Any
    out: Path
    settings: RLSettings
    split: str | None
    items: list
    record: dict
    resume: Path | None
    stale: set[str]  # the settings in which a run that never trained differs (empty: none there or ours)
    accumulation: int
    prefilter_counts: dict | None = None
    #: experiment trackers of the trainer (not part of the identity: a resume may report elsewhere)
    report_to: tuple[str, ...] = ()

    @property
    def step0(self) -> int:
        """The optimizer steps already taken (from the checkpoint resumed)."""
        return int(self.resume.name.rpartition("-")[2]) if self.resume else 0

    def summary(self, steps: int, precision: Any, limits: dict) -> dict[str, Any]:
        """What ``rl_summary.json`` says of the run, less its time and log."""
        return {
            "model": self.model,
            "data": str(self.data_path),
            "split": self.split,
            "settings": self.settings.model_dump(),
            "questions": len(self.items),
            "prefilter": self.prefilter_counts,
            "steps": steps,
            "gradient_accumulation": self.accumulation,
            "bf16": precision.bf16,
            "precision": precision.record(),
            "memory": memory_record(self.settings, limits),
        }


def plan_run(
    data_path: str | Path, model: str, out: Path, settings: RLSettings, split: str | None, env: EnvSpec
) -> RunPlan | dict:
    """Check everything that can be checked before a file is written; the finished run's
    summary when ``out`` already holds it.

    Raises:
        ConfigError, InputFormatError: as :func:`~websailor.train.rl.trainer.train_rl`.
    """
    import importlib.util

    from websailor.judge import load_judge

    if env.kind == "none" and env.tools_url is None:
        raise ConfigError("--env none has no tools to train with; use local or web")
    world = world_size()
    accumulation = accumulation_steps(settings, world)
    if world > 1 and settings.prefilter and not settings.prefilter_from and not (out / PREFILTER_FILE).exists():
        raise ConfigError(
            f"--prefilter samples its rollouts in one process, and this run has {world}: rate the items first "
            f"(websailor eval --bench DATA --split train --rollouts {settings.prefilter} --model MODEL --out "
            "EVAL_DIR) and pass --prefilter-from EVAL_DIR, or run the prefilter without the launcher"
        )
    # the files named first: a missing one is refused before the model is fetched or converted
    if settings.prefilter_from and not (out / PREFILTER_FILE).exists():
        prefilter_source(settings.prefilter_from)  # a missing --prefilter-from (a resumed run needs it no more)
    if settings.rubric is not None:
        from websailor.train.rl.report_reward import read_rubric

        read_rubric(settings.rubric)  # an unusable rubric
    model_dir = resolve_model_dir(model)
    tokenizer = load_tokenizer(model_dir)
    TurnTemplate(tokenizer, model)  # refuses a template whose turns cannot be assembled exactly
    load_judge(settings.reward)  # a bad spec is refused before anything is written
    if settings.weight_transfer == "nccl" and importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            "weight_transfer nccl streams the weights with vLLM's NCCL code, and vLLM is not installed beside the "
            "trainer (a GPU machine: pip install vllm); or use weight_transfer file"
        )
    if settings.sync_dir is not None:
        from websailor.train.rl.sync import check_sync_dir

        check_sync_dir(settings.sync_dir)
    if settings.use_vllm and importlib.util.find_spec("vllm") is None:
        raise ConfigError("use_vllm: vLLM is not installed; install a release TRL supports, or set use_vllm: false")
    if settings.task == "report":
        from websailor.train.rl.report_reward import report_training_tasks

        if split is not None:
            raise ConfigError("--split selects a synth file's items; report tasks have none")
        items, _ = report_training_tasks(data_path, settings.language)
    else:
        split = resolve_split(data_path, split, "train")
        items = training_questions(data_path, split)
    check_enough(items, settings, "the data")
    record = {
        "model": model,
        "data_sha256": data_digest(data_path, items),
        "split": split,
        # at the value older runs had, a setting added since is not part of the identity (their folders resume)
        **settings.model_dump(exclude={k for k, v in ADDED_SETTINGS.items() if getattr(settings, k) == v}),
        FORMAT_KEY: RUN_FORMAT,
    }
    record.update(env.record())  # nothing for the default local environment: older runs keep their record
    stale = holds_other_run(out, record)
    resume = check_resume(out, record, SETTINGS_FILE, SUMMARY_FILE, "RL", ignore=CONTINUABLE)
    if (out / SUMMARY_FILE).exists():
        done = json.loads((out / SUMMARY_FILE).read_text(encoding="utf-8"))
        if settings.max_steps is None or done["steps"] >= settings.max_steps or resume is None:
            logger.info("%s already holds the finished model of this run (%d steps)", out, done["steps"])
            return done
        logger.info("%s: continuing the finished run of %d steps to %d", out, done["steps"], settings.max_steps)
    return RunPlan(
        data_path, model, model_dir, tokenizer, out, settings, split, items, record, resume, stale, accumulation
    )


def choose_items(run: RunPlan, judge: Any, tools: dict, env_name: str, policy: str, progress: bool) -> None:
    """Narrow ``run.items`` to the prefilter's moderate items (kept from a resumed run's
    ``prefilter.json``, rated from ``prefilter_from``, or sampled with ``policy``, a model
    spec), and record the counts in ``run.prefilter_counts``.

    Raises:
        ConfigError: no item, or too few for a batch, left.
    """
    from websailor.agent.loop import Agent
    from websailor.models import load_model

    settings, out = run.settings, run.out
    prefiltering = bool(settings.prefilter or settings.prefilter_from)
    if not prefiltering:
        return
    if (out / PREFILTER_FILE).exists():  # a resumed run keeps its items
        saved = json.loads((out / PREFILTER_FILE).read_text(encoding="utf-8"))
        check_prefilter_record(out / PREFILTER_FILE, saved, settings)
        kept_ids = set(saved["kept_ids"])
        run.items = [it for it in run.items if it.id in kept_ids]
        run.prefilter_counts = {k: v for k, v in saved.items() if k != "kept_ids"}
    elif settings.prefilter_from:
        run.items, run.prefilter_counts = prefilter_from_file(
            run.items,
            settings.prefilter_from,
            judge,
            settings.prefilter,
            settings.prefilter_band,
            record=out / PREFILTER_FILE,
            max_env_failures=settings.max_env_failures,
            sampling=build_agent_config(settings).sampling.distribution(),  # the training rollouts' own
        )
    else:
        start = Agent(load_model(policy), tools, build_agent_config(settings), env=env_name)
        try:
            run.items, counts = prefilter_items(
                run.items,
                start,
                judge,
                settings.prefilter,
                out / "prefilter_rollouts.jsonl",
                settings.concurrency,
                progress,
                record=out / PREFILTER_FILE,
                band=settings.prefilter_band,
                max_env_failures=settings.max_env_failures,
            )
            run.prefilter_counts = {"k": settings.prefilter, "band": settings.prefilter_band, **counts}
        finally:
            start.model.close()
    if not run.items:
        raise ConfigError(
            f"no moderate items left after the prefilter ({out / PREFILTER_FILE}): start from a "
            "stronger model, use other items, or train without --prefilter"
        )
    check_enough(run.items, settings, "the prefilter's moderate items")
