"""An agent with its model and tool environment, opened together and closed together: what
``run``, ``eval``, ``synth --filter-with`` and ``traj build --source expert`` each start from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from websailor.agent.loop import Agent, AgentConfig
from websailor.models.base import ChatModel

if TYPE_CHECKING:
    from websailor.models.serving import ServedModel
    from websailor.tools.environment import EnvSpec, ToolEnvironment


@dataclass
class AgentSession:
    """``agent`` runs questions with the tools of ``environment``; :meth:`close` releases both
    (the model's threads and connections, the tools' executor, and a vLLM server the session
    started for its model) and returns the tool metrics."""

    agent: Agent
    environment: ToolEnvironment
    served: ServedModel | None = None

    def close(self, metrics_file: str | Path | None = None) -> dict[str, Any]:
        """Close the tools and the model; append the tool metrics to ``metrics_file`` when given.

        Returns:
            The metrics summary by tool (empty when no tool was offered).
        """
        try:
            self.environment.close()
            if metrics_file is not None:
                return self.environment.record_metrics(metrics_file)
            return self.environment.metrics.summary()
        finally:
            try:
                self.agent.model.close()
            finally:
                if self.served is not None:
                    self.served.close()

    def __enter__(self) -> AgentSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_agent(
    model: str | ChatModel,
    env: EnvSpec | None = None,
    config: AgentConfig | None = None,
    engine: str | None = None,
    rollouts: int = 0,
    **model_kwargs: Any,
) -> AgentSession:
    """Open the tools of ``env`` and load ``model`` (a spec for :func:`websailor.models.load_model`,
    with ``model_kwargs``, or a model object) into an agent with ``config``.

    Args:
        engine: ``auto``, ``local`` or ``vllm``: which engine serves a local model spec for the
            session's ``rollouts`` (:func:`websailor.models.serving.serve_for_job`; a server it
            starts is stopped by :meth:`AgentSession.close`); ``None``: the spec as it is.
        rollouts: the rollouts the session will run (what ``auto`` weighs).

    Raises:
        ConfigError: a bad model spec, engine or environment (see
            :func:`websailor.tools.environment.open_environment`); nothing stays open.
        DownloadError: the embedded model could not be fetched.
    """
    from websailor.models import load_model
    from websailor.tools.environment import open_environment

    environment = open_environment(env)
    served = None
    try:
        if isinstance(model, str) and engine is not None:
            from websailor.models.serving import serve_for_job

            served = serve_for_job(model, engine, rollouts)
            if served.engine == "vllm":
                model_kwargs = {**model_kwargs, "label": served.label}
            model = served.spec
        chat = load_model(model, **model_kwargs) if isinstance(model, str) else model
        return AgentSession(
            Agent(chat, environment.tools, config, env=environment.name, env_settings=environment.settings),
            environment,
            served,
        )
    except BaseException:
        try:
            environment.close()
        finally:
            if served is not None:
                served.close()
        raise
