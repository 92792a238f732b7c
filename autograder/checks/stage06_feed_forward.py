"""Checks for stage06_feed_forward (to be written)."""
