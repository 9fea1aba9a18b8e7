"""The policy update of an RL step: TRL's ``GRPOTrainer`` with three changes that cut the
update's work on agent rollouts without changing what it computes.

1. **Trimmed forward passes** (:mod:`websailor.train.rl.trim`): each chunk of rows runs over its
   own tokens, not the generation batch's padding.
2. **Only the positions in the loss reach the LM head** (:mod:`websailor.train.lm_head`): the
   model's reply tokens of each rollout, not its prompt, its tool responses (``env_mask`` 0) or
   the stubs of rollouts without gradient; TRL's fused head projects every completion column
   off CUDA.
3. **No old-log-probability pass when a batch is used once.** With a rollout server, TRL
   computes the log-probabilities of every rollout in a separate no-gradient forward pass
   before the update, to weigh each token by the importance-sampling ratio of the trainer's
   probability to the rollout engine's (``vllm_importance_sampling_correction``). One optimizer
   step per batch (``num_iterations`` 1, one generation per step) means the weights of that
   pass are the weights of the loss's own forward, so its log-probabilities are the loss
   forward's, detached, and the policy ratio is 1 by construction. The correction is then
   computed from the loss forward (:meth:`AgentGRPOTrainer._importance_ratio`), with TRL's modes
   and cap, and logged under TRL's names (``sampling/sampling_logp_difference/*``,
   ``sampling/importance_sampling_ratio/*``). A run whose batches are reused (``num_iterations``
   above 1) takes TRL's path unchanged.

``benchmarks/rl_step.py`` times the update against TRL's path in the same run.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
from torch.utils.data import Sampler
from trl import GRPOTrainer

from websailor.train.lm_head import install_head
from websailor.train.rl.trim import trimmed_logps


class AgentGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` with the update path of the module docstring.

    Args:
        lm_head: ``loss_positions`` (only the positions in the loss go through the LM head) or
            ``trl`` (TRL's fused head over every completion column).
        defer_old_logprobs: compute the importance-sampling correction from the loss's own
            forward instead of a separate pass, when each batch is used once (``False``: TRL's
            separate pass, for comparison).
        *args, **kwargs: ``GRPOTrainer``'s.

    Attributes:
        lm_head: the head in use (``trl`` also when the model needs TRL's).
    """

    def __init__(self, *args: Any, lm_head: str = "loss_positions", defer_old_logprobs: bool = True, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.lm_head = install_head(self.model, lm_head, temperature=self.temperature, outputs=("entropy",))
        self.defer_old_logprobs = defer_old_logprobs
        self._loss_mask: torch.Tensor | None = None  # the micro-batch's positions in the loss, (B, C)
        self._deferred_inputs: dict | None = None  # the micro-batch whose correction waits for its forward
        self._deferring = False
        self._is_stats: dict[str, tuple[float, int, float, float]] = {}  # name: sum, count, min, max
        self._lookahead = _LookAhead()
        #: keep one batch of look-ahead (set for rollouts sampled ahead; off, nothing changes)
        self.look_ahead = False
        #: the prompts of the next generation batch (this process's slice), once this step's
        #: batches are taken; ``None`` when the epoch ends here (rollouts sampled ahead read it)
        self.next_prompts: list | None = None

    # -- the next batch's prompts, for rollouts sampled ahead ----------------------------------
    def _get_train_sampler(self, dataset: Any = None) -> Sampler:
        """TRL's sampler; with :attr:`look_ahead`, its epochs back to back as one pass
        (:class:`EpochsInOnePass`), so the look-ahead sees the next epoch's first batch and a
        batch is sampled ahead at every step, the first of an epoch included."""
        sampler = super()._get_train_sampler(dataset)
        if not self.look_ahead:
            return sampler
        return EpochsInOnePass(sampler, self._passes_needed(len(sampler)))

    def _passes_needed(self, pass_len: int) -> int:
        """Epochs of ``pass_len`` sampler indices (global, over every process) that cover the
        run plus one step of look-ahead beyond its last step. An optimizer step takes
        ``gradient_accumulation_steps`` dataloader batches on each process, each of
        ``per_device_train_batch_size * steps_per_generation`` indices (TRL's dataloader)."""
        args = self.args
        if args.max_steps <= 0:
            return max(1, math.ceil(args.num_train_epochs))
        batch = args.per_device_train_batch_size * args.steps_per_generation * args.world_size
        per_step = batch * args.gradient_accumulation_steps
        return max(1, math.ceil((args.max_steps + 1) * per_step / max(pass_len, 1)))

    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: Any) -> tuple[list, Any]:
        """This step's micro-batches as transformers takes them, and one dataloader batch of
        look-ahead: its prompts become :attr:`next_prompts` (the first batch of the next step is
        its generation batch). The look-ahead batch is handed back at the next call, so the
        trainer sees the same sequence of batches. Without :attr:`look_ahead`, transformers'."""
        if not self.look_ahead:
            return super().get_batch_samples(epoch_iterator, num_batches, device)
        source = self._lookahead.over(epoch_iterator)
        batches, items = super().get_batch_samples(source, num_batches, device)
        upcoming = source.peek()
        self.next_prompts = [row["prompt"] for row in upcoming] if upcoming else None
        return batches, items

    # -- 3. the old-log-probability pass -----------------------------------------------------
    def _batch_used_once(self) -> bool:
        steps = self.args.steps_per_generation * self.num_iterations
        return self.num_iterations == 1 and self.args.gradient_accumulation_steps % steps == 0

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        correcting = self.use_vllm and self.vllm_importance_sampling_correction
        self._deferring = bool(correcting and self.defer_old_logprobs and self._batch_used_once())
        if not self._deferring:
            return super()._generate_and_score_completions(inputs)
        # TRL runs the old-log-probability pass only for this correction: turned off while it
        # scores the batch, then computed from the loss's own forward (_importance_ratio)
        self.vllm_importance_sampling_correction = False
        try:
            return super()._generate_and_score_completions(inputs)
        finally:
            self.vllm_importance_sampling_correction = True

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        mask = inputs["completion_mask"]
        if inputs.get("tool_mask") is not None:
            mask = mask * inputs["tool_mask"]
        self._loss_mask = mask
        if self._deferring:
            self._deferred_inputs = inputs
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._loss_mask = None
            self._deferred_inputs = None

    def _importance_ratio(self, logps: torch.Tensor) -> None:
        """TRL's importance-sampling correction of the micro-batch waiting in
        ``_deferred_inputs``, from the loss forward's log-probabilities ``logps`` ``(B, C)``
        (detached): ``exp(logp_trainer - logp_sampler)`` per token (or per sequence, by the
        mode), truncated at the cap or masked beyond it, stored as the micro-batch's
        ``importance_sampling_ratio``; tokens without a sampling log-probability get 1."""
        inputs = self._deferred_inputs
        if inputs is None:
            return
        self._deferred_inputs = None
        mask = self._loss_mask
        sampling = inputs.get("sampling_per_token_logps")
        if sampling is None:  # the rollouts carry no sampling log-probabilities: nothing to correct
            inputs["importance_sampling_ratio"] = torch.ones_like(logps)
            return
        diff = torch.nan_to_num((logps.detach() - sampling) * mask, nan=0.0)
        mode = self.vllm_importance_sampling_mode
        if mode in ("sequence_mask", "sequence_truncate"):
            diff = diff.sum(dim=-1, keepdim=True)
        ratio = torch.exp(diff)
        lo, hi = self.vllm_importance_sampling_clip_min, self.vllm_importance_sampling_clip_max
        if mode.endswith("truncate"):
            ratio = torch.clamp(ratio, min=lo, max=hi)
        else:
            outside = (ratio < (lo if lo is not None else -math.inf)) | (ratio > (hi if hi is not None else math.inf))
            ratio = ratio.masked_fill(outside, 0.0)
        inputs["importance_sampling_ratio"] = ratio
        on = mask.bool()
        delta = (logps.detach() - sampling).abs()[on & ~torch.isnan(sampling)]
        flat = ratio[on] if ratio.shape == mask.shape else ratio.flatten()
        for name, values in (("sampling_logp_difference", delta), ("importance_sampling_ratio", flat)):
            if values.numel():
                total, count, low, high = self._is_stats.get(name, (0.0, 0, math.inf, -math.inf))
                self._is_stats[name] = (
                    total + float(values.sum()),
                    count + values.numel(),
                    min(low, float(values.min())),
                    max(high, float(values.max())),
                )

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Add the step's importance-sampling figures, over all its micro-batches' tokens in the
        loss as TRL computes them over the batch (mean, and the difference's maximum, the
        ratio's minimum and maximum), to the trainer's metrics, then log."""
        for name, (total, count, low, high) in self._gathered_is_stats().items():
            metrics = self._metrics["train"]
            metrics[f"sampling/{name}/mean"] = [total / count]
            metrics[f"sampling/{name}/max"] = [high]
            if name == "importance_sampling_ratio":
                metrics[f"sampling/{name}/min"] = [low]
        self._is_stats = {}
        super().log(logs, start_time)

    def _gathered_is_stats(self) -> dict[str, tuple[float, int, float, float]]:
        """The step's importance-sampling figures (sum, count, minimum, maximum per name) over
        every process's tokens: each process computes them on its own micro-batches, and one
        process logs (one exchange a logged step, on every process; alone, its own)."""
        if self.accelerator.num_processes == 1:
            return self._is_stats
        names = ("sampling_logp_difference", "importance_sampling_ratio")
        empty = (0.0, 0, math.inf, -math.inf)
        rows = torch.tensor([self._is_stats.get(n, empty) for n in names], dtype=torch.float64)
        every = self.accelerator.gather(rows.to(self.accelerator.device).unsqueeze(0)).cpu()  # (processes, 2, 4)
        return {
            name: (
                float(every[:, i, 0].sum()),
                int(every[:, i, 1].sum()),
                float(every[:, i, 2].min()),
                float(every[:, i, 3].max()),
            )
            for i, name in enumerate(names)
            if every[:, i, 1].sum() > 0
        }

    # -- 1 and 2: the forward passes ---------------------------------------------------------
    def _get_per_token_logps_and_entropies(  # noqa: PLR0913 (TRL's signature)
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        if any(v is not None for v in kwargs.values()):  # images, token types: TRL's own path
            return super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size=batch_size,
                compute_entropy=compute_entropy,
                compute_aux_loss=compute_aux_loss,
                **kwargs,
            )
        forward = functools.partial(self._scored_forward, model, self._loss_mask, compute_aux_loss)
        logps, entropies, aux = trimmed_logps(
            forward, input_ids, attention_mask, logits_to_keep, batch_size=batch_size, compute_entropy=compute_entropy
        )
        if self._deferred_inputs is not None:
            self._importance_ratio(logps)
        return logps, entropies, aux

    def _scored_forward(
        self,
        model: Any,
        loss_mask: torch.Tensor | None,
        compute_aux_loss: bool,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        rows: slice,
        compute_entropy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """One chunk's completion log-probabilities ``(b, logits_to_keep)``: the labels are the
        completion's tokens, and only where ``loss_mask`` (rows ``rows``) is 1 when given."""
        labels = input_ids.masked_fill(attention_mask == 0, -100)
        labels[:, :-logits_to_keep] = -100
        if loss_mask is not None:
            keep = loss_mask[rows, :logits_to_keep].to(labels.device)
            labels[:, -logits_to_keep:] = labels[:, -logits_to_keep:].masked_fill(keep == 0, -100)
        extra = {"output_router_logits": True} if compute_aux_loss else {}
        with self.accelerator.autocast():
            out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, fused_lm_head=True, **extra)
        return (
            out.log_probs[:, -logits_to_keep:],
            out.entropy[:, -logits_to_keep:] if compute_entropy else None,
            out.aux_loss if compute_aux_loss else None,
        )


class EpochsInOnePass(Sampler):
    """``passes`` epochs of ``sampler`` back to back as one: ``iter`` yields what ``passes``
    successive ``iter(sampler)`` calls yield (TRL's ``RepeatSampler`` reshuffles at each call
    from its own generator, so the order is the one the epochs would have had).

    Used only for rollouts sampled ahead: the trainer's look-ahead (:class:`_LookAhead`) cannot
    see past the end of a dataloader epoch, so without it the first batch of every epoch was
    sampled at its own step, on-policy, and a run over few items alternated staleness 0 and 1.
    Within one long pass transformers' logged ``epoch`` runs from 0 to 1 over the whole run.

    Args:
        sampler: the sampler of one epoch (sized).
        passes: how many epochs (>= 1).
    """

    def __init__(self, sampler: Sampler, passes: int) -> None:
        if passes < 1:
            raise ValueError(f"passes {passes}: one or more")
        self.sampler = sampler
        self.passes = passes

    def __iter__(self) -> Any:
        for _ in range(self.passes):
            yield from self.sampler

    def __len__(self) -> int:
        return len(self.sampler) * self.passes


class _LookAhead:
    """An iterator over the trainer's epoch iterator that can hold back one batch it peeked at."""

    _EMPTY = object()

    def __init__(self) -> None:
        self._source: Any = None
        self._held: Any = self._EMPTY

    def over(self, source: Any) -> _LookAhead:
        """Iterate ``source`` (a new epoch's iterator drops what was held of the last one)."""
        if source is not self._source:
            self._source, self._held = source, self._EMPTY
        return self

    def __iter__(self) -> _LookAhead:
        return self

    def __next__(self) -> Any:
        if self._held is not self._EMPTY:
            item, self._held = self._held, self._EMPTY
            return item
        return next(self._source)

    def peek(self) -> Any:
        """The next batch without taking it; ``None`` at the end of the epoch."""
        if self._held is self._EMPTY:
            try:
                self._held = next(self._source)
            except StopIteration:
                return None
        return self._held
