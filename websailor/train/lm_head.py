"""The LM head and the log-probabilities computed only at the positions in the loss.

An agent trajectory is mostly tool responses and prompts: in the ladder experiment's SFT data
19% of the tokens are assistant tokens, the only ones in the loss, and in an RL rollout the
tool responses are masked out too. TRL's fused LM head (``add_fused_lm_head``) projects only
the positions in the loss on CUDA, but on every other device it projects every position onto
the whole vocabulary (49,152 columns for SmolLM2) and upcasts each tile to fp32 off CUDA
(``_addmm_fp32``), whatever the training precision. :func:`add_loss_position_head` replaces that
forward: the backbone runs as before, then only the hidden states whose next-token label is in
the loss go through the head, in the training precision (bf16 under bf16 autocast), in chunks of
tokens whose logits are recomputed in the backward pass instead of kept. The log-softmax runs in
fp32. The result has the fields of TRL's ``FusedCausalLMOutput`` (zeros off the loss), so TRL's
``SFTTrainer.compute_loss`` and ``GRPOTrainer``'s loss read it unchanged.

Models whose heads scale or soft-cap their logits (``logit_scale``, ``final_logit_softcapping``)
or return a router loss keep TRL's head.
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import Any

import torch

from websailor.log import get_logger

logger = get_logger(__name__)

#: tokens per chunk of the projection: 1,024 x 49,152 fp32 logits are 201 MB
CHUNK_TOKENS = 1024
#: per-token outputs the head can give besides the log-probabilities (TRL's names)
EXTRA_OUTPUTS = ("entropy", "is_top1")


def _compute_dtype(device: torch.device, dtype: torch.dtype) -> torch.dtype:
    """The dtype the projection runs in: autocast's when autocast is on for ``device``."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return dtype


class _LossPositionLogProbs(torch.autograd.Function):
    """``log softmax(h W^T + b)[target]`` for ``K`` hidden states, in chunks of tokens.

    Forward saves the inputs and each token's log-sum-exp, not the ``(K, V)`` logits; backward
    recomputes each chunk's logits and forms ``d logp / d z = onehot(target) - softmax(z)``.
    Entropy and top-1 agreement are computed under no gradient (metrics).
    """

    @staticmethod
    def forward(  # noqa: PLR0913
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        inv_temperature: float,
        chunk: int,
        dtype: torch.dtype,
        want_entropy: bool,
        want_top1: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n = hidden.size(0)
        logps = hidden.new_zeros(n, dtype=torch.float32)
        lse = hidden.new_zeros(n, dtype=torch.float32)
        entropy = hidden.new_zeros(n if want_entropy else 0, dtype=torch.float32)
        top1 = hidden.new_zeros(n if want_top1 else 0, dtype=torch.bool)
        w = weight.to(dtype)
        b = None if bias is None else bias.to(dtype)
        for lo in range(0, n, chunk):
            hi = min(n, lo + chunk)
            z = torch.nn.functional.linear(hidden[lo:hi].to(dtype), w, b).float()
            if inv_temperature != 1.0:
                z.mul_(inv_temperature)
            chunk_lse = torch.logsumexp(z, dim=-1)
            tgt = targets[lo:hi]
            logps[lo:hi] = z.gather(1, tgt[:, None]).squeeze(1) - chunk_lse
            lse[lo:hi] = chunk_lse
            if want_top1:
                top1[lo:hi] = z.argmax(dim=-1) == tgt
            if want_entropy:
                z.sub_(chunk_lse[:, None])  # log-probabilities, in place: one (c, V) buffer
                entropy[lo:hi] = -(z.exp() * z).sum(dim=-1)
            del z
        ctx.save_for_backward(hidden, weight, bias if bias is not None else weight.new_empty(0), targets, lse)
        ctx.has_bias = bias is not None
        ctx.inv_temperature, ctx.chunk, ctx.dtype = inv_temperature, chunk, dtype
        ctx.mark_non_differentiable(entropy, top1)
        return logps, entropy, top1

    @staticmethod
    def backward(ctx: Any, grad_logps: torch.Tensor, *_: Any) -> tuple[Any, ...]:
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        dtype, chunk, scale = ctx.dtype, ctx.chunk, ctx.inv_temperature
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.zeros_like(hidden) if need_h else None
        grad_w = torch.zeros_like(weight, dtype=torch.float32) if need_w else None
        grad_b = torch.zeros(weight.size(0), dtype=torch.float32, device=weight.device) if need_b else None
        w = weight.to(dtype)
        b = bias.to(dtype) if ctx.has_bias else None
        for lo in range(0, hidden.size(0), chunk):
            hi = min(hidden.size(0), lo + chunk)
            h = hidden[lo:hi].to(dtype)
            z = torch.nn.functional.linear(h, w, b).float()
            if scale != 1.0:
                z.mul_(scale)
            g = grad_logps[lo:hi].float()
            # d logp / d z = onehot - softmax; times the incoming gradient and the temperature's scale
            z.sub_(lse[lo:hi, None]).exp_().mul_(-g[:, None])
            z.scatter_add_(1, targets[lo:hi, None], g[:, None])
            if scale != 1.0:
                z.mul_(scale)
            grad_z = z.to(dtype)
            del z
            if need_h:
                grad_h[lo:hi] = (grad_z @ w).to(hidden.dtype)
            if need_w:
                grad_w += (grad_z.t() @ h).float()
            if need_b:
                grad_b += grad_z.float().sum(dim=0)
        if grad_w is not None:
            grad_w = grad_w.to(weight.dtype)
        if grad_b is not None:
            grad_b = grad_b.to(bias.dtype)
        return grad_h, grad_w, grad_b, None, None, None, None, None, None


def loss_position_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    temperature: float = 1.0,
    outputs: Sequence[str] = (),
    chunk: int = CHUNK_TOKENS,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Log-probabilities of ``targets`` under ``softmax((hidden @ weight.T + bias) / temperature)``.

    Args:
        hidden: ``(K, d)`` hidden states of the positions in the loss.
        weight, bias: the LM head, ``(V, d)`` and ``(V,)`` or ``None``.
        targets: ``(K,)`` token ids.
        temperature: the logits are divided by it (GRPO scores at the sampling temperature).
        outputs: which of :data:`EXTRA_OUTPUTS` to compute too (no gradient).
        chunk: tokens per projection; the logits of one chunk, ``chunk x V`` fp32, are the
            largest buffer.

    Returns:
        ``(log_probs, entropy, is_top1)``, each ``(K,)``; the last two ``None`` unless asked.
        The projection runs in autocast's dtype when autocast is on, else in ``hidden``'s;
        the softmax in fp32; ``log_probs`` is fp32.
    """
    dtype = _compute_dtype(hidden.device, hidden.dtype)
    logps, entropy, top1 = _LossPositionLogProbs.apply(
        hidden, weight, bias, targets, 1.0 / temperature, chunk, dtype, "entropy" in outputs, "is_top1" in outputs
    )
    return logps, (entropy if "entropy" in outputs else None), (top1 if "is_top1" in outputs else None)


def supports_loss_position_head(model: Any) -> str | None:
    """Why ``model`` must keep TRL's head (``None``: it can take ours): a head that scales or
    soft-caps its logits, or a mixture of experts that returns a router loss."""
    config = model.config.get_text_config()
    for name in ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling"):
        value = getattr(config, name, None)
        if value not in (None, 1, 1.0):
            return f"its head applies {name}={value}"
    if getattr(config, "output_router_logits", False) or getattr(config, "num_experts", None):
        return "it is a mixture of experts (router loss)"
    if model.get_output_embeddings() is None:
        return "it has no output embeddings"
    return None


def add_loss_position_head(
    model: Any, temperature: float = 1.0, outputs: Sequence[str] = (), chunk: int = CHUNK_TOKENS
) -> bool:
    """Make ``model(..., labels=labels, fused_lm_head=True)`` score only the positions whose
    next-token label is not ``-100`` (see the module docstring); other calls run the model's
    own forward. Call it after TRL's trainer is built (it replaces TRL's fused head, which the
    trainer added), on the model itself, not a PEFT or DDP wrapper around it.

    Args:
        model: a transformers causal LM.
        temperature: the logits are divided by it.
        outputs: per-token fields besides ``log_probs``: ``entropy``, ``is_top1``.
        chunk: tokens per projection (:func:`loss_position_logprobs`).

    Returns:
        Whether the head was added: ``False`` (and a log line) for models whose heads need
        TRL's (:func:`supports_loss_position_head`).
    """
    from trl.trainer.utils import FusedCausalLMOutput

    why = supports_loss_position_head(model)
    if why is not None:
        logger.info("%s keeps TRL's LM head: %s", type(model).__name__, why)
        return False
    unknown = [o for o in outputs if o not in EXTRA_OUTPUTS and o != "log_probs"]
    if unknown:
        raise ValueError(f"outputs {unknown}: the loss-position head computes log_probs, {', '.join(EXTRA_OUTPUTS)}")
    own_forward = types.MethodType(type(model).forward, model)

    def forward(
        self: Any,
        *args: Any,
        fused_lm_head: bool = False,
        labels: torch.Tensor | None = None,
        shift_labels: torch.Tensor | None = None,
        num_items_in_batch: Any = None,
        **kwargs: Any,
    ) -> Any:
        if not fused_lm_head:
            extra = {"labels": labels, "shift_labels": shift_labels, "num_items_in_batch": num_items_in_batch}
            return own_forward(*args, **kwargs, **{k: v for k, v in extra.items() if v is not None})
        kwargs["use_cache"] = False
        states = self.base_model(*args, **kwargs).last_hidden_state
        if shift_labels is None:
            states, targets = states[:, :-1], labels[:, 1:]
        else:
            targets = shift_labels
        head = self.get_output_embeddings()
        mask = targets != -100
        logps, entropy, top1 = loss_position_logprobs(
            states[mask].to(head.weight.device), head.weight, head.bias, targets[mask], temperature, outputs, chunk
        )
        # masked_scatter keeps a batch without any position in the loss connected to the graph
        per_token = [
            None if x is None else x.new_zeros(mask.shape).masked_scatter(mask.to(x.device), x)
            for x in (logps, entropy, top1)
        ]
        denominator = mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
        return FusedCausalLMOutput(
            loss=-per_token[0].sum() / denominator,
            log_probs=per_token[0],
            entropy=per_token[1],
            is_top1=per_token[2],
            label_mask=mask,
        )

    model.forward = types.MethodType(forward, model)
    return True


def install_head(model: Any, setting: str, temperature: float = 1.0, outputs: Sequence[str] = ()) -> str:
    """Give a trainer's ``model`` (PEFT-wrapped or not) the LM head its ``lm_head`` setting
    names, after TRL's trainer has added its own; returns the head in use, ``loss_positions`` or
    ``trl`` (also when the model needs TRL's: :func:`supports_loss_position_head`)."""
    if setting != "loss_positions":
        return "trl"
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "loss_positions" if add_loss_position_head(base, temperature, outputs) else "trl"
