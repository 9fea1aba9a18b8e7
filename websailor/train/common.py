"""What SFT and RL runs share: settings files, local model and tokenizer loading, LoRA, the
output directory's resume rules and the final save."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from websailor.errors import ConfigError
from websailor.log import get_logger
from websailor.models.tokenizer import load_tokenizer  # noqa: F401 (re-exported: the training stages load it from here)

logger = get_logger(__name__)

S = TypeVar("S", bound=BaseModel)


class TrainSettings(BaseModel):
    """The knobs SFT and RL runs share; unknown keys and non-finite numbers are refused.

    Attributes:
        lora: train LoRA adapters (merged into the saved model) instead of every weight;
            ``lora_r``, ``lora_alpha``, ``lora_dropout``, ``lora_target_modules`` shape them.
        precision: ``auto`` = bf16 autocast where this machine computes it faster than fp32
            (a GPU with bf16; on a CPU, timed on the model's shapes once per machine:
            :func:`websailor.precision.choose_precision`), fp32 elsewhere; ``bf16``
            forces bf16 autocast; ``fp32``. Weights and optimizer state stay fp32 either way:
            updates of a few 1e-5 relative to a weight are below bf16's resolution (2^-8) and
            would be lost in bf16 weights.
        lm_head: how the loss reaches the vocabulary. ``loss_positions`` (the default): only the
            positions in the loss go through the LM head, in the training precision, in chunks
            of tokens recomputed in the backward pass (:mod:`websailor.train.lm_head`);
            ``trl``: TRL's fused head, which off CUDA projects every position (prompts and tool
            responses included) and computes its tiles in fp32 outside autocast.
        gradient_checkpointing: recompute each decoder layer's activations in the backward pass
            (non-reentrant ``torch.utils.checkpoint``): the activations kept for the backward
            pass shrink from every layer's to the layer inputs, which at 4,096 tokens is most
            of the memory of a step (``docs/benchmarks.md``), for about a third more compute.
            On by default; the loss over the vocabulary never materializes the full logits
            either way.
        memory_limits: on CPU, a 1 MiB mmap threshold and, with ``lm_head: trl``, smaller tiles
            for TRL's fused head (:func:`limit_training_memory`). On by default; turn them off
            where memory is plentiful (docs/benchmarks.md, "Training").
        keep_checkpoints: the newest checkpoints kept (older ones are deleted as new ones are
            written), so a long run does not fill the disk: a checkpoint of SmolLM2-135M with
            its optimizer state is about 1.6 GB. At least 2 keeps one to fall back to when the
            newest is damaged. A resumed run may change it.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    lora: bool = False
    lora_r: int = Field(16, ge=1)
    lora_alpha: int = Field(32, ge=1)
    lora_dropout: float = Field(0.05, ge=0, lt=1)
    lora_target_modules: str | list[str] = "all-linear"
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    lm_head: Literal["loss_positions", "trl"] = "loss_positions"
    gradient_checkpointing: bool = True
    memory_limits: bool = True
    keep_checkpoints: int = Field(2, ge=1, strict=True)  # a count: ``true`` is not 1


def read_settings(cls: type[S], what: str, config: str | Path | None = None, **overrides: Any) -> S:
    """``cls`` settings (named ``what`` in errors) from an optional YAML/JSON ``config`` file, then ``overrides`` (``None`` values
    are ignored, so CLI options left unset keep the file's value).

    Raises:
        ConfigError: unreadable file, unknown keys, or values of the wrong type or range.
    """
    values: dict[str, Any] = {}
    if config is not None:
        import yaml

        path = Path(config)
        kind = "JSON" if path.suffix.lower() == ".json" else "YAML"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"--config {path}: {e.strerror or e}") from e
        except UnicodeDecodeError:
            raise ConfigError(f"--config {path}: not a text file (not UTF-8)") from None
        try:
            values = json.loads(text) if kind == "JSON" else (yaml.safe_load(text) or {})
        except (ValueError, yaml.YAMLError) as e:
            reason = " ".join(str(e).split())
            raise ConfigError(f"--config {path}: not valid {kind}: {reason}") from None
        if not isinstance(values, dict) or not all(isinstance(k, str) for k in values):
            raise ConfigError(f"--config {path}: expected a mapping of setting names to values")
    if hasattr(cls, "file_values"):  # a file's own spellings (RL's async section), before the overrides
        try:
            values = cls.file_values(values)
        except ValueError as e:
            raise ConfigError(f"{what} settings: {e}") from None
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return cls(**values)
    except ValidationError as e:
        problems = "; ".join(
            (f"{'.'.join(map(str, err['loc']))}: " if err["loc"] else "") + err["msg"].removeprefix("Value error, ")
            for err in e.errors()
        )
        raise ConfigError(f"{what} settings: {problems}") from e


def world_size() -> int:
    """The processes of this launch (``WORLD_SIZE``, as ``accelerate launch`` and ``torchrun``
    set it; 1 outside a launcher)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """Whether this is the first process of a launch (``RANK`` 0), or the only one: the process
    that writes a run's files and reports."""
    return int(os.environ.get("RANK", "0")) == 0


def end_processes() -> None:
    """After a successful run under a launcher: wait for every process, then destroy the
    process group, so that no process exits while gloo's (or NCCL's) threads still run; one
    that does dies with SIGABRT ("terminate called without an active exception") and the
    launcher reports the whole run failed. A no-op outside a launcher. Called only on success:
    after a failure in one process the others may be inside a collective, and a barrier would
    hang.

    Unreachable objects are collected first: a DDP-wrapped model left in a reference cycle (a
    trainer and its callbacks) holds the process group, and freed later, at exit, its reducer
    waits for gloo's worker thread while holding the GIL that the thread needs (a hang seen in
    one of several two-process runs). A caller that still holds its trainer drops it before."""
    import gc

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()


def resolve_model_dir(spec: str) -> Path:
    """The local directory behind a model spec: ``smollm2`` (embedded) or ``hf:DIR``.

    Raises:
        ConfigError: a remote spec (``openai:``), or a directory without ``config.json``.
    """
    from websailor.models import local_model_dir

    path = local_model_dir(spec)
    if path is None:
        raise ConfigError(f"--model {spec!r}: training needs local weights: smollm2 or hf:DIR")
    return path


def wrap_lora(model: Any, settings: Any) -> Any:
    """LoRA adapters on ``settings.lora_target_modules`` (PEFT); ``settings`` has ``lora_r``,
    ``lora_alpha``, ``lora_dropout`` and ``lora_target_modules``.

    Raises:
        ConfigError: PEFT cannot wrap this model type (no matching layers, unsupported layers).
    """
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(
        r=settings.lora_r,
        lora_alpha=settings.lora_alpha,
        lora_dropout=settings.lora_dropout,
        target_modules=settings.lora_target_modules,
        task_type="CAUSAL_LM",
    )
    try:
        return get_peft_model(model, cfg)
    except (ValueError, TypeError, NotImplementedError, KeyError, AttributeError) as e:
        kind = getattr(getattr(model, "config", None), "model_type", type(model).__name__)
        raise ConfigError(
            f"--lora: PEFT cannot wrap model type {kind!r} (target modules {settings.lora_target_modules!r}): {e}"
        ) from e


def load_trainable_model(model_dir: Path, settings: Any) -> Any:
    """The fp32 causal LM of ``model_dir`` with selective checkpointing (:func:`selective_checkpointing`),
    wrapped with LoRA adapters when ``settings.lora``.

    Raises:
        ConfigError: missing or broken weights, or a model type PEFT cannot wrap.
    """
    import torch
    from transformers import AutoModelForCausalLM

    try:
        net = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    except Exception as e:  # missing or broken weights: transformers raises several types
        raise ConfigError(f"{model_dir}: cannot load the model weights: {type(e).__name__}: {e}") from None
    selective_checkpointing(net)
    return wrap_lora(net, settings) if settings.lora else net


#: keyword arguments of ``torch.utils.checkpoint`` under ``gradient_checkpointing`` (with
#: :func:`selective_checkpointing`'s policy added)
CHECKPOINTING_KWARGS = {"use_reentrant": False}
#: what the backward pass keeps of a checkpointed layer besides its input: the attention's output
KEPT_OPS = (
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
)


def _keep_attention(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
    """Selective checkpointing's policy: keep the attention kernels' outputs, recompute the rest."""
    from torch.utils.checkpoint import CheckpointPolicy

    return CheckpointPolicy.MUST_SAVE if getattr(op, "_opname", None) in KEPT_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def selective_checkpointing(model: Any) -> None:
    """Make activation checkpointing on ``model`` selective, whoever enables it (the trainer
    does, at the start of ``train()``, with ``activation_checkpointing_kwargs``, which must stay
    JSON for its logs): non-reentrant, with ``torch.utils.checkpoint``'s selective policy
    (``create_selective_checkpoint_contexts``) keeping each layer's attention output
    (:data:`KEPT_OPS`: ``T x hidden`` values and the softmax's log-sum-exp) for the backward pass,
    so only the cheaper rest of the layer is recomputed. Measured on the two-core Xeon: a
    4,096-token SFT step of SmolLM2-135M took 41 to 47 s with plain checkpointing, 37 to 40 s
    with this, 36 to 43 s without checkpointing, for 283 MB more than plain checkpointing
    (docs/benchmarks.md, "Training")."""
    import functools

    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    enable = model.activation_checkpointing_enable
    selective = functools.partial(create_selective_checkpoint_contexts, _keep_attention)

    def selective_enable(activation_checkpointing_kwargs: dict | None = None, *args: Any, **kwargs: Any) -> Any:
        merged = {**CHECKPOINTING_KWARGS, **(activation_checkpointing_kwargs or {}), "context_fn": selective}
        return enable(merged, *args, **kwargs)

    model.activation_checkpointing_enable = selective_enable


#: TRL's fused LM head on CPU: tokens x vocabulary columns per projection tile (TRL's own,
#: 4,096 x 32,768, makes fp32 temporaries of 0.5 GB each at 4,096 tokens)
CPU_LM_HEAD_TILE = (1024, 8192)
#: allocations from this size up are mapped and unmapped on their own (glibc), so the freed
#: activations of a long sequence go back to the system at once instead of staying in the heap
MMAP_THRESHOLD = 1 << 20


_TRL_TILES: tuple[int, int] | None = None  # TRL's own LM-head tiles, kept to restore them


def limit_training_memory(enabled: bool = True) -> dict[str, Any]:
    """Settle the process for a long-sequence training run on CPU when memory is short, and
    say what was done: the tiles of TRL's fused LM head (:data:`CPU_LM_HEAD_TILE`; TRL keeps
    them in module constants) and glibc's fixed mmap threshold (:data:`MMAP_THRESHOLD`). Both
    cost speed (docs/benchmarks.md, "Training"): ``enabled=False`` restores TRL's tiles (the
    mmap threshold, once set, stays for the process). A GPU run is left as it is; a missing
    constant (another TRL) or C library is skipped."""
    global _TRL_TILES
    import torch

    done: dict[str, Any] = {"lm_head_tile": None, "mmap_threshold": None}
    if torch.cuda.is_available():
        return done
    try:
        import trl.kernels.chunked_logprob as kernel
        import trl.trainer.utils as trl_utils
    except ImportError:
        kernel = trl_utils = None
    if hasattr(kernel, "TOKEN_CHUNK_SIZE") and hasattr(trl_utils, "_CHUNKED_LOGPROB_CHUNK_SIZE"):
        if _TRL_TILES is None:
            _TRL_TILES = (kernel.TOKEN_CHUNK_SIZE, trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE)
        kernel.TOKEN_CHUNK_SIZE, trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE = CPU_LM_HEAD_TILE if enabled else _TRL_TILES
        if enabled:
            done["lm_head_tile"] = list(CPU_LM_HEAD_TILE)
    if not enabled:
        return done
    try:
        import ctypes

        if ctypes.CDLL("libc.so.6").mallopt(-3, MMAP_THRESHOLD):  # M_MMAP_THRESHOLD
            done["mmap_threshold"] = MMAP_THRESHOLD
    except (OSError, AttributeError):  # not glibc
        pass
    return done


def memory_record(settings: TrainSettings, limits: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the run summary says of the memory-saving mechanisms a run used (``limits``: what
    :func:`limit_training_memory` returned)."""
    on = settings.gradient_checkpointing
    return {
        "gradient_checkpointing": on,
        "checkpointing_kwargs": {**CHECKPOINTING_KWARGS, "kept": "attention outputs"} if on else None,
        "lm_head": settings.lm_head,
        "loss": (
            "the positions in the loss only, through the LM head in chunks of tokens, never the full logits"
            if settings.lm_head == "loss_positions"
            else "TRL's fused LM head: log-probabilities computed in tiles, never the full logits"
        ),
        **(limits or {}),
    }


def save_model(trainer: Any, out: Path, base_dir: Path, lora: bool) -> None:
    """Write a plain transformers model and its tokenizer to ``out``. The trainer gathers
    sharded weights (DeepSpeed ZeRO-3, FSDP); LoRA adapters are saved to ``out/adapter`` and
    merged into a fresh copy of the base model on the main process."""
    if not lora:
        trainer.save_model(str(out))
        return
    trainer.save_model(str(out / "adapter"))
    trainer.accelerator.wait_for_everyone()
    if trainer.is_world_process_zero():
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM

        base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        PeftModel.from_pretrained(base, out / "adapter").merge_and_unload().save_pretrained(out)
        trainer.processing_class.save_pretrained(out)


#: ``--report-to`` integrations of transformers' trainers, and the package each one needs
REPORTERS = {
    "tensorboard": ("tensorboard", "tensorboardX"),
    "wandb": ("wandb",),
    "mlflow": ("mlflow",),
    "trackio": ("trackio",),
}


def check_report_to(report_to: Sequence[str] | str | None) -> list[str]:
    """The trainer's ``report_to`` list for ``report_to`` (names, or one comma-separated
    string; empty or ``none``: nothing beyond the project's own logs).

    Raises:
        ConfigError: a name not in :data:`REPORTERS`, ``none`` beside another name, or one
            whose package is not installed
            (named, with the pip command), before any training starts.
    """
    import importlib.util

    if report_to is None:
        return []
    names = report_to.split(",") if isinstance(report_to, str) else [n for r in report_to for n in r.split(",")]
    names = [n.strip() for n in names if n.strip()]
    if "none" in names and len(set(names)) > 1:
        raise ConfigError(f"--report-to none together with {', '.join(n for n in names if n != 'none')}: choose one")
    names = [n for n in names if n != "none"]
    out = []
    for name in names:
        if name not in REPORTERS:
            raise ConfigError(f"--report-to {name!r}: not one of {', '.join(REPORTERS)} (or none)")
        if not any(importlib.util.find_spec(pkg) for pkg in REPORTERS[name]):
            raise ConfigError(
                f"--report-to {name} needs the {REPORTERS[name][0]} package: pip install {REPORTERS[name][0]}"
            )
        if name not in out:
            out.append(name)
    return out


@contextlib.contextmanager
def tensorboard_dir(path: Path, reporters: Sequence[str]) -> Iterator[None]:
    """While a trainer is built (its TensorBoard callback reads ``TENSORBOARD_LOGGING_DIR``
    once, and writes to ``./runs`` without it), point the variable at ``path`` when
    ``reporters`` has ``tensorboard``; a value the user set wins, and the environment is
    restored after."""
    if "tensorboard" not in reporters or "TENSORBOARD_LOGGING_DIR" in os.environ:
        yield
        return
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(path)
    try:
        yield
    finally:
        os.environ.pop("TENSORBOARD_LOGGING_DIR", None)
