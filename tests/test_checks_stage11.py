"""Stage 11's checks: full marks for the reference and for correct losses written differently; points
lost, with the mistake named, for each classic mistake of label smoothing."""
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


@pytest.mark.parametrize("fn", [ls_distribution, ls_kl_plus_entropy])
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


MISTAKES = [
    ("epsilon / V (F.cross_entropy's label_smoothing)", eps_over_v, ["epsilon / V"]),
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
