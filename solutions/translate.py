"""Train a German-to-English Transformer and translate with it: the code of the final lesson and of
the command line `python -m solutions.translate train --data multi30k --minutes 15 --out runs/x`.

Every function that builds, trains or decodes takes `impl`, the module (or namespace) that supplies
Transformer, make_optimizer, label_smoothed_loss, greedy_decode, beam_search, batch_by_tokens and
make_batch: the reference `solutions` by default, or the learner's own code. A name that `impl`
lacks is taken from `solutions`.

Example: name, splits = load_data("synthetic"); cfg = config_for("cpu")
         data = prepare_data(cfg, splits); model, history = train(cfg, data, minutes=5)
         translate(model, data.tokenizer, "Der Hund schläft.") -> "The dog sleeps."
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import pathlib
import random
import resource
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import sacrebleu
import torch
from tqdm.auto import tqdm

import solutions
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
    norm_first: bool = True     # pre-norm: takes twice the rate; measured 28.4 vs 21.6 BLEU (greedy) after 900
                                # steps against the paper's post-norm (False) at its best rate, 1e-3
    label_smoothing: float = 0.1  # the paper's epsilon_ls
    # data
    bpe_merges: int = 8000      # joint German+English BPE: ~8k symbols cover Multi30k's words in 1-2 pieces
    max_sentence_tokens: int = 100  # training pairs with a longer side are dropped (none in Multi30k)
    # optimization
    max_tokens: int = 1500      # padded tokens per batch (~100 sentences): small batches, many steps on a CPU
    lr_peak: float = 2e-3       # the warmup schedule's top, for pre-norm; post-norm wants 1e-3 (3.6e-3 collapsed)
    warmup_steps: int = 300     # one epoch of Multi30k at 1500 tokens per batch, then 1/sqrt(step) decay
    clip_norm: float = 1.0      # gradient-norm clipping: guards against early spikes (the paper does not clip)
    max_epochs: int = 30        # an upper bound; the time budget usually stops first
    max_steps: int = 0          # 0: no limit; else stop after that many optimizer steps (a budget that no load changes)
    minutes: float = 15.0       # training time budget (TRAIN_MINUTES in the lesson)
    # decoding
    beam_size: int = 4          # the paper's beam
    alpha: float = 0.6          # the paper's length penalty
    eval_batch_tokens: int = 6000  # source tokens per decoding batch: big batches decode fastest
    # run
    device: str = "cpu"         # "cuda" for a GPU (mixed precision on), "cpu" otherwise
    seed: int = 0               # the same seed gives the same batches and initial weights

    @property
    def noam_factor(self) -> float:
        """The factor of noam_lr whose peak (at warmup_steps) is lr_peak:
        lr_peak = factor * d_model^-0.5 * warmup^-0.5. Example: d_model 256, warmup 300, peak 2e-3 -> 0.554"""
        return self.lr_peak * math.sqrt(self.d_model * self.warmup_steps)


def config_for(device: str | torch.device | None = None, **overrides) -> Config:
    """The default Config for a device: CPU (measured: >= 25 BLEU on Multi30k in 15 minutes on 2 cores)
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
        base = dict(device=device)
    return dataclasses.replace(Config(**base), **overrides)


def _use(impl, name: str):
    """impl.name, or solutions.name when impl has none."""
    return getattr(impl, name, None) or getattr(solutions, name)


# ---------------------------------------------------------------- data
@dataclass
class PreparedData:
    """The tokenizer and the splits as (source ids, target ids) pairs; `text` keeps the raw lines."""

    tokenizer: BPETokenizer
    train: list[tuple[list[int], list[int]]]
    val: list[tuple[list[int], list[int]]]
    text: dict = field(repr=False)


def prepare_data(config: Config, splits: dict, tokenizer: BPETokenizer | None = None,
                 progress: bool = True) -> PreparedData:
    """Learn one joint BPE over the German and English training lines (one vocabulary, so the embeddings
    and the output projection can share one matrix), encode train and val, and drop training pairs
    with a side longer than config.max_sentence_tokens.

    Example: prepare_data(config, load_synthetic(100, 10, 10)).train[0] -> ([ids of German], [ids of English])
    """
    de, en = splits["train"]
    if tokenizer is None:
        t0 = time.time()
        tokenizer = BPETokenizer().train(de + en, config.bpe_merges)
        if progress:
            print(f"joint BPE: {len(tokenizer.merges)} merges, vocabulary {tokenizer.vocab_size}, "
                  f"{time.time() - t0:.0f} s", flush=True)

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
                                      norm_first=config.norm_first, tie_weights=True)
    return model.to(config.device)


# ---------------------------------------------------------------- training
def _autocast(device: torch.device):
    """(autocast context, GradScaler or None): bf16 on GPUs that have it, else fp16 with loss scaling;
    full precision on a CPU."""
    if device.type != "cuda":
        return nullcontext(), None
    if torch.cuda.is_bf16_supported():
        return torch.autocast("cuda", dtype=torch.bfloat16), None
    return torch.autocast("cuda", dtype=torch.float16), torch.amp.GradScaler("cuda")


@torch.no_grad()
def validation_loss(model, pairs, config: Config, impl=solutions) -> float:
    """Label-smoothed loss per target token over `pairs`, in eval mode (no dropout)."""
    make_batch, loss_fn = _use(impl, "make_batch"), _use(impl, "label_smoothed_loss")
    device = next(model.parameters()).device
    amp, _ = _autocast(device)
    was_training = model.training
    model.eval()
    total, n_tokens = 0.0, 0
    lengths = [max(len(s), len(t) + 1) for s, t in pairs]
    for idx in _use(impl, "batch_by_tokens")(lengths, 2 * config.max_tokens):  # no gradients: twice the batch
        batch = make_batch([pairs[i][0] for i in idx], [pairs[i][1] for i in idx]).to(device)
        with amp:
            logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (B, Lt, V)
        total += loss_fn(logits, batch.tgt_out, config.label_smoothing).item() * batch.n_tokens
        n_tokens += batch.n_tokens
    model.train(was_training)
    return total / max(n_tokens, 1)


def train(config: Config, data: PreparedData, minutes: float | None = None, model=None, progress: bool = True,
          impl=solutions):
    """Train on data.train until `minutes` (default config.minutes), config.max_epochs or config.max_steps run out;
    validation loss after each epoch. Returns (model, history) with history lists for plotting:
    step_loss, lr, tokens_per_s (one per step), val_loss and val_step (one per epoch), and totals.

    Example: model, history = train(config_for("cpu"), data, minutes=1); history["val_loss"][-1] -> 4.2
    """
    minutes = config.minutes if minutes is None else minutes
    model = model if model is not None else build_model(config, data.tokenizer.vocab_size, impl)
    device = next(model.parameters()).device
    make_batch, loss_fn = _use(impl, "make_batch"), _use(impl, "label_smoothed_loss")
    optimizer, scheduler = _use(impl, "make_optimizer")(model, config.d_model, config.warmup_steps,
                                                        config.noam_factor)
    amp, scaler = _autocast(device)
    lengths = [max(len(s), len(t) + 1) for s, t in data.train]  # +1: <bos>/<eos> on the target side
    batches = _use(impl, "batch_by_tokens")(lengths, config.max_tokens)
    rng = random.Random(config.seed)
    history = {"step_loss": [], "lr": [], "tokens_per_s": [], "val_loss": [], "val_step": [], "epochs": 0.0}
    start, step, n_target_tokens, stop = time.time(), 0, 0, False
    model.train()
    for epoch in range(config.max_epochs):
        rng.shuffle(batches)  # similar lengths within a batch, random order between batches
        bar = tqdm(batches, desc=f"epoch {epoch + 1}", disable=not progress, leave=True, mininterval=2.0)
        for i, idx in enumerate(bar):
            t0 = time.time()
            batch = make_batch([data.train[j][0] for j in idx], [data.train[j][1] for j in idx]).to(device)
            with amp:
                logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (B, Lt, V)
                loss = loss_fn(logits, batch.tgt_out, config.label_smoothing)            # per target token
            optimizer.zero_grad(set_to_none=True)
            if scaler is not None:  # fp16: scale the loss so small gradients do not underflow
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
            else:
                loss.backward()
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
            n_target_tokens += batch.n_tokens
            history["step_loss"].append(loss.item())
            history["lr"].append(lr)
            history["tokens_per_s"].append(batch.n_tokens / max(time.time() - t0, 1e-9))
            elapsed = time.time() - start
            bar.set_postfix(loss=f"{history['step_loss'][-1]:.3f}", lr=f"{lr:.2e}",
                            tok_s=f"{n_target_tokens / elapsed:.0f}", refresh=False)
            if elapsed > 60 * minutes or step == config.max_steps:
                stop = True
                history["epochs"] = epoch + (i + 1) / len(batches)
                break
        else:
            history["epochs"] = epoch + 1.0
        bar.close()
        history["val_loss"].append(validation_loss(model, data.val, config, impl))
        history["val_step"].append(step)
        if progress:
            print(f"epoch {history['epochs']:.2f}: step {step}, val loss {history['val_loss'][-1]:.3f}, "
                  f"{time.time() - start:.0f} s", flush=True)
        if stop:
            break
    model.eval()
    history.update(steps=step, seconds=time.time() - start, target_tokens=n_target_tokens,
                   mean_tokens_per_s=n_target_tokens / max(time.time() - start, 1e-9))
    return model, history


# ---------------------------------------------------------------- checkpoints
def save_checkpoint(path, model, tokenizer: BPETokenizer, config: Config, history: dict | None = None) -> None:
    """One file with the config, the tokenizer (merges and vocabulary) and the weights."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"config": dataclasses.asdict(config),
                "tokenizer": {"merges": [list(m) for m in tokenizer.merges], "itos": tokenizer.itos},
                "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
                "history": history or {}}, path)


def load_checkpoint(path, device: str = "cpu", impl=solutions):
    """(model in eval mode on `device`, tokenizer, config) from save_checkpoint's file; a GPU checkpoint
    loads on a CPU. Example: model, tokenizer, config = load_checkpoint("runs/x/model.pt")"""
    saved = torch.load(path, map_location=device, weights_only=True)
    config = dataclasses.replace(Config(**saved["config"]), device=str(device))
    tokenizer = BPETokenizer()
    tokenizer.merges = [tuple(m) for m in saved["tokenizer"]["merges"]]
    tokenizer.itos = list(saved["tokenizer"]["itos"])
    tokenizer.stoi = {s: i for i, s in enumerate(tokenizer.itos)}
    model = build_model(config, tokenizer.vocab_size, impl)
    model.load_state_dict(saved["model"])
    return model.eval(), tokenizer, config


# ---------------------------------------------------------------- translating and scoring
def _max_len(source_length: int) -> int:
    """Most tokens to generate: a translation is rarely 1.5 times longer than its source. Example: 10 -> 25"""
    return int(1.5 * source_length) + 10


@torch.no_grad()
def translate_batch(model, tokenizer: BPETokenizer, sentences: list[str], method: str = "greedy",
                    beam_size: int = 4, alpha: float = 0.6, batch_tokens: int = 6000, impl=solutions) -> list[str]:
    """Translate many sentences: sorted by length into batches of about batch_tokens source tokens
    (little padding), decoded with greedy_decode or beam_search, returned in the input order.

    Example: translate_batch(model, tok, ["Ein Hund läuft.", "Zwei Männer lachen."]) -> ["A dog runs.", "Two men laugh."]
    """
    if method not in ("greedy", "beam"):
        raise ValueError(f"method must be 'greedy' or 'beam', got {method!r}")
    make_batch = _use(impl, "make_batch")
    device = next(model.parameters()).device
    amp, _ = _autocast(device)
    model.eval()
    ids = [tokenizer.encode(s) or [UNK] for s in sentences]  # an empty line becomes one <unk>
    budget = batch_tokens // (beam_size if method == "beam" else 1)  # a beam multiplies the rows
    out: list[str] = [""] * len(sentences)
    for idx in _use(impl, "batch_by_tokens")([len(s) for s in ids], budget):
        batch = make_batch([ids[i] for i in idx], [[] for _ in idx]).to(device)  # only src and src_mask are used
        with amp:
            if method == "greedy":
                hyps = _use(impl, "greedy_decode")(model, batch.src, batch.src_mask, _max_len(batch.src.size(1)))
            else:
                hyps = _use(impl, "beam_search")(model, batch.src, batch.src_mask, _max_len(batch.src.size(1)),
                                                 beam_size, alpha)
        for i, hyp in zip(idx, hyps):
            out[i] = tokenizer.decode(hyp[:_max_len(len(ids[i]))])  # each source's own limit, as if alone
    return out


def translate(model, tokenizer: BPETokenizer, sentence: str, method: str = "beam", impl=solutions, **kw) -> str:
    """One sentence. Example: translate(model, tok, "Ein Mann schläft.") -> "A man is sleeping." """
    return translate_batch(model, tokenizer, [sentence], method, impl=impl, **kw)[0]


def evaluate_bleu(model, tokenizer: BPETokenizer, src_lines: list[str], ref_lines: list[str],
                  method: str = "greedy", beam_size: int = 4, alpha: float = 0.6, batch_tokens: int = 6000,
                  impl=solutions, return_hypotheses: bool = False):
    """sacreBLEU (cased, 13a tokenization, on detokenized text) of the model's translations of src_lines
    against ref_lines, in 0..100; with return_hypotheses, (bleu, translations).

    Example: evaluate_bleu(model, tok, test_de, test_en, "beam") -> 35.1
    """
    if len(src_lines) != len(ref_lines):
        raise ValueError(f"{len(src_lines)} source lines but {len(ref_lines)} references")
    hyps = translate_batch(model, tokenizer, src_lines, method, beam_size, alpha, batch_tokens, impl)
    bleu = sacrebleu.corpus_bleu(hyps, [ref_lines]).score
    return (bleu, hyps) if return_hypotheses else bleu


# ---------------------------------------------------------------- command line
def peak_memory_mb() -> float:
    """Peak resident memory of this process so far, in MB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def run_training(args) -> dict:
    """The `train` command: load, prepare, train, save, score greedy and beam on the test split."""
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(Config)
                 if f.name != "device" and getattr(args, f.name, None) is not None}
    config = config_for(args.device, **overrides)
    torch.manual_seed(config.seed)
    name, splits = load_data(args.data, synthetic_sizes=(args.synthetic_train, 500, 500))
    print(f"data: {name}, " + ", ".join(f"{k} {len(v[0])}" for k, v in splits.items()), flush=True)
    print(f"config: {config}", flush=True)
    data = prepare_data(config, splits, progress=not args.quiet)
    model, history = train(config, data, progress=not args.quiet)
    out = pathlib.Path(args.out)
    save_checkpoint(out / "model.pt", model, data.tokenizer, config, history)
    test_de, test_en = splits["test"]
    if args.max_test:
        test_de, test_en = test_de[:args.max_test], test_en[:args.max_test]
    results = {"data": name, "config": dataclasses.asdict(config), "epochs": history["epochs"],
               "steps": history["steps"], "train_seconds": history["seconds"],
               "target_tokens_per_s": history["mean_tokens_per_s"], "val_loss": history["val_loss"],
               "test_sentences": len(test_de)}
    for method in ("greedy", "beam"):
        t0 = time.time()
        bleu, hyps = evaluate_bleu(model, data.tokenizer, test_de, test_en, method, config.beam_size, config.alpha,
                                   config.eval_batch_tokens, return_hypotheses=True)
        results[f"{method}_bleu"], results[f"{method}_seconds"] = bleu, time.time() - t0
        (out / f"test.{method}.en").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    results["peak_memory_mb"] = peak_memory_mb()
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    print(f"\ndata {name}: {history['epochs']:.2f} epochs, {history['steps']} steps in {history['seconds']:.0f} s, "
          f"{history['mean_tokens_per_s']:.0f} target tokens/s")
    print(f"test BLEU (sacreBLEU, {len(test_de)} sentences): greedy {results['greedy_bleu']:.2f} "
          f"({results['greedy_seconds']:.0f} s), beam {config.beam_size} {results['beam_bleu']:.2f} "
          f"({results['beam_seconds']:.0f} s)")
    print(f"peak memory {results['peak_memory_mb']:.0f} MB; checkpoint {out / 'model.pt'}")
    return results


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m solutions.translate", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("train", help="train, save a checkpoint, print test BLEU")
    p.add_argument("--data", default="multi30k", help='"multi30k", "synthetic", or a Multi30k mirror (URL or folder)')
    p.add_argument("--out", default="runs/translate", help="folder for model.pt, results.json, test translations")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present); picks config_for(device)")
    p.add_argument("--synthetic-train", type=int, default=20000, help="training pairs of the synthetic corpus")
    p.add_argument("--max-test", type=int, default=0, help="score only the first N test sentences (0: all)")
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads for PyTorch (0: its default, one per core; 1 is faster on a busy machine)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    for f in dataclasses.fields(Config):  # every Config field can be overridden: --d-model 128 --minutes 1
        if f.name != "device":
            kind = type(f.default)
            p.add_argument("--" + f.name.replace("_", "-"), default=None, help=f"default {f.default} (CPU)",
                           type=(lambda v: v.lower() in ("1", "true", "yes")) if kind is bool else kind)
    args = parser.parse_args(argv)
    run_training(args)


if __name__ == "__main__":
    main()
