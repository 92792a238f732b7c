"""Checks for stage07_residual_layer_norm (to be written)."""
