"""Stage 02: the sinusoidal table and the module that adds it, against the paper's formula (section 3.5)
written out here in float64, with the classic mistakes named."""
from __future__ import annotations

import functools
import math
import re

import torch
from torch import nn

from ..registry import CheckFailure, register
from ._util import build, close, expect_close, expect_raises, expect_shape, fmt, seeded


# ------------------------------------------------------------------------------ the formula
def _table(max_len: int, d_model: int, how: str = "right") -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(same), in float64; or a classic mistake."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None] + (1 if how == "from_one" else 0)  # (L, 1)
    i = torch.arange(d_model // 2, dtype=torch.float64)[None, :]                                 # (1, d/2)
    exponent = {"i_over_d": i / d_model, "four_i": 4 * i / d_model, "int_div": 0 * i,
                "log10": 2 * i / d_model * (4.0 / math.log(10000.0))}.get(how, 2 * i / d_model)
    base = 1000.0 if how == "base_1000" else 10000.0
    angle = pos * base ** exponent if how == "inverted" else pos / base ** exponent              # (L, d/2)
    sin, cos = torch.sin(angle), torch.cos(angle)
    if how == "concat":
        return torch.cat([sin, cos], dim=1)
    if how == "swapped":
        sin, cos = cos, sin
    if how == "sin_only":
        cos = sin
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = sin, cos
    if how in ("column_exponent", "two_j"):  # each column j with its own angle: pos / 10000^(j/d) or ^(2j/d)
        j = torch.arange(d_model, dtype=torch.float64)[None, :]
        a = pos / 10000.0 ** ((j if how == "column_exponent" else 2 * j) / d_model)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(a[:, 0::2]), torch.cos(a[:, 1::2])
    return pe


@functools.lru_cache(maxsize=4)
def _half_precision_drift(max_len: int, d_model: int) -> float:
    """How far the right formula computed in float16 or bfloat16 (positions, 2i and the angle; in the ways
    learners write it) drifts from the table at most: what a precision problem can explain, and no more."""
    worst = 0.0
    for dtype in (torch.float16, torch.bfloat16):
        pos = torch.arange(max_len, dtype=dtype)[:, None]
        two_i = torch.arange(0, d_model, 2, dtype=dtype)
        for angle in (pos * torch.exp(-math.log(10000.0) * two_i / d_model),
                      pos / 10000.0 ** (two_i / d_model),
                      pos * 10000.0 ** (-two_i / d_model)):
            pe = torch.stack([angle.float().sin(), angle.float().cos()], dim=-1).reshape(max_len, d_model)
            worst = max(worst, (pe.double() - _table(max_len, d_model)).abs().max().item())
    return worst


def _drift(got, max_len: int, d_model: int) -> float:
    """The learner's table's largest distance from the formula (inf for anything else than such a table)."""
    if not (isinstance(got, torch.Tensor) and got.shape == (max_len, d_model) and got.is_floating_point()):
        return math.inf
    return (got.detach().double() - _table(max_len, d_model)).abs().nan_to_num(nan=math.inf).max().item()


TABLE_MISTAKES = {
    "concat": "sin and cos concatenated ([sin | cos]) instead of interleaved: sin goes to the even columns "
              "pe[:, 0::2] and cos to the odd ones pe[:, 1::2]",
    "swapped": "sin and cos swapped: sin on the even columns (0, 2, ...), cos on the odd ones",
    "i_over_d": "exponent i/d_model instead of 2i/d_model (i counts the pairs of columns: use "
                "torch.arange(0, d_model, 2) / d_model)",
    "four_i": "exponent 4i/d_model: torch.arange(0, d_model, 2) already counts 2i, so divide it by d_model "
              "without doubling it again",
    "column_exponent": "the cos column used its own index, 10000^((2i+1)/d_model): columns 2i and 2i+1 share "
                       "the angle pos / 10000^(2i/d_model)",
    "two_j": "exponent 2j/d_model with j the column index: i counts PAIRS of columns, so column 2i (and "
             "2i+1) uses 10000^(2i/d_model)",
    "from_one": "positions counted from 1: the first position is 0 (its row is [0, 1, 0, 1, ...])",
    "inverted": "pos multiplied by 10000^(2i/d_model) instead of divided by it",
    "sin_only": "cos missing: the odd columns hold cos of the same angle as the sin before them",
    "int_div": "every column got the angle pos itself: the exponent 2i/d_model was computed with integer "
               "division (2i // d_model, or integer tensors) and is 0; divide in floating point, "
               "torch.arange(0, d_model, 2, dtype=torch.float32) / d_model",
    "log10": "log10(10000) = 4 used where the natural logarithm belongs: 1/10000^(2i/d_model) = "
             "exp(-math.log(10000.0) * 2i / d_model), math.log, not math.log10",
    "base_1000": "base 1000 instead of 10000: pos / 10000^(2i/d_model)",
}


def _table_mistakes(max_len, d_model):
    return {text: _table(max_len, d_model, how) for how, text in TABLE_MISTAKES.items()}


def _expect_close_lazy(got, expected, what, hint, atol, mistakes, formula=None):
    """expect_close, the (costly) mistaken answers computed only once the answer is wrong. `formula`: the
    right computation, said beside the expected value when no known mistake gives the answer (no cause
    guessed)."""
    if isinstance(got, torch.Tensor) and got.shape == expected.shape and got.is_floating_point():
        diff = (got.detach().double() - expected).abs() - atol * (1 + expected.abs())
        if diff.max().item() <= 0:  # NaN fails this test too
            return
    try:
        expect_close(got, expected, what, hint=hint, atol=atol, rtol=atol, mistakes=mistakes, formula=formula)
    except CheckFailure as e:
        _sharpen(e, got, expected)
        raise


def _sharpen(e: CheckFailure, got, expected) -> None:
    """expect_close shows the values where they differ most with 4 significant digits: when those read the
    same (a table rounded to float16 is off by 2e-4: -2.051 and -2.051), show as many more as tell them
    apart."""
    if "values differ" not in e.what or not isinstance(e.got, str):
        return
    diff = (got.detach().double() - expected.double()).abs().nan_to_num(nan=math.inf).flatten()
    k = diff.argmax()
    want, have = expected.flatten()[k].item(), got.detach().flatten()[k].item()
    digits = next((n for n in range(4, 10) if fmt(want, n) != fmt(have, n)), 4)
    if digits > 4 and e.got == fmt(have) and e.expected.startswith(fmt(want)):
        e.expected, e.got = fmt(want, digits) + e.expected[len(fmt(want)):], fmt(have, digits)


# -------------------------------------------------------------------------------- sinusoidal_encoding
def _encode(sinusoidal_encoding, max_len, d_model):
    what = f"sinusoidal_encoding({max_len}, {d_model})"
    pe = sinusoidal_encoding(max_len, d_model)
    shape = tuple(pe.shape) if isinstance(pe, torch.Tensor) else None
    hint = "one row per position, one column per dimension: (max_len, d_model)"
    if shape == (1, max_len, d_model):
        hint = ("a leading batch axis was added (unsqueeze(0)): return the (max_len, d_model) table itself; "
                "adding it to (batch, length, d_model) broadcasts over the batch anyway")
    elif shape == (d_model, max_len) and max_len != d_model:
        hint = ("transposed, (d_model, max_len): rows are positions and columns dimensions, "
                "PE[pos, 2i] (check the order of the arguments, sinusoidal_encoding(max_len, d_model))")
    pe = expect_shape(pe, (max_len, d_model), what, hint)
    if pe.dtype not in (torch.float32, torch.float64):
        raise CheckFailure(f"{what}: dtype", "torch.float32 (or float64)", str(pe.dtype),
                           "compute the table in float32 or float64: torch.arange(max_len, "
                           "dtype=torch.float32)")
    return pe, what


SIN_FORMULA = "PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(the same angle)"


@register("sinusoidal_encoding", "returns a float tensor of shape (max_len, d_model)")
def _sin_shape(sinusoidal_encoding):
    for max_len, d_model in ((7, 6), (1, 2), (3, 10)):
        _encode(sinusoidal_encoding, max_len, d_model)


@register("sinusoidal_encoding", "gives the docstring example: sinusoidal_encoding(2, 4)")
def _sin_example(sinusoidal_encoding):
    pe, what = _encode(sinusoidal_encoding, 2, 4)
    _expect_close_lazy(pe, _table(2, 4), what + " (expected [[0, 1, 0, 1], [sin 1, cos 1, sin 0.01, cos "
                                                "0.01]])",
                       None, 1e-5, lambda: _table_mistakes(2, 4), formula=SIN_FORMULA)


@register("sinusoidal_encoding", "equals sin/cos(pos / 10000^(2i/d_model)) interleaved, for (50, 16) and "
                                 "(30, 6)")
def _sin_formula(sinusoidal_encoding):
    for max_len, d_model in ((50, 16), (30, 6)):
        pe, what = _encode(sinusoidal_encoding, max_len, d_model)
        _expect_close_lazy(pe, _table(max_len, d_model), what, None, 1e-4,
                           lambda max_len=max_len, d_model=d_model: _table_mistakes(max_len, d_model),
                           formula=SIN_FORMULA)


@register("sinusoidal_encoding", "stays accurate for the paper's d_model=512 at positions up to 127")
def _sin_large(sinusoidal_encoding):
    pe, what = _encode(sinusoidal_encoding, 128, 512)
    # a precision problem is named only when the smaller table is right, or when both tables drift from the
    # formula no more than the right formula computed in half precision does: a wrong formula (positions,
    # frequencies) is off by far more on the small table, where the precision lost is small (d_model - 1 for
    # d_model: 1.03 there)
    small = sinusoidal_encoding(50, 16)
    small_drift = _drift(small, 50, 16)
    precise = small_drift <= 1e-4 or (small_drift <= 2 * _half_precision_drift(50, 16)
                                       and _drift(pe, 128, 512) <= 2 * _half_precision_drift(128, 512))
    _expect_close_lazy(pe, _table(128, 512), what, "compute the angle in float32 or float64, "
                       "pos / 10000^(2i/d_model) = pos * exp(-ln(10000) * 2i / d_model)" if precise else None,
                       1e-3, lambda: _table_mistakes(128, 512), formula=None if precise else SIN_FORMULA)


@register("sinusoidal_encoding", "raises ValueError for an odd d_model")
def _sin_odd(sinusoidal_encoding):
    _encode(sinusoidal_encoding, 4, 6)  # an unfinished function says so first
    for d_model in (7, 1):
        expect_raises(lambda: sinusoidal_encoding(10, d_model), ValueError,  # noqa: B023 (called here, at once)
                      f"sinusoidal_encoding(10, {d_model}) (odd d_model)",
                      "sin and cos come in pairs of columns: `if d_model % 2: raise ValueError(f'd_model "
                      "must be even, got {d_model}')` first")


# --------------------------------------------------------------------------------- PositionalEncoding
def _module(cls, d_model, max_len=None, dropout=None):
    kwargs = {k: v for k, v in (("max_len", max_len), ("dropout", dropout)) if v is not None}
    args = ", ".join([str(d_model)] + [f"{k}={v}" for k, v in kwargs.items()])
    module = build(cls, d_model, what=f"PositionalEncoding({args})", **kwargs)
    if not isinstance(module, nn.Module):
        raise CheckFailure(f"PositionalEncoding({args})", "an nn.Module", type(module).__name__,
                           "subclass nn.Module and call super().__init__() first")
    _remember(module)
    return module, f"PositionalEncoding({args})"


def _table_tensor(module):
    """The module's biggest floating tensor (buffer, parameter or plain attribute): its table, whatever
    its name."""
    found = [t for t in list(module.buffers()) + list(module.parameters()) + list(vars(module).values())
             if isinstance(t, torch.Tensor) and t.is_floating_point()]
    return max(found, key=lambda t: t.numel(), default=None)


_BUILT: dict[int, tuple] = {}  # id(module) -> (module, its table's shape when built, lengths it has handled)


def _remember(module):
    if len(_BUILT) > 8:
        _BUILT.clear()
    table = _table_tensor(module)
    _BUILT[id(module)] = (module, tuple(table.shape) if table is not None else None, set())


def _diagnose(module, x, max_len, refused=False):
    """A hint naming the likely cause when forward fails on a sequence that fits (`refused`: with a
    ValueError), from the table's shape now and when the module was built; None when nothing specific is
    seen."""
    _, L, d = x.shape
    table = _table_tensor(module)
    shape = tuple(table.shape) if table is not None else None
    entry = _BUILT.get(id(module))
    built, lengths = (entry[1], entry[2]) if entry is not None and entry[0] is module else (None, set())
    if shape is not None and built is not None and table.numel() < math.prod(built):
        return (f"the stored table shrank from shape {built} to {shape} since the module was built: forward "
                "replaced it by a slice (self.pe = self.pe[:L]); keep the whole table and slice into a local "
                "variable, pe = self.pe[:x.size(1)]")
    if refused and L == max_len:
        return "a sequence exactly max_len long fits: raise only when x.size(1) > max_len"
    if shape is not None and len(shape) == 3 and shape[0] == 1 and shape[1] >= L:
        return (f"the table has shape {shape}, (1, max_len, d_model): its length is self.pe.size(1), not "
                "self.pe.size(0) (which is 1): compare x.size(1) with self.pe.size(1)" if refused else
                f"the table has shape {shape}, (1, max_len, d_model): slice its LENGTH axis, self.pe[:, "
                ":x.size(1)] (pe[:L] slices the axis of size 1 and keeps the whole table)")
    if shape is not None and len(shape) == 3 and shape[1] == 1:
        return (f"the table has shape {shape}, (max_len, 1, d_model): that is the sequence-first layout "
                "(length, batch, d_model) of PyTorch's old tutorial; x is batch-first (batch, length, "
                "d_model): keep a (max_len, d_model) table and add pe[:x.size(1)] (it broadcasts over the "
                "batch)")
    if shape is not None and len(shape) == 2 and max_len is not None and \
            shape == (d, max_len) != (max_len, d):
        return (f"the table has shape {shape}, (d_model, max_len): build it with "
                "sinusoidal_encoding(max_len, d_model), the arguments in that order")
    if lengths - {L}:
        return (f"this module handled a sequence of length {min(lengths - {L})} before and now fails on "
                f"length {L}: forward keeps something from an earlier call (a slice of the table cached for "
                "that length); slice the table afresh at every call, self.pe[:x.size(1)]")
    return None


def _seq_first_slice(e, x):
    """The hint when the batch met the length on axis 0: a slice of the right length given a middle axis of
    size 1, (length, 1, d_model) (unsqueeze(1), [:, None]): the sequence-first layout."""
    B, L = x.size(0), x.size(1)
    sizes = re.search(r"tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton "
                      r"dimension 0",
                      str(e))
    if B == L or sizes is None or {int(sizes.group(1)), int(sizes.group(2))} != {B, L}:
        return None
    return ("the slice of the table met x's batch axis with its length axis: it was shaped (length, 1, "
            "d_model) (unsqueeze(1), [:, None]), the sequence-first layout (length, batch, d_model) of "
            "PyTorch's old tutorial; x is batch-first (batch, length, d_model): add pe[:x.size(1)] as it is, "
            "(length, d_model), or as (1, length, d_model) with unsqueeze(0)")


def _forward(module, x, what, max_len=None):
    try:
        out = module(x)
    except ValueError as e:
        if max_len is None or x.size(1) > max_len:
            raise
        hint = _diagnose(module, x, max_len, refused=True) or (
            f"a sequence of length {x.size(1)}, shorter than max_len={max_len}, was refused: compare the "
            "length x.size(1) with the table's number of positions (self.pe.size(0) for a (max_len, d_model) "
            "table, self.pe.size(1) for (1, max_len, d_model)), not with another axis")
        raise CheckFailure(what, f"x + PE for a sequence of length {x.size(1)} <= max_len={max_len}",
                           f"ValueError: {str(e)[:120]}", hint) from None
    except RuntimeError as e:
        raise CheckFailure(what, f"a tensor of x's shape {tuple(x.shape)}", f"RuntimeError: {str(e)[:160]}",
                           _diagnose(module, x, max_len) or _seq_first_slice(e, x) or
                           "x is (batch, length, d_model): slice the table to the length, pe[:x.size(1)] "
                           "(not x.size(0), the batch), and add it; it broadcasts over the batch") from None
    entry = _BUILT.get(id(module))
    if entry is not None and entry[0] is module:
        entry[2].add(x.size(1))
    return expect_shape(out, x.shape, what, "return x + PE[:length]: the same shape as x")


def _forward_mistakes(x, max_len):
    """What the classic mistakes give for x (B, L, d) with dropout 0."""
    B, L, d = x.shape
    pe = _table(max_len, d)
    out = {"x multiplied by sqrt(d_model) before adding the table: that scaling belongs to TokenEmbedding":
           x * math.sqrt(d) + pe[:L],
           "the table was sliced with x.size(0) (the batch) instead of x.size(1) (the length): x is (batch, "
           "length, d_model)": x + pe[:B][:, None, :],
           "the table was not added: return x + PE[:length]": x,
           "x multiplied by the table: the positional encoding is ADDED, x + PE[:length]": x * pe[:L],
           "the table multiplied by sqrt(d_model): add it as it is (the sqrt(d_model) scaling belongs to "
           "TokenEmbedding, on the embeddings)": x + pe[:L] * math.sqrt(d)}
    for how, text in TABLE_MISTAKES.items():
        out["the table: " + text] = x + _table(max_len, d, how)[:L]
    for dtype in (torch.float16, torch.bfloat16):
        out[_low_precision(dtype)] = x + _table(max_len, d).to(dtype).double()[:L]
    return out


def _low_precision(dtype) -> str:
    return (f"the table was rounded to {str(dtype)[6:]} (stored or cast so), which keeps about "
            f"{3 if dtype == torch.float16 else 2} significant digits: keep it in float32, with no .half() "
            "or .to(torch.bfloat16) on the buffer or its slice, self.register_buffer('pe', "
            "sinusoidal_encoding(max_len, d_model))")


def _table_hint(module, hint: str, got, expected) -> str:
    """`hint`, unless the module's table is in a low-precision dtype and the output is right but for its
    rounding (off by less than 1e-2): then that is named."""
    table = _table_tensor(module)
    low = (table is not None and table.dtype in (torch.float16, torch.bfloat16)
           and close(got, expected, atol=1e-2, rtol=1e-2))
    return _low_precision(table.dtype) if low else hint


@register("PositionalEncoding", "forward(x) = x + PE[:length] for batch-first x (dropout=0); the gradient "
                                "reaches x")
def _pe_forward(cls):
    module, name = _module(cls, 8, max_len=20, dropout=0.0)
    module.eval()
    with seeded(0):
        x = torch.randn(3, 5, 8)
    what = f"{name}(x) for x of shape (3, 5, 8)"
    out, expected = _forward(module, x.clone(), what, 20), x + _table(20, 8)[:5]
    _expect_close_lazy(out, expected, what, _table_hint(module, "x + self.pe[:x.size(1)] (the table "
                                                                "broadcasts over "
                       "the batch)", out, expected), 1e-4, lambda: _forward_mistakes(x, 20))
    if out.dtype != x.dtype:  # the values are right: the table's dtype promoted the sum
        raise CheckFailure(f"{what}: dtype", f"{x.dtype}, x's dtype", str(out.dtype),
                           f"the {out.dtype} table promoted x + PE to {out.dtype}: the layers after it have "
                           f"{x.dtype} weights and refuse that input. Keep the buffer in float32 "
                           "(table.float()) or cast the slice, self.pe[:x.size(1)].to(x.dtype)")
    with seeded(6):
        x2 = torch.randn(2, 20, 8)
    out, expected = _forward(module, x2.clone(), f"{name}(x) for x of shape (2, 20, 8)",
                             20), x2 + _table(20, 8)
    _expect_close_lazy(out, expected, f"{name}(x) for x of shape (2, 20, 8)",
                       _table_hint(module, "x + self.pe[:x.size(1)]", out, expected), 1e-4,
                       lambda: _forward_mistakes(x2, 20))
    # the embeddings below are trained through this module: the output must stay connected to x
    leaf = x.clone().requires_grad_()
    what = f"{name}(x) for x that requires grad"
    out = _forward(module, leaf * 1.0, what, 20)
    if not out.requires_grad:
        raise CheckFailure(what, "an output connected to x (requires_grad=True)", "a tensor without gradient",
                           "forward cut x off the graph (torch.no_grad(), x.detach() or x.data): the token "
                           "embeddings are trained through x + PE; only the table itself needs no gradient")
    out.sum().backward()
    if leaf.grad is None:
        raise CheckFailure(f"x.grad after {what}.sum().backward()", "ones (d(x + PE)/dx = 1)", "None",
                           "compute the output from x itself, with no .detach(), .data or torch.no_grad()")
    expect_close(leaf.grad, torch.ones_like(leaf), f"x.grad after {what}.sum().backward()",
                 hint="x + PE with dropout 0 has gradient 1 for every entry of x: add the table to x once, "
                      "unscaled")
    # the contract's dtypes: x's own, float64 included, into the module as built (its table float32)
    x64 = x.double()
    what = f"{name}(x) for a float64 x of shape (3, 5, 8), the module as built (not moved with .to)"
    out = _forward(module, x64.clone(), what, 20)
    if out.dtype != torch.float64:
        raise CheckFailure(f"{what}: dtype", "torch.float64, x's dtype", str(out.dtype),
                           "x was cast to float32 (x.float(), x.to(torch.float32), x.to(self.pe.dtype)) "
                           "before the table was added: the output keeps x's dtype; cast the table's slice "
                           "to x's dtype, self.pe[:x.size(1)].to(x.dtype), never x")
    expect_close(out, x64 + _table(20, 8)[:5], what, atol=1e-6, rtol=1e-6,
                 hint="x + self.pe[:x.size(1)].to(x.dtype): x keeps its precision")


@register("PositionalEncoding", "keeps the table in a buffer: not a Parameter, and it follows .to()")
def _pe_buffer(cls):
    module, name = _module(cls, 6, max_len=12, dropout=0.0)
    module.eval()
    with seeded(5):
        x = torch.randn(2, 4, 6)
    before = _forward(module, x.clone(), f"{name}(x) for x of shape (2, 4, 6)", 12)

    def is_table(t):  # judged by size only: the values are the other checks' business
        return isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() == 12 * 6
    if any(is_table(p) for p in module.parameters()):
        raise CheckFailure(f"{name}: the table", "a buffer (self.register_buffer('pe', table))",
                           "an nn.Parameter", "the table is fixed, not learned: a Parameter would be handed "
                                              "to the optimizer (and trained unless frozen); register it "
                                              "with self.register_buffer('pe', table)")
    params = [n for n, _ in module.named_parameters()]
    if params:
        raise CheckFailure(f"{name}.named_parameters()", "none (nothing in this module is trained)",
                           fmt(params),
                           "the table is a buffer and nn.Dropout has no parameters")
    if not any(is_table(b) for b in module.buffers()):
        sizes = [tuple(b.shape) for b in module.buffers() if b.is_floating_point() and b.numel() % 6 == 0]
        if sizes:
            entry = _BUILT.get(id(module))
            built = entry[1] if entry is not None and entry[0] is module else None
            shrank = built is not None and math.prod(built) == 12 * 6
            raise CheckFailure(f"{name}: the table's buffer" + (" after one forward call" if shrank else ""),
                               "max_len x d_model = 12 x 6 numbers", f"a buffer of shape {sizes[0]}" +
                               (f" (it was {built} when built)" if shrank else ""),
                               "forward replaced the stored table by a slice (self.pe = self.pe[:L]): keep "
                               "the whole table and slice into a local variable, pe = "
                               "self.pe[:x.size(1)]" if shrank else
                               "the max_len argument is ignored: build the table with "
                               "sinusoidal_encoding(max_len, d_model), not a fixed length")
        attrs = [k for k, v in vars(module).items() if is_table(v)]
        raise CheckFailure(f"{name}.buffers()", "the sinusoidal table (max_len x d_model numbers)",
                           "no buffer holds "
                           f"it{' (it is the plain attribute ' + attrs[0] + ')' if attrs else ''}",
                           "a plain tensor attribute does not move with module.to(device) and is not saved: "
                           "self.register_buffer('pe', sinusoidal_encoding(max_len, d_model))")
    module.to(torch.float64)
    if not all(b.dtype == torch.float64 for b in module.buffers() if is_table(b)):
        raise CheckFailure(f"{name}.to(torch.float64): the table's dtype", "torch.float64", "unchanged",
                           "register the table with register_buffer so that .to() converts it")
    after = _forward(module, x.double(), f"{name}.to(torch.float64)(x)", 12)
    expect_close(after, before.double(), f"{name}.to(torch.float64)(x) against the same module in float32",
                 hint="use the registered buffer in forward (self.pe), not a copy of the table kept "
                      "elsewhere")


@register("PositionalEncoding", "applies dropout(x + PE) in training mode, and no dropout in eval mode")
def _pe_dropout(cls):
    module, name = _module(cls, 16, max_len=40, dropout=0.5)
    with seeded(1):
        x = torch.rand(4, 30, 16) + 4.0  # x + PE > 0, even with a wrong table: a zero can only be dropout's
    module.eval()
    plain = _forward(module, x.clone(), f"{name}(x) in eval mode", 40)  # the module's own x + PE
    if (plain.abs() < 1e-6).any() and torch.equal(plain, _forward(module, x.clone(),
                                                                  f"{name}(x) in eval mode", 40)):
        raise CheckFailure(f"{name}(x) in eval mode", "x + PE, where no value is 0 here (x + PE > 3)",
                           f"{(plain.abs() < 1e-6).double().mean().item():.0%} zeros, the same at every call",
                           "return x + PE[:length] (x itself plus the table), then dropout")
    if (plain.abs() < 1e-6).any():
        raise CheckFailure(f"{name}(x) in eval mode", "no value zeroed (x + PE > 0 here)",
                           f"{(plain.abs() < 1e-6).double().mean().item():.0%} zeros",
                           "dropout applied in eval mode: build self.dropout = nn.Dropout(dropout) once in "
                           "__init__ (a module built inside forward is always in training mode), or "
                           "F.dropout(..., training=self.training); either does nothing after module.eval()")
    module.train()
    what = f"{name}(x) in training mode"
    with seeded(2):
        out = _forward(module, x.clone(), what, 40)
    if _close_all(out, plain):
        raise CheckFailure(what, "about half of the values zeroed (dropout=0.5)", "the same as in eval mode",
                           "dropout missing: return self.dropout(x + PE) with self.dropout = "
                           "nn.Dropout(dropout)")
    dropped = out.abs() < 1e-6
    share = dropped.double().mean().item()
    if dropped.all():
        raise CheckFailure(what, "about half of the values zeroed (dropout=0.5)", "all values 0",
                           "return self.dropout(x + PE) with self.dropout = nn.Dropout(dropout)")
    ratio = out[~dropped].double() / plain[~dropped].double()
    if not (dropped.any() and (ratio.max() - ratio.min()).item() < 1e-4):  # not dropout of the sum
        table = plain - x  # what the module adds
        hint = ("dropout applied to x before adding the table, dropout(x) + PE: apply it to the sum, "
                "dropout(x + PE)" if _dropout_of(out - table, x, 2.0) else
                "dropout applied to the table only, x + dropout(PE): apply it to the sum, dropout(x + PE)"
                if _dropout_of(out - x, table, 2.0) else "apply nn.Dropout(dropout) once, to x + PE")
        raise CheckFailure(what, "each value either 0 or 2 * (x + PE) (dropout=0.5 of the sum)",
                           f"{share:.0%} zeros, the others from {ratio.min().item():.3g} to "
                           f"{ratio.max().item():.3g} times x + PE", hint)
    if 0.65 < share < 0.85 and abs(ratio.mean().item() - 4.0) < 1e-3:
        raise CheckFailure(f"{what}: share of zeros", "about 0.5, the kept values doubled",
                           f"{share:.3f}, the kept values times 4", "dropout applied twice (1 - 0.5 * 0.5 = "
                                                                    "0.75 "
                           "dropped, kept values scaled twice): apply self.dropout once, to x + PE")
    if not 0.35 < share < 0.65 or abs(ratio.mean().item() - 2.0) > 1e-3:
        raise CheckFailure(f"{what}: share of zeros", "about 0.5, the kept values doubled",
                           f"{share:.3f}, the kept values times {ratio.mean().item():.3g}",
                           "the dropout argument is ignored: nn.Dropout(dropout), not a fixed rate")


def _close_all(a, b):
    return a.shape == b.shape and bool(torch.allclose(a.double(), b.double(), atol=1e-5))


def _dropout_of(d, v, scale):
    """Whether d looks like dropout applied to v: each value 0 or scale * v, some of them 0."""
    d, v = d.double(), v.double()
    zero = d.abs() < 1e-5
    return bool((zero | ((d - scale * v).abs() < 1e-4)).all() and (zero & (v.abs() > 1e-3)).any())


@register("PositionalEncoding", "a sequence longer than max_len raises ValueError; max_len itself works")
def _pe_too_long(cls):
    module, name = _module(cls, 4, max_len=10, dropout=0.0)
    module.eval()
    with seeded(7):
        x, longer = torch.randn(2, 10, 4), torch.randn(2, 11, 4)
    out, expected = _forward(module, x.clone(), f"{name}(x) for x of length 10 = max_len",
                             10), x + _table(10, 4)
    _expect_close_lazy(out, expected, f"{name}(x) for x of length 10 = max_len",
                       _table_hint(module, "x + self.pe[:x.size(1)], the whole table here", out, expected),
                       1e-4, lambda: _forward_mistakes(x, 10))
    expect_raises(lambda: module(longer), ValueError, f"{name}(x) for x of length 11 > max_len",
                  "check `if x.size(1) > self.pe.size(0): raise ValueError(f'sequence of length {x.size(1)} "
                  "is longer than max_len={...}')` before slicing: slicing past the end silently gives a "
                  "shorter table")


@register("PositionalEncoding", "defaults: max_len=5000, dropout=0.1")
def _pe_defaults(cls):
    module, name = _module(cls, 8)
    module.train()
    x = torch.full((2, 5000, 8), 3.0)
    what = f"{name}(x) for x of length 5000 in training mode"
    try:
        with seeded(3):
            out = _forward(module, x.clone(), what, 5000)
    except CheckFailure as e:
        table = _table_tensor(module)
        if table is None or table.numel() >= 5000 * 8:
            raise
        raise CheckFailure(what, "x + PE (max_len=5000 by default)", e.got,
                           f"the table of {name} has shape {tuple(table.shape)}, fewer than 5000 positions: "
                           "keep the signature's default max_len=5000 and build the table with it") from None
    # a dropped value is 0 (dropout of the sum) or the table's value alone (dropout of x before the add, a
    # mistake the dropout check names): either way the default rate is measured, and that mistake is paid once
    # (x = 3 keeps every kept value above 2, beyond the table's -1..1)
    dropped = (out == 0) | torch.isclose(out, _table(5000, 8)[None].to(out.dtype), atol=1e-4)
    share = dropped.double().mean().item()
    if not 0.08 < share < 0.12:
        raise CheckFailure(f"{name}(x) in training mode: share of values dropped",
                           "about 0.1 (dropout=0.1 by default)",
                           f"{share:.3f}", "nn.Dropout(p) takes the probability of ZEROING a value, not of "
                                           "keeping it: nn.Dropout(dropout), not nn.Dropout(1 - dropout)"
                           if 0.88 < share < 0.92 else
                           "keep the signature's defaults (dropout=0.1, max_len=5000) and pass dropout on, "
                           "nn.Dropout(dropout), with no fixed rate")
    expect_raises(lambda: module(torch.full((1, 5001, 8), 3.0)), ValueError,
                  f"{name}(x) for x of length 5001",
                  "a sequence longer than max_len (5000 by default) must raise ValueError")


@register("PositionalEncoding", "does not modify its input x in place")
def _pe_in_place(cls):
    module, name = _module(cls, 8, max_len=10, dropout=0.0)
    module.eval()
    with seeded(4):
        x = torch.randn(2, 6, 8)
    kept = x.clone()
    _forward(module, x, f"{name}(x)", 10)
    if not torch.equal(x, kept):
        raise CheckFailure(f"x after {name}(x)", "unchanged", "changed",
                           "x was modified in place (x += ... or x.add_): return x + PE as a new tensor; the "
                           "caller still needs its x (and autograd may too)")
