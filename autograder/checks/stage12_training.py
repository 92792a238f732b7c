"""Checks for stage12_training (to be written)."""
