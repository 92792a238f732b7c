"""Checks for stage13_decoding (to be written)."""
