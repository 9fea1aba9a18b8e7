"""What a stopped or finished RL run leaves, and how a rerun of the same command picks it up:
its identity (settings, data digest), trimming the logs back to the checkpoint it resumes
from, and saving the model of a checkpoint that already reached ``max_steps``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from websailor.errors import ConfigError
from websailor.log import get_logger
from websailor.train.common import is_main_process
from websailor.train.rl.settings import CONTINUABLE, LOG_FILE, SETTINGS_FILE, SUMMARY_FILE, RLSettings

logger = get_logger(__name__)


def data_digest(data_path: str | Path, items: list[Any]) -> str:
    """Identifies the training data of a run: the file's bytes, or (for a named benchmark, a
    ``FORMAT:PATH`` spec or a folder of report tasks) its items."""
    import hashlib

    path = Path(str(data_path))
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    rows = [[it.id, it.question, it.gold.to_dict() if it.gold is not None else None] for it in items]
    return hashlib.sha256(json.dumps(rows, ensure_ascii=False).encode()).hexdigest()


def check_enough(items: list[Any], settings: RLSettings, what: str) -> None:
    """A batch takes ``batch_size / group_size`` distinct questions.

    Raises:
        ConfigError: there are fewer.
    """
    need = settings.batch_size // settings.group_size
    if len(items) < need:
        raise ConfigError(
            f"a batch of {settings.batch_size} rollouts in groups of {settings.group_size} needs {need} "
            f"questions, {what} has {len(items)}: lower batch_size or add questions"
        )


def holds_other_run(out: Path, record: dict) -> set[str]:
    """The settings in which the run ``out`` holds differs from ``record`` (empty: the same run,
    or none there; the resume check decides whether it may be replaced)."""
    saved = out / SETTINGS_FILE
    try:
        before = json.loads(saved.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    if not isinstance(before, dict):
        return set()
    return {k for k in before.keys() | record.keys() if k not in CONTINUABLE and before.get(k) != record.get(k)}


#: settings that change how RL trains but not what the prefilter samples: a run that never
#: trained, taken over with other values of these only, keeps its prefilter rollouts (a retry
#: with a wider ``prefilter_band`` re-reads them instead of sampling them again)
PREFILTER_NEUTRAL = frozenset(
    {
        "prefilter_band",
        "prefilter_from",
        "lora",
        "lora_r",
        "lora_alpha",
        "lora_dropout",
        "lora_target_modules",
        "lm_head",
        "gradient_checkpointing",
        "memory_limits",
        "algo",
        "group_size",
        "batch_size",
        "micro_batch_size",
        "learning_rate",
        "warmup_ratio",
        "weight_decay",
        "max_grad_norm",
        "epsilon_low",
        "epsilon_high",
        "skip_zero_advantage",
        "unanswered_negatives",
        "epochs",
        "importance_sampling",
        "importance_sampling_cap",
        "save_steps",
        "concurrency",
    }
)


def finish_from_checkpoint(
    checkpoint: Path, out: Path, base_dir: Path, tokenizer: Any, settings: RLSettings, record_summary: dict
) -> dict:
    """Save the model of ``checkpoint`` (LoRA adapters merged) as the run's model and write
    its summary; returns the summary."""
    import torch
    from transformers import AutoModelForCausalLM

    from websailor.train.rl_log import read_log

    if settings.lora:
        from peft import PeftModel

        base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        net = PeftModel.from_pretrained(base, checkpoint).merge_and_unload()
    else:
        net = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    if is_main_process():
        net.save_pretrained(out)
        tokenizer.save_pretrained(out)
    log = read_log(out) if (out / LOG_FILE).exists() else []
    summary = {**record_summary, "train_seconds": sum(r.get("time/step_s") or 0.0 for r in log), "log": log}
    if is_main_process():
        (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary
