"""Bounded-staleness asynchronous rollouts: the next batch is sampled on the rollout servers
while the current one trains (``max_staleness`` K >= 1; issue 40).

How a step runs with K >= 1 (the trainer's dataloader tells the next batch's prompts in
advance: :meth:`websailor.train.rl.update.AgentGRPOTrainer.get_batch_samples` keeps one batch of
look-ahead, and the run's epochs are one pass of the dataloader, so it sees across an epoch's
end too):

1. TRL syncs the weights of step ``s`` before the step's rollouts. The sync first waits for the
   batch sampled ahead, if one is in flight (:meth:`SampleAhead.settle`), so no rollout mixes two
   weight versions.
2. The rollout function takes the batch sampled ahead for step ``s`` when its prompts are the
   ones TRL hands over and its weights are at most K versions old; otherwise it samples the batch
   now, from the weights of step ``s`` (the first step, the first after a resume).
3. Once that batch is graded and handed to the trainer, the next step's batch starts sampling
   on the servers, from the weights of step ``s``, and runs while step ``s`` trains.

Each rollout records the policy version that sampled it and its staleness (the versions between
those weights and the update that trains on it); the importance-sampling correction uses the
server's own log-probabilities as on the on-policy path. The sync waits for the batch in flight,
so the staleness realized is at most 1 whatever K >= 1 allows: one batch is sampled ahead.
K = 0 (the default) never starts this and is the on-policy path unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass
from typing import Any

from websailor.log import get_logger

logger = get_logger(__name__)


@dataclass
class AheadBatch:
    """A batch sampled ahead: the prompts' texts it answers, the optimizer step it is for, the
    policy version (optimizer steps) of the weights that sampled it, and its rollouts (a future
    of ``(trajectories, seconds)``)."""

    texts: list[str]
    step: int
    version: int
    future: Future


class SampleAhead:
    """The one batch sampled ahead of the trainer.

    Args:
        max_staleness: K, the most policy versions a rollout may lag the update that trains on
            it (>= 1 here; K = 0 never builds this object).

    Attributes:
        mispredicted: batches sampled ahead that were thrown away (their prompts were not the
            step's, or they were too old).
        wait_s: seconds the last :meth:`settle` waited for the batch in flight.
    """

    def __init__(self, max_staleness: int) -> None:
        if max_staleness < 1:
            raise ValueError(f"max_staleness {max_staleness}: sampling ahead needs 1 or more")
        self.max_staleness = max_staleness
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rl-ahead")
        self._batch: AheadBatch | None = None
        self.mispredicted = 0
        self.wait_s = 0.0

    def start(self, texts: list[str], step: int, version: int, sample: Callable[[], Any]) -> None:
        """Start sampling the batch of ``texts`` for optimizer step ``step`` from the weights of
        ``version``; ``sample()`` returns its trajectories."""

        def timed() -> tuple[Any, float]:
            t0 = time.perf_counter()
            return sample(), time.perf_counter() - t0

        self._batch = AheadBatch(list(texts), step, version, self._pool.submit(timed))

    def settle(self) -> None:
        """Wait for the batch in flight to finish (before the weights change under it); its
        error, if any, is raised when it is taken."""
        t0 = time.perf_counter()
        if self._batch is not None:
            wait_for([self._batch.future])
        self.wait_s = time.perf_counter() - t0

    def take(self, texts: list[str], step: int) -> tuple[Any, float, int] | None:
        """The trajectories sampled ahead for ``step`` when they answer ``texts`` within the
        staleness bound, with their sampling seconds and policy version; ``None`` (sample now)
        otherwise.

        Raises:
            whatever sampling the batch raised (a server that failed during it).
        """
        batch, self._batch = self._batch, None
        if batch is None:
            return None
        if batch.step != step or batch.texts != list(texts) or step - batch.version > self.max_staleness:
            wait_for([batch.future])
            self.mispredicted += 1
            logger.warning(
                "step %d: the batch sampled ahead (for step %d, policy version %d) is not this step's; sampling it now",
                step + 1, batch.step + 1, batch.version,
            )  # fmt: skip
            return None
        trajs, seconds = batch.future.result()
        return trajs, seconds, batch.version

    def close(self) -> None:
        """Stop: a batch in flight finishes and is dropped."""
        self._batch = None
        self._pool.shutdown(wait=True, cancel_futures=True)
