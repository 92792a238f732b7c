"""Given, not for you to write: lesson 13's picture of a beam search. A `Recorder` wraps a model and writes
down every prefix that the search asks `decode` to extend; `replay` scores those prefixes and their one-token
extensions again, step by step; `print_steps` and `plot_trace` show the result.

It reads only what the search asked the model, so it draws any beam search that keeps the contract of
`beam_search` (lesson 13), the learner's or the course's. It does not handle a batch: one source at a time.

Example: recorder = Recorder(model)
         answer = beam_search(recorder, src, padding_mask(src), 8, beam_size=3)[0]
         steps, logp = replay(model, src[0].tolist(), recorder.prefixes, beam_size=3)
         steps[0] -> (the open hypotheses after 1 token, best first; those finished at step 1; whether the
                      search went on to extend them), each hypothesis a tuple of ids from <bos>
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .masks import causal_mask, padding_mask
from .tokenization import BOS, EOS


class Recorder(torch.nn.Module):
    """The model's encode/decode/generator, passed through; keeps every prefix that decode is asked to
    extend."""

    def __init__(self, model):
        super().__init__()
        self.model, self.generator, self.prefixes = model, model.generator, []

    def encode(self, src, src_mask):
        return self.model.encode(src, src_mask)

    def decode(self, tgt_in, memory, src_mask, tgt_mask):
        self.prefixes += [tuple(row) for row in tgt_in.tolist()]          # (k, t): k prefixes of t tokens
        return self.model.decode(tgt_in, memory, src_mask, tgt_mask)


@torch.no_grad()
def next_log_probs(model, src_ids: list[int], prefixes: list[list[int]]) -> torch.Tensor:
    """log p(next token | prefix, source) for equal-length prefixes, each starting with <bos>: (N, V)."""
    src = torch.tensor([src_ids])                                          # (1, L_s)
    src_mask = padding_mask(src)                                           # (1, 1, 1, L_s)
    memory = model.encode(src, src_mask)                                   # (1, L_s, d_model)
    ys = torch.tensor(prefixes)                                            # (N, t)
    states = model.decode(ys, memory.expand(len(prefixes), -1, -1), src_mask, causal_mask(ys.size(1)))
    return F.log_softmax(model.generator(states[:, -1]), dim=-1)           # (N, V): the last position only


def replay(model, src_ids: list[int], prefixes: list[tuple], beam_size: int):
    """The search's steps from the prefixes it extended: a list, per step t, of (the open hypotheses after t
    tokens, best first; the (log p, hypothesis) that finished at step t and would enter the beam; whether the
    search went on to extend the open ones), and {hypothesis: log p}. Hypotheses are tuples of ids starting
    with <bos>."""
    logp = {(BOS,): 0.0}

    def prefix_logp(p):
        if p not in logp:
            logp[p] = prefix_logp(p[:-1]) + next_log_probs(model, src_ids, [list(p[:-1])])[0, p[-1]].item()
        return logp[p]

    steps = []
    for t in sorted({len(p) for p in prefixes}):   # prefixes of length t hold t - 1 generated tokens
        extended = sorted({p for p in prefixes if len(p) == t})
        log_probs = next_log_probs(model, src_ids, [list(p) for p in extended])          # (k, V)
        cands = sorted(((prefix_logp(p) + log_probs[i, v].item(), p + (v,)) for i, p in enumerate(extended)
                        for v in range(log_probs.size(-1))), reverse=True)
        # the last one kept open
        kth_open = [s for s, h in cands if h[-1] != EOS][beam_size - 1]
        finished = [(s, h) for s, h in cands if h[-1] == EOS and s > kth_open]
        recorded_next = sorted({p for p in prefixes if len(p) == t + 1})
        for s, h in cands:
            logp.setdefault(h, s)
        # none: the search stopped
        opens = recorded_next or [h for s, h in cands if h[-1] != EOS][:beam_size]
        steps.append((sorted(opens, key=lambda h: -prefix_logp(h)), finished, bool(recorded_next)))
    return steps, logp


def print_steps(steps, logp, answer, length_penalty, alpha: float, words) -> None:
    """One line per step: the open hypotheses with their log p, then those finished, with their score."""
    for t, (opens, finished, extended) in enumerate(steps, start=1):
        line = " | ".join(f"{words(h[1:])} {logp[h]:.2f}" for h in opens)
        print(f"step {t}  open{'' if extended else ' (not extended)'}: {line}")
        for s, h in finished:
            print(f"        finished: {words(h[1:-1])} <eos>   log p {s:.2f}   "
                  f"score {s / length_penalty(t, alpha):.3f}")
    print("answer:", words(answer))


def plot_trace(steps, logp, answer, beam_size: int, alpha: float, length_penalty, vocab, title: str):
    """The search as a tree: column t the hypotheses after t tokens, the finished ones below the dashed line,
    the answer's path in green, the open hypotheses never extended (the search stopped) dashed."""
    import matplotlib.pyplot as plt

    answer_path = {(BOS,) + tuple(answer[:i]) for i in range(len(answer) + 1)} | {(BOS,) + tuple(answer)
                                                                                  + (EOS,)}
    place, dropped = {(BOS,): (0, 0)}, set()
    for t, (opens, finished, extended) in enumerate(steps, start=1):
        for row, h in enumerate(opens):
            place[h] = (t, row)
            if not extended:
                dropped.add(h)
        for row, (_, h) in enumerate(finished):
            place[h] = (t, beam_size + 0.4 + row)
    fig, ax = plt.subplots(figsize=(11, 4.2))
    for h, (x, y) in place.items():
        good = h in answer_path
        if len(h) > 1 and h[:-1] in place:
            px, py = place[h[:-1]]
            ax.plot([px, x], [py, y], color="tab:green" if good else "lightgray", lw=2.5 if good else 1,
                    zorder=1)
        if h == (BOS,):
            label, face = "<bos>", "white"
        elif h[-1] == EOS:
            label, face = (f"<eos>\n{logp[h]:.2f} / lp = "
                           f"{logp[h] / length_penalty(len(h) - 1, alpha):.2f}"), "mistyrose"
        else:
            label, face = f"{vocab[h[-1]]}\n{logp[h]:.2f}", "honeydew" if good else "white"
        ax.text(x, y, label, ha="center", va="center", fontsize=8, zorder=2,
                color="gray" if h in dropped else "black",
                bbox=dict(boxstyle="round", facecolor=face, edgecolor="tab:green" if good else "gray",
                          linestyle="--" if h in dropped else "-"))
    ax.axhline(beam_size - 0.3, color="gray", linestyle="--", lw=0.8)
    ax.text(-0.45, beam_size - 0.4, "open (dashed: never extended, the search stopped)", fontsize=8,
            color="gray")
    ax.text(-0.45, beam_size - 0.15, "finished, set aside", fontsize=8, color="gray", va="top")
    ax.set_xlim(-0.5, len(steps) + 0.5)
    ax.set_ylim(beam_size + 0.4 + max(1, max(len(f) for _, f, _ in steps)) - 0.5, -0.6)
    ax.set_xticks(range(len(steps) + 1), ["start"] + [f"step {t}" for t in range(1, len(steps) + 1)])
    ax.set_yticks([])
    ax.set_title(title)
    ax.spines[["left", "right", "top"]].set_visible(False)
    plt.tight_layout()
    return fig
