"""Stage 02's checks: full marks for correct code however written; for each classic mistake, exactly the
points it earns and the words that name it (the reference and the stub: tests/test_registry.py)."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import solutions
from autograder import max_points
from tests.grading import Mistake, assert_full_marks, assert_mistake, edit, grade, mistakes, run_silently

SIN, PE = solutions.sinusoidal_encoding, solutions.PositionalEncoding
_ANGLE = "torch.exp(-math.log(10000.0) * two_i / d_model)"
_COLUMNS = "pe[:, 0::2] = torch.sin(angle)\n    pe[:, 1::2] = torch.cos(angle)"


# ---------------------------------------------------------- sinusoidal_encoding: correct, written differently
def sinusoidal_loops(max_len, d_model):
    """Position by position, in numpy float64 (returned as float64: fine)."""
    if d_model % 2:
        raise ValueError("d_model must be even")
    pe = np.zeros((max_len, d_model))
    for pos in range(max_len):
        for i in range(0, d_model, 2):
            angle = pos / math.pow(10000, i / d_model)
            pe[pos, i], pe[pos, i + 1] = math.sin(angle), math.cos(angle)
    return torch.from_numpy(pe)


# sin and cos stacked on a new last axis, then flattened: interleaved
sinusoidal_stack = edit(SIN, (_ANGLE, "torch.pow(10000.0, -two_i / d_model)"), (_COLUMNS + "\n    return pe",
                        "return torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(max_len, d_model)"),
                        name="sinusoidal_stack")


def sinusoidal_polar(max_len, d_model):
    """cos + i sin as a complex number, viewed as (real, imag) pairs and flipped to (sin, cos)."""
    if d_model % 2:
        raise ValueError("odd d_model")
    angle = torch.arange(max_len, dtype=torch.float64)[:, None] * 10000.0 ** (
        -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pairs = torch.view_as_real(torch.polar(torch.ones_like(angle), angle)).flip(-1)
    return pairs.reshape(max_len, d_model).float()


def sinusoidal_phase(max_len, d_model, base=10000.0):
    """One sine per column, the odd columns shifted by pi/2 (cos x = sin(x + pi/2)); an extra keyword."""
    if d_model % 2 != 0:
        raise ValueError("d_model must be even")
    j = torch.arange(d_model)
    freq = base ** (-(j - j % 2).float() / d_model)
    return torch.sin(torch.arange(max_len).float()[:, None] * freq + (j % 2).float() * (math.pi / 2))


def sinusoidal_transposed_view(max_len, d_model):
    """Built as (d_model, max_len) and returned as its transpose: a non-contiguous tensor."""
    if d_model % 2:
        raise ValueError("odd d_model")
    angle = torch.arange(max_len)[None, :] / torch.pow(10000, torch.arange(0, d_model, 2) / d_model)[:, None]
    return torch.stack([angle.sin(), angle.cos()], 1).reshape(d_model, max_len).T


def table_outer_f64(max_len, d_model):
    """torch.outer in float64; pairs written into a (L, d/2, 2) tensor and viewed flat; float64 out."""
    if d_model % 2:
        raise ValueError(f"odd d_model {d_model}")
    inv = 1.0 / (10000.0 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model))
    ang = torch.outer(torch.arange(max_len, dtype=torch.float64), inv)
    out = torch.empty(max_len, d_model // 2, 2, dtype=torch.float64)
    out[..., 0] = ang.sin()
    out[..., 1] = ang.cos()
    return out.view(max_len, d_model)


def table_numpy_rates(max_len, d_model, *, base=10000):
    """TensorFlow tutorial style in numpy, 2 * (i // 2) per column; a keyword-only extra argument."""
    if d_model % 2 == 1:
        raise ValueError("d_model must be even")
    pos = np.arange(max_len)[:, np.newaxis]
    i = np.arange(d_model)[np.newaxis, :]
    angles = pos / np.power(base, (2 * (i // 2)) / np.float32(d_model))
    angles[:, 0::2] = np.sin(angles[:, 0::2])
    angles[:, 1::2] = np.cos(angles[:, 1::2])
    return torch.tensor(angles, dtype=torch.float32)


def table_einsum_permuted(max_len, d_model, dtype=torch.float32, device=None):
    """einsum, [sin | cos] concatenated and then interleaved by a column permutation; dtype/device
    keywords."""
    if d_model % 2:
        raise ValueError("d_model must be even, got %d" % d_model)
    pos = torch.arange(max_len, dtype=dtype, device=device)
    freq = torch.exp(torch.arange(0, d_model, 2, dtype=dtype, device=device) * (-math.log(10000.0) / d_model))
    ang = torch.einsum("p,f->pf", pos, freq)
    both = torch.cat([ang.sin(), ang.cos()], dim=1)
    order = torch.arange(d_model).view(2, d_model // 2).t().reshape(-1)  # 0, h, 1, h + 1, ...
    return both[:, order]


def table_python_lists(max_len, d_model):
    if d_model & 1:
        raise ValueError("odd")
    rows = []
    for pos in range(max_len):
        row = []
        for k in range(d_model // 2):
            a = pos / (10000 ** (2 * k / d_model))
            row += [math.sin(a), math.cos(a)]
        rows.append(row)
    return torch.tensor(rows)


def table_in_place(max_len, d_model):
    """In-place sin_/cos_ on views of a tensor it made itself, under torch.no_grad (harmless)."""
    if d_model % 2:
        raise ValueError("d_model must be even")
    with torch.no_grad():
        pe = torch.arange(max_len, dtype=torch.float32).unsqueeze(1).repeat(1, d_model)
        exponent = torch.arange(d_model).div(2, rounding_mode="floor").mul_(2).float().div_(d_model)
        pe.div_(torch.pow(10000.0, exponent))
        pe[:, 0::2].sin_()
        pe[:, 1::2].cos_()
    return pe


def table_logspace(max_len, d_model):
    """The frequencies 10^(-4 * 2i/d) from torch.logspace, in float64."""
    if d_model % 2:
        raise ValueError("odd d_model")
    inv = torch.logspace(0, -(d_model - 2) / d_model * 4, d_model // 2, base=10.0, dtype=torch.float64)
    ang = torch.arange(max_len, dtype=torch.float64)[:, None] * inv
    return torch.stack((ang.sin(), ang.cos()), dim=2).flatten(1).float()


# ----------------------------------------------------------- PositionalEncoding: correct, written differently
class PositionalEncodingAnnotated(nn.Module):
    """The Annotated Transformer's way: a (1, max_len, d) buffer, persistent, requires_grad_(False)."""
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = sinusoidal_stack(max_len, d_model).unsqueeze(0)
        self.register_buffer("pe", pe)

    def forward(self, x):
        if x.size(1) > self.pe.size(1):
            raise ValueError(f"length {x.size(1)} > max_len {self.pe.size(1)}")
        x = x + self.pe[:, : x.size(1)].requires_grad_(False)
        return self.dropout(x)


class PositionalEncodingFunctional(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.p, self.max_len = dropout, max_len
        self.register_buffer("table", sinusoidal_loops(max_len, d_model).float(), persistent=False)

    def forward(self, x):
        B, L, d = x.shape
        if L > self.max_len:
            raise ValueError("sequence longer than max_len")
        return F.dropout(torch.add(x, self.table.narrow(0, 0, L).expand(B, L, d)), self.p, self.training)


class PositionalEncodingHandDropout(nn.Module):
    """A hand-written dropout, index_select of the positions, an extra forward keyword, the length from
    dim -2."""
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.p = dropout
        self.register_buffer("table", sinusoidal_phase(max_len, d_model))

    def forward(self, x, offset=0):
        L = x.size(-2)
        if offset + L > self.table.size(0):
            raise ValueError(f"length {L} exceeds max_len")
        y = x + self.table.index_select(0, torch.arange(offset, offset + L, device=x.device))
        if self.training and self.p > 0:
            y = y * (torch.rand_like(y) >= self.p).to(y.dtype) / (1 - self.p)
        return y


class PositionalEncodingFloat64Buffer(nn.Module):
    """A buffer slot registered empty, then filled with a float64 table; cast to x's dtype in forward."""
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.register_buffer("pe", None)
        self.pe = sinusoidal_loops(max_len, d_model)
        self.drop = nn.Dropout(p=dropout)
        self.max_len = max_len

    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("sequence longer than max_len")
        return self.drop(x + self.pe.narrow(0, 0, x.size(1)).to(dtype=x.dtype))


class PEIdentityWhenNoDropout(nn.Module):
    """A persistent buffer with another name; nn.Identity when dropout is 0; a keyword-only extra."""
    def __init__(self, d_model, max_len=5000, dropout=0.1, *, scale_input=False):
        super().__init__()
        self.register_buffer("pos_table", table_outer_f64(max_len, d_model).float())
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.scale_input = scale_input

    def forward(self, x):
        n = x.shape[1]
        if n > len(self.pos_table):
            raise ValueError(f"sequence length {n} > max_len {len(self.pos_table)}")
        return self.dropout(x + self.pos_table[:n].unsqueeze(0))


class PEEmbeddingLookup(nn.Module):
    """F.embedding of position ids into the table under no_grad (the table needs no gradient anyway);
    in-place F.dropout on the fresh sum."""
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.max_len, self.p = max_len, dropout
        self.register_buffer("table", table_numpy_rates(max_len, d_model), persistent=False)

    def forward(self, x):
        B, L, _ = x.shape
        if L > self.max_len:
            raise ValueError(f"sequence of length {L} longer than max_len={self.max_len}")
        with torch.no_grad():
            pos = F.embedding(torch.arange(L, device=x.device).expand(B, L), self.table)
        return F.dropout(x + pos, p=self.p, training=self.training, inplace=True)


class PECloneAddInPlace(nn.Module):
    """Clones x and adds in place; dropout by a bernoulli mask written by hand."""
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        pe.copy_(solutions.sinusoidal_encoding(max_len, d_model))
        self.register_buffer("pe", pe)
        self.rate = float(dropout)

    def forward(self, x):
        if x.size(1) > self.pe.size(0):
            raise ValueError("longer than max_len")
        y = x.clone()
        y += self.pe[: y.size(1)]
        if self.training and self.rate:
            keep = torch.bernoulli(torch.full_like(y, 1 - self.rate))
            y.mul_(keep).div_(1 - self.rate)
        return y


class PEAddSubmodule(nn.Module):
    """A (1, max_len, d) buffer, the addition in a child module, an extra forward argument."""

    class Add(nn.Module):
        def forward(self, x, table):
            return torch.add(x, table)

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.register_buffer("pe", table_einsum_permuted(max_len, d_model)[None])
        self.add = self.Add()
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        seq = x.size(-2)
        if seq > self.pe.size(-2):
            raise ValueError(f"length {seq} exceeds max_len")
        return self.dropout(self.add(x, self.pe[:, :seq, :]))


class PEFloat64TableCastLike(nn.Module):
    """A float64 buffer cast with .to(x) and expand_as(x); also takes unbatched (L, d) input."""
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.register_buffer("pe", table_outer_f64(max_len, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        L = x.shape[-2]
        if L > self.pe.shape[0]:
            raise ValueError(f"sequence length {L} > max_len {self.pe.shape[0]}")
        return self.dropout(x + self.pe[:L].to(x).expand_as(x))


# the table stored (d_model, max_len); its columns sliced and transposed back in forward
PETransposedTable = edit(PE, ('"pe", sinusoidal_encoding(max_len, d_model), persistent=False',
                              '"pe_t", sinusoidal_encoding(max_len, d_model).t().contiguous()'),
                         ("x.size(1) > self.pe.size(0)", "x.size(1) > self.pe_t.size(1)"),
                         ("max_len={self.pe.size(0)}", "max_len={self.pe_t.size(1)}"),
                         ("self.pe[: x.size(1)].to(x.dtype)", "self.pe_t[:, : x.size(1)].t()"),
                         name="PETransposedTable")
CORRECT = [*(pytest.param("sinusoidal_encoding", f, id=f.__name__) for f in (
    sinusoidal_loops, sinusoidal_stack, sinusoidal_polar, sinusoidal_phase, sinusoidal_transposed_view,
                                                                             table_outer_f64,
    table_numpy_rates, table_einsum_permuted, table_python_lists, table_in_place, table_logspace)), *(
    pytest.param("PositionalEncoding", cls, id=cls.__name__) for cls in (
        PositionalEncodingAnnotated, PositionalEncodingFunctional, PositionalEncodingHandDropout,
        PositionalEncodingFloat64Buffer, PEIdentityWhenNoDropout, PETransposedTable, PEEmbeddingLookup,
        PECloneAddInPlace, PEAddSubmodule, PEFloat64TableCastLike))]


@pytest.mark.parametrize("contract, impl", CORRECT)
def test_other_correct_code(contract, impl):
    assert_full_marks(impl, contract)


# ---------------------------------------------------------------- sinusoidal_encoding: classic mistakes
def _sin(old, new):
    return edit(SIN, (old, new))


def _sin_returns(new):
    return edit(SIN, ("return pe", f"return {new}"))


_ODD = "if d_model % 2:"


TABLE_MISTAKES = [
    # the formula
    Mistake("sin and cos concatenated", _sin(_COLUMNS, "pe = torch.cat([torch.sin(angle), torch.cos(angle)], "
                                                       "1)"), 2,
            "concatenated"),
    Mistake("sin and cos swapped", _sin(_COLUMNS, "pe[:, 0::2] = torch.cos(angle)\n    pe[:, 1::2] = "
                                                  "torch.sin(angle)"),
            2, "swapped"),
    Mistake("exponent i/d instead of 2i/d", _sin(_ANGLE, _ANGLE.replace("two_i", "two_i / 2")), 2,
            "exponent i/d_model instead of 2i/d_model"),
    # two_i: 2i already
    Mistake("exponent 4i/d (2i doubled)", _sin(_ANGLE, _ANGLE.replace("two_i", "2 * two_i")), 2,
            "exponent 4i/d_model"),
    Mistake("cos column with its own exponent",
            _sin("torch.cos(angle)",
                 "torch.cos(pos * torch.exp(-math.log(10000.0) * (two_i + 1) / d_model))"), 2,
            "(2i+1)/d_model"),
    Mistake("integer division in the exponent",
            _sin(_ANGLE, _ANGLE.replace("two_i / d_model", "(two_i // d_model)")),
            2, "integer division"),
    Mistake("math.log10", _sin(_ANGLE, _ANGLE.replace("math.log(", "math.log10(")), 2,
            ("log10", "natural logarithm")),
    Mistake("base 1000", _sin(_ANGLE, _ANGLE.replace("10000.0", "1000.0")), 2, "base 1000"),
    Mistake("positions from 1", _sin("torch.arange(max_len,", "1 + torch.arange(max_len,"), 2,
            "positions counted from 1"),
    Mistake("positions 1..max_len", lambda max_len, d_model: SIN(max_len + 1, d_model)[1:], 2,
            "positions counted from 1"),
    # odd d_model
    Mistake("no ValueError for odd d_model", _sin(_ODD, "if False:"), 4, ("ValueError", "odd d_model")),
    Mistake("assert instead of ValueError",
            _sin(_ODD + "\n        raise ValueError(", "assert not d_model % 2, ("), 4,
            ("ValueError", "AssertionError")),
    # what is returned
    Mistake("float16", _sin_returns("pe.half()"), 0, "float32 or float64"),
    Mistake("an int64 table", _sin_returns("pe.long()"), 0, ("float32", "int64")),  # the sines truncated
    Mistake("a list", _sin_returns("pe.tolist()"), 0, "torch.Tensor"),
    Mistake("a leading batch axis", _sin_returns("pe.unsqueeze(0)"), 0,
            ("leading batch axis", "(max_len, d_model)")),
    Mistake("transposed", _sin_returns("pe.T"), 0, ("transposed", "(d_model, max_len)")),
]


# --------------------------------------------------------- sinusoidal_encoding: the report when no cause fits
def _angle_in(dtype, *changes):
    """The reference with the positions and 2i, so the angle, in `dtype`."""
    return edit(SIN, ("max_len, dtype=torch.float32)", f"max_len, dtype={dtype})"),
                ("2, dtype=torch.float32)", f"2, dtype={dtype})"), *changes)


_FORMULA = "there (PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(the same angle)); got"
MESSAGE_MISTAKES = [  # no classic mistake gives these numbers: the formula is restated and no cause guessed
    Mistake("positions as fractions of max_len", _sin("unsqueeze(1)", "unsqueeze(1) / max_len"),
            # the example, formula, large table
            max_points("sinusoidal_encoding") - 3, _FORMULA, not_says="Likely:"),
    Mistake("positions from 0.5", _angle_in("torch.float64", ("unsqueeze(1)", "unsqueeze(1) + 0.5")),
            # float64: not a precision problem
            max_points("sinusoidal_encoding") - 3, _FORMULA, not_says="Likely:"),
    Mistake("exponent over d_model - 1",
            _sin(_ANGLE, _ANGLE.replace("two_i / d_model", "two_i / (d_model - 1)")),
            # a formula error, not precision
            max_points("sinusoidal_encoding") - 3, _FORMULA, not_says="Likely:"),
    # the right formula in half precision: right for small tables, not large
    Mistake("angle in half precision",
            _angle_in("torch.float16", ("torch.sin(angle)", "torch.sin(angle.float())"),
                      ("torch.cos(angle)", "torch.cos(angle.float())")), 0,
            "Likely: compute the angle in float32 or float64, "
            "pos / 10000^(2i/d_model) = pos * exp(-ln(10000) * 2i / d_model)", title="stays accurate"),
    Mistake("angle in bfloat16",
            _angle_in("torch.bfloat16", ("torch.sin(angle)", "torch.sin(angle.float())"),
                      ("torch.cos(angle)", "torch.cos(angle.float())")), 0,
            "Likely: compute the angle in float32 or float64, "
            "pos / 10000^(2i/d_model) = pos * exp(-ln(10000) * 2i / d_model)", title="stays accurate"),
]


@pytest.mark.parametrize("m", mistakes("sinusoidal_encoding", MESSAGE_MISTAKES))
def test_what_the_report_says(m):
    text = assert_mistake(m)
    if m.title:
        assert text.endswith(m.says[0]), text


# ---------------------------------------------------------------- PositionalEncoding: classic mistakes
_RETURN = "return self.dropout(x + self.pe[: x.size(1)].to(x.dtype))"
_CHECK = "if x.size(1) > self.pe.size(0):"
_NO_CHECK = (_CHECK, "if False:")  # the length check left out as well
_TABLE = "sinusoidal_encoding(max_len, d_model), persistent=False)"


def _pe(*changes):
    return edit(PE, *changes)


def _returns(new, *changes):
    return edit(PE, (_RETURN, f"return {new}"), *changes)


def _table(new, *changes):
    """The buffer holds `new` (PE: the reference's table)."""
    return edit(PE, (_TABLE, _TABLE.replace("sinusoidal_encoding(max_len, d_model)", new)), *changes)


def _attribute(new):
    return edit(PE, ('self.register_buffer("pe", ' + _TABLE, f"self.pe = {new}"))


def _before_return(line, *changes):
    return edit(PE, *changes, ("return self.dropout", f"{line}\n        return self.dropout"))


_CACHED = "if not hasattr(self, '_slice'):\n            self._slice = self.pe[: x.size(1)]"
MODULE_MISTAKES = [
    # the table
    Mistake("table a Parameter", _attribute("nn.Parameter(sinusoidal_encoding(max_len, d_model), "
                                            "requires_grad=False)"),
            5, ("nn.Parameter", "register_buffer")),
    Mistake("table not registered", _attribute("sinusoidal_encoding(max_len, d_model)"), 5,
            ("plain attribute", "register_buffer")),
    Mistake("sin and cos concatenated", _table("torch.cat([sinusoidal_encoding(max_len, d_model)[:, 0::2], "
                                               "sinusoidal_encoding(max_len, d_model)[:, 1::2]], 1)"), 4,
            "concatenated"),
    Mistake("max_len ignored", _table("sinusoidal_encoding(5000, d_model)"), 4,
            "max_len argument is ignored"),
    Mistake("default max_len 512", _pe(("max_len: int = 5000", "max_len: int = 512")), 5,
            ("default max_len=5000", "fewer than 5000 positions")),
    Mistake("table built (d_model, max_len)", _table("sinusoidal_encoding(max_len, d_model).T.contiguous()",
                                                     (_CHECK, "if x.size(1) > self.pe.size(1):")), 0,
            ("(d_model, max_len)", "arguments in that order")),
    Mistake("a float16 table", _table("sinusoidal_encoding(max_len, d_model).half()"), 4,
            ("rounded to float16", "expected -2.0505 there; got -2.0508")),  # enough digits to differ
    Mistake("a bfloat16 table", _table("sinusoidal_encoding(max_len, d_model).to(torch.bfloat16)"), 4,
            "rounded to bfloat16"),
    Mistake("the slice cast to float16", _pe((".to(x.dtype))", ".half())")), 4, "rounded to float16"),
    Mistake("a float64 table not cast",
            _table("sinusoidal_encoding(max_len, d_model).double()", (".to(x.dtype)", "")),
            5, ("torch.float64", "x.dtype")),
    # the contract's dtypes: x keeps its own (the module's other float64 test moves the module first, which
    # hid it)
    Mistake("x cast to float32", _pe(("self.dropout(x + self.pe[: x.size(1)].to(x.dtype))",
                                          "self.dropout(x.float() + self.pe[: x.size(1)])")), 5,
            ("for a float64 x", "expected torch.float64", "never x")),
    # the table's shape and its slice
    Mistake("(1, L, d) table, length vs pe.size(0)", _table("sinusoidal_encoding(max_len, d_model)[None]",
                                                             ("self.pe[: x.size(1)]",
                                                              "self.pe[:, : x.size(1)]")),
            0, ("self.pe.size(1)", "(1, max_len, d_model)")),
    Mistake("(1, L, d) table sliced on its first axis", _table("sinusoidal_encoding(max_len, d_model)[None]",
                                                               (_CHECK, "if x.size(1) > self.pe.size(1):")),
            2, "self.pe[:, :x.size(1)]"),
    Mistake("(max_len, 1, d) table for batch-first x",
            _table("sinusoidal_encoding(max_len, d_model)[:, None]"), 0,
            ("(max_len, 1, d_model)", "batch-first")),
    Mistake("sequence-first slicing", _table("sinusoidal_encoding(max_len, d_model)[:, None]",
                                            ("self.pe[: x.size(1)]", "self.pe[: x.size(0)]")),
            4, "x.size(0) (the batch)"),
    Mistake("the slice unsqueezed on axis 1",
            _returns("self.dropout(x + self.pe[: x.size(1)].unsqueeze(1))"), 0,
            ("shaped (length, 1, d_model)", "sequence-first")),
    Mistake("the stored table shortened", _before_return("self.pe = self.pe[: x.size(1)]"), 4,
            ("shrank", "self.pe = self.pe[:L]")),
    Mistake("a slice cached from the first call",
            _before_return(_CACHED, ("self.pe[: x.size(1)].to", "self._slice.to")), 5, "earlier call"),
    # the length limit
    Mistake("no error for a sequence longer than max_len", _pe(_NO_CHECK), 4,
            ("ValueError", "longer than max_len")),
    Mistake("max_len itself refused", _pe((_CHECK, _CHECK.replace(">", ">="))), 3,
            "exactly max_len long fits"),
    Mistake("length limit hard-coded to 5000", _pe((_CHECK, "if x.size(1) > 5000:")), 5,
            ("longer than max_len", "ValueError")),
    Mistake("length checked on the batch axis", _pe((_CHECK, "if x.size(0) > self.pe.size(0):")), 4,
            ("ValueError", "longer than max_len")),
    Mistake("IndexError for a long sequence", _pe(("raise ValueError(", "raise IndexError(")), 4,
            ("ValueError", "IndexError")),
    # the sum
    Mistake("the table without x", _returns("self.dropout(self.pe[: x.size(1)].expand_as(x))"), 3,
            "x itself plus the table"),
    Mistake("x multiplied by the table", _returns("self.dropout(x * self.pe[: x.size(1)])"), 3,
            "multiplied by the table"),
    Mistake("x scaled by sqrt(d_model)", _pe(("(x + self.pe", "(x * math.sqrt(x.size(-1)) + self.pe")), 4,
            "belongs to TokenEmbedding"),
    Mistake("the table scaled by sqrt(d_model)",
            _pe((".to(x.dtype))", ".to(x.dtype) * math.sqrt(x.size(-1)))")), 4,
            "table multiplied by sqrt(d_model)"),
    Mistake("x modified in place",
            _before_return("x += self.pe[: x.size(1)]", _NO_CHECK, (_RETURN, "return self.dropout(x)")), 3,
            "in place"),
    Mistake("x detached", _pe(("(x + self.pe", "(x.detach() + self.pe")), 5,
            (".detach()", "without gradient")),
    Mistake("forward under torch.no_grad",
            _pe(("    def forward(", "    @torch.no_grad()\n    def forward(")), 5,
            ("torch.no_grad()", "without gradient")),
    # the dropout
    Mistake("dropout missing", _returns("x + self.pe[: x.size(1)]", _NO_CHECK), 3, "dropout missing"),
    Mistake("dropout before adding the table", _returns("self.dropout(x) + self.pe[: x.size(1)]", _NO_CHECK),
            3, "dropout(x) + PE"),
    # a blind review's find: the defaults check, measuring zeros, failed it too and blamed the defaults
    Mistake("dropout before adding the table, the only mistake",
            _returns("self.dropout(x) + self.pe[: x.size(1)]"), 5, "dropout(x) + PE",
            not_says="keep the signature's defaults"),
    Mistake("dropout on the table only", _returns("x + self.dropout(self.pe[: x.size(1)])", _NO_CHECK), 3,
            "x + dropout(PE)"),
    Mistake("dropout applied twice", _returns("self.dropout(self.dropout(x + self.pe[: x.size(1)]))"), 4,
            "dropout applied twice"),
    Mistake("dropout rate ignored", _pe(("nn.Dropout(dropout)", "nn.Dropout(0.1)")), 5,
            "dropout argument is ignored"),
    Mistake("nn.Dropout(1 - dropout)", _pe(("nn.Dropout(dropout)", "nn.Dropout(1 - dropout)")), 5,
            ("ZEROING", "1 - dropout")),
    Mistake("default dropout 0", _pe(("dropout: float = 0.1", "dropout: float = 0.0")), 5, "dropout=0.1"),
    Mistake("dropout in eval mode", _returns("nn.functional.dropout(x + self.pe[: x.size(1)], "
                                             "self.dropout.p, True)",
                                             _NO_CHECK), 3, "eval mode"),
    Mistake("nn.Dropout built inside forward", _pe(("self.dropout(x", "nn.Dropout(self.dropout.p)(x")), 5,
            ("eval mode", "built inside forward")),
]


ROWS = [*mistakes("sinusoidal_encoding", TABLE_MISTAKES), *mistakes("PositionalEncoding", MODULE_MISTAKES)]


@pytest.mark.parametrize("m", ROWS)
def test_mistakes(m):
    assert_mistake(m)


# ---------------------------------------------------------------- the checks themselves
def test_checks_leave_the_global_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    grade(PE)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("obj", [SIN, PE], ids=["sinusoidal_encoding", "PositionalEncoding"])
def test_checks_are_fast(obj):
    import time
    start = time.perf_counter()
    grade(obj)
    assert time.perf_counter() - start < 5


def test_checks_write_nothing_to_stderr():
    """A mistaken module in a fresh interpreter: the report on stdout, nothing at all on stderr."""
    code = ("import torch; from torch import nn; from autograder import check\n"
            "class PositionalEncoding(nn.Module):\n"
            "    def __init__(self, d_model, max_len=5000, dropout=0.1):\n"
            "        super().__init__(); self.pe = torch.zeros(max_len, d_model)\n"
            "    def forward(self, x):\n"
            "        import warnings; warnings.warn('mine'); return x.T\n"
            "check(PositionalEncoding)\n")
    assert "PositionalEncoding: 0/" in run_silently(code, timeout=120)
