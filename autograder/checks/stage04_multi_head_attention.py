"""Checks for stage04_multi_head_attention (to be written)."""
