"""SFT examples from trajectory files: validation, tokenization and the assistant-only loss mask.

Each kept trajectory becomes one example ``{"input_ids": [...], "assistant_masks": [...]}``
(the whole conversation rendered with the model's chat template; mask 1 on the tokens the
model generated). TRL's ``SFTTrainer`` turns the mask into labels (``-100`` elsewhere), so the
loss covers assistant turns only: system prompt, question and tool responses are context, as
in the paper's cold start (arXiv 2509.13305, Sec. 4: tool responses are masked out of the loss).

A trajectory longer than the length limit is dropped and counted, never cut: a cut would end
an example in the middle of a tool response, or lose the answer it leads to.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websailor.agent.trajectory import Trajectory
from websailor.errors import InputFormatError
from websailor.jsonio import read_appended_jsonl
from websailor.log import get_logger

logger = get_logger(__name__)


@dataclass
class SFTData:
    """Tokenized examples and what happened to every record of the file.

    Attributes:
        examples: ``{"input_ids": list[int], "assistant_masks": list[int]}`` per kept trajectory.
        counts: ``read``, ``kept``, ``too_long`` (over ``max_length`` tokens), ``unfinished``
            (termination other than ``answer``: nothing correct to imitate); ``visits`` and
            ``visits_grounded`` of the kept ones
            (:func:`websailor.eval.grounding.choice_grounding`: an imported file's share of
            ungrounded choices is warned about, never refused).
        tokens: total tokens of the kept examples, and how many of them carry loss.
        sha256: digest of the file's bytes (a resumed run must see the same data).
        env_settings: the observation settings of the kept trajectories (their
            ``env_settings``; ``{}``: the paper's), each with how many were kept; empty when no
            record has any (see :meth:`observation_settings`).
    """

    examples: list[dict[str, list[int]]]
    counts: Counter = field(default_factory=Counter)
    tokens: dict[str, int] = field(default_factory=dict)
    sha256: str = ""
    env_settings: Counter = field(default_factory=Counter)

    def observation_settings(self) -> list[dict[str, Any]]:
        """``[{"settings": {...}, "trajectories": n}, ...]`` for the summary, most common first;
        ``[]`` when every kept trajectory has the paper's observations."""
        if not any(self.env_settings):
            return []
        return [{"settings": dict(k), "trajectories": n} for k, n in self.env_settings.most_common()]


def check_messages(messages: Any, where: str, finished: bool = True) -> None:
    """The conversation must be ``[system,] user, assistant, user, ..., assistant`` with text
    contents: the shape the agent produces (tool responses come back as user turns); a rollout
    that did not finish (``finished`` false: it ran out of calls) may end with a tool response.

    Raises:
        InputFormatError: not a list of ``{"role", "content"}`` dicts, roles out of that order,
            or no final assistant turn; ``where`` names the record.
    """
    if not isinstance(messages, list) or not messages:
        raise InputFormatError(f"{where}: 'messages' must be a non-empty list of {{role, content}} turns")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise InputFormatError(f"{where}: message {i + 1} is not a {{role, content}} turn with text content")
    roles = [m["role"] for m in messages]
    start = 1 if roles[0] == "system" else 0
    for i, role in enumerate(roles[start:], start):
        expected = "user" if (i - start) % 2 == 0 else "assistant"
        if role != expected:
            raise InputFormatError(
                f"{where}: messages do not alternate: message {i + 1} is {role!r} where {expected!r} was due "
                f"(expected [system,] user, assistant, user, ..., assistant)"
            )
    if finished and roles[-1] != "assistant":
        raise InputFormatError(
            f"{where}: the last message is {roles[-1]!r}; a training trajectory ends with the assistant's final turn"
        )


def load_sft_data(
    paths: str | Path | list[str | Path], tokenizer: Any, max_length: int, limit_name: str = "--max-length"
) -> SFTData:
    """Read trajectory JSONL files (``websailor traj build``, ``run`` or ``eval`` output) and
    tokenize every finished trajectory with ``tokenizer``'s chat template.

    A trajectory is used when it ended with an answer: its ``termination`` (when recorded) is
    ``answer`` and its last assistant turn parses into a final answer. The others are
    counted as ``unfinished``.

    Args:
        paths: one file or several (their trajectories are pooled).
        tokenizer: a fast tokenizer with a chat template (offsets are needed for the mask).
        max_length: longest example in tokens; longer trajectories are dropped and counted.
        limit_name: what sets ``max_length``, for the message when nothing fits.

    Raises:
        InputFormatError: a file is missing or empty, a line is not a trajectory record, a
            conversation does not alternate, or no trajectory is left to train on.
    """
    from websailor.agent.parse import parse_turn
    from websailor.eval.grounding import choice_grounding

    paths = [Path(p) for p in (paths if isinstance(paths, (list, tuple)) else [paths])]
    digest = hashlib.sha256()
    data = SFTData(examples=[])
    total = loss = 0
    for path in paths:
        if not path.is_file():
            raise InputFormatError(
                f"--data {path}: {'not a file' if path.exists() else 'no such file'} "
                "(make one with `websailor traj build`)"
            )
        records = read_appended_jsonl(path, "a trajectory record")
        if not records:
            raise InputFormatError(f"--data {path} holds no trajectories (the file is empty)")
        digest.update(path.read_bytes())
        for line, rec in records:
            where = f"{path} line {line}" + (f" (id {rec.get('id')!r})" if "id" in rec else "")
            if "messages" not in rec:
                raise InputFormatError(f"{where}: not a trajectory record (no 'messages')")
            finished = rec.get("termination", "answer") == "answer"
            check_messages(rec["messages"], where, finished)
            data.counts["read"] += 1
            if not finished or parse_turn(rec["messages"][-1]["content"]).answer is None:
                data.counts["unfinished"] += 1
                continue
            traj = Trajectory(id=str(rec.get("id", line)), rollout=0, question="", messages=rec["messages"])
            try:
                ids, mask = traj.token_view(tokenizer)
            except ValueError as e:
                raise InputFormatError(f"{where}: cannot render it with the model's chat template: {e}") from e
            if len(ids) > max_length:
                data.counts["too_long"] += 1
                continue
            data.examples.append({"input_ids": ids, "assistant_masks": mask})
            data.counts["kept"] += 1
            choices = choice_grounding(rec["messages"])
            data.counts["visits"] += len(choices)
            data.counts["visits_grounded"] += sum(c["grounded"] for c in choices)
            settings = rec.get("env_settings")
            data.env_settings[tuple(sorted(settings.items())) if isinstance(settings, dict) else ()] += 1
            total += len(ids)
            loss += sum(mask)
    data.sha256 = digest.hexdigest()
    data.tokens = {"total": total, "loss": loss}
    if data.counts["too_long"]:
        logger.warning(
            "%d of %d trajectories are longer than %d tokens (%s): dropped (never cut)",
            data.counts["too_long"],
            data.counts["read"],
            max_length,
            limit_name,
        )
    if len(data.env_settings) > 1:
        logger.warning(
            "the trajectories were made with %d different observation settings: %s",
            len(data.env_settings),
            "; ".join(f"{dict(k) or 'the paper'}: {n}" for k, n in data.env_settings.most_common()),
        )
    if data.counts["visits"] > data.counts["visits_grounded"]:
        ungrounded = data.counts["visits"] - data.counts["visits_grounded"]
        logger.warning(
            "%d of %d visits in the kept trajectories (%.1f%%) open a page with no reason in what was read before "
            "(no search listed it, or the thought names neither its rank nor a quoted line): the model learns to "
            "choose pages for no reason; `websailor traj stats FILE` measures each file",
            ungrounded,
            data.counts["visits"],
            100 * ungrounded / data.counts["visits"],
        )
    if data.counts["unfinished"]:
        logger.warning("%d trajectories did not end with an answer: dropped", data.counts["unfinished"])
    if not data.examples:
        hint = "raise --max-length" if limit_name == "--max-length" else f"the limit is {limit_name}"
        raise InputFormatError(
            f"--data {', '.join(map(str, paths))}: no trajectory left to train on "
            f"({dict(data.counts)}; {hint}, or check the terminations)"
        )
    return data
