"""Stage 10: the whole model. Embeddings and positional encoding, encoder, decoder, and the linear
projection to the target vocabulary (`generator`), its weight tied to the embedding (section 3.4)."""
from __future__ import annotations

import torch
from torch import nn

from .decoder import Decoder
from .encoder import Encoder
from .positional_encoding import PositionalEncoding
from .tokenization import PAD, TokenEmbedding


class TransformerBase(nn.Module):
    """Given, not for you to write: the initialization of lesson 10's Transformer."""

    def _reset_parameters(self, d_model: int) -> None:
        """Xavier-uniform matrices; embeddings N(0, d_model^-0.5), so that after the sqrt(d_model)
        scale their entries have unit variance and, tied, the logits start small."""
        for name, p in self.named_parameters():
            if "embedding" in name:
                nn.init.normal_(p, 0.0, d_model ** -0.5)
                with torch.no_grad():
                    p[PAD].zero_()
            elif p.dim() > 1:
                nn.init.xavier_uniform_(p)


class Transformer(TransformerBase):
    """forward(src (B,Ls), tgt_in (B,Lt), src_mask (B,1,1,Ls), tgt_mask (B,1,Lt,Lt)) -> logits (B, Lt, V_tgt),
    no softmax (the loss takes it). TransformerBase gives the initialization, self._reset_parameters(d_model).
    Example: m = Transformer(100, 100, d_model=32, n_heads=4, n_layers=2, d_ff=64)   (tie_weights=True, one V)
             m(torch.ones(2, 7).long(), torch.ones(2, 5).long(), None, None).shape -> (2, 5, 100)
             m.generator.weight is m.tgt_embed.embedding.weight is m.src_embed.embedding.weight -> True
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, d_model: int = 512, n_heads: int = 8,
                 n_layers: int = 6, d_ff: int = 2048, dropout: float = 0.1, max_len: int = 5000,
                 norm_first: bool = False, tie_weights: bool = True):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        ### BEGIN SOLUTION
        self.src_embed = TokenEmbedding(src_vocab_size, d_model, padding_idx=PAD)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model, padding_idx=PAD)
        self.positional = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(d_model, n_heads, d_ff, n_layers, dropout, norm_first)
        self.decoder = Decoder(d_model, n_heads, d_ff, n_layers, dropout, norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        self._reset_parameters(d_model)
        if tie_weights:
            self.generator.weight = self.tgt_embed.embedding.weight  # one tensor, (V_tgt, d_model)
            if src_vocab_size == tgt_vocab_size:
                self.src_embed.embedding.weight = self.tgt_embed.embedding.weight
        ### END SOLUTION

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """src (B, Ls) -> memory (B, Ls, d_model)."""
        ### BEGIN SOLUTION
        return self.encoder(self.positional(self.src_embed(src)), src_mask)
        ### END SOLUTION

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_mask, tgt_mask) -> torch.Tensor:
        """tgt_in (B, Lt), memory (B, Ls, d_model) -> states (B, Lt, d_model), before the generator."""
        ### BEGIN SOLUTION
        return self.decoder(self.positional(self.tgt_embed(tgt_in)), memory, src_mask, tgt_mask)
        ### END SOLUTION

    def forward(self, src, tgt_in, src_mask, tgt_mask) -> torch.Tensor:
        ### BEGIN SOLUTION
        memory = self.encode(src, src_mask)                              # (B, Ls, d_model)
        return self.generator(self.decode(tgt_in, memory, src_mask, tgt_mask))  # (B, Lt, V_tgt)
        ### END SOLUTION
