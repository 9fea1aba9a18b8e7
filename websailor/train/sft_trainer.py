"""The SFT trainer: TRL's ``SFTTrainer`` with the loss-position LM head
(:mod:`websailor.train.lm_head`), each step's token counts and speed in its logs, and the
run's step log (``sft_log.jsonl``) written as steps end."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from trl import SFTTrainer

from websailor.train.lm_head import install_head
from websailor.train.step_log import SFT_LOG_FILE as LOG_FILE
from websailor.train.step_log import StepLogger


class AgentSFTTrainer(SFTTrainer):
    """TRL's ``SFTTrainer`` whose loss reaches the LM head only at the positions in the loss,
    and whose logs carry ``tokens`` and ``loss_tokens``: the tokens this process trained on
    since the last log (all, and those in the loss).

    Args:
        lm_head: ``loss_positions`` or ``trl`` (:class:`websailor.train.common.TrainSettings`).
        *args, **kwargs: ``SFTTrainer``'s.

    Attributes:
        lm_head: the head in use (``trl`` also when the model needs TRL's).
    """

    def __init__(self, *args: Any, lm_head: str = "loss_positions", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lm_head = install_head(self.model, lm_head, outputs=("entropy", "is_top1"))  # TRL's metrics read both
        self._tokens = [0, 0]

    def compute_loss(self, model: Any, inputs: dict, return_outputs: bool = False, num_items_in_batch: Any = None):
        if model.training:
            labels = inputs.get("labels")
            mask = inputs.get("attention_mask")
            self._tokens[0] += int(mask.sum()) if mask is not None else int(inputs["input_ids"].numel())
            if labels is not None:
                self._tokens[1] += int((labels[:, 1:] != -100).sum())
        return super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self.model.training:
            logs["tokens"], logs["loss_tokens"] = self._tokens
            self._tokens = [0, 0]
        super().log(logs, start_time)


def step_log_callback(out: Path) -> Any:
    """A ``TrainerCallback`` that appends each logged training step to ``out/sft_log.jsonl``:
    the trainer's figures (loss, learning rate, gradient norm, entropy, token accuracy, tokens,
    loss tokens) with ``time/step_s`` and ``tokens/s`` and ``loss_tokens/s`` over the steps since
    the last log; only the main process writes."""
    from transformers import TrainerCallback

    class _Log(TrainerCallback):
        def __init__(self) -> None:
            self.log = StepLogger(Path(out) / LOG_FILE)
            self.t0: float | None = None

        def on_step_begin(self, args, state, control, **kw):  # noqa: ANN001
            if self.t0 is None:
                self.t0 = time.perf_counter()

        def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001
            if not state.is_world_process_zero or not logs or "loss" not in logs or self.t0 is None:
                return
            seconds = time.perf_counter() - self.t0
            self.t0 = None
            record = {k: v for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            record["time/step_s"] = round(seconds, 3)
            for key in ("tokens", "loss_tokens"):
                if key in record and seconds > 0:
                    record[f"{key}/s"] = round(record[key] / seconds, 2)
            self.log.write(state.global_step, record)

        def on_train_end(self, args, state, control, **kw):  # noqa: ANN001
            self.log.close()

    return _Log()
