"""Training data and training: trajectories for SFT (constructive, expert, imported), SFT,
and agentic RL (V2 and DUPO)."""
