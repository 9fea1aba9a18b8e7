"""Two RL steps of :class:`~websailor.train.rl.update.AgentGRPOTrainer` on scripted rollouts,
run as one process or under ``accelerate launch`` (tests/test_distributed.py runs both and
compares the weights and the logged figures).

Two questions, one group of two rollouts each: every rollout's tokens, sampling
log-probabilities and advantage are fixed by its question and its place in the group, so a
process that gets one group computes what one process with both computes for it. Each process
gets its contiguous slice of TRL's generation batch, whole groups, as in a real run.

    python tests/distributed_rl_step.py MODEL_DIR OUT
    accelerate launch --config_file configs/accelerate/cpu.yaml tests/distributed_rl_step.py MODEL_DIR OUT

Writes ``OUT/model.safetensors`` (the trained weights) and ``OUT/logs.json`` (the logged figures
of each step) from the first process.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

QUESTIONS = ("Which city is the capital of France?", "Which river flows through Paris?")
GROUP = 2
ADVANTAGES = {QUESTIONS[0]: (0.75, -0.75), QUESTIONS[1]: (-0.5, 0.5)}


def scripted(question: str, k: int, eos: int) -> dict:
    """Rollout ``k`` of ``question``: a reply, a tool response (env_mask 0) and more reply, with
    sampling log-probabilities a little off the tiny model's (as a rollout server's are)."""
    gen = torch.Generator().manual_seed(1000 * QUESTIONS.index(question) + k)
    reply, tool = 6 + 3 * k, 5 + QUESTIONS.index(question)
    ids = torch.randint(100, 40000, (reply + tool + 3,), generator=gen).tolist() + [eos]
    mask = [1] * reply + [0] * tool + [1] * 4
    return {
        "prompt_ids": torch.randint(100, 40000, (5 + k,), generator=gen).tolist(),
        "completion_ids": ids,
        "env_mask": mask,
        "logprobs": [(-10.8 + 0.3 * float(torch.randn(1, generator=gen))) * m for m in mask],
        "advantage": ADVANTAGES[question][k],
    }


def grpo_args(out: Path, accumulation: int, generations: int, max_steps: int, seed: int = 0):
    """TRL's arguments of the tests' RL steps on the tiny model: micro-batches of one rollout,
    ``accumulation`` of them a step, the token-level DAPO loss with clip-higher, no KL, rewards
    passed through unscaled, lr 1e-2 (a step that moves the weights visibly), fp32 on the CPU."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(out),
        learning_rate=1e-2,
        per_device_train_batch_size=1,
        gradient_accumulation_steps=accumulation,
        num_generations=generations,
        max_steps=max_steps,
        beta=0.0,
        loss_type="dapo",
        epsilon=0.2,
        epsilon_high=0.28,
        scale_rewards="none",
        temperature=0.9,
        mask_truncated_completions=False,
        bf16=False,
        gradient_checkpointing=None,
        activation_checkpointing=False,
        save_strategy="no",
        logging_steps=1,
        report_to="none",
        seed=seed,
        disable_tqdm=True,
        use_cpu=True,
    )


def main(model_dir: Path, out: Path) -> None:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    from websailor.train.rl.update import AgentGRPOTrainer

    world = int(os.environ.get("WORLD_SIZE", "1"))
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(model_dir)
    net = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    args = grpo_args(out / "checkpoints", len(QUESTIONS) * GROUP // world, GROUP, max_steps=2)
    logs: list[dict] = []
    seen: list[list[str]] = []

    class Keep(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001
            if logs and "loss" in logs:
                kept.append(dict(logs))

    kept = logs

    def rollout_func(prompts: list, trainer) -> dict:  # noqa: ANN001
        texts = [p[-1]["content"] for p in prompts]
        seen.append(texts)
        rows = [scripted(q, k % GROUP, tok.eos_token_id) for k, q in enumerate(texts)]
        return {key: [row[key] for row in rows] for key in rows[0]}

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    trainer = AgentGRPOTrainer(
        model=net,
        reward_funcs=[lambda prompts, completions, advantage, **kw: list(advantage)],
        args=args,
        train_dataset=Dataset.from_list([{"prompt": [{"role": "user", "content": q}]} for q in QUESTIONS]),
        processing_class=tok,
        rollout_func=rollout_func,
        callbacks=[Keep()],
    )
    trainer.train()
    from accelerate.utils import gather_object

    prompts = gather_object([seen])
    if trainer.is_world_process_zero():
        from safetensors.torch import save_file

        out.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().clone() for k, v in net.state_dict().items()}, str(out / "model.safetensors"))
        (out / "logs.json").write_text(json.dumps({"logs": logs, "prompts": prompts, "world": world}))
    from websailor.train.common import end_processes

    del trainer  # its DDP wrapper holds the process group: freed at exit, it can hang (end_processes)
    end_processes()  # no process exits with gloo's threads running (SIGABRT at exit otherwise)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
