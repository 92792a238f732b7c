"""Stage 04: splitting and merging heads, and multi-head attention, against slices written out in the
check and against nn.MultiheadAttention(batch_first=True) with the learner's weights copied in, with the
classic mistakes named."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.module import register_module_forward_pre_hook

from ..registry import CheckFailure, CheckTimeout, forbid, register
from ._util import (
    LEFT_AUTOGRAD,
    as_module,
    as_tensor,
    build,
    close,
    expect_all_dropped,
    expect_close,
    expect_grads,
    expect_no_dropout_in_eval,
    expect_shape,
    seeded,
)

# the lesson's own work, which a library module must not do for the learner (allowed in later lessons)
forbid("MultiHeadAttention", "nn.MultiheadAttention (or F.multi_head_attention_forward)",
       functions=("multi_head_attention_forward", "_native_multi_head_attention"),
       classes=("torch.nn.MultiheadAttention",))

NO_TRANSPOSE_SPLIT = ("heads reshaped without a transpose: x.view(B, h, L, d_k) mixes positions into the "
                      "heads; use x.view(B, L, h, d_k).transpose(1, 2)")
NO_TRANSPOSE_MERGE = ("heads merged without the transpose: x.reshape(B, L, h * d_k) straight from (B, h, L, "
                      "d_k) mixes heads into positions; use x.transpose(1, 2).reshape(B, L, h * d_k)")
HEADS_AUTOGRAD = ("the heads left autograd (.detach(), .data, torch.no_grad() or numpy): multi-head "
                  "attention trains w_q, w_k, w_v and w_o through this function, so keep to torch operations "
                  "on x (view, transpose, reshape)")
INTERLEAVED = ("features dealt out to the heads in turn (view(B, L, d_k, h)): head i must get the contiguous "
               "block of features i*d_k .. (i+1)*d_k-1, i.e. view(B, L, h, d_k)")
INTERLEAVED_MERGE = ("the heads' features interleaved (permute(0, 2, 3, 1)): out[..., i*d_k:(i+1)*d_k] "
                     "must be head i's whole block, so move only the heads next to d_k, x.transpose(1, 2) "
                     "(B, L, h, d_k), then reshape(B, L, h * d_k)")


def _inputs_kept(fn, inputs: dict, what: str):
    """fn(), failing when it changed one of `inputs` ({name: tensor}) in place: the caller's tensor would
    change."""
    before = {n: (t.shape, t.clone()) for n, t in inputs.items() if isinstance(t, torch.Tensor)}
    out = fn()
    for n, (shape, copy) in before.items():
        t = inputs[n]
        if t.shape != shape or not torch.equal(t, copy):
            raise CheckFailure(f"{what}: the argument `{n}` after the call", "unchanged",
                               "changed in place "
                               f"({'shape ' + str(tuple(t.shape)) if t.shape != shape else 'values'})",
                               "an in-place operation on an argument (transpose_, unsqueeze_, masked_fill_, "
                               "logical_not_, +=, ...) changes the caller's tensor: use the out-of-place "
                               "version (transpose, unsqueeze, masked_fill, ~mask, x = x + ...)")
    return out


def _heads_of(x: torch.Tensor, h: int) -> torch.Tensor:
    """(B, L, d) -> (B, h, L, d/h), written as slices: head i holds features i*d_k .. (i+1)*d_k-1."""
    d_k = x.size(-1) // h
    return torch.stack([x[..., i * d_k:(i + 1) * d_k] for i in range(h)], dim=1)


def _message_names_problem(e: BaseException, d_model: int, n_heads: int) -> bool:
    text = str(e).lower()
    return any(w in text for w in ("head", "divis", "multiple", str(d_model)))


def _expect_value_error(fn, d_model, n_heads, what):
    try:
        fn()
    except NotImplementedError:
        raise
    except ValueError as e:
        if not _message_names_problem(e, d_model, n_heads):
            raise CheckFailure(what, "a ValueError whose message names the problem",
                               f"ValueError({str(e)[:80]!r})",
                               "say what is wrong, e.g. "
                               "f'd_model={d_model} is not divisible by n_heads={n_heads}'") from None
        return
    except Exception as e:  # noqa: BLE001  (the learner's own error, reported as the wrong kind)
        raise CheckFailure(what, "ValueError with a message naming the problem",
                           f"{type(e).__name__}: {str(e)[:100]}",
                           "no clear ValueError: check `d_model % n_heads` first and raise ValueError(...) "
                           "with a message, instead of letting a view or reshape fail later") from None
    raise CheckFailure(what, "ValueError with a message naming the problem", "no error",
                       "no clear ValueError: check `if d_model % n_heads: raise ValueError(...)`; otherwise "
                       "d_k is rounded down and the heads silently drop features")


# ------------------------------------------------------------------------------------- split_heads
SPLIT_SHAPES = {  # what split_heads(x (2, 5, 12), 3) gives for a classic slip, and why
    (2, 5, 3, 4): "the heads are split but not moved: transpose(1, 2) turns (B, L, h, d_k) into (B, h, L, "
                  "d_k)",
    (2, 3, 4, 5): "(B, h, d_k, L): the positions and the features are swapped; view(B, L, h, "
                  "d_k).transpose(1, 2), not permute(0, 2, 3, 1)",
    (2, 4, 5, 3): "this is a split into 4 heads, not n_heads=3: are h and d_k swapped (the view is (B, L, "
                  "n_heads, d_model // n_heads)), or is the number of heads fixed in the code?",
    (2, 4, 3, 5): "transpose(1, 2), not transpose(1, 3): (B, L, h, d_k) -> (B, h, L, d_k)",
    (6, 5, 4): "the heads are folded into the batch: keep them as their own dimension, (B, h, L, d_k)",
}
MERGE_SHAPES = {  # what merge_heads(x (2, 3, 5, 4)) gives for a classic slip, and why
    (2, 5, 3, 4): "the heads are moved but not merged: reshape (B, L, h, d_k) to (B, L, h * d_k)",
    (2, 15, 4): "the heads were stacked along the positions: transpose(1, 2) first, then reshape to (B, L, h "
                "* d_k)",
    (2, 5, 4): "the heads were averaged or summed: concatenate them, (B, L, h * d_k)",
}
@register("split_heads", "(B, L, d_model) -> (B, h, L, d_model / h)")
def _split_shape(split_heads):
    with seeded(0):
        x = torch.randn(2, 5, 12)
    what = "split_heads(x of shape (2, 5, 12), n_heads=3)"
    got = as_tensor(_inputs_kept(lambda: split_heads(x, 3), {"x": x}, what), what)
    expect_shape(got, (2, 3, 5, 4), what, SPLIT_SHAPES.get(tuple(got.shape),
                 "view as (B, L, h, d_k), then transpose(1, 2) to bring the heads in front of the positions"))
    expect_shape(split_heads(x, 4), (2, 4, 5, 3), "split_heads(x of shape (2, 5, 12), n_heads=4)",
                 "d_k = d_model // n_heads: use the n_heads argument, not a fixed number")


@register("split_heads", "head i holds features i*d_k .. (i+1)*d_k-1 at every position, gradients too")
def _split_values(split_heads):
    with seeded(1):
        x = torch.randn(2, 5, 12)
    B, L, d, h = 2, 5, 12, 3
    what = "split_heads(x of shape (2, 5, 12), n_heads=3)"
    expect_close(_inputs_kept(lambda: split_heads(x, h), {"x": x}, what), _heads_of(x, h), what,
                 hint="out[:, i] must equal x[..., i*d_k:(i+1)*d_k]: x.view(B, L, h, d_k).transpose(1, 2)",
                 mistakes={NO_TRANSPOSE_SPLIT: x.reshape(B, h, L, d // h),
                           INTERLEAVED: x.reshape(B, L, d // h, h).permute(0, 3, 1, 2)})
    leaf, ref_leaf = x.clone().requires_grad_(), x.clone().requires_grad_()
    expect_grads(lambda: split_heads(leaf, h), lambda: _heads_of(ref_leaf, h), {"x": (leaf, ref_leaf)}, what,
                 hint=HEADS_AUTOGRAD)


@register("split_heads", "edge cases: one head (d_k = d_model) and d_model heads (d_k = 1)")
def _split_edges(split_heads):
    with seeded(2):
        x = torch.randn(3, 4, 6)
    expect_close(split_heads(x, 1), x[:, None], "split_heads(x of shape (3, 4, 6), n_heads=1)",
                 hint="with one head the output is x with a head dimension of size 1 at dim 1")
    expect_close(split_heads(x, 6), _heads_of(x, 6), "split_heads(x of shape (3, 4, 6), n_heads=6)",
                 hint="x.view(B, L, h, d_k).transpose(1, 2)",
                 mistakes={NO_TRANSPOSE_SPLIT: x.reshape(3, 6, 4, 1)})


@register("split_heads", "d_model not divisible by n_heads raises a clear ValueError")
def _split_error(split_heads):
    x = torch.randn(2, 3, 10)
    split_heads(x, 2)  # a valid call first: an unfinished function is not graded on its error message
    _expect_value_error(lambda: split_heads(x, 3), 10, 3, "split_heads(x of shape (2, 3, 10), n_heads=3)")


# ------------------------------------------------------------------------------------- merge_heads
def _merge(merge_heads, x, what):
    """merge_heads(x), with the error of .view() on a transposed tensor explained."""
    try:
        return _inputs_kept(lambda: merge_heads(x), {"x": x}, what)
    except RuntimeError as e:
        if "view" in str(e) or "stride" in str(e) or "contiguous" in str(e):
            raise CheckFailure(what, "it to work", f"RuntimeError: {str(e)[:90]}",
                               "merged with .view() after transpose(1, 2): the transposed tensor is "
                               "non-contiguous in memory; call .contiguous() before .view(...), or use "
                               ".reshape(...)") from None
        if "invalid for input of size" in str(e):
            raise CheckFailure(what, "it to work", f"RuntimeError: {str(e)[:90]}",
                               "take every size from x itself, B, h, L, d_k = x.shape: no fixed number of "
                               "heads or d_model in merge_heads") from None
        raise


@register("merge_heads", "(B, h, L, d_k) -> (B, L, h * d_k)")
def _merge_shape(merge_heads):
    with seeded(3):
        x = torch.randn(2, 3, 5, 4)
    what = "merge_heads(x of shape (2, 3, 5, 4))"
    got = as_tensor(_merge(merge_heads, x, what), what)
    expect_shape(got, (2, 5, 12), what, MERGE_SHAPES.get(tuple(got.shape),
                 "transpose(1, 2) to (B, L, h, d_k), then reshape to (B, L, h * d_k)"))


@register("merge_heads", "concatenates the heads' features at each position, gradients too")
def _merge_values(merge_heads):
    with seeded(4):
        x = torch.randn(2, 3, 5, 4)
    expected = torch.cat(x.unbind(1), dim=-1)  # (B, L, h * d_k): head 0's features, then head 1's, ...
    what = "merge_heads(x of shape (2, 3, 5, 4))"
    expect_close(_merge(merge_heads, x, what), expected, what,
                 hint="out[..., i*d_k:(i+1)*d_k] must equal x[:, i]: x.transpose(1, 2).reshape(B, L, h * "
                      "d_k)",
                 mistakes={NO_TRANSPOSE_MERGE: x.reshape(2, 5, 12),
                           INTERLEAVED_MERGE: x.permute(0, 2, 3, 1).reshape(2, 5, 12)})
    leaf, ref_leaf = x.clone().requires_grad_(), x.clone().requires_grad_()
    expect_grads(lambda: merge_heads(leaf), lambda: torch.cat(ref_leaf.unbind(1), dim=-1),
                 {"x": (leaf, ref_leaf)},
                 what, hint=HEADS_AUTOGRAD)


@register("merge_heads", "undoes a split: merge_heads(x.view(B, L, h, d_k).transpose(1, 2)) == x")
def _merge_inverse(merge_heads):
    with seeded(5):
        x = torch.randn(2, 6, 8)
    split = x.view(2, 6, 4, 2).transpose(1, 2)  # (2, 4, 6, 2), as split_heads gives it (not contiguous)
    what = "merge_heads(x.view(2, 6, 4, 2).transpose(1, 2))"
    expect_close(_merge(merge_heads, split, what), x, what, hint="merge_heads must be the inverse of "
                                                                 "split_heads",
                 mistakes={NO_TRANSPOSE_MERGE: split.reshape(2, 6, 8),
                           INTERLEAVED_MERGE: split.permute(0, 2, 3, 1).reshape(2, 6, 8)})


# ------------------------------------------------------------------------------- MultiHeadAttention
def _linear(mha, name, d_model, what):
    lin = getattr(mha, name, None)
    if lin is None:
        hint = ("no output projection w_o: the concatenated heads go through w_o = nn.Linear(d_model, "
                "d_model)"
                if name == "w_o" else "name the projections w_q, w_k, w_v, w_o as in the contract")
        raise CheckFailure(f"{what}: attribute `{name}`", f"an nn.Linear({d_model}, {d_model}) named {name}",
                           "no such attribute", hint)
    if not isinstance(lin, nn.Linear):
        raise CheckFailure(f"{what}: attribute `{name}`", f"an nn.Linear({d_model}, {d_model})",
                           type(lin).__name__,
                           "use nn.Linear for each projection, so that weights can be copied to and from "
                           "PyTorch")
    if tuple(lin.weight.shape) != (d_model, d_model):
        raise CheckFailure(f"{what}: {name}.weight", f"shape ({d_model}, {d_model})",
                           f"shape {tuple(lin.weight.shape)}",
                           "each projection maps d_model to d_model (all heads at once): nn.Linear(d_model, "
                           "d_model)")
    if lin.bias is None:
        raise CheckFailure(f"{what}: {name}.bias", "a bias", "None", "nn.Linear(d_model, d_model) keeps "
                                                                     "bias=True")
    return lin


def _linears(mha, d_model, what):
    lins = {n: _linear(mha, n, d_model, what) for n in ("w_q", "w_k", "w_v", "w_o")}
    names = list(lins)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if lins[a] is lins[b] or lins[a].weight.data_ptr() == lins[b].weight.data_ptr():
                raise CheckFailure(f"{what}: {a} and {b}", "four distinct nn.Linear modules", f"{a} is {b}",
                                   "one Linear shared by the projections: query, key and value each need "
                                   "their own nn.Linear(d_model, d_model) (and w_o its own)")
    return lins


def _make(MHA, d_model, h, dropout=0.0, what="MultiHeadAttention"):
    return as_module(build(MHA, d_model, h, dropout=dropout,
                           what=f"{what}({d_model}, {h}, dropout={dropout})"), what)


def _pair(MHA, d_model=12, h=3, dropout=0.0, seed=0):
    """The learner's module and nn.MultiheadAttention with the same (random) weights, both in eval mode."""
    mha = _make(MHA, d_model, h, dropout)
    with seeded(seed):
        ref = nn.MultiheadAttention(d_model, h, dropout=dropout, batch_first=True)
        nn.init.normal_(ref.in_proj_bias, std=0.2)
        nn.init.normal_(ref.out_proj.bias, std=0.2)
    lins = _linears(mha, d_model, f"MultiHeadAttention({d_model}, {h})")
    with torch.no_grad():
        for i, n in enumerate(("w_q", "w_k", "w_v")):
            lins[n].weight.copy_(ref.in_proj_weight[i * d_model:(i + 1) * d_model])
            lins[n].bias.copy_(ref.in_proj_bias[i * d_model:(i + 1) * d_model])
        lins["w_o"].weight.copy_(ref.out_proj.weight)
        lins["w_o"].bias.copy_(ref.out_proj.bias)
    mha.eval()
    ref.eval()
    return mha, ref


def _forward(mha, query, key, value, mask=None, what="MultiHeadAttention(...)(query, key, value)", ref=None):
    args = {"query": query, "key": key, "value": value, "mask": mask}
    if key is query:  # self-attention: one tensor, checked once
        args = {"x": query, "mask": mask}
    try:
        out = _inputs_kept(lambda: mha(query, key, value) if mask is None else mha(query, key, value, mask),
                           args, what)
    except (RuntimeError, ValueError, IndexError) as e:
        lengths = isinstance(e, RuntimeError) and query.size(1) != key.size(1) and \
            any(w in str(e) for w in ("size of tensor", "must match", "invalid for input of size"))
        if lengths and ref is not None:
            _query_key_swapped(mha, ref, query, key, value, mask, what, e)
        if lengths and mask is not None and ref is not None:
            _without_mask(mha, ref, query, key, value, mask, what, e)
        if not lengths:
            if mask is not None and _works_without_mask(mha, query, key, value):
                raise CheckFailure(f"{what}: with the mask of shape {tuple(mask.shape)}", "it to work",
                                   f"{type(e).__name__}: {str(e)[:90]}",
                                   "it works without the mask and fails with it: the course's masks are "
                                   "already 4-d, (B, 1, 1, Lk) or (1, 1, L, L), and broadcast over the heads "
                                   "as they are; pass the mask on unchanged (no mask.unsqueeze(1), no view "
                                   "or reshape)") from None
            raise
        raise CheckFailure(what, "an output of shape (B, Lq, d_model)", f"RuntimeError: {str(e)[:90]}",
                           "the lengths do not fit together: in cross-attention the query (Lq) and the keys "
                           "(Lk) differ; q comes from `query`, k and v from `key` and `value`, and the mask "
                           "is (B, 1, 1, Lk). Is the query used as key and value too?" if ref is None else
                           "the lengths do not fit together: in cross-attention the query (Lq) and the keys "
                           "(Lk) differ; q comes from `query`, k and v from `key` and `value`, each split "
                           "into heads with its own length (view(B, -1, h, d_k), not view(B, Lq, h, d_k) for "
                           "all three)") from None
    if isinstance(out, tuple):
        raise CheckFailure(what, "one tensor (B, Lq, d_model)", f"a tuple of {len(out)}",
                           "return only the output; keep the weights in self.attn_weights")
    return as_tensor(out, what)


def _query_key_swapped(mha, ref, query, key, value, mask, what, e):
    """Cross-attention failed on a size mismatch: when the same module, called with `query` and `key`
    exchanged, gives the right output, its q and k come from each other's argument (q = w_q(key), k =
    w_k(query))."""
    kept = mha.__dict__.get("attn_weights", None)
    try:
        args = (key.clone(), query.clone(), value.clone()) + (() if mask is None else (mask,))
        again = mha(*args)
        with torch.no_grad():
            right = _manual(ref, query, key, value, mask)
        swapped = isinstance(again, torch.Tensor) and again.shape == right.shape and close(again, right)
    except CheckTimeout:
        raise
    except Exception:  # noqa: BLE001  (it fails that way too: the lengths are mixed up elsewhere)
        return
    finally:
        if "attn_weights" in mha.__dict__:
            mha.__dict__["attn_weights"] = kept
    if swapped:
        raise CheckFailure(what, "an output of shape (B, Lq, d_model)", f"{type(e).__name__}: {str(e)[:90]}",
                           "query and key swapped: q was projected from `key` and k from `query` (called "
                           "with the two exchanged, it gives the right output); q = w_q(query), k = "
                           "w_k(key), v = w_v(value)"
                           ) from None


def _without_mask(mha, ref, query, key, value, mask, what, e):
    """Cross-attention failed with a mask on a size mismatch: the same call without the mask tells the cause.
    Right without it: the mask is handled wrongly (transposed, reshaped); the query's self-attention without
    it: the query was used as key and value. Anything else (it fails without the mask too): the caller's
    generic message."""
    kept = mha.__dict__.get("attn_weights", None)
    try:
        alone = mha(query.clone(), key.clone(), value.clone())
    except Exception:  # noqa: BLE001  (it fails without the mask too: the lengths are mixed up elsewhere)
        return
    finally:
        if "attn_weights" in mha.__dict__:
            mha.__dict__["attn_weights"] = kept
    with torch.no_grad():
        right = ref(query, key, value, need_weights=False)[0]
        self_only = _manual(ref, query, key, value, None, inputs="qqq", mask_mode="ignored")
    got = f"{type(e).__name__}: {str(e)[:90]}"
    if close(alone, right):
        raise CheckFailure(f"{what}: with the mask of shape {tuple(mask.shape)}", "it to work", got,
                           "it works without the mask and fails with it: the mask (B, 1, 1, Lk) or (B, 1, "
                           "Lq, Lk) broadcasts over the heads and the queries as it is; pass it on unchanged "
                           "(no transpose, unsqueeze, view or reshape)") from None
    if close(alone, self_only):
        raise CheckFailure(f"{what}: with the mask of shape {tuple(mask.shape)}", "it to work", got,
                           "the query used as key and value too: without the mask this is the query's "
                           "self-attention; k and v come from the `key` and `value` arguments, whose length "
                           "the mask has") from None


def _works_without_mask(mha, query, key, value) -> bool:
    """Whether mha runs on these inputs without a mask (its attn_weights are put back as they were)."""
    kept = mha.__dict__.get("attn_weights", None)
    try:
        mha(query.clone(), key.clone(), value.clone())
        return True
    except Exception:  # noqa: BLE001  (any failure: not the mask's fault)
        return False
    finally:
        if "attn_weights" in mha.__dict__:
            mha.__dict__["attn_weights"] = kept


def _manual(ref: nn.MultiheadAttention, query, key, value, mask=None, split="ok", merge="ok", w_o=True,
            scale="d_k", proj="qkv", inputs="qkv", mask_mode="ok", softmax_dim=-1, heads=None, o_bias=True,
            residual=False, in_bias=True):
    """Multi-head attention written out with ref's weights, and its classic wrong variants (`heads`: a number
    of heads other than ref's, as code that ignores its n_heads argument computes)."""
    d, h = ref.embed_dim, heads or ref.num_heads
    d_k = d // h
    W, b = ref.in_proj_weight.detach(), ref.in_proj_bias.detach()
    lin = {c: (W[i * d:(i + 1) * d], b[i * d:(i + 1) * d]) for i, c in enumerate("qkv")}
    src = dict(zip("qkv", (query, key, value)))
    src = {c: src[inputs[i]] for i, c in enumerate("qkv")}
    q, k, v = (F.linear(src[c], lin[proj[i]][0], lin[proj[i]][1] if in_bias else None) for i,
               c in enumerate("qkv"))

    def sp(x):
        B, L, _ = x.shape
        if split == "interleaved":
            return x.reshape(B, L, d_k, h).permute(0, 3, 1, 2)
        return x.reshape(B, h, L, d_k) if split == "no_transpose" else x.reshape(B, L, h, d_k).transpose(1, 2)
    q, k, v = sp(q), sp(k), sp(v)
    divisor = {"d_model": math.sqrt(d), "none": 1.0, "h": math.sqrt(h),
               "twice": d_k}.get(scale, math.sqrt(d_k))
    scores = q @ k.transpose(-2, -1) / divisor
    if mask is not None and mask_mode == "transposed":
        scores = scores.masked_fill(~mask.transpose(-2, -1), -1e9)
    if mask is not None and mask_mode in ("ok", "inverted", "zero"):
        scores = scores.masked_fill(mask if mask_mode == "inverted" else ~mask,
                                    0.0 if mask_mode == "zero" else -1e9)
    weights = torch.softmax(scores, softmax_dim)
    if mask is not None and mask_mode == "after":
        weights = weights.masked_fill(~mask, 0.0)
    out = weights @ v  # (B, h, Lq, d_k)
    B, _, Lq, _ = out.shape
    if split == "interleaved":
        out = out.permute(0, 2, 3, 1).reshape(B, Lq, d)
    else:
        out = out.reshape(B, Lq, d) if merge == "no_transpose" else out.transpose(1, 2).reshape(B, Lq, d)
    if w_o:
        out = F.linear(out, ref.out_proj.weight.detach(), ref.out_proj.bias.detach() if o_bias else None)
    return out + query if residual else out


IN_BIAS = ("the biases of w_q, w_k and w_v are missing (query @ w_q.weight.T): apply the whole nn.Linear, "
           "self.w_q(query), self.w_k(key), self.w_v(value)")


def _variants(ref, query, key, value, mask=None):
    """{description of a classic mistake: the keywords of _manual that put it in}, for these inputs."""
    variants = {
        NO_TRANSPOSE_SPLIT: dict(split="no_transpose"),
        NO_TRANSPOSE_SPLIT + " (and merged back the same way)": dict(split="no_transpose",
                                                                     merge="no_transpose"),
        NO_TRANSPOSE_MERGE: dict(merge="no_transpose"),
        "no output projection: the concatenated heads must go through w_o": dict(w_o=False),
        "scores divided by sqrt(d_model) instead of sqrt(d_k) = sqrt(d_model / h)": dict(scale="d_model"),
        "one projection used for query, key and value: use w_q, w_k and w_v, one each": dict(proj="qqq"),
        "one projection used for query, key and value (w_v for all three): each needs its own "
        "Linear": dict(proj="vvv"),
        "w_k applied to the values: v = self.w_v(value)": dict(proj="qkk"),
        "w_v applied to the keys: k = self.w_k(key)": dict(proj="qvv"),
        "w_q applied to the keys: k = self.w_k(key)": dict(proj="qqv"),
        "scores not scaled: divide q k^T by sqrt(d_k) = sqrt(d_model / h)": dict(scale="none"),
        "softmax over the queries (dim=-2): each query's weights must sum to one over the keys, "
        "softmax(dim=-1)":
            dict(softmax_dim=-2),
        INTERLEAVED: dict(split="interleaved"),
        "scores divided by sqrt(n_heads) instead of sqrt(d_k) = sqrt(d_model / n_heads)": dict(scale="h"),
        "scores divided by sqrt(d_k) twice (by d_k): scaled_dot_product_attention already divides by "
        "sqrt(d_k), so do not scale q, k or the scores again in MultiHeadAttention": dict(scale="twice"),
        "softmax over dim=1 (the heads): each query's weights must sum to one over the keys, softmax(dim=-1)":
            dict(softmax_dim=1),
        "w_o's bias is missing: apply the whole nn.Linear, self.w_o(concat)": dict(o_bias=False),
        IN_BIAS: dict(in_bias=False),
        "the input (query) is added to the output: multi-head attention returns w_o(concat) alone; the "
        "residual connection is SublayerConnection's work (stage 07)": dict(residual=True),
    }
    if not (query is key and key is value):
        variants["the query used as key and value too (self-attention only): project the `key` and `value` "
                 "arguments"] = dict(inputs="qqq", mask_mode="ignored")
        variants["key and value swapped: k = w_k(key), v = w_v(value)"] = dict(inputs="qvk")
        variants["the key used as the value too: v = self.w_v(value), from the `value` "
                 "argument"] = dict(inputs="qkk")
        variants["the value used as the key too: k = self.w_k(key), from the `key` "
                 "argument"] = dict(inputs="qvv")
    h = ref.num_heads
    for k in (1, 2, 4, 8, 6, 3):  # the numbers of heads people write into their code
        if k != h and ref.embed_dim % k == 0:
            variants[f"n_heads ignored: this is the output of {k} head{'s' * (k > 1)}, not {h}: use the "
                     "n_heads argument (self.h = n_heads, d_k = d_model // n_heads), no fixed "
                     "number"] = dict(heads=k)
    if mask is not None:
        variants["mask ignored: pass it to the attention of every head"] = dict(mask_mode="ignored")
        variants["mask polarity inverted: True means 'may attend'"] = dict(mask_mode="inverted")
        variants["masked scores filled with 0: fill them with a large negative number (-1e9) so that the "
                 "softmax gives them weight 0"] = dict(mask_mode="zero")
        variants["mask applied after the softmax: fill the scores before it, so that each row still sums to "
                 "one"] = \
            dict(mask_mode="after")
        if mask.size(-2) == mask.size(-1) > 1:
            variants["the mask's query and key axes swapped (a transpose of the mask): a (.., Lq, Lk) mask "
                     "is used as it is"] = dict(mask_mode="transposed")
    return variants


def _mistakes(ref, query, key, value, mask=None):
    """{description of a classic mistake: the output it gives}; a variant that cannot run on these inputs is
    left out."""
    out = {}
    with torch.no_grad():
        for description, kw in _variants(ref, query, key, value, mask).items():
            try:
                out[description] = _manual(ref, query, key, value, mask, **kw)
            except RuntimeError:
                pass
    return out


@register("MultiHeadAttention", "has w_q, w_k, w_v, w_o: four distinct nn.Linear(d_model, d_model) with bias")
def _mha_attributes(MHA):
    mha = _make(MHA, 12, 3, 0.1)
    _linears(mha, 12, "MultiHeadAttention(12, 3)")
    params = {id(p) for p in mha.parameters()}
    for n in ("w_q", "w_k", "w_v", "w_o"):
        if id(getattr(mha, n).weight) not in params:
            raise CheckFailure(f"MultiHeadAttention(12, 3).{n}", "a registered submodule",
                               "not in .parameters()",
                               f"assign it as self.{n} = nn.Linear(...) after super().__init__()")


@register("MultiHeadAttention", "d_model not divisible by n_heads raises a clear ValueError")
def _mha_error(MHA):
    # a valid module first: an unfinished class is not graded on its error message
    mha = _make(MHA, 8, 2, 0.0)
    x = torch.randn(1, 3, 8)
    _forward(mha, x, x, x)
    _expect_value_error(lambda: MHA(10, 3, dropout=0.0), 10, 3, "MultiHeadAttention(10, 3)")


@register("MultiHeadAttention", "self-attention equals nn.MultiheadAttention with the same weights, "
                                "gradients too")
def _mha_self(MHA):
    mha, ref = _pair(MHA, 12, 3, seed=1)
    with seeded(11):
        x = torch.randn(2, 5, 12)
    what = "MultiHeadAttention(12, 3)(x, x, x), x of shape (2, 5, 12)"
    with torch.no_grad():
        expected = ref(x, x, x, need_weights=False)[0]
        got = _forward(mha, x, x, x, what=what)
        expect_close(got, expected, what,
                     hint="w_o(merge_heads(attention(split_heads(w_q(q)), split_heads(w_k(k)), "
                          "split_heads(w_v(v)))))",
                     mistakes=_mistakes(ref, x, x, x))
    # the model is trained through this module: the gradient must reach the input along q, k and v
    leaf, ref_leaf = x.clone().requires_grad_(), x.clone().requires_grad_()
    expect_grads(lambda: mha(leaf, leaf, leaf),
                 lambda: ref(ref_leaf, ref_leaf, ref_leaf, need_weights=False)[0],
                 {"x": (leaf, ref_leaf)}, what, hint=LEFT_AUTOGRAD + " (in forward: torch.no_grad(), "
                                                                     ".detach() or .data on the projections, "
                                                                     "the weights or the output)")


@register("MultiHeadAttention", "cross-attention (Lq != Lk) with a padding mask equals "
                                "nn.MultiheadAttention; a query whose keys are all masked gets finite "
                                "numbers")
def _mha_cross(MHA):
    mha, ref = _pair(MHA, 12, 4, seed=2)
    with seeded(12):
        query, key, value = torch.randn(2, 3, 12), torch.randn(2, 6, 12), torch.randn(2, 6, 12)
    real = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])  # (B, Lk): the second source has 2 pads
    mask = real[:, None, None, :]  # ours: (B, 1, 1, Lk), True at real keys
    with torch.no_grad():
        # PyTorch's: True = pad
        expected = ref(query, key, value, key_padding_mask=~real, need_weights=False)[0]
        what = ("MultiHeadAttention(12, 4)(query (2, 3, 12), key (2, 6, 12), value (2, 6, 12), mask (2, 1, "
                "1, 6))")
        got = _forward(mha, query, key, value, mask, what, ref=ref)
        expect_close(got, expected, what, mistakes=_mistakes(ref, query, key, value, mask),
                     hint="q from `query`, k and v from `key` and `value`; the output has the query's length")
        _all_keys_masked(mha, query, key, value)


def _all_keys_masked(mha, query, key, value):
    """The course's convention (COURSE.md): a query whose keys are all masked gets finite numbers, never NaN.
    nn.MultiheadAttention gives NaN there, so only finiteness is asked."""
    empty = torch.tensor([[True] * 6, [False] * 6])[:, None, None, :]
    what = ("MultiHeadAttention(12, 4)(query, key, value, mask) with every key of the second source masked, "
            "mask (2, 1, 1, 6)")
    got = _forward(mha, query, key, value, empty, what)
    if isinstance(got, torch.Tensor) and not torch.isfinite(got).all():
        raise CheckFailure(f"{what}: the output", "finite numbers (COURSE.md: never NaN)",
                           f"{(~torch.isfinite(got)).sum().item()} values NaN or inf",
                           "masked scores filled with -inf: the softmax of a row of -inf is 0/0 = NaN; fill "
                           "them with a large finite negative number (-1e9), as lesson 03's "
                           "scaled_dot_product_attention does, or call it")


@register("MultiHeadAttention", "a causal mask (1, 1, L, L) equals nn.MultiheadAttention's attn_mask")
def _mha_causal(MHA):
    mha, ref = _pair(MHA, 8, 2, seed=3)
    with seeded(13):
        x = torch.randn(2, 5, 8)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    with torch.no_grad():
        # PyTorch's bool attn_mask: True = blocked
        expected = ref(x, x, x, attn_mask=~causal, need_weights=False)[0]
        what = "MultiHeadAttention(8, 2)(x, x, x, causal mask of shape (1, 1, 5, 5))"
        got = _forward(mha, x, x, x, causal[None, None], what)
        expect_close(got, expected, what, mistakes=_mistakes(ref, x, x, x, causal[None, None]),
                     hint="pass the mask on to scaled_dot_product_attention; it broadcasts over batch and "
                          "heads")


@register("MultiHeadAttention", "keeps the last call's weights as attn_weights (B, h, Lq, Lk), equal to "
                                "PyTorch's")
def _mha_weights(MHA):
    mha, ref = _pair(MHA, 12, 3, seed=4)
    with seeded(14):
        first = torch.randn(1, 2, 12)
        query, memory = torch.randn(2, 4, 12), torch.randn(2, 5, 12)
    real = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    with torch.no_grad():
        _forward(mha, first, first, first)
        _forward(mha, query, memory, memory, real[:, None, None, :], ref=ref)
        expected = ref(query, memory, memory, key_padding_mask=~real, need_weights=True,
                       average_attn_weights=False)[1]  # (B, h, Lq, Lk)
    w = getattr(mha, "attn_weights", None)
    if w is None:
        raise CheckFailure("MultiHeadAttention(...).attn_weights after a forward call",
                           "the weights (2, 3, 4, 5)",
                           "None or no such attribute",
                           "not keeping attn_weights: store them in forward, `out, self.attn_weights = "
                           "attention(...)`")
    w = as_tensor(w, "attn_weights")
    what = "attn_weights after a call with query (2, 4, 12), key (2, 5, 12) and a padding mask"
    if tuple(w.shape) == (1, 3, 2, 2):
        raise CheckFailure(what, "the weights of the last call", "those of the first call",
                           "set self.attn_weights on every forward call, not only the first")
    if tuple(w.shape) == (2, 4, 5):
        raise CheckFailure(f"{what}: wrong shape", "shape (2, 3, 4, 5)", "shape (2, 4, 5)",
                           "the weights were averaged over the heads (or one head's were kept): keep one set "
                           "per head, (B, h, Lq, Lk)")
    if w.dim() == 4 and w.shape[0] == 2 and tuple(w.shape[2:]) == (4, 5) and w.shape[1] != 3:
        raise CheckFailure(f"{what}: wrong shape", "shape (2, 3, 4, 5) for MultiHeadAttention(12, 3)",
                           f"shape {tuple(w.shape)}",
                           ("one set of weights, not n_heads=3: averaged over the heads (keep one per head), "
                            "or the number of heads fixed at 1 in the code (use the n_heads "
                            "argument)") if w.shape[1] == 1
                           else f"{w.shape[1]} heads, not n_heads=3: is the number of heads fixed in the "
                                "code? Use the n_heads argument (self.h = n_heads)")
    expect_shape(w, (2, 3, 4, 5), what, "keep the softmax weights of every head: (B, h, Lq, Lk)")
    d_k = 4
    Wq, Wk = ref.in_proj_weight[:12].detach(), ref.in_proj_weight[12:24].detach()
    bq, bk = ref.in_proj_bias[:12].detach(), ref.in_proj_bias[12:24].detach()
    q, k = _heads_of(F.linear(query, Wq, bq), 3), _heads_of(F.linear(memory, Wk, bk), 3)  # (B, h, L, d_k)
    scores = q @ k.transpose(-2, -1) / d_k ** 0.5  # (B, h, Lq, Lk)
    q0, k0 = _heads_of(F.linear(query, Wq), 3), _heads_of(F.linear(memory, Wk), 3)  # without the biases
    expect_close(w, expected, what, hint="keep the softmax weights (after masking) of each head",
                 mistakes={"the scores were kept, not the softmax weights": scores,
                           "the scores were kept after masking, not the softmax weights":
                               scores.masked_fill(~real[:, None, None, :], -1e9),
                           "the weights were computed without the mask": torch.softmax(scores, -1),
                           IN_BIAS: torch.softmax((q0 @ k0.transpose(-2, -1) / d_k ** 0.5).masked_fill(
                               ~real[:, None, None, :], -1e9), -1)})


@register("MultiHeadAttention", "dropout acts on the attention weights in train mode and is off in eval mode")
def _mha_dropout(MHA):
    with seeded(15):
        x = torch.randn(2, 4, 8)
    # eval mode: a module built with dropout=0.5 equals PyTorch's without dropout
    mha, ref = _pair(MHA, 8, 2, dropout=0.5, seed=5)
    what = "MultiHeadAttention(8, 2, dropout=0.5).eval()(x, x, x)"
    with torch.no_grad():
        expected = ref(x, x, x, need_weights=False)[0]
        first, second = _forward(mha, x, x, x, what=what), _forward(mha, x, x, x, what=what)
        expect_no_dropout_in_eval(first, second, what, lambda: _eval_dropout_hint(mha, x))
        expect_close(first, expected, what, hint="in eval mode it must equal nn.MultiheadAttention without "
                                                 "dropout",
                     mistakes=_mistakes(ref, x, x, x))
    # train mode with p = 1: every attention weight is dropped, so each head's output is 0 and only w_o's bias
    # is left
    mha, ref = _pair(MHA, 8, 2, dropout=1.0, seed=6)
    mha.train()
    what = "MultiHeadAttention(8, 2, dropout=1.0).train()(x, x, x)"
    with torch.no_grad():
        got = _forward(mha, x, x, x, what=what)
        if isinstance(got, torch.Tensor) and got.shape == (2, 4, 8) and not torch.isfinite(got).all():
            return _dropout_half(MHA)  # a hand-written dropout, w * keep / (1 - p), is 0/0 at p = 1
        b_o = mha.w_o.bias.detach().expand(2, 4, 8)
        expect_all_dropped(got, b_o, lambda: _forward(mha, x, x, x, what=what), 16, what, "weight")
        W, b = ref.in_proj_weight.detach(), ref.in_proj_bias.detach()
        v = _heads_of(F.linear(x, W[16:], b[16:]), 2)
        uniform = torch.ones(2, 2, 4, 4) / 4 @ v  # the scores dropped (all 0): uniform weights
        expect_close(got, b_o, what,
                     hint="apply dropout to the attention weights (pass it to scaled_dot_product_attention), "
                          "once, as nn.MultiheadAttention does: with p=1 all weights are dropped and only "
                          "w_o.bias remains",
                     mistakes={"dropout applied after w_o (to the output) instead of to the attention "
                               "weights: the residual connection adds that dropout "
                               "later": torch.zeros(2, 4, 8),
                               "dropout not applied: pass self.dropout to the attention (on its weights)":
                                   _manual(ref, x, x, x),
                               "dropout applied to the scores before the softmax (p=1 zeroes them: uniform "
                               "weights): apply it to the softmax's weights":
                                   F.linear(_merge_ref(uniform), ref.out_proj.weight,
                                            ref.out_proj.bias).detach()})
    _dropout_half(MHA)


def _eval_dropout_hint(mha, x) -> str:
    """Why dropout acts in eval mode: the nn.Dropout modules one more forward call runs say whether one is
    built inside forward (a new module each call, in training mode, which mha.eval() never reaches)."""
    called = []
    handle = register_module_forward_pre_hook(
        lambda m, args: called.append(m) if "Dropout" in type(m).__name__ else None)
    try:
        with torch.no_grad():
            mha(x, x, x)
    except Exception:
        pass
    finally:
        handle.remove()
    own = {id(m) for m in mha.modules()}
    if any(id(m) not in own for m in called):
        return ("the nn.Dropout is built inside forward: a new module at every call, always in training "
                "mode, that .eval() never reaches; build it once in __init__, self.dropout = "
                "nn.Dropout(dropout), and use self.dropout in forward")
    return ("dropout still acts in eval mode: use an nn.Dropout module built in __init__ (off after "
            ".eval()), not F.dropout(..., training=True)")


def _merge_ref(x: torch.Tensor) -> torch.Tensor:
    """(B, h, L, d_k) -> (B, L, h * d_k), written as a concatenation of the heads."""
    return torch.cat(x.unbind(1), dim=-1)


def _dropout_half(MHA):
    """Dropout's place at p = 0.5 in train mode: with w_o undone, each head's output at each query must be
    dropout(weights) @ v, i.e. sum over a subset S of the keys of 2 * w_j * v_j (every weight kept and
    doubled, or dropped). Dropout on v, q, k, the scores or the output gives something else."""
    mha, ref = _pair(MHA, 8, 2, dropout=0.5, seed=7)
    mha.train()
    with seeded(17):
        x = torch.randn(2, 4, 8)
    what = "MultiHeadAttention(8, 2, dropout=0.5).train()(x, x, x)"
    with torch.no_grad(), seeded(18):
        got = expect_shape(_forward(mha, x, x, x, what=what), (2, 4, 8), what)
    if not torch.isfinite(got).all():
        raise CheckFailure(f"{what}: {(~torch.isfinite(got)).sum().item()} values are NaN or inf",
                           "finite values",
                           "NaN or inf", "dropout: keep each weight with probability 1 - p and scale it by 1 "
                                         "/ (1 - p); nn.Dropout(dropout) does it (and gives zeros at p = 1)")
    W, b = ref.in_proj_weight.detach().double(), ref.in_proj_bias.detach().double()
    Wo, bo = ref.out_proj.weight.detach().double(), ref.out_proj.bias.detach().double()
    xd = x.double()
    q, k, v = (_heads_of(F.linear(xd, W[i * 8:(i + 1) * 8], b[i * 8:(i + 1) * 8]), 2) for i in range(3))
    weights = torch.softmax(q @ k.transpose(-2, -1) / 2.0, -1)  # (B, h, L, L), d_k = 4
    heads = _heads_of(torch.linalg.solve(Wo, (got.double() - bo).reshape(-1, 8).T).T.reshape(2, 4, 8), 2)
    # (16, Lk)
    subsets = torch.tensor([[(s >> j) & 1 for j in range(4)] for s in range(16)], dtype=torch.float64)
    candidates = torch.einsum("sk,bhqk,bhkd->sbhqd", subsets, 2 * weights, v)  # (16, B, h, Lq, d_k)
    # the best subset per (b, h, query)
    err = ((candidates - heads).abs() / (1 + heads.abs())).amax(-1).amin(0)
    if bool((err > 1e-3).any()):
        raise CheckFailure(what, "each head's output dropout(weights) @ v: every attention weight kept "
                                 "(scaled by 1 / (1 - p) = 2) or dropped", "something else",
                           "dropout must act on the attention weights, after the softmax and before "
                           "multiplying by v: not on v, q, k, the scores or the output (pass self.dropout to "
                           "scaled_dot_product_attention)")

