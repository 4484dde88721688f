"""Trainer-side helpers for the rlk training classes (distributed wrapping)."""
