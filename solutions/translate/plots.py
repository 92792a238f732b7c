"""What the model attends to: the attention weights of one translation (attention_maps) and their figure."""
from __future__ import annotations

import torch

import solutions
from solutions.tokenization import UNK
from solutions.translate.implementation import _use
from solutions.translate.inference import _decode_ids


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
    tgt_ids = _decode_ids(model, [src_ids], method, beam_size, alpha, decoding.get("max_output", (1.5, 10)),
                          impl)[0]
    device = next(model.parameters()).device
    src = torch.tensor([src_ids], device=device)                            # (1, Ls)
    tgt_in = torch.tensor([[solutions.BOS] + tgt_ids], device=device)      # (1, Lt)
    # fills attn_weights
    model(src, tgt_in, _use(impl, "padding_mask")(src), _use(impl, "target_mask")(tgt_in))

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
    fig, axes = plt.subplots(n_layers, n_heads, figsize=(size * n_heads + 1, size * n_layers + 0.8),
                             squeeze=False, layout="constrained")
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

