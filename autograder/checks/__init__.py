"""The checks, one module per stage (stageNN_topic.py); a stage whose checks would pass 800 lines keeps its
shared helpers there and gives each graded name a module of its own (stageNN_name.py). Importing this
package registers them all, in the lessons' order: the order below, which the registry keeps."""
from . import (  # noqa: F401,I001  (the order is the registry's: the lessons' order, not the alphabet's)
    stage01_tokenization, stage01_get_pair_stats, stage01_merge_pair, stage01_learn_bpe, stage01_apply_bpe,
    stage01_bpe_tokenizer, stage01_pad_sequences, stage01_token_embedding,
    stage02_positional_encoding,
    stage03_attention,
    stage04_multi_head_attention,
    stage05_masks,
    stage06_feed_forward,
    stage07_residual_layer_norm,
    stage08_encoder, stage08_encoder_layer, stage08_encoder_stack,
    stage09_decoder,
    stage10_output_projection, stage10_transformer,
    stage11_label_smoothing,
    stage12_training, stage12_shift_right, stage12_make_batch, stage12_batch_by_tokens, stage12_noam_lr,
    stage12_make_optimizer,
    stage13_decoding, stage13_greedy_decode, stage13_length_penalty, stage13_beam_search, stage13_corpus_bleu)
