"""Forward passes over the real tokens of a micro-batch, not over the whole batch's padding.

TRL's ``GRPOTrainer`` pads every rollout of a generation batch to the longest prompt (on the
left) and the longest completion (on the right), then splits the batch into micro-batches
without narrowing them again. Multi-turn rollouts differ a lot in length (a direct answer is a
few hundred tokens, a rollout that reads three pages a few thousand), and the rollouts that
carry no gradient are two-token stubs (:mod:`websailor.train.rl.rollouts`), so most of each
micro-batch's columns can be padding: on the ladder experiment's steps the padded width held
1.15 to 1.5 times the real tokens, and the update at that width took 2.2 times as long
(benchmarks/rl_padding.py).

:func:`trimmed_logps` narrows each chunk of rows to its columns that hold a token of at least
one row before the model sees it, and pads the log-probabilities (and entropies) back to the
batch's width with zeros (positions the completion mask leaves out of every mean). Every
forward of the update goes through it (:class:`websailor.train.rl.update.AgentGRPOTrainer`).
Cutting left padding starts a shorter prompt's positions at 0, as in the sampler, where the
padded batch shifted them by the padding's length.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Forward = Callable[..., tuple[torch.Tensor, "torch.Tensor | None", "torch.Tensor | None"]]


def live_columns(attention_mask: torch.Tensor, logits_to_keep: int) -> tuple[int, int]:
    """The columns ``[start, end)`` of ``attention_mask`` (rows, columns) that hold a token of
    at least one row, widened so that the completion (the last ``logits_to_keep`` columns)
    keeps its first column: ``start <= columns - logits_to_keep < end``."""
    columns = attention_mask.size(1)
    first_completion = columns - logits_to_keep
    live = attention_mask.any(dim=0).nonzero()
    if live.numel() == 0:
        return first_completion, first_completion + 1
    start = min(int(live[0]), first_completion)
    end = max(int(live[-1]) + 1, first_completion + 1)
    return start, end


def trimmed_logps(
    forward: Forward,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    batch_size: int | None = None,
    compute_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Per-token log-probabilities (and entropies) of the completion, computed chunk by chunk
    on each chunk's live columns (:func:`live_columns`).

    Args:
        forward: ``forward(ids, mask, keep, rows, compute_entropy=...)`` for one chunk (its
            trimmed ``ids`` and ``mask``, the completion columns ``keep`` it kept and the
            ``rows`` slice of the batch it holds): ``(logps, entropies, aux_loss)`` over the
            last ``keep`` columns.
        input_ids, attention_mask: ``(B, T)``; prompts left-padded, completions right-padded.
        logits_to_keep: the completion's width ``C`` (the last ``C`` columns).
        batch_size: rows per forward pass (``None``: all ``B``).
        compute_entropy: passed through.

    Returns:
        ``(logps, entropies, aux_loss)``: ``logps`` and ``entropies`` ``(B, C)``, zeros on the
        trimmed padding; ``entropies`` ``None`` unless asked; ``aux_loss`` the mean over
        chunks, or ``None``.
    """
    rows = input_ids.size(0)
    batch_size = batch_size or rows
    first_completion = input_ids.size(1) - logits_to_keep
    logps, entropies, aux = [], [], []
    for lo in range(0, rows, batch_size):
        ids, mask = input_ids[lo : lo + batch_size], attention_mask[lo : lo + batch_size]
        start, end = live_columns(mask, logits_to_keep)
        keep = end - first_completion
        lp, ent, al = forward(
            ids[:, start:end], mask[:, start:end], keep, slice(lo, lo + batch_size), compute_entropy=compute_entropy
        )
        pad = logits_to_keep - keep
        logps.append(torch.nn.functional.pad(lp, (0, pad)))
        if compute_entropy:
            entropies.append(torch.nn.functional.pad(ent, (0, pad)))
        if al is not None:
            aux.append(al)
    return (
        torch.cat(logps, dim=0),
        torch.cat(entropies, dim=0) if compute_entropy else None,
        torch.stack(aux).mean() if aux else None,
    )
