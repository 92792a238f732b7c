"""Stages 02-10 against PyTorch's own modules with copied weights."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from solutions import (
    PAD,
    Decoder,
    Encoder,
    EncoderLayer,
    LayerNorm,
    MultiHeadAttention,
    PositionalEncoding,
    PositionwiseFeedForward,
    SublayerConnection,
    TokenEmbedding,
    Transformer,
    causal_mask,
    merge_heads,
    padding_mask,
    scaled_dot_product_attention,
    sinusoidal_encoding,
    softmax,
    split_heads,
    target_mask,
)

TOL = 1e-4


def maxdiff(a, b):
    return (a - b).abs().max().item()


# ---------------------------------------------------------------- stage 02
def test_sinusoidal_table_matches_the_formula():
    pe = sinusoidal_encoding(50, 16)
    pos, i = 7, 3  # PE[7, 6] = sin(7 / 10000^(6/16)), PE[7, 7] = cos(same)
    angle = pos / 10000 ** (2 * i / 16)
    assert abs(pe[pos, 2 * i] - math.sin(angle)) < 1e-6 and abs(pe[pos, 2 * i + 1] - math.cos(angle)) < 1e-6
    assert pe[0].tolist() == [0.0, 1.0] * 8
    with pytest.raises(ValueError, match="even"):
        sinusoidal_encoding(10, 7)


def test_positional_encoding_is_a_buffer_and_checks_length():
    pe = PositionalEncoding(8, max_len=10, dropout=0.0)
    assert "pe" in dict(pe.named_buffers()) and not list(pe.parameters())
    x = torch.randn(2, 4, 8)
    assert maxdiff(pe(x), x + sinusoidal_encoding(4, 8)) < 1e-6
    with pytest.raises(ValueError, match="max_len"):
        pe(torch.randn(1, 11, 8))


# ---------------------------------------------------------------- stage 03
def test_softmax_is_stable_and_equals_torch():
    x = torch.randn(3, 5, 7) * 10
    for dim in (0, 1, -1):
        assert maxdiff(softmax(x, dim), torch.softmax(x, dim)) < 1e-6
    big = softmax(torch.tensor([1000.0, 1000.0, -1000.0]))
    assert torch.isfinite(big).all() and maxdiff(big, torch.tensor([0.5, 0.5, 0.0])) < 1e-6


def test_attention_equals_torch_sdpa_with_masks():
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 4)
    mask = torch.rand(2, 1, 5, 6) > 0.3
    mask[..., 0] = True  # every query keeps one key, so PyTorch's reference has no NaN row
    out, w = scaled_dot_product_attention(q, k, v, mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert maxdiff(out, ref) < 1e-5, \
        f"attention output differs from F.scaled_dot_product_attention by {maxdiff(out, ref):.2e}"
    assert maxdiff(w.sum(-1), torch.ones(2, 3, 5)) < 1e-5 and (w[~mask.expand_as(w)] == 0).all()


def test_fully_masked_row_is_finite():
    q = k = v = torch.randn(1, 4, 8)
    mask = torch.ones(1, 4, 4, dtype=torch.bool)
    mask[0, 2] = False
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()


# ---------------------------------------------------------------- stage 04
def copy_mha(ours: MultiHeadAttention, ref: nn.MultiheadAttention):
    d = ref.embed_dim
    with torch.no_grad():
        for i, lin in enumerate((ours.w_q, ours.w_k, ours.w_v)):
            lin.weight.copy_(ref.in_proj_weight[i * d:(i + 1) * d])
            lin.bias.copy_(ref.in_proj_bias[i * d:(i + 1) * d])
        ours.w_o.weight.copy_(ref.out_proj.weight)
        ours.w_o.bias.copy_(ref.out_proj.bias)


def test_split_merge_heads():
    x = torch.randn(2, 5, 8)
    h = split_heads(x, 2)
    assert h.shape == (2, 2, 5, 4) and torch.equal(h[:, 1], x[..., 4:])
    assert torch.equal(merge_heads(h), x)
    with pytest.raises(ValueError, match="divisible"):
        split_heads(x, 3)


def test_multi_head_attention_equals_torch_with_padding_mask():
    ref = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    ours = MultiHeadAttention(16, 4, dropout=0.0).eval()
    copy_mha(ours, ref)
    q, kv = torch.randn(3, 5, 16), torch.randn(3, 7, 16)
    ids = torch.tensor([[4] * 7, [4] * 5 + [PAD] * 2, [4] * 2 + [PAD] * 5])
    out = ours(q, kv, kv, padding_mask(ids))
    expected, weights = ref(q, kv, kv, key_padding_mask=ids == PAD, average_attn_weights=False)
    assert maxdiff(out, expected) < TOL, \
        f"MultiHeadAttention vs nn.MultiheadAttention: max diff {maxdiff(out, expected):.2e}"
    assert ours.attn_weights.shape == (3, 4, 5, 7) and maxdiff(ours.attn_weights, weights) < TOL
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(10, 3)


# ---------------------------------------------------------------- stage 05
def test_masks():
    ids = torch.tensor([[5, 6, PAD], [7, PAD, PAD]])
    assert padding_mask(ids).shape == (2, 1, 1, 3) and padding_mask(ids)[1, 0, 0].tolist() == [True, False,
                                                                                               False]
    assert causal_mask(3)[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    tm = target_mask(ids)
    assert tm.shape == (2, 1, 3, 3)
    assert tm[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, False]]


# ---------------------------------------------------------------- stages 06-07
def test_feed_forward_and_layer_norm():
    ff = PositionwiseFeedForward(8, 32, dropout=0.0)
    x = torch.randn(2, 3, 8)
    assert maxdiff(ff(x), ff.w_2(torch.relu(ff.w_1(x)))) < 1e-6
    ln, ref = LayerNorm(8), nn.LayerNorm(8)
    with torch.no_grad():
        ref.weight.normal_(), ref.bias.normal_()
        ln.weight.copy_(ref.weight), ln.bias.copy_(ref.bias)
    x = torch.randn(4, 6, 8) * 5 + 3
    assert maxdiff(ln(x), ref(x)) < 1e-5, f"LayerNorm vs nn.LayerNorm: {maxdiff(ln(x), ref(x)):.2e}"


def test_sublayer_post_and_pre_norm():
    x, f = torch.randn(2, 3, 8), nn.Linear(8, 8)
    post, pre = SublayerConnection(8, 0.0), SublayerConnection(8, 0.0, norm_first=True)
    assert maxdiff(post(x, f), post.norm(x + f(x))) < 1e-6
    assert maxdiff(pre(x, f), x + f(pre.norm(x))) < 1e-6


# ---------------------------------------------------------------- stages 08-10
def copy_layer(ours, ref, cross=False):
    """Copy an nn.TransformerEncoderLayer / nn.TransformerDecoderLayer into ours."""
    copy_mha(ours.self_attn, ref.self_attn)
    norms = [ref.norm1, ref.norm2] + ([ref.norm3] if cross else [])
    if cross:
        copy_mha(ours.cross_attn, ref.multihead_attn)
    with torch.no_grad():
        ours.feed_forward.w_1.load_state_dict(ref.linear1.state_dict())
        ours.feed_forward.w_2.load_state_dict(ref.linear2.state_dict())
        for sub, norm in zip(ours.sublayers, norms):
            sub.norm.weight.copy_(norm.weight), sub.norm.bias.copy_(norm.bias)


def randomize_norms(module):
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5), m.bias.normal_(0, 0.1)


def test_encoder_ignores_padding():
    enc = Encoder(16, 4, 32, 2, dropout=0.0).eval()
    src = torch.tensor([[5, 6, 7, 8]])
    padded = torch.tensor([[5, 6, 7, 8, PAD, PAD, PAD]])
    x = torch.randn(1, 7, 16)
    a = enc(x[:, :4], padding_mask(src))
    b = enc(x, padding_mask(padded))[:, :4]
    assert maxdiff(a, b) < 1e-5, f"padding changed real positions by {maxdiff(a, b):.2e}"


def test_layers_are_distinct():
    enc = Encoder(8, 2, 16, 3)
    assert len({id(layer) for layer in enc.layers}) == 3
    assert enc.layers[0].self_attn.w_q.weight.data_ptr() != enc.layers[1].self_attn.w_q.weight.data_ptr()
    assert isinstance(Encoder(8, 2, 16, 2, norm_first=True).norm, LayerNorm)


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_equals_nn_transformer(norm_first):
    d, h, ff, n, V = 32, 4, 64, 2, 50
    ours = Transformer(V, V, d_model=d, n_heads=h, n_layers=n, d_ff=ff, dropout=0.0,
                       norm_first=norm_first).eval()
    ref = nn.Transformer(d, h, n, n, ff, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    randomize_norms(ref)
    if not norm_first:  # nn.Transformer always adds a final norm; the post-norm paper model has none
        ref.encoder.norm = ref.decoder.norm = None
    for mine, theirs in zip(ours.encoder.layers, ref.encoder.layers):
        copy_layer(mine, theirs)
    for mine, theirs in zip(ours.decoder.layers, ref.decoder.layers):
        copy_layer(mine, theirs, cross=True)
    if norm_first:
        for mine, theirs in ((ours.encoder.norm, ref.encoder.norm), (ours.decoder.norm, ref.decoder.norm)):
            mine.load_state_dict(theirs.state_dict())
    src = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, PAD, PAD]])
    tgt = torch.tensor([[1, 20, 21, 22], [1, 23, PAD, PAD]])
    logits = ours(src, tgt, padding_mask(src), target_mask(tgt))
    def embed(emb, ids):  # the same embeddings feed both models
        return ours.positional(emb(ids))
    with torch.no_grad():
        out = ref(embed(ours.src_embed, src), embed(ours.tgt_embed, tgt),
                  tgt_mask=~torch.ones(4, 4, dtype=torch.bool).tril(),  # PyTorch: True = may NOT attend
                  src_key_padding_mask=src == PAD, tgt_key_padding_mask=tgt == PAD,
                  memory_key_padding_mask=src == PAD)
    expected = ours.generator(out)
    real = tgt != PAD
    diff = maxdiff(logits[real], expected[real])
    assert diff < TOL, \
        f"Transformer (norm_first={norm_first}) vs nn.Transformer: max diff {diff:.2e} at real positions"


def test_weight_tying_and_scaling():
    m = Transformer(40, 40, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    assert m.generator.weight is m.tgt_embed.embedding.weight is m.src_embed.embedding.weight
    m2 = Transformer(40, 30, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    assert m2.generator.weight is m2.tgt_embed.embedding.weight \
        and m2.src_embed.embedding.weight.shape[0] == 40
    untied = Transformer(40, 40, d_model=16, n_heads=2, n_layers=1, d_ff=32, tie_weights=False)
    n_tied, n_untied = (sum(p.numel() for p in x.parameters()) for x in (m, untied))
    assert n_untied - n_tied == 2 * 40 * 16, (n_tied, n_untied)
    assert isinstance(m.src_embed, TokenEmbedding)
    with pytest.raises(ValueError, match="divisible"):
        Transformer(10, 10, d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="max_len"):
        small = Transformer(10, 10, d_model=8, n_heads=2, n_layers=1, d_ff=16, max_len=5)
        src = torch.full((1, 6), 5)
        small.encode(src, padding_mask(src))


def test_encoder_layer_equals_torch_encoder_layer():
    ref = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True).eval()
    randomize_norms(ref)
    ours = EncoderLayer(16, 4, 32, dropout=0.0).eval()
    copy_layer(ours, ref)
    x = torch.randn(2, 5, 16)
    ids = torch.tensor([[5] * 5, [5] * 3 + [PAD] * 2])
    with torch.no_grad():
        expected = ref(x, src_key_padding_mask=ids == PAD)
    got = ours(x, padding_mask(ids))
    real = ids != PAD
    assert maxdiff(got[real], expected[real]) < TOL


def test_decoder_stack_shapes():
    dec = Decoder(16, 4, 32, 2, dropout=0.0)
    out = dec(torch.randn(2, 3, 16), torch.randn(2, 7, 16), None, causal_mask(3))
    assert out.shape == (2, 3, 16) and len(dec.layers) == 2 and len(dec.layers[0].sublayers) == 3
