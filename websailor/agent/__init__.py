"""The ReAct agent: protocol prompt, turn parsing, the loop, trajectories and batch runs."""

from websailor.agent.loop import Agent, AgentConfig
from websailor.agent.trajectory import TERMINATIONS, ToolCallRecord, Trajectory

__all__ = ["TERMINATIONS", "Agent", "AgentConfig", "ToolCallRecord", "Trajectory"]
