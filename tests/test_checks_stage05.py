"""Stage 05's checks: full marks for masks however built; for each classic mistake (polarity, the diagonal,
queries instead of keys, dtype, device), exactly the points it earns and the words that name it (the reference
and the stub: tests/test_registry.py)."""
import functools
import inspect
import timeit

import numpy as np
import pytest
import torch

import solutions
from tests.grading import Mistake, assert_full_marks, assert_mistake, edit, mistakes

NAMES = ["padding_mask", "causal_mask", "target_mask"]
PADDING, CAUSAL, TARGET = solutions.padding_mask, solutions.causal_mask, solutions.target_mask
_CAUSAL_PART, _ONES = "causal_mask(L, tgt_ids.device)", ("torch.ones(L, L, dtype={}, "
                                                         "device=tgt_ids.device).tril()")


def _written(ref, *lines, args=""):
    """`ref` with its body written as `lines` (the last one returns) and `args` added after its parameters."""
    src = inspect.getsource(ref)
    body = src[src.index("### BEGIN SOLUTION\n") + 19:src.index("    ### END SOLUTION")]
    return edit(ref, (body, "".join(f"    {line}\n" for line in lines)),
                (") -> torch.Tensor:", f"{args}) -> torch.Tensor:"))


def _returning(ref, expr):
    """`ref` returning `expr` instead of its mask."""
    mask = inspect.getsource(ref).split("    return ")[-1].split("  #")[0]
    return edit(ref, (f"return {mask}", f"return {expr}"))


_pad, _target, _causal_is = (functools.partial(_returning, ref) for ref in (PADDING, TARGET, CAUSAL))
_causal = functools.partial(edit, CAUSAL)


# ---------------------------------------------------------------- correct, written differently
PADDING_STYLES = {
    "unsqueeze": _pad("ids.ne(pad_id).unsqueeze(1).unsqueeze(2)"),
    "lengths": _pad("(torch.arange(ids.size(1), device=ids.device)[None, :] < (ids != pad_id).sum(dim=1)[:, "
                    "None]).view(ids.size(0), 1, 1, ids.size(1))"),  # from the lengths of right-padded rows
    "from lists": _pad("torch.tensor([[int(t) != pad_id for t in row] for row in ids.tolist()], "
                       "dtype=torch.bool, device=ids.device)[:, None, None, :]"),
    "keyword-only extra": _written(PADDING, "m = ~(ids == pad_id)", "while m.dim() < dims:",
                                   "    m = m.unsqueeze(1)",
                                   "return m", args=", *, dims=4"),
    "difference": _pad("(ids - pad_id).bool()[:, None, None]"),
    "torch.ne": _pad("torch.ne(ids, pad_id)[:, None, None]"),
    "where": _pad("torch.where(ids == pad_id, False, True).view(ids.size(0), 1, 1, ids.size(1))"),
    "numpy moved back": _pad("torch.from_numpy(ids.cpu().numpy() != pad_id)[:, None, None].to(ids.device)"),
    "isin": _pad("torch.isin(ids, torch.tensor([pad_id]), invert=True).unsqueeze(-2).unsqueeze(-2)"),
    "lists moved back": _pad("torch.tensor([[t != pad_id for t in row] for row in ids.tolist()], "
                             "device=ids.device)[:, None, None]"),
}
CAUSAL_STYLES = {
    "arange": _causal_is("((i := torch.arange(size, device=device))[:, None] >= i[None, :]).reshape(1, 1, "
                         "size, size)"),
    "rows": _written(CAUSAL, "m = torch.zeros(size, size, dtype=torch.bool, device=device)",  # row by row
                     "for i in range(size):", "    m[i, : i + 1] = True",
                     "return m.unsqueeze(0).unsqueeze(0)"),
    "tril_indices": _written(CAUSAL, "m = torch.zeros(size, size, dtype=torch.bool, device=device)",
                             "i = torch.tril_indices(size, size, device=device)", "m[i[0], i[1]] = True",
                             "return m.expand(1, 1, size, size)"),
    "device context": _written(CAUSAL, 'with torch.device(device if device is not None else "cpu"):',
                               "    r = torch.arange(size)", "    return (r.unsqueeze(1) >= r)[None, None]"),
    "~triu": _causal_is("~torch.triu(torch.ones(size, size, dtype=torch.bool, device=device), "
                        "diagonal=1)[None, None]"),
    "loop": _causal_is("torch.tensor([[j <= i for j in range(size)] for i in range(size)], dtype=torch.bool, "
                       "device=device).unsqueeze(0).unsqueeze(0)"),
    "numpy": lambda size, device=None: torch.from_numpy(np.tril(np.ones((size, size), dtype=bool))).to(
        device=device)[None, None],
    "float then bool": _causal_is("torch.tril(torch.ones(size, size, device=device)).bool().view(1, 1, size, "
                                  "size)"),
    "tril_": _causal((".tril()[None, None]", ".tril_().unsqueeze(0).unsqueeze(0)")),
    "np.tri": lambda size, device=None: torch.tensor(np.tri(size, dtype=bool), device=device)[None, None],
    "moved": _causal((", device=device).tril()", ").tril().to(device)")),
}
# from lists, without device=: on a GPU the mask stays on the CPU (a mistake; moved to the ids' device, a
# style)
LISTS = _written(TARGET, "B, L = tgt_ids.shape", "rows = tgt_ids.tolist()",
                 "return torch.tensor([[[[j <= i and "
                 "rows[b][j] != pad_id for j in range(L)] for i in range(L)]] for b in range(B)])")
TARGET_STYLES = {
    "logical_and": _target("torch.logical_and((tgt_ids != pad_id).view(-1, 1, 1, L), "
                           "torch.tril(torch.ones(L, L, device=tgt_ids.device)).bool()).expand(-1, 1, L, L)"),
    "loops": _written(  # reads each id (cannot run on the data-less 'meta' device, right on any real one)
        TARGET, "B, L = tgt_ids.shape",
                      "m = torch.zeros(B, 1, L, L, dtype=torch.bool, device=tgt_ids.device)",
        "for b in range(B):", "    for i in range(L):", "        for j in range(i + 1):",
        "            if tgt_ids[b, j] != pad_id:", "                m[b, 0, i, j] = True", "return m"),
    "lists moved back": edit(LISTS, ("for b in range(B)])", "for b in range(B)]).to(tgt_ids.device)")),
    # the Annotated Transformer's subsequent_mask(...).type_as(...), with the head dimension
    "type_as": _written(
        TARGET, "L = tgt_ids.size(-1)", "keys = (tgt_ids != pad_id).unsqueeze(-2).unsqueeze(1)",
        "subsequent = torch.triu(torch.ones(1, L, L), diagonal=1).type(torch.uint8) == 0",
        "return keys & subsequent.type_as(keys.data)"),
    "new_ones masked_fill": _target("tgt_ids.new_ones(L, L, dtype=torch.bool).tril().expand(tgt_ids.size(0), "
                                    "1, L, L).masked_fill((tgt_ids == pad_id)[:, None, None, :], False)"),
    "repeat, keyword-only extra": _written(
        TARGET, "B, L = tgt_ids.shape", "m = (tgt_ids != pad_id).view(B, 1, 1, L).repeat(1, 1, L, 1)",
        "return m & torch.ones_like(m[0, 0]).tril() if causal else m", args=", *, causal=True"),
    "numpy moved back": _written(
        TARGET, "import numpy as np", "a = tgt_ids.cpu().numpy()", "return torch.from_numpy((a != pad_id)[:, "
                                                                   "None, "
        "None, :] & np.tril(np.ones((a.shape[1], a.shape[1]), dtype=bool))).to(tgt_ids.device)"),
    "from the parts": lambda tgt_ids, pad_id=0: (CAUSAL_STYLES["arange"](tgt_ids.size(1), tgt_ids.device)
                                                 & PADDING_STYLES["unsqueeze"](tgt_ids, pad_id)),
    "bool product": _target(f"(tgt_ids != pad_id)[:, None, None, :] * {_ONES.format('torch.bool')}[None, "
                            "None]"),
    "tril of the expanded padding": _target("torch.tril(tgt_ids.ne(pad_id).view(-1, 1, 1, L).expand(-1, 1, "
                                            "L, L))"),
    "float product": _target("((tgt_ids != pad_id).float()[:, None, None, :] * "
                             f"{_ONES.format(None)}).bool()"),
    "uint8 minimum": _target(f"torch.minimum((tgt_ids != pad_id)[:, None, None, :].to(torch.uint8), "
                             f"{_ONES.format('torch.uint8')}).bool()"),
}
NUMPY = TARGET_STYLES["numpy moved back"]
CORRECT = [pytest.param(c, fn, id=f"{c}: {style}")
           for c, styles in zip(NAMES, [PADDING_STYLES, CAUSAL_STYLES, TARGET_STYLES]) for style,
           fn in styles.items()]


@pytest.mark.parametrize("contract,fn", CORRECT)
def test_other_correct_masks(contract, fn):
    assert_full_marks(fn, contract)


# ---------------------------------------------------------------- classic mistakes, one row each
# a mask made on the CPU, or sent there, for ids on a GPU ('meta' ids that can be read play them): the values
# are right, only the device point is lost, and the message says which of the two happened
SENT = "the mask's device; expected the device of the ids; got cpu. Likely: a .cpu() or .to('cpu')"
MOVED = "sends the mask to the CPU: on a GPU it comes back there and cannot meet the scores; leave it out"
BUILT = ("Likely: the mask was built on the CPU", "never moved to the ids' device")
NEVER_MOVED = ("never moved to the ids' device", ".to(ids.device)")
CAUSAL_SENT = ("Likely: a .cpu(), .to('cpu') or .tolist() of the mask made on `device` sends it to the CPU: "
               "on a GPU it comes back there and cannot meet the scores")
PADDING_MISTAKES = [
    Mistake("polarity inverted", _pad("(ids == pad_id)[:, None, None, :]"), 2, "polarity inverted"),
    Mistake("ids > pad_id", _pad("(ids > pad_id)[:, None, None, :]"), 3, "ids > pad_id"),
    Mistake("pad_id ignored", _pad("(ids != 0)[:, None, None, :]"), 3, "pad_id argument is ignored"),
    # a wrong shape with the right values: only the shape point (the value checks read the values as keys)
    Mistake("over the queries", _pad("(ids != pad_id)[:, None, :, None]"), 3,
            ("over the queries", "(B, 1, 1, L)")),
    Mistake("expanded over the queries", _pad("(ids != pad_id)[:, None, None, :].expand(-1, 1, ids.size(1), "
                                              "-1)"), 1,
            "expanded over the queries"),
    Mistake("shape (B, L)", _pad("ids != pad_id"), 3, "shape (B, L)"),
    Mistake("shape (B, 1, L)", _pad("(ids != pad_id)[:, None, :]"), 3, ("one singleton dimension is missing",
                                                                         "(B, 1, 1, L)")),
    Mistake("dims in front of the batch", _pad("(ids != pad_id)[None, None]"), 3,
            "added in front of the batch"),
    Mistake("float mask", _pad("(ids != pad_id).float()[:, None, None, :]"), 3, "not bool"),
    Mistake("additive -inf mask", _pad('torch.zeros(ids.shape).masked_fill(ids == pad_id, float("-inf"))'
                                       '[:, None, None, :]'), 1, "additive float mask"),
    # the Hugging Face habit: it was told 'polarity inverted'
    Mistake("additive mask of 0 and -1e9", _pad("((ids == pad_id).float() * -1e9)[:, None, None, :]"), 1,
            ("additive float mask", "0 / -1e+09"), not_says="polarity"),
    Mistake("ids modified in place",
            edit(PADDING, ("return (ids != pad_id)", "ids[ids == pad_id] = -1  # right mask, the caller's "
                                                     "ids changed\n    return (ids != -1)")), 3,
            "modified in place"),
    # built on the CPU, never moved to the ids' device: only the device point lost
    Mistake("numpy, left on the CPU",
            _pad("torch.from_numpy(ids.cpu().numpy() != pad_id)[:, None, None, :]"), 3,
            NEVER_MOVED),
    Mistake("lists without device=", _pad("torch.tensor([[t != pad_id for t in row] for row in ids.tolist()])"
                                          "[:, None, None]"), 3, NEVER_MOVED),
    # each id read with .item(), a mask on the default device
    Mistake("a loop of .item() into a CPU mask", _written(
        PADDING, "B, L = ids.shape", "m = torch.ones(B, 1, 1, L, dtype=torch.bool)", "for b in range(B):",
        "    for j in range(L):", "        if ids[b, j].item() == pad_id:",
                                                          "            m[b, 0, 0, j] = False",
        "return m"), 3, NEVER_MOVED),
    Mistake("ids copied to the CPU, mask built there", _pad("(ids.cpu() != pad_id)[:, None, None, :]"), 3,
            BUILT,
            not_says=MOVED),
    Mistake("a trailing .cpu()", _pad("(ids != pad_id)[:, None, None, :].cpu()"), 3, (SENT, MOVED)),
    Mistake("a trailing .to('cpu')", _pad("(ids != pad_id).unsqueeze(1).unsqueeze(2).to('cpu')"), 3,
            (SENT, MOVED)),
]
_TABLE16 = torch.ones(16, 16, dtype=torch.bool).tril()
CAUSAL_MISTAKES = [
    Mistake("tril(-1): no diagonal", _causal(("tril()", "tril(-1)")), 2, "diagonal is missing"),
    Mistake("~triu(0): no diagonal", _causal(("torch.ones(", "~torch.ones("), ("tril()", "triu()")), 2,
            "diagonal is missing"),  # triu(0): the diagonal goes too
    Mistake("inverted", _causal(("tril()", "triu(1)")), 2, ("inverted", "above the diagonal")),
    Mistake("transposed", _causal(("tril()", "triu()")), 2, "transposed"),
    Mistake("only the diagonal", _causal_is("torch.eye(size, dtype=torch.bool, device=device)[None, None]"),
            2,
            "only the diagonal"),
    Mistake("all True", _causal((".tril()", "")), 2, "all True"),
    Mistake("size - 1", _causal(("torch.ones(size, size,", "torch.ones(size - 1, size - 1,")), 1,
            "off by one"),
    # right for every size up to 5, as if the longest sentence were 5 tokens
    Mistake("cut from a fixed 5 x 5 table", _causal_is(
        "torch.ones(5, 5, dtype=torch.bool, device=device).tril()[None, None, :size, :size]"), 2,
            ("causal_mask(9)", "wrong shape", "capped or hard-coded")),
    # right for every size up to 16, as if no sentence were longer
    Mistake("cut from a fixed 16 x 16 table", lambda size,
            device=None: _TABLE16[:size, :size].to(device)[None, None],
            2, ("causal_mask(64)", "capped or hard-coded"), not_says="off by one"),
    Mistake("float", _causal((", dtype=torch.bool", "")), 2, "not bool"),
    Mistake("no batch and head dims", _causal(("[None, None]", "")), 1, "add the batch and head dimensions"),
    Mistake("one leading dim", _causal(("[None, None]", "[None]")), 1, "one of the two leading dimensions is "
                                                                       "missing"),
    Mistake("device ignored", _causal((", device=device", "")), 2, "ignores `device`"),
    Mistake("a trailing .cpu()", _causal(("[None, None]", "[None, None].cpu()")), 2, CAUSAL_SENT,
            not_says="not implemented"),
    # a 'meta' copy's error is not a stub's
    Mistake("a .to('cpu')", _causal((".tril()", ".tril().to('cpu')")), 2, CAUSAL_SENT,
            not_says="not implemented"),
]
TARGET_MISTAKES = [
    Mistake("padding forgotten",
            _target("causal_mask(L, tgt_ids.device).expand(tgt_ids.size(0), 1, -1, -1)"), 3,
            "padding part is missing"),
    Mistake("causal forgotten", _target("padding_mask(tgt_ids, pad_id).expand(-1, 1, L, -1)"), 3,
            "causal part is missing"),
    Mistake("padding on the queries", _target(f"(tgt_ids != pad_id)[:, None, :, None] & {_CAUSAL_PART}"), 3,
            ("applied to the queries (rows)", "(B, 1, 1, L)")),
    Mistake("padding on queries and keys", _target("(tgt_ids != pad_id)[:, None, :, None] & "
                                                   f"padding_mask(tgt_ids, pad_id) & {_CAUSAL_PART}"), 3,
            ("applied to the queries (rows)", "keeps its causal row")),
    Mistake("or instead of and", edit(TARGET, (") & causal", ") | causal")), 3, "or instead of and"),
    Mistake("padding inverted", _target(f"(tgt_ids == pad_id)[:, None, None, :] & {_CAUSAL_PART}"), 3,
            "padding part is inverted"),
    Mistake("causal part transposed", _target("padding_mask(tgt_ids, pad_id) & torch.ones(L, L, "
                                              "dtype=torch.bool, device=tgt_ids.device).triu()"), 3,
            "causal part is transposed"),
    Mistake("ids > pad_id", _target(f"(tgt_ids > pad_id)[:, None, None, :] & {_CAUSAL_PART}"), 3,
            "ids > pad_id"),
    Mistake("pad_id ignored", edit(TARGET, ("padding_mask(tgt_ids, pad_id)", "padding_mask(tgt_ids)")), 3,
            "pad_id argument is ignored"),
    Mistake("batch size taken as the length", edit(TARGET, ("L = tgt_ids.size(1)", "L = tgt_ids.size(0)")), 0,
            ("do not fit together", "tgt_ids.size(1)")),
    Mistake("no head dim", _target("(tgt_ids != pad_id)[:, None, :] & torch.ones(L, L, dtype=torch.bool, "
                                   "device=tgt_ids.device).tril()"), 1, "head dimension is missing"),
    Mistake("float", _target(f"(padding_mask(tgt_ids, pad_id) & {_CAUSAL_PART}).float()"), 3, "not bool"),
    Mistake("ids modified in place", _written(
        TARGET, "L = tgt_ids.size(1)", f"mask = padding_mask(tgt_ids, pad_id) & {_CAUSAL_PART}",
        "tgt_ids[tgt_ids == pad_id] = -1  # the right mask, but the caller's ids are changed",
                                              "return mask"), 3,
            "modified in place"),
    # pad_id is passed on: the mask is wrong for another reason, paid once, by the values check
    Mistake("exclusive or", edit(TARGET, (") & causal", ") ^ causal")), 3, "exclusive or",
            not_says="pass pad_id on"),
    Mistake("padding on both axes, causal forgotten", _target("padding_mask(tgt_ids, pad_id) & padding_mask("
                                                              "tgt_ids, pad_id).transpose(-1, -2)"), 3,
            ("causal part is missing", "as well as"), not_says="pass pad_id on"),
    Mistake("causal one above the diagonal (named by no variant)", _target(
        "padding_mask(tgt_ids, pad_id) & torch.ones(L, L, dtype=torch.bool).tril(1)[None, None]"), 2,
            "causal AND not padding", not_says="pass pad_id on"),
    # the device: only its point lost
    Mistake("causal part on the CPU", edit(TARGET, (_CAUSAL_PART, "causal_mask(L)")), 3,
            "causal_mask(L, tgt_ids.device)"),
    Mistake("lists without device=", LISTS, 3, "device=tgt_ids.device"),
    Mistake("numpy, left on the CPU", lambda tgt_ids, pad_id=0: NUMPY(tgt_ids.cpu(), pad_id).cpu(), 3,
            ("never moved to the ids' device", ".to(tgt_ids.device)")),
    Mistake("padding part sent to the CPU", _target("padding_mask(tgt_ids, pad_id).cpu() & torch.ones(L, L, "
                                                    "dtype=torch.bool).tril()"), 3, BUILT, not_says=MOVED),
    Mistake("a trailing .to('cpu')", _target(f"(padding_mask(tgt_ids, pad_id) & {_CAUSAL_PART}).to('cpu')"),
            3,
            (SENT, MOVED)),
]
ROWS = [pytest.param(*p.values, id=f"{c}: {p.id}")
        for c, table in zip(NAMES, [PADDING_MISTAKES, CAUSAL_MISTAKES,
                                    TARGET_MISTAKES]) for p in mistakes(c, table)]


@pytest.mark.parametrize("m", ROWS)
def test_mask_mistakes(m):
    assert_mistake(m)


def test_a_missing_head_dim_is_named_for_every_length():
    """target_mask(ids, pad_id=7) has L = 6: the shape hints follow the length."""
    [m] = [p.values[0] for p in ROWS if p.id == "target_mask: no head dim"]
    assert assert_mistake(m).count("head dimension is missing") == 3


# ---------------------------------------------------------------- the checks themselves
def test_checks_are_fast_on_the_reference():
    from autograder import REGISTRY
    for name in NAMES:
        for c in REGISTRY[name]:
            best = min(timeit.repeat(lambda c=c, name=name: c.fn(getattr(solutions, name)), number=1,
                                     repeat=2))
            assert best < 1.0, f"{name}: {c.title} takes {best:.2f} s"


# ---------------------------------------------------------------- a mistake paid once, across names
def _beside(part, wrong):
    """The reference target_mask as a lesson holds it: calling the notebook's own `part` (padding_mask or
    causal_mask), here `wrong`."""
    made = edit(TARGET)
    made.__globals__[part] = wrong
    return made


def test_target_mask_beside_a_wrong_causal_mask_keeps_its_points():
    """triu for tril in causal_mask: causal_mask pays (its values point); target_mask, which calls it, keeps
    all of its points, "uses the pad_id argument" included, and is told which function to fix."""
    from autograder import max_points
    from tests.grading import grade
    with_triu = _causal(("tril()", "triu(1)"))
    assert grade(with_triu, "causal_mask")[0] == max_points("causal_mask") - 1
    points, text = grade(_beside("causal_mask", with_triu), "target_mask")
    assert points == max_points("target_mask"), text
    assert "✓ uses the pad_id argument" in text and "fix causal_mask" in text, text


def test_target_mask_beside_a_wrong_padding_mask_keeps_its_points():
    """padding_mask with inverted polarity: target_mask, which calls it, is told to fix padding_mask."""
    from autograder import max_points
    from tests.grading import grade
    points, text = grade(_beside("padding_mask", _pad("(ids == pad_id)[:, None, None, :]")), "target_mask")
    assert points == max_points("target_mask") and "fix padding_mask" in text, text


def test_a_wrong_target_mask_beside_right_parts_still_pays():
    """The composition is compared with the learner's own parts: a target_mask that does not use them (or
    combines them wrongly) is not excused."""
    from autograder import max_points
    from tests.grading import grade
    wrong = edit(TARGET, (") & causal", ") | causal"))
    wrong.__globals__["causal_mask"] = _causal(("tril()", "triu(1)"))
    points, text = grade(wrong, "target_mask")
    assert points < max_points("target_mask") and "fix causal_mask" not in text, text


def test_target_mask_beside_a_padding_mask_missing_a_dimension_keeps_its_points():
    """padding_mask of shape (B, 1, L): padding_mask pays its shape point only, and target_mask (whose mask is
    then (1, B, L, L)) is told that padding_mask is the one to fix, with its shape, instead of 'expected shape
    ...'."""
    from autograder import max_points
    from tests.grading import grade
    short = _pad("(ids != pad_id)[:, None, :]")
    assert grade(short, "padding_mask")[0] == max_points("padding_mask") - 1
    points, text = grade(_beside("padding_mask", short), "target_mask")
    assert (points == max_points("target_mask") and "fix padding_mask" in text and
            "shape (2, 1, 5)" in text), text


def grade_across(namespace: dict, name: str):
    """(points, lines) of every check of `name` as the grade command's checker runs them: the learner's
    objects in `namespace` on the notebook's side of a channel (served in a thread), the checks on the other,
    which reach an earlier graded name by asking for it (_util.LOOKUP_ELSEWHERE, as autograder/checker.py sets
    it)."""
    import socket

    from autograder.checks import _util
    from autograder.core import FORBIDDEN, run_named
    from autograder.remote import Endpoint
    from autograder.serve import LearnerEndpoint
    from tests.grading import patient, serve_in_thread
    a, b = socket.socketpair()
    serve_in_thread(LearnerEndpoint(b, namespace))
    ep = Endpoint(a, trusted=True)
    saved = FORBIDDEN.pop(name, None), _util.LOOKUP_ELSEWHERE
    _util.LOOKUP_ELSEWHERE = lambda graded: ep.request("resolve", name=graded)
    try:
        with patient():
            _, earned, _, lines = run_named(name, ep.request("resolve", name=name))
        return earned, "\n".join(lines)
    finally:
        if saved[0] is not None:
            FORBIDDEN[name] = saved[0]
        _util.LOOKUP_ELSEWHERE = saved[1]
        a.close()
        b.close()


@pytest.mark.parametrize("part, wrong, says", [
    ("causal_mask", lambda: _causal(("tril()", "triu(1)")), "fix causal_mask"),
    ("padding_mask", lambda: _pad("(ids != pad_id)[:, None, :]"), "padding_mask gives shape (2, 1, 5)")])
def test_target_mask_beside_a_wrong_part_keeps_its_points_across_the_channel(part, wrong, says):
    """The grade command's checker holds a proxy of target_mask, which has no __globals__: it asks the kernel
    for the learner's causal_mask and padding_mask by their graded names, and target_mask keeps its points as
    in check()."""
    from autograder import max_points
    made = edit(TARGET)
    made.__globals__[part] = wrong()
    namespace = {"padding_mask": PADDING, "causal_mask": CAUSAL, part: made.__globals__[part],
                 "target_mask": made}
    points, text = grade_across(namespace, "target_mask")
    assert points == max_points("target_mask"), text
    assert "✓ uses the pad_id argument" in text and says in text, text


def test_a_wrong_target_mask_is_not_excused_across_the_channel_by_a_name_it_does_not_call():
    """The parts compared are the ones bound in the notebook: a target_mask that ignores them pays."""
    from autograder import max_points
    wrong = edit(TARGET, (") & causal", ") | causal"))
    namespace = {"padding_mask": PADDING, "causal_mask": _causal(("tril()", "triu(1)")), "target_mask": wrong}
    points, text = grade_across(namespace, "target_mask")
    assert points < max_points("target_mask") and "fix causal_mask" not in text, text


def test_a_padding_mask_missing_a_dimension_pays_only_its_shape_across_the_channel():
    from autograder import max_points
    points, text = grade_across({"padding_mask": _pad("(ids != pad_id)[:, None, :]")}, "padding_mask")
    assert points == max_points("padding_mask") - 1 and "one singleton dimension is missing" in text, text


def test_only_graded_names_are_looked_up():
    """The checker asks the kernel only for names a check chose among the graded ones."""
    from autograder.checks._util import learners_own
    with pytest.raises(ValueError):
        learners_own("__builtins__")
    assert learners_own("causal_mask", TARGET) is CAUSAL  # in check(): the function's own module globals
