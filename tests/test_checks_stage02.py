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
from tests.grading import assert_caught, assert_full_marks, grade


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


def test_checks_write_nothing_to_stderr(capfd):
    """A mistaken module in a fresh interpreter: the report on stdout, nothing at all on stderr."""
    import subprocess
    import sys
    code = ("import torch; from torch import nn; from autograder import check\n"
            "class PositionalEncoding(nn.Module):\n"
            "    def __init__(self, d_model, max_len=5000, dropout=0.1):\n"
            "        super().__init__(); self.pe = torch.zeros(max_len, d_model)\n"
            "    def forward(self, x):\n"
            "        import warnings; warnings.warn('mine'); return x.T\n"
            "check(PositionalEncoding)\n")
    import pathlib
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=pathlib.Path(__file__).resolve().parents[1])
    assert done.returncode == 0 and done.stderr == "" and "PositionalEncoding: 0/" in done.stdout, done
