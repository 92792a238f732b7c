"""The contract as data: for each graded name, the input space its checks run over and what it returns and
must leave alone. The checks read what they need from here (`CONTRACTS[name]`), and tests/test_registry.py
holds every check to it: the reference is graded through a recorder, and each input kind declared under
`exercised` must reach it (a check that stops passing, say, a float64 tensor makes that test fail). The stubs'
docstrings say the same.

Fields of `Contract`:
- exercised: the kinds of input the checks must pass to the name (its function, or `method` of its class):
  "float32", "float64" (a floating tensor of that dtype), "strided" (a non-contiguous tensor), "one-pass" (an
  iterator, empty once read: a generator, an open file), "batch of one" (a tensor whose first dimension is 1),
  "empty" (an empty list or a tensor with no elements).
- method: for a class, the method whose arguments are recorded ("forward" by default).
- returns: the exact return type the checks hold.
- empty: what an empty input does, where the contract allows one.
- side_effects: what a call must leave as it found it (inputs, the caller's module mode).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Contract:
    exercised: tuple = ()
    method: str = "forward"
    returns: str = ""
    empty: str = ""
    side_effects: str = "inputs unchanged"


_T32 = ("float32",)
CONTRACTS: dict[str, Contract] = {
    # stage 01
    "get_pair_stats": Contract(returns="a dict (Counter) of pair -> count, no zero counts"),
    "merge_pair": Contract(returns="a tuple of symbols"),
    "learn_bpe": Contract(("one-pass",), returns="a list of (str, str) tuples",
                          side_effects="the corpus list unchanged; any iterable of lines, read once"),
    "apply_bpe": Contract(returns="a list of str"),
    "BPETokenizer": Contract(("one-pass",), method="train", returns="train: the tokenizer; encode: a list of "
                                                                    "int; decode: a str; ids 0-3 the "
                                                                    "specials, also after save/load"),
    "pad_sequences": Contract(("batch of one",), returns="a torch.long tensor (batch, max_len)",
                              empty="pad_sequences([]) is refused: the stub's ValueError",
                              side_effects="the caller's lists unchanged"),
    "TokenEmbedding": Contract(("batch of one",), returns="a tensor in the weights' dtype"),
    # stage 02
    "sinusoidal_encoding": Contract(returns="a float32 or float64 tensor (max_len, d_model)"),
    "PositionalEncoding": Contract(("float32", "float64"), returns="a tensor in x's dtype",
                                   side_effects="x unchanged; the table a buffer"),
    # stage 03
    "softmax": Contract(("float32", "float64"), returns="a tensor of x's shape, at least x's precision "
                                                        "(float64 in, "
                        "float64 out)", side_effects="x unchanged"),
    "scaled_dot_product_attention": Contract(_T32, returns="(output, weights)",
                                             side_effects="q, k, v, mask unchanged"),
    # stage 04
    "split_heads": Contract(_T32, returns="a tensor (B, h, L, d_k)"),
    "merge_heads": Contract(("float32", "strided"), returns="a tensor (B, L, h * d_k)"),
    "MultiHeadAttention": Contract(_T32, returns="a tensor (B, Lq, d_model)",
                                   side_effects="inputs unchanged; the module's mode"),
    # stage 05
    "padding_mask": Contract(("batch of one",), returns="a bool tensor (B, 1, 1, L) on the ids' device",
                             side_effects="the ids unchanged"),
    "causal_mask": Contract(returns="a bool tensor (1, 1, size, size) on `device`"),
    "target_mask": Contract(returns="a bool tensor (B, 1, L, L) on the ids' device",
                            side_effects="the ids unchanged"),
    # stage 06-10
    "PositionwiseFeedForward": Contract(_T32, returns="a tensor of x's shape"),
    "LayerNorm": Contract(_T32, returns="a tensor of x's shape and dtype"),
    "SublayerConnection": Contract(_T32, returns="a tensor of x's shape",
                                   side_effects="x unchanged; its own norm as LayerNorm(d_model) builds it"),
    "EncoderLayer": Contract(_T32, returns="a tensor of x's shape",
                             side_effects="inputs and masks unchanged"),
    "Encoder": Contract(_T32, returns="a tensor of x's shape", side_effects="inputs and masks unchanged"),
    "DecoderLayer": Contract(_T32, returns="a tensor of x's shape",
                             side_effects="x, memory and masks unchanged"),
    "Decoder": Contract(_T32, returns="a tensor of x's shape", side_effects="x, memory and masks unchanged"),
    "Transformer": Contract(returns="logits (B, Lt, V), unscaled"),
    # stage 11
    "label_smoothed_loss": Contract(("float32", "strided"), returns="a 0-dim tensor",
                                    empty="every target padding: 0, still connected to the graph",
                                    side_effects="logits and target unchanged"),
    # stage 12
    "shift_right": Contract(("batch of one",), returns="a tensor (B, L)", side_effects="tgt unchanged"),
    "make_batch": Contract(returns="a Batch; n_tokens a Python int",
                           side_effects="the caller's lists unchanged"),
    "batch_by_tokens": Contract(returns="a list of lists of int", empty="no examples: []"),
    "noam_lr": Contract(returns="a Python float"),
    "make_optimizer": Contract(returns="(Adam, LambdaLR)"),
    # stage 13
    "greedy_decode": Contract(("batch of one",), returns="a list of B lists of int",
                              side_effects="src and src_mask unchanged; the model's mode kept"),
    "length_penalty": Contract(returns="a float"),
    "beam_search": Contract(returns="a list of B lists of int",
                            side_effects="src and src_mask unchanged; the model's mode kept"),
    "corpus_bleu": Contract(returns="a float (BLEU x 100)", empty="an empty hypothesis or reference counts"),
}
