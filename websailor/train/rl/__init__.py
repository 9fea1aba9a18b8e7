"""Agentic RL with TRL's ``GRPOTrainer``: DUPO (WebSailor V1) and the V2 on-policy GRPO
variant (WebSailor-V2, arXiv 2509.13305, Sec. 5), with multi-turn rollouts of our agent.

One module per concern:

- :mod:`~websailor.train.rl.settings`: :class:`RLSettings`, the run's file names, the
  micro-batches of a step, the agent's budgets, the training questions;
- :mod:`~websailor.train.rl.prefilter`: the moderate items, by sampling or from existing rollouts;
- :mod:`~websailor.train.rl.rollouts`: the ``rollout_func``: rollouts, grades, advantages, token ids;
- :mod:`~websailor.train.rl.sync`: the policy's weights pushed to a vLLM rollout server every step;
- :mod:`~websailor.train.rl.resume`: a run's identity, log trimming, resuming;
- :mod:`~websailor.train.rl.plan`: what a run settles before it trains (model, items, identity);
- :mod:`~websailor.train.rl.trainer`: the trainer wiring and :func:`train_rl`.

The output directory holds a plain transformers model (``--model hf:DIR`` in ``run`` and
``eval``), ``checkpoints/`` to resume from, ``rollouts.jsonl`` (every graded rollout),
``rl_log.jsonl`` and TensorBoard event files (per-step figures), and ``rl_summary.json``.
"""

from websailor.train.rl.prefilter import prefilter_from_file, prefilter_items, prefilter_source
from websailor.train.rl.settings import (
    DEFAULT_BAND,
    RLSettings,
    accumulation_steps,
    band_verdict,
    build_agent_config,
    load_settings,
    parse_band,
    training_questions,
)
from websailor.train.rl.trainer import train_rl

__all__ = [
    "DEFAULT_BAND",
    "RLSettings",
    "accumulation_steps",
    "band_verdict",
    "build_agent_config",
    "load_settings",
    "parse_band",
    "prefilter_from_file",
    "prefilter_items",
    "prefilter_source",
    "train_rl",
    "training_questions",
]
