"""The reference implementation of the course: the encoder-decoder Transformer of "Attention Is All
You Need" (Vaswani et al. 2017), one module per stage. Lessons import earlier stages from here."""
from .attention import scaled_dot_product_attention, softmax
from .decoder import Decoder, DecoderLayer
from .decoding import beam_search, corpus_bleu, greedy_decode, length_penalty
from .encoder import Encoder, EncoderLayer
from .feed_forward import PositionwiseFeedForward
from .label_smoothing import label_smoothed_loss
from .masks import causal_mask, padding_mask, target_mask
from .multi_head_attention import MultiHeadAttention, merge_heads, split_heads
from .output_projection import Transformer
from .positional_encoding import PositionalEncoding, sinusoidal_encoding
from .residual_layer_norm import LayerNorm, SublayerConnection
from .tokenization import (
    BOS,
    EOS,
    PAD,
    UNK,
    BPETokenizer,
    TokenEmbedding,
    apply_bpe,
    get_pair_stats,
    learn_bpe,
    merge_pair,
    pad_sequences,
)
from .training import Batch, batch_by_tokens, make_batch, make_optimizer, noam_lr, shift_right

__all__ = [
    "PAD", "BOS", "EOS", "UNK",
    "learn_bpe", "apply_bpe", "get_pair_stats", "merge_pair", "BPETokenizer", "pad_sequences",
    "TokenEmbedding", "sinusoidal_encoding", "PositionalEncoding",
    "softmax", "scaled_dot_product_attention",
    "split_heads", "merge_heads", "MultiHeadAttention",
    "padding_mask", "causal_mask", "target_mask",
    "PositionwiseFeedForward",
    "LayerNorm", "SublayerConnection",
    "EncoderLayer", "Encoder",
    "DecoderLayer", "Decoder",
    "Transformer",
    "label_smoothed_loss",
    "shift_right", "Batch", "make_batch", "batch_by_tokens", "noam_lr", "make_optimizer",
    "greedy_decode", "length_penalty", "beam_search", "corpus_bleu",
]
