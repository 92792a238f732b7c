"""Stage 08: the encoder layer and stack, against nn.TransformerEncoderLayer / nn.TransformerEncoder with
copied weights, with the classic mistakes named.

The references' parameters are all randomized (LayerNorm weights and every bias included), so that a
missing, extra or misplaced norm and a swapped sublayer show in the numbers. The learner's modules get
the reference's weights through the contract's attribute names (self_attn.w_q ..., feed_forward.w_1/w_2,
sublayers[i].norm), so the checks depend on the layout of this stage only. The wrong variants that
name a mistake come from a small functional reference written out below from the paper (section 3.1).
Beyond the numbers: the gradients (nothing under torch.no_grad or detached), the caller's x and masks left
unchanged, a second batch through the same module (nothing kept from an earlier call), and, with dropout=1.0,
no dropout outside the sublayers. Stages 09 and 10 reuse these helpers. The checks themselves are in
stage08_encoder_layer.py (EncoderLayer) and stage08_encoder_stack.py (Encoder).
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from ..explain import _describe_exception
from ..registry import CheckFailure, forbid
from ._util import as_module, close, expect_close, expect_shape, expect_still_training, seeded

# the lesson's own work, which PyTorch's Transformer modules must not do for the learner
TORCH_TRANSFORMER = ("torch.nn.TransformerEncoderLayer", "torch.nn.TransformerEncoder",
                     "torch.nn.TransformerDecoderLayer", "torch.nn.TransformerDecoder",
                     "torch.nn.Transformer")
forbid(("EncoderLayer", "Encoder"), "PyTorch's nn.Transformer modules (nn.TransformerEncoderLayer, "
                                    "nn.TransformerEncoder, ...)",
       functions=("_transformer_encoder_layer_fwd",), classes=TORCH_TRANSFORMER)

PAD = 0                    # the contract's <pad> id
D, H, FF = 16, 4, 32       # small sizes: d_model, n_heads, d_ff
NAMES_HINT = ("name the parts as the contract does (self_attn.w_q, .w_k, .w_v, .w_o; feed_forward.w_1, .w_2; "
              "sublayers[i].norm.weight and .bias) so that weights can be copied from PyTorch's modules")


# ------------------------------------------------------------------------- copying weights in
def get_path(module, path: str, what: str):
    """module.a.b.0.c, failing with the contract's names when a step is missing."""
    obj = module
    for part in path.split("."):
        if part.isdigit() and isinstance(obj, (nn.ModuleList, nn.Sequential, list, tuple)):
            obj = obj[int(part)] if int(part) < len(obj) else None
        else:
            obj = getattr(obj, part, None)
        if obj is None:
            raise CheckFailure(f"{what}: attribute `{path}`", "it to exist (the contract's attribute names)",
                               f"no `{part}` there", NAMES_HINT)
    return obj


def copy_into(module, path: str, value: torch.Tensor, what: str) -> None:
    p = get_path(module, path, what)
    if not isinstance(p, torch.Tensor) or tuple(p.shape) != tuple(value.shape):
        got = f"shape {tuple(p.shape)}" if isinstance(p, torch.Tensor) else type(p).__name__
        raise CheckFailure(f"{what}: `{path}`", f"a tensor of shape {tuple(value.shape)}", got,
                           "build the parts with the sizes of the contract (nn.Linear(d_model, d_model) for "
                           "attention, nn.Linear(d_model, d_ff) then nn.Linear(d_ff, d_model), norms of "
                           "d_model)")
    with torch.no_grad():
        p.copy_(value)


def copy_mha(module, prefix: str, ref: nn.MultiheadAttention, what: str) -> None:
    d = ref.embed_dim
    for i, n in enumerate("qkv"):
        copy_into(module, f"{prefix}.w_{n}.weight", ref.in_proj_weight[i * d:(i + 1) * d], what)
        copy_into(module, f"{prefix}.w_{n}.bias", ref.in_proj_bias[i * d:(i + 1) * d], what)
    copy_into(module, f"{prefix}.w_o.weight", ref.out_proj.weight, what)
    copy_into(module, f"{prefix}.w_o.bias", ref.out_proj.bias, what)


def copy_layer(ours, ref, what: str) -> None:
    """nn.TransformerEncoderLayer / nn.TransformerDecoderLayer -> the learner's layer, by the contract's
    names."""
    copy_mha(ours, "self_attn", ref.self_attn, what)
    norms = [ref.norm1, ref.norm2]
    if isinstance(ref, nn.TransformerDecoderLayer):
        copy_mha(ours, "cross_attn", ref.multihead_attn, what)
        norms.append(ref.norm3)
    for name, lin in (("w_1", ref.linear1), ("w_2", ref.linear2)):
        copy_into(ours, f"feed_forward.{name}.weight", lin.weight, what)
        copy_into(ours, f"feed_forward.{name}.bias", lin.bias, what)
    for i, norm in enumerate(norms):
        copy_into(ours, f"sublayers.{i}.norm.weight", norm.weight, what)
        copy_into(ours, f"sublayers.{i}.norm.bias", norm.bias, what)


def without_affine(norm) -> str | None:
    """For a norm module that lacks its weight or its bias (nn.LayerNorm(d, elementwise_affine=False),
    bias=False): what `got` says of it; None for anything else (no norm at all, the identity)."""
    missing = [n for n in ("weight", "bias") if not isinstance(getattr(norm, n, None), torch.Tensor)]
    if not isinstance(norm, nn.Module) or "norm" not in type(norm).__name__.lower() or not missing:
        return None
    return f"{type(norm).__name__} without its {' and '.join(missing)}" + \
        (" (elementwise_affine=False)" if getattr(norm, "elementwise_affine", True) is False else "")


NO_AFFINE = ("the pre-norm {stack}'s final norm has no weight and bias of its own (nn.LayerNorm(d_model, "
             "elementwise_affine=False) or bias=False?): build it as LayerNorm(d_model), with the learned "
             "weight and bias that every LayerNorm of the model has")


def copy_final_norm(ours, ref_norm: nn.LayerNorm, what: str, stack: str, more: str = "") -> None:
    norm = getattr(ours, "norm", None)
    if not isinstance(getattr(norm, "weight", None), torch.Tensor) or \
            not isinstance(getattr(norm, "bias", None), torch.Tensor):
        bare = without_affine(norm)
        raise CheckFailure(f"{what}: `norm` with norm_first=True",
                           "a LayerNorm(d_model) after the last layer",
                           bare or (type(norm).__name__ if norm is not None else "no `norm`"),
                           NO_AFFINE.format(stack=stack) if bare else
                           f"final norm missing in the pre-norm {stack}: each pre-norm layer ends with a "
                           "residual sum that is never normalized, so the stack needs its own LayerNorm at "
                           f"the end{more}")
    copy_into(ours, "norm.weight", ref_norm.weight, what)
    copy_into(ours, "norm.bias", ref_norm.bias, what)


def randomize(module: nn.Module) -> nn.Module:
    """Every parameter random: matrices ~ N(0, 1/fan_in), biases ~ N(0, 0.2^2), LayerNorm weights in [0.5,
    1.5]."""
    with torch.no_grad():
        for m in module.modules():
            for name, p in m.named_parameters(recurse=False):
                if isinstance(m, nn.LayerNorm) and name == "weight":
                    p.uniform_(0.5, 1.5)
                elif p.dim() > 1:
                    p.normal_(0.0, p.size(-1) ** -0.5)
                else:
                    p.normal_(0.0, 0.2)
    return module


# dropout=0.0 and train mode: the same numbers as eval, and PyTorch stays off its fused fast path
def ref_encoder_layer(norm_first: bool, seed: int) -> nn.TransformerEncoderLayer:
    with seeded(seed):
        ref = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first)
        return randomize(ref).train()


def ref_encoder(n_layers: int, norm_first: bool, seed: int) -> nn.TransformerEncoder:
    """nn.TransformerEncoder; its final LayerNorm only for pre-norm (the post-norm paper model has none)."""
    with seeded(seed):
        layer = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first)
        ref = nn.TransformerEncoder(layer, n_layers, norm=nn.LayerNorm(D) if norm_first else None,
                                    enable_nested_tensor=False)
        return randomize(ref).train()  # the clones start equal: randomize each layer


# ------------------------------------------------------------------ a functional reference
def mha(m: nn.MultiheadAttention, query, key, value, allowed=None):
    """nn.MultiheadAttention `m`'s weights, written out; `allowed` is bool, True = may attend."""
    d, h = m.embed_dim, m.num_heads

    def proj(x, i):  # (B, L, d) -> (B, h, L, d_k)
        B, L, _ = x.shape
        y = F.linear(x, m.in_proj_weight[i * d:(i + 1) * d], m.in_proj_bias[i * d:(i + 1) * d])
        return y.view(B, L, h, d // h).transpose(1, 2)

    out = F.scaled_dot_product_attention(proj(query, 0), proj(key, 1), proj(value, 2), attn_mask=allowed)
    B, _, Lq, _ = out.shape
    return m.out_proj(out.transpose(1, 2).reshape(B, Lq, d))


def with_heads(ref, h: int):
    """A copy of ref whose attention modules split into h heads (mha reads num_heads): what a layer computes
    when it builds its attention with another head count than n_heads."""
    other = copy.deepcopy(ref)
    for m in other.modules():
        if isinstance(m, nn.MultiheadAttention):
            m.num_heads, m.head_dim = h, m.embed_dim // h
    return other


def heads_mistakes(layer_fn, ref) -> dict:
    """layer_fn(ref) -> a layer's output from ref's weights; the same with every other head count that
    divides D."""
    return {f"n_heads not passed on to MultiHeadAttention: {h} heads computed where {H} were asked (a head "
            "count written into the code?); build it with MultiHeadAttention(d_model, n_heads, dropout)":
            layer_fn(with_heads(ref, h)) for h in range(1, D + 1) if D % h == 0 and h != H}


def ffn(ref, x):
    return ref.linear2(F.relu(ref.linear1(x)))


def sublayer(x, f, norm, mode: str):
    if mode == "post":                 # the paper: LayerNorm(x + Sublayer(x))
        return norm(x + f(x))
    if mode == "pre":                  # x + Sublayer(LayerNorm(x))
        return x + f(norm(x))
    if mode == "post-no-residual":
        return norm(f(x))
    if mode == "pre-no-residual":
        return f(norm(x))
    if mode == "pre-normed-residual":  # the residual taken after the norm
        n = norm(x)
        return n + f(n)
    if mode == "norm-inside":          # x + LayerNorm(Sublayer(x))
        return x + norm(f(x))
    if mode == "no-norm":              # x + Sublayer(x), the LayerNorm forgotten
        return x + f(x)
    raise ValueError(mode)


def enc_layer_ref(ref, x, allowed, mode="post", order="af", norms=(0, 1)):
    """An encoder layer from ref's weights: step k ("a" self-attention, "f" feed-forward) uses norm
    norms[k]."""
    parts = {"a": lambda y: mha(ref.self_attn, y, y, y, allowed), "f": lambda y: ffn(ref, y)}
    ns = (ref.norm1, ref.norm2)
    for step, k in zip(order, norms):
        x = sublayer(x, parts[step], ns[k], mode)
    return x


def layer_mistakes(layer_fn, norm_first: bool) -> dict:
    """The classic mistakes of one layer; layer_fn(mode=..., order=..., norms=...) computes a variant."""
    out = {}
    if norm_first:
        out["norm_first ignored: post-norm LayerNorm(x + sublayer(x)) computed where pre-norm "
            "x + sublayer(LayerNorm(x)) was asked (pass norm_first on to the sublayer connections)"] = \
            layer_fn(mode="post")
        out["pre-norm residual taken after the norm: n = norm(x); n + sublayer(n) instead of "
            "x + sublayer(norm(x))"] = layer_fn(mode="pre-normed-residual")
        out["residual connection missing: sublayer(norm(x)) instead of x + sublayer(norm(x))"] = \
            layer_fn(mode="pre-no-residual")
        out["LayerNorm missing: x + sublayer(x) where pre-norm is x + dropout(sublayer(LayerNorm(x))) (the "
            "sublayer connection's norm is never applied)"] = layer_fn(mode="no-norm")
    else:
        out["pre-norm computed where post-norm was asked (norm_first=False is the paper's "
            "LayerNorm(x + sublayer(x)))"] = layer_fn(mode="pre")
        out["residual connection missing: LayerNorm(sublayer(x)) instead of LayerNorm(x + sublayer(x))"] = \
            layer_fn(mode="post-no-residual")
        out["LayerNorm applied to the sublayer's output only: x + LayerNorm(sublayer(x)) instead of "
            "LayerNorm(x + sublayer(x))"] = layer_fn(mode="norm-inside")
        out["LayerNorm missing: x + sublayer(x) is never normalized; post-norm is "
            "LayerNorm(x + dropout(sublayer(x)))"] = layer_fn(mode="no-norm")
    return out


def close_at(got, expected, real, what, hint=None, mistakes=None):
    """expect_close at the real (non-padding) positions only: got and expected (B, L, d), real (B, L) bool.
    Padding positions are set equal to the expected ones, so indices in the message are (b, position,
    feature)."""
    got = expect_shape(got, expected.shape, what, hint)
    keep = real[..., None]

    def at_real(t):
        return torch.where(keep, t, expected)
    expect_close(at_real(got), expected, what + " at the real (non-padding) positions", hint=hint,
                 mistakes={k: at_real(v) for k, v in (mistakes or {}).items()})


def ids_with_lengths(lengths, L, seed, low=4, high=20):
    with seeded(seed):
        ids = torch.randint(low, high, (len(lengths), L))
    for b, n in enumerate(lengths):
        ids[b, n:] = PAD
    return ids


def key_mask(ids):
    """(B, L) ids -> (B, 1, 1, L), True at real tokens (may attend)."""
    return (ids != PAD)[:, None, None, :]


def inverted(allowed: torch.Tensor) -> torch.Tensor:
    """What attention computes when the code hands it ~mask (or mask == 0): the allowed keys hidden, the
    others allowed. Additive, so that a query left with no key gets uniform weights, as masked_fill with a
    large negative number gives it, rather than PyTorch's NaN for a row of False."""
    return torch.zeros(allowed.shape).masked_fill(allowed, torch.finfo(torch.float32).min)


MASK_RESHAPED = ("it works without the mask and fails with it: the course's masks are already 4-d, (B, 1, 1, "
                 "L) or (B, 1, L, L), and broadcast over the heads as they are; pass the mask on unchanged "
                 "(no mask.unsqueeze(1), no view or reshape: that habit belongs to code whose masks are 3-d)")


def keeps_input(fn, x: torch.Tensor, what: str, masks=(), without=None):
    """fn(), failing when it changed x in place (the caller's tensor: the embeddings, or the previous layer's
    output), or one of `masks` ((name, tensor) pairs: the same mask goes on to every layer, and to the
    decoder). When fn() raises and `without` (the same call with no mask) works, the mask's shape was changed
    on the way: say so."""
    before = x.clone()
    masks_before = [(name, m, m.clone()) for name, m in masks if isinstance(m, torch.Tensor)]
    try:
        out = fn()
    except (RuntimeError, ValueError, IndexError) as e:
        if without is None or not masks_before:
            raise
        try:
            without()
        except Exception:  # noqa: BLE001  (it fails without the mask too: the mask is not the cause)
            raise e from None
        shapes = ", ".join(f"{name} of shape {tuple(m.shape)}" for name, m, _ in masks_before)
        raise CheckFailure(f"{what}: with {shapes}", "it to work", f"{type(e).__name__}: {str(e)[:90]}",
                           MASK_RESHAPED) from None
    if x.shape != before.shape or not torch.equal(x, before):
        raise CheckFailure(f"{what}: the input x after the call", "unchanged", "changed in place",
                           "an in-place operation on x (x += ..., x.copy_(...), x[...] = ...) changes the "
                           "caller's tensor: write x = x + ... (a new tensor)")
    for name, m, m_before in masks_before:
        if m.shape != m_before.shape or m.dtype != m_before.dtype or not torch.equal(m, m_before):
            raise CheckFailure(f"{what}: the caller's {name} after the call", "unchanged", "changed in place",
                               MASK_CHANGED.format(name=name))
    return out


MASK_CHANGED = ("an in-place operation on {name} ({name}.unsqueeze_(...), {name}.logical_not_(), {name} &= "
                "..., {name}[...] = ...) changes the caller's mask, which the next layer (and the decoder) "
                "gets too: build a new tensor ({name} = ~{name}, {name} = {name}.unsqueeze(1), ...)")
STATE = ("the same module gave a wrong answer on a second batch: something from an earlier call is kept (a "
         "mask or a tensor saved on self and reused?); use the arguments of each call")
IN_PLACE_GRAD = ("an in-place operation (x += ..., memory.mul_(...), a `_` method, out=...) on an input or "
                 "on a tensor autograd still needs breaks the backward pass, so training would crash: "
                 "compute new tensors instead")
NO_GRAD = ("the output is cut off from autograd: forward runs under torch.no_grad() (or detaches its result, "
           "or rebuilds it with .data, torch.tensor(...) or numpy), so no parameter would ever be trained")


def same_gradients(mine, ref, inputs, real, what, seed=0, module=None):
    """The gradients of a random weighted sum of the real positions' outputs (B, L, d) with respect to each
    input ((name, tensor) pairs, handed to mine and ref in that order) agree with the reference's: nothing cut
    off from autograd (torch.no_grad, .detach(), .data) on the way. loss.backward() on the learner's side
    (torch.autograd.grad refuses a reentrant torch.utils.checkpoint): the module is the check's own, its
    parameters' .grad do not matter. `module`, built with dropout=0.0 and in train mode, is the one `mine`
    runs: its eval-mode values matched already, so train-mode values that differ mean a dropout rate other
    than the argument (MultiHeadAttention(d_model, n_heads) with its default 0.1); the dropout check names
    that, and the gradients are compared in eval mode."""
    mine_in = [t.detach().clone().requires_grad_(True) for _, t in inputs]
    try:
        out = mine(*mine_in)
    except RuntimeError as e:
        if "in-place" not in str(e) and "inplace" not in str(e):
            raise
        raise CheckFailure(f"{what} with inputs that require a gradient", None,
                           f"an error: {_describe_exception(e)}",
                           IN_PLACE_GRAD) from None
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        raise CheckFailure(f"{what}: its gradient", "an output connected to autograd (out.requires_grad is "
                                                    "True)",
                           "an output without a gradient (requires_grad is False)", NO_GRAD)
    ref_in = [t.detach().clone().requires_grad_(True) for _, t in inputs]
    expected = ref(*ref_in)
    if module is not None and module.training and out.shape == expected.shape:
        keep = real[..., None]
        if not close(torch.where(keep, out, 0.0), torch.where(keep, expected, 0.0)):
            module.eval()
            try:
                return same_gradients(mine, ref, inputs, real, what, seed)
            finally:
                module.train()
    with seeded(seed):
        w = torch.randn(expected.shape) * real[..., None]
    try:
        (out * w).sum().backward()
        got = [t.grad for t in mine_in]
    except RuntimeError as e:
        if "in-place" not in str(e) and "inplace" not in str(e):
            raise
        raise CheckFailure(f"{what}: its backward pass", None, f"an error: {_describe_exception(e)}",
                           IN_PLACE_GRAD) from None
    want = torch.autograd.grad((expected * w).sum(), ref_in, allow_unused=True)
    for (name, _), g, r in zip(inputs, got, want):
        if g is None or not bool(g.abs().sum() > 0):
            raise CheckFailure(f"{what}: the gradient with respect to {name}",
                               "a gradient (the output depends on it)",
                               "none", f"{name} is cut off from autograd on its way ({name}.detach(), "
                                       f"{name}.data, torch.no_grad() around the part that uses it): the "
                                       "loss could not train what comes before it")
        if not close(g, r, atol=1e-4, rtol=1e-3):
            raise CheckFailure(f"{what}: the gradient with respect to {name}", "the same as PyTorch's",
                               "a different gradient", f"part of the computation is cut off from autograd (a "
                               f".detach() or .data on {name} or on the residual path, torch.no_grad() "
                               "around a sublayer): the values match, the gradients do not")


def check_parameters_registered(module, parts, what):
    """Every parameter of `parts` must be among module.parameters() (not hidden in a plain list)."""
    registered = {id(p) for p in module.parameters()}
    for name, part in parts:
        if isinstance(part, nn.Module) and any(id(p) not in registered for p in part.parameters()):
            raise CheckFailure(f"{what}: parameters of `{name}`", "registered in the module's parameters()",
                               "missing from parameters()",
                               f"`{name}` kept in a plain Python list: use nn.ModuleList so that its "
                               "parameters are registered (trained by the optimizer, moved by .to(device), "
                               "saved in state_dict)")


def check_distinct(parts, what, kind, hint=None):
    """parts: list of (name, module). No two are the same object or share a parameter tensor."""
    for i, (na, a) in enumerate(parts):
        for nb, b in parts[i + 1:]:
            if a is b:
                raise CheckFailure(f"{what}: {na} and {nb}", f"two distinct {kind}", "the same object twice",
                                   hint or f"one {kind[:-1]} object repeated: [Module(...)] * n repeats ONE "
                                           "module n times; build a new one each time ([Module(...) for _ "
                                           "in range(n)], or copy.deepcopy)")
            pa = {p.data_ptr() for p in a.parameters()}
            if pa & {p.data_ptr() for p in b.parameters()}:
                raise CheckFailure(f"{what}: {na} and {nb}", f"{kind} with their own parameters",
                                   "they share parameter tensors",
                                   hint or f"one set of parameters shared between {kind}: build each with "
                                           "its own modules")


def check_layer_parts(layer, what, cross: bool):
    """self_attn (+ cross_attn), feed_forward and sublayers with their own norms, by the contract's names."""
    as_module(layer, what)
    n_sub = 3 if cross else 2
    attns = ["self_attn"] + (["cross_attn"] if cross else [])
    for a in attns:
        for n in "qkvo":
            p = get_path(layer, f"{a}.w_{n}.weight", what)
            expect_shape(p, (D, D), f"{what}: {a}.w_{n}.weight",
                         "attention projections are nn.Linear(d_model, d_model)")
    expect_shape(get_path(layer, "feed_forward.w_1.weight", what), (FF, D),
                 f"{what}: feed_forward.w_1.weight",
                 "feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout): w_1 is nn.Linear(d_model, "
                 "d_ff)")
    subs = get_path(layer, "sublayers", what)
    if not hasattr(subs, "__len__") or len(subs) != n_sub:
        raise CheckFailure(f"{what}: `sublayers`", f"{n_sub} SublayerConnections",
                           f"{len(subs) if hasattr(subs, '__len__') else type(subs).__name__}",
                           "one SublayerConnection per sublayer: " + ("self-attention, cross-attention, "
                                                                      "feed-forward"
                                                                      if cross else "self-attention, "
                                                                                    "feed-forward"))
    for i in range(n_sub):
        expect_shape(get_path(layer, f"sublayers.{i}.norm.weight", what), (D,),
                     f"{what}: sublayers[{i}].norm.weight")
    check_distinct([(f"sublayers[{i}]", subs[i]) for i in range(n_sub)], what, "sublayer connections")
    check_distinct([(f"sublayers[{i}].norm", subs[i].norm) for i in range(n_sub)], what, "LayerNorms")
    if cross:
        check_distinct([("self_attn", layer.self_attn), ("cross_attn", layer.cross_attn)], what,
                       "attention modules",
                       "self_attn and cross_attn are one module (or share weights): build two "
                       "MultiHeadAttention modules, self-attention and cross-attention learn different "
                       "projections")
    check_parameters_registered(layer, [("sublayers", subs[i]) for i in range(n_sub)] +
                                [(a, getattr(layer, a)) for a in attns + ["feed_forward"]], what)


def check_dropout(make, call, what):
    """make(dropout) -> module; call(module) -> output. Dropout active in train mode, off in eval mode,
    and the dropout argument used (dropout=0.0 in train mode changes nothing)."""
    m = make(0.5)
    m.eval()
    e1, e2 = call(m), call(m)
    if not torch.equal(e1, e2):
        raise CheckFailure(f"{what}, dropout=0.5, in eval mode: two calls", "the same output",
                           "different outputs",
                           "dropout still active in eval mode: use nn.Dropout modules (they switch off with "
                           ".eval()), or F.dropout(x, p, training=self.training); modules kept in a plain "
                           "Python list are not reached by .eval() either")
    m.train()
    with seeded(11):
        t = call(m)
    expect_still_training(m, what, "module")
    if torch.allclose(t, e1):
        raise CheckFailure(f"{what}, dropout=0.5, in train mode", "an output changed by dropout",
                           "the same output as in eval mode",
                           "the dropout argument is not used: pass it on to the sublayer connections, the "
                           "attention and the feed-forward network")
    z = make(0.0)
    z.eval()
    ze = call(z)
    z.train()
    with seeded(12):
        zt = call(z)
    if not torch.allclose(zt, ze, atol=1e-6):
        raise CheckFailure(f"{what}, dropout=0.0, in train mode", "the same output as in eval mode",
                           "a different output",
                           "the dropout argument is ignored somewhere (a fixed rate such as 0.1 is used "
                           "instead)")


def part_calls(x, memory=None):
    """(name, how it is built, call) for a layer's sublayer modules, each called alone on x (cross_attn on
    memory)."""
    calls = [("self_attn", "MultiHeadAttention(d_model, n_heads, dropout)", lambda a: a(x, x, x, None))]
    if memory is not None:
        calls.append(("cross_attn", "MultiHeadAttention(d_model, n_heads, dropout)",
                      lambda a: a(x, memory, memory, None)))
    return calls + [("feed_forward", "PositionwiseFeedForward(d_model, d_ff, dropout)", lambda f: f(x))]


def check_parts_drop(layer, calls, what):
    """layer: built with dropout=0.5; calls: part_calls(...). Each part must drop on its own in train mode
    (the attention its weights, the feed-forward its hidden units): dropout=1.0 drops the whole sublayer
    output in the connection and 0.5 changes the layer's output there too, which hides a part built with
    dropout 0.0. Parts that are not modules or cannot be called as the contract's are left alone (the other
    checks judge them)."""
    for name, built, call in calls:
        part = getattr(layer, name, None)
        if not isinstance(part, nn.Module):
            continue
        try:
            with torch.no_grad():
                kept = call(part.eval())
                with seeded(17):
                    dropped = call(part.train())
        except NotImplementedError:
            raise
        except Exception:  # noqa: BLE001  (not called as the contract's module: another design)
            continue
        if isinstance(kept, torch.Tensor) and isinstance(dropped, torch.Tensor) and \
                kept.shape == dropped.shape and torch.allclose(kept, dropped):
            inside = "feed-forward's hidden units" if name == "feed_forward" else "attention weights"
            raise CheckFailure(f"{what}.train() with dropout=0.5: `{name}` called on its own",
                               f"an output changed by dropout (the {inside} dropped)",
                               "the same output as in eval mode",
                               f"`{name}` ignores the dropout argument (built with a rate of 0.0?): the "
                               f"{inside} are never dropped; build it with {built}")


class _Constant(nn.Module):
    """Stands in for a sublayer's module (attention, feed-forward): `value` everywhere, in its first
    input's shape."""

    def __init__(self, value: float):
        super().__init__()
        self.value, self.calls = value, 0

    def forward(self, *args, **kwargs):
        self.calls += 1
        first = args[0] if args else next(iter(kwargs.values()))
        return torch.full_like(first, self.value)


def check_sublayer_dropout(layer, call, x, parts, what):
    """layer: a pre-norm layer built with dropout=0.5 (one that computes the right numbers); parts: the names
    of its sublayer modules, in order. Each is replaced by the constant 10^k, so that in train mode out - x is
    the sum of the sublayers' dropped outputs, each 0 or 2 * 10^k: one decimal digit per sublayer, 0 or 2. A 4
    means that sublayer's output went through two dropouts (an extra nn.Dropout in the lambda, or in the layer
    around the call). Layers that use their parts in another way (their weights directly, one call per
    sentence) are left alone."""
    for k, name in enumerate(parts):
        setattr(layer, name, _Constant(10.0 ** k))
    layer.train()
    try:
        with seeded(15), torch.no_grad():
            out = call(layer)
    except NotImplementedError:
        raise
    except Exception:  # noqa: BLE001  (the parts are not called as modules of the contract's signature)
        return
    if not isinstance(out, torch.Tensor) or out.shape != x.shape or \
            any(getattr(layer, n).calls != 1 for n in parts):
        return
    delta = (out - x).double()
    whole = delta.round()
    if not torch.allclose(delta, whole, atol=1e-3) or bool((whole < 0).any()):
        return
    for k, name in enumerate(parts):
        digit = (whole // 10 ** k) % 10
        if bool(((digit == 4) | (digit == 8)).any()):
            raise CheckFailure(f"{what}.train() with dropout=0.5: the {name} sublayer's output as it reaches "
                               "the residual sum", "0 or 2 x the output (one dropout of rate 0.5)",
                               f"{int(digit.max())} x the output at some positions (dropped twice)",
                               f"a second dropout on the {name} sublayer's output (an nn.Dropout in the "
                               f"lambda or around self.{name}(...)): the sublayer connection already applies "
                               "dropout to the sublayer's output; add none of your own")


# ------------------------------------------------------------ stacks (Encoder's, and stage 09's Decoder's)
def stack_layers(stack, what, n_layers, causes: dict | None = None):
    """stack.layers, n_layers of them; `causes`: {a wrong number of layers: the mistake that gives it}."""
    layers = get_path(stack, "layers", what)
    if not hasattr(layers, "__len__") or len(layers) != n_layers:
        count = len(layers) if hasattr(layers, "__len__") else None
        if count == H != n_layers:  # every stack the checks build has H heads
            causes = {H: f"n_heads ({H}) layers: n_heads and n_layers swapped (the arguments are (d_model, "
                         "n_heads, d_ff, n_layers, ...), in that order), or range(n_heads) for the layers",
                      **(causes or {})}
        raise CheckFailure(f"{what}: `layers`", f"{n_layers} layers", f"{count}" if count is not None else
                           type(layers).__name__, (causes or {}).get(count) or
                           "n_layers layers in an nn.ModuleList: [Layer(...) for _ in range(n_layers)]")
    return layers


def check_stack_parts(make, kind):
    """`layers`: n_layers layers, registered (an nn.ModuleList); `norm`: none in post-norm, a LayerNorm in
    pre-norm."""
    for n in (3, 1):
        stack, what = make(n)
        layers = stack_layers(stack, what, n)
        check_parameters_registered(stack, [("layers", layers[i]) for i in range(n)], what)
    post, what = make(2)
    if not hasattr(post, "norm"):
        raise CheckFailure(f"{what}: attribute `norm`", "nn.Identity() in post-norm, a LayerNorm in pre-norm",
                           "no such attribute", "keep the contract's `norm` attribute")
    if post.norm is not None and any(True for _ in getattr(post.norm, "parameters", lambda: [])()):
        raise CheckFailure(f"{what}: `norm` with norm_first=False", "nn.Identity() (no parameters)",
                           type(post.norm).__name__,
                           f"final norm present in the post-norm {kind}: each post-norm layer already ends "
                           "with a LayerNorm; the final LayerNorm belongs to the pre-norm model only")
    pre, what = make(2, norm_first=True)
    norm = getattr(pre, "norm", None)
    if not isinstance(getattr(norm, "weight", None), torch.Tensor) or tuple(norm.weight.shape) != (D,):
        bare = without_affine(norm)
        raise CheckFailure(f"{what}: `norm` with norm_first=True", f"a LayerNorm({D}) after the last layer",
                           bare or (type(norm).__name__ if norm is not None else "no `norm`"),
                           NO_AFFINE.format(stack=kind) if bare else
                           f"final norm missing in the pre-norm {kind}: the last pre-norm layer ends with a "
                           "residual sum that is never normalized")


def check_stack_distinct(make, kind):
    stack, what = make(3)
    layers = stack_layers(stack, what, 3)
    check_distinct([(f"layers[{i}]", layers[i]) for i in range(3)], what, f"{kind} layers")


def stack_mistakes(layers, run_layer, final, norm_first, default_norm):
    """Named wrong stacks. run_layer(ref_layer, x, mode=..., masked=...) -> output (x None: the stack's
    input); final: the reference's final norm or None."""
    def chain(mode, masked=lambda i: True, feed="chain", final_norm=final, layers_override=None,
              norm_each=False):
        h = None
        out = None
        for i, lay in enumerate(layers_override or layers):
            inp = h if (feed == "chain" and h is not None) else None
            out = run_layer(lay, inp, mode=mode, masked=masked(i))
            if norm_each and i < len(layers_override or layers) - 1:
                out = final_norm(out)
            h = out
            if feed == "first-only":
                break
        return final_norm(out) if final_norm is not None else out
    mode = "pre" if norm_first else "post"
    m = {}
    if norm_first:
        m["final norm missing in pre-norm: apply `norm` (a LayerNorm) to the last layer's output"] = \
            chain(mode, final_norm=None)
        m["norm_first not passed on to the layers: post-norm layers were built"] = chain("post")
        m["the final norm applied after every layer: apply `norm` once, after the "
          "loop"] = chain(mode, norm_each=True)
        m["the final norm applied twice: apply `norm` once, after the loop"] = final(chain(mode))
    else:
        m["final norm present in post-norm: a LayerNorm after the last layer (norm must be the identity when "
          "norm_first=False)"] = default_norm(chain(mode))
        m["norm_first ignored: pre-norm layers were built where post-norm was asked"] = chain("pre")
    m["one layer object repeated n times (nn.ModuleList([layer] * n)): every layer is the same module; build "
      "a new layer each time"] = chain(mode, layers_override=[layers[-1]] * len(layers))
    m["each layer applied to the stack's input instead of the previous layer's output (or the first layer "
      "skipped, range(1, n)?): only the last layer's work shows; loop over all the layers, each on the "
      "previous output"] = \
        chain(mode, feed="input")
    m["the layers applied in reverse order: self.layers[0] "
      "first"] = chain(mode, layers_override=list(layers)[::-1])
    m["only the first layer applied (a return inside the loop, or a loop that stops early: "
      "range(n - 1)?)"] = \
        chain(mode, feed="first-only")
    m["the mask is not passed to the layers"] = chain(mode, masked=lambda i: False)
    m["the mask is passed to the first layer only"] = chain(mode, masked=lambda i: i == 0)
    return m


def copies_into(stack, ref, what, n_layers, norm_first, kind) -> bool:
    """Copy ref's weights into the learner's stack; False when its parts are not named as the contract says
    (the post-norm and pre-norm checks report that)."""
    try:
        layers = stack_layers(stack, what, n_layers)
        for i in range(n_layers):
            copy_layer(layers[i], ref.layers[i], f"{what}.layers[{i}]")
        if norm_first:
            copy_final_norm(stack, ref.norm, what, kind)
    except CheckFailure:
        return False
    return True


def computes_like(module, mine, ref) -> bool:
    """Whether module, in eval mode, gives the reference's output (then a wrong output in train mode with
    dropout=1.0 is the dropout's fault alone)."""
    module.eval()
    with torch.no_grad():
        got, expected = mine(), ref()
    return isinstance(got, torch.Tensor) and close(got, expected)


def check_residual_path(got, x, ref_layers, norm_names, final, norm_first, what, stack):
    """A stack built with dropout=1.0, in train mode: every sublayer's output is dropped, so only the residual
    path is left: each post-norm layer applies its norms in turn, each pre-norm layer leaves x as it is (then
    the final norm). Dropout on the stack's input or output (the positional encoding already drops the
    embeddings) shows here."""
    h = x
    if norm_first:
        h = final(h)
    else:
        for lay in ref_layers:
            for n in norm_names:
                h = getattr(lay, n)(h)
    zero = torch.zeros_like(x)
    expect_close(got, h, what,
                 hint="with dropout=1.0 every sublayer's output is dropped and only the residual path is "
                      f"left; dropout belongs inside the layers, not on the {stack}'s input or output",
                 mistakes={f"dropout applied to the {stack}'s input: the positional encoding already drops "
                           f"the embeddings, and each sublayer drops its own output; the {stack} itself adds "
                           "no dropout":
                           final(zero) if norm_first else _post_path(ref_layers, norm_names, zero),
                           f"dropout applied to the {stack}'s output: each sublayer drops its own output; "
                           f"the {stack} itself adds no dropout": zero})


def _post_path(ref_layers, norm_names, h):
    for lay in ref_layers:
        for n in norm_names:
            h = getattr(lay, n)(h)
    return h


def default_layer_norm(x):
    return F.layer_norm(x, (x.size(-1),))
