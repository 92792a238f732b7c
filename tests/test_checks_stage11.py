"""Stage 11's checks: full marks for label-smoothed losses however written; for each classic mistake of label
smoothing, exactly the points it earns and the words that name it (the reference and the stub:
tests/test_registry.py)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import solutions
from tests.grading import Mistake, assert_full_marks, assert_mistake, edit, grade, mistakes

NAME, LOSS = "label_smoothed_loss", solutions.label_smoothed_loss


# ---------------------------------------------------------------- correct, written differently
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


@pytest.mark.parametrize("fn", [ls_distribution, ls_kl_plus_entropy, ls_python_loop, ls_logsumexp_float64,
                                ls_einsum_one_hot, ls_plain_cross_entropy, ls_numpy_distribution,
                                ls_float64_masked_select, ls_nll_loss, ls_in_place_on_its_own, ls_loop_over_vocabulary,
                                ls_no_grad_for_the_mask, ls_probability_target])
def test_other_correct_losses(fn):
    assert_full_marks(fn, NAME)


# ---------------------------------------------------------------- PyTorch's own label smoothing
def _torch_smoothing(rescaled=True, then=None, **kwargs):
    """F.cross_entropy(label_smoothing=...) (a shortcut), with epsilon rescaled to epsilon * V / (V - 1) so that
    the V - 1 wrong tokens share epsilon, or not; `kwargs` for F.cross_entropy, `then` applied to what it returns."""
    def label_smoothed_loss(logits, target, epsilon=0.1, ignore_index=0):
        V = logits.size(-1)
        loss = F.cross_entropy(logits.reshape(-1, V), target.reshape(-1), **{"ignore_index": ignore_index, **kwargs},
                               label_smoothing=epsilon * V / (V - 1) if rescaled else epsilon)
        return loss if then is None else then(loss)
    return label_smoothed_loss


def ls_builtin(logits, target, epsilon=0.1, ignore_index=0):
    """PyTorch's own smoothing, rescaled right, and a zero when every target is padding."""
    if not (target != ignore_index).any():
        return logits.sum() * 0.0
    return _torch_smoothing()(logits, target, epsilon, ignore_index)


def test_pytorch_s_own_label_smoothing_earns_nothing():
    """The lesson teaches label smoothing: F.cross_entropy(label_smoothing=...) doing it (even rescaled
    correctly) earns nothing, and the report says so (ls_builtin's own all-padding case keeps its point);
    plain cross-entropy stays allowed (ls_plain_cross_entropy, ls_probability_target)."""
    points, text = grade(ls_builtin, NAME)
    assert points == 1 and text.count("your code calls F.cross_entropy(..., label_smoothing=...)") == 6, text


# ---------------------------------------------------------------- classic mistakes, one row each
def _loss(on_target="(1 - epsilon)", on_others="epsilon / (V - 1) * others"):
    """The reference with other weights on -log p(target) and on the other tokens' -log p."""
    return edit(LOSS, ("loss = (1 - epsilon) * nll + epsilon / (V - 1) * others",
                       f"loss = {on_target} * nll + {on_others}"))


def _logp(new):
    return edit(LOSS, ("F.log_softmax(logits.float(), dim=-1)", new))


def _returns(new):
    return edit(LOSS, ("return loss.mean()", f"return {new}"))


def smoothed_per_position(logits, target, epsilon, ignore_index):
    V = logits.size(-1)
    logp = logits.log_softmax(-1)
    q = torch.full_like(logp, epsilon / (V - 1)).scatter(-1, target.clamp(min=0).unsqueeze(-1), 1 - epsilon)
    return -(q * logp).sum(-1), (target != ignore_index).to(logp.dtype)


def mean_of_sentence_means(logits, target, epsilon=0.1, ignore_index=0):
    per, keep = smoothed_per_position(logits, target, epsilon, ignore_index)
    if target.dim() == 1:
        per, keep = per[None], keep[None]
    counts = keep.sum(-1)
    if not (counts > 0).any():
        return logits.sum() * 0
    return ((per * keep).sum(-1)[counts > 0] / counts[counts > 0]).mean()


def kl_divergence(logits, target, epsilon=0.1, ignore_index=0):
    V = logits.size(-1)
    logits, target = logits.reshape(-1, V), target.reshape(-1)
    keep = target != ignore_index
    if not keep.any():
        return logits.sum() * 0.0
    logits, target = logits[keep], target[keep]
    q = torch.full_like(logits, epsilon / (V - 1)).scatter(1, target[:, None], 1 - epsilon)
    return F.kl_div(logits.log_softmax(-1), q, reduction="batchmean")


def annotated_transformer(logits, target, epsilon=0.1, ignore_index=0):
    """The Annotated Transformer's LabelSmoothing: epsilon / (V - 2), column 0 (<pad>) emptied after the scatter."""
    V = logits.size(-1)
    safe = target.masked_fill(target == ignore_index, 0)
    q = torch.full_like(logits, epsilon / (V - 2)).scatter(-1, safe.unsqueeze(-1), 1 - epsilon)
    q[..., 0] = 0
    per = -(q * logits.log_softmax(-1)).sum(-1)
    keep = (target != ignore_index).to(logits.dtype)
    return (per * keep).sum() / keep.sum().clamp(min=1)


MISTAKES = [
    # the smoothed distribution
    Mistake("epsilon / V (F.cross_entropy's label_smoothing)", _torch_smoothing(rescaled=False), 0, "epsilon / V"),
    Mistake("epsilon / V for each wrong token, target 1 - epsilon", _loss(on_others="epsilon / V * others"), 1,
            "epsilon / V"),
    Mistake("epsilon to each wrong token", _loss(on_others="epsilon * others"), 1, "each wrong token got epsilon:"),
    Mistake("epsilon // (V - 1)", _loss(on_others="epsilon // (V - 1) * others"), 1, "integer division"),
    Mistake("epsilon and 1 - epsilon swapped", _loss("epsilon", "(1 - epsilon) / (V - 1) * others"), 1, "swapped"),
    Mistake("the target gets the share on top", _loss("(1 - epsilon + epsilon / (V - 1))"), 1, "on top of 1 - epsilon"),
    Mistake("no smoothing mass on the <pad> column",
            _loss(on_others="epsilon / (V - 1) * (others + logp[:, ignore_index])"), 1,
            "<pad> column got no smoothing mass"),
    Mistake("Annotated Transformer's V - 2", annotated_transformer, 1, "V - 2"),
    Mistake("V hard-coded to the example's size", _loss(on_others="epsilon / (7 - 1) * others"), 6, "V - 1"),
    Mistake("epsilon ignored", edit(LOSS, ("    V = logits.size(-1)", "    epsilon = 0.1\n    V = logits.size(-1)")), 5,
            "epsilon argument is ignored"),
    # the log-probabilities
    Mistake("no log_softmax", _logp("logits.float()"), 1, "log_softmax"),
    Mistake("probabilities instead of log-probabilities", _logp("F.softmax(logits.float(), dim=-1)"), 1,
            "probabilities used instead"),
    Mistake("log(softmax + 1e-9)", _logp("torch.log(F.softmax(logits.float(), dim=-1) + 1e-9)"), 6,
            ("confident", "F.log_softmax")),
    Mistake("log of a clamped softmax", _logp("F.softmax(logits.float(), dim=-1).clamp(min=1e-12).log()"), 6,
            ("confident", "F.log_softmax")),
    Mistake("log_softmax over the positions (dim=1 of (B, L, V))",
            _logp("F.log_softmax(logits.float(), dim=1 if logits.dim() == 3 else 0)"), 1,
            ("log_softmax over dim=1", "dim=-1")),
    Mistake("KL divergence", kl_divergence, 2, "KL divergence"),
    # the padding and the average
    Mistake("padding counted in the average", _torch_smoothing(reduction="none", then=torch.mean), 0,
            "padding counted in the average"),
    Mistake("padding scored as a target", _torch_smoothing(ignore_index=-100), 0,  # F.cross_entropy's default
            "as if <pad> were a real target"),
    Mistake("ignore_index ignored", edit(LOSS, ("keep = target != ignore_index", "keep = target != 0")), 6,
            "ignore_index argument is ignored"),
    Mistake("NaN when every target is padding", edit(LOSS, ("if not keep.any():", "if False:")), 6, "0 / 0"),
    Mistake("divided by the batch size", _returns("loss.sum() / logits.shape[0]"), 1, "batch size"),
    Mistake("mean of the sentences' means", mean_of_sentence_means, 2, "within each sentence"),
    Mistake("averaged over the vocabulary too (an empty mean when all is padding)",
            edit(LOSS, ("if not keep.any():", "if False:"), ("return loss.mean()", "return loss.mean() / V")), 0,
            "averaged over the vocabulary"),
    Mistake("summed", _torch_smoothing(reduction="sum"), 0, "summed over positions"),
    Mistake("one loss per position", _torch_smoothing(reduction="none"), 0, "not a single number"),
    Mistake("sign flipped", _returns("-loss.mean()"), 1, "sign is flipped"),
    # the inputs and the graph
    Mistake("target changed in place",  # target.reshape(-1) is a view of the caller's
            edit(LOSS, ("keep = target != ignore_index",
                        "keep = target != ignore_index\n    target.masked_fill_(~keep, 0)")),
            6, "changed in place"),
    Mistake("logits changed in place (stable, but the caller's logits change)",
            edit(LOSS, ("    V = logits.size(-1)",
                        "    V = logits.size(-1)\n    logits -= logits.max(-1, keepdim=True).values.detach()")),
            0, "changed in place"),
    Mistake("detached from the graph", _returns("torch.tensor(loss.mean().item())"), 6, "detached"),
]


@pytest.mark.parametrize("m", mistakes(NAME, MISTAKES))
def test_mistakes(m):
    assert_mistake(m)
