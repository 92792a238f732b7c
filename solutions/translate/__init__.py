"""Train a German-to-English Transformer and translate with it: the code of the final lesson and of
the command line `python -m solutions.translate train --data multi30k --minutes 15 --out runs/x`, then
`python -m solutions.translate translate --model runs/x/model.pt "Ein Hund läuft."` (or --input FILE, or
standard input; --bleu REFERENCES scores them with sacreBLEU on stderr). Bad input: one line, exit status 2
(solutions.cli).

The same command trains on several processes under `torchrun` (DistributedDataParallel;
solutions.distributed), and takes the paper's models, accumulation and resumable checkpoints (issue 19):
    torchrun --nproc_per_node 8 -m solutions.translate train --data wmt14-en-de --size base \
        --checkpoint-every 1000 --out runs/base
    # later, after a crash: the same command + --resume runs/base/checkpoint.pt

Every function that tokenizes, builds, trains, decodes or scores takes `impl`, the module (or namespace)
that supplies BPETokenizer, Transformer, make_optimizer, label_smoothed_loss, batch_by_tokens, make_batch,
greedy_decode, beam_search, corpus_bleu and the masks: the reference `solutions` by default, or the
learner's own code (`autograder.learner.collect`). A name that `impl` lacks is taken from `solutions`
(implementation._use). Inside `train`, `impl` is carried once, in its TrainState.

Example: name, splits = load_data("synthetic"); cfg = config_for("cpu")
         data = prepare_data(cfg, splits); model, history = train(cfg, data, minutes=5)
         translate(model, data.tokenizer, "Der Hund schläft.") -> "The dog sleeps."

The package, one module per concern (every name below is importable from `solutions.translate` itself):
    config       Config, config_for, paper_config, lesson_config, CONFIG_RULES, config_problems, budget_text
    paper        departures (where a run departs from the paper), RECORDED_CPU
    data         PreparedData, prepare_data
    model        build_model, make_schedule, set_key_size, set_attention_dropout
    precision    resolved_precision, cpu_has_bf16, the autocast of training and decoding
    loop         train over one TrainState (the training loop), validation_loss, slow_machine_note
    checkpoints  save_checkpoint, load_checkpoint, read_checkpoint, the resumable state, average_checkpoints
    inference    translate_batch, translate, evaluate_bleu, score_test, bleu_scores
    plots        attention_maps, plot_attention
    commands     the command line (build_parser, main); `python -m solutions.translate` runs it (__main__)
"""
from __future__ import annotations

from solutions.cli import UsageError
from solutions.data import load_data
from solutions.tokenization import UNK, BPETokenizer
from solutions.translate.checkpoints import (
    CHECKPOINT_KEYS,
    RESUME_MAY_CHANGE,
    CheckpointError,
    average_checkpoints,
    average_states,
    check_resume,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
)
from solutions.translate.commands import (
    PROG,
    build_parser,
    config_from_args,
    default_config,
    main,
    peak_memory_mb,
    run_training,
    run_translate,
)
from solutions.translate.config import (
    CONFIG_RULES,
    LR_PAPER_BASE,
    PAPER_BASE,
    PAPER_BIG,
    PAPER_SIZES,
    TINY_LESSON,
    Config,
    budget_text,
    config_for,
    config_problems,
    lesson_config,
    paper_config,
    plural,
)
from solutions.translate.data import PreparedData, prepare_data
from solutions.translate.inference import (
    bleu_scores,
    decoding_args,
    evaluate_bleu,
    score_test,
    translate,
    translate_batch,
)
from solutions.translate.loop import (
    SLOW_FRACTION,
    SPEED_CHECK,
    TrainState,
    slow_machine_note,
    train,
    validation_loss,
)
from solutions.translate.model import (
    LEARNED_MAX_LEN,
    build_model,
    make_schedule,
    set_attention_dropout,
    set_key_size,
)
from solutions.translate.paper import RECORDED_CPU, departures, departures_markdown
from solutions.translate.plots import attention_maps, pieces, plot_attention
from solutions.translate.precision import _autocast, cpu_has_bf16, resolved_precision

# the names this package offers (lesson 14 and the tests import them from here), by module
__all__ = [
    "UsageError", "load_data", "UNK", "BPETokenizer",
    "CHECKPOINT_KEYS", "RESUME_MAY_CHANGE", "CheckpointError", "average_checkpoints", "average_states",
    "check_resume", "load_checkpoint", "read_checkpoint", "save_checkpoint",
    "PROG", "build_parser", "config_from_args", "default_config", "main", "peak_memory_mb", "run_training",
    "run_translate",
    "CONFIG_RULES", "LR_PAPER_BASE", "PAPER_BASE", "PAPER_BIG", "PAPER_SIZES", "TINY_LESSON", "Config",
    "budget_text", "config_for", "config_problems", "lesson_config", "paper_config", "plural",
    "PreparedData", "prepare_data",
    "bleu_scores", "decoding_args", "evaluate_bleu", "score_test", "translate", "translate_batch",
    "SLOW_FRACTION", "SPEED_CHECK", "TrainState", "slow_machine_note", "train", "validation_loss",
    "LEARNED_MAX_LEN", "build_model", "make_schedule", "set_attention_dropout", "set_key_size",
    "RECORDED_CPU", "departures", "departures_markdown",
    "attention_maps", "pieces", "plot_attention",
    # _autocast: tests/test_translate.py tests it from here
    "_autocast", "cpu_has_bf16", "resolved_precision",
]
