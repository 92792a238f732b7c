"""The corpus made ready to train on: one joint BPE over both languages, the splits as token ids."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import solutions
from solutions.tokenization import BPETokenizer
from solutions.translate.config import Config
from solutions.translate.implementation import _use


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
            print("joint BPE: " + (f"{len(merges)} merges, " if merges is not None else "")
                  + f"vocabulary {tokenizer.vocab_size}, {time.time() - t0:.0f} s", flush=True)

    def encode(split):
        return [(tokenizer.encode(s), tokenizer.encode(t)) for s, t in zip(*splits[split])]

    train = [(s, t) for s, t in encode("train")
             if 0 < len(s) <= config.max_sentence_tokens and 0 < len(t) <= config.max_sentence_tokens]
    return PreparedData(tokenizer, train, encode("val"), splits)

