"""The copy and reverse tasks of lesson 12, the classic first test of a sequence-to-sequence model, and
what lessons 09, 12 and 13 need around them: random sources, the training loop that lesson 12 shows, greedy
accuracy, and a plot of the loss with the learning rate. Not part of the contract: helpers the lessons
import so that their cells show only what a learner should read.

A source is 3 to 8 random symbols (token ids 4 to 13 of a 14-token vocabulary whose ids 0-3 are the
specials); the target is the same sequence (copy) or the sequence reversed.

While a grader runs a notebook (nbgrader's autograde and validate, and `python -m autograder grade`, set the
environment variable NBGRADER_EXECUTION), a training demonstration runs `GRADED_STEPS` steps only
(`demo_steps`): no graded cell depends on what it learns, and the full runs cost a submission minutes on a
CPU.
"""
from __future__ import annotations

import os
import random

import torch

from .decoding import greedy_decode
from .label_smoothing import label_smoothed_loss
from .output_projection import Transformer
from .training import make_batch, make_optimizer

V = 14          # the 4 special tokens, then the symbols 4..13
D_MODEL = 64    # the small model of lesson 12: 4 heads, 1 + 1 layers, d_ff 128, no dropout
# a demonstration's steps under a grader: enough to run every line of the loop, 2 s on a CPU
GRADED_STEPS = 20


def demo_steps(steps: int) -> int:
    """`steps`, or at most GRADED_STEPS while a grader runs the notebook (NBGRADER_EXECUTION is set, as
    nbgrader
    and the grade command set it).
    Example: demo_steps(600) -> 600 in JupyterLab, 20 under nbgrader autograde."""
    return min(steps, GRADED_STEPS) if os.environ.get("NBGRADER_EXECUTION") else steps


def random_sequences(rng: random.Random, n: int, shortest: int = 3, longest: int = 8) -> list[list[int]]:
    """n random sources of shortest..longest symbols.
    Example: random_sequences(random.Random(0), 1) -> [[10, 4, 7, 7, 10]]"""
    return [[rng.randint(4, V - 1) for _ in range(rng.randint(shortest, longest))] for _ in range(n)]


def copy(seq: list[int]) -> list[int]:
    return list(seq)


def reverse(seq: list[int]) -> list[int]:
    return seq[::-1]


def yours_or_reference(name: str, mine, probe):
    """`mine` if probe(mine) runs, else the course's function `name` from solutions (and it says which)."""
    import solutions
    try:
        probe(mine)
    except NotImplementedError:
        print(f"{name} (or a function it calls) is not implemented yet: the training uses solutions.{name}")
        return getattr(solutions, name)
    except Exception as e:  # noqa: BLE001  (any other error: train with the reference rather than stop)
        print(f"{name} raised {type(e).__name__}: {e}. The training uses solutions.{name}")
        return getattr(solutions, name)
    print(f"the training uses your {name}")
    return mine


def new_model() -> Transformer:
    return Transformer(V, V, d_model=D_MODEL, n_heads=4, n_layers=1, d_ff=128, dropout=0.0)


def train(task, steps: int, batch_size: int = 64, seed: int = 0, make_batch=make_batch,
          make_optimizer=make_optimizer, progress=None):
    """The loop of lesson 12: a fresh small Transformer trained to map each source s to task(s), with fresh
    data at every step, the warmup schedule (warmup_steps=100, factor=0.5) and no label smoothing.
    Returns (model in eval mode, the loss of every step, the learning rate of every step). Under a grader,
    `steps` is cut to GRADED_STEPS (demo_steps)."""
    steps = demo_steps(steps)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    model = new_model()
    optimizer, scheduler = make_optimizer(model, D_MODEL, warmup_steps=100, factor=0.5)
    model.train()
    losses, rates = [], []
    for _ in (progress or range)(steps):
        src = random_sequences(rng, batch_size)
        batch = make_batch(src, [task(s) for s in src])
        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)   # (B, L_t, V)
        loss = label_smoothed_loss(logits, batch.tgt_out, epsilon=0.0)
        optimizer.zero_grad()
        loss.backward()
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return model.eval(), losses, rates


def accuracy(model, task, n: int = 200, seed: int = 1234, make_batch=make_batch, decode=greedy_decode):
    """(share of n new random sources whose greedy decoding is exactly task(source), [(source, output)])."""
    src = random_sequences(random.Random(seed), n)
    batch = make_batch(src, src)
    out = decode(model, batch.src, batch.src_mask, max_len=10)
    return sum(o == task(s) for o, s in zip(out, src)) / n, list(zip(src, out))


def spikes(losses: list[float], window: int = 50, ratio: float = 10.0) -> list[int]:
    """The steps (1, 2, ...) whose loss is more than `ratio` times the median loss of the `window` steps
    before.
    Example: spikes([1.0] * 60 + [20.0]) -> [61]"""
    import statistics
    return [k + 1 for k in range(window, len(losses)) if losses[k] > ratio
            * statistics.median(losses[k - window:k])]


def plot_training(losses: list[float], rates: list[float], title: str):
    """The loss of each step (log scale) with the learning rate on a second axis; returns the figure."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 2.8))
    steps = range(1, len(losses) + 1)
    ax.semilogy(steps, losses, lw=0.8, label="loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (log scale)")
    ax.set_title(title)
    lr_ax = ax.twinx()
    lr_ax.plot(steps, rates, color="tab:orange", lw=1.2, label="learning rate")
    lr_ax.set_ylabel("learning rate", color="tab:orange")
    lr_ax.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
    fig.legend(loc="upper right", bbox_to_anchor=(0.87, 0.87), fontsize=8)
    return fig


def show(model, task, losses: list[float], rates: list[float], make_batch=make_batch):
    """Lesson 12's report of a trained model: greedy accuracy, three examples, the loss and rate curves."""
    import matplotlib.pyplot as plt
    acc, examples = accuracy(model, task, make_batch=make_batch)
    print(f"{task.__name__}: greedy accuracy on 200 new sequences {acc:.1%}, last loss {losses[-1]:.4f}")
    for s, o in examples[:3]:
        print(f"  source {s} -> {o}")
    plot_training(losses, rates, f"training on the {task.__name__} task")
    plt.show()
