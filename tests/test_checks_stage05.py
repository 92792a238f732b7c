"""Stage 05's checks: full marks for masks however built; for each classic mistake (polarity, the diagonal, queries
instead of keys, dtype, device), exactly the points it earns and the words that name it (the reference and the
stub: tests/test_registry.py)."""
import time

import numpy as np
import pytest
import torch

import solutions
from tests.grading import Mistake, assert_full_marks, assert_mistake, edit, mistakes

NAMES = ["padding_mask", "causal_mask", "target_mask"]
PADDING, CAUSAL, TARGET = solutions.padding_mask, solutions.causal_mask, solutions.target_mask


def _pad(expr):
    return edit(PADDING, ("return (ids != pad_id)[:, None, None, :]", f"return {expr}"))


def _causal(*changes):
    return edit(CAUSAL, *changes)


def _target(expr):
    return edit(TARGET, ("return padding_mask(tgt_ids, pad_id) & causal_mask(L, tgt_ids.device)", f"return {expr}"))


# a mask made on the CPU, or sent there, for ids on a GPU ('meta' ids that can be read play them): the values are
# right, only the device point is lost, and the message says which of the two happened
SENT = "the mask's device; expected the device of the ids; got cpu. Likely: a .cpu() or .to('cpu')"
MOVED = "sends the mask to the CPU: on a GPU it comes back there and cannot meet the scores; leave it out"
BUILT = ("Likely: the mask was built on the CPU", "never moved to the ids' device")


# ---------------------------------------------------------------- padding_mask
def padding_mask_lengths(ids, pad_id=0):
    """From the lengths of right-padded rows (the course pads on the right)."""
    lengths = (ids != pad_id).sum(dim=1)  # (B,)
    positions = torch.arange(ids.size(1), device=ids.device)
    return (positions[None, :] < lengths[:, None]).view(ids.size(0), 1, 1, ids.size(1))


def padding_mask_from_lists(ids, pad_id=0):
    """Python lists, back to a tensor on the ids' device."""
    rows = [[int(t) != pad_id for t in row] for row in ids.tolist()]
    return torch.tensor(rows, dtype=torch.bool, device=ids.device)[:, None, None, :]


def padding_mask_keyword_only(ids, pad_id=0, *, dims=4):
    m = ~(ids == pad_id)
    while m.dim() < dims:
        m = m.unsqueeze(1)
    return m


def padding_mask_unsqueeze(ids, pad_id=0):
    return ids.ne(pad_id).unsqueeze(1).unsqueeze(2)


@pytest.mark.parametrize("fn", [
    padding_mask_unsqueeze, padding_mask_lengths, padding_mask_from_lists, padding_mask_keyword_only,
    lambda ids, pad_id=0: (ids - pad_id).bool()[:, None, None],
    lambda ids, pad_id=0: torch.ne(ids, pad_id)[:, None, None],
    lambda ids, pad_id=0: torch.where(ids == pad_id, False, True).view(ids.size(0), 1, 1, ids.size(1)),
    lambda ids, pad_id=0: torch.from_numpy(ids.cpu().numpy() != pad_id)[:, None, None].to(ids.device),
    lambda ids, pad_id=0: torch.isin(ids, torch.tensor([pad_id]), invert=True).unsqueeze(-2).unsqueeze(-2),
    lambda ids, pad_id=0: torch.tensor([[t != pad_id for t in row] for row in ids.tolist()],
                                       device=ids.device)[:, None, None],
], ids=["unsqueeze", "lengths", "from lists", "keyword-only extra", "difference", "torch.ne", "where",
        "numpy moved back", "isin", "lists moved back"])
def test_other_correct_padding_masks(fn):
    assert_full_marks(fn, "padding_mask")


def padding_mask_item_loop(ids, pad_id=0):
    """Reads each id with .item() into a mask made on the default device."""
    B, L = ids.shape
    m = torch.ones(B, 1, 1, L, dtype=torch.bool)
    for b in range(B):
        for j in range(L):
            if ids[b, j].item() == pad_id:
                m[b, 0, 0, j] = False
    return m


PADDING_MISTAKES = [
    Mistake("polarity inverted", _pad("(ids == pad_id)[:, None, None, :]"), 2, "polarity inverted"),
    Mistake("ids > pad_id", _pad("(ids > pad_id)[:, None, None, :]"), 3, "ids > pad_id"),
    Mistake("pad_id ignored", _pad("(ids != 0)[:, None, None, :]"), 3, "pad_id argument is ignored"),
    Mistake("over the queries", _pad("(ids != pad_id)[:, None, :, None]"), 1, ("over the queries", "(B, 1, 1, L)")),
    Mistake("expanded over the queries", _pad("(ids != pad_id)[:, None, None, :].expand(-1, 1, ids.size(1), -1)"), 1,
            "expanded over the queries"),
    Mistake("shape (B, L)", _pad("ids != pad_id"), 1, "shape (B, L)"),
    Mistake("dims in front of the batch", _pad("(ids != pad_id)[None, None]"), 1, "added in front of the batch"),
    Mistake("float mask", _pad("(ids != pad_id).float()[:, None, None, :]"), 3, "not bool"),
    Mistake("additive -inf mask",
            _pad('torch.zeros(ids.shape).masked_fill(ids == pad_id, float("-inf"))[:, None, None, :]'), 1,
            "additive float mask"),
    Mistake("additive mask of 0 and -1e9",  # the Hugging Face habit: it was told 'polarity inverted'
            _pad("((ids == pad_id).float() * -1e9)[:, None, None, :]"), 1, ("additive float mask", "0 / -1e+09"),
            not_says="polarity"),
    Mistake("ids modified in place",
            edit(PADDING, ("return (ids != pad_id)", "ids[ids == pad_id] = -1  # right mask, the caller's ids changed\n"
                                                     "    return (ids != -1)")), 3, "modified in place"),
    # built on the CPU, never moved to the ids' device: only the device point lost
    Mistake("numpy, left on the CPU", _pad("torch.from_numpy(ids.cpu().numpy() != pad_id)[:, None, None, :]"), 3,
            ("never moved to the ids' device", ".to(ids.device)")),
    Mistake("lists without device=", _pad("torch.tensor([[t != pad_id for t in row] for row in ids.tolist()])"
                                          "[:, None, None]"), 3, ("never moved to the ids' device", ".to(ids.device)")),
    Mistake("a loop of .item() into a CPU mask", padding_mask_item_loop, 3,
            ("never moved to the ids' device", ".to(ids.device)")),
    Mistake("ids copied to the CPU, mask built there", _pad("(ids.cpu() != pad_id)[:, None, None, :]"), 3, BUILT,
            not_says=MOVED),
    Mistake("a trailing .cpu()", _pad("(ids != pad_id)[:, None, None, :].cpu()"), 3, (SENT, MOVED)),
    Mistake("a trailing .to('cpu')", _pad("(ids != pad_id).unsqueeze(1).unsqueeze(2).to('cpu')"), 3, (SENT, MOVED)),
]


@pytest.mark.parametrize("m", mistakes("padding_mask", PADDING_MISTAKES))
def test_padding_mask_mistakes(m):
    assert_mistake(m)


# ---------------------------------------------------------------- causal_mask
def causal_mask_arange(size, device=None):
    i = torch.arange(size, device=device)
    return (i[:, None] >= i[None, :]).reshape(1, 1, size, size)


def causal_mask_rows(size, device=None):
    """Row by row into a tensor made on the device."""
    m = torch.zeros(size, size, dtype=torch.bool, device=device)
    for i in range(size):
        m[i, : i + 1] = True
    return m.unsqueeze(0).unsqueeze(0)


def causal_mask_tril_indices(size, device=None):
    m = torch.zeros(size, size, dtype=torch.bool, device=device)
    i = torch.tril_indices(size, size, device=device)
    m[i[0], i[1]] = True
    return m.expand(1, 1, size, size)


def causal_mask_device_context(size, device=None):
    with torch.device(device if device is not None else "cpu"):
        r = torch.arange(size)
        return (r.unsqueeze(1) >= r).unsqueeze(0).unsqueeze(0)


def causal_mask_numpy(size, device=None):
    return torch.from_numpy(np.tril(np.ones((size, size), dtype=bool))).to(device=device)[None, None]


@pytest.mark.parametrize("fn", [
    causal_mask_arange, causal_mask_rows, causal_mask_tril_indices, causal_mask_device_context,
    lambda size, device=None: ~torch.triu(torch.ones(size, size, dtype=torch.bool, device=device),
                                          diagonal=1)[None, None],
    lambda size, device=None: torch.tensor([[j <= i for j in range(size)] for i in range(size)], dtype=torch.bool,
                                           device=device).unsqueeze(0).unsqueeze(0),
    causal_mask_numpy,
    lambda size, device=None: torch.tril(torch.ones(size, size, device=device)).bool().view(1, 1, size, size),
    lambda size, device=None: torch.ones(size, size, dtype=torch.bool, device=device).tril_().unsqueeze(0).unsqueeze(0),
    lambda size, device=None: torch.tensor(np.tri(size, dtype=bool), device=device)[None, None],
    lambda size, device=None: torch.ones(size, size, dtype=torch.bool).tril().to(device)[None, None],
], ids=["arange", "rows", "tril_indices", "device context", "~triu", "loop", "numpy", "float then bool", "tril_",
        "np.tri", "moved"])
def test_other_correct_causal_masks(fn):
    assert_full_marks(fn, "causal_mask")


CAUSAL_MISTAKES = [
    Mistake("tril(-1): no diagonal", _causal(("tril()", "tril(-1)")), 2, "diagonal is missing"),
    Mistake("~triu(0): no diagonal", _causal(("torch.ones(", "~torch.ones("), ("tril()", "triu()")), 2,
            "diagonal is missing"),  # triu(0): the diagonal goes too
    Mistake("inverted", _causal(("tril()", "triu(1)")), 2, ("inverted", "above the diagonal")),
    Mistake("transposed", _causal(("tril()", "triu()")), 2, "transposed"),
    Mistake("only the diagonal",
            _causal(("torch.ones(size, size, dtype=torch.bool, device=device).tril()",
                     "torch.eye(size, dtype=torch.bool, device=device)")), 2, "only the diagonal"),
    Mistake("all True", _causal((".tril()", "")), 2, "all True"),
    Mistake("size - 1", _causal(("torch.ones(size, size,", "torch.ones(size - 1, size - 1,")), 1, "off by one"),
    Mistake("cut from a fixed 5 x 5 table",  # right for every size up to 5, as if the longest sentence were 5 tokens
            _causal(("torch.ones(size, size,", "torch.ones(5, 5,"), ("[None, None]", "[None, None, :size, :size]")), 2,
            ("causal_mask(9)", "wrong shape")),
    Mistake("float", _causal((", dtype=torch.bool", "")), 2, "not bool"),
    Mistake("no batch and head dims", _causal(("[None, None]", "")), 1, "add the batch and head dimensions"),
    Mistake("one leading dim", _causal(("[None, None]", "[None]")), 1, "one of the two leading dimensions is missing"),
    Mistake("device ignored", _causal((", device=device", "")), 2, "ignores `device`"),
    Mistake("a trailing .cpu()", _causal(("[None, None]", "[None, None].cpu()")), 2,
            ("Likely: a .cpu(), .to('cpu') or .tolist() of the mask made on `device` sends it to the CPU: on a GPU it "
             "comes back there and cannot meet the scores"), not_says="not implemented"),
    Mistake("a .to('cpu')", _causal((".tril()", ".tril().to('cpu')")), 2,  # a 'meta' copy's error is not a stub's
            ("Likely: a .cpu(), .to('cpu') or .tolist() of the mask made on `device` sends it to the CPU: on a GPU it "
             "comes back there and cannot meet the scores"), not_says="not implemented"),
]


@pytest.mark.parametrize("m", mistakes("causal_mask", CAUSAL_MISTAKES))
def test_causal_mask_mistakes(m):
    assert_mistake(m)


# ---------------------------------------------------------------- target_mask
def target_mask_logical_and(tgt_ids, pad_id=0):
    B, L = tgt_ids.shape
    keys = (tgt_ids != pad_id).view(B, 1, 1, L)
    causal = torch.tril(torch.ones(L, L, device=tgt_ids.device)).bool()
    return torch.logical_and(keys, causal).expand(B, 1, L, L)


def target_mask_loops(tgt_ids, pad_id=0):
    """Reads each id (cannot run on the data-less 'meta' device, right on any real one)."""
    B, L = tgt_ids.shape
    m = torch.zeros(B, 1, L, L, dtype=torch.bool, device=tgt_ids.device)
    for b in range(B):
        for i in range(L):
            for j in range(i + 1):
                if tgt_ids[b, j] != pad_id:
                    m[b, 0, i, j] = True
    return m


def target_mask_lists_moved(tgt_ids, pad_id=0):
    """Built from lists on the default device, then moved to the ids' device."""
    B, L = tgt_ids.shape
    rows = tgt_ids.tolist()
    m = [[[[j <= i and rows[b][j] != pad_id for j in range(L)] for i in range(L)]] for b in range(B)]
    return torch.tensor(m, dtype=torch.bool).to(tgt_ids.device)


def target_mask_type_as(tgt_ids, pad_id=0):
    """The Annotated Transformer's subsequent_mask(...).type_as(...), with the head dimension."""
    L = tgt_ids.size(-1)
    keys = (tgt_ids != pad_id).unsqueeze(-2).unsqueeze(1)
    subsequent = torch.triu(torch.ones(1, L, L), diagonal=1).type(torch.uint8) == 0
    return keys & subsequent.type_as(keys.data)


def target_mask_new_ones_masked_fill(tgt_ids, pad_id=0):
    L = tgt_ids.shape[-1]
    causal = tgt_ids.new_ones(L, L, dtype=torch.bool).tril()
    return causal.expand(tgt_ids.size(0), 1, L, L).masked_fill((tgt_ids == pad_id)[:, None, None, :], False)


def target_mask_repeat_keyword_only(tgt_ids, pad_id=0, *, causal=True):
    B, L = tgt_ids.shape
    m = (tgt_ids != pad_id).view(B, 1, 1, L).repeat(1, 1, L, 1)
    return m & torch.ones_like(m[0, 0]).tril() if causal else m


def target_mask_numpy_moved(tgt_ids, pad_id=0):
    a = tgt_ids.cpu().numpy()
    m = (a != pad_id)[:, None, None, :] & np.tril(np.ones((a.shape[1], a.shape[1]), dtype=bool))
    return torch.from_numpy(m).to(tgt_ids.device)


def target_mask_tril_of_expanded_padding(tgt_ids, pad_id=0):
    B, L = tgt_ids.shape
    return torch.tril(tgt_ids.ne(pad_id).view(B, 1, 1, L).expand(B, 1, L, L))


def _ones(ids, dtype=torch.bool):
    """An (L, L) tensor of ones on the ids' device, for the causal part."""
    return torch.ones(ids.size(1), ids.size(1), dtype=dtype, device=ids.device)


@pytest.mark.parametrize("fn", [
    target_mask_logical_and, target_mask_loops, target_mask_lists_moved, target_mask_type_as,
    target_mask_new_ones_masked_fill, target_mask_repeat_keyword_only, target_mask_numpy_moved,
    lambda tgt_ids, pad_id=0: (causal_mask_arange(tgt_ids.size(1), tgt_ids.device)
                               & padding_mask_unsqueeze(tgt_ids, pad_id)),
    lambda tgt_ids, pad_id=0: (tgt_ids != pad_id)[:, None, None, :] * _ones(tgt_ids).tril()[None, None],
    target_mask_tril_of_expanded_padding,
    lambda tgt_ids, pad_id=0: ((tgt_ids != pad_id).float()[:, None, None, :] * _ones(tgt_ids, None).tril()).bool(),
    lambda tgt_ids, pad_id=0: torch.minimum((tgt_ids != pad_id)[:, None, None, :].to(torch.uint8),
                                            _ones(tgt_ids, torch.uint8).tril()).bool(),
], ids=["logical_and", "loops", "lists moved back", "type_as", "new_ones masked_fill", "repeat, keyword-only extra",
        "numpy moved back", "from the parts", "bool product", "tril of the expanded padding", "float product",
        "uint8 minimum"])
def test_other_correct_target_masks(fn):
    assert_full_marks(fn, "target_mask")


def tgt_lists_on_default_device(ids, pad_id=0):
    """From lists, without device=: on a GPU the mask stays on the CPU."""
    B, L = ids.shape
    rows = ids.tolist()
    return torch.tensor([[[[j <= i and rows[b][j] != pad_id for j in range(L)] for i in range(L)]] for b in range(B)])


_CAUSAL_PART = "causal_mask(L, tgt_ids.device)"
TARGET_MISTAKES = [
    Mistake("padding forgotten", _target("causal_mask(L, tgt_ids.device).expand(tgt_ids.size(0), 1, -1, -1)"), 2,
            "padding part is missing"),
    Mistake("causal forgotten", _target("padding_mask(tgt_ids, pad_id).expand(-1, 1, L, -1)"), 2,
            "causal part is missing"),
    Mistake("padding on the queries", _target(f"(tgt_ids != pad_id)[:, None, :, None] & {_CAUSAL_PART}"), 2,
            ("applied to the queries (rows)", "(B, 1, 1, L)")),
    Mistake("padding on queries and keys",
            _target(f"(tgt_ids != pad_id)[:, None, :, None] & padding_mask(tgt_ids, pad_id) & {_CAUSAL_PART}"), 2,
            ("applied to the queries (rows)", "keeps its causal row")),
    Mistake("or instead of and", edit(TARGET, (") & causal", ") | causal")), 2, "or instead of and"),
    Mistake("padding inverted", _target(f"(tgt_ids == pad_id)[:, None, None, :] & {_CAUSAL_PART}"), 2,
            "padding part is inverted"),
    Mistake("causal part transposed", _target("padding_mask(tgt_ids, pad_id) & torch.ones(L, L, dtype=torch.bool, "
                                              "device=tgt_ids.device).triu()"), 2, "causal part is transposed"),
    Mistake("ids > pad_id", _target(f"(tgt_ids > pad_id)[:, None, None, :] & {_CAUSAL_PART}"), 3, "ids > pad_id"),
    Mistake("pad_id ignored", edit(TARGET, ("padding_mask(tgt_ids, pad_id)", "padding_mask(tgt_ids)")), 3,
            "pad_id argument is ignored"),
    Mistake("batch size taken as the length", edit(TARGET, ("L = tgt_ids.size(1)", "L = tgt_ids.size(0)")), 0,
            ("do not fit together", "tgt_ids.size(1)")),
    Mistake("no head dim", _target("(tgt_ids != pad_id)[:, None, :] & torch.ones(L, L, dtype=torch.bool, "
                                   "device=tgt_ids.device).tril()"), 1, "head dimension is missing"),
    Mistake("float", _target(f"(padding_mask(tgt_ids, pad_id) & {_CAUSAL_PART}).float()"), 3, "not bool"),
    Mistake("ids modified in place",
            edit(TARGET, ("return padding_mask(tgt_ids, pad_id) & causal_mask(L, tgt_ids.device)",
                          "mask = padding_mask(tgt_ids, pad_id) & causal_mask(L, tgt_ids.device)\n"
                          "    tgt_ids[tgt_ids == pad_id] = -1  # the right mask, but the caller's ids are changed\n"
                          "    return mask")), 2, "modified in place"),
    # the pad_id check names the real mistake, not pad_id, which is passed on
    Mistake("exclusive or", edit(TARGET, (") & causal", ") ^ causal")), 0, "exclusive or",
            title="uses the pad_id argument", not_says="pass pad_id on"),
    Mistake("padding on both axes, causal forgotten",
            _target("padding_mask(tgt_ids, pad_id) & padding_mask(tgt_ids, pad_id).transpose(-1, -2)"), 0,
            ("causal part is missing", "as well as"), title="uses the pad_id argument", not_says="pass pad_id on"),
    Mistake("causal one above the diagonal (named by no variant)",
            edit(TARGET, (_CAUSAL_PART, "torch.ones(L, L, dtype=torch.bool).tril(1)[None, None]")), 0,
            "pad_id is passed on", title="uses the pad_id argument", not_says="pass pad_id on"),
    # the device: only its point lost
    Mistake("causal part on the CPU", edit(TARGET, (_CAUSAL_PART, "causal_mask(L)")), 3,
            "causal_mask(L, tgt_ids.device)"),
    Mistake("lists without device=", tgt_lists_on_default_device, 3, "device=tgt_ids.device"),
    Mistake("numpy, left on the CPU", lambda tgt_ids, pad_id=0: target_mask_numpy_moved(tgt_ids.cpu(), pad_id).cpu(), 3,
            ("never moved to the ids' device", ".to(tgt_ids.device)")),
    Mistake("padding part sent to the CPU",
            _target("padding_mask(tgt_ids, pad_id).cpu() & torch.ones(L, L, dtype=torch.bool).tril()"), 3, BUILT,
            not_says=MOVED),
    Mistake("a trailing .to('cpu')", _target(f"(padding_mask(tgt_ids, pad_id) & {_CAUSAL_PART}).to('cpu')"), 3,
            (SENT, MOVED)),
]


@pytest.mark.parametrize("m", mistakes("target_mask", TARGET_MISTAKES))
def test_target_mask_mistakes(m):
    assert_mistake(m)


def test_a_missing_head_dim_is_named_for_every_length():
    """target_mask(ids, pad_id=7) has L = 6: the shape hints follow the length."""
    [m] = [p.values[0] for p in mistakes("target_mask", TARGET_MISTAKES) if p.id == "no head dim"]
    assert assert_mistake(m).count("head dimension is missing") == 3


# ---------------------------------------------------------------- the checks themselves
def test_checks_are_fast_on_the_reference():
    from autograder import REGISTRY
    for name in NAMES:
        for c in REGISTRY[name]:
            times = []
            for _ in range(2):
                start = time.perf_counter()
                c.fn(getattr(solutions, name))
                times.append(time.perf_counter() - start)
            assert min(times) < 1.0, f"{name}: {c.title} takes {min(times):.2f} s"
