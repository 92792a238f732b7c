"""The paper's Table 3 at small scale (lesson 15): variants of one base configuration, each trained for the
same number of steps, scored by validation perplexity and greedy sacreBLEU on the test split, one JSON per
run.

    python -m solutions.experiments list
    python -m solutions.experiments run --rows base A --seeds 0 1 --data multi30k --out runs/table3
    python -m solutions.experiments run --rows all --jobs 2 --threads 1 --data ../shared/data/multi30k
    python -m solutions.experiments table --out runs/table3 > table3.md

Rows follow Table 3: (A) heads at constant compute (d_k = d_model / h), (B) smaller d_k, (C) model size,
(D) dropout and label smoothing, (E) learned positions; and (F) the course's own choices: post-norm against
pre-norm, untied against tied embeddings, a constant rate against the warmup schedule. The base row also
measures checkpoint averaging (the last 5 snapshots, `snapshot_steps` apart, against the last weights).
A run whose JSON exists is skipped, so an interrupted table resumes where it stopped.

Example: run_one("D-ls0", seed=0, data="multi30k", steps=300, out="runs/table3") -> {"val_ppl": 9.1, ...}
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import pathlib
import statistics
import time

import torch

import solutions
from solutions.data import load_data
from solutions.translate import Config, config_for, evaluate_bleu, prepare_data, train, validation_loss

#: The base of the small table: the course's CPU model (benchmarks/translate_cpu.md) halved in width and
#: depth, so that a run of 300 steps takes 5 to 10 minutes on one CPU core (benchmarks/table3_cpu.md).
#: d_k = 128 / 4 = 32.
BASE = dict(d_model=128, n_heads=4, n_layers=2, d_ff=512,   # the paper's base: 512, 8, 6, 2048 (d_k 64)
            dropout=0.1, attention_dropout=0.1, label_smoothing=0.1,
            bpe_merges=4000,        # a smaller vocabulary: the output layer is most of a small model's work
            max_tokens=1500, lr_peak=2e-3, warmup_steps=100, clip_norm=1.0,  # 300 steps: a third warms up
            norm_first=True,        # the course's choice; row F-postnorm is the paper's post-norm
            average_last=5,         # the paper averages its last 5 checkpoints: measured on every run
            precision="fp32",       # as recorded (float32 reproduces across CPUs; "auto" is bf16 on some)
            max_epochs=1000, minutes=1e9)  # stopped by max_steps only: the table reproduces on any machine

#: row name -> (group, Config overrides as a function of the base settings). Unlisted values are the base's,
#: as in the paper; changes are relative (half, double) so that a larger base (benchmarks/table3_gpu.sh) keeps
#: the rows.
ROWS = {
    "base": ("base", lambda b: {}),
    "A-h1": ("A", lambda b: dict(n_heads=1)),                              # d_k = d_model: one wide head
    "A-h-half": ("A", lambda b: dict(n_heads=b["n_heads"] // 2)),
    "A-h-double": ("A", lambda b: dict(n_heads=b["n_heads"] * 2)),
    "B-dk-half": ("B", lambda b: dict(d_k=b["d_model"] // b["n_heads"] // 2)),
    "B-dk-quarter": ("B", lambda b: dict(d_k=b["d_model"] // b["n_heads"] // 4)),
    "C-N-half": ("C", lambda b: dict(n_layers=max(1, b["n_layers"] // 2))),
    "C-N-double": ("C", lambda b: dict(n_layers=b["n_layers"] * 2)),
    # h kept: d_k halves too, as in the paper
    "C-d-half": ("C", lambda b: dict(d_model=b["d_model"] // 2)),
    "C-d-double": ("C", lambda b: dict(d_model=b["d_model"] * 2)),
    "C-ff-half": ("C", lambda b: dict(d_ff=b["d_ff"] // 2)),
    "C-ff-double": ("C", lambda b: dict(d_ff=b["d_ff"] * 2)),
    "D-drop0": ("D", lambda b: dict(dropout=0.0, attention_dropout=0.0)),
    "D-ls0": ("D", lambda b: dict(label_smoothing=0.0)),
    "E-learned": ("E", lambda b: dict(positional="learned")),
    "F-postnorm": ("F", lambda b: dict(norm_first=False)),
    "F-untied": ("F", lambda b: dict(tie_embeddings=False)),
    "F-constant": ("F", lambda b: dict(lr_schedule="constant")),
}
GROUPS = {"base": "base", "A": "(A) heads at constant compute", "B": "(B) smaller d_k", "C": "(C) model size",
          "D": "(D) regularization", "E": "(E) positions", "F": "the course's choices"}

#: The paper's Table 3 (newstest2013 dev, English-German, per-wordpiece perplexity, BLEU, parameters x 10^6),
#: the row of the paper that each small row mirrors: the same direction of change from its base (8 heads -> 4
#: is "h-half"). None where the paper has no such row.
PAPER = {
    "base": ("base: N 6, d_model 512, d_ff 2048, h 8, d_k 64, P_drop 0.1, eps_ls 0.1", 4.92, 25.8, 65),
    "A-h1": ("h 1, d_k 512", 5.29, 24.9, None),
    "A-h-half": ("h 4, d_k 128", 5.00, 25.5, None),
    "A-h-double": ("h 16, d_k 32", 4.91, 25.8, None),
    "B-dk-half": ("d_k 32", 5.01, 25.4, 60),
    "B-dk-quarter": ("d_k 16", 5.16, 25.1, 58),
    "C-N-half": ("N 2 (a third)", 6.11, 23.7, 36),
    "C-N-double": ("N 8 (4/3)", 4.88, 25.5, 80),
    "C-d-half": ("d_model 256, d_k 32", 5.75, 24.5, 28),
    "C-d-double": ("d_model 1024, d_k 128", 4.66, 26.0, 168),
    "C-ff-half": ("d_ff 1024", 5.12, 25.4, 53),
    "C-ff-double": ("d_ff 4096", 4.75, 26.2, 90),
    "D-drop0": ("P_drop 0.0", 5.77, 24.6, None),
    "D-ls0": ("eps_ls 0.0", 4.67, 25.3, None),
    "E-learned": ("positional embedding instead of sinusoids", 4.92, 25.7, None),
    "F-postnorm": ("(the paper is post-norm)", None, None, None),
    "F-untied": ("(the paper ties)", None, None, None),
    "F-constant": ("(the paper warms up)", None, None, None),
}


def rows_for(names: list[str]) -> list[str]:
    """Row names from names, groups ("A") or "all".
    Example: rows_for(["base", "D"]) -> ["base", "D-drop0", "D-ls0"]"""
    out = []
    for name in names:
        if name == "all":
            found = list(ROWS)
        elif name in ROWS:
            found = [name]
        else:
            found = [r for r, (group, _) in ROWS.items() if group == name]
        if not found:
            raise ValueError(f"unknown row or group {name!r}; rows: {', '.join(ROWS)}; groups: "
                             f"{', '.join(GROUPS)}")
        out += [r for r in found if r not in out]
    return out


def row_config(row: str, seed: int = 0, steps: int = 300, device: str = "cpu", base: dict | None = None,
               **overrides) -> Config:
    """The Config of one run: the base, the row's change, `steps` optimizer steps, snapshots for averaging
    every steps/50 (the last 5 span the last tenth of training; the paper's, 10 minutes apart, the last
    fifteenth of 12 hours), the seed. Example: row_config("A-h1").n_heads -> 1"""
    base = {**BASE, **(base or {})}
    settings = {**base, **ROWS[row][1](base), **overrides}
    settings.setdefault("snapshot_steps", max(1, steps // 50))
    return config_for(device, **settings, max_steps=steps, seed=seed)


def describe(config: Config, base: Config | None = None) -> str:
    """What a row changes, in the paper's terms. Example: describe(row_config("A-h1")) -> "h 1, d_k 128" """
    c = config
    d_k = c.d_k or c.d_model // c.n_heads
    if base is None:
        return (f"N {c.n_layers}, d_model {c.d_model}, d_ff {c.d_ff}, h {c.n_heads}, d_k {d_k}, P_drop "
                f"{c.dropout:g}, eps_ls {c.label_smoothing:g}, {'pre' if c.norm_first else 'post'}-norm, "
                f"{'tied' if c.tie_embeddings else 'untied'}, {c.positional}, {c.lr_schedule}")
    b, parts = base, []
    b_dk = b.d_k or b.d_model // b.n_heads
    for label, new, old in (("N", c.n_layers, b.n_layers), ("d_model", c.d_model, b.d_model),
                            ("d_ff", c.d_ff, b.d_ff),
                            ("h", c.n_heads, b.n_heads), ("d_k", d_k, b_dk), ("P_drop", c.dropout, b.dropout),
                            ("eps_ls", c.label_smoothing, b.label_smoothing)):
        if new != old:
            parts.append(f"{label} {new:g}")
    if c.norm_first != b.norm_first:
        parts.append("pre-norm" if c.norm_first else "post-norm (the paper's)")
    if c.tie_embeddings != b.tie_embeddings:
        parts.append("untied embeddings and projection" if not c.tie_embeddings else "tied")
    if c.positional != b.positional:
        parts.append(f"{c.positional} positions")
    if c.lr_schedule != b.lr_schedule:
        parts.append(f"{c.lr_schedule} rate {c.lr_peak:g}, no warmup" if c.lr_schedule == "constant"
                     else c.lr_schedule)
    return ", ".join(parts)


def count_parameters(model) -> int:
    """Distinct parameters (a tied matrix counts once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


_PREPARED: dict = {}


def prepare(data: str, config: Config, max_test: int = 0, synthetic_sizes=(2000, 200, 200)):
    """(data name, PreparedData, test sources, test references), prepared once per process and BPE setting."""
    key = (data, config.bpe_merges, config.max_sentence_tokens, max_test, synthetic_sizes)
    if key not in _PREPARED:
        name, splits = load_data(data, synthetic_sizes=synthetic_sizes)
        prepared = prepare_data(config, splits, progress=False)
        test_de, test_en = splits["test"]
        if max_test:
            test_de, test_en = test_de[:max_test], test_en[:max_test]
        _PREPARED[key] = (name, prepared, test_de, test_en)
    return _PREPARED[key]


def perplexity(model, pairs, config: Config, impl=solutions) -> tuple[float, float]:
    """(cross-entropy per target token, its exp) on `pairs`, without label smoothing whatever the run trained
    with, so that rows with and without smoothing compare (the paper's perplexities are per wordpiece)."""
    loss = validation_loss(model, pairs, dataclasses.replace(config, label_smoothing=0.0), impl)
    return loss, math.exp(loss)


def run_one(row: str, seed: int, data: str = "multi30k", steps: int = 300, out=None, max_test: int = 0,
            device: str = "cpu", impl=solutions, progress: bool = False, average_bleu: bool | None = None,
            synthetic_sizes=(2000, 200, 200), position: int | None = None, **overrides) -> dict:
    """Train one row with one seed and score it: validation perplexity and greedy sacreBLEU on the test split,
    of the last weights (the paper's Table 3: no averaging) and of the average of the last 5 snapshots. Writes
    out/<row>.seed<seed>.json when `out` is given. progress: train's bar (at `position`, for runs side by
    side) and the decoding's. Example: run_one("base", 0, "synthetic", steps=20)["bleu"]"""
    config = row_config(row, seed, steps, device, **overrides)
    t0 = time.time()
    name, prepared, test_de, test_en = prepare(data, config, max_test, synthetic_sizes)
    prep_seconds = time.time() - t0
    model, history = train(config, prepared, progress=progress, impl=impl, label=f"{row} seed {seed}: ",
                           position=position)
    averaged = history.pop("averaged_state", None)  # both weights are measured, whichever train kept
    if averaged is not None:
        model.load_state_dict(history.pop("last_state"))  # the last weights: Table 3's numbers
    t1 = time.time()
    base_config = row_config("base", seed, steps, device, **overrides)
    change = describe(config, base_config) if row != "base" else describe(config)
    result = {"row": row, "group": ROWS[row][0], "change": change, "seed": seed, "data": name,
              "steps": history["steps"], "epochs": history["epochs"], "parameters": count_parameters(model),
              "train_seconds": history["seconds"], "threads": torch.get_num_threads(),
              "test_sentences": len(test_de), "config": dataclasses.asdict(config)}
    result["val_loss"], result["val_ppl"] = perplexity(model, prepared.val, config, impl)
    result["bleu"] = evaluate_bleu(model, prepared.tokenizer, test_de, test_en, "greedy",
                                   batch_tokens=config.eval_batch_tokens, impl=impl, progress=progress,
                                   max_output=(config.max_output_ratio, config.max_output_extra))
    if averaged is not None:
        model.load_state_dict(averaged)
        result["averaged_snapshots"] = history.get("averaged")
        result["val_loss_averaged"], result["val_ppl_averaged"] = perplexity(model, prepared.val, config,
                                                                             impl)
        if average_bleu or (average_bleu is None and row == "base"):  # a second decode: base only
            result["bleu_averaged"] = evaluate_bleu(model, prepared.tokenizer, test_de, test_en, "greedy",
                                                    batch_tokens=config.eval_batch_tokens, impl=impl,
                                                    progress=progress,
                                                    max_output=(config.max_output_ratio,
                                                                config.max_output_extra))
    result["eval_seconds"] = time.time() - t1
    # BPE and encoding: once per process, 0 for the runs after the first
    result["prep_seconds"] = prep_seconds
    if out is not None:
        path = pathlib.Path(out) / f"{row}.seed{seed}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return result


def _worker(job):
    """One process of `run --jobs`: its own threads, the runs given to it, one after another (with `progress`,
    a bar each at line `position`, one line per process)."""
    threads, runs, kwargs = job
    torch.set_num_threads(threads)
    done = []
    for row, seed in runs:
        r = run_one(row, seed, **kwargs)
        print(f"{row} seed {seed}: val ppl {r['val_ppl']:.2f}, BLEU {r['bleu']:.2f}"
              + (f" (averaged {r['bleu_averaged']:.2f})" if "bleu_averaged" in r else "")
              + f", {r['train_seconds']:.0f} s + {r['eval_seconds']:.0f} s", flush=True)
        done.append(r)
    return done


def run_table(rows: list[str], seeds: list[int], out, jobs: int = 1, threads: int = 1, **kwargs) -> None:
    """Every (row, seed) not yet in `out`, shared out among `jobs` processes of `threads` threads each, in the
    order of `rows`, all seeds of a row together (a table cut short has its first rows complete, with every
    seed)."""
    out = pathlib.Path(out)
    todo = [(r, s) for r in rows for s in seeds if not (out / f"{r}.seed{s}.json").exists()]
    print(f"{len(todo)} runs to do in {out}", flush=True)
    kwargs["out"] = out
    if jobs <= 1:
        _worker((threads, todo, kwargs))
        return
    import multiprocessing

    shares = [todo[i::jobs] for i in range(jobs)]
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        pool.map(_worker, [(threads, share, {**kwargs, "position": i} if kwargs.get("progress") else kwargs)
                           for i, share in enumerate(shares)], chunksize=1)


def load_results(folder) -> list[dict]:
    """Every run's JSON in `folder`, in the order of ROWS and seeds."""
    runs = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(pathlib.Path(folder).glob("*.json"))]
    order = {r: i for i, r in enumerate(ROWS)}
    return sorted(runs, key=lambda r: (order.get(r["row"], len(order)), r["seed"]))


def summarize(runs: list[dict]) -> list[dict]:
    """One dict per row: mean and half the range (min to max) of val_ppl, bleu and the averaging gain over
    seeds."""
    by_row: dict = {}
    for r in runs:
        by_row.setdefault(r["row"], []).append(r)
    out = []
    for row, rs in by_row.items():
        def stat(key, rs=rs):
            values = [r[key] for r in rs if r.get(key) is not None]
            if not values:
                return None, None
            return statistics.fmean(values), (max(values) - min(values)) / 2

        gains = [r["bleu_averaged"] - r["bleu"] for r in rs if "bleu_averaged" in r]
        ppl_gains = [r["val_ppl_averaged"] - r["val_ppl"] for r in rs if "val_ppl_averaged" in r]
        s = {"row": row, "group": rs[0]["group"], "change": rs[0]["change"],
             "seeds": sorted(r["seed"] for r in rs),
             "steps": rs[0]["steps"], "parameters": rs[0]["parameters"],
             "seconds": statistics.fmean(r["train_seconds"] + r["eval_seconds"] for r in rs)}
        s["val_ppl"], s["val_ppl_spread"] = stat("val_ppl")
        s["bleu"], s["bleu_spread"] = stat("bleu")
        s["bleu_averaged"], _ = stat("bleu_averaged")
        s["averaging_gain"] = statistics.fmean(gains) if gains else None
        s["averaging_ppl_change"] = statistics.fmean(ppl_gains) if ppl_gains else None
        out.append(s)
    return out


def markdown_table(runs: list[dict]) -> str:
    """The small table beside the paper's: a row per variant, mean ± half the range over seeds."""
    lines = ["| | change from the base | params | steps | seeds | val PPL | test BLEU (greedy) | BLEU, "
             "last-5 average | the paper's row | paper PPL | paper BLEU |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summarize(runs):
        label, ppl, bleu, _ = PAPER.get(s["row"], ("", None, None, None))
        avg = (f"{s['bleu_averaged']:.2f} ({s['averaging_gain']:+.2f})" if s["bleu_averaged"] is not None
               else "")
        lines.append(f"| {s['row']} | {s['change']} | {s['parameters'] / 1e6:.2f}M | {s['steps']} | "
                     f"{len(s['seeds'])} | {s['val_ppl']:.2f} ± {s['val_ppl_spread']:.2f} | {s['bleu']:.2f} "
                     f"± {s['bleu_spread']:.2f} | {avg} | {label} | {'' if ppl is None else f'{ppl:.2f}'} | "
                     f"{'' if bleu is None else f'{bleu:.1f}'} |")
    return "\n".join(lines)


def _direction(diff: float, spread: float, lower_is_better: bool) -> str:
    if abs(diff) <= spread:
        return "within the seeds' spread"
    return "better" if (diff < 0) == lower_is_better else "worse"


def verdict(runs: list[dict], row: str) -> str:
    """One sentence on a row against the base: each metric's change, whether it is larger than the seeds'
    spread (the row's ± plus the base's ±), and the paper's direction for the same change (one run each: a
    change of 0.01 in perplexity or 0.1 BLEU counts as about the same).
    Example: verdict(runs, "A-h1")
             -> "h 1, d_k 128: val PPL 52.10 against 48.53 (+3.57, ± 1.85: worse); ..." """
    summary = {s["row"]: s for s in summarize(runs)}
    if row not in summary or "base" not in summary:
        return f"{row}: not recorded"
    r, b = summary[row], summary["base"]
    _, paper_ppl, paper_bleu, _ = PAPER.get(row, (None, None, None, None))
    _, base_ppl, base_bleu, _ = PAPER["base"]
    parts = []
    for key, label, lower, paper, paper_base, tol in (("val_ppl", "val PPL", True, paper_ppl, base_ppl,
                                                       0.015),
                                                      ("bleu", "BLEU", False, paper_bleu, base_bleu, 0.15)):
        diff, spread = r[key] - b[key], r[f"{key}_spread"] + b[f"{key}_spread"]
        here = _direction(diff, spread, lower)
        text = f"{label} {r[key]:.2f} against {b[key]:.2f} ({diff:+.2f}, spread ± {spread:.2f}: {here}"
        if paper is not None:
            theirs = _direction(paper - paper_base, tol, lower).replace("within the seeds' spread",
                                                                        "about the same")
            text += f"; the paper: {theirs}"
        parts.append(text + ")")
    return f"{r['change']}: " + "; ".join(parts)


def plot_group(runs: list[dict], group: str, size=(9, 2.8)):
    """One figure for a group of rows: validation perplexity (left, lower is better) and test BLEU (right,
    higher is better), one bar per row with the base first, each seed a dot on its bar, the base's mean as a
    dashed line."""
    import matplotlib.pyplot as plt

    summary = {s["row"]: s for s in summarize(runs)}
    rows = [r for r in ROWS if r in summary and (r == "base" or ROWS[r][0] == group)]
    fig, axes = plt.subplots(1, 2, figsize=size, layout="constrained")
    for ax, key, label in ((axes[0], "val_ppl", "validation perplexity (lower is better)"),
                           (axes[1], "bleu", "test BLEU, greedy (higher is better)")):
        means = [summary[r][key] for r in rows]
        ax.bar(range(len(rows)), means, color=["0.6"] + ["C0"] * (len(rows) - 1))
        for i, r in enumerate(rows):
            seeds = [run[key] for run in runs if run["row"] == r]
            ax.plot([i] * len(seeds), seeds, "k.", markersize=6)
        if "base" in summary:
            ax.axhline(summary["base"][key], color="0.3", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(rows)), [summary[r]["change"] if r != "base" else "base" for r in rows],
                      rotation=20, ha="right", fontsize=7)
        ax.set_title(label, fontsize=9)
        low, high = min(min(run[key] for run in runs if run["row"] in rows), min(means)), max(means)
        ax.set_ylim(max(0.0, low - 0.25 * (high - low + 1e-9)), high + 0.25 * (high - low + 1e-9))
    fig.suptitle(GROUPS.get(group, group), fontsize=10)
    return fig


PROG = "python -m solutions.experiments"


def build_parser() -> argparse.ArgumentParser:
    """The command line: list, run, table; every option's help ends with its true default (solutions.cli)."""
    from solutions.cli import Parser, device_name, number

    parser = Parser(prog=PROG, description=__doc__.split("\n\n")[0],
                    epilog=f"run's defaults: all {len(ROWS)} rows x seeds 0 and 1, 300 steps each, multi30k, "
                           "cpu, one process of one thread, into runs/table3 (`run --help` for each)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="{list,run,table}")
    commands.add_parser("list", help="the rows and what each changes",
                        description="The rows and what each changes.")
    p = commands.add_parser("run", help="train and score rows, one JSON per run (existing ones are skipped)",
                            description="Train and score rows, one JSON per run (a run whose JSON exists is "
                                        "skipped).")
    p.add_argument("--rows", nargs="+", default=["all"], metavar="ROW",
                   help=f"row names, groups ({' '.join(g for g in GROUPS if g != 'base')}) or all (default: "
                        "all)")
    p.add_argument("--seeds", nargs="+", type=number(int, 0), default=[0, 1], metavar="SEED",
                   help="seeds to run each row with (default: 0 1)")
    p.add_argument("--steps", type=number(int, 1), default=300, metavar="N",
                   help="optimizer steps per run, the same for every row (default: 300)")
    p.add_argument("--data", default="multi30k",
                   help='"multi30k", "synthetic", or a Multi30k mirror (URL or folder) (default: multi30k)')
    p.add_argument("--out", default="runs/table3", help="folder for the JSON files (default: runs/table3)")
    p.add_argument("--device", type=device_name, default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    p.add_argument("--jobs", type=number(int, 1), default=1, metavar="N",
                   help="processes running rows side by side, a progress line each (default: 1)")
    p.add_argument("--threads", type=number(int, 1), default=1, metavar="N",
                   help="PyTorch threads per process "
                   "(default: 1)")
    p.add_argument("--max-test", type=number(int, 0), default=0, metavar="N",
                   help="score only the first N test sentences (0: all) (default: 0)")
    p.add_argument("--base", default="{}", metavar="JSON",
                   help="Config overrides for every row, e.g. '{\"d_model\": 512}'; the base: "
                        + ", ".join(f"{k} {v}" for k, v in BASE.items()
                                    if k in ("d_model", "n_heads", "n_layers",
                                                                              "d_ff", "bpe_merges"))
                        + " (default: {})")
    p.add_argument("--quiet", action="store_true", help="no progress bars (default: false)")
    t = commands.add_parser("table", help="the markdown table of the runs in --out",
                            description="The markdown table of the runs in --out.")
    t.add_argument("--out", default="runs/table3", help="the folder that `run` wrote (default: runs/table3)")
    return parser


def _base_overrides(text: str) -> dict:
    """--base's JSON, checked: an object of Config fields whose values make a Config that can run."""
    from solutions.cli import UsageError
    from solutions.translate import config_problems

    try:
        base = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"--base: not JSON ({e.msg} at character {e.pos}); give an object, e.g. "
                         "'{\"d_model\": 512}'") from None
    if not isinstance(base, dict):
        raise UsageError(f"--base: expected a JSON object of Config fields, got {type(base).__name__}")
    known = {f.name for f in dataclasses.fields(Config)} - {"device", "max_steps", "seed"}
    unknown = sorted(set(base) - known)
    if unknown:
        raise UsageError(f"--base: {', '.join(map(repr, unknown))} not a Config field this command lets you "
                         f"set; fields: {', '.join(sorted(known))}")
    try:
        config = row_config("base", base=base)
    except TypeError as e:
        raise UsageError(f"--base: {e}") from None
    problems = config_problems(config)
    if problems:
        raise UsageError("--base: " + "; ".join(problems))
    return base


def _command(argv) -> None:
    from solutions.cli import UsageError, check_device

    args = build_parser().parse_args(argv)
    if args.command == "list":
        base = row_config("base")
        for row, (group, _) in ROWS.items():
            print(f"{row:13s} {group:5s} "
                  f"{describe(row_config(row), base) if row != 'base' else describe(base)}")
    elif args.command == "table":
        folder = pathlib.Path(args.out)
        if not folder.is_dir():
            raise UsageError(f"--out {folder}: no such folder; give the folder that `{PROG} run --out` wrote")
        runs = load_results(folder)
        if not runs:
            raise UsageError(f"--out {folder}: no run results (*.json) in it; run `{PROG} run --out "
                             f"{folder}` first")
        print(markdown_table(runs))
    else:
        check_device(args.device)
        base = _base_overrides(args.base)
        try:
            rows = rows_for(args.rows)
        except ValueError as e:
            raise UsageError(f"--rows: {e}") from None
        run_table(rows, args.seeds, args.out, args.jobs, args.threads, data=args.data, steps=args.steps,
                  device=args.device, max_test=args.max_test, base=base, progress=not args.quiet)
        print(markdown_table(load_results(args.out)))


def main(argv=None) -> None:
    """The command line; a bad input is one line on stderr and exit status 2 (solutions.cli)."""
    from solutions import cli

    cli.run(PROG, _command, argv)


if __name__ == "__main__":
    main()
