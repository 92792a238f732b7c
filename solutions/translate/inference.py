"""Translating with a trained model (greedy or beam, in batches of similar lengths) and scoring it with
BLEU."""
from __future__ import annotations

import math
import time

import sacrebleu
import torch
from tqdm.auto import tqdm

import solutions
from solutions.tokenization import UNK, BPETokenizer
from solutions.translate.config import Config
from solutions.translate.implementation import _use
from solutions.translate.precision import _autocast


def _max_len(source_length: int, max_output=(1.5, 10)) -> int:
    """Most tokens to generate: ratio * source length + extra (Config.max_output_ratio, max_output_extra).
    Example: 10 -> 25 (captions: a translation is rarely 1.5 times longer than its source);
             the paper's (1.0, 50): 60"""
    ratio, extra = max_output
    return int(ratio * source_length) + extra


def decoding_args(config: Config) -> dict:
    """The decoding settings of a Config, as keyword arguments of translate_batch / evaluate_bleu /
    translate."""
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
    # each source's own limit, as if alone
    return [hyp[:_max_len(len(s), max_output)] for s, hyp in zip(ids, hyps)]


@torch.no_grad()
def translate_batch(model, tokenizer: BPETokenizer, sentences: list[str], method: str = "greedy",
                    beam_size: int = 4, alpha: float = 0.6, batch_tokens: int = 6000, impl=solutions,
                    max_output=(1.5, 10), progress: bool = False) -> list[str]:
    """Translate many sentences: sorted by length into batches of about batch_tokens source tokens
    (little padding), decoded with greedy_decode or beam_search, returned in the input order; with `progress`,
    a bar of the sentences done and its estimate of the time left.

    Example: translate_batch(model, tok, ["Ein Hund läuft.", "Zwei Männer lachen."])
             -> ["A dog runs.", "Two men laugh."]
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


def translate(model, tokenizer: BPETokenizer, sentence: str, method: str = "beam", impl=solutions,
              **kw) -> str:
    """One sentence. Example: translate(model, tok, "Ein Mann schläft.") -> "A man is sleeping." """
    return translate_batch(model, tokenizer, [sentence], method, impl=impl, **kw)[0]


def evaluate_bleu(model, tokenizer: BPETokenizer, src_lines: list[str], ref_lines: list[str],
                  method: str = "greedy", beam_size: int = 4, alpha: float = 0.6, batch_tokens: int = 6000,
                  impl=solutions, return_hypotheses: bool = False, max_output=(1.5, 10),
                  progress: bool = False):
    """sacreBLEU (cased, 13a tokenization, on detokenized text) of the model's translations of src_lines
    against ref_lines, in 0..100; with return_hypotheses, (bleu, translations).

    Example: evaluate_bleu(model, tok, test_de, test_en, "beam") -> 35.1
    """
    if len(src_lines) != len(ref_lines):
        raise ValueError(f"{len(src_lines)} source lines but {len(ref_lines)} references")
    hyps = translate_batch(model, tokenizer, src_lines, method, beam_size, alpha, batch_tokens, impl,
                           max_output, progress)
    bleu = sacrebleu.corpus_bleu(hyps, [ref_lines]).score
    return (bleu, hyps) if return_hypotheses else bleu


def score_test(model, tokenizer, src_lines: list[str], ref_lines: list[str], config: Config,
               seconds: float | None = None, methods=("greedy", "beam"), impl=solutions,
               progress: bool = True, probe: int = 32) -> dict:
    """Decode the test set with each of `methods` and score it with sacreBLEU, all methods together within
    about `seconds` (None: no bound; the course passes the training's own time, so that a one-minute run is
    not followed by minutes of decoding: an undertrained model decodes every sentence to the length limit).

    The first `probe` sentences are decoded by every method and timed, then chunks of the next ones that the
    time left fits at the last chunk's speed; when not all fit `seconds`, only the first n are scored, and
    "note" says so with an estimate of what all would take. Returns {"sentences": n,
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
            out[m]["hypotheses"] += translate_batch(model, tokenizer, lines, m, impl=impl, progress=progress,
                                                    **args)
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
        note = (f"scored the first {n:,} of {total:,} test sentences: all of them would take about "
                f"{estimate:.0f} s of decoding ({' and '.join(methods)}) at this speed, longer than the "
                f"{seconds:.0f} s of training; a longer training decodes faster (it stops at <eos>) and "
                "scores them all")
    out.update(sentences=n, of=total, estimate_seconds=estimate if estimate is not None else spent(),
               references=refs, note=note)
    return out


def bleu_scores(hypotheses: list[str], references: list[str], impl=solutions) -> dict:
    """impl's corpus_bleu beside sacreBLEU's, on the same tokens: both texts split by sacreBLEU's own 13a
    tokenizer, then scored. Returns {"sacrebleu", "corpus_bleu", "no_smoothing", "note"}: sacreBLEU's
    standard score, impl's, sacreBLEU's without smoothing on those tokens, and a sentence on how they differ.

    They are the same number unless some n-gram order has no match at all: sacreBLEU then smooths
    (its default, "exp") where the contract's corpus_bleu, like Papineni et al., gives 0.
    Example: bleu_scores(["A dog runs ."], ["A dog runs ."])
             -> {"sacrebleu": 100.0, "corpus_bleu": 100.0, ...}
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
        note = ("sacreBLEU smooths an n-gram order with no match at all (its default, 'exp'); corpus_bleu "
                f"gives 0 then, as Papineni et al. do: without smoothing sacreBLEU gives {plain:.2f} too")
    else:
        note = (f"corpus_bleu differs from sacreBLEU without smoothing on the same tokens ({plain:.2f}): "
                "check the clipping of n-gram counts, the brevity penalty and max_n")
    return {"sacrebleu": standard, "corpus_bleu": own, "no_smoothing": plain, "note": note}

