"""Stage 05's checks: full marks for the reference and for masks built differently; points lost, with
the mistake named, for each classic mistake (polarity, the diagonal, queries instead of keys, dtype,
device)."""
import time

import pytest
import torch

import solutions
from autograder import max_points
from tests.grading import assert_caught, assert_full_marks, grade, grade_one

NAMES = ["padding_mask", "causal_mask", "target_mask"]


@pytest.mark.parametrize("name", NAMES)
def test_reference_gets_full_marks(name):
    assert_full_marks(getattr(solutions, name))


# ---------------------------------------------------------------- correct, written differently
def padding_mask_unsqueeze(ids, pad_id=0):
    return ids.ne(pad_id).unsqueeze(1).unsqueeze(2)


def padding_mask_lengths(ids, pad_id=0):
    """From the lengths of right-padded rows (the course pads on the right)."""
    lengths = (ids != pad_id).sum(dim=1)  # (B,)
    positions = torch.arange(ids.size(1), device=ids.device)
    return (positions[None, :] < lengths[:, None]).view(ids.size(0), 1, 1, ids.size(1))


def causal_mask_triu(size, device=None):
    return ~torch.triu(torch.ones(size, size, dtype=torch.bool, device=device), diagonal=1)[None, None]


def causal_mask_arange(size, device=None):
    i = torch.arange(size, device=device)
    return (i[:, None] >= i[None, :]).reshape(1, 1, size, size)


def causal_mask_loop(size, device=None):
    rows = [[j <= i for j in range(size)] for i in range(size)]
    return torch.tensor(rows, dtype=torch.bool, device=device).unsqueeze(0).unsqueeze(0)


def target_mask_logical_and(tgt_ids, pad_id=0):
    B, L = tgt_ids.shape
    keys = (tgt_ids != pad_id).view(B, 1, 1, L)
    causal = torch.tril(torch.ones(L, L, device=tgt_ids.device)).bool()
    return torch.logical_and(keys, causal).expand(B, 1, L, L)


def target_mask_from_parts(tgt_ids, pad_id=0):
    return causal_mask_arange(tgt_ids.size(1), tgt_ids.device) & padding_mask_unsqueeze(tgt_ids, pad_id)


def padding_mask_from_lists(ids, pad_id=0):
    """Python lists, back to a tensor on the ids' device."""
    rows = [[int(t) != pad_id for t in row] for row in ids.tolist()]
    return torch.tensor(rows, dtype=torch.bool, device=ids.device)[:, None, None, :]


def padding_mask_difference(ids, pad_id=0):
    return (ids - pad_id).bool()[:, None, None]


def causal_mask_rows(size, device=None):
    """Row by row into a tensor made on the device."""
    m = torch.zeros(size, size, dtype=torch.bool, device=device)
    for i in range(size):
        m[i, : i + 1] = True
    return m.unsqueeze(0).unsqueeze(0)


def causal_mask_numpy(size, device=None):
    import numpy as np
    return torch.from_numpy(np.tril(np.ones((size, size), dtype=bool))).to(device=device)[None, None]


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


@pytest.mark.parametrize("fn", [padding_mask_unsqueeze, padding_mask_lengths, padding_mask_from_lists,
                                padding_mask_difference])
def test_other_correct_padding_masks(fn):
    assert_full_marks(fn, "padding_mask")


@pytest.mark.parametrize("fn", [causal_mask_triu, causal_mask_arange, causal_mask_loop, causal_mask_rows,
                                causal_mask_numpy])
def test_other_correct_causal_masks(fn):
    assert_full_marks(fn, "causal_mask")


@pytest.mark.parametrize("fn", [target_mask_logical_and, target_mask_from_parts, target_mask_loops,
                                target_mask_lists_moved, target_mask_type_as])
def test_other_correct_target_masks(fn):
    assert_full_marks(fn, "target_mask")


# ---------------------------------------------------------------- classic mistakes: padding_mask
def pad_inverted(ids, pad_id=0):
    return (ids == pad_id)[:, None, None, :]


def pad_over_queries(ids, pad_id=0):
    return (ids != pad_id)[:, None, :, None]


def pad_flat(ids, pad_id=0):
    return ids != pad_id


def pad_float(ids, pad_id=0):
    return (ids != pad_id).float()[:, None, None, :]


def pad_additive(ids, pad_id=0):
    return torch.zeros(ids.shape).masked_fill(ids == pad_id, float("-inf"))[:, None, None, :]


def pad_ignores_pad_id(ids, pad_id=0):
    return (ids != 0)[:, None, None, :]


def pad_marks_ids_in_place(ids, pad_id=0):
    ids[ids == pad_id] = -1  # right mask, but the caller's ids are changed
    return (ids != -1)[:, None, None, :]


PAD_MISTAKES = [
    ("polarity inverted", pad_inverted, ["polarity inverted"]),
    ("over the queries", pad_over_queries, ["over the queries", "(B, 1, 1, L)"]),
    ("shape (B, L)", pad_flat, ["shape (B, L)"]),
    ("float mask", pad_float, ["not bool"]),
    ("additive -inf mask", pad_additive, ["additive float mask"]),
    ("pad_id ignored", pad_ignores_pad_id, ["pad_id argument is ignored"]),
    ("ids modified in place", pad_marks_ids_in_place, ["modified in place"]),
]


@pytest.mark.parametrize("label,fn,keywords", PAD_MISTAKES, ids=[m[0] for m in PAD_MISTAKES])
def test_padding_mask_mistakes_are_caught(label, fn, keywords):
    assert_caught(fn, "padding_mask", *keywords)


# ---------------------------------------------------------------- classic mistakes: causal_mask
def causal_no_diagonal(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril(-1)[None, None]


def causal_triu_off_by_one(size, device=None):
    return ~torch.ones(size, size, dtype=torch.bool, device=device).triu()[None, None]  # triu(0): the diagonal goes too


def causal_inverted(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).triu(1)[None, None]


def causal_transposed(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).triu()[None, None]


def causal_float(size, device=None):
    return torch.ones(size, size, device=device).tril()[None, None]


def causal_ignores_device(size, device=None):
    return torch.ones(size, size, dtype=torch.bool).tril()[None, None]


def causal_2d(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


def causal_cut_from_size_5(size, device=None):
    """Right for every size up to 5, as if the longest sentence were 5 tokens."""
    return torch.ones(5, 5, dtype=torch.bool, device=device).tril()[None, None, :size, :size]


CAUSAL_MISTAKES = [
    ("tril(-1): no diagonal", causal_no_diagonal, ["diagonal is missing"]),
    ("~triu(0): no diagonal", causal_triu_off_by_one, ["diagonal is missing"]),
    ("inverted", causal_inverted, ["inverted", "above the diagonal"]),
    ("transposed", causal_transposed, ["transposed"]),
    ("float", causal_float, ["not bool"]),
    ("device ignored", causal_ignores_device, ["ignores `device`"]),
    ("no batch and head dims", causal_2d, ["add the batch and head dimensions"]),
    ("cut from a fixed 5 x 5 table", causal_cut_from_size_5, ["causal_mask(9)", "wrong shape"]),
]


@pytest.mark.parametrize("label,fn,keywords", CAUSAL_MISTAKES, ids=[m[0] for m in CAUSAL_MISTAKES])
def test_causal_mask_mistakes_are_caught(label, fn, keywords):
    assert_caught(fn, "causal_mask", *keywords)


# ---------------------------------------------------------------- classic mistakes: target_mask
def _parts(ids, pad_id=0):
    L = ids.size(1)
    return (ids != pad_id), torch.ones(L, L, dtype=torch.bool, device=ids.device).tril()


def tgt_no_padding(ids, pad_id=0):
    real, causal = _parts(ids, pad_id)
    return causal.expand(ids.size(0), 1, -1, -1)


def tgt_no_causal(ids, pad_id=0):
    real, causal = _parts(ids, pad_id)
    return real[:, None, None, :].expand(-1, 1, ids.size(1), -1)


def tgt_pads_queries(ids, pad_id=0):
    real, causal = _parts(ids, pad_id)
    return real[:, None, :, None] & causal


def tgt_pads_queries_and_keys(ids, pad_id=0):
    real, causal = _parts(ids, pad_id)
    return real[:, None, :, None] & real[:, None, None, :] & causal


def tgt_or(ids, pad_id=0):
    real, causal = _parts(ids, pad_id)
    return real[:, None, None, :] | causal


def tgt_ignores_pad_id(ids, pad_id=0):
    return solutions.target_mask(ids)


def tgt_cpu_causal(ids, pad_id=0):
    L = ids.size(1)
    return solutions.padding_mask(ids, pad_id) & torch.ones(L, L, dtype=torch.bool).tril()[None, None]


def tgt_float(ids, pad_id=0):
    return solutions.target_mask(ids, pad_id).float()


def tgt_lists_on_default_device(ids, pad_id=0):
    """From lists, without device=: on a GPU the mask stays on the CPU."""
    B, L = ids.shape
    rows = ids.tolist()
    return torch.tensor([[[[j <= i and rows[b][j] != pad_id for j in range(L)] for i in range(L)]] for b in range(B)])


def tgt_marks_ids_in_place(ids, pad_id=0):
    mask = solutions.target_mask(ids, pad_id)
    ids[ids == pad_id] = -1  # the right mask, but the caller's ids are changed
    return mask


TGT_MISTAKES = [
    ("padding forgotten", tgt_no_padding, ["padding part is missing"]),
    ("causal forgotten", tgt_no_causal, ["causal part is missing"]),
    ("padding on the queries", tgt_pads_queries, ["applied to the queries (rows)", "(B, 1, 1, L)"]),
    ("padding on queries and keys", tgt_pads_queries_and_keys,
     ["applied to the queries (rows)", "keeps its causal row"]),
    ("or instead of and", tgt_or, ["or instead of and"]),
    ("pad_id ignored", tgt_ignores_pad_id, ["pad_id argument is ignored"]),
    ("causal part on the CPU", tgt_cpu_causal, ["causal_mask(L, tgt_ids.device)"]),
    ("float", tgt_float, ["not bool"]),
    ("lists without device=", tgt_lists_on_default_device, ["device=tgt_ids.device"]),
    ("ids modified in place", tgt_marks_ids_in_place, ["modified in place"]),
]


@pytest.mark.parametrize("label,fn,keywords", TGT_MISTAKES, ids=[m[0] for m in TGT_MISTAKES])
def test_target_mask_mistakes_are_caught(label, fn, keywords):
    assert_caught(fn, "target_mask", *keywords)


# ---------------------------------------------------------------- stubs, speed
def test_stubs_get_zero_and_say_not_implemented():
    def padding_mask(ids, pad_id=0):
        raise NotImplementedError()

    def causal_mask(size, device=None):
        raise NotImplementedError()

    def target_mask(tgt_ids, pad_id=0):
        raise NotImplementedError()

    for stub in (padding_mask, causal_mask, target_mask):
        points, text = grade(stub)
        assert points == 0 and text.count("not implemented yet") == len(text.splitlines()) - 1, text


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


# ---------------------------------------------------------------- second review: more styles, more mistakes
def padding_mask_torch_ne(ids, pad_id=0):
    return torch.ne(ids, pad_id)[:, None, None]


def padding_mask_where(ids, pad_id=0):
    return torch.where(ids == pad_id, False, True).view(ids.size(0), 1, 1, ids.size(1))


def padding_mask_numpy(ids, pad_id=0):
    return torch.from_numpy(ids.cpu().numpy() != pad_id)[:, None, None].to(ids.device)


def padding_mask_isin(ids, pad_id=0):
    return torch.isin(ids, torch.tensor([pad_id]), invert=True).unsqueeze(-2).unsqueeze(-2)


def padding_mask_item_loop(ids, pad_id=0):
    B, L = ids.shape
    m = torch.ones(B, 1, 1, L, dtype=torch.bool)
    for b in range(B):
        for j in range(L):
            if ids[b, j].item() == pad_id:
                m[b, 0, 0, j] = False
    return m


def padding_mask_keyword_only(ids, pad_id=0, *, dims=4):
    m = ~(ids == pad_id)
    while m.dim() < dims:
        m = m.unsqueeze(1)
    return m


@pytest.mark.parametrize("fn", [padding_mask_torch_ne, padding_mask_where, padding_mask_numpy, padding_mask_isin,
                                padding_mask_keyword_only])
def test_second_review_correct_padding_masks(fn):
    assert_full_marks(fn, "padding_mask")


def causal_mask_float_then_bool(size, device=None):
    return torch.tril(torch.ones(size, size, device=device)).bool().view(1, 1, size, size)


def causal_mask_tril_in_place(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril_().unsqueeze(0).unsqueeze(0)


def causal_mask_np_tri(size, device=None):
    import numpy as np
    return torch.tensor(np.tri(size, dtype=bool), device=device)[None, None]


def causal_mask_tril_indices(size, device=None):
    m = torch.zeros(size, size, dtype=torch.bool, device=device)
    i = torch.tril_indices(size, size, device=device)
    m[i[0], i[1]] = True
    return m.expand(1, 1, size, size)


def causal_mask_device_context(size, device=None):
    with torch.device(device if device is not None else "cpu"):
        r = torch.arange(size)
        return (r.unsqueeze(1) >= r).unsqueeze(0).unsqueeze(0)


def causal_mask_moved(size, device=None):
    return torch.ones(size, size, dtype=torch.bool).tril().to(device)[None, None]


@pytest.mark.parametrize("fn", [causal_mask_float_then_bool, causal_mask_tril_in_place, causal_mask_np_tri,
                                causal_mask_tril_indices, causal_mask_device_context, causal_mask_moved])
def test_second_review_correct_causal_masks(fn):
    assert_full_marks(fn, "causal_mask")


def target_mask_bool_product(tgt_ids, pad_id=0):
    L = tgt_ids.size(1)
    return (tgt_ids != pad_id)[:, None, None, :] * torch.ones(1, 1, L, L, device=tgt_ids.device, dtype=torch.bool).tril()


def target_mask_new_ones_masked_fill(tgt_ids, pad_id=0):
    L = tgt_ids.shape[-1]
    causal = tgt_ids.new_ones(L, L, dtype=torch.bool).tril()
    return causal.expand(tgt_ids.size(0), 1, L, L).masked_fill((tgt_ids == pad_id)[:, None, None, :], False)


def target_mask_tril_of_expanded_padding(tgt_ids, pad_id=0):
    B, L = tgt_ids.shape
    return torch.tril(tgt_ids.ne(pad_id).view(B, 1, 1, L).expand(B, 1, L, L))


def target_mask_float_product(tgt_ids, pad_id=0):
    L = tgt_ids.size(1)
    return ((tgt_ids != pad_id).float()[:, None, None, :] * torch.ones(L, L, device=tgt_ids.device).tril()).bool()


def target_mask_uint8_minimum(tgt_ids, pad_id=0):
    L = tgt_ids.size(1)
    return torch.minimum((tgt_ids != pad_id)[:, None, None, :].to(torch.uint8),
                         torch.ones(L, L, device=tgt_ids.device, dtype=torch.uint8).tril()).bool()


def target_mask_repeat_keyword_only(tgt_ids, pad_id=0, *, causal=True):
    B, L = tgt_ids.shape
    m = (tgt_ids != pad_id).view(B, 1, 1, L).repeat(1, 1, L, 1)
    return m & torch.ones_like(m[0, 0]).tril() if causal else m


@pytest.mark.parametrize("fn", [target_mask_bool_product, target_mask_new_ones_masked_fill,
                                target_mask_tril_of_expanded_padding, target_mask_float_product,
                                target_mask_uint8_minimum, target_mask_repeat_keyword_only])
def test_second_review_correct_target_masks(fn):
    assert_full_marks(fn, "target_mask")


def pad_greater_than_pad_id(ids, pad_id=0):
    return (ids > pad_id)[:, None, None, :]


def pad_dims_in_front(ids, pad_id=0):
    return (ids != pad_id)[None, None]


def pad_expanded_over_queries(ids, pad_id=0):
    return (ids != pad_id)[:, None, None, :].expand(-1, 1, ids.size(1), -1)


def causal_eye(size, device=None):
    return torch.eye(size, dtype=torch.bool, device=device)[None, None]


def causal_all_true(size, device=None):
    return torch.ones(1, 1, size, size, dtype=torch.bool, device=device)


def causal_size_minus_one(size, device=None):
    return torch.ones(size - 1, size - 1, dtype=torch.bool, device=device).tril()[None, None]


def causal_one_leading_dim(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()[None]


def tgt_batch_size_as_length(ids, pad_id=0):
    L = ids.size(0)
    return (ids != pad_id)[:, None, None, :] & torch.ones(L, L, dtype=torch.bool, device=ids.device).tril()


def tgt_causal_transposed(ids, pad_id=0):
    L = ids.size(1)
    return (ids != pad_id)[:, None, None, :] & torch.ones(L, L, dtype=torch.bool, device=ids.device).triu()


def tgt_padding_inverted(ids, pad_id=0):
    L = ids.size(1)
    return (ids == pad_id)[:, None, None, :] & torch.ones(L, L, dtype=torch.bool, device=ids.device).tril()


def tgt_greater_than_pad_id(ids, pad_id=0):
    L = ids.size(1)
    return (ids > pad_id)[:, None, None, :] & torch.ones(L, L, dtype=torch.bool, device=ids.device).tril()


def tgt_no_head_dim(ids, pad_id=0):
    L = ids.size(1)
    return (ids != pad_id)[:, None, :] & torch.ones(L, L, dtype=torch.bool, device=ids.device).tril()


SECOND_REVIEW_MASK_MISTAKES = [
    ("padding_mask", pad_greater_than_pad_id, ["ids > pad_id"]),
    ("padding_mask", pad_dims_in_front, ["added in front of the batch"]),
    ("padding_mask", pad_expanded_over_queries, ["expanded over the queries"]),
    ("causal_mask", causal_eye, ["only the diagonal"]),
    ("causal_mask", causal_all_true, ["all True"]),
    ("causal_mask", causal_size_minus_one, ["off by one"]),
    ("causal_mask", causal_one_leading_dim, ["one of the two leading dimensions is missing"]),
    ("target_mask", tgt_batch_size_as_length, ["do not fit together", "tgt_ids.size(1)"]),
    ("target_mask", tgt_causal_transposed, ["causal part is transposed"]),
    ("target_mask", tgt_padding_inverted, ["padding part is inverted"]),
    ("target_mask", tgt_greater_than_pad_id, ["ids > pad_id"]),
    ("target_mask", tgt_no_head_dim, ["head dimension is missing"]),
]


@pytest.mark.parametrize("name,fn,keywords", SECOND_REVIEW_MASK_MISTAKES,
                         ids=[m[1].__name__ for m in SECOND_REVIEW_MASK_MISTAKES])
def test_second_review_mask_mistakes_are_caught(name, fn, keywords):
    assert_caught(fn, name, *keywords)


def test_a_missing_head_dim_is_named_for_every_length():
    """target_mask(ids, pad_id=7) has L = 6: the shape hints follow the length."""
    _, text = assert_caught(tgt_no_head_dim, "target_mask")
    assert text.count("head dimension is missing") == 3, text


# ---------------------------------------------------------------- third review: masks built off the ids' device
# 'meta' ids have no values, so code that reads them (.tolist(), .cpu().numpy()) is tried on ids that can be read
# but say they are on 'meta', as ids on a GPU: a mask built on the CPU and never moved back then shows.
def padding_mask_lists_moved(ids, pad_id=0):
    return torch.tensor([[t != pad_id for t in row] for row in ids.tolist()], device=ids.device)[:, None, None]


def target_mask_numpy_moved(tgt_ids, pad_id=0):
    import numpy as np
    a = tgt_ids.cpu().numpy()
    m = (a != pad_id)[:, None, None, :] & np.tril(np.ones((a.shape[1], a.shape[1]), dtype=bool))
    return torch.from_numpy(m).to(tgt_ids.device)


def pad_numpy_left_on_the_cpu(ids, pad_id=0):
    return torch.from_numpy(ids.cpu().numpy() != pad_id)[:, None, None, :]


def pad_lists_without_device(ids, pad_id=0):
    return torch.tensor([[t != pad_id for t in row] for row in ids.tolist()])[:, None, None]


def tgt_numpy_left_on_the_cpu(tgt_ids, pad_id=0):
    return target_mask_numpy_moved(tgt_ids.cpu(), pad_id).cpu()


@pytest.mark.parametrize("name,fn", [("padding_mask", padding_mask_lists_moved), ("target_mask", target_mask_numpy_moved)])
def test_third_review_masks_moved_to_the_ids_device(name, fn):
    assert_full_marks(fn, name)


@pytest.mark.parametrize("name,fn", [("padding_mask", pad_numpy_left_on_the_cpu),
                                     ("padding_mask", pad_lists_without_device),
                                     ("padding_mask", padding_mask_item_loop),
                                     ("target_mask", tgt_numpy_left_on_the_cpu)])
def test_third_review_masks_left_on_the_cpu_are_caught(name, fn):
    points, text = assert_caught(fn, name, "never moved to the ids' device", f".to({'tgt_ids' if name == 'target_mask' else 'ids'}.device)")
    assert points == max_points(name) - 1, text  # the values are right: only the device point is lost


# ---------------------------------------------------------------- fourth review: the pad_id check names the real mistake
def tgt_xor(tgt_ids, pad_id=0):
    """^ instead of &: pad_id is passed on, but the parts are combined wrongly."""
    return solutions.padding_mask(tgt_ids, pad_id) ^ solutions.causal_mask(tgt_ids.size(1), tgt_ids.device)


def tgt_pads_both_axes_no_causal(tgt_ids, pad_id=0):
    p = solutions.padding_mask(tgt_ids, pad_id)
    return p & p.transpose(-1, -2) | solutions.causal_mask(tgt_ids.size(1), tgt_ids.device) & p & p.transpose(-1, -2)


def tgt_causal_one_above(tgt_ids, pad_id=0):
    """A mistake no variant names: the pad_id check must not blame pad_id, which is passed on."""
    L = tgt_ids.size(1)
    return solutions.padding_mask(tgt_ids, pad_id) & torch.ones(L, L, dtype=torch.bool).tril(1)[None, None]


@pytest.mark.parametrize("fn,keywords", [(tgt_xor, ["exclusive or"]),
                                         (tgt_pads_both_axes_no_causal, ["causal part is missing", "as well as"]),
                                         (tgt_causal_one_above, ["pad_id is passed on"])])
def test_fourth_review_pad_id_check_names_the_real_mistake(fn, keywords):
    points, line = grade_one(fn, "target_mask", "uses the pad_id argument")
    assert points == 0 and all(k in line for k in keywords), line
    assert "pass pad_id on" not in line, line


def padding_mask_additive_large_negative(ids, pad_id=solutions.PAD):
    """The Hugging Face habit, an additive mask of 0 and -1e9 (not -inf): it was told 'polarity inverted' (found by
    a learner simulation)."""
    return ((ids == pad_id).float() * -1e9)[:, None, None, :]


def test_an_additive_large_negative_mask_is_named():
    points, text = assert_caught(padding_mask_additive_large_negative, "padding_mask", "additive float mask",
                                 "0 / -1e+09")
    assert "polarity" not in text, text


# ---------------------------------------------------------------- issue 17: a result moved to the CPU at the end
# On a GPU each of these returns a mask on the CPU, which cannot meet the scores on the GPU. A .cpu() of a 'meta'
# tensor raises as reading its values does; the checks must not take it for that (and then let it pass).
def pad_trailing_cpu(ids, pad_id=0):
    return (ids != pad_id)[:, None, None, :].cpu()


def pad_trailing_to_cpu(ids, pad_id=0):
    return (ids != pad_id).unsqueeze(1).unsqueeze(2).to("cpu")


def tgt_trailing_to_cpu(tgt_ids, pad_id=0):
    return (solutions.padding_mask(tgt_ids, pad_id) & solutions.causal_mask(tgt_ids.size(1), tgt_ids.device)).to("cpu")


def tgt_padding_part_to_cpu(tgt_ids, pad_id=0):
    pad = solutions.padding_mask(tgt_ids, pad_id).cpu()
    return pad & torch.ones(tgt_ids.size(1), tgt_ids.size(1), dtype=torch.bool).tril()


MOVED = "sends the mask to the CPU: on a GPU it comes back there and cannot meet the scores; leave it out"


@pytest.mark.parametrize("name,fn", [("padding_mask", pad_trailing_cpu), ("padding_mask", pad_trailing_to_cpu),
                                     ("target_mask", tgt_trailing_to_cpu)])
def test_a_mask_sent_to_the_cpu_loses_the_device_point(name, fn):
    points, text = grade(fn, name)
    assert points == max_points(name) - 1, text  # the values are right: only the device point is lost
    assert f"the mask's device; expected the device of the ids; got cpu. Likely: a .cpu() or .to('cpu')" in text, text
    assert MOVED in text, text


def causal_trailing_cpu(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()[None, None].cpu()


def causal_to_cpu(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril().to("cpu").unsqueeze(0).unsqueeze(0)


@pytest.mark.parametrize("fn", [causal_trailing_cpu, causal_to_cpu])
def test_a_causal_mask_sent_to_the_cpu_loses_the_device_point(fn):
    points, text = grade(fn, "causal_mask")
    assert points == max_points("causal_mask") - 1, text
    assert "not implemented" not in text, text  # the NotImplementedError of a 'meta' copy is not a stub's
    assert ("Likely: a .cpu(), .to('cpu') or .tolist() of the mask made on `device` sends it to the CPU: on a GPU it "
            "comes back there and cannot meet the scores") in text, text


def pad_ids_copied_then_built_on_the_cpu(ids, pad_id=0):
    """Reads the ids on the CPU and never moves the mask back: the older message (built on the CPU) still names it."""
    return (ids.cpu() != pad_id)[:, None, None, :]


@pytest.mark.parametrize("name,fn", [("padding_mask", pad_ids_copied_then_built_on_the_cpu),
                                     ("target_mask", tgt_padding_part_to_cpu)])
def test_a_mask_finished_on_the_cpu_is_told_it_was_built_there(name, fn):
    points, text = grade(fn, name)
    assert points == max_points(name) - 1, text
    assert "Likely: the mask was built on the CPU" in text and "never moved to the ids' device" in text, text
    assert MOVED not in text, text
