"""Training data and training: trajectories for SFT (constructive, expert, imported), SFT,
and agentic RL (in progress, issue 6 onward)."""
