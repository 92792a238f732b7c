"""Stage 11: the label-smoothed loss, against F.cross_entropy(label_smoothing=epsilon*V/(V-1),
ignore_index=...) (the same distribution as the contract's: the target keeps 1 - epsilon, each of the other V
- 1 tokens gets epsilon / (V - 1)), also for confident logits (every log-probability enters the smoothed loss,
so log(softmax(...)) underflows where log_softmax does not), with the classic mistakes named."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..registry import CheckFailure, forbid, register
from ._util import expect_close, fmt, seeded


def _smoothing(args, kwargs) -> bool:
    """F.cross_entropy(..., label_smoothing=s) with s > 0 (the 8th positional argument), or
    torch._C._nn.cross_entropy_loss(input, target, weight, reduction, ignore_index, label_smoothing)."""
    value = kwargs.get("label_smoothing", args[7] if len(args) > 7 else args[5] if len(args) == 6 else 0.0)
    try:
        return float(value) != 0.0
    except (TypeError, ValueError):
        return True


# the lesson's own work, which a library call must not do for the learner (plain cross-entropy stays allowed)
forbid("label_smoothed_loss", "F.cross_entropy(..., label_smoothing=...) (or "
                              "nn.CrossEntropyLoss(label_smoothing=...))",
       functions=("cross_entropy", "cross_entropy_loss"), when=_smoothing)

PAD = 0

FORMULA = ("loss per position = -(1 - epsilon) * log p[target] - epsilon / (V - 1) * (sum of log p over the "
           "other V - 1 tokens), averaged over the positions whose target is not ignore_index")
EPS_OVER_V = ("each wrong token got epsilon / V (F.cross_entropy(label_smoothing=epsilon) spreads epsilon "
              "over all V tokens, the target included); the contract gives the V - 1 wrong tokens epsilon / "
              "(V - 1) each, i.e. F.cross_entropy(..., label_smoothing=epsilon * V / (V - 1))")
MEAN_ALL = ("padding counted in the average: the sum over real positions was divided by ALL positions; "
            "divide by the number of positions whose target is not ignore_index")
PAD_AS_TARGET = ("padding positions were scored as if <pad> were a real target: leave out the positions "
                 "whose target is ignore_index (mask them, or F.cross_entropy(..., "
                 "ignore_index=ignore_index))")
SUMMED = "summed over positions instead of averaged: divide by the number of non-padding positions"
KL = ("KL divergence (nn.KLDivLoss) instead of cross-entropy: it is smaller by the entropy of the smoothed "
      "distribution; the contract asks for the cross-entropy -sum q log p")
NO_LOG_SOFTMAX = "logits used as log-probabilities: take F.log_softmax(logits, dim=-1) first"
ANNOTATED = ("the smoothing mass went to V - 2 tokens (the target and <pad> left out, as in the Annotated "
             "Transformer); the contract shares epsilon among all V - 1 tokens other than the target")
EPS_IGNORED = "the epsilon argument is ignored (a fixed value is used)"
NO_SMOOTHING = "no smoothing: plain cross-entropy (the target must keep 1 - epsilon, not 1)"
IGNORE_IGNORED = ("the ignore_index argument is ignored: <pad> = 0 was left out instead of ignore_index; use "
                  "the argument")
EPS_OVER_V_OTHERS = ("each wrong token got epsilon / V: there are V - 1 wrong tokens, each gets epsilon / (V "
                     "- 1), so that the distribution sums to 1")
PAD_COLUMN_EMPTY = ("the <pad> column got no smoothing mass: the contract shares epsilon among all V - 1 "
                    "tokens other than the target, <pad> included")
BY_BATCH = ("divided by the batch size instead of the number of non-padding positions: average over the "
            "positions whose target is not ignore_index")
PER_SENTENCE = ("averaged within each sentence, then over the sentences: average over all non-padding "
                "positions at once (sum of their losses / their count), so that a long sentence weighs more")
SIGN = "the sign is flipped: the loss is -sum q log p (positive), the log-probabilities are negative"
SWAPPED = ("epsilon and 1 - epsilon swapped: the target keeps 1 - epsilon, the other V - 1 tokens share "
           "epsilon (epsilon / (V - 1) each)")
TARGET_EXTRA = ("the target got epsilon / (V - 1) on top of 1 - epsilon (the distribution sums to more than "
                "1): the target keeps exactly 1 - epsilon, only the V - 1 other tokens share epsilon")
MEAN_OVER_V = ("averaged over the vocabulary too (.mean() over positions and tokens): sum q * log p over the "
               "V tokens of a position, then average over the positions")
EACH_EPS = "each wrong token got epsilon: the V - 1 wrong tokens share epsilon, epsilon / (V - 1) each"
PROBS = "probabilities used instead of log-probabilities: the cross-entropy is -sum q * log_softmax(logits)"
OTHERS_EMPTY = ("the V - 1 other tokens got nothing (only (1 - epsilon) * -log p[target] is left; "
                "epsilon // (V - 1) is integer division?): each gets epsilon / (V - 1)")
UNSTABLE = ("log-probabilities from log(softmax(logits)): for confident logits the softmax underflows to 0, "
            "so the log is -inf (or a clamp / + 1e-9 hides the true value, far below log 1e-9 here); use "
            "F.log_softmax(logits, dim=-1) (or logits - logsumexp)")
WRONG_DIM = ("log_softmax over dim={d} instead of the vocabulary: the probabilities of a position are over "
             "its V tokens, the last dimension: F.log_softmax(logits, dim=-1)")
SHAPE_ONE = ("one number, but not a 0-dim tensor: no .reshape(1), .view(1), keepdim=True or [None] at the "
             "end; loss.sum() / n or loss.mean() gives shape ()")
ANY_SHAPE = ("logits are (..., V) of any shape, target the same without V: work over the last dimension, "
             "reshape logits to (-1, V) and target to (-1,)")
MUTATED = ("work on copies: target.masked_fill(...) or torch.where(...) (no in-place `_` methods, no "
           "`target[...] = ...`, no `logits -= ...`) so the caller's tensors stay as they were")


NON_CONTIGUOUS = (".view(-1, V) (or .view(-1)) needs a contiguous tensor, and logits sliced or transposed (a "
                  "model's output[:, :-1], a batch-first/length-first swap) are not: use .reshape(-1, V) and "
                  ".reshape(-1), which copy only when they must")


def _reference(logits, target, epsilon, ignore_index=PAD):
    V = logits.size(-1)
    return F.cross_entropy(logits.reshape(-1, V).double(), target.reshape(-1), ignore_index=ignore_index,
                           label_smoothing=epsilon * V / (V - 1))


def _per_position(logits, target, epsilon, pad_column=None, share=None):
    """Cross-entropy against the smoothed distribution at every position, padding included (N,), written out.
    pad_column: a column left without smoothing mass; share: what each smoothed token gets (epsilon / (V -
    1))."""
    V = logits.size(-1)
    logp = F.log_softmax(logits.reshape(-1, V).double(), -1)
    # an out-of-range ignore_index: those positions are left out anyway
    t = target.reshape(-1).clamp(0, V - 1)
    nll = -logp.gather(1, t[:, None]).squeeze(1)
    others = -logp.sum(1) - nll
    if pad_column is None:
        return (1 - epsilon) * nll + (epsilon / (V - 1) if share is None else share) * others
    others = others + logp[:, pad_column]
    return (1 - epsilon) * nll + (epsilon / (V - 2) if share is None else share) * others


def _no_log_softmax(z, t, epsilon):
    """The smoothed cross-entropy with the logits z (N, V) taken for log-probabilities, per position."""
    z_t = z.gather(1, t[:, None]).squeeze(1)
    return -(1 - epsilon) * z_t - epsilon / (z.size(1) - 1) * (z.sum(1) - z_t)


def _mistakes(logits, target, epsilon, ignore_index=PAD):
    """What the classic mistakes would return on these inputs."""
    V = logits.size(-1)
    flat_t = target.reshape(-1)
    keep = flat_t != ignore_index
    n = max(int(keep.sum()), 1)
    per = _per_position(logits, target, epsilon)
    out = {
        EPS_OVER_V: F.cross_entropy(logits.reshape(-1, V).double(), flat_t, ignore_index=ignore_index,
                                    label_smoothing=epsilon),
        MEAN_ALL: per[keep].sum() / flat_t.numel(),
        PAD_AS_TARGET: per.mean(),
        SUMMED: per[keep].sum(),
        NO_LOG_SOFTMAX: _no_log_softmax(logits.reshape(-1, V).double(), flat_t, epsilon)[keep].mean(),
    }
    if target.dim() > 1:
        out[BY_BATCH] = per[keep].sum() / target.size(0)
        rows = keep.view(target.size(0), -1)
        sums, counts = (per * keep).view(target.size(0), -1).sum(1), rows.sum(1)
        if bool((counts > 0).any()):
            out[PER_SENTENCE] = (sums[counts > 0] / counts[counts > 0]).mean()
    nll = _per_position(logits, target, 0.0)
    p = F.softmax(logits.reshape(-1, V).double(), -1)
    p_t = p.gather(1, flat_t.clamp(0, V - 1)[:, None]).squeeze(1)
    out[SIGN] = -per[keep].sum() / n
    out[MEAN_OVER_V] = per[keep].sum() / n / V
    if epsilon > 0:
        probs = -(1 - epsilon) * p_t - epsilon / (V - 1) * (1 - p_t)
        out[PROBS] = probs[keep].mean() if keep.any() else per.sum() * 0
        out[OTHERS_EMPTY] = ((1 - epsilon) * nll)[keep].sum() / n
        out[TARGET_EXTRA] = (per + epsilon / (V - 1) * nll)[keep].sum() / n
        if V > 2:
            out[EACH_EPS] = _per_position(logits, target, epsilon, share=epsilon)[keep].sum() / n
    if 0 < epsilon < 1 and epsilon != 0.5:
        others = _per_position(logits, target, 1.0) * (V - 1)  # -sum of log p over the V - 1 other tokens
        out[SWAPPED] = (epsilon * nll + (1 - epsilon) / (V - 1) * others)[keep].sum() / n
    if 0 < epsilon < 1:
        entropy = -(1 - epsilon) * math.log(1 - epsilon) - epsilon * math.log(epsilon / (V - 1))
        out[KL] = per[keep].mean() - entropy
        out[EPS_OVER_V_OTHERS] = _per_position(logits, target, epsilon, share=epsilon / V)[keep].mean()
        if V > 2 and 0 <= ignore_index < V:
            out[ANNOTATED] = _per_position(logits, target, epsilon, pad_column=ignore_index)[keep].mean()
            out[PAD_COLUMN_EMPTY] = _per_position(logits, target, epsilon, pad_column=ignore_index,
                                                  share=epsilon / (V - 1))[keep].mean()
        out[NO_SMOOTHING] = _reference(logits, target, 0.0, ignore_index)
    if keep.any():
        # the softmax over the batch or the positions instead of the vocabulary
        for d in range(logits.dim() - 1):
            logp = F.log_softmax(logits.double(), d).reshape(-1, V)
            nll_d = -logp.gather(1, flat_t.clamp(0, V - 1)[:, None]).squeeze(1)
            loss_d = (1 - epsilon) * nll_d + epsilon / (V - 1) * (-logp.sum(1) - nll_d)
            out[WRONG_DIM.format(d=d)] = loss_d[keep].mean()
    if epsilon != 0.1:
        out[EPS_IGNORED + " (0.1, the default, was used)"] = _reference(logits, target, 0.1, ignore_index)
    if ignore_index != PAD:
        out[IGNORE_IGNORED] = _reference(logits, target, epsilon, PAD)
    return {k: v.float() for k, v in out.items()}


def _loss(fn, logits, target, what, scalar=False, **kwargs):
    """Call the learner's loss; the answer must be a tensor holding one number (returned as a 0-d tensor; with
    `scalar`, it must be 0-d already), and the inputs must come back unchanged."""
    logits_before, target_before = logits.detach().clone(), target.clone()
    got = fn(logits, target, **kwargs)
    for name, now, before in (("target", target, target_before), ("logits", logits.detach(), logits_before)):
        if now.shape != before.shape or now.dtype != before.dtype or not torch.equal(now, before):
            raise CheckFailure(f"{what}: the caller's `{name}` after the call", f"{name} unchanged",
                               f"{name} changed in place", MUTATED)
    if not isinstance(got, torch.Tensor):
        raise CheckFailure(what, "a scalar torch.Tensor (so that loss.backward() works)", type(got).__name__,
                           "return the tensor itself, not loss.item() or a Python number")
    if got.numel() != 1:
        raise CheckFailure(f"{what}: not a single number", "a scalar tensor (shape ())",
                           f"shape {tuple(got.shape)}",
                           "average over the non-padding positions: the loss is one number, not one per "
                           "position")
    if scalar and got.dim() != 0:
        raise CheckFailure(f"{what}: the shape of the loss", "a 0-dim tensor (shape ()), as F.cross_entropy "
                                                             "returns",
                           f"shape {tuple(got.shape)}", SHAPE_ONE)
    return got.reshape(())


def _inputs(seed, shape=(3, 5), V=7, scale=2.0):
    with seeded(seed):
        logits = torch.randn(*shape, V) * scale
        target = torch.randint(1, V, shape)
    return logits, target


# -------------------------------------------------------------------------------- label_smoothed_loss
@register("label_smoothed_loss", "equals cross-entropy against the smoothed distribution (epsilon = 0.1), "
          "a 0-dim tensor, for any shape (..., V)")
def _ls_value(loss_fn):
    logits, target = _inputs(0)
    target[0, 3:] = PAD
    target[2, 1:] = PAD
    got = _loss(loss_fn, logits, target, "label_smoothed_loss(logits (3, 5, 7), target (3, 5) with padding)",
                scalar=True)
    expect_close(got, _reference(logits, target, 0.1).float(),
                 "label_smoothed_loss(logits (3, 5, 7), target (3, 5) with padding, epsilon=0.1)",
                 hint=FORMULA, atol=1e-5, mistakes=_mistakes(logits, target, 0.1))
    # flat inputs (N, V) and (N,) as well
    flat_l, flat_t = logits.reshape(-1, 7), target.reshape(-1)
    got = _loss(loss_fn, flat_l, flat_t, "label_smoothed_loss(logits (15, 7), target (15,))")
    expect_close(got, _reference(flat_l, flat_t, 0.1).float(), "label_smoothed_loss(logits (15, 7), target "
                                                               "(15,))",
                 hint=ANY_SHAPE, atol=1e-5, mistakes=_mistakes(flat_l, flat_t, 0.1))
    # and 4-D inputs (..., V) and (...)
    deep_l, deep_t = _inputs(7, shape=(2, 3, 4))
    deep_t[1, 2, 1:] = PAD
    what = "label_smoothed_loss(logits (2, 3, 4, 7), target (2, 3, 4))"
    try:
        got = _loss(loss_fn, deep_l, deep_t, what)
    except CheckFailure:
        raise
    except Exception as e:  # noqa: BLE001 (a learner's code that only takes (B, L, V))
        raise CheckFailure(what, "the loss, as for (B, L, V)", f"{type(e).__name__}: {str(e)[:90]}",
                           ANY_SHAPE) from None
    expect_close(got, _reference(deep_l, deep_t, 0.1).float(), what, hint=ANY_SHAPE, atol=1e-5,
                 mistakes=_mistakes(deep_l, deep_t, 0.1))
    # the contract's layouts: logits and target as strided views (a transposed batch), as a model's slices
    # give them
    strided_l, strided_t = logits.transpose(0, 1), target.t()
    what = ("label_smoothed_loss(logits.transpose(0, 1), target.t()) (non-contiguous views, (5, 3, 7) and "
            "(5, 3))")
    try:
        got = _loss(loss_fn, strided_l, strided_t, what)
    except RuntimeError as e:
        if "view size is not compatible" not in str(e) and "view(" not in str(e):
            raise
        raise CheckFailure(what, "the loss, as for contiguous tensors", f"RuntimeError: {str(e)[:90]}",
                           NON_CONTIGUOUS) from None
    expect_close(got, _reference(strided_l, strided_t, 0.1).float(), what, hint=FORMULA, atol=1e-5,
                 mistakes=_mistakes(strided_l, strided_t, 0.1))
    # confident logits (a trained model's): every log-probability enters the smoothed loss, the smallest about
    # -200
    sure = logits * 40
    what = "label_smoothed_loss(logits * 40 (a confident model), target)"
    got = _loss(loss_fn, sure, target, what)
    expect_close(got, _reference(sure, target, 0.1).float(), what, hint=UNSTABLE, atol=1e-5)


@register("label_smoothed_loss", "each wrong token gets epsilon / (V - 1), not epsilon / V")
def _ls_mass(loss_fn):
    # V = 3: epsilon/2 versus epsilon/3, a clear gap
    logits, target = _inputs(1, shape=(4, 3), V=3, scale=3.0)
    got = _loss(loss_fn, logits, target, "label_smoothed_loss(logits (4, 3, 3), target (4, 3), epsilon=0.3)",
                epsilon=0.3)
    expect_close(got, _reference(logits, target, 0.3).float(),
                 "label_smoothed_loss with V = 3, epsilon=0.3 (the target keeps 0.7, the two others get 0.15 "
                 "each)",
                 hint=FORMULA, atol=1e-5, mistakes=_mistakes(logits, target, 0.3))


@register("label_smoothed_loss", "averages over the non-padding positions only")
def _ls_padding(loss_fn):
    logits, target = _inputs(2, shape=(2, 6))
    target[0, 2:] = PAD  # 2 + 6 = 8 real positions out of 12
    what = "label_smoothed_loss with 8 real targets and 4 <pad> targets out of 12"
    got = _loss(loss_fn, logits, target, what)
    expect_close(got, _reference(logits, target, 0.1).float(), what, hint=FORMULA, atol=1e-5,
                 mistakes=_mistakes(logits, target, 0.1))
    # the logits at padding positions do not matter
    other = logits.clone()
    other[0, 2:] = torch.linspace(-20, 20, 4 * 7).view(4, 7)
    got2 = _loss(loss_fn, other, target, what + ", other logits at the padding positions")
    expect_close(got2, got.detach(), what + " after changing only the logits at the padding positions",
                 atol=1e-5,
                 hint=PAD_AS_TARGET)


@register("label_smoothed_loss", "uses epsilon: 0 gives plain cross-entropy, 0.3 more smoothing")
def _ls_epsilon(loss_fn):
    logits, target = _inputs(3)
    target[1, 4:] = PAD
    for eps in (0.0, 0.3):
        what = f"label_smoothed_loss(logits (3, 5, 7), target, epsilon={eps})"
        got = _loss(loss_fn, logits, target, what, epsilon=eps)
        plain = (" (with epsilon = 0 the target keeps 1 and the others nothing: -log p[target], averaged "
                 "over the real positions)") if eps == 0 else ""
        expect_close(got, _reference(logits, target, eps).float(), what, hint=FORMULA + plain,
                     atol=1e-5, mistakes=_mistakes(logits, target, eps))


@register("label_smoothed_loss", "uses the ignore_index argument")
def _ls_ignore_index(loss_fn):
    logits, target = _inputs(4)
    target[0, 0] = 0  # token 0 is a real target here
    target[1, 1] = 0
    target[:, 3:] = 5  # ignore_index=5 marks the padding
    what = "label_smoothed_loss(logits, target, ignore_index=5) with target 0 at two real positions"
    got = _loss(loss_fn, logits, target, what, ignore_index=5)
    expect_close(got, _reference(logits, target, 0.1, ignore_index=5).float(), what, hint=FORMULA, atol=1e-5,
                 mistakes=_mistakes(logits, target, 0.1, ignore_index=5))


@register("label_smoothed_loss", "is 0, not NaN, when every target is padding")
def _ls_all_padding(loss_fn):
    logits, _ = _inputs(5, shape=(2, 3))
    target = torch.full((2, 3), PAD)
    what = "label_smoothed_loss when every target is <pad>"
    leaf = logits.requires_grad_(True)
    got = _loss(loss_fn, leaf * 1.0, target, what)  # not a leaf: an in-place change is told as such
    if not torch.isfinite(got):
        raise CheckFailure(what, "0", fmt(got.item()),
                           "0 / 0: with no real position, the mean over nothing is NaN; return a zero "
                           "(e.g. `if n == 0: return logits.sum() * 0.0`) or divide by max(n, 1)")
    if abs(got.item()) > 1e-7:
        raise CheckFailure(what, "0", fmt(got.item()), PAD_AS_TARGET)
    try:  # the training loop calls loss.backward() on every batch, this one too
        got.backward()
    except RuntimeError as e:
        raise CheckFailure(f"{what}: loss.backward()", "it to work (a zero still connected to the graph)",
                           f"RuntimeError: {str(e)[:90]}",
                           "a zero cut off from the graph (torch.tensor(0.0) has no grad_fn): "
                           "loss.backward() in the training loop raises on such a batch; return a zero made "
                           "from the logits, `logits.sum() * 0.0`") from None


@register("label_smoothed_loss", "its gradient reaches the logits and equals PyTorch's")
def _ls_gradient(loss_fn):
    logits, target = _inputs(6)
    target[2, 2:] = PAD
    mine = logits.clone().requires_grad_(True)
    got = _loss(loss_fn, mine, target, "label_smoothed_loss(logits.requires_grad_(), target)")
    if not got.requires_grad:
        raise CheckFailure("the loss's gradient", "a loss connected to the logits (loss.requires_grad is "
                                                  "True)",
                           "a loss detached from the logits",
                           "the computation left PyTorch: no .item(), .tolist(), numpy or torch.tensor(...) "
                           "on the way; and no torch.no_grad()")
    got.backward()
    ref_logits = logits.clone().double().requires_grad_(True)
    _reference(ref_logits, target, 0.1).backward()
    if mine.grad is None:
        raise CheckFailure("logits.grad after loss.backward()", "a gradient", "None",
                           "the loss must be computed from the logits tensor itself (no copies via .data or "
                           ".detach())")
    expect_close(mine.grad, ref_logits.grad.float(), "logits.grad after loss.backward()", atol=1e-6,
                 hint="the gradient is (softmax(logits) - smoothed target) / (number of real positions), and "
                      "0 at padding positions")
