"""Checks for stage10_output_projection (to be written)."""
