"""Adapters for the RL frameworks users already run (each imports its framework lazily)."""
