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


@pytest.mark.parametrize("fn", [sinusoidal_loops, sinusoidal_stack])
def test_other_correct_tables(fn):
    assert_full_marks(fn, "sinusoidal_encoding")


@pytest.mark.parametrize("cls", [PositionalEncodingAnnotated, PositionalEncodingFunctional])
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
