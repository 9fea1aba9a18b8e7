"""The training update's fast path: the loss-position LM head against TRL's fused head (same
values and gradients), the precision chosen by timing this machine, and the RL update's
importance-sampling correction without the old-log-probability pass."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from websailor import precision as prec
from websailor.train.lm_head import add_loss_position_head, install_head, loss_position_logprobs


def _tiny_llama(vocab: int = 1000, seed: int = 0, **extra):
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    cfg = AutoConfig.for_model(
        "llama",
        vocab_size=vocab,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=64,
        tie_word_embeddings=True,
        **extra,
    )
    return AutoModelForCausalLM.from_config(cfg)


def _batch(vocab: int = 1000):
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (2, 40), generator=gen)
    labels = ids.clone()
    labels[:, :10] = -100  # a prompt
    labels[1, 25:] = -100  # and a tool response
    return ids, labels


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_loss_position_head_equals_trls_fused_head(temperature: float):
    """Log-probabilities, entropies, top-1 flags, the loss and every gradient equal TRL's fused
    head's on a random tiny Llama (chunks of 7 tokens, so the recomputed backward crosses
    chunks); positions outside the loss are 0."""
    from trl.trainer.utils import add_fused_lm_head

    trl_model = _tiny_llama()
    with torch.no_grad():
        trl_model.lm_head.weight.mul_(40)  # logits far from uniform, so a wrong softmax shows
    ours = copy.deepcopy(trl_model)
    add_fused_lm_head(trl_model, temperature=temperature, outputs=("log_probs", "entropy", "is_top1"))
    assert add_loss_position_head(ours, temperature=temperature, outputs=("entropy", "is_top1"), chunk=7)
    ids, labels = _batch()
    out = {}
    for name, model in (("trl", trl_model), ("ours", ours)):
        o = model(input_ids=ids, labels=labels, fused_lm_head=True)
        o.loss.backward()
        out[name] = o
    a, b = out["trl"], out["ours"]
    assert torch.allclose(a.loss, b.loss, atol=1e-5)
    assert torch.allclose(a.log_probs, b.log_probs, atol=1e-4)
    assert torch.allclose(a.entropy, b.entropy, atol=1e-4)
    assert torch.equal(a.is_top1, b.is_top1) and torch.equal(a.label_mask, b.label_mask)
    off = labels[:, 1:] == -100
    assert not b.log_probs[off].any() and not b.entropy[off].any()
    for (name, p), (_, q) in zip(trl_model.named_parameters(), ours.named_parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-5, rtol=1e-4), name
    # the model's own forward is unchanged without fused_lm_head
    assert ours(input_ids=ids).logits.shape == (2, 40, 1000)


def test_loss_position_head_under_bf16_autocast_and_with_nothing_in_the_loss():
    """Under bf16 autocast the projection runs in bf16 (as TRL's does on CPU: its fp32 tiles are
    cast back by autocast) and the log-softmax in fp32; a micro-batch without a position in the
    loss gives a zero loss whose backward runs."""
    from trl.trainer.utils import add_fused_lm_head

    trl_model = _tiny_llama()
    ours = copy.deepcopy(trl_model)
    add_fused_lm_head(trl_model)
    add_loss_position_head(ours)
    ids, labels = _batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = trl_model(input_ids=ids, labels=labels, fused_lm_head=True)
        b = ours(input_ids=ids, labels=labels, fused_lm_head=True)
    assert b.log_probs.dtype == torch.float32
    assert torch.allclose(a.log_probs, b.log_probs, atol=0.05)
    empty = ours(input_ids=ids, labels=torch.full_like(labels, -100), fused_lm_head=True)
    empty.loss.backward()
    assert float(empty.loss.detach()) == 0.0


def test_loss_position_logprobs_chunking_does_not_change_the_result():
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(23, 16, generator=gen, requires_grad=True)
    weight = torch.randn(300, 16, generator=gen, requires_grad=True)
    bias = torch.randn(300, generator=gen, requires_grad=True)
    targets = torch.randint(0, 300, (23,), generator=gen)
    grads = []
    for chunk in (5, 1024):
        logps, entropy, top1 = loss_position_logprobs(hidden, weight, bias, targets, 1.3, ("entropy",), chunk)
        assert top1 is None and entropy.shape == (23,)
        (logps * torch.linspace(0.5, 2, 23)).sum().backward()
        grads.append([t.grad.clone() for t in (hidden, weight, bias)])
        for t in (hidden, weight, bias):
            t.grad = None
    reference = torch.log_softmax((hidden @ weight.T + bias) / 1.3, -1).gather(1, targets[:, None]).squeeze(1)
    assert torch.allclose(logps, reference, atol=1e-5)
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-5)


def test_models_whose_heads_scale_logits_keep_trls_head():
    scaled = _tiny_llama(logit_scale=0.5)
    assert add_loss_position_head(scaled) is False
    assert install_head(scaled, "loss_positions") == "trl"
    assert install_head(_tiny_llama(), "trl") == "trl"
    with pytest.raises(ValueError, match="outputs"):
        add_loss_position_head(_tiny_llama(), outputs=("mean_logits",))


# -- precision ------------------------------------------------------------------------------


def test_auto_precision_is_chosen_by_timing_and_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``auto`` picks bf16 only where bf16 products of the model's shapes ran faster; the
    figures are cached per machine and not measured again; an unreadable cache is measured."""
    monkeypatch.setenv("WEBSAILOR_HOME", str(tmp_path))
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    timings = iter([{"fp32": 200.0, "bf16": 50.0}, {"fp32": 100.0, "bf16": 300.0}])
    calls = []

    def fake_time(shapes, seconds=prec.TIME_S):
        calls.append(shapes)
        return next(timings)

    monkeypatch.setattr(prec, "time_matmuls", fake_time)
    first = prec.choose_precision("auto")
    assert first.bf16 is False and first.how == "measured" and first.record()["bf16_over_fp32"] == 0.25
    again = prec.choose_precision("auto")
    assert again.bf16 is False and again.how == "cached" and len(calls) == 1
    assert "0.25x" in again.describe()
    # another model's shapes are another key: measured once more (here bf16 wins)
    from transformers import AutoConfig

    cfg = AutoConfig.for_model("llama", hidden_size=64, intermediate_size=128, vocab_size=500)
    other = prec.choose_precision("auto", cfg)
    assert other.bf16 is True and other.how == "measured" and calls[-1][1] == (prec.ROWS, 64, 128)
    (tmp_path / prec.CACHE_FILE).write_text("not json")
    with pytest.raises(StopIteration):  # measured again (the fake has no third answer)
        prec.choose_precision("auto")
    assert prec.choose_precision("auto", measure=False).how == "not_measured"


@pytest.mark.parametrize("bad", [{"fp32": 0, "bf16": 0}, {"fp32": -5, "bf16": 3}, {"fp32": True, "bf16": True},
                                 {"fp32": float("nan"), "bf16": 1.0}, {"fp32": 1.0}])  # fmt: skip
def test_cached_figures_that_cannot_be_true_are_measured_again(tmp_path: Path, monkeypatch, bad: dict):
    import json

    monkeypatch.setenv("WEBSAILOR_HOME", str(tmp_path))
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setattr(prec, "time_matmuls", lambda shapes, seconds=prec.TIME_S: {"fp32": 200.0, "bf16": 50.0})
    prec.choose_precision("auto")
    cache = json.loads((tmp_path / prec.CACHE_FILE).read_text())
    for entry in cache.values():
        entry["gflops"] = bad
    (tmp_path / prec.CACHE_FILE).write_text(json.dumps(cache))
    choice = prec.choose_precision("auto")
    assert choice.how == "measured" and choice.bf16 is False and "0.25x" in choice.describe()


def test_asked_precision_and_gpus(monkeypatch: pytest.MonkeyPatch):
    assert prec.choose_precision("bf16").bf16 is True and prec.choose_precision("fp32").bf16 is False
    assert prec.choose_precision("fp32").record() == {"precision": "fp32", "how": "asked"}
    with pytest.raises(ValueError, match="precision 'fp16'"):
        prec.choose_precision("fp16")
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.is_bf16_supported", lambda: False)
    assert prec.choose_precision("auto").how == "no_bf16"


def test_timing_real_matmuls_gives_positive_figures():
    figures = prec.time_matmuls([(256, 256, 256)], seconds=0.01)
    assert set(figures) == {"fp32", "bf16"} and all(v > 0 for v in figures.values())


def test_a_probe_that_bf16_loses_by_far_ends_the_timing(monkeypatch: pytest.MonkeyPatch):
    """bf16 4x slower than fp32 or worse on the probe (a CPU without bf16 instructions): the
    model's full shapes are never timed; a closer probe goes on to them."""
    timed = []

    def fake(shapes, seconds):
        timed.append(shapes)
        return {"fp32": 100.0, "bf16": bf16}

    monkeypatch.setattr(prec, "_gflops", fake)
    shapes = prec.model_shapes(None)
    bf16 = 2.0
    assert prec.time_matmuls(shapes) == {"fp32": 100.0, "bf16": 2.0}
    assert timed == [[(prec.PROBE_ROWS, 576, 576)]]
    timed.clear()
    bf16 = 60.0
    prec.time_matmuls(shapes)
    assert timed == [[(prec.PROBE_ROWS, 576, 576)], shapes]


# -- the RL update -----------------------------------------------------------------------------


class _NoSync:
    """Stands where the rollout server's weight sync goes (TRL calls it between steps)."""

    def sync_weights(self) -> None:
        pass


def _one_rl_step(model_dir: Path, out: Path, lm_head: str, defer: bool, rollouts: dict, seed: int = 0):
    """One optimizer step of :class:`AgentGRPOTrainer` on ``rollouts`` (a fixed batch, with
    sampling log-probabilities that differ from the trainer's, as a rollout server's do):
    the trained parameters and the step's logged figures."""
    from datasets import Dataset
    from distributed_rl_step import grpo_args
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from websailor.train.rl.sync import attach
    from websailor.train.rl.update import AgentGRPOTrainer

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(model_dir)
    net = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    n = len(rollouts["prompt_ids"])
    args = grpo_args(out, n, n, max_steps=1, seed=seed)
    logs = []

    from transformers import TrainerCallback

    class Keep(TrainerCallback):
        def on_log(self, args, state, control, logs_=None, **kw):  # noqa: ANN001
            logs.append(dict(kw.get("logs") or logs_ or {}))

    trainer = AgentGRPOTrainer(
        model=net,
        lm_head=lm_head,
        defer_old_logprobs=defer,
        reward_funcs=[lambda prompts, completions, advantage, **kw: list(advantage)],
        args=args,
        train_dataset=Dataset.from_list([{"prompt": [{"role": "user", "content": "q"}]}]),
        processing_class=tok,
        rollout_func=lambda prompts, trainer: {k: list(v) for k, v in rollouts.items()},
        callbacks=[Keep()],
    )
    attach(trainer, _NoSync(), "token_truncate", 2.0)
    trainer.train()
    return [p.detach().clone() for p in net.parameters()], next(x for x in logs if "loss" in x), trainer


@pytest.fixture(scope="module")
def tiny_model(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.test_sft import _save_tiny

    return _save_tiny(tmp_path_factory.mktemp("tiny") / "llama", smollm2_path)


def _fixed_rollouts(tokenizer_dir: Path) -> dict:
    """Two groups' worth of rollouts: prompts, replies with a tool response between them
    (env_mask 0), sampling log-probabilities near the tiny model's, advantages of both signs."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    gen = torch.Generator().manual_seed(3)
    out: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "env_mask": [], "logprobs": [], "advantage": []}
    for i, (reply, tool) in enumerate([(12, 9), (7, 0), (15, 20), (5, 11)]):
        ids = torch.randint(100, 40000, (reply + tool + 4,), generator=gen).tolist() + [tok.eos_token_id]
        mask = [1] * reply + [0] * tool + [1] * 4 + [1]
        out["prompt_ids"].append(torch.randint(100, 40000, (6 + i,), generator=gen).tolist())
        out["completion_ids"].append(ids)
        out["env_mask"].append(mask)
        # the tiny random model puts about -log(49152) = -10.8 on every token; a server differs a little
        out["logprobs"].append([(-10.8 + 0.3 * float(torch.randn(1, generator=gen))) * m for m in mask])
        out["advantage"].append([0.75, -0.25, 0.5, -1.0][i])
    return out


@pytest.mark.trainer
def test_rl_update_without_the_old_logprob_pass_equals_trls(tiny_model: Path, tmp_path: Path):
    """One step with the importance-sampling correction computed from the loss's own forward
    (no old-log-probability pass) and only the reply tokens through the LM head reaches the
    same weights, loss and logged correction as TRL's path (its separate pass, its fused head)."""
    rollouts = _fixed_rollouts(tiny_model)
    trl_weights, trl_log, _ = _one_rl_step(tiny_model, tmp_path / "trl", "trl", False, rollouts)
    ours_weights, ours_log, trainer = _one_rl_step(tiny_model, tmp_path / "ours", "loss_positions", True, rollouts)
    assert trainer.lm_head == "loss_positions"
    from transformers import AutoModelForCausalLM

    base = [p.detach() for p in AutoModelForCausalLM.from_pretrained(tiny_model).parameters()]
    step = max(float((a - p).abs().max()) for a, p in zip(trl_weights, base))
    assert step > 1e-3  # the step really trained (lr 1e-2)
    # Adam's first step is about lr x sign(gradient): a gradient that differs in its last bits
    # (the heads sum in different orders) moves a weight by a little; 1% of the step at most
    assert max(float((a - b).abs().max()) for a, b in zip(trl_weights, ours_weights)) < 0.01 * step
    for key in (
        "loss",
        "grad_norm",
        "sampling/sampling_logp_difference/mean",
        "sampling/sampling_logp_difference/max",
        "sampling/importance_sampling_ratio/min",
        "sampling/importance_sampling_ratio/mean",
        "sampling/importance_sampling_ratio/max",
        "entropy",
    ):
        assert ours_log[key] == pytest.approx(trl_log[key], rel=1e-4, abs=1e-6), key
    assert trl_log["sampling/importance_sampling_ratio/max"] <= 2.0  # the cap applies on both paths


@pytest.mark.trainer
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_sft_losses_match_trls_head(tiny_model: Path, generated_chatml, tmp_path: Path, precision: str):
    """The first SFT steps with the loss-position head give TRL's head's losses (fp32: to 1e-4;
    bf16 autocast: within bf16's tolerance), and the summary names the head and precision."""
    from tests.test_sft import _import_first
    from websailor.train.sft import SFTSettings, train_sft

    data = _import_first(generated_chatml.path, tmp_path / "sft.jsonl", n=4)
    losses = {}
    steps = 3 if precision == "fp32" else 2  # bf16 products run 170x slower than fp32 on some CPUs
    for head in ("trl", "loss_positions"):
        settings = SFTSettings(
            max_steps=steps,
            batch_size=2,
            learning_rate=1e-3,
            warmup_ratio=0,
            max_length=8192,
            precision=precision,
            lm_head=head,
        )
        s = train_sft(data, f"hf:{tiny_model}", tmp_path / head, settings, progress=False)
        assert s["lm_head"] == head and s["precision"] == {"precision": precision, "how": "asked"}
        losses[head] = [h["loss"] for h in s["loss_history"]]
    assert len(losses["trl"]) == steps and all(x > 1 for x in losses["trl"])
    tolerance = 1e-4 if precision == "fp32" else 2e-2
    assert losses["loss_positions"] == pytest.approx(losses["trl"], rel=tolerance)


def test_checkpointing_keeps_the_attention_and_recomputes_the_rest(tmp_path: Path):
    """With gradient checkpointing as the trainers enable it, each layer's attention kernel runs
    once (its output is kept), where plain checkpointing runs it again in the backward pass; the
    other products are recomputed in both; the gradients are the same as without checkpointing."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from websailor.train.common import CHECKPOINTING_KWARGS, load_trainable_model
    from websailor.train.sft import SFTSettings

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls: dict[str, int] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func._opname
            self.calls[name] = self.calls.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    _tiny_llama().save_pretrained(tmp_path / "m")
    ids = torch.randint(0, 1000, (1, 24))

    def run(mode: str) -> tuple[dict, list]:
        model = load_trainable_model(tmp_path / "m", SFTSettings())
        if mode != "none":
            model.activation_checkpointing_enable(dict(CHECKPOINTING_KWARGS))
            if mode == "plain":  # what the trainers asked for before
                from transformers import PreTrainedModel

                PreTrainedModel.activation_checkpointing_enable(model, dict(CHECKPOINTING_KWARGS))
        model.train()
        with Count() as count:
            model(input_ids=ids, labels=ids).loss.backward()
        return count.calls, [p.grad.clone() for p in model.parameters()]

    none, none_grads = run("none")
    selective, grads = run("selective")
    plain, _ = run("plain")
    attention = "_scaled_dot_product_flash_attention_for_cpu"
    assert none[attention] == selective[attention] == 2 and plain[attention] == 4  # 2 layers
    assert selective["mm"] > none["mm"]  # the projections are recomputed
    for a, b in zip(none_grads, grads):
        assert torch.allclose(a, b, atol=1e-6)


def _completion_logprob(net, prompt: list[int], completion: list[int], mask: list[int]) -> float:
    """Sum of ``log p(token)`` over the completion's tokens in the loss (``mask`` 1)."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logp = torch.log_softmax(net(ids).logits[0, len(prompt) - 1 : -1].float(), dim=-1)
    picked = logp.gather(1, torch.tensor(completion)[:, None])[:, 0]
    return float((picked * torch.tensor(mask, dtype=picked.dtype)).sum())


@pytest.mark.trainer
def test_one_update_raises_the_positive_completions_and_lowers_the_negative_ones(tiny_model: Path, tmp_path: Path):
    """The update's direction, independent of any sampling: one step on fixed rollouts raises
    the log-probability of every completion with a positive advantage and lowers every one with
    a negative advantage (a sign error anywhere between the advantages and the loss fails it)."""
    from transformers import AutoModelForCausalLM

    rollouts = _fixed_rollouts(tiny_model)
    rollouts["advantage"] = [1.0, -1.0, 1.0, -1.0]
    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    before = [
        _completion_logprob(base, p, c, m)
        for p, c, m in zip(rollouts["prompt_ids"], rollouts["completion_ids"], rollouts["env_mask"])
    ]
    _, _, trainer = _one_rl_step(tiny_model, tmp_path / "ours", "loss_positions", True, rollouts)
    after = [
        _completion_logprob(trainer.model, p, c, m)
        for p, c, m in zip(rollouts["prompt_ids"], rollouts["completion_ids"], rollouts["env_mask"])
    ]
    moved = [a - b for a, b in zip(after, before)]
    assert all(d > 0 for d, adv in zip(moved, rollouts["advantage"]) if adv > 0), moved
    assert all(d < 0 for d, adv in zip(moved, rollouts["advantage"]) if adv < 0), moved
