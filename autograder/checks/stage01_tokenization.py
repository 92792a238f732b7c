"""Checks for stage01_tokenization (to be written)."""
