"""Checks for stage02_positional_encoding (to be written)."""
