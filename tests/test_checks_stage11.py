"""Stage 11's checks: full marks for the reference and for correct losses written differently; points
lost, with the mistake named, for each classic mistake of label smoothing."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import solutions
from autograder import REGISTRY
from tests.grading import assert_caught, assert_full_marks, grade

NAME = "label_smoothed_loss"


def test_reference_gets_full_marks():
    assert_full_marks(solutions.label_smoothed_loss)


# ---------------------------------------------------------------- correct, written differently
def ls_builtin(logits, target, epsilon=0.1, ignore_index=0):
    """PyTorch's own smoothing, with epsilon rescaled so that the V - 1 wrong tokens share epsilon."""
    V = logits.size(-1)
    if not (target != ignore_index).any():
        return logits.sum() * 0.0
    return F.cross_entropy(logits.reshape(-1, V), target.reshape(-1), ignore_index=ignore_index,
                           label_smoothing=epsilon * V / (V - 1))


def ls_distribution(logits, target, epsilon=0.1, ignore_index=0):
    """The smoothed distribution built explicitly with scatter; a masked sum over a clamped count."""
    V = logits.size(-1)
    safe = target.masked_fill(target == ignore_index, 0)
    q = torch.full_like(logits, epsilon / (V - 1)).scatter(-1, safe.unsqueeze(-1), 1 - epsilon)
    per_position = -(q * logits.log_softmax(-1)).sum(-1)
    keep = (target != ignore_index).to(logits.dtype)
    return (per_position * keep).sum() / keep.sum().clamp(min=1)


def ls_kl_plus_entropy(logits, target, epsilon=0.1, ignore_index=0):
    """KL divergence plus the entropy of the smoothed distribution is the cross-entropy; rows picked by index."""
    V = logits.size(-1)
    logits, target = logits.reshape(-1, V), target.reshape(-1)
    rows = torch.nonzero(target != ignore_index).flatten()
    if rows.numel() == 0:
        return torch.zeros((), requires_grad=True)
    logits, target = logits[rows], target[rows]
    q = torch.full_like(logits, epsilon / (V - 1))
    q[torch.arange(len(target)), target] = 1 - epsilon
    kl = F.kl_div(logits.log_softmax(-1), q, reduction="sum") / len(target)
    entropy = -(q * q.clamp_min(1e-12).log()).sum(-1).mean()
    return kl + entropy


def ls_python_loop(logits, target, epsilon=0.1, ignore_index=0):
    """One position at a time, log-probabilities through logsumexp; a Python count."""
    V = logits.shape[-1]
    rows, labels = logits.reshape(-1, V), target.reshape(-1)
    total, count = logits.new_zeros(()), 0
    for i in range(labels.numel()):
        t = int(labels[i])
        if t == ignore_index:
            continue
        logp = rows[i] - torch.logsumexp(rows[i], 0)
        total = total - (1 - epsilon) * logp[t] - epsilon / (V - 1) * (logp.sum() - logp[t])
        count += 1
    return total / max(count, 1)


def ls_logsumexp_float64(logits, target, epsilon=0.1, ignore_index=0, reduction="mean"):
    """Computed in float64 from logsumexp without a log_softmax tensor; an extra keyword argument with a default."""
    V = logits.size(-1)
    z, t = logits.double().flatten(0, -2), target.flatten()
    z, t = z[t != ignore_index], t[t != ignore_index]
    if t.numel() == 0:
        return logits.sum() * 0
    z_t = z.gather(-1, t.unsqueeze(-1)).squeeze(-1)
    per = torch.logsumexp(z, -1) - (1 - epsilon) * z_t - epsilon / (V - 1) * (z.sum(-1) - z_t)
    return per.mean().to(logits.dtype)


def ls_einsum_one_hot(logits, target, epsilon=0.1, ignore_index=0):
    """The smoothed distribution from one_hot, contracted with einsum; weights instead of a selection."""
    V = logits.shape[-1]
    logp = logits.log_softmax(-1)
    q = F.one_hot(target.clamp(min=0), V).to(logp.dtype) * (1 - epsilon - epsilon / (V - 1)) + epsilon / (V - 1)
    w = (target != ignore_index).to(logp.dtype)
    return -torch.einsum("...v,...v,...->", q, logp, w) / w.sum().clamp_min(1.0)


def ls_plain_cross_entropy(logits, target, epsilon=0.1, ignore_index=0):
    """Plain F.cross_entropy (allowed) for the target's share, the uniform share added by hand."""
    V = logits.size(-1)
    rows, labels = logits.reshape(-1, V), target.reshape(-1)
    keep = labels != ignore_index
    n = int(keep.sum())
    if n == 0:
        return torch.zeros((), dtype=logits.dtype)
    ce = F.cross_entropy(rows, labels, ignore_index=ignore_index, reduction="sum")
    uniform = -(F.log_softmax(rows, -1).sum(-1) * keep).sum()
    share = epsilon / (V - 1)
    return ((1 - epsilon - share) * ce + share * uniform) / n


@pytest.mark.parametrize("fn", [ls_distribution, ls_kl_plus_entropy, ls_python_loop, ls_logsumexp_float64,
                                ls_einsum_one_hot, ls_plain_cross_entropy])
def test_other_correct_losses(fn):
    assert_full_marks(fn, NAME)


def test_pytorch_s_own_label_smoothing_earns_nothing():
    """The lesson teaches label smoothing: F.cross_entropy(label_smoothing=...) doing it (even rescaled
    correctly) earns nothing, and the report says so (ls_builtin's own all-padding case keeps its point);
    plain cross-entropy stays allowed."""
    points, text = grade(ls_builtin, NAME)
    assert points == 1 and text.count("your code calls F.cross_entropy(..., label_smoothing=...)") == 6, text


# ---------------------------------------------------------------- classic mistakes
def eps_over_v(logits, target, epsilon=0.1, ignore_index=0):
    V = logits.size(-1)
    return F.cross_entropy(logits.reshape(-1, V), target.reshape(-1), ignore_index=ignore_index,
                           label_smoothing=epsilon)


def mean_over_all(logits, target, epsilon=0.1, ignore_index=0):
    V = logits.size(-1)
    per = F.cross_entropy(logits.reshape(-1, V), target.reshape(-1), ignore_index=ignore_index,
                          label_smoothing=epsilon * V / (V - 1), reduction="none")
    return per.mean()


def no_ignore(logits, target, epsilon=0.1, ignore_index=0):
    V = logits.size(-1)
    return F.cross_entropy(logits.reshape(-1, V), target.reshape(-1), label_smoothing=epsilon * V / (V - 1))


def nan_when_all_padding(logits, target, epsilon=0.1, ignore_index=0):
    V = logits.size(-1)
    safe = target.masked_fill(target == ignore_index, 0)
    q = torch.full_like(logits, epsilon / (V - 1)).scatter(-1, safe.unsqueeze(-1), 1 - epsilon)
    per = -(q * logits.log_softmax(-1)).sum(-1)
    keep = (target != ignore_index).to(logits.dtype)
    return (per * keep).sum() / keep.sum()


def ignores_ignore_index(logits, target, epsilon=0.1, ignore_index=0):
    return solutions.label_smoothed_loss(logits, target, epsilon, ignore_index=0)


def ignores_epsilon(logits, target, epsilon=0.1, ignore_index=0):
    return solutions.label_smoothed_loss(logits, target, 0.1, ignore_index)


def kl_divergence(logits, target, epsilon=0.1, ignore_index=0):
    V = logits.size(-1)
    logits, target = logits.reshape(-1, V), target.reshape(-1)
    keep = target != ignore_index
    if not keep.any():
        return logits.sum() * 0.0
    logits, target = logits[keep], target[keep]
    q = torch.full_like(logits, epsilon / (V - 1)).scatter(1, target[:, None], 1 - epsilon)
    return F.kl_div(logits.log_softmax(-1), q, reduction="batchmean")


def summed(logits, target, epsilon=0.1, ignore_index=0):
    V = logits.size(-1)
    return F.cross_entropy(logits.reshape(-1, V), target.reshape(-1), ignore_index=ignore_index,
                           label_smoothing=epsilon * V / (V - 1), reduction="sum")


def no_log_softmax(logits, target, epsilon=0.1, ignore_index=0):
    V = logits.size(-1)
    safe = target.masked_fill(target == ignore_index, 0)
    q = torch.full_like(logits, epsilon / (V - 1)).scatter(-1, safe.unsqueeze(-1), 1 - epsilon)
    per = -(q * logits).sum(-1)
    keep = (target != ignore_index).to(logits.dtype)
    return (per * keep).sum() / keep.sum().clamp(min=1)


def annotated_transformer(logits, target, epsilon=0.1, ignore_index=0):
    """The Annotated Transformer's LabelSmoothing: epsilon / (V - 2), nothing on the <pad> column."""
    V = logits.size(-1)
    safe = target.masked_fill(target == ignore_index, 0)
    q = torch.full_like(logits, epsilon / (V - 2)).scatter(-1, safe.unsqueeze(-1), 1 - epsilon)
    q[..., 0] = 0
    per = -(q * logits.log_softmax(-1)).sum(-1)
    keep = (target != ignore_index).to(logits.dtype)
    return (per * keep).sum() / keep.sum().clamp(min=1)


def detached(logits, target, epsilon=0.1, ignore_index=0):
    return torch.tensor(solutions.label_smoothed_loss(logits, target, epsilon, ignore_index).item())


def per_position(logits, target, epsilon=0.1, ignore_index=0):
    V = logits.size(-1)
    return F.cross_entropy(logits.reshape(-1, V), target.reshape(-1), ignore_index=ignore_index,
                           label_smoothing=epsilon * V / (V - 1), reduction="none")


def smoothed_per_position(logits, target, epsilon, ignore_index, share=None, empty_column=None):
    V = logits.size(-1)
    logp = logits.log_softmax(-1)
    q = torch.full_like(logp, epsilon / (V - 1) if share is None else share)
    q = q.scatter(-1, target.clamp(min=0).unsqueeze(-1), 1 - epsilon)
    if empty_column is not None:
        q[..., empty_column] = 0
    return -(q * logp).sum(-1), (target != ignore_index).to(logp.dtype)


def wrong_tokens_get_eps_over_v(logits, target, epsilon=0.1, ignore_index=0):
    per, keep = smoothed_per_position(logits, target, epsilon, ignore_index, share=epsilon / logits.size(-1))
    return (per * keep).sum() / keep.sum().clamp(min=1)


def pad_column_left_empty(logits, target, epsilon=0.1, ignore_index=0):
    per, keep = smoothed_per_position(logits, target, epsilon, ignore_index, empty_column=ignore_index)
    return (per * keep).sum() / keep.sum().clamp(min=1)


def divided_by_batch_size(logits, target, epsilon=0.1, ignore_index=0):
    per, keep = smoothed_per_position(logits, target, epsilon, ignore_index)
    return (per * keep).sum() / target.shape[0]


def mean_of_sentence_means(logits, target, epsilon=0.1, ignore_index=0):
    per, keep = smoothed_per_position(logits, target, epsilon, ignore_index)
    if target.dim() == 1:
        per, keep = per[None], keep[None]
    counts = keep.sum(-1)
    if not (counts > 0).any():
        return logits.sum() * 0
    return ((per * keep).sum(-1)[counts > 0] / counts[counts > 0]).mean()


def masks_the_target_in_place(logits, target, epsilon=0.1, ignore_index=0):
    keep = target != ignore_index
    target.masked_fill_(~keep, 0)  # the caller's target changes
    per, _ = smoothed_per_position(logits, target, epsilon, ignore_index)
    return (per * keep).sum() / keep.sum().clamp(min=1)


def shifts_the_logits_in_place(logits, target, epsilon=0.1, ignore_index=0):
    logits -= logits.max(-1, keepdim=True).values.detach()  # stable, but the caller's logits change
    return ls_distribution(logits, target, epsilon, ignore_index)


def vocabulary_size_hard_coded(logits, target, epsilon=0.1, ignore_index=0):
    V = 7  # the size of the example it was tried on
    logp = logits.log_softmax(-1)
    q = torch.full_like(logp, epsilon / (V - 1)).scatter(-1, target.clamp(min=0).unsqueeze(-1), 1 - epsilon)
    keep = (target != ignore_index).to(logp.dtype)
    return (-(q * logp).sum(-1) * keep).sum() / keep.sum().clamp(min=1)


MISTAKES = [
    ("epsilon / V (F.cross_entropy's label_smoothing)", eps_over_v, ["epsilon / V"]),
    ("epsilon / V for each wrong token, target 1 - epsilon", wrong_tokens_get_eps_over_v, ["epsilon / V"]),
    ("no smoothing mass on the <pad> column", pad_column_left_empty, ["<pad> column got no smoothing mass"]),
    ("divided by the batch size", divided_by_batch_size, ["batch size"]),
    ("mean of the sentences' means", mean_of_sentence_means, ["within each sentence"]),
    ("target changed in place", masks_the_target_in_place, ["changed in place"]),
    ("logits changed in place", shifts_the_logits_in_place, ["changed in place"]),
    ("V hard-coded to the example's size", vocabulary_size_hard_coded, ["V - 1"]),
    ("padding counted in the average", mean_over_all, ["padding counted in the average"]),
    ("padding scored as a target", no_ignore, ["as if <pad> were a real target"]),
    ("NaN when every target is padding", nan_when_all_padding, ["0 / 0"]),
    ("ignore_index ignored", ignores_ignore_index, ["ignore_index argument is ignored"]),
    ("epsilon ignored", ignores_epsilon, ["epsilon argument is ignored"]),
    ("KL divergence", kl_divergence, ["KL divergence"]),
    ("summed", summed, ["summed over positions"]),
    ("no log_softmax", no_log_softmax, ["log_softmax"]),
    ("Annotated Transformer's V - 2", annotated_transformer, ["V - 2"]),
    ("detached from the graph", detached, ["detached"]),
    ("one loss per position", per_position, ["not a single number"]),
]


@pytest.mark.parametrize("label,fn,keywords", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_mistakes_are_caught(label, fn, keywords):
    assert_caught(fn, NAME, *keywords)


def test_stub_gets_zero_and_says_not_implemented():
    def label_smoothed_loss(logits, target, epsilon=0.1, ignore_index=0):
        raise NotImplementedError()
    points, text = grade(label_smoothed_loss)
    assert points == 0 and text.count("not implemented yet") == len(REGISTRY[NAME]), text


# ---------------------------------------------------------------- second review: more correct losses
def ls_numpy_distribution(logits, target, epsilon=0.1, ignore_index=0):
    """The smoothed distribution built in numpy (it needs no gradient), the log-probabilities in torch."""
    V = logits.shape[-1]
    t = target.reshape(-1).cpu().numpy()
    q = np.full((t.size, V), epsilon / (V - 1))
    valid = t != ignore_index
    q[np.arange(t.size)[valid], t[valid]] = 1 - epsilon
    q[~valid] = 0
    logp = torch.log_softmax(logits.reshape(-1, V), -1)
    return -(torch.from_numpy(q).to(logits.dtype) * logp).sum() / max(int(valid.sum()), 1)


def ls_float64_masked_select(logits, target, epsilon=0.1, ignore_index=0, *, reduction="mean"):
    V = logits.size(-1)
    lp = logits.double().log_softmax(-1).reshape(-1, V)
    t = target.reshape(-1)
    keep = t.ne(ignore_index)
    if keep.sum() == 0:
        return (logits * 0).sum()
    lp_t = lp.gather(1, t.clamp(0, V - 1).unsqueeze(1)).squeeze(1)
    loss = -((1 - epsilon) * lp_t + epsilon / (V - 1) * (lp.sum(1) - lp_t))
    return torch.masked_select(loss, keep).mean().to(logits.dtype)


def ls_nll_loss(logits, target, epsilon=0.1, ignore_index=0):
    """F.nll_loss for the target's share, the sum of all -log p for the rest."""
    V = logits.size(-1)
    lp = F.log_softmax(logits.reshape(-1, V), dim=-1)
    t = target.reshape(-1)
    keep = t != ignore_index
    n = keep.sum()
    if n == 0:
        return lp.sum() * 0
    nll = F.nll_loss(lp, t, ignore_index=ignore_index, reduction="sum")
    everything = -(lp.sum(-1) * keep).sum()
    return ((1 - epsilon) * nll + epsilon / (V - 1) * (everything - nll)) / n


def ls_in_place_on_its_own(logits, target, epsilon=0.1, ignore_index=0):
    """fill_, scatter_, masked_fill_ on tensors it made itself; torch.where for the empty case."""
    V = logits.size(-1)
    lp = logits.log_softmax(-1)
    q = torch.empty_like(lp).fill_(epsilon / (V - 1))
    t = target.clone()
    t[t == ignore_index] = 0
    q.scatter_(-1, t.unsqueeze(-1), 1 - epsilon)
    q.masked_fill_((target == ignore_index).unsqueeze(-1), 0.0)
    n = (target != ignore_index).sum()
    total = -(q * lp).sum()
    return torch.where(n > 0, total / n.clamp(min=1), total * 0)


def ls_loop_over_vocabulary(logits, target, epsilon=0.1, ignore_index=0):
    V = logits.size(-1)
    lp, t = logits.reshape(-1, V).log_softmax(-1), target.reshape(-1)
    lp, t = lp[t != ignore_index], t[t != ignore_index]
    if len(t) == 0:
        return logits.sum() * 0
    total = lp.new_zeros(len(t))
    for v in range(V):
        w = torch.where(t == v, torch.tensor(1 - epsilon, dtype=lp.dtype), torch.tensor(epsilon / (V - 1), dtype=lp.dtype))
        total = total - w * lp[:, v]
    return total.mean()


def ls_no_grad_for_the_mask(logits, target, epsilon=0.1, ignore_index=0):
    """The mask, the count and the one-hot built under torch.no_grad() (they need no gradient)."""
    V = logits.size(-1)
    with torch.no_grad():
        keep = (target != ignore_index).reshape(-1)
        n = keep.sum().clamp(min=1).item()
        one_hot = F.one_hot(target.reshape(-1).clamp(0, V - 1), V).bool()
    lp = logits.reshape(-1, V).log_softmax(-1)
    per = -(1 - epsilon) * lp.masked_fill(~one_hot, 0).sum(-1) - epsilon / (V - 1) * lp.masked_fill(one_hot, 0).sum(-1)
    return (per * keep).sum() / n


def ls_probability_target(logits, target, epsilon=0.1, ignore_index=0):
    """F.cross_entropy with a probability target (no label_smoothing argument: allowed)."""
    V = logits.size(-1)
    rows, labels = logits.reshape(-1, V), target.reshape(-1)
    keep = labels != ignore_index
    if not keep.any():
        return rows.sum() * 0
    q = torch.full((int(keep.sum()), V), epsilon / (V - 1), dtype=rows.dtype)
    q[torch.arange(len(q)), labels[keep]] = 1 - epsilon
    return F.cross_entropy(rows[keep], q)


@pytest.mark.parametrize("fn", [ls_numpy_distribution, ls_float64_masked_select, ls_nll_loss, ls_in_place_on_its_own,
                                ls_loop_over_vocabulary, ls_no_grad_for_the_mask, ls_probability_target])
def test_second_round_correct_losses(fn):
    assert_full_marks(fn, NAME)


# ---------------------------------------------------------------- second review: more mistakes
def smoothed(logits, target, epsilon, ignore_index, q_of, logp_of=lambda z: z.log_softmax(-1), reduce="mean"):
    """A loss from a distribution q_of(t, V) (N, V) and log-probabilities logp_of(logits) (N, V)."""
    V = logits.size(-1)
    lp, t = logp_of(logits.reshape(-1, V)), target.reshape(-1)
    keep = t != ignore_index
    per = -(q_of(t.clamp(0, V - 1), V, lp) * lp).sum(-1)
    if reduce == "all":
        return -(q_of(t.clamp(0, V - 1), V, lp) * lp)[keep].mean()
    return (per * keep).sum() / keep.sum().clamp(min=1)


def log_of_softmax(logits, target, epsilon=0.1, ignore_index=0):
    return smoothed(logits, target, epsilon, ignore_index,
                    lambda t, V, lp: torch.full_like(lp, epsilon / (V - 1)).scatter(1, t[:, None], 1 - epsilon),
                    logp_of=lambda z: torch.log(z.softmax(-1) + 1e-9))


def clamped_log(logits, target, epsilon=0.1, ignore_index=0):
    return smoothed(logits, target, epsilon, ignore_index,
                    lambda t, V, lp: torch.full_like(lp, epsilon / (V - 1)).scatter(1, t[:, None], 1 - epsilon),
                    logp_of=lambda z: z.softmax(-1).clamp(min=1e-12).log())


def sign_flipped(logits, target, epsilon=0.1, ignore_index=0):
    return -solutions.label_smoothed_loss(logits, target, epsilon, ignore_index)


def epsilon_swapped(logits, target, epsilon=0.1, ignore_index=0):
    return smoothed(logits, target, epsilon, ignore_index,
                    lambda t, V, lp: torch.full_like(lp, (1 - epsilon) / (V - 1)).scatter(1, t[:, None], epsilon))


def share_added_to_the_target_too(logits, target, epsilon=0.1, ignore_index=0):
    return smoothed(logits, target, epsilon, ignore_index,
                    lambda t, V, lp: (1 - epsilon) * F.one_hot(t, V) + epsilon / (V - 1))


def averaged_over_the_vocabulary(logits, target, epsilon=0.1, ignore_index=0):
    return smoothed(logits, target, epsilon, ignore_index,
                    lambda t, V, lp: torch.full_like(lp, epsilon / (V - 1)).scatter(1, t[:, None], 1 - epsilon),
                    reduce="all")


def epsilon_to_each(logits, target, epsilon=0.1, ignore_index=0):
    return smoothed(logits, target, epsilon, ignore_index,
                    lambda t, V, lp: torch.full_like(lp, epsilon).scatter(1, t[:, None], 1 - epsilon))


def probabilities_not_logs(logits, target, epsilon=0.1, ignore_index=0):
    return smoothed(logits, target, epsilon, ignore_index,
                    lambda t, V, lp: torch.full_like(lp, epsilon / (V - 1)).scatter(1, t[:, None], 1 - epsilon),
                    logp_of=lambda z: z.softmax(-1))


def integer_division(logits, target, epsilon=0.1, ignore_index=0):
    return smoothed(logits, target, epsilon, ignore_index,
                    lambda t, V, lp: torch.full_like(lp, epsilon // (V - 1)).scatter(1, t[:, None], 1 - epsilon))


SECOND_ROUND_MISTAKES = [
    ("log(softmax + 1e-9)", log_of_softmax, ["confident", "F.log_softmax"]),
    ("log of a clamped softmax", clamped_log, ["confident", "F.log_softmax"]),
    ("sign flipped", sign_flipped, ["sign is flipped"]),
    ("epsilon and 1 - epsilon swapped", epsilon_swapped, ["swapped"]),
    ("the target gets the share on top", share_added_to_the_target_too, ["on top of 1 - epsilon"]),
    ("averaged over the vocabulary too", averaged_over_the_vocabulary, ["averaged over the vocabulary"]),
    ("epsilon to each wrong token", epsilon_to_each, ["each wrong token got epsilon:"]),
    ("probabilities instead of log-probabilities", probabilities_not_logs, ["probabilities used instead"]),
    ("epsilon // (V - 1)", integer_division, ["integer division"]),
]


@pytest.mark.parametrize("label,fn,keywords", SECOND_ROUND_MISTAKES, ids=[m[0] for m in SECOND_ROUND_MISTAKES])
def test_second_round_mistakes_are_caught(label, fn, keywords):
    assert_caught(fn, NAME, *keywords)


# ---------------------------------------------------------------- third review
def log_softmax_over_positions(logits, target, epsilon=0.1, ignore_index=0):
    """F.log_softmax(logits, dim=1): on (B, L, V) logits a softmax over the positions (dim=0 on flat ones)."""
    V = logits.size(-1)
    lp = F.log_softmax(logits, dim=1 if logits.dim() == 3 else 0)
    q = F.one_hot(target.clamp(0, V - 1), V) * (1 - epsilon - epsilon / (V - 1)) + epsilon / (V - 1)
    keep = target != ignore_index
    return (-(q * lp).sum(-1) * keep).sum() / keep.sum().clamp(min=1)


def test_log_softmax_over_the_wrong_dimension_is_named():
    assert_caught(log_softmax_over_positions, NAME, "log_softmax over dim=1", "dim=-1")
