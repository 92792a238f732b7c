"""Stage 11's checks: full marks for label-smoothed losses however written; for each classic mistake of label
smoothing, exactly the points it earns and the words that name it (the reference and the stub:
tests/test_registry.py)."""
import inspect

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import solutions
from tests.grading import Mistake, assert_full_marks, assert_mistake, edit, grade, mistakes

NAME, LOSS = "label_smoothed_loss", solutions.label_smoothed_loss
_SOURCE = inspect.getsource(LOSS)
_BODY, _TAIL = (_SOURCE[_SOURCE.index(start):_SOURCE.index("    ### END")]
                 for start in ("    V =", "    nll ="))
_AT = dict(V="V = logits.size(-1)", logp="F.log_softmax(logits.float(), dim=-1)",
           keep="keep = target != ignore_index",
           empty="if not keep.any():", zero="logits.sum() * 0.0  # no real token: zero, still connected to "
                                            "the graph",
           kept="logp, target = logp[keep], target[keep]", gather="-logp.gather(1, target[:, "
                                                                  "None]).squeeze(1)",
           on_target="(1 - epsilon) * nll", on_others="epsilon / (V - 1) * others", mean="loss.mean()",
           args="ignore_index: int = PAD")


def _loss(*lines, body=False, **new):
    """The reference with `lines` instead of its last four (from the kept positions' logp (n, V) and target
    (n,)) or of its whole body if `body`, and each part _AT[name] written new[name]; numpy as np."""
    made = edit(LOSS, *[(_BODY if body else _TAIL, "".join(f"    {s}\n" for s in lines))] * bool(lines),
                *((_AT[name], text) for name, text in new.items()))
    made.__globals__["np"] = np
    return made


# ---------------------------------------------------------------- correct, written differently
_ONE_AT_A_TIME = ("V = logits.shape[-1]", "rows, labels = logits.reshape(-1, V), target.reshape(-1)",
                  # a zero connected to the graph, for an all-padding batch
                  "total, count = logits.sum() * 0.0, 0",
                  "for i in range(labels.numel()):", "    t = int(labels[i])", "    if t == ignore_index:",
                  "        continue", "    logp = rows[i] - torch.logsumexp(rows[i], 0)",
                  "    total = total - (1 - epsilon) * logp[t] - epsilon / (V - 1) * (logp.sum() - logp[t])",
                  "    count += 1", "return total / max(count, 1)")
CORRECT = {
    "the smoothed distribution built with scatter; a masked sum over a clamped "
    "count": (_DISTRIBUTION := _loss(
        "V = logits.size(-1)", "safe = target.masked_fill(target == ignore_index, 0)",
        "q = torch.full_like(logits, epsilon / (V - 1)).scatter(-1, safe.unsqueeze(-1), 1 - epsilon)",
        "per_position = -(q * logits.log_softmax(-1)).sum(-1)", "keep = (target != "
                                                                "ignore_index).to(logits.dtype)",
        "return (per_position * keep).sum() / keep.sum().clamp(min=1)", body=True)),
    "KL divergence plus the entropy of the smoothed distribution; rows picked by index": _loss(
        "q = torch.full_like(logp, epsilon / (V - 1))", "q[torch.arange(len(target)), target] = 1 - epsilon",
        'kl = F.kl_div(logp, q, reduction="sum") / len(target)',
        "entropy = -(q * q.clamp_min(1e-12).log()).sum(-1).mean()", "return kl + entropy",
        zero="torch.zeros((), requires_grad=True)",
        kept="rows = torch.nonzero(keep).flatten()\n    logp, target = logp[rows], target[rows]"),
    "one position at a time, logsumexp; a Python count": _loss(*_ONE_AT_A_TIME, body=True),
    "float64 logsumexp, no log_softmax tensor; an extra keyword argument": _loss("V = logits.size(-1)",
        "z, t = logits.double().flatten(0, -2), target.flatten()", "z, t = z[t != ignore_index], t[t != "
                                                                   "ignore_index]",
        "if t.numel() == 0:", "    return logits.sum() * 0", "z_t = z.gather(-1, "
                                                             "t.unsqueeze(-1)).squeeze(-1)",
        "per = torch.logsumexp(z, -1) - (1 - epsilon) * z_t - epsilon / (V - 1) * (z.sum(-1) - z_t)",
        "return per.mean().to(logits.dtype)", body=True, args='ignore_index: int = PAD, reduction="mean"'),
    "one_hot and einsum; weights instead of a selection": _loss("V = logits.shape[-1]",
                                                                "logp = logits.log_softmax(-1)",
        "q = F.one_hot(target.clamp(min=0), V).to(logp.dtype) * (1 - epsilon - epsilon / (V - 1)) + epsilon "
        "/ (V - 1)",
        "w = (target != ignore_index).to(logp.dtype)",
        'return -torch.einsum("...v,...v,...->", q, logp, w) / w.sum().clamp_min(1.0)', body=True),
    "plain F.cross_entropy (allowed) for the target's share, the uniform share by hand": _loss(
        gather="F.cross_entropy(logits.reshape(-1, V)[keep], target, ignore_index=ignore_index, "
               "reduction='none')"),
    "the distribution in numpy (it needs no gradient)": _loss("t = target.cpu().numpy()",
        "q = np.full((t.size, V), epsilon / (V - 1))", "q[np.arange(t.size), t] = 1 - epsilon",
        "return -(torch.from_numpy(q).to(logp.dtype) * logp).sum() / max(int(t.size), 1)"),
    "float64, masked_select, a keyword-only extra argument": _loss(
        kept="", gather="-logp.gather(1, target.clamp(0, V - 1)[:, None]).squeeze(1)",
        logp="F.log_softmax(logits.double(), dim=-1)", mean="torch.masked_select(loss, "
                                                            "keep).mean().to(logits.dtype)",
        args='ignore_index: int = PAD, *, reduction="mean"'),
    "F.nll_loss for the target's share": _loss(gather="F.nll_loss(logp, target, reduction='none')"),
    "fill_, scatter_, masked_fill_ on its own tensors; torch.where for the empty "
    "case": _loss("V = logits.size(-1)",
        "lp = logits.log_softmax(-1)", "q = torch.empty_like(lp).fill_(epsilon / (V - 1))",
                  "t = target.clone()",
        "t[t == ignore_index] = 0", "q.scatter_(-1, t.unsqueeze(-1), 1 - epsilon)",
        "q.masked_fill_((target == ignore_index).unsqueeze(-1), 0.0)", "n = (target != ignore_index).sum()",
        "total = -(q * lp).sum()", "return torch.where(n > 0, total / n.clamp(min=1), total * 0)", body=True),
    "a loop over the vocabulary": _loss("total = logp.new_zeros(len(target))", "for v in range(V):",
        "    total = total - torch.where(target == v, 1 - epsilon, epsilon / (V - 1)) * logp[:, v]",
        "return total.mean()"),
    "the mask, the count and the one-hot built under torch.no_grad()": _loss("with torch.no_grad():",
        "    n, one_hot = len(target), F.one_hot(target, V).bool()",
        "return ((1 - epsilon) * -logp.masked_fill(~one_hot, 0).sum(-1)",
        "        - epsilon / (V - 1) * logp.masked_fill(one_hot, 0).sum(-1)).sum() / n",
        keep="with torch.no_grad():\n        keep = target != ignore_index"),
    "F.cross_entropy with a probability target (allowed)": _loss(
        "q = torch.full((len(target), V), epsilon / (V - 1), dtype=logits.dtype)",
        "q[torch.arange(len(q)), target] = 1 - epsilon", "return F.cross_entropy(logits.reshape(-1, "
                                                         "V)[keep], q)"),
}


@pytest.mark.parametrize("fn", CORRECT.values(), ids=CORRECT)
def test_other_correct_losses(fn):
    assert_full_marks(fn, NAME)


# ---------------------------------------------------------------- PyTorch's own label smoothing
def _torch_smoothing(rescaled=True, then=None, zero_if_empty=False, **kwargs):
    """F.cross_entropy(label_smoothing=...) (a shortcut), epsilon rescaled to epsilon * V / (V - 1) so that
    the V - 1 wrong tokens share epsilon, or not; `kwargs` for F.cross_entropy, `then` applied to what it
    returns."""
    def label_smoothed_loss(logits, target, epsilon=0.1, ignore_index=0):
        if zero_if_empty and not (target != ignore_index).any():
            return logits.sum() * 0.0
        V = logits.size(-1)
        loss = F.cross_entropy(logits.reshape(-1, V), target.reshape(-1),
                               **{"ignore_index": ignore_index, **kwargs},
                               label_smoothing=epsilon * V / (V - 1) if rescaled else epsilon)
        return loss if then is None else then(loss)
    return label_smoothed_loss


def test_pytorch_s_own_label_smoothing_earns_nothing():
    """The lesson teaches label smoothing: F.cross_entropy(label_smoothing=...) doing it (even rescaled
    correctly) earns nothing, and the report says so (its all-padding case, by hand, keeps its point); plain
    cross-entropy is allowed."""
    points, text = grade(_torch_smoothing(zero_if_empty=True), NAME)
    assert points == 1 and text.count("your code calls F.cross_entropy(..., label_smoothing=...)") == 6, text


# ---------------------------------------------------------------- classic mistakes, one row each
mean_of_sentence_means = edit(_DISTRIBUTION,
                              ("return (per_position * keep).sum() / keep.sum().clamp(min=1)", """\
counts = keep.reshape(-1, target.size(-1)).sum(-1)
    if not (counts > 0).any():
        return logits.sum() * 0
    return ((per_position * keep).reshape(-1, target.size(-1)).sum(-1)[counts > 0] / """
                               """counts[counts > 0]).mean()"""))
# the Annotated Transformer's LabelSmoothing: epsilon / (V - 2), column 0 (<pad>) emptied after the scatter
annotated_transformer = edit(_DISTRIBUTION, ("logits, epsilon / (V - 1)", "logits, epsilon / (V - 2)"),
                             ("1 - epsilon)", "1 - epsilon)\n    q[..., 0] = 0"))
_SOFTMAX = "F.softmax(logits.float(), dim=-1)"
MISTAKES = [
    # the smoothed distribution
    Mistake("epsilon / V (F.cross_entropy's label_smoothing)", _torch_smoothing(rescaled=False), 0,
            "epsilon / V"),
    Mistake("epsilon / V for each wrong token, target 1 - epsilon", _loss(on_others="epsilon / V * others"),
            1,
            "epsilon / V"),
    Mistake("epsilon to each wrong token", _loss(on_others="epsilon * others"), 1,
            "each wrong token got epsilon:"),
    Mistake("epsilon // (V - 1)", _loss(on_others="epsilon // (V - 1) * others"), 1, "integer division"),
    Mistake("epsilon and 1 - epsilon swapped",
            _loss(on_target="epsilon * nll", on_others="(1 - epsilon) / (V - 1) * others"), 1, "swapped"),
    Mistake("the target gets the share on top", _loss(on_target="(1 - epsilon + epsilon / (V - 1)) * nll"), 1,
            "on top of 1 - epsilon"),
    Mistake("no smoothing mass on the <pad> column",
            _loss(on_others="epsilon / (V - 1) * (others + logp[:, ignore_index])"), 1,
            "<pad> column got no smoothing mass"),
    Mistake("Annotated Transformer's V - 2", annotated_transformer, 1, "V - 2"),
    Mistake("V hard-coded to the example's size", _loss(on_others="epsilon / (7 - 1) * others"), 6, "V - 1"),
    Mistake("epsilon ignored", _loss(V="epsilon = 0.1\n    V = logits.size(-1)"), 5,
            "epsilon argument is ignored"),
    # the log-probabilities
    Mistake("no log_softmax", _loss(logp="logits.float()"), 1, "log_softmax"),
    Mistake("probabilities instead of log-probabilities", _loss(logp=_SOFTMAX), 1,
            "probabilities used instead"),
    Mistake("log(softmax + 1e-9)", _loss(logp=f"torch.log({_SOFTMAX} + 1e-9)"), 6,
            ("confident", "F.log_softmax")),
    Mistake("log of a clamped softmax", _loss(logp=f"{_SOFTMAX}.clamp(min=1e-12).log()"), 6,
            ("confident", "F.log_softmax")),
    Mistake("log_softmax over the positions (dim=1 of (B, L, V))",
            _loss(logp="F.log_softmax(logits.float(), dim=1 if logits.dim() == 3 else 0)"), 1,
            ("log_softmax over dim=1", "dim=-1")),
    Mistake("KL divergence", _loss(
        "q = torch.full_like(logp, epsilon / (V - 1)).scatter(1, target[:, None], 1 - epsilon)",
        'return F.kl_div(logp, q, reduction="batchmean")'), 2, "KL divergence"),
    # the padding and the average
    Mistake("padding counted in the average", _torch_smoothing(reduction="none", then=torch.mean), 0,
            "padding counted in the average"),
    Mistake("padding scored as a target", _torch_smoothing(ignore_index=-100), 0,  # F.cross_entropy's default
            "as if <pad> were a real target"),
    Mistake("ignore_index ignored", _loss(keep="keep = target != 0"), 6, "ignore_index argument is ignored"),
    Mistake("NaN when every target is padding", _loss(empty="if False:"), 6, "0 / 0"),
    # loss.backward() raises on an all-padding batch (the lesson's zero is logits.sum() * 0.0)
    Mistake("a detached zero when every target is padding", _loss(zero="torch.tensor(0.0)"), 6,
            ("loss.backward()", "cut off from the graph", "logits.sum() * 0.0")),
    Mistake("a Python loop's new zero when every target is padding",
            _loss(*(("total, count = logits.new_zeros(()), 0" if line.startswith("total, count") else line)
                    for line in _ONE_AT_A_TIME), body=True), 6, "cut off from the graph"),
    Mistake("divided by the batch size", _loss(mean="loss.sum() / logits.shape[0]"), 1, "batch size"),
    Mistake("mean of the sentences' means", mean_of_sentence_means, 2, "within each sentence"),
    Mistake("averaged over the vocabulary too (an empty mean when all is padding)",
            _loss(empty="if False:", mean="loss.mean() / V"), 0, "averaged over the vocabulary"),
    Mistake("summed", _torch_smoothing(reduction="sum"), 0, "summed over positions"),
    Mistake("one loss per position", _torch_smoothing(reduction="none"), 0, "not a single number"),
    Mistake("one number of shape (1,), not a 0-dim tensor", _loss(mean="loss.mean().reshape(1)"), 6,
            ("shape (1,)", "not a 0-dim tensor")),
    Mistake("only (N, V) or (B, L, V) logits taken", edit(LOSS, ("F.log_softmax(logits.float(), "
                                                                 "dim=-1).reshape(-1, V)",
            "F.log_softmax(logits.flatten(0, 1) if logits.dim() == 3 else logits.float(), dim=-1)")), 6,
            ("(..., V) of any shape", "IndexError")),
    Mistake("sign flipped", _loss(mean="-loss.mean()"), 1, "sign is flipped"),
    # the contract's layouts: strided views (every other check passes contiguous tensors)
    Mistake(".view(-1, V) and .view(-1): contiguous inputs only", edit(
        LOSS, ("F.log_softmax(logits.float(), dim=-1).reshape(-1, V)",
               "F.log_softmax(logits.view(-1, V).float(), dim=-1)"),
        ("target = target.reshape(-1)", "target = target.view(-1)")), 6,
            ("non-contiguous views", "needs a contiguous tensor", ".reshape(-1, V)")),
    # the inputs and the graph
    Mistake("target changed in place",  # target.reshape(-1) is a view of the caller's
            _loss(keep="keep = target != ignore_index\n    target.masked_fill_(~keep, 0)"), 6,
            "changed in place"),
    Mistake("logits changed in place (stable, but the caller's logits change)",
            _loss(V="V = logits.size(-1)\n    logits -= logits.max(-1, keepdim=True).values.detach()"), 0,
            "changed in place"),
    Mistake("detached from the graph", _loss(mean="torch.tensor(loss.mean().item())"), 6, "detached"),
]


@pytest.mark.parametrize("m", mistakes(NAME, MISTAKES))
def test_mistakes(m):
    assert_mistake(m)
