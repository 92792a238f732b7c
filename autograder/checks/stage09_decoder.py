"""Checks for stage09_decoder (to be written)."""
