"""The model and its optimizer, built from a Config with `impl`'s classes, and the changes Table 3 makes to
a built model (the key size per head, the dropout on the attention weights)."""
from __future__ import annotations

import torch

import solutions
from solutions.translate.config import Config
from solutions.translate.implementation import _use


def build_model(config: Config, vocab_size: int, impl=solutions) -> torch.nn.Module:
    """A Transformer with one shared vocabulary and tied embeddings/projection, on config.device.

    Example: build_model(Config(d_model=32, n_heads=4, n_layers=1, d_ff=64), 100).generator.weight.shape
             -> (100, 32)
    """
    torch.manual_seed(config.seed)
    model = _use(impl, "Transformer")(vocab_size, vocab_size, d_model=config.d_model, n_heads=config.n_heads,
                                      n_layers=config.n_layers, d_ff=config.d_ff, dropout=config.dropout,
                                      norm_first=config.norm_first, tie_weights=config.tie_embeddings)
    if config.attention_dropout != config.dropout:
        set_attention_dropout(model, config.attention_dropout)
    # replaces the `positional` attribute of the contract (any impl has it)
    if config.positional == "learned":
        from solutions.positional_encoding import LearnedPositionalEncoding
        model.positional = LearnedPositionalEncoding(config.d_model, LEARNED_MAX_LEN, config.dropout)
    elif config.positional != "sinusoidal":
        raise ValueError(f"positional must be 'sinusoidal' or 'learned', got {config.positional!r}")
    if config.d_k and config.d_k != config.d_model // config.n_heads:
        set_key_size(model, config.n_heads, config.d_k)
    return model.to(config.device)


LEARNED_MAX_LEN = 256  # learned positions: rows beyond the longest training sentence (100) stay untrained


def set_key_size(model: torch.nn.Module, n_heads: int, d_k: int) -> int:
    """Table 3 (B): queries and keys of d_k features per head while values keep d_model / h. Replaces w_q and
    w_k of every MultiHeadAttention (a module with w_q, w_k, w_v, w_o) by nn.Linear(d_model, h * d_k); works
    with any implementation that splits w_q's output into n_heads heads by its size, as the reference does
    (lesson 04)
    and scales by the size of q. Returns how many it changed.
    Example: set_key_size(model, 4, 16) -> 9 (3+3 layers)"""
    found = 0
    for module in model.modules():
        if all(hasattr(module, w) for w in ("w_q", "w_k", "w_v", "w_o")):
            d_model = module.w_q.in_features
            for name in ("w_q", "w_k"):
                linear = torch.nn.Linear(d_model, n_heads * d_k)             # (d_model) -> (h * d_k)
                torch.nn.init.xavier_uniform_(linear.weight)
                torch.nn.init.zeros_(linear.bias)
                setattr(module, name, linear)
            found += 1
    if not found:
        raise ValueError("d_k: no MultiHeadAttention with w_q, w_k, w_v, w_o in the model")
    return found


def make_schedule(config: Config, model: torch.nn.Module, impl=solutions):
    """(optimizer, scheduler): impl's make_optimizer, the paper's warmup schedule peaking at config.lr_peak;
    with config.lr_schedule "constant", the same Adam at lr_peak from the first step to the last.
    Example: make_schedule(Config(lr_schedule="constant", lr_peak=1e-3), model)[0].param_groups[0]["lr"]
             -> 1e-3"""
    optimizer, scheduler = _use(impl, "make_optimizer")(model, config.d_model, config.warmup_steps,
                                                        config.noam_factor)
    if config.lr_schedule == "constant":
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"] = config.lr_peak
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    elif config.lr_schedule != "warmup":
        raise ValueError(f"lr_schedule must be 'warmup' or 'constant', got {config.lr_schedule!r}")
    return optimizer, scheduler


def set_attention_dropout(model: torch.nn.Module, p: float) -> int:
    """Set the rate of the dropout on the attention weights: the nn.Dropout held by each MultiHeadAttention
    (a module with w_q, w_k, w_v, w_o). Returns how many it set; 0 means none was found (a dropout called
    as a function inside forward is out of reach), and says so.
    Example: set_attention_dropout(model, 0.0) -> 12"""
    found = 0
    for module in model.modules():
        if all(hasattr(module, w) for w in ("w_q", "w_k", "w_v", "w_o")):
            for child in module.children():
                if isinstance(child, torch.nn.Dropout):
                    child.p = p
                    found += 1
    if not found:
        print("attention dropout: no nn.Dropout inside the MultiHeadAttention modules, left as it is (not "
              f"{p:g})")
    return found

