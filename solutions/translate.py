"""Train a German-to-English Transformer and translate with it: the code of the final lesson and of
the command line `python -m solutions.translate train --data multi30k --minutes 15 --out runs/x`, then
`python -m solutions.translate translate --model runs/x/model.pt "Ein Hund läuft."` (or --input FILE, or standard
input; --bleu REFERENCES scores them with sacreBLEU on stderr). Bad input: one line, exit status 2 (solutions.cli).

The same command trains on several processes under `torchrun` (DistributedDataParallel; solutions.distributed),
and takes the paper's models, accumulation and resumable checkpoints (issue 19):
    torchrun --nproc_per_node 8 -m solutions.translate train --data wmt14-en-de --size base \
        --checkpoint-every 1000 --out runs/base      # later, after a crash: the same command + --resume runs/base/checkpoint.pt

Every function that tokenizes, builds, trains, decodes or scores takes `impl`, the module (or namespace)
that supplies BPETokenizer, Transformer, make_optimizer, label_smoothed_loss, batch_by_tokens, make_batch,
greedy_decode, beam_search, corpus_bleu and the masks: the reference `solutions` by default, or the
learner's own code (`autograder.learner.collect`). A name that `impl` lacks is taken from `solutions`.

Example: name, splits = load_data("synthetic"); cfg = config_for("cpu")
         data = prepare_data(cfg, splits); model, history = train(cfg, data, minutes=5)
         translate(model, data.tokenizer, "Der Hund schläft.") -> "The dog sleeps."
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import math
import pathlib
import random
import resource
import sys
import tempfile
import time
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, field

import sacrebleu
import torch
from tqdm.auto import tqdm

import solutions
from solutions.cli import UsageError, number
from solutions.data import load_data
from solutions.tokenization import UNK, BPETokenizer


@dataclass
class Config:
    """Everything a run depends on. The defaults are the CPU setting measured in benchmarks/translate_cpu.md."""

    # model (the paper's base model is 512 / 8 heads / 6+6 layers / 2048)
    d_model: int = 256          # half the paper's width: four times less compute, enough for 30k short sentences
    n_heads: int = 4            # keeps d_k = d_model / n_heads = 64, as in the paper
    n_layers: int = 3           # 3 encoder + 3 decoder layers: half the paper's depth, enough for Multi30k
    d_ff: int = 1024            # 4 x d_model, the paper's ratio
    dropout: float = 0.1        # the paper's P_drop; Multi30k is small, so regularization matters
    attention_dropout: float = 0.1  # dropout on the attention weights too (tensor2tensor's and the Annotated
                                # Transformer's habit; the paper has residual and embedding dropout only: 0.0)
    norm_first: bool = True     # pre-norm: takes twice the rate; measured 28.4 vs 21.6 BLEU (greedy) after 900
                                # steps against the paper's post-norm (False) at its best rate, 1e-3
    label_smoothing: float = 0.1  # the paper's epsilon_ls
    positional: str = "sinusoidal"  # the paper's table; "learned": trained positions (Table 3 row (E), lesson 15)
    tie_embeddings: bool = True   # one matrix for both embeddings and the projection (section 3.4); False: three
    d_k: int = 0                # 0: d_model / n_heads, as the paper; else the query/key size per head (Table 3 (B))
    # data
    bpe_merges: int = 5000      # joint German+English BPE: 5k symbols, words in 1-3 pieces; the output layer is a
                                # quarter of a small model's work: 18% more tokens/s and +0.6 BLEU against 8k
    max_sentence_tokens: int = 100  # training pairs with a longer side are dropped (none in Multi30k)
    # optimization
    max_tokens: int = 1500      # padded tokens per batch (~100 sentences): small batches, many steps on a CPU
    lr_peak: float = 2e-3       # the warmup schedule's top, for pre-norm; post-norm wants 1e-3 (3.6e-3 collapsed)
    warmup_steps: int = 300     # one epoch of Multi30k at 1500 tokens per batch, then 1/sqrt(step) decay
    lr_schedule: str = "warmup"  # the paper's warmup then 1/sqrt(step); "constant": lr_peak from the first step
    clip_norm: float = 1.0      # gradient-norm clipping: guards against early spikes (the paper does not clip: 0)
    average_last: int = 5       # 0: keep the last weights; k: end on the mean of the last k snapshots (the paper:
                                # 5, 10 minutes apart in 12 hours); measured +1.0 BLEU over the last weights alone
    snapshot_minutes: float = 1.0   # how often a snapshot for average_last is taken, in training minutes
    snapshot_steps: int = 0     # > 0: a snapshot every that many steps instead (reproduces on any machine)
    max_epochs: int = 30        # an upper bound; the time budget usually stops first
    max_steps: int = 0          # 0: no limit; else stop after that many optimizer steps (a budget that no load changes)
    accumulate: int = 1         # micro-batches per optimizer step (gradient accumulation): the paper's 25,000-token
                                # batches on a small card; max_tokens is one micro-batch, the schedule counts steps
    minutes: float = 15.0       # training time budget (TRAIN_MINUTES in the lesson)
    # decoding
    beam_size: int = 4          # the paper's beam
    alpha: float = 0.6          # the paper's length penalty
    max_output_ratio: float = 1.5   # at most ratio * source length + max_output_extra tokens are generated:
                                    # captions are short, so this stops a looping model early (the paper: 1.0)
    max_output_extra: int = 10      # the tokens added to that limit (the paper: 50)
    eval_batch_tokens: int = 6000  # source tokens per decoding batch: big batches decode fastest
    # run
    device: str = "cpu"         # "cuda" for a GPU (mixed precision on), "cpu" otherwise
    precision: str = "auto"     # "auto": mixed precision on a GPU (bf16, else fp16 with loss scaling); on a CPU,
                                # bf16 where it has bf16 units (cpu_has_bf16: 1.2x the tokens/s here), else float32;
                                # "bf16": bfloat16 autocast on either; "fp16": float16 autocast with loss scaling
                                # (GPU); "fp32": none. Decoding stays float32 on a CPU
    compile: bool = False       # torch.compile the model for training (a C++ compiler on a CPU; minutes to warm up)
    seed: int = 0               # the same seed gives the same batches and initial weights

    @property
    def noam_factor(self) -> float:
        """The factor of noam_lr whose peak (at warmup_steps) is lr_peak:
        lr_peak = factor * d_model^-0.5 * warmup^-0.5. Example: d_model 256, warmup 300, peak 2e-3 -> 0.554"""
        return self.lr_peak * math.sqrt(self.d_model * self.warmup_steps)


def config_for(device: str | torch.device | None = None, **overrides) -> Config:
    """The default Config for a device: CPU (measured: 35.4 and 35.9 greedy BLEU on Multi30k in 15 minutes on 2 cores)
    or GPU (a wider model and bigger batches with mixed precision). device None picks cuda when present.

    Example: config_for("cpu").d_model -> 256;  config_for("cuda").d_model -> 512
    """
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = str(device)
    if device.startswith("cuda"):
        # the paper's width, heads and d_ff with 3+3 layers (6+6 overfits 29k sentences); batches of ~4k
        # tokens (~110 steps an epoch), a longer warmup and a lower peak for the wider model (not measured here)
        base = dict(d_model=512, n_heads=8, n_layers=3, d_ff=2048, max_tokens=4096, warmup_steps=800,
                    lr_peak=1e-3, eval_batch_tokens=20000, device=device)
    else:
        # the length penalty chosen on Multi30k's validation set for this model, never on the test set
        # (benchmarks/translate_cpu.md: beam 4 with alpha 1.0 beat the paper's 0.6 there for every model measured,
        # two seeds each; a beam of 6 was no better); a warmup of 500 steps instead of 300 (the same validation loss
        # at equal epochs, +0.25 greedy and +1.0 beam BLEU at the same 1,535 steps, seed 0; half of 300 was worse);
        # no dropout (in the 6 epochs of 15 minutes it only slowed learning: at the same 1,535 steps, a lower
        # validation loss after every epoch and +1.2 greedy BLEU, seed 0; a step does less work; the last weights
        # start to overfit after epoch 5 or 6, which the average of the last snapshots absorbs)
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
    Example: config_problems(Config(d_model=100, n_heads=8)) -> ["d_model 100 is not a multiple of n_heads 8: ..."]"""
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


def _use(impl, name: str):
    """impl.name, or solutions.name when impl has none."""
    return getattr(impl, name, None) or getattr(solutions, name)


# ---------------------------------------------------------------- the paper, and where this run departs from it
#: The CPU default's two recorded 15-minute runs on 2 cores (benchmarks/results/translate_cpu_default.seed0.json and
#: .seed1.json; tests/test_translate.py holds these to the files): optimizer steps, mean target tokens per second,
#: greedy test BLEU; and the same model stopped at 1,535 steps (translate_cpu_dropout0_steps1535.seed0.json).
RECORDED_CPU = {"minutes": 15, "cores": 2, "steps": (2051, 2093), "tokens_per_s": (3165, 3231),
                "greedy_bleu": (35.4, 35.9), "fewer_steps": 1535, "fewer_steps_bleu": 34.9}


def plural(n: float, unit: str) -> str:
    """n and its unit, singular for exactly 1. Example: plural(1, "minute") -> "1 minute"; plural(0.5, "minute")
    -> "0.5 minutes"; plural(2051, "step") -> "2,051 steps" """
    text = f"{n:,}" if isinstance(n, int) else f"{n:,g}"
    return f"{text} {unit}" + ("" if n == 1 else "s")


LR_PAPER_BASE = (512 * 4000) ** -0.5  # the paper's peak rate for the base model: d_model^-0.5 * warmup^-0.5 = 7.0e-4

#: Config fields for the paper's base model and its training (sections 5.1-5.4, 6.1). What no field can
#: change stays different (see `departures`): the data, the hardware and hours, how BLEU is measured.
PAPER_BASE = dict(d_model=512, n_heads=8, n_layers=6, d_ff=2048, dropout=0.1, attention_dropout=0.0,
                  norm_first=False, label_smoothing=0.1, bpe_merges=37000, max_tokens=25000, lr_peak=LR_PAPER_BASE,
                  warmup_steps=4000, clip_norm=0.0, max_steps=100000, max_epochs=1_000_000, average_last=5,
                  snapshot_minutes=10.0, beam_size=4, alpha=0.6, max_output_ratio=1.0, max_output_extra=50)


#: The big model (Table 3's last row): 1024 / 16 heads / 4096, dropout 0.3 for English-German, the same warmup
#: (so a peak of 1024^-0.5 * 4000^-0.5 = 4.9e-4), 300,000 steps (3.5 days on 8 P100 GPUs, section 5.2).
PAPER_BIG = {**PAPER_BASE, "d_model": 1024, "n_heads": 16, "d_ff": 4096, "dropout": 0.3,
             "lr_peak": (1024 * 4000) ** -0.5, "max_steps": 300000}
PAPER_SIZES = {"base": PAPER_BASE, "big": PAPER_BIG}


def paper_config(device: str | torch.device | None = None, size: str = "base", **overrides) -> Config:
    """The paper's base (or big) model and training settings on `device`, as far as a Config can hold them.
    Example: paper_config("cpu").n_layers -> 6; departures(paper_config("cpu", precision="fp32")) -> data, training
             time, BLEU (and "number format" where precision "auto" means bf16);
             paper_config("cuda", "big").d_model -> 1024"""
    if size not in PAPER_SIZES:
        raise ValueError(f"size must be one of {sorted(PAPER_SIZES)}, got {size!r}")
    return dataclasses.replace(config_for(device), **{**PAPER_SIZES[size], **overrides})


#: lesson 14's SIZE = "tiny": small enough to train in a minute on a CPU, only for a first look or a test run
TINY_LESSON = dict(d_model=64, n_heads=4, n_layers=1, d_ff=128, bpe_merges=500, max_tokens=1000, warmup_steps=100,
                   lr_peak=2e-3)


def lesson_config(device: str, size: str = "auto", minutes: float | None = None, average_last: int | None = None,
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


def departures(config: Config, data_name: str = "multi30k") -> list[tuple[str, str, str, str]]:
    """Every way a run with `config` departs from the paper's base model: (what, the paper, this run, why).

    Example: departures(config_for("cpu"))[0] -> ("layer normalization", "post-norm: ...", "pre-norm: ...", "...")
    """
    c, rows = config, []
    big = (c.d_model, c.n_heads, c.d_ff) == (PAPER_BIG["d_model"], PAPER_BIG["n_heads"], PAPER_BIG["d_ff"])

    def row(differs, what, paper, here, why):
        if differs:
            rows.append((what, paper, here, why))

    row(c.norm_first, "layer normalization", "post-norm: LayerNorm(x + Sublayer(x))",
        "pre-norm: x + Sublayer(LayerNorm(x)), a final LayerNorm after each stack",
        "trains at twice the peak rate without diverging: 31.2 against 20.8 BLEU (greedy) after 15 minutes on "
        "2 CPU cores (benchmarks/translate_cpu.md)")
    row(c.clip_norm, "gradient clipping", "none", f"gradient norm clipped at {c.clip_norm:g}",
        "small batches give noisy gradients; clipping guards against the early loss spikes")
    row((c.d_model, c.n_heads, c.n_layers, c.d_ff) != (512, 8, 6, 2048), "model size",
        "base: d_model 512, 8 heads, 6+6 layers, d_ff 2048 (65M parameters)",
        f"d_model {c.d_model}, {c.n_heads} heads, {c.n_layers}+{c.n_layers} layers, d_ff {c.d_ff}",
        "the paper's big model (Table 3, last row: 213M parameters, 3.5 days on 8 P100 GPUs)" if big else
        "minutes instead of 12 hours on 8 GPUs, and 29,000 short sentences instead of 4.5 million: a smaller "
        f"model takes more steps in the time and overfits less (d_k = {c.d_model // c.n_heads}"
        + (", as in the paper)" if c.d_model == 64 * c.n_heads else ")"))
    row(c.max_tokens != 25000, "batch size", "about 25,000 source and 25,000 target tokens",
        f"at most {c.max_tokens:,} padded tokens (sentences of similar length together)",
        "many small steps: Multi30k's 425,000 target tokens make only 19 batches an epoch at 25,000")
    row((c.warmup_steps, round(c.lr_peak, 7)) != (4000, round(LR_PAPER_BASE, 7)), "warmup and peak rate",
        f"4,000 warmup steps to a peak of {LR_PAPER_BASE:.1e} (factor 1)",
        f"{c.warmup_steps:,} warmup steps to a peak of {c.lr_peak:.1e}",
        f"equation 3 with d_model {c.d_model}: the same warmup, a peak of d_model^-0.5 x 4000^-0.5" if big else
        (f"the CPU default's 15-minute runs made {RECORDED_CPU['steps'][0]:,} and {RECORDED_CPU['steps'][1]:,} steps "
         f"on {RECORDED_CPU['cores']} cores (two seeds): they would still be warming up at 4,000"
         if not c.device.startswith("cuda") else
         "a run of minutes would spend most of its steps warming up at 4,000 (the GPU's steps in 10 minutes are "
         "not measured here)")
        + ("; pre-norm takes a higher peak" if c.norm_first else ""))
    row(c.bpe_merges != 37000, "BPE vocabulary", "about 37,000 shared tokens (WMT 2014 English-German)",
        f"{c.bpe_merges:,} merges of one joint German-English BPE",
        "Multi30k's words fit in 1-3 pieces with 5,000 merges; the smaller output layer gave 18% more tokens per "
        "second and 0.6 more BLEU than 8,000 in 15 minutes on a CPU")
    row((c.max_output_ratio, c.max_output_extra) != (1.0, 50), "maximum output length",
        "input length + 50, stopping early when possible",
        f"{c.max_output_ratio:g} x input length + {c.max_output_extra}, stopping early when possible",
        "captions are short: a model that loops stops sooner, and decoding the test set is faster")
    row(c.attention_dropout != 0.0, "attention dropout",
        "none: dropout (0.1) on each sublayer's output and on the embeddings plus positions",
        f"also {c.attention_dropout:g} on the attention weights",
        "the course's MultiHeadAttention follows tensor2tensor and the Annotated Transformer here; "
        "0 was no better on Multi30k in 15 minutes (33.74 and 33.12 greedy against 33.49 and 33.75, two seeds, "
        "with 300 warmup steps)")
    row(c.average_last != 5 or c.snapshot_steps or c.snapshot_minutes != 10, "checkpoint averaging",
        "the average of the last 5 checkpoints, 10 minutes apart",
        "the last weights" if not c.average_last else f"the average of the last {c.average_last} snapshots, "
        + (f"{plural(c.snapshot_steps, 'step')} apart" if c.snapshot_steps else
           f"{plural(c.snapshot_minutes, 'minute')} apart" if c.snapshot_minutes else "one step apart"),
        "a 15-minute run has one or two 10-minute checkpoints to average" if not c.average_last else
        "a short run is over before 10-minute checkpoints add up; lesson 15 measures averaging over steps")
    row(c.dropout != 0.1 or c.label_smoothing != 0.1, "dropout, label smoothing", "0.1 and 0.1",
        f"{c.dropout:g} and {c.label_smoothing:g}",
        "the paper's big model for English-German (section 6.1)" if big and c.dropout == 0.3 else
        "about 6 epochs in 15 minutes on a CPU, where dropout only slowed learning (the average of the last "
        "snapshots absorbs the overfitting that starts after epoch 5 or 6): without dropout the same "
        "1,535 steps reached a lower validation loss after every epoch and 1.2 more BLEU (greedy, seed 0)"
        if (c.dropout, c.label_smoothing) == (0.0, 0.1) and not c.device.startswith("cuda") else "changed by hand")
    row((c.beam_size, c.alpha) != (4, 0.6), "beam search", "beam 4, length penalty alpha 0.6",
        f"beam {c.beam_size}, alpha {c.alpha:g}",
        "chosen on Multi30k's validation set for the CPU model (+0.4 and +0.7 BLEU there, two seeds)"
        if (c.beam_size, c.alpha) == (4, 1.0) else "changed by hand")
    # what no Config field changes
    multi30k = data_name == "multi30k"
    if data_name == "wmt14":  # the paper's corpus the other way round ("wmt14-en-de" is the paper's own)
        rows.append(("data", "WMT 2014 English-German, 4.5 million sentence pairs", "the same pairs, German to "
                     "English", "the course translates German to English throughout (--data wmt14-en-de: the paper's)"))
    elif data_name != "wmt14-en-de":
        rows.append(("data", "WMT 2014 English-German, 4.5 million sentence pairs",
                     "Multi30k: German to English, 29,000 image captions" if multi30k else
                     f"{data_name} corpus: German to English", "downloads in seconds and trains in minutes on a laptop"))
    rows.append(("training time", "100,000 steps, 12 hours on 8 P100 GPUs",
                 (f"at most {c.max_steps:,} steps and " if c.max_steps else "")
                 + "the notebook's time budget, on one " + ("GPU" if c.device.startswith("cuda") else "CPU"),
                 "a course's budget"))
    if c.device.startswith("cuda") and c.precision != "fp32":
        rows.append(("number format", "not stated (32-bit floats were the default then)",
                     "mixed precision: bfloat16, or float16 with loss scaling", "twice as fast on a GPU"))
    elif not c.device.startswith("cuda") and resolved_precision(torch.device("cpu"), c.precision) == "bf16":
        rows.append(("number format", "not stated (32-bit floats were the default then)",
                     "bfloat16 autocast for training (this CPU has bf16 units); decoding in float32",
                     "1.2 times the tokens per second on 2 CPU cores, as good per step"))
    rows.append(("BLEU", "on newstest2014; how it was tokenized is not stated (tensor2tensor's script splits "
                 "hyphenated compounds)", "sacreBLEU (cased, 13a tokenization, on detokenized text) on "
                 + ("Multi30k's test_2016_flickr" if multi30k else f"the {data_name} test split"),
                 "a number anyone can reproduce (Post 2018)"))
    return rows


def departures_markdown(config: Config, data_name: str = "multi30k") -> str:
    """departures() as a Markdown table."""
    lines = ["| | the paper (base model) | this run | why |", "|---|---|---|---|"]
    lines += [f"| {what} | {paper} | {here} | {why} |" for what, paper, here, why in departures(config, data_name)]
    return "\n".join(lines)


# ---------------------------------------------------------------- data
@dataclass
class PreparedData:
    """The tokenizer and the splits as (source ids, target ids) pairs; `text` keeps the raw lines."""

    tokenizer: BPETokenizer
    train: list[tuple[list[int], list[int]]]
    val: list[tuple[list[int], list[int]]]
    text: dict = field(repr=False)


def prepare_data(config: Config, splits: dict, tokenizer: BPETokenizer | None = None,
                 progress: bool = True, impl=solutions) -> PreparedData:
    """Learn one joint BPE over the German and English training lines with impl's BPETokenizer (one
    vocabulary, so the embeddings and the output projection can share one matrix), encode train and val,
    and drop training pairs with a side longer than config.max_sentence_tokens.

    Example: prepare_data(config, load_synthetic(100, 10, 10)).train[0] -> ([ids of German], [ids of English])
    """
    de, en = splits["train"]
    if tokenizer is None:
        t0 = time.time()
        tokenizer = _use(impl, "BPETokenizer")().train(de + en, config.bpe_merges)
        if progress:
            merges = getattr(tokenizer, "merges", None)
            print(f"joint BPE: " + (f"{len(merges)} merges, " if merges is not None else "")
                  + f"vocabulary {tokenizer.vocab_size}, {time.time() - t0:.0f} s", flush=True)

    def encode(split):
        return [(tokenizer.encode(s), tokenizer.encode(t)) for s, t in zip(*splits[split])]

    train = [(s, t) for s, t in encode("train")
             if 0 < len(s) <= config.max_sentence_tokens and 0 < len(t) <= config.max_sentence_tokens]
    return PreparedData(tokenizer, train, encode("val"), splits)


def build_model(config: Config, vocab_size: int, impl=solutions) -> torch.nn.Module:
    """A Transformer with one shared vocabulary and tied embeddings/projection, on config.device.

    Example: build_model(Config(d_model=32, n_heads=4, n_layers=1, d_ff=64), 100).generator.weight.shape -> (100, 32)
    """
    torch.manual_seed(config.seed)
    model = _use(impl, "Transformer")(vocab_size, vocab_size, d_model=config.d_model, n_heads=config.n_heads,
                                      n_layers=config.n_layers, d_ff=config.d_ff, dropout=config.dropout,
                                      norm_first=config.norm_first, tie_weights=config.tie_embeddings)
    if config.attention_dropout != config.dropout:
        set_attention_dropout(model, config.attention_dropout)
    if config.positional == "learned":  # replaces the `positional` attribute of the contract (any impl has it)
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
    w_k of every MultiHeadAttention (a module with w_q, w_k, w_v, w_o) by nn.Linear(d_model, h * d_k); works with
    any implementation that splits w_q's output into n_heads heads by its size, as the reference does (lesson 04)
    and scales by the size of q. Returns how many it changed. Example: set_key_size(model, 4, 16) -> 9 (3+3 layers)"""
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
    Example: make_schedule(Config(lr_schedule="constant", lr_peak=1e-3), model)[0].param_groups[0]["lr"] -> 1e-3"""
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
    as a function inside forward is out of reach), and says so. Example: set_attention_dropout(model, 0.0) -> 12"""
    found = 0
    for module in model.modules():
        if all(hasattr(module, w) for w in ("w_q", "w_k", "w_v", "w_o")):
            for child in module.children():
                if isinstance(child, torch.nn.Dropout):
                    child.p = p
                    found += 1
    if not found:
        print(f"attention dropout: no nn.Dropout inside the MultiHeadAttention modules, left as it is (not {p:g})")
    return found


# ---------------------------------------------------------------- training
def cpu_has_bf16() -> bool:
    """Whether this CPU computes bfloat16 matrix products natively (AVX-512 BF16 or AMX tiles, as PyTorch's own
    probes report them); without, bf16 autocast on the CPU emulates them and is slower than float32."""
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(probe() for probe in probes if probe is not None)


def resolved_precision(device: torch.device, precision: str = "auto") -> str:
    """What `precision` (see Config.precision) means on `device`: "fp32", "bf16" or "fp16".
    Example: resolved_precision(torch.device("cpu")) -> "bf16" on a CPU with bf16 units, else "fp32" """
    if precision not in ("auto", "fp32", "bf16", "fp16"):
        raise ValueError(f"precision must be 'auto', 'fp32', 'bf16' or 'fp16', got {precision!r}")
    if precision != "auto":
        return precision
    if device.type != "cuda":
        return "bf16" if cpu_has_bf16() else "fp32"
    return "bf16" if torch.cuda.is_bf16_supported() else "fp16"


def _autocast(device: torch.device, precision: str = "auto"):
    """(autocast context, GradScaler or None) for `precision` (see Config.precision) on `device`.
    Example: _autocast(torch.device("cpu"), "fp32") -> (nullcontext(), None); "bf16" -> (torch.autocast("cpu", bf16),
             None); "auto" on a CPU -> "bf16" where cpu_has_bf16(), else "fp32" """
    precision = resolved_precision(device, precision)
    if precision == "fp32":
        return nullcontext(), None
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16), None
    if device.type != "cuda":
        raise ValueError("precision 'fp16' needs a GPU: use 'bf16' or 'fp32' on a CPU")
    return torch.autocast("cuda", dtype=torch.float16), torch.amp.GradScaler("cuda")


@torch.no_grad()
def validation_loss(model, pairs, config: Config, impl=solutions) -> float:
    """Label-smoothed loss per target token over `pairs`, in eval mode (no dropout)."""
    make_batch, loss_fn = _use(impl, "make_batch"), _use(impl, "label_smoothed_loss")
    device = next(model.parameters()).device
    amp, _ = _autocast(device, config.precision)
    was_training = model.training
    model.eval()
    total, n_tokens = 0.0, 0
    lengths = [max(len(s), len(t) + 1) for s, t in pairs]
    for idx in _use(impl, "batch_by_tokens")(lengths, 2 * config.max_tokens):  # no gradients: twice the batch
        batch = make_batch([pairs[i][0] for i in idx], [pairs[i][1] for i in idx]).to(device)
        with amp:
            logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (B, Lt, V)
        total += loss_fn(logits.float(), batch.tgt_out, config.label_smoothing).item() * batch.n_tokens
        n_tokens += batch.n_tokens
    model.train(was_training)
    return total / max(n_tokens, 1)


def _target_tokens(pairs, idx) -> int:
    """Target tokens of one batch: each target and its <eos> (what the loss averages over)."""
    return sum(len(pairs[j][1]) + 1 for j in idx)


#: Config fields a resumed run may change: they stop or score the run, but do not change its steps
RESUME_MAY_CHANGE = {"compile", "minutes", "max_steps", "max_epochs", "device", "eval_batch_tokens", "beam_size",
                     "alpha", "max_output_ratio", "max_output_extra"}


def check_resume(config: Config, state: dict) -> None:
    """Raise UsageError when `config` changes a setting of the checkpoint `state` that alters the steps (only
    RESUME_MAY_CHANGE may change). Example: d_model 64 for a checkpoint of d_model 32 -> "cannot resume: the
    checkpoint was trained with other settings: d_model 32 (now 64); ..." """
    saved = state["config"]
    changed = sorted(k for k, v in dataclasses.asdict(config).items()
                     if k not in RESUME_MAY_CHANGE and k in saved and saved[k] != v)
    if changed:
        raise UsageError("cannot resume: the checkpoint was trained with other settings: "
                         + ", ".join(f"{k} {saved[k]!r} (now {getattr(config, k)!r})" for k in changed)
                         + "; give the checkpoint's settings (a resumed run may change only "
                         + ", ".join(sorted(RESUME_MAY_CHANGE - {"device"})) + ")")


def train(config: Config, data: PreparedData, minutes: float | None = None, model=None, progress: bool = True,
          impl=solutions, *, checkpoint=None, checkpoint_every: int = 0, resume=None, label: str = "",
          position: int | None = None):
    """Train on data.train until `minutes` (default config.minutes), config.max_epochs or config.max_steps run out;
    validation loss after each epoch. Returns (model, history) with history lists for plotting:
    step_loss, lr, tokens_per_s (one per step), val_loss and val_step (one per epoch), and totals.

    One optimizer step takes world * config.accumulate batches of the epoch's order (the same shuffled order on
    every process, from config.seed and the epoch): under `torchrun`, rank r takes its own config.accumulate of
    them (solutions.distributed.rank_share) and DistributedDataParallel averages the gradients; only rank 0
    shows progress and evaluates. Each micro-batch's loss (per target token) is weighted by its share of the
    step's target tokens, so the step's gradient is that of one batch of their union.

    checkpoint: a file written (by rank 0) every `checkpoint_every` steps and when the run stops (time, steps or
    epochs): the weights, tokenizer and config as save_checkpoint writes them, plus the optimizer, the schedule,
    the data position (epoch, step within it), every process's random state and the history. resume: such a
    file (or what torch.load gave); the run goes on as if it had never stopped, and `minutes` is this session's
    budget (history["seconds"] counts all sessions).

    progress: a bar per epoch (tqdm), `label` before its name and at `position` (one line each for runs side by
    side), a line per epoch, and a note when this machine is far slower than the recorded runs (slow_machine_note).

    Example: model, history = train(config_for("cpu"), data, minutes=1); history["val_loss"][-1] -> 4.2
             train(cfg, data, checkpoint="runs/x/checkpoint.pt", checkpoint_every=500); later, after a crash:
             train(cfg, data, checkpoint="runs/x/checkpoint.pt", checkpoint_every=500, resume="runs/x/checkpoint.pt")
    """
    from solutions import distributed

    minutes = config.minutes if minutes is None else minutes
    rank, world = distributed.rank_and_world()
    progress = progress and rank == 0
    model = model if model is not None else build_model(config, data.tokenizer.vocab_size, impl)
    device = next(model.parameters()).device
    make_batch, loss_fn = _use(impl, "make_batch"), _use(impl, "label_smoothed_loss")
    optimizer, scheduler = make_schedule(config, model, impl)
    amp, scaler = _autocast(device, config.precision)
    lengths = [max(len(s), len(t) + 1) for s, t in data.train]  # +1: <bos>/<eos> on the target side
    batches = _use(impl, "batch_by_tokens")(lengths, config.max_tokens)
    per_step = world * config.accumulate          # batches per optimizer step, all processes together
    steps_per_epoch = len(batches) // per_step    # the last len(batches) % per_step of an epoch's order wait
    if steps_per_epoch == 0:                      # for the next epoch's shuffle (every rank takes as many steps)
        raise ValueError(f"{len(batches)} batches of at most {config.max_tokens} tokens cannot fill one step of "
                         f"{world} process(es) x accumulate {config.accumulate}: lower max_tokens or accumulate")
    rng = random.Random(config.seed)
    history = {"step_loss": [], "lr": [], "tokens_per_s": [], "val_loss": [], "val_step": [], "epochs": 0.0}
    step, n_target_tokens, stop = 0, 0, False
    snapshots, next_snapshot = [], 60 * config.snapshot_minutes  # for average_last: CPU copies of the weights
    first_epoch, first_index, seconds_before = 0, 0, 0.0
    if resume is not None:
        state = resume if isinstance(resume, dict) else read_checkpoint(resume, "resume", map_location=device)
        check_resume(config, state)
        where = state["position"]
        if (where["n_batches"], where["per_step"]) != (len(batches), per_step):
            raise UsageError(f"cannot resume: the checkpoint's epochs have {where['n_batches']} batches taken "
                             f"{where['per_step']} per step, this run's {len(batches)} taken {per_step} per step "
                             "(other data, or another number of processes x accumulate)")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        if scaler is not None and state.get("scaler"):
            scaler.load_state_dict(state["scaler"])
        distributed.set_rng_state(state["rng"], device)
        history = {k: list(v) if isinstance(v, list) else v for k, v in state["history"].items()}
        snapshots, next_snapshot = list(state["snapshots"]), state["next_snapshot"]
        step, n_target_tokens = state["step"], state["target_tokens"]
        first_epoch, first_index, seconds_before = where["epoch"], where["index"], state["seconds"]
    elif world > 1:  # each process its own dropout stream (one process keeps the one it has, as before)
        torch.manual_seed(config.seed + rank)
    for _ in range(first_epoch):  # the shuffles of the epochs already trained: this epoch's order again
        rng.shuffle(batches)
    net = model
    if world > 1:  # the hooks that average gradients over the processes during backward
        ddp = torch.nn.parallel.DistributedDataParallel
        # the buffers (the sinusoid table) are the same everywhere: not sent again at every forward
        no_buffers = ({"forward_sync_buffers": False} if "forward_sync_buffers" in inspect.signature(ddp).parameters
                      else {"broadcast_buffers": False})  # the name before PyTorch 2.13
        net = ddp(model, device_ids=[device.index] if device.type == "cuda" else None, **no_buffers)
    if config.compile:  # PyTorch's compiler over whatever module forward runs (DDP's included); the weights stay model's
        net = torch.compile(net)
    session = time.time()
    start = session - seconds_before  # training time across sessions (snapshots and history count it)
    saved_at = step if resume is not None else -1

    def save_state(epoch: int, index: int) -> None:
        """The checkpoint of the state after `step`; the next step is `index` of `epoch`'s order."""
        nonlocal saved_at
        rngs = distributed.rng_states(device)  # every process's: a collective, so every rank is here
        saved_at = step
        if rank != 0:
            return
        path = pathlib.Path(checkpoint)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".part")  # written whole, then renamed: a crash leaves the last one
        torch.save({"config": dataclasses.asdict(config), "tokenizer": {"saved": _tokenizer_text(data.tokenizer)},
                    "model": {k: v.detach() for k, v in model.state_dict().items()},
                    "history": history, "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                    "scaler": scaler.state_dict() if scaler is not None else None, "rng": rngs,
                    "position": {"epoch": epoch, "index": index, "n_batches": len(batches), "per_step": per_step},
                    "step": step, "target_tokens": n_target_tokens, "seconds": time.time() - start,
                    "snapshots": snapshots, "next_snapshot": next_snapshot}, tmp)
        tmp.replace(path)

    done = bool(config.max_steps) and step >= config.max_steps  # a resumed run that had finished already
    first_step, first_tokens, speed_unchecked = step, n_target_tokens, progress
    model.train()
    for epoch in range(first_epoch, first_epoch if done else config.max_epochs):
        rng.shuffle(batches)  # similar lengths within a batch, random order between batches
        begin = first_index if epoch == first_epoch else 0
        bar = tqdm(range(begin, steps_per_epoch), desc=f"{label}epoch {epoch + 1}", disable=not progress,
                   leave=position is None, mininterval=2.0, position=position)
        for i in bar:
            t0 = time.time()
            group = batches[i * per_step:(i + 1) * per_step]  # this step's batches, all processes together
            step_tokens = sum(_target_tokens(data.train, idx) for idx in group)
            optimizer.zero_grad(set_to_none=True)
            mine = distributed.rank_share(group, rank, world)
            loss_sum = 0.0  # sum over this process's target tokens of the loss
            for k, idx in enumerate(mine):
                batch = make_batch([data.train[j][0] for j in idx], [data.train[j][1] for j in idx]).to(device)
                last = k == len(mine) - 1  # DDP averages the gradients after the last micro-batch only
                with nullcontext() if last or world == 1 else net.no_sync():
                    with amp:  # under bf16/fp16 autocast, the loss on float32 logits (any impl's loss)
                        logits = net(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (B, Lt, V)
                    loss = loss_fn(logits.float(), batch.tgt_out, config.label_smoothing)     # per target token
                    if per_step > 1:  # this batch's share of the step's tokens; x world: DDP divides by world
                        weighted = loss * (_target_tokens(data.train, idx) * world / step_tokens)
                    else:
                        weighted = loss
                    if scaler is not None:  # fp16: scale the loss so small gradients do not underflow
                        scaler.scale(weighted).backward()
                    else:
                        weighted.backward()
                loss_sum += loss.item() * _target_tokens(data.train, idx)
            if scaler is not None:
                scaler.unscale_(optimizer)
            if config.clip_norm:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
            lr = optimizer.param_groups[0]["lr"]
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            scheduler.step()
            step += 1
            n_target_tokens += step_tokens
            out_of_time = time.time() - session > 60 * minutes
            if world > 1:  # the whole step's loss, and one decision to stop for all processes
                loss_sum, late = distributed.all_sum([loss_sum, float(out_of_time)], device)
                out_of_time = late > 0
            history["step_loss"].append(loss.item() if per_step == 1 else loss_sum / step_tokens)
            history["lr"].append(lr)
            history["tokens_per_s"].append(step_tokens / max(time.time() - t0, 1e-9))
            elapsed = time.time() - start
            bar.set_postfix(loss=f"{history['step_loss'][-1]:.3f}", lr=f"{lr:.2e}",
                            tok_s=f"{n_target_tokens / elapsed:.0f}", refresh=False)
            if speed_unchecked and step - first_step >= SPEED_CHECK[0] and time.time() - session >= SPEED_CHECK[1]:
                speed_unchecked = False  # once, after the warm-up of the first steps
                note = slow_machine_note(config, (n_target_tokens - first_tokens) / (time.time() - session), minutes)
                if note and progress:
                    tqdm.write(note)
                    history["slow_machine"] = note
            if config.average_last and (step % config.snapshot_steps == 0 if config.snapshot_steps
                                        else elapsed >= next_snapshot):
                snapshots = (snapshots + [_cpu_state(model)])[-config.average_last:]
                next_snapshot += 60 * config.snapshot_minutes
            stop = out_of_time or step == config.max_steps
            if checkpoint and (stop or (checkpoint_every and step % checkpoint_every == 0)):
                save_state(epoch, i + 1)
            if stop:
                history["epochs"] = epoch + (i + 1) / steps_per_epoch
                break
        else:
            history["epochs"] = epoch + 1.0
        bar.close()
        if rank == 0:
            history["val_loss"].append(validation_loss(model, data.val, config, impl))
            history["val_step"].append(step)
        if progress:
            print(f"{label}epoch {history['epochs']:.2f}: step {step}, val loss {history['val_loss'][-1]:.3f}, "
                  f"{time.time() - start:.0f} s", flush=True)
        if stop:
            break
    if checkpoint and saved_at != step:  # the epochs ran out: the next step would open the next epoch
        save_state(config.max_epochs, 0)
    if config.average_last and snapshots:  # the final weights are the last checkpoint of the average
        last = _cpu_state(model)
        just_taken = config.snapshot_steps and step % config.snapshot_steps == 0  # the last snapshot IS `last`
        states = (snapshots + ([] if just_taken else [last]))[-config.average_last:]
        averaged = average_states(states)
        model.load_state_dict(averaged)
        # both kept aside, to compare (lesson 15); neither is saved in checkpoints
        history.update(last_state=last, averaged_state=averaged, averaged=len(states),
                       val_loss_averaged=validation_loss(model, data.val, config, impl))
        # the average replaces the last weights only when it validates better (a short run's snapshots may be
        # of a model still far from its end: their mean is then worse than where it got to)
        last_loss = history["val_loss"][-1] if history["val_loss"] else None  # after the last step (rank 0)
        history["kept"] = "average" if last_loss is None or history["val_loss_averaged"] < last_loss else "last"
        if history["kept"] == "last":
            model.load_state_dict(last)
        if progress:
            print(f"{label}averaged the last {len(states)} snapshots: val loss {history['val_loss_averaged']:.3f} against "
                  + (f"{last_loss:.3f}" if last_loss is not None else "none measured") + " for the last weights: kept "
                  + ("the average" if history["kept"] == "average" else "the last weights (the average validates "
                                                                         "worse)"), flush=True)
    model.eval()
    history.update(steps=step, seconds=time.time() - start, target_tokens=n_target_tokens,
                   mean_tokens_per_s=n_target_tokens / max(time.time() - start, 1e-9))
    return model, history


def _speed_fields(config: Config) -> dict:
    """The Config fields that set how many target tokens a second training makes (not those that stop, snapshot
    or decode)."""
    ignore = {"seed", "minutes", "max_steps", "max_epochs", "average_last", "snapshot_minutes", "snapshot_steps",
              "beam_size", "alpha", "max_output_ratio", "max_output_extra", "eval_batch_tokens"}
    return {k: v for k, v in dataclasses.asdict(config).items() if k not in ignore}


SLOW_FRACTION = 0.5  # below half the recorded runs' tokens per second, a run is told that it is far slower
SPEED_CHECK = (50, 30.0)  # the speed is measured once, after this many steps and seconds of training


def slow_machine_note(config: Config, tokens_per_s: float, minutes: float) -> str | None:
    """What a run of the recorded CPU model (RECORDED_CPU) on a machine far slower than the recording one means:
    None when `config` is not that model or when this machine makes at least SLOW_FRACTION of the recorded target
    tokens per second. BLEU follows the steps trained, so the note says how many `minutes` make here, what the
    recorded runs reached, and how long the same steps take here.
    Example: slow_machine_note(config_for("cpu"), 1000, 15) -> "this machine trains at 1,000 target tokens/s, 31% ..." """
    if _speed_fields(config) != _speed_fields(config_for("cpu")):
        return None
    r = RECORDED_CPU
    recorded = sum(r["tokens_per_s"]) / len(r["tokens_per_s"])
    share = tokens_per_s / recorded
    if share >= SLOW_FRACTION:
        return None
    steps = sum(r["steps"]) / len(r["steps"]) * share * minutes / r["minutes"]
    fp32 = resolved_precision(torch.device("cpu"), config.precision) != "bf16"
    return (f"this machine trains at {tokens_per_s:,.0f} target tokens/s, {share:.0%} of the {recorded:,.0f} of the "
            f"recorded runs of this model on {r['cores']} CPU cores (benchmarks/translate_cpu.md)"
            + (" (they had bf16 units; float32 here)" if fp32 else "")
            + f": {plural(minutes, 'minute')} here make about {steps:,.0f} steps, where {r['minutes']} minutes made "
            f"{r['steps'][0]:,} and {r['steps'][1]:,} there. BLEU follows the steps: expect less than their "
            f"{r['greedy_bleu'][0]} and {r['greedy_bleu'][1]} greedy (the same model stopped at {r['fewer_steps']:,} "
            f"steps gave {r['fewer_steps_bleu']}, and fewer steps give less). Their steps take about "
            f"{plural(round(r['minutes'] / share), 'minute')} here (TRAIN_MINUTES in lesson 14, --minutes on the "
            "command line); other work on this machine slows it too")


# ---------------------------------------------------------------- checkpoints
def _cpu_state(model) -> dict:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def average_checkpoints(paths) -> dict:
    """The paper's checkpoint averaging (section 6.1) over files: the element-wise mean of the model weights
    saved in `paths` (save_checkpoint's files, or plain state dicts from torch.save). Example:
    model.load_state_dict(average_checkpoints([f"runs/x/step{k}.pt" for k in (600, 700, 800, 900, 1000)]))"""
    if not paths:
        raise ValueError("average_checkpoints needs at least one path")
    states = []
    for path in paths:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        states.append(saved["model"] if isinstance(saved, dict) and "model" in saved else saved)
    return average_states(states)


def average_states(states: list[dict]) -> dict:
    """The element-wise mean of state dicts (the paper's checkpoint averaging); integer tensors keep the last.
    Example: average_states([{"w": tensor([0., 2.])}, {"w": tensor([2., 4.])}]) -> {"w": tensor([1., 3.])}"""
    out = {}
    for key, last in states[-1].items():
        if last.is_floating_point():
            out[key] = torch.stack([s[key].float() for s in states]).mean(0).to(last.dtype)
        else:
            out[key] = last
    return out


def _tokenizer_text(tokenizer) -> str:
    """What tokenizer.save writes (the contract's way to store any BPETokenizer, the learner's included)."""
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "tokenizer.json"
        tokenizer.save(path)
        return path.read_text(encoding="utf-8")


def _tokenizer_from_text(text: str, impl=solutions):
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "tokenizer.json"
        path.write_text(text, encoding="utf-8")
        return _use(impl, "BPETokenizer").load(path)


class CheckpointError(UsageError):
    """A file that is not a checkpoint of this course (or not the kind asked for), said in one line."""


#: What each kind of file holds: save_checkpoint's model.pt, and train's checkpoint.pt (which holds a model.pt's too)
CHECKPOINT_KEYS = {"model": ("config", "tokenizer", "model"),
                   "resume": ("config", "tokenizer", "model", "optimizer", "scheduler", "position", "step", "rng")}


def read_checkpoint(path, kind: str = "model", map_location="cpu", label: str = "") -> dict:
    """torch.load(path, weights_only=True) (tensors and plain containers only: a file of unknown origin runs no
    code), checked to be a checkpoint of this course of `kind`: "model" (save_checkpoint's model.pt, or a
    checkpoint.pt) or "resume" (train's checkpoint.pt). Anything else raises CheckpointError saying what the file
    is and what to give instead. Example: read_checkpoint("runs/x/model.pt", "resume") -> CheckpointError("...
    a model file (save_checkpoint's model.pt): it holds no optimizer or data position to resume from; ...")"""
    import pickle
    import zipfile

    written = ("give a model.pt or a checkpoint.pt that `python -m solutions.translate train` wrote"
               if kind == "model" else "give the checkpoint.pt that `train --checkpoint-every N` wrote")
    path = pathlib.Path(path)
    name = f"{label} {path}" if label else str(path)
    if not path.exists():
        raise CheckpointError(f"{name}: no such file; {written}")
    if path.is_dir():
        raise CheckpointError(f"{name} is a folder; give the file in it (model.pt, or checkpoint.pt to resume)")
    try:
        with warnings.catch_warnings():  # PyTorch's own warnings about the pickle protocol: the error says enough
            warnings.simplefilter("ignore")
            saved = torch.load(path, map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, zipfile.BadZipFile, EOFError, UnicodeDecodeError, ValueError) as e:
        if "Unsupported global" in str(e):
            raise CheckpointError(f"{name} holds Python objects beyond tensors and plain data (not loaded: loading "
                                  f"them could run its code); it is not a checkpoint of this course; {written}") from None
        raise CheckpointError(f"{name} is corrupt or not a file that torch.save wrote (nothing in it could be read "
                              f"as tensors and plain data); {written}") from None
    except RuntimeError as e:  # PyTorch's reader: a zip archive cut short or damaged
        text = str(e)
        what = ("truncated or damaged (PyTorch could not read its archive)" if "zip" in text.lower()
                or "stream" in text.lower() else f"unreadable ({text.strip().splitlines()[0][:80]})")
        raise CheckpointError(f"{name} is {what}: copy it again, or {written}") from None
    if not isinstance(saved, dict) or not all(k in saved for k in CHECKPOINT_KEYS["model"]):
        keys = sorted(saved)[:6] if isinstance(saved, dict) else type(saved).__name__
        raise CheckpointError(f"{name} is a PyTorch file but not a checkpoint of this course (it holds {keys}, "
                              f"not config, tokenizer and model); {written}")
    missing = [k for k in CHECKPOINT_KEYS[kind] if k not in saved]
    if missing:
        raise CheckpointError(f"{name} is a model file (save_checkpoint's model.pt): it holds no "
                              f"{', '.join(missing[:3])} to resume from; {written} (OUT/checkpoint.pt)")
    return saved


def save_checkpoint(path, model, tokenizer: BPETokenizer, config: Config, history: dict | None = None) -> None:
    """One file with the config, the tokenizer (what its save() writes) and the weights."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"config": dataclasses.asdict(config),
                "tokenizer": {"saved": _tokenizer_text(tokenizer)},
                "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
                "history": {k: v for k, v in (history or {}).items() if k not in ("last_state", "averaged_state")}},
               path)


def load_checkpoint(path, device: str = "cpu", impl=solutions):
    """(model in eval mode on `device`, tokenizer, config) from save_checkpoint's file, both built with impl's
    classes; a GPU checkpoint loads on a CPU. Example: model, tokenizer, config = load_checkpoint("runs/x/model.pt")"""
    return _from_saved(read_checkpoint(path, "model", map_location=device), device, impl)


def _from_saved(saved: dict, device: str = "cpu", impl=solutions):
    """load_checkpoint's (model, tokenizer, config) from what read_checkpoint gave."""
    known = {f.name for f in dataclasses.fields(Config)}  # a checkpoint from before a field was added loads too
    config = dataclasses.replace(Config(**{k: v for k, v in saved["config"].items() if k in known}), device=str(device))
    if "saved" in saved["tokenizer"]:
        tokenizer = _tokenizer_from_text(saved["tokenizer"]["saved"], impl)
    else:  # the older format: the reference tokenizer's merges and vocabulary
        tokenizer = BPETokenizer()
        tokenizer.merges = [tuple(m) for m in saved["tokenizer"]["merges"]]
        tokenizer.itos = list(saved["tokenizer"]["itos"])
        tokenizer.stoi = {s: i for i, s in enumerate(tokenizer.itos)}
    model = build_model(config, tokenizer.vocab_size, impl)
    model.load_state_dict(saved["model"])
    return model.eval(), tokenizer, config


# ---------------------------------------------------------------- translating and scoring
def _max_len(source_length: int, max_output=(1.5, 10)) -> int:
    """Most tokens to generate: ratio * source length + extra (Config.max_output_ratio, max_output_extra).
    Example: 10 -> 25 (captions: a translation is rarely 1.5 times longer than its source); the paper's (1.0, 50): 60"""
    ratio, extra = max_output
    return int(ratio * source_length) + extra


def decoding_args(config: Config) -> dict:
    """The decoding settings of a Config, as keyword arguments of translate_batch / evaluate_bleu / translate."""
    return dict(beam_size=config.beam_size, alpha=config.alpha, batch_tokens=config.eval_batch_tokens,
                max_output=(config.max_output_ratio, config.max_output_extra))


def _decode_ids(model, ids: list[list[int]], method: str, beam_size: int, alpha: float, max_output, impl):
    """Token ids of the translations of one batch of source ids, by impl's greedy_decode or beam_search."""
    device = next(model.parameters()).device
    batch = _use(impl, "make_batch")(ids, [[] for _ in ids]).to(device)  # only src and src_mask are used
    max_len = _max_len(batch.src.size(1), max_output)
    amp, _ = _autocast(device, "auto" if device.type == "cuda" else "fp32")  # float32 on a CPU: as measured
    with amp:
        if method == "greedy":
            hyps = _use(impl, "greedy_decode")(model, batch.src, batch.src_mask, max_len)
        else:
            hyps = _use(impl, "beam_search")(model, batch.src, batch.src_mask, max_len, beam_size, alpha)
    return [hyp[:_max_len(len(s), max_output)] for s, hyp in zip(ids, hyps)]  # each source's own limit, as if alone


@torch.no_grad()
def translate_batch(model, tokenizer: BPETokenizer, sentences: list[str], method: str = "greedy",
                    beam_size: int = 4, alpha: float = 0.6, batch_tokens: int = 6000, impl=solutions,
                    max_output=(1.5, 10), progress: bool = False) -> list[str]:
    """Translate many sentences: sorted by length into batches of about batch_tokens source tokens
    (little padding), decoded with greedy_decode or beam_search, returned in the input order; with `progress`,
    a bar of the sentences done and its estimate of the time left.

    Example: translate_batch(model, tok, ["Ein Hund läuft.", "Zwei Männer lachen."]) -> ["A dog runs.", "Two men laugh."]
    """
    if method not in ("greedy", "beam"):
        raise ValueError(f"method must be 'greedy' or 'beam', got {method!r}")
    model.eval()
    ids = [tokenizer.encode(s) or [UNK] for s in sentences]  # an empty line becomes one <unk>
    budget = batch_tokens // (beam_size if method == "beam" else 1)  # a beam multiplies the rows
    out: list[str] = [""] * len(sentences)
    bar = tqdm(total=len(sentences), desc=f"{method} decoding", unit=" sentences", disable=not progress,
               leave=False, mininterval=2.0)
    for idx in _use(impl, "batch_by_tokens")([len(s) for s in ids], budget):
        hyps = _decode_ids(model, [ids[i] for i in idx], method, beam_size, alpha, max_output, impl)
        for i, hyp in zip(idx, hyps):
            out[i] = tokenizer.decode(hyp)
        bar.update(len(idx))
    bar.close()
    return out


def translate(model, tokenizer: BPETokenizer, sentence: str, method: str = "beam", impl=solutions, **kw) -> str:
    """One sentence. Example: translate(model, tok, "Ein Mann schläft.") -> "A man is sleeping." """
    return translate_batch(model, tokenizer, [sentence], method, impl=impl, **kw)[0]


def evaluate_bleu(model, tokenizer: BPETokenizer, src_lines: list[str], ref_lines: list[str],
                  method: str = "greedy", beam_size: int = 4, alpha: float = 0.6, batch_tokens: int = 6000,
                  impl=solutions, return_hypotheses: bool = False, max_output=(1.5, 10), progress: bool = False):
    """sacreBLEU (cased, 13a tokenization, on detokenized text) of the model's translations of src_lines
    against ref_lines, in 0..100; with return_hypotheses, (bleu, translations).

    Example: evaluate_bleu(model, tok, test_de, test_en, "beam") -> 35.1
    """
    if len(src_lines) != len(ref_lines):
        raise ValueError(f"{len(src_lines)} source lines but {len(ref_lines)} references")
    hyps = translate_batch(model, tokenizer, src_lines, method, beam_size, alpha, batch_tokens, impl, max_output,
                           progress)
    bleu = sacrebleu.corpus_bleu(hyps, [ref_lines]).score
    return (bleu, hyps) if return_hypotheses else bleu


def score_test(model, tokenizer, src_lines: list[str], ref_lines: list[str], config: Config,
               seconds: float | None = None, methods=("greedy", "beam"), impl=solutions, progress: bool = True,
               probe: int = 32) -> dict:
    """Decode the test set with each of `methods` and score it with sacreBLEU, all methods together within about
    `seconds` (None: no bound; the course passes the training's own time, so that a one-minute run is not
    followed by minutes of decoding: an undertrained model decodes every sentence to the length limit).

    The first `probe` sentences are decoded by every method and timed, then chunks of the next ones that the time
    left fits at the last chunk's speed; when not all fit `seconds`, only the first n are scored, and "note" says so
    with an estimate of what all would take. Returns {"sentences": n,
    "of": len(src_lines), "estimate_seconds": the time all would take, "references": the n references,
    "note": a sentence or "", method: {"bleu", "hypotheses", "seconds"} for each method}.
    Example: score_test(model, tok, test_de, test_en, config, seconds=60)["greedy"]["bleu"] -> 2.1"""
    if len(src_lines) != len(ref_lines):
        raise ValueError(f"{len(src_lines)} source lines but {len(ref_lines)} references")
    total = len(src_lines)
    args = decoding_args(config)
    out = {m: {"hypotheses": [], "seconds": 0.0} for m in methods}

    def decode(lines):
        for m in methods:
            t0 = time.time()
            out[m]["hypotheses"] += translate_batch(model, tokenizer, lines, m, impl=impl, progress=progress, **args)
            out[m]["seconds"] += time.time() - t0

    def spent():
        return sum(out[m]["seconds"] for m in methods)

    n, estimate = total, None
    if seconds is not None and total > probe:
        n = probe
        decode(src_lines[:n])
        per_sentence = spent() / n  # small batches: an overestimate, corrected by each larger chunk below
        estimate = per_sentence * total
        while n < total:
            chunk = min(total - n, int((seconds - spent()) / per_sentence))
            if chunk < max(1, probe // 4):
                break
            before = spent()
            decode(src_lines[n:n + chunk])
            n, per_sentence = n + chunk, (spent() - before) / chunk
            estimate = spent() + per_sentence * (total - n)
    else:
        decode(src_lines)
    refs = list(ref_lines[:n])
    for m in methods:
        out[m]["bleu"] = sacrebleu.corpus_bleu(out[m]["hypotheses"], [refs]).score
    note = ""
    if n < total:
        note = (f"scored the first {n:,} of {total:,} test sentences: all of them would take about {estimate:.0f} s "
                f"of decoding ({' and '.join(methods)}) at this speed, longer than the {seconds:.0f} s of training; "
                "a longer training decodes faster (it stops at <eos>) and scores them all")
    out.update(sentences=n, of=total, estimate_seconds=estimate if estimate is not None else spent(),
               references=refs, note=note)
    return out


def bleu_scores(hypotheses: list[str], references: list[str], impl=solutions) -> dict:
    """impl's corpus_bleu beside sacreBLEU's, on the same tokens: both texts split by sacreBLEU's own 13a
    tokenizer, then scored. Returns {"sacrebleu", "corpus_bleu", "no_smoothing", "note"}: sacreBLEU's
    standard score, impl's, sacreBLEU's without smoothing on those tokens, and a sentence on how they differ.

    They are the same number unless some n-gram order has no match at all: sacreBLEU then smooths
    (its default, "exp") where the contract's corpus_bleu, like Papineni et al., gives 0.
    Example: bleu_scores(["A dog runs ."], ["A dog runs ."]) -> {"sacrebleu": 100.0, "corpus_bleu": 100.0, ...}
    """
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    split = Tokenizer13a()
    hyp_tokens = [split(h).split() for h in hypotheses]  # "A dog." -> ["A", "dog", "."]
    ref_tokens = [split(r).split() for r in references]
    standard = sacrebleu.corpus_bleu(hypotheses, [references]).score
    plain = sacrebleu.corpus_bleu([" ".join(t) for t in hyp_tokens], [[" ".join(t) for t in ref_tokens]],
                                  tokenize="none", smooth_method="none").score
    own = float(_use(impl, "corpus_bleu")(hyp_tokens, ref_tokens))

    def same(a, b):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)

    if same(own, standard):
        note = "the same number"
    elif same(own, plain):
        note = ("sacreBLEU smooths an n-gram order with no match at all (its default, 'exp'); corpus_bleu gives 0 "
                f"then, as Papineni et al. do: without smoothing sacreBLEU gives {plain:.2f} too")
    else:
        note = (f"corpus_bleu differs from sacreBLEU without smoothing on the same tokens ({plain:.2f}): "
                "check the clipping of n-gram counts, the brevity penalty and max_n")
    return {"sacrebleu": standard, "corpus_bleu": own, "no_smoothing": plain, "note": note}


# ---------------------------------------------------------------- attention maps
def pieces(tokenizer, ids: list[int]) -> list[str]:
    """Readable subwords: a word's last piece without </w>, the others with subword-nmt's "@@".
    Example: ids of "Mädchen spielt" -> ["Mäd@@", "chen", "spielt"]"""
    itos = getattr(tokenizer, "itos", None)
    if itos is None:  # a tokenizer without a vocabulary list: each id decoded alone
        return [tokenizer.decode([i]) for i in ids]
    return [itos[i][:-4] if itos[i].endswith("</w>") else itos[i] + ("@@" if i > 3 else "") for i in ids]


@torch.no_grad()
def attention_maps(model, tokenizer, sentence: str, method: str = "beam", impl=solutions, **decoding) -> dict:
    """Translate `sentence`, run the model once on (the source, its translation) and read the weights that
    every MultiHeadAttention keeps (`attn_weights`, lesson 04). Returns {"source": subwords, "target":
    <bos> and the translation's subwords, "translation": text, "encoder self-attention": (N, h, Ls, Ls),
    "decoder self-attention": (N, h, Lt, Lt), "cross-attention": (N, h, Lt, Ls)}, N layers, h heads.

    Example: attention_maps(model, tok, "Ein Hund läuft.")["cross-attention"].shape -> (3, 4, 5, 5)
    """
    decoding.pop("batch_tokens", None)
    beam_size, alpha = decoding.get("beam_size", 4), decoding.get("alpha", 0.6)
    src_ids = tokenizer.encode(sentence) or [UNK]
    model.eval()
    tgt_ids = _decode_ids(model, [src_ids], method, beam_size, alpha, decoding.get("max_output", (1.5, 10)), impl)[0]
    device = next(model.parameters()).device
    src = torch.tensor([src_ids], device=device)                            # (1, Ls)
    tgt_in = torch.tensor([[solutions.BOS] + tgt_ids], device=device)      # (1, Lt)
    model(src, tgt_in, _use(impl, "padding_mask")(src), _use(impl, "target_mask")(tgt_in))  # fills attn_weights

    def stack(attns):  # each (1, h, Lq, Lk) -> (N, h, Lq, Lk)
        return torch.stack([a.attn_weights[0].float().cpu() for a in attns])

    return {"source": pieces(tokenizer, src_ids), "target": ["<bos>"] + pieces(tokenizer, tgt_ids),
            "translation": tokenizer.decode(tgt_ids),
            "encoder self-attention": stack([layer.self_attn for layer in model.encoder.layers]),
            "decoder self-attention": stack([layer.self_attn for layer in model.decoder.layers]),
            "cross-attention": stack([layer.cross_attn for layer in model.decoder.layers])}


def plot_attention(maps: dict, kind: str, size: float = 1.8):
    """One figure for `kind` of attention_maps: a row per layer, a column per head, as the Annotated
    Transformer draws them (rows: queries, columns: keys; brighter: more weight)."""
    import matplotlib.pyplot as plt

    weights = maps[kind]                                                  # (N, h, Lq, Lk)
    n_layers, n_heads = weights.shape[:2]
    queries = maps["source"] if kind.startswith("encoder") else maps["target"]
    keys = maps["target"] if kind.startswith("decoder") else maps["source"]
    fig, axes = plt.subplots(n_layers, n_heads, figsize=(size * n_heads + 1, size * n_layers + 0.8), squeeze=False,
                             layout="constrained")
    for layer in range(n_layers):
        for head in range(n_heads):
            ax = axes[layer][head]
            ax.imshow(weights[layer, head], cmap="viridis", vmin=0.0, vmax=1.0)
            ax.set_xticks(range(len(keys)), keys if layer == n_layers - 1 else [], rotation=90, fontsize=6)
            ax.set_yticks(range(len(queries)), queries if head == 0 else [], fontsize=6)
            if layer == 0:
                ax.set_title(f"head {head + 1}", fontsize=8)
            if head == 0:
                ax.set_ylabel(f"layer {layer + 1}", fontsize=8)
    fig.suptitle(f"{kind}: {maps['translation']}", fontsize=9)
    return fig


# ---------------------------------------------------------------- command line
def peak_memory_mb() -> float:
    """Peak resident memory of this process so far, in MB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def run_training(args) -> dict:
    """The `train` command: load, prepare, train, save, score greedy and beam on the test split. Under
    `torchrun` every process trains (solutions.distributed.init_from_env) and rank 0 alone prints, writes the
    files and scores; the other ranks return {}."""
    from solutions import distributed

    if args.threads:
        torch.set_num_threads(args.threads)
    rank, world, device = distributed.init_from_env(args.device)
    try:
        results = _run_training(args, rank, world, device)
    except BaseException:
        distributed.close(meet=False)
        raise
    distributed.close()
    return results


def default_config(device: str, size: str | None = None, world: int = 1, **overrides) -> Config:
    """The Config a `train` command starts from before its flags: the paper's with --size (its 25,000 tokens a
    step shared by the processes x accumulate, a week's budget so that the step budget stops first), else
    config_for(device). Example: default_config("cpu").dropout -> 0.0; default_config("cpu", "base").max_tokens
    -> 25000"""
    if size:
        overrides.setdefault("max_tokens", PAPER_BASE["max_tokens"] // (world * overrides.get("accumulate", 1)))
        overrides.setdefault("minutes", 7 * 24 * 60.0)  # a week: the step budget (100,000 or 300,000) stops first
        return paper_config(device, size, **overrides)
    return config_for(device, **overrides)


def config_from_args(args, world: int = 1, device: str = "cpu", resume: dict | None = None) -> Config:
    """The Config of a `train` command: the checkpoint's own with --resume (a change that alters the steps is
    refused by train()), the paper's with --size, else config_for(device); any Config flag given overrides it.
    With --size and no --max-tokens, the paper's 25,000 tokens per step are shared by the processes x accumulate.
    Example: config_from_args(build_parser().parse_args(["train", "--size", "base", "--accumulate", "2"]), world=4)
             -> d_model 512, warmup 4000, max_steps 100000, max_tokens 3125 (8 batches of 3,125 a step)"""
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(Config)
                 if f.name != "device" and getattr(args, f.name, None) is not None}
    if resume is not None:
        known = {f.name for f in dataclasses.fields(Config)}
        saved = Config(**{k: v for k, v in resume["config"].items() if k in known})
        return dataclasses.replace(saved, device=device, **overrides)
    return default_config(device, args.size, world, **overrides)


def _run_training(args, rank: int, world: int, device: str) -> dict:
    say = print if rank == 0 else (lambda *a, **kw: None)
    resume = read_checkpoint(args.resume, "resume", map_location=device, label="--resume") if args.resume else None
    config = config_from_args(args, world, device, resume)
    problems = config_problems(config)
    if problems:
        raise UsageError("; ".join(problems))
    if resume is not None:  # before any work; train() checks it again (and the data's batches)
        check_resume(config, resume)
    out = pathlib.Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: a file, not a folder; give a folder for model.pt and the results")
    torch.manual_seed(config.seed)
    if rank != 0:  # rank 0 downloads into the cache first; the others then read it
        torch.distributed.barrier()
    name, splits = load_data(args.data, synthetic_sizes=(args.synthetic_train, 500, 500))
    if rank == 0 and world > 1:
        torch.distributed.barrier()
    say(f"data: {name}, " + ", ".join(f"{k} {len(v[0])}" for k, v in splits.items()), flush=True)
    say(f"config: {config}" + (f"\n{world} processes (torchrun), {world * config.accumulate} batches of at most "
                               f"{config.max_tokens} tokens per step" if world > 1 else ""), flush=True)
    say(budget_text(config), flush=True)
    tokenizer = _tokenizer_from_text(resume["tokenizer"]["saved"]) if resume is not None else None
    if tokenizer is None and world > 1:  # rank 0 learns the BPE, the others take its vocabulary
        box = [None]
        if rank == 0:
            data = prepare_data(config, splits, progress=not args.quiet)
            box = [_tokenizer_text(data.tokenizer)]
        torch.distributed.broadcast_object_list(box, src=0)
        tokenizer = _tokenizer_from_text(box[0])
    data = prepare_data(config, splits, tokenizer=tokenizer, progress=not args.quiet and rank == 0)
    checkpoint = out / "checkpoint.pt" if args.checkpoint_every or args.resume else None
    model, history = train(config, data, progress=not args.quiet, checkpoint=checkpoint,
                           checkpoint_every=args.checkpoint_every, resume=resume)
    if rank != 0:
        return {}
    save_checkpoint(out / "model.pt", model, data.tokenizer, config, history)
    test_de, test_en = splits["test"]
    if args.max_test:
        test_de, test_en = test_de[:args.max_test], test_en[:args.max_test]
    # decoding within the training's own time (--decode-seconds): a one-minute run is not followed by minutes of
    # decoding an undertrained model to the length limit
    budget = history["seconds"] if args.decode_seconds is None else (args.decode_seconds or None)
    scored = score_test(model, data.tokenizer, test_de, test_en, config, seconds=budget, progress=not args.quiet)
    results = {"data": name, "config": dataclasses.asdict(config), "processes": world, "epochs": history["epochs"],
               "steps": history["steps"], "train_seconds": history["seconds"],
               "target_tokens_per_s": history["mean_tokens_per_s"], "val_loss": history["val_loss"],
               "test_sentences": scored["sentences"], "test_sentences_available": len(test_de)}
    for method in ("greedy", "beam"):
        results[f"{method}_bleu"], results[f"{method}_seconds"] = scored[method]["bleu"], scored[method]["seconds"]
        (out / f"test.{method}.en").write_text("\n".join(scored[method]["hypotheses"]) + "\n", encoding="utf-8")
    if "last_state" in history:  # averaged: the weights not kept too, to measure what the average gave
        results["kept"] = history["kept"]
        results["val_loss_averaged"] = history["val_loss_averaged"]
        other = "last_state" if history["kept"] == "average" else "averaged_state"
        kept = _cpu_state(model)
        model.load_state_dict(history[other])
        src = test_de[:scored["sentences"]]
        results["greedy_bleu_last_alone" if other == "last_state" else "greedy_bleu_averaged"] = evaluate_bleu(
            model, data.tokenizer, src, scored["references"], "greedy", **decoding_args(config))
        model.load_state_dict(kept)
    results["peak_memory_mb"] = peak_memory_mb()
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    print(f"\ndata {name}: {history['epochs']:.2f} epochs, {history['steps']} steps in {history['seconds']:.0f} s, "
          f"{history['mean_tokens_per_s']:.0f} target tokens/s" + (f" ({world} processes)" if world > 1 else ""))
    print(f"test BLEU (sacreBLEU, {scored['sentences']} sentences): greedy {results['greedy_bleu']:.2f} "
          f"({results['greedy_seconds']:.0f} s), beam {config.beam_size} {results['beam_bleu']:.2f} "
          f"({results['beam_seconds']:.0f} s)")
    if scored["note"]:
        print(scored["note"] + " (--decode-seconds 0: no limit)")
    if "greedy_bleu_last_alone" in results:
        print(f"the average of the last {history['averaged']} snapshots against the last weights alone: greedy "
              f"{results['greedy_bleu']:.2f} against {results['greedy_bleu_last_alone']:.2f}")
    elif "greedy_bleu_averaged" in results:
        print(f"the last weights (kept: they validate better) against the average of the last {history['averaged']} "
              f"snapshots: greedy {results['greedy_bleu']:.2f} against {results['greedy_bleu_averaged']:.2f}")
    print(f"peak memory {results['peak_memory_mb']:.0f} MB; checkpoint {out / 'model.pt'}")
    return results


def _read_lines(path: str, what: str) -> list[str]:
    """The lines of a UTF-8 text file (standard input for "-"), or UsageError saying why not."""
    if path == "-":
        return sys.stdin.read().splitlines()
    file = pathlib.Path(path)
    if not file.is_file():
        raise UsageError(f"{what} {path}: " + ("a folder, not a file" if file.is_dir() else "no such file"))
    try:
        return file.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise UsageError(f"{what} {path}: not UTF-8 text ({e.reason} at byte {e.start}); give a text file, "
                         "one sentence a line") from None


def run_translate(args) -> list[str]:
    """The `translate` command: the sentences (arguments, --input FILE, or standard input) translated by the model
    that `train` saved (OUT/model.pt holds the weights, the config and the tokenizer), one line each on stdout.
    A blank line stays blank. --bleu REFERENCES: sacreBLEU's score of them on stderr, so that stdout stays one
    translation a line (`> out.en` keeps only translations)."""
    from solutions.cli import check_device

    check_device(args.device)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.sentences and args.input:
        raise UsageError("give the sentences as arguments or with --input FILE, not both")
    if args.sentences:
        lines = [" ".join(s.split()) for s in args.sentences]  # one argument, one line: no newline inside
    elif args.input:
        lines = _read_lines(args.input, "--input")
    elif sys.stdin is None or sys.stdin.isatty():
        raise UsageError("no sentences to translate: give them as arguments, with --input FILE, or on standard "
                         "input (echo 'Ein Hund läuft.' | python -m solutions.translate translate --model ...)")
    else:
        lines = sys.stdin.read().splitlines()
    references = _read_lines(args.bleu, "--bleu") if args.bleu else None
    if references is not None and len(references) != len(lines):
        raise UsageError(f"--bleu {args.bleu}: {len(references)} reference lines for {len(lines)} sentences; "
                         "give one reference a sentence, in the same order")
    model, tokenizer, config = _from_saved(read_checkpoint(args.model, "model", device, label="--model"), device)
    beam_size = config.beam_size if args.beam_size is None else args.beam_size
    alpha = config.alpha if args.alpha is None else args.alpha
    method = "greedy" if beam_size == 1 else "beam"
    todo = [i for i, line in enumerate(lines) if line.strip()]
    hyps = translate_batch(model, tokenizer, [lines[i] for i in todo], method, beam_size, alpha,
                           args.batch_tokens or config.eval_batch_tokens,
                           max_output=(config.max_output_ratio, config.max_output_extra))
    out = [""] * len(lines)
    for i, hyp in zip(todo, hyps):
        out[i] = hyp
    if out:
        sys.stdout.write("\n".join(out) + "\n")
        sys.stdout.flush()
    if references is not None:
        metric = sacrebleu.metrics.BLEU()
        score = metric.corpus_score(out, [references])
        print(f"sacreBLEU ({metric.get_signature()}): {score}", file=sys.stderr, flush=True)
    return out


PROG = "python -m solutions.translate"


def build_parser(argv=None) -> argparse.ArgumentParser:
    """The command line: `train` and its flags (one per Config field, its default that of the config the run will
    use: config_for(--device), or paper_config with --size), and `translate`. argv: the arguments the parser will
    read (their --device, --size and --accumulate choose the defaults that --help states); None: sys.argv."""
    from solutions.cli import Parser, add_config_flags, boolean, device_name, pre_parse

    early = pre_parse(argv, "--device", "--size", "--accumulate")
    device = early.get("device", "")
    try:
        device = device_name(device)
    except argparse.ArgumentTypeError:  # none given, or one the parser will refuse
        device = "cuda" if torch.cuda.is_available() else "cpu"
    size = early.get("size") if early.get("size") in PAPER_SIZES else None
    accumulate = int(early["accumulate"]) if early.get("accumulate", "").isdigit() and int(early["accumulate"]) else 1
    defaults = default_config(device, size, **({"accumulate": accumulate} if accumulate != 1 else {}))
    source = (f"paper_config({device!r}, {size!r}), max_tokens {defaults.max_tokens} (25,000 / accumulate), "
              "minutes a week" if size else f"config_for({device!r})")

    parser = Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="{train,translate}")
    p = commands.add_parser("train", help="train, save a checkpoint, print test BLEU (also under torchrun)",
                            description="Train a model, save OUT/model.pt, score the test split.")
    p.add_argument("--data", default="multi30k",
                   help='"multi30k", "synthetic", "wmt14" (de-en), "wmt14-en-de" (the paper\'s direction), '
                        'or a Multi30k mirror (URL or folder) (default: multi30k)')
    p.add_argument("--out", default="runs/translate",
                   help="folder for model.pt, results.json, test translations (default: runs/translate)")
    p.add_argument("--device", type=device_name, default=None,
                   help=f"cpu, cuda or cuda:N; picks config_for(device) (default: {device}: cuda when there is one)")
    p.add_argument("--size", choices=sorted(PAPER_SIZES), default=None,
                   help="the paper's base or big model with its optimizer, warmup 4000 and step budget "
                        "(paper_config); max_tokens defaults to 25,000 / (processes x accumulate) (default: none, "
                        "the device's own model)")
    p.add_argument("--checkpoint-every", type=number(int, 0), default=0, metavar="N",
                   help="write OUT/checkpoint.pt every N steps and when the run stops (0: none), for --resume "
                        "(default: 0)")
    p.add_argument("--resume", default=None, metavar="CHECKPOINT",
                   help="continue from a checkpoint.pt (its settings; --minutes, --steps, --max-epochs may change) "
                        "(default: none)")
    p.add_argument("--synthetic-train", type=number(int, 1), default=20000, metavar="N",
                   help="training pairs of the synthetic corpus (default: 20000)")
    p.add_argument("--max-test", type=number(int, 0), default=0, metavar="N",
                   help="score only the first N test sentences (0: all) (default: 0)")
    p.add_argument("--decode-seconds", type=number(float, 0), default=None, metavar="S",
                   help="decode the test split (greedy and beam) within about S seconds: the first sentences that "
                        "fit, said when not all (0: no limit) (default: the training's own time)")
    p.add_argument("--threads", type=number(int, 0), default=0, metavar="N",
                   help="CPU threads for PyTorch (0: its default, one per core; 1 is faster on a busy machine) "
                        "(default: 0)")
    p.add_argument("--quiet", action="store_true", help="no progress bar (default: false)")
    add_config_flags(p, defaults, CONFIG_RULES, skip=("device",), aliases={"max_steps": ["--steps"]},
                     source=source)

    t = commands.add_parser("translate", help="translate with a trained model.pt, one line a sentence",
                            description="Translate sentences (arguments, --input FILE, or standard input) with the "
                                        "model that train saved, one translation a line on stdout.")
    t.add_argument("sentences", nargs="*", metavar="SENTENCE", help="sentences to translate, one argument each")
    t.add_argument("--model", required=True, metavar="MODEL_PT",
                   help="OUT/model.pt (or OUT/checkpoint.pt) written by train: weights, config and tokenizer")
    t.add_argument("--input", metavar="FILE", help="a file of sentences, one a line ('-': standard input)")
    t.add_argument("--beam-size", type=number(int, 1), default=None, metavar="K",
                   help="beam search with K hypotheses; 1: greedy decoding (default: the model's config, 4)")
    t.add_argument("--alpha", type=number(float, 0), default=None,
                   help="beam search's length penalty (default: the model's config: 1.0 for the CPU model, "
                        "0.6 for the GPU's)")
    t.add_argument("--bleu", metavar="REFERENCE_FILE",
                   help="score the translations against these references (one a line) with sacreBLEU; the score "
                        "line goes to stderr, so that stdout stays one translation a line")
    t.add_argument("--device", type=device_name, default=None,
                   help=f"cpu, cuda or cuda:N (default: {device}: cuda when there is one)")
    t.add_argument("--batch-tokens", type=number(int, 1), default=None, metavar="N",
                   help="source tokens per decoding batch (default: the model's config)")
    return parser


def main(argv=None):
    """The command line; a bad input is one line on stderr and exit status 2 (solutions.cli)."""
    from solutions import cli

    def command(argv):
        args = build_parser(argv).parse_args(argv)
        if args.command == "translate":
            return run_translate(args)
        cli.check_device(args.device)
        return run_training(args)

    return cli.run(PROG, command, argv)


if __name__ == "__main__":
    main()
