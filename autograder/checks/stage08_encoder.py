"""Checks for stage08_encoder (to be written)."""
