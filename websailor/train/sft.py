"""Cold-start supervised fine-tuning on agent trajectories, with TRL's ``SFTTrainer``.

Defaults are the paper's SFT hyper-parameters (arXiv 2509.13305, Sec. 4 and the WebSailor V1
report): learning rate 5e-6 with linear warm-up and cosine decay, weight decay 0.1, global
batch 32. The loss covers assistant tokens only (:mod:`websailor.train.sft_data`). The same
call runs on a laptop CPU and, launched with ``accelerate launch`` and one of the shipped
``configs/`` files, on several GPUs with DeepSpeed ZeRO-3.

The output directory holds a complete transformers model (LoRA adapters merged) and its
tokenizer, so ``--model hf:DIR`` works in ``run`` and ``eval``; ``checkpoints/`` keeps the
latest checkpoints, from which a stopped run resumes; ``sft_summary.json`` records the
settings, the data counts and the loss history.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from websailor.errors import ConfigError
from websailor.log import get_logger
from websailor.train.common import (  # noqa: F401
    CHECKPOINTING_KWARGS,
    TrainSettings,
    check_report_to,
    is_main_process,
    limit_training_memory,
    load_tokenizer,
    load_trainable_model,
    memory_record,
    read_settings,
    resolve_model_dir,
    save_model,
    tensorboard_dir,
    world_size,
    wrap_lora,
)
from websailor.train.run_folder import (
    FORMAT_KEY,
    RUN_FORMAT,
    check_resume,
    checkpoint_is_final,
    checkpoint_step,
    trim_jsonl,
)
from websailor.train.step_log import SFT_LOG_FILE as LOG_FILE

logger = get_logger(__name__)

SETTINGS_FILE = "sft_settings.json"
SUMMARY_FILE = "sft_summary.json"
#: settings a resumed run may change: they do not change what is trained
CONTINUABLE = ("keep_checkpoints", "logging_steps")


class SFTSettings(TrainSettings):
    """Every knob of an SFT run; a ``--config`` YAML or JSON file holds any subset of them.

    Attributes:
        learning_rate: peak learning rate (paper: 5e-6).
        warmup_ratio: share of the steps spent warming up linearly from 0.
        lr_scheduler: decay after warm-up (paper: cosine).
        weight_decay: AdamW weight decay (paper: 0.1).
        batch_size: trajectories per optimizer step over all devices (paper: 32 to 64); made of
            ``micro_batch_size`` per device per forward and gradient accumulation.
        epochs: passes over the data (ignored when ``max_steps`` is set).
        max_steps: optimizer steps; ``None`` runs ``epochs``.
        max_length: longest trajectory in tokens (paper V1: 32k budget); longer ones are dropped,
            capped by the model's context size.
        (LoRA, precision, LM head, gradient checkpointing, checkpoints kept:
        :class:`websailor.train.common.TrainSettings`.)
        save_steps: optimizer steps between checkpoints (model, optimizer, scheduler, random
            states and the position in the data): a run killed at any moment loses at most
            that many steps, and rerunning the same command resumes from the latest whole one.
        logging_steps: optimizer steps between lines of the step log (``sft_log.jsonl``).
    """

    learning_rate: float = Field(5e-6, gt=0)
    warmup_ratio: float = Field(0.1, ge=0, lt=1)
    lr_scheduler: Literal["cosine", "linear", "constant_with_warmup"] = "cosine"
    weight_decay: float = Field(0.1, ge=0)
    batch_size: int = Field(32, ge=1)
    micro_batch_size: int = Field(1, ge=1)
    epochs: float = Field(3.0, gt=0)
    max_steps: int | None = Field(None, ge=1)
    max_length: int = Field(32768, ge=16)
    save_steps: int = Field(50, ge=1)
    logging_steps: int = Field(1, ge=1)
    seed: int = Field(0, ge=0, lt=2**32)

    @model_validator(mode="after")
    def _micro_within_batch(self) -> SFTSettings:
        if self.micro_batch_size > self.batch_size:
            raise ValueError(
                f"micro_batch_size ({self.micro_batch_size}) is larger than batch_size ({self.batch_size})"
            )
        return self


def load_settings(config: str | Path | None = None, **overrides: Any) -> SFTSettings:
    """SFT settings from an optional YAML/JSON ``config`` file, then ``overrides`` (``None``
    values are ignored, so CLI options left unset keep the file's value).

    Raises:
        ConfigError: unreadable file, unknown keys, or values of the wrong type or range.
    """
    return read_settings(SFTSettings, "SFT", config, **overrides)


def _check_warmup(settings: SFTSettings, n_examples: int, world: int, accumulation: int) -> None:
    """Refuse a run that never leaves warm-up (its first step
    has learning rate 0, and no step reaches the peak: a run of one step changes nothing)."""
    per_epoch = max(1, math.ceil(n_examples / (settings.micro_batch_size * world * accumulation)))
    total = settings.max_steps or max(1, math.ceil(per_epoch * settings.epochs))
    warmup = math.ceil(total * settings.warmup_ratio)
    if warmup and warmup >= total:
        raise ConfigError(
            f"all {total} steps of this run are warm-up (warmup_ratio {settings.warmup_ratio}): the first "
            "has learning rate 0 and none reaches the peak; pass --warmup-ratio 0 or train more steps"
        )


def _logged_seconds(out: Path) -> float | None:
    """The seconds of every step in the run's step log (all sessions of a resumed run)."""
    from websailor.jsonio import read_appended_jsonl

    seconds = [rec.get("time/step_s") for _, rec in read_appended_jsonl(out / LOG_FILE, "a step record")]
    return sum(s for s in seconds if isinstance(s, (int, float))) or None


def train_sft(
    data_path: str | Path | list[str | Path],
    model: str,
    out: str | Path,
    settings: SFTSettings | None = None,
    progress: bool = True,
    report_to: Sequence[str] | str | None = None,
) -> dict:
    """Fine-tune ``model`` on the trajectories of ``data_path`` and save it to ``out``.

    Args:
        data_path: trajectory JSONL file(s) (``websailor traj build``); several are pooled.
        model: ``smollm2`` or ``hf:DIR``.
        out: output directory; rerunning the same command resumes from its latest checkpoint.
        settings: hyper-parameters (paper defaults when ``None``).
        progress: show the trainer's progress bar.
        report_to: the trainer's experiment trackers (``tensorboard``, ``wandb``, ``mlflow``,
            ``trackio``; :func:`websailor.train.common.check_report_to`); none by default.
            Not part of the run's identity: a resumed run may report elsewhere.

    Returns:
        The summary written to ``out/sft_summary.json``: settings, data counts, steps, loss
        history (``[{step, loss, learning_rate}]``), train seconds.

    Raises:
        ConfigError: model or tokenizer problems, a LoRA target PEFT cannot wrap, ``out``
            holding another run.
        InputFormatError: bad or empty trajectory data (:func:`load_sft_data`).
    """
    from datasets import Dataset
    from transformers import AutoConfig

    from websailor.precision import choose_precision
    from websailor.train.sft_data import load_sft_data
    from websailor.train.sft_trainer import AgentSFTTrainer, step_log_callback

    settings = settings or SFTSettings()
    reporters = check_report_to(report_to)  # an unknown or missing tracker fails before any work
    out = Path(out)
    paths = [Path(p) for p in (data_path if isinstance(data_path, (list, tuple)) else [data_path])]
    model_dir = resolve_model_dir(model)
    tokenizer = load_tokenizer(model_dir)
    try:
        config = AutoConfig.from_pretrained(model_dir)
    except Exception as e:  # unknown model_type, invalid values: transformers raises several types
        raise ConfigError(f"{model_dir}/config.json cannot be loaded: {type(e).__name__}: {e}") from None
    limit = int(getattr(config, "max_position_embeddings", 0) or settings.max_length)
    capped = limit < settings.max_length
    if capped:
        logger.info("max_length %d is capped at the model's context, %d tokens", settings.max_length, limit)
    max_length = limit if capped else settings.max_length
    data = load_sft_data(paths, tokenizer, max_length, limit_name="the model's context" if capped else "--max-length")
    record = {"model": model, "data_sha256": data.sha256, **settings.model_dump(), FORMAT_KEY: RUN_FORMAT}
    # refuses a directory of another run, of another run format, or with other settings
    resume = check_resume(out, record, SETTINGS_FILE, SUMMARY_FILE, "SFT", ignore=CONTINUABLE)
    if (out / SUMMARY_FILE).exists():
        logger.info("%s already holds the finished model of this run", out)
        return json.loads((out / SUMMARY_FILE).read_text(encoding="utf-8"))
    world = world_size()
    accumulation = max(1, math.ceil(settings.batch_size / (settings.micro_batch_size * world)))
    _check_warmup(settings, len(data.examples), world, accumulation)

    precision = choose_precision(settings.precision, config)
    bf16 = precision.bf16
    limits = limit_training_memory(settings.memory_limits)
    net = load_trainable_model(model_dir, settings)
    # written once everything is checked, just before training: a run that fails earlier leaves nothing behind
    out.mkdir(parents=True, exist_ok=True)
    if is_main_process():  # under accelerate launch, one process writes
        (out / SETTINGS_FILE).write_text(json.dumps(record, indent=2), encoding="utf-8")
        # the steps after the checkpoint are trained again: their lines go, and come back once
        trim_jsonl(out / LOG_FILE, checkpoint_step(resume) if resume else 0)
    args = _sft_config(settings, out, accumulation, bf16, reporters, progress)
    with tensorboard_dir(out / "tensorboard", reporters):
        trainer = AgentSFTTrainer(
            model=net,
            lm_head=settings.lm_head,
            args=args,
            train_dataset=Dataset.from_list(data.examples),
            processing_class=tokenizer,
            callbacks=[step_log_callback(out)],
        )
    t0 = time.perf_counter()
    train_loss = _train(trainer, resume)
    seconds = time.perf_counter() - t0

    save_model(trainer, out, model_dir, settings.lora)
    history = [
        {k: h[k] for k in ("step", "loss", "learning_rate") if k in h} for h in trainer.state.log_history if "loss" in h
    ]
    summary = {
        "model": model,
        "data": [str(p) for p in paths],
        "settings": settings.model_dump(),
        "max_length": max_length,
        "counts": dict(data.counts),
        "tokens": data.tokens,
        "steps": trainer.state.global_step,
        "gradient_accumulation": accumulation,
        "bf16": bf16,
        "precision": precision.record(),
        "lm_head": trainer.lm_head,
        "memory": memory_record(settings, limits),
        "train_loss": train_loss,
        "train_seconds": round(_logged_seconds(out) or seconds, 1),
        "session_seconds": round(seconds, 1),
        "loss_history": history,
    }
    if data.observation_settings():  # what observations the data's tool responses were made with
        summary["env_settings"] = data.observation_settings()
    if trainer.is_world_process_zero():
        (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary


def _sft_config(
    settings: SFTSettings, out: Path, accumulation: int, bf16: bool, reporters: list[str], progress: bool
) -> Any:
    """TRL's ``SFTConfig`` for ``settings``: checkpoints under ``out/checkpoints``, the step's
    batch as ``accumulation`` micro-batches per process."""
    import torch
    from trl import SFTConfig

    return SFTConfig(
        output_dir=str(out / "checkpoints"),
        learning_rate=settings.learning_rate,
        warmup_steps=settings.warmup_ratio,  # a float below 1 is a share of the steps
        lr_scheduler_type=settings.lr_scheduler,
        weight_decay=settings.weight_decay,
        per_device_train_batch_size=settings.micro_batch_size,
        gradient_accumulation_steps=accumulation,
        num_train_epochs=settings.epochs,
        max_steps=settings.max_steps or -1,
        max_length=None,  # over-long trajectories were dropped, never cut
        bf16=bf16,
        gradient_checkpointing=None,  # the deprecated alias; TRL's default would turn it on
        activation_checkpointing=settings.gradient_checkpointing,
        activation_checkpointing_kwargs=dict(CHECKPOINTING_KWARGS) if settings.gradient_checkpointing else None,
        save_strategy="steps",
        save_steps=settings.save_steps,
        save_total_limit=settings.keep_checkpoints,
        logging_steps=settings.logging_steps,
        report_to=reporters or "none",
        seed=settings.seed,
        disable_tqdm=not progress,
        dataset_num_proc=None,
        use_cpu=not torch.cuda.is_available(),
    )


def _train(trainer: Any, resume: Path | None) -> float | None:
    """Train from ``resume`` (or from the start); the mean loss over the session's steps. A
    checkpoint of the run's last step (killed after it) is loaded, not trained further."""
    if resume is not None and checkpoint_is_final(resume):
        from transformers import TrainerState

        logger.info("%s is the run's last step: its model is written without training further", resume.name)
        trainer._load_from_checkpoint(str(resume))
        trainer.state = TrainerState.load_from_json(str(resume / "trainer_state.json"))
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        return sum(losses) / len(losses) if losses else None
    return trainer.train(resume_from_checkpoint=str(resume) if resume else None).training_loss
