"""A training run's step log: one JSON line per optimizer step, appended as the step ends, and
optionally the same scalars as TensorBoard event files. SFT writes ``sft_log.jsonl``, RL
``rl_log.jsonl`` (:mod:`websailor.train.rl_log` reads and plots it). A resumed run first cuts
the log back to its checkpoint (:func:`websailor.train.run_folder.trim_jsonl`), so each step's
line is written once."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from websailor.errors import InputFormatError

#: the step log of an SFT run (an RL run's is :data:`websailor.train.rl_log.LOG_FILE`)
SFT_LOG_FILE = "sft_log.jsonl"


class StepLogger:
    """Appends one record per step to ``path`` and, with ``tensorboard_dir``, writes its numeric
    values as TensorBoard scalars there.

    Args:
        path: the JSONL step log.
        tensorboard_dir: where the event files go (``None``: none are written).
        replay: a resumed run; the event files are rewritten from the step log (already cut
            back to the checkpoint), so no step appears twice.
    """

    def __init__(self, path: Path, tensorboard_dir: Path | None = None, replay: bool = False) -> None:
        self.path = Path(path)
        self.writer = None
        if tensorboard_dir is not None:
            import shutil

            from tensorboardX import SummaryWriter

            if replay:
                shutil.rmtree(tensorboard_dir, ignore_errors=True)
            self.writer = SummaryWriter(str(tensorboard_dir))
            if replay and self.path.exists():
                from websailor.jsonio import read_appended_jsonl

                for lineno, rec in read_appended_jsonl(self.path, "a step record"):
                    step = rec.get("step")
                    if type(step) is not int:  # a hand-edited or foreign line: named, never a KeyError
                        raise InputFormatError(
                            f"{self.path} line {lineno} is not a step record (no integer 'step'); "
                            "fix or remove that line to resume"
                        )
                    self._scalars(step, rec)

    def write(self, step: int, values: dict[str, Any]) -> None:
        """Record ``values`` (names to numbers; non-finite ones as ``null``) for optimizer step
        ``step``."""
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in values.items()}
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"step": step, **clean}) + "\n")
        self._scalars(step, clean)

    def _scalars(self, step: int, values: dict[str, Any]) -> None:
        if self.writer is None:
            return
        for k, v in values.items():
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
