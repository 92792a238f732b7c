"""One module of checks per stage; importing this package registers them all."""
from . import (stage01_tokenization, stage02_positional_encoding, stage03_attention,  # noqa: F401
               stage04_multi_head_attention, stage05_masks, stage06_feed_forward, stage07_residual_layer_norm,
               stage08_encoder, stage09_decoder, stage10_output_projection, stage11_label_smoothing,
               stage12_training, stage13_decoding)
