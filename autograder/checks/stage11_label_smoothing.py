"""Checks for stage11_label_smoothing (to be written)."""
