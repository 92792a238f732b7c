"""Lessons 01-13 solved with code written apart from `solutions/`, as a learner might: the released stubs
with each `# YOUR CODE HERE / raise NotImplementedError()` replaced by a body below. The choices differ
from the reference where a learner's would: a learn_bpe that recounts every pair at each merge,
the vocabulary in sorted order, masks built with indexing, LayerNorm by hand, a make_batch that calls
shift_right, decoders that take one source at a time (the Annotated Transformer's way), BLEU from
Counter intersections.

Every name earns full points from the checks (tests/test_learner.py asserts it), so the final lesson
trains, decodes and scores with this code when it is pointed at these lessons.

    python -m tests.submissions.independent OUT_DIR   # writes the 13 solved lessons
"""
from __future__ import annotations

import pathlib
import re
import sys
import textwrap

import nbformat

from autograder.notebooks import lesson_paths

STUB = re.compile(r"^([ \t]*)# YOUR CODE HERE\n[ \t]*raise NotImplementedError\(\)", re.M)

# (lesson stem, the stub cell's first name) -> one body per stub in the cell, in order
BODIES: dict[tuple[str, str], list[str]] = {
    ("01_tokenization", "get_pair_stats"): ['''
        pairs = Counter()
        for word, freq in vocab.items():
            for i in range(len(word) - 1):
                pairs[word[i], word[i + 1]] += freq
        return pairs'''],
    ("01_tokenization", "merge_pair"): ['''
        merged, skip = [], False
        for i, symbol in enumerate(symbols):
            if skip:
                skip = False
            elif i + 1 < len(symbols) and symbol == pair[0] and symbols[i + 1] == pair[1]:
                merged.append(symbol + symbols[i + 1])
                skip = True
            else:
                merged.append(symbol)
        return tuple(merged)'''],
    ("01_tokenization", "learn_bpe"): ['''
        words = Counter()
        for line in corpus:
            for w in line.strip("\\r\\n ").split(" "):
                if w:
                    words[w] += 1
        vocab = {word_to_symbols(w): n for w, n in words.items()}
        merges = []
        for _ in range(num_merges):          # every pair recounted at each merge: simple, slow on big corpora
            stats = get_pair_stats(vocab)
            if not stats:
                break
            best = max(stats, key=lambda p: (stats[p], p))
            if stats[best] < min_frequency:
                break
            merges.append(best)
            vocab = {merge_pair(symbols, best): n for symbols, n in vocab.items()}
        return merges'''],
    ("01_tokenization", "apply_bpe"): ['''
        rank = merge_ranks(merges)
        symbols = list(word_to_symbols(word))
        while True:
            present = [(rank[(a, b)], (a, b)) for a, b in zip(symbols, symbols[1:]) if (a, b) in rank]
            if not present:
                return symbols
            symbols = list(merge_pair(tuple(symbols), min(present)[1]))'''],
    ("01_tokenization", "BPETokenizer"): ['''
        lines = [" ".join(line.split()) for line in corpus]
        self.merges = learn_bpe(lines, num_merges, min_frequency)
        pieces = set()
        for line in lines:
            for ch in line.replace(" ", ""):
                pieces.add(ch)
                pieces.add(ch + END)
        pieces.update(a + b for a, b in self.merges)
        self.itos = list(SPECIALS) + sorted(pieces - set(SPECIALS))
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        return self''', '''
        return [self.stoi[s] if s in self.stoi else UNK for s in self.tokenize(text)]''', '''
        out = []
        for i in ids:
            i = int(i)
            if i in (PAD, BOS, EOS):
                continue
            out.append(self.itos[i] if 0 <= i < len(self.itos) else "<unk>")
        return " ".join("".join(out).split(END)).strip()'''],
    ("01_tokenization", "pad_sequences"): ['''
        out = torch.full((len(seqs), max(len(s) for s in seqs)), pad_id, dtype=torch.long)
        for row, s in enumerate(seqs):
            if s:
                out[row, :len(s)] = torch.tensor(s, dtype=torch.long)
        return out'''],
    ("01_tokenization", "TokenEmbedding"): ['''
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        self.scale = math.sqrt(d_model)''', '''
        return self.scale * self.embedding(ids)'''],
    ("02_positional_encoding", "sinusoidal_encoding"): ['''
        position = torch.arange(max_len).float()[:, None]
        denominator = torch.pow(10000.0, torch.arange(0, d_model, 2).float() / d_model)
        table = torch.empty(max_len, d_model)
        table[:, 0::2] = torch.sin(position / denominator)
        table[:, 1::2] = torch.cos(position / denominator)
        return table'''],
    ("02_positional_encoding", "PositionalEncoding"): ['''
        self.drop = nn.Dropout(p=dropout)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model))''', '''
        return self.drop(x + self.pe[None, :x.size(1), :].to(x.dtype))'''],
    ("03_attention", "softmax"): ['''
        e = torch.exp(x - x.max(dim=dim, keepdim=True).values)
        return e / e.sum(dim=dim, keepdim=True)'''],
    ("03_attention", "scaled_dot_product_attention"): ['''
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(k.size(-1)))
        if mask is not None:
            scores = scores.masked_fill(mask.logical_not(), torch.finfo(scores.dtype).min)
        p = softmax(scores, dim=-1)
        if dropout is not None:
            p = dropout(p)
        return torch.matmul(p, v), p'''],
    ("04_multi_head_attention", "split_heads"): ['''
        return x.view(B, L, n_heads, d_model // n_heads).permute(0, 2, 1, 3)'''],
    ("04_multi_head_attention", "merge_heads"): ['''
        B, h, L, d_k = x.shape
        return x.permute(0, 2, 1, 3).contiguous().view(B, L, h * d_k)'''],
    ("04_multi_head_attention", "MultiHeadAttention"): ['''
        self.heads = n_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))
        self.attn_dropout = nn.Dropout(dropout)
        self.attn_weights = None''', '''
        q, k, v = (split_heads(w(t), self.heads) for w, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        out, self.attn_weights = scaled_dot_product_attention(q, k, v, mask, self.attn_dropout)
        return self.w_o(merge_heads(out))'''],  # noqa: E501  (a submission's code, graded as written)
    ("05_masks", "padding_mask"): ['''
        return (ids != pad_id)[:, None, None, :]'''],
    ("05_masks", "causal_mask"): ['''
        rows = torch.arange(size, device=device)
        return (rows[None, :] <= rows[:, None])[None, None]'''],
    ("05_masks", "target_mask"): ['''
        return padding_mask(tgt_ids, pad_id) & causal_mask(tgt_ids.size(1), tgt_ids.device)'''],
    ("06_feed_forward", "PositionwiseFeedForward"): ['''
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)''', '''
        return self.w_2(self.dropout(self.w_1(x).clamp(min=0)))'''],
    ("07_residual_layer_norm", "LayerNorm"): ['''
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))''', '''
        centred = x - x.mean(-1, keepdim=True)
        var = (centred * centred).mean(-1, keepdim=True)
        return self.weight * centred / torch.sqrt(var + self.eps) + self.bias'''],
    ("07_residual_layer_norm", "SublayerConnection"): ['''
        self.norm = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.pre = norm_first''', '''
        if self.pre:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))'''],
    ("08_encoder", "EncoderLayer"): ['''
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList(SublayerConnection(d_model, dropout, norm_first) for _ in range(2))''', '''
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, src_mask))
        return self.sublayers[1](x, self.feed_forward)'''],  # noqa: E501  (a submission's code, graded as written)
    ("08_encoder", "Encoder"): ['''
        self.layers = nn.ModuleList(EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first)'''
        ''' for _ in range(n_layers))
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()''', '''
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.norm(x)'''],
    ("09_decoder", "DecoderLayer"): ['''
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList(SublayerConnection(d_model, dropout, norm_first) for _ in range(3))''', '''
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, tgt_mask))
        x = self.sublayers[1](x, lambda y: self.cross_attn(y, memory, memory, src_mask))
        return self.sublayers[2](x, self.feed_forward)'''],  # noqa: E501  (a submission's code, graded as written)
    ("09_decoder", "Decoder"): ['''
        self.layers = nn.ModuleList(DecoderLayer(d_model, n_heads, d_ff, dropout, norm_first)'''
        ''' for _ in range(n_layers))
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()''', '''
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.norm(x)'''],
    ("10_output_projection", "Transformer"): ['''
        self.src_embed = TokenEmbedding(src_vocab_size, d_model, PAD)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model, PAD)
        self.positional = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(d_model, n_heads, d_ff, n_layers, dropout, norm_first)
        self.decoder = Decoder(d_model, n_heads, d_ff, n_layers, dropout, norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        if tie_weights:                  # tied first: the shared matrix is then initialized once
            self.generator.weight = self.tgt_embed.embedding.weight
            if src_vocab_size == tgt_vocab_size:
                self.src_embed.embedding.weight = self.generator.weight
        self._reset_parameters(d_model)''', '''
        return self.encoder(self.positional(self.src_embed(src)), src_mask)''', '''
        return self.decoder(self.positional(self.tgt_embed(tgt_in)), memory, src_mask, tgt_mask)''', '''
        return self.generator(self.decode(tgt_in, self.encode(src, src_mask), src_mask, tgt_mask))'''],
    ("11_label_smoothing", "label_smoothed_loss"): ['''
        V = logits.size(-1)
        logp = torch.log_softmax(logits.float(), dim=-1).reshape(-1, V)   # (N, V)
        target = target.reshape(-1)
        real = target != ignore_index
        if not real.any():
            return logits.sum() * 0.0
        logp, target = logp[real], target[real]
        gold = logp.gather(1, target[:, None]).squeeze(1)                 # log p(target)
        others = (logp.sum(1) - gold) / (V - 1)                          # mean log p of the other V - 1
        return -((1 - epsilon) * gold + epsilon * others).mean()'''],
    ("12_training", "shift_right"): ['''
        out = torch.empty_like(tgt)
        out[:, 0] = bos_id
        out[:, 1:] = tgt[:, :-1]
        return out'''],
    ("12_training", "make_batch"): ['''
        tgt_out = pad_sequences([list(t) + [eos_id] for t in tgt_seqs], pad_id)   # (B, Lt): y <eos>
        tgt_in = shift_right(tgt_out, bos_id, pad_id)                            # (B, Lt): <bos> y <eos>...
        for row, t in enumerate(tgt_seqs):
            tgt_in[row, len(t) + 1:] = pad_id    # a shorter target's <eos> moved into its padding: blank it
        src = pad_sequences(src_seqs, pad_id)
        return Batch(src=src, tgt_in=tgt_in, tgt_out=tgt_out, src_mask=padding_mask(src, pad_id),
                     tgt_mask=target_mask(tgt_in, pad_id), n_tokens=int(tgt_out.ne(pad_id).sum()))'''],
    ("12_training", "batch_by_tokens"): ['''
        batches, batch = [], []
        for i in sorted(range(len(lengths)), key=lengths.__getitem__):
            if batch and lengths[i] * (len(batch) + 1) > max_tokens:   # sorted: the new one is the longest
                batches.append(batch)
                batch = []
            batch.append(i)
        return batches + ([batch] if batch else [])'''],
    ("12_training", "noam_lr"): ['''
        s = step if step > 0 else 1
        return factor * min(s ** -0.5, s / warmup_steps ** 1.5) / d_model ** 0.5'''],
    ("12_training", "make_optimizer"): ['''
        opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda n: noam_lr(n + 1, d_model, warmup_steps,'''
        ''' factor))'''],
    ("13_decoding", "greedy_decode"): ['''
        memory = model.encode(src, src_mask)
        answers = []
        for b in range(src.size(0)):                # one source at a time, as the Annotated Transformer does
            ys = torch.tensor([[bos_id]], device=src.device)
            for _ in range(max_len):
                out = model.decode(ys, memory[b:b + 1], src_mask[b:b + 1], causal_mask(ys.size(1), src.device))
                word = model.generator(out[:, -1]).argmax(-1).item()
                if word == eos_id:
                    break
                ys = torch.cat([ys, torch.tensor([[word]], device=src.device)], dim=1)
            answers.append(ys[0, 1:].tolist())
        return answers'''],  # noqa: E501  (a submission's code, graded as written)
    ("13_decoding", "length_penalty"): ['''
        return math.pow((5.0 + length) / 6.0, alpha)'''],
    ("13_decoding", "beam_search"): ['''
        memory = model.encode(src, src_mask)
        answers = []
        for b in range(src.size(0)):
            hyps = [([], 0.0)]                          # open hypotheses: (tokens, log p)
            best, best_score = [], -math.inf
            for t in range(1, max_len + 1):
                n = len(hyps)
                ys = torch.tensor([[bos_id] + toks for toks, _ in hyps], device=src.device)
                out = model.decode(ys, memory[b:b + 1].expand(n, -1, -1), src_mask[b:b + 1].expand(n, -1, -1, -1),
                                   causal_mask(t, src.device))
                logp = F.log_softmax(model.generator(out[:, -1]).float(), dim=-1)   # (n, V)
                V = logp.size(-1)
                totals = (torch.tensor([s for _, s in hyps], device=src.device)[:, None] + logp).view(-1)
                values, indices = totals.topk(min(n + beam_size, totals.numel()))  # at most n are <eos>
                opened = []
                for value, index in zip(values.tolist(), indices.tolist()):
                    if value == -math.inf:
                        break
                    parent, word = divmod(index, V)
                    if word == eos_id:
                        if value / length_penalty(t, alpha) > best_score:
                            best, best_score = hyps[parent][0], value / length_penalty(t, alpha)
                    else:
                        opened.append((hyps[parent][0] + [word], value))
                        if len(opened) == beam_size:
                            break
                hyps = opened
                if t == max_len:
                    for toks, s in hyps:
                        if s / length_penalty(max_len, alpha) > best_score:
                            best, best_score = toks, s / length_penalty(max_len, alpha)
                if not hyps or max(s for _, s in hyps) / length_penalty(max_len, alpha) <= best_score:
                    break                               # no open hypothesis can win any more
            answers.append(best)
        return answers'''],  # noqa: E501  (a submission's code, graded as written)
    ("13_decoding", "corpus_bleu"): ['''
        hyp_len = sum(len(h) for h in hypotheses)
        ref_len = sum(len(r) for r in references)
        log_p = 0.0
        for n in range(1, max_n + 1):
            matched = total = 0
            for h, r in zip(hypotheses, references):
                h_grams = Counter(zip(*(h[i:] for i in range(n))))
                r_grams = Counter(zip(*(r[i:] for i in range(n))))
                matched += sum((h_grams & r_grams).values())
                total += sum(h_grams.values())
            if matched == 0:
                return 0.0
            log_p += math.log(matched / total) / max_n
        brevity = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
        return 100.0 * brevity * math.exp(log_p)'''],
}


def fill(source: str, bodies: list[str]) -> str:
    """The stub cell's source with its stubs replaced by `bodies`, in order, each at its stub's indent."""
    found = list(STUB.finditer(source))
    if len(found) != len(bodies):
        raise ValueError(f"{len(found)} stubs but {len(bodies)} bodies")
    for match, body in zip(reversed(found), reversed(bodies)):
        body = textwrap.indent(textwrap.dedent(body).strip("\n"), match.group(1))
        source = source[:match.start()] + body + source[match.end():]
    return source


def solved_lessons() -> dict[str, nbformat.NotebookNode]:
    """{file name: the released lesson with every stub filled by the code above}."""
    out = {}
    for path in lesson_paths():
        nb = nbformat.read(str(path), as_version=4)
        for cell in nb.cells:
            names = cell.get("metadata", {}).get("course", {}).get("names")
            if names:
                cell.source = fill(cell.source, BODIES[path.stem, names[0]])
        out[path.name] = nb
    return out


def write(folder) -> list[pathlib.Path]:
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, nb in solved_lessons().items():
        nbformat.write(nb, str(folder / name))
        paths.append(folder / name)
    return paths


if __name__ == "__main__":
    for p in write(sys.argv[1] if len(sys.argv) > 1 else "independent_lessons"):
        print(p)
