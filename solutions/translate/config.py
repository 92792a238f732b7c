"""The Config of a run and the named settings built from it: config_for (the CPU and GPU defaults), the
paper's base and big models (paper_config), lesson 14's (lesson_config), what the command line accepts
(CONFIG_RULES) and what makes a Config unable to run (config_problems)."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from solutions.cli import number


@dataclass
class Config:
    """Everything a run depends on. The defaults are the CPU setting; the measurements behind each are in
    benchmarks/translate_cpu.md ("Where the defaults come from")."""

    # model (the paper's base model is 512 / 8 heads / 6+6 layers / 2048)
    d_model: int = 256          # half the paper's width: a quarter of the compute, enough for 30k sentences
    n_heads: int = 4            # keeps d_k = d_model / n_heads = 64, as in the paper
    n_layers: int = 3           # 3 encoder + 3 decoder layers: half the paper's depth, enough for Multi30k
    d_ff: int = 1024            # 4 x d_model, the paper's ratio
    dropout: float = 0.1        # the paper's P_drop; Multi30k is small, so regularization matters
    attention_dropout: float = 0.1  # dropout on the attention weights too (the paper: 0.0, residuals only)
    norm_first: bool = True     # pre-norm: trains at twice the rate; False: the paper's post-norm
    label_smoothing: float = 0.1  # the paper's epsilon_ls
    positional: str = "sinusoidal"  # the paper's table; "learned": trained positions (Table 3 (E))
    tie_embeddings: bool = True   # one matrix for both embeddings and the projection (section 3.4)
    d_k: int = 0                # 0: d_model / n_heads (the paper); else the query/key size a head (Table 3 B)
    # data
    bpe_merges: int = 5000      # one joint German+English BPE: words in 1-3 pieces, a small output layer
    max_sentence_tokens: int = 100  # training pairs with a longer side are dropped (none in Multi30k)
    # optimization
    max_tokens: int = 1500      # padded tokens per batch (~100 sentences): small batches, many steps on a CPU
    lr_peak: float = 2e-3       # the warmup schedule's top, for pre-norm; post-norm wants 1e-3
    warmup_steps: int = 300     # one epoch of Multi30k at 1500 tokens per batch, then 1/sqrt(step) decay
    lr_schedule: str = "warmup"  # the paper's warmup, then 1/sqrt(step); "constant": lr_peak throughout
    clip_norm: float = 1.0      # gradient-norm clipping: guards against early spikes (the paper: 0, none)
    average_last: int = 5       # 0: keep the last weights; k: end on the mean of the last k snapshots
    snapshot_minutes: float = 1.0   # how often a snapshot for average_last is taken, in training minutes
    snapshot_steps: int = 0     # > 0: a snapshot every that many steps instead (reproduces on any machine)
    max_epochs: int = 30        # an upper bound; the time budget usually stops first
    max_steps: int = 0          # 0: no limit; else stop after that many optimizer steps
    accumulate: int = 1         # micro-batches per optimizer step (gradient accumulation)
    minutes: float = 15.0       # training time budget (TRAIN_MINUTES in the lesson)
    # decoding
    beam_size: int = 4          # the paper's beam
    alpha: float = 0.6          # the paper's length penalty
    max_output_ratio: float = 1.5   # at most ratio * source length + max_output_extra tokens out
                                    # (the paper: 1.0)
    max_output_extra: int = 10      # the tokens added to that limit (the paper: 50)
    eval_batch_tokens: int = 6000  # source tokens per decoding batch: big batches decode fastest
    # run
    device: str = "cpu"         # "cuda" for a GPU (mixed precision on), "cpu" otherwise
    precision: str = "auto"     # auto: bf16 or fp16 on a GPU, bf16 on a CPU with bf16 units; bf16, fp16, fp32
    compile: bool = False       # torch.compile for training (a C++ compiler on a CPU; minutes to warm up)
    seed: int = 0               # the same seed gives the same batches and initial weights

    @property
    def noam_factor(self) -> float:
        """The factor of noam_lr whose peak (at warmup_steps) is lr_peak:
        lr_peak = factor * d_model^-0.5 * warmup^-0.5. Example: d_model 256, warmup 300, peak 2e-3 -> 0.554"""
        return self.lr_peak * math.sqrt(self.d_model * self.warmup_steps)


def config_for(device: str | torch.device | None = None, **overrides) -> Config:
    """The default Config for a device: CPU (35.4 and 35.9 greedy BLEU on Multi30k in 15 minutes on 2 cores)
    or GPU (a wider model and bigger batches with mixed precision). device None picks cuda when present.
    Why each CPU setting: benchmarks/translate_cpu.md.

    Example: config_for("cpu").d_model -> 256;  config_for("cuda").d_model -> 512
    """
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = str(device)
    if device.startswith("cuda"):
        # the paper's width, heads and d_ff with 3+3 layers (6+6 overfits 29k sentences); not measured here
        base = dict(d_model=512, n_heads=8, n_layers=3, d_ff=2048, max_tokens=4096, warmup_steps=800,
                    lr_peak=1e-3, eval_batch_tokens=20000, device=device)
    else:
        # chosen on Multi30k's validation set: alpha 1.0, warmup 500, no dropout (benchmarks/translate_cpu.md)
        base = dict(device=device, alpha=1.0, warmup_steps=500, dropout=0.0, attention_dropout=0.0)
    return dataclasses.replace(Config(**base), **overrides)


#: What each Config field accepts on a command line (solutions.cli.add_config_flags): a range or the choices.
#: Fields not listed take their default's type.
CONFIG_RULES = {
    "d_model": number(int, 1), "n_heads": number(int, 1), "n_layers": number(int, 1), "d_ff": number(int, 1),
    "dropout": number(float, 0, 1, high_open=True), "attention_dropout": number(float, 0, 1, high_open=True),
    "label_smoothing": number(float, 0, 1, high_open=True), "positional": ("sinusoidal", "learned"),
    "d_k": number(int, 0), "bpe_merges": number(int, 0), "max_sentence_tokens": number(int, 1),
    "max_tokens": number(int, 1), "lr_peak": number(float, 0, low_open=True), "warmup_steps": number(int, 1),
    "lr_schedule": ("warmup", "constant"), "clip_norm": number(float, 0), "average_last": number(int, 0),
    "snapshot_minutes": number(float, 0), "snapshot_steps": number(int, 0), "max_epochs": number(int, 1),
    "max_steps": number(int, 0), "accumulate": number(int, 1), "minutes": number(float, 0, low_open=True),
    "beam_size": number(int, 1), "alpha": number(float, 0), "max_output_ratio": number(float, 0),
    "max_output_extra": number(int, 0), "eval_batch_tokens": number(int, 1),
    "precision": ("auto", "fp32", "bf16", "fp16"), "seed": number(int, 0),
}


def config_problems(config: Config) -> list[str]:
    """What makes `config` unable to run, one sentence each (what and what to do); [] when it can.
    Example: config_problems(Config(d_model=100, n_heads=8))
             -> ["d_model 100 is not a multiple of n_heads 8: ..."]"""
    import argparse as _argparse

    c, problems = config, []
    for f in dataclasses.fields(Config):
        rule, value = CONFIG_RULES.get(f.name), getattr(c, f.name)
        kind = type(f.default)
        if not (isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
                or kind is float and isinstance(value, int) and not isinstance(value, bool)):
            what = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}[kind]
            problems.append(f"{f.name} must be {what}, got {value!r}")
        elif isinstance(rule, tuple) and value not in rule:
            problems.append(f"{f.name} must be one of {', '.join(rule)}, got {value!r}")
        elif callable(rule):
            try:
                rule(str(value))
            except _argparse.ArgumentTypeError as e:
                problems.append(f"{f.name} {e}")
    if problems:  # the checks below assume the types and ranges above
        return problems
    if c.d_model % c.n_heads:
        problems.append(f"d_model {c.d_model} is not a multiple of n_heads {c.n_heads}: each head takes "
                        "d_model / n_heads features; change one of them")
    if c.precision == "fp16" and not c.device.startswith("cuda"):
        problems.append("precision fp16 needs a GPU: give bf16 or fp32 on a CPU")
    return problems



def plural(n: float, unit: str) -> str:
    """n and its unit, singular for exactly 1.
    Example: plural(1, "minute") -> "1 minute"; plural(0.5, "minute")
    -> "0.5 minutes"; plural(2051, "step") -> "2,051 steps" """
    text = f"{n:,}" if isinstance(n, int) else f"{n:,g}"
    return f"{text} {unit}" + ("" if n == 1 else "s")


# the paper's peak rate for the base model: d_model^-0.5 * warmup^-0.5 = 7.0e-4
LR_PAPER_BASE = (512 * 4000) ** -0.5

#: Config fields for the paper's base model and its training (sections 5.1-5.4, 6.1). What no field can
#: change stays different (see `departures`): the data, the hardware and hours, how BLEU is measured.
PAPER_BASE = dict(d_model=512, n_heads=8, n_layers=6, d_ff=2048, dropout=0.1, attention_dropout=0.0,
                  norm_first=False, label_smoothing=0.1, bpe_merges=37000, max_tokens=25000,
                  lr_peak=LR_PAPER_BASE,
                  warmup_steps=4000, clip_norm=0.0, max_steps=100000, max_epochs=1_000_000, average_last=5,
                  snapshot_minutes=10.0, beam_size=4, alpha=0.6, max_output_ratio=1.0, max_output_extra=50)


#: The big model (Table 3's last row): 1024 / 16 heads / 4096, dropout 0.3 for English-German, the same warmup
#: (so a peak of 1024^-0.5 * 4000^-0.5 = 4.9e-4), 300,000 steps (3.5 days on 8 P100 GPUs, section 5.2).
PAPER_BIG = {**PAPER_BASE, "d_model": 1024, "n_heads": 16, "d_ff": 4096, "dropout": 0.3,
             "lr_peak": (1024 * 4000) ** -0.5, "max_steps": 300000}
PAPER_SIZES = {"base": PAPER_BASE, "big": PAPER_BIG}


def paper_config(device: str | torch.device | None = None, size: str = "base", **overrides) -> Config:
    """The paper's base (or big) model and training settings on `device`, as far as a Config can hold them.
    Example: paper_config("cpu").n_layers -> 6;
             departures(paper_config("cpu", precision="fp32")) -> data, training time, BLEU (and "number
             format" where precision "auto" means bf16);
             paper_config("cuda", "big").d_model -> 1024"""
    if size not in PAPER_SIZES:
        raise ValueError(f"size must be one of {sorted(PAPER_SIZES)}, got {size!r}")
    return dataclasses.replace(config_for(device), **{**PAPER_SIZES[size], **overrides})


#: lesson 14's SIZE = "tiny": small enough to train in a minute on a CPU, only for a first look or a test run
TINY_LESSON = dict(d_model=64, n_heads=4, n_layers=1, d_ff=128, bpe_merges=500, max_tokens=1000,
                   warmup_steps=100, lr_peak=2e-3)


def lesson_config(device: str, size: str = "auto", minutes: float | None = None,
                  average_last: int | None = None,
                  snapshot_minutes: float | None = None, dropout: float | None = None) -> Config:
    """Lesson 14's settings as one Config, its time budget included (config.minutes), so that what the lesson
    prints and what it trains are the same: size "auto" (config_for(device)), "tiny" (TINY_LESSON) or "paper"
    (paper_config(device)); minutes None: 10 on a GPU, 15 on a CPU; the others None: the config's own.
    Example: lesson_config("cpu", minutes=1).minutes -> 1; lesson_config("cuda").minutes -> 10"""
    sizes = ("auto", "tiny", "paper")
    if size not in sizes:
        raise ValueError(f"SIZE must be one of {', '.join(map(repr, sizes))}, got {size!r}")
    config = paper_config(device) if size == "paper" else config_for(device)
    if size == "tiny":
        config = dataclasses.replace(config, **TINY_LESSON)
    changes = dict(minutes=minutes if minutes is not None else (10 if str(device).startswith("cuda") else 15),
                   average_last=average_last, snapshot_minutes=snapshot_minutes)
    if dropout is not None:  # on the residuals, the embeddings and the attention weights
        changes.update(dropout=dropout, attention_dropout=dropout)
    return dataclasses.replace(config, **{k: v for k, v in changes.items() if v is not None})


def budget_text(config: Config) -> str:
    """The run's time budget in words, from the config it trains with.
    Example: budget_text(config_for("cpu", minutes=1)) -> "training budget: 1 minute" """
    text = f"training budget: {plural(config.minutes, 'minute')}"
    return text + (f", at most {plural(config.max_steps, 'step')}" if config.max_steps else "")

