"""Checks for stage05_masks (to be written)."""
