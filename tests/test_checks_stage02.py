"""Stage 02's checks: full marks for the reference and for correct code written differently; points
lost, with the mistake named, for each classic mistake."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import solutions
from solutions import PositionalEncoding, sinusoidal_encoding
from autograder import max_points
from tests.grading import assert_caught, assert_full_marks, grade, grade_one, run_silently


def test_reference_gets_full_marks():
    assert_full_marks(solutions.sinusoidal_encoding)
    assert_full_marks(solutions.PositionalEncoding)


# ---------------------------------------------------------------- correct, written differently
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


def sinusoidal_stack(max_len, d_model):
    """sin and cos stacked on a new last axis, then flattened: interleaved."""
    if d_model % 2:
        raise ValueError(f"odd d_model {d_model}")
    pos = torch.arange(max_len).float().unsqueeze(1)
    freq = torch.pow(10000.0, -torch.arange(0, d_model, 2).float() / d_model)
    angle = pos * freq
    return torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(max_len, d_model)


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


class PositionalEncodingHandDropout(nn.Module):
    """A hand-written dropout, index_select of the positions, an extra forward keyword, the length from dim -2."""

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


@pytest.mark.parametrize("fn", [sinusoidal_loops, sinusoidal_stack, sinusoidal_polar, sinusoidal_phase,
                                sinusoidal_transposed_view])
def test_other_correct_tables(fn):
    assert_full_marks(fn, "sinusoidal_encoding")


@pytest.mark.parametrize("cls", [PositionalEncodingAnnotated, PositionalEncodingFunctional,
                                 PositionalEncodingHandDropout, PositionalEncodingFloat64Buffer])
def test_other_correct_modules(cls):
    assert_full_marks(cls, "PositionalEncoding")


# ---------------------------------------------------------------- classic mistakes: the table
def make_table(how):
    def sinusoidal(max_len, d_model):
        if how != "no_value_error" and d_model % 2:
            raise ValueError("d_model must be even")
        pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1) + (1 if how == "from_one" else 0)
        i = torch.arange(d_model // 2, dtype=torch.float32)
        exponent = i / d_model if how == "i_over_d" else 2 * i / d_model
        angle = pos / 10000 ** exponent
        if how == "concat":
            return torch.cat([angle.sin(), angle.cos()], dim=1)
        pe = torch.zeros(max_len, d_model)
        first, second = (angle.cos(), angle.sin()) if how == "swapped" else (angle.sin(), angle.cos())
        pe[:, 0::2] = first
        pe[:, 1::2] = second
        if how == "column_exponent":  # the Annotated Transformer's typo-prone loop: pos / 10000^(j/d) per column j
            j = torch.arange(d_model, dtype=torch.float32)
            a = pos / 10000 ** (j / d_model)
            pe[:, 1::2] = a[:, 1::2].cos()
        return pe
    return sinusoidal


def table_four_i(max_len, d_model):
    """torch.arange(0, d_model, 2) (already 2i) doubled again: exponent 4i/d_model."""
    if d_model % 2:
        raise ValueError("odd")
    angle = torch.arange(max_len).float()[:, None] / 10000 ** (2 * torch.arange(0, d_model, 2).float() / d_model)
    return torch.stack([angle.sin(), angle.cos()], -1).reshape(max_len, d_model)


def table_assert(max_len, d_model):
    assert d_model % 2 == 0, "odd d_model"
    return solutions.sinusoidal_encoding(max_len, d_model)


def table_half_precision(max_len, d_model):
    return solutions.sinusoidal_encoding(max_len, d_model).half()


def table_list(max_len, d_model):
    return solutions.sinusoidal_encoding(max_len, d_model).tolist()


TABLE_MISTAKES = [
    ("sin and cos concatenated", make_table("concat"), ["concatenated"]),
    ("exponent i/d instead of 2i/d", make_table("i_over_d"), ["exponent i/d_model instead of 2i/d_model"]),
    ("sin and cos swapped", make_table("swapped"), ["swapped"]),
    ("no ValueError for odd d_model", make_table("no_value_error"), ["ValueError", "odd d_model"]),
    ("positions from 1", make_table("from_one"), ["positions counted from 1"]),
    ("cos column with its own exponent", make_table("column_exponent"), ["(2i+1)/d_model"]),
    ("exponent 4i/d (2i doubled)", table_four_i, ["exponent 4i/d_model"]),
    ("assert instead of ValueError", table_assert, ["ValueError", "AssertionError"]),
    ("float16", table_half_precision, ["float32 or float64"]),
    ("a list", table_list, ["torch.Tensor"]),
]


@pytest.mark.parametrize("label,fn,keywords", TABLE_MISTAKES, ids=[m[0] for m in TABLE_MISTAKES])
def test_table_mistakes_are_caught(label, fn, keywords):
    assert_caught(fn, "sinusoidal_encoding", *keywords)


# ---------------------------------------------------------------- classic mistakes: the module
class PEParameter(PositionalEncoding):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        table = self.pe
        del self.pe
        self.pe = nn.Parameter(table, requires_grad=False)


class PEPlainAttribute(PositionalEncoding):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        table = self.pe
        del self.pe
        self.pe = table  # not registered: does not move with .to()


class PENoDropout(PositionalEncoding):
    def forward(self, x):
        return x + self.pe[: x.size(1)]


class PENoLengthCheck(PositionalEncoding):
    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(1)])


class PEOffByOne(PositionalEncoding):
    def forward(self, x):
        if x.size(1) >= self.pe.size(0):
            raise ValueError("sequence too long")
        return super().forward(x)


class PEDropoutBeforeAdding(PositionalEncoding):
    def forward(self, x):
        return self.dropout(x) + self.pe[: x.size(1)]


class PEDropoutOnTable(PositionalEncoding):
    def forward(self, x):
        return x + self.dropout(self.pe[: x.size(1)])


class PEFixedRate(PositionalEncoding):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        self.dropout = nn.Dropout(0.1)


class PEDropoutAlways(PositionalEncoding):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        self.p = dropout

    def forward(self, x):
        return F.dropout(x + self.pe[: x.size(1)], self.p, training=True)


class PESequenceFirst(nn.Module):
    """PyTorch's old tutorial: a (max_len, 1, d) table for (length, batch, d) inputs."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", solutions.sinusoidal_encoding(max_len, d_model).unsqueeze(1))

    def forward(self, x):
        if x.size(1) > self.pe.size(0):
            raise ValueError("too long")
        return self.dropout(x + self.pe[: x.size(0)])  # (B, 1, d): position b's row added to all of batch row b


class PEScalesX(PositionalEncoding):
    def forward(self, x):
        return super().forward(x * math.sqrt(x.size(-1)))


class PEInPlace(PositionalEncoding):
    def forward(self, x):
        x += self.pe[: x.size(1)]
        return self.dropout(x)


class PEDefaultNoDropout(PositionalEncoding):
    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__(d_model, max_len, dropout)


class PEConcatTable(PositionalEncoding):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        self.pe = make_table("concat")(max_len, d_model)


class PEFixedLength(PositionalEncoding):
    """max_len ignored: the table always 5000 rows long."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, 5000, dropout)


class PEDropoutTwice(PositionalEncoding):
    def forward(self, x):
        return self.dropout(super().forward(x))


class PETableOnly(PositionalEncoding):
    def forward(self, x):
        if x.size(1) > self.pe.size(0):
            raise ValueError("too long")
        return self.dropout(self.pe[: x.size(1)].expand_as(x))


class PEHardCodedLimit(PositionalEncoding):
    def forward(self, x):
        if x.size(1) > 5000:
            raise ValueError("too long")
        return self.dropout(x + self.pe[: x.size(1)])


MODULE_MISTAKES = [
    ("table a Parameter", PEParameter, ["nn.Parameter", "register_buffer"]),
    ("table not registered", PEPlainAttribute, ["plain attribute", "register_buffer"]),
    ("dropout missing", PENoDropout, ["dropout missing"]),
    ("no error for a sequence longer than max_len", PENoLengthCheck, ["ValueError", "longer than max_len"]),
    ("max_len itself refused", PEOffByOne, ["exactly max_len long fits"]),
    ("dropout before adding the table", PEDropoutBeforeAdding, ["dropout(x) + PE"]),
    ("dropout on the table only", PEDropoutOnTable, ["x + dropout(PE)"]),
    ("dropout rate ignored", PEFixedRate, ["dropout argument is ignored"]),
    ("dropout in eval mode", PEDropoutAlways, ["eval mode"]),
    ("sequence-first slicing", PESequenceFirst, ["x.size(0) (the batch)"]),
    ("x scaled by sqrt(d_model)", PEScalesX, ["belongs to TokenEmbedding"]),
    ("x modified in place", PEInPlace, ["in place"]),
    ("default dropout 0", PEDefaultNoDropout, ["dropout=0.1"]),
    ("sin and cos concatenated", PEConcatTable, ["concatenated"]),
    ("max_len ignored", PEFixedLength, ["max_len argument is ignored"]),
    ("dropout applied twice", PEDropoutTwice, ["dropout applied twice"]),
    ("the table without x", PETableOnly, ["x itself plus the table"]),
    ("length limit hard-coded to 5000", PEHardCodedLimit, ["longer than max_len", "ValueError"]),
]


@pytest.mark.parametrize("label,cls,keywords", MODULE_MISTAKES, ids=[m[0] for m in MODULE_MISTAKES])
def test_module_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "PositionalEncoding", *keywords)


# ---------------------------------------------------------------- review B: correct, written differently
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
    """einsum, [sin | cos] concatenated and then interleaved by a column permutation; dtype/device keywords."""
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


class PETransposedTable(nn.Module):
    """The table stored (d_model, max_len); its columns sliced and transposed back in forward."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.register_buffer("pe_t", solutions.sinusoidal_encoding(max_len, d_model).t().contiguous())
        self.drop = nn.Dropout(p=dropout)

    def forward(self, x):
        if x.size(1) > self.pe_t.size(1):
            raise ValueError("too long for max_len")
        return self.drop(x + self.pe_t[:, : x.size(1)].t())


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


@pytest.mark.parametrize("fn", [table_outer_f64, table_numpy_rates, table_einsum_permuted, table_python_lists,
                                table_in_place, table_logspace])
def test_more_correct_tables(fn):
    assert_full_marks(fn, "sinusoidal_encoding")


@pytest.mark.parametrize("cls", [PEIdentityWhenNoDropout, PETransposedTable, PEEmbeddingLookup, PECloneAddInPlace,
                                 PEAddSubmodule, PEFloat64TableCastLike])
def test_more_correct_modules(cls):
    assert_full_marks(cls, "PositionalEncoding")


# ---------------------------------------------------------------- review B: more mistakes
def table_integer_division(max_len, d_model):
    if d_model % 2:
        raise ValueError("odd")
    angle = torch.arange(max_len)[:, None] / 10000 ** (torch.arange(0, d_model, 2) // d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = angle.sin(), angle.cos()
    return pe


def table_log10(max_len, d_model):
    if d_model % 2:
        raise ValueError("odd")
    div = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log10(10000.0) / d_model))
    angle = torch.arange(max_len).float()[:, None] * div
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = angle.sin(), angle.cos()
    return pe


def table_batch_axis(max_len, d_model):
    return solutions.sinusoidal_encoding(max_len, d_model).unsqueeze(0)


def table_transposed(max_len, d_model):
    return solutions.sinusoidal_encoding(max_len, d_model).T


def table_int64(max_len, d_model):
    """zeros_like of integer positions: the sines are truncated to integers."""
    if d_model % 2:
        raise ValueError("odd")
    pos = torch.arange(max_len).unsqueeze(1)
    pe = torch.zeros_like(pos).repeat(1, d_model)
    angle = pos / 10000 ** (torch.arange(0, d_model, 2) / d_model)
    pe[:, 0::2], pe[:, 1::2] = angle.sin(), angle.cos()
    return pe


def table_base_1000(max_len, d_model):
    if d_model % 2:
        raise ValueError("odd")
    angle = torch.arange(max_len).float()[:, None] / 1000 ** (torch.arange(0, d_model, 2).float() / d_model)
    return torch.stack([angle.sin(), angle.cos()], -1).reshape(max_len, d_model)


def table_one_row_short(max_len, d_model):
    return solutions.sinusoidal_encoding(max_len + 1, d_model)[1:]


TABLE_MISTAKES_B = [
    ("integer division in the exponent", table_integer_division, ["integer division"]),
    ("math.log10", table_log10, ["log10", "natural logarithm"]),
    ("a leading batch axis", table_batch_axis, ["leading batch axis", "(max_len, d_model)"]),
    ("transposed", table_transposed, ["transposed", "(d_model, max_len)"]),
    ("an int64 table", table_int64, ["float32", "int64"]),
    ("base 1000", table_base_1000, ["base 1000"]),
    ("positions 1..max_len", table_one_row_short, ["positions counted from 1"]),
]


@pytest.mark.parametrize("label,fn,keywords", TABLE_MISTAKES_B, ids=[m[0] for m in TABLE_MISTAKES_B])
def test_more_table_mistakes_are_caught(label, fn, keywords):
    assert_caught(fn, "sinusoidal_encoding", *keywords)


class PEBatchAxisLengthCheck(nn.Module):
    """A (1, max_len, d) table, but the length compared with pe.size(0), which is 1."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.register_buffer("pe", solutions.sinusoidal_encoding(max_len, d_model).unsqueeze(0))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        if x.size(1) > self.pe.size(0):
            raise ValueError("longer than max_len")
        return self.dropout(x + self.pe[:, : x.size(1)])


class PEBatchAxisSlicedFirst(PEBatchAxisLengthCheck):
    """A (1, max_len, d) table sliced pe[:L]: the axis of size 1, so the whole table is added."""

    def forward(self, x):
        if x.size(1) > self.pe.size(1):
            raise ValueError("longer than max_len")
        return self.dropout(x + self.pe[: x.size(1)])


class PETableArgumentsSwapped(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.register_buffer("pe", solutions.sinusoidal_encoding(max_len, d_model).T.contiguous())  # as if (d, L)
        self.dropout = nn.Dropout(dropout)
        self.max_len = max_len

    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")
        return self.dropout(x + self.pe[: x.size(1)])


class PENoGradForward(PositionalEncoding):
    @torch.no_grad()
    def forward(self, x):
        return super().forward(x)


class PEDetachesX(PositionalEncoding):
    def forward(self, x):
        return super().forward(x.detach())


class PEDropoutBuiltInForward(PositionalEncoding):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        self.p = dropout

    def forward(self, x):
        if x.size(1) > self.pe.size(0):
            raise ValueError("too long")
        return nn.Dropout(self.p)(x + self.pe[: x.size(1)])


class PEShortensItsTable(PositionalEncoding):
    """self.pe = self.pe[:L]: the next, longer sequence finds a shorter table."""

    def forward(self, x):
        if x.size(1) > self.pe.size(0):
            raise ValueError("too long")
        self.pe = self.pe[: x.size(1)]
        return self.dropout(x + self.pe)


class PECachesFirstSlice(PositionalEncoding):
    def forward(self, x):
        if x.size(1) > self.pe.size(0):
            raise ValueError("too long")
        if not hasattr(self, "_slice"):
            self._slice = self.pe[: x.size(1)]
        return self.dropout(x + self._slice)


class PESequenceFirstTable(nn.Module):
    """The old tutorial's (max_len, 1, d) table, sliced by the length of batch-first x."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.register_buffer("pe", solutions.sinusoidal_encoding(max_len, d_model).unsqueeze(1))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        if x.size(1) > self.pe.size(0):
            raise ValueError("too long")
        return self.dropout(x + self.pe[: x.size(1)])


class PEScalesTable(PositionalEncoding):
    def forward(self, x):
        if x.size(1) > self.pe.size(0):
            raise ValueError("too long")
        return self.dropout(x + self.pe[: x.size(1)] * math.sqrt(x.size(-1)))


class PELengthCheckOnBatch(PositionalEncoding):
    def forward(self, x):
        if x.size(0) > self.pe.size(0):
            raise ValueError("too long")
        return self.dropout(x + self.pe[: x.size(1)])


class PEIndexErrorTooLong(PositionalEncoding):
    def forward(self, x):
        if x.size(1) > self.pe.size(0):
            raise IndexError("too long")
        return self.dropout(x + self.pe[: x.size(1)])


MODULE_MISTAKES_B = [
    ("(1, L, d) table, length vs pe.size(0)", PEBatchAxisLengthCheck, ["self.pe.size(1)", "(1, max_len, d_model)"]),
    ("(1, L, d) table sliced on its first axis", PEBatchAxisSlicedFirst, ["self.pe[:, :x.size(1)]"]),
    ("table built (d_model, max_len)", PETableArgumentsSwapped, ["(d_model, max_len)", "arguments in that order"]),
    ("forward under torch.no_grad", PENoGradForward, ["torch.no_grad()", "without gradient"]),
    ("x detached", PEDetachesX, [".detach()", "without gradient"]),
    ("nn.Dropout built inside forward", PEDropoutBuiltInForward, ["eval mode", "built inside forward"]),
    ("the stored table shortened", PEShortensItsTable, ["shrank", "self.pe = self.pe[:L]"]),
    ("a slice cached from the first call", PECachesFirstSlice, ["earlier call"]),
    ("(max_len, 1, d) table for batch-first x", PESequenceFirstTable, ["(max_len, 1, d_model)", "batch-first"]),
    ("the table scaled by sqrt(d_model)", PEScalesTable, ["table multiplied by sqrt(d_model)"]),
    ("length checked on the batch axis", PELengthCheckOnBatch, ["ValueError", "longer than max_len"]),
    ("IndexError for a long sequence", PEIndexErrorTooLong, ["ValueError", "IndexError"]),
]


@pytest.mark.parametrize("label,cls,keywords", MODULE_MISTAKES_B, ids=[m[0] for m in MODULE_MISTAKES_B])
def test_more_module_mistakes_are_caught(label, cls, keywords):
    assert_caught(cls, "PositionalEncoding", *keywords)


# ---------------------------------------------------------------- review C: mistakes the checks missed or misnamed
class PEDefaultMaxLen512(PositionalEncoding):
    def __init__(self, d_model, max_len=512, dropout=0.1):
        super().__init__(d_model, max_len, dropout)


class PEFloat64NotCast(PositionalEncoding):
    """A float64 table added as it is: float32 x comes out float64, which the next nn.Linear refuses."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        self.register_buffer("pe", self.pe.double(), persistent=False)

    def forward(self, x):
        if x.size(1) > self.pe.size(0):
            raise ValueError("too long")
        return self.dropout(x + self.pe[: x.size(1)])


class PEKeepProbability(PositionalEncoding):
    """TensorFlow 1's keep_prob habit: nn.Dropout(1 - dropout)."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        self.dropout = nn.Dropout(1 - dropout)


class PEMultiplies(PositionalEncoding):
    def forward(self, x):
        if x.size(1) > self.pe.size(0):
            raise ValueError("too long")
        return self.dropout(x * self.pe[: x.size(1)])


class PEUnsqueezedSlice(PositionalEncoding):
    """The old tutorial's sequence-first habit on a 2-d table: pe[:L].unsqueeze(1) is (L, 1, d), which meets the
    batch axis of batch-first x (found by a learner simulation: the message blamed the slice, which was right)."""

    def forward(self, x):
        if x.size(1) > self.pe.size(0):
            raise ValueError("too long")
        return self.dropout(x + self.pe[: x.size(1)].unsqueeze(1))


MODULE_MISTAKES_C = [
    ("the slice unsqueezed on axis 1", PEUnsqueezedSlice, ["shaped (length, 1, d_model)", "sequence-first"]),
    ("default max_len 512", PEDefaultMaxLen512, ["default max_len=5000", "fewer than 5000 positions"]),
    ("a float64 table not cast", PEFloat64NotCast, ["torch.float64", "x.dtype"]),
    ("nn.Dropout(1 - dropout)", PEKeepProbability, ["ZEROING", "1 - dropout"]),
    ("x multiplied by the table", PEMultiplies, ["multiplied by the table"]),
]


@pytest.mark.parametrize("label,cls,keywords", MODULE_MISTAKES_C, ids=[m[0] for m in MODULE_MISTAKES_C])
def test_module_mistakes_review_c(label, cls, keywords):
    assert_caught(cls, "PositionalEncoding", *keywords)


def test_checks_leave_the_global_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    grade(solutions.PositionalEncoding)
    assert torch.equal(torch.rand(3), expected)


def test_targeted_mistakes_lose_little():
    points, _ = grade(PENoLengthCheck, "PositionalEncoding")
    assert points >= 4
    points, _ = grade(PEParameter, "PositionalEncoding")
    assert points >= 5


# ---------------------------------------------------------------- stubs
def test_stubs_get_zero_and_say_not_implemented():
    def sinusoidal_encoding(max_len, d_model):  # the stub keeps the odd-d_model check of the lesson
        if d_model % 2:
            raise ValueError(f"d_model must be even for the sinusoidal table (sin and cos pairs), got {d_model}")
        raise NotImplementedError()

    class PositionalEncoding(nn.Module):
        def __init__(self, d_model, max_len=5000, dropout=0.1):
            super().__init__()
            raise NotImplementedError()

    for obj in (sinusoidal_encoding, PositionalEncoding):
        points, text = grade(obj)
        n = len([line for line in text.splitlines() if line.startswith(("✓", "✗"))])
        assert points == 0 and text.count("not implemented yet") == n, text


def test_checks_are_fast():
    import time
    for obj in (sinusoidal_encoding, PositionalEncoding):
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


# ---------------------------------------------------------------- issue 17: no cause guessed when none reproduces
def sin_positions_as_fractions(max_len, d_model):
    """Positions scaled into 0..1 (pos / max_len): no classic mistake gives these numbers."""
    if d_model % 2:
        raise ValueError(f"d_model must be even, got {d_model}")
    pos = torch.arange(max_len, dtype=torch.float32)[:, None] / max_len
    angle = pos / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return pe


def sin_positions_from_half(max_len, d_model):
    """Positions 0.5, 1.5, ...: not a precision problem, whatever the table's size."""
    if d_model % 2:
        raise ValueError(f"d_model must be even, got {d_model}")
    pos = torch.arange(max_len, dtype=torch.float64)[:, None] + 0.5
    angle = pos / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1).reshape(max_len, d_model).float()


@pytest.mark.parametrize("fn", [sin_positions_as_fractions, sin_positions_from_half])
def test_an_unrecognized_table_gets_the_formula_and_no_guess(fn):
    points, text = grade(fn, "sinusoidal_encoding")
    assert points == max_points("sinusoidal_encoding") - 3, text  # the example, the formula, the large table
    assert "Likely:" not in text, text  # neither the formula restated as a cause, nor a precision problem
    assert ("there (PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(the same angle)); got"
            in text), text


def sin_float16(max_len, d_model):
    """The right formula in half precision: right for small tables, off for the paper's sizes."""
    pos = torch.arange(max_len, dtype=torch.float16)[:, None]
    angle = pos * torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2, dtype=torch.float16) / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angle.float()), torch.cos(angle.float())
    return pe


def test_a_table_computed_in_half_precision_is_told_so():
    points, line = grade_one(sin_float16, "sinusoidal_encoding", "stays accurate")
    assert points == 0 and line.endswith("Likely: compute the angle in float32 or float64, pos / 10000^(2i/d_model) = "
                                         "pos * exp(-ln(10000) * 2i / d_model)"), line
