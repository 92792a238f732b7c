"""The training loop: `train` reads top to bottom over one TrainState (the model, the optimizer, the data's
order, the step, the history), as nanoGPT's train.py and the Annotated Transformer's run_epoch do. A step's
micro-batches, the step's bookkeeping, the snapshots for checkpoint averaging and the end on the average are
the functions below it; the checkpoint of the state is written and read by solutions.translate.checkpoints."""
from __future__ import annotations

import dataclasses
import inspect
import random
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm

import solutions
from solutions import distributed
from solutions.translate.checkpoints import _cpu_state, average_states, restore_train_state, save_train_state
from solutions.translate.config import Config, config_for, plural
from solutions.translate.data import PreparedData
from solutions.translate.implementation import _use
from solutions.translate.model import build_model, make_schedule
from solutions.translate.paper import RECORDED_CPU
from solutions.translate.precision import _autocast, resolved_precision


@torch.no_grad()
def validation_loss(model, pairs, config: Config, impl=solutions) -> float:
    """Label-smoothed loss per target token over `pairs`, in eval mode (no dropout)."""
    make_batch, loss_fn = _use(impl, "make_batch"), _use(impl, "label_smoothed_loss")
    device = next(model.parameters()).device
    amp, _ = _autocast(device, config.precision)
    was_training = model.training
    model.eval()
    total, n_tokens = 0.0, 0
    lengths = [max(len(s), len(t) + 1) for s, t in pairs]
    for idx in _use(impl, "batch_by_tokens")(lengths, 2 * config.max_tokens):  # no gradients: twice the batch
        batch = make_batch([pairs[i][0] for i in idx], [pairs[i][1] for i in idx]).to(device)
        with amp:
            logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (B, Lt, V)
        total += loss_fn(logits.float(), batch.tgt_out, config.label_smoothing).item() * batch.n_tokens
        n_tokens += batch.n_tokens
    model.train(was_training)
    return total / max(n_tokens, 1)


def _target_tokens(pairs, idx) -> int:
    """Target tokens of one batch: each target and its <eos> (what the loss averages over)."""
    return sum(len(pairs[j][1]) + 1 for j in idx)


@dataclass
class TrainState:
    """One run of `train`: what it was given, what it built, and where it is. The checkpoint of a run is this
    state written down (solutions.translate.checkpoints.save_train_state)."""

    config: Config
    data: PreparedData
    impl: Any                   # where make_batch, the loss and batch_by_tokens come from
    model: torch.nn.Module      # the weights: saved, averaged and returned
    optimizer: Any
    scheduler: Any
    amp: Any                    # the autocast context of config.precision
    scaler: Any                 # a GradScaler for fp16, else None
    batches: list               # the epoch's order of batches (lists of indices into data.train)
    per_step: int               # batches per optimizer step, all processes together: world x accumulate
    steps_per_epoch: int
    rank: int
    world: int
    minutes: float              # this session's time budget
    progress: bool              # rank 0 only
    checkpoint: Any = None      # the file for save_train_state, or None
    checkpoint_every: int = 0
    label: str = ""
    position: int | None = None
    rng: random.Random = None   # the shuffles of the epochs' orders
    net: Any = None             # what forward runs: the model, or DDP / torch.compile around it
    history: dict = field(default_factory=lambda: {"step_loss": [], "lr": [], "tokens_per_s": [],
                                                   "val_loss": [], "val_step": [], "epochs": 0.0})
    step: int = 0
    target_tokens: int = 0      # target tokens trained on, all sessions
    snapshots: list = field(default_factory=list)  # for average_last: CPU copies of the weights
    next_snapshot: float = 0.0  # training seconds at which the next snapshot is taken
    first_epoch: int = 0        # where this session starts: the epoch, and the step within it
    first_index: int = 0
    seconds_before: float = 0.0  # training seconds of earlier sessions
    session: float = 0.0        # time.time() when this session's training began
    start: float = 0.0          # session - seconds_before: training time across sessions counts from here
    saved_at: int = -1          # the step of the last checkpoint written
    speed_from: tuple = (0, 0)  # (step, target tokens) when this session began: for the slow-machine note
    speed_unchecked: bool = False

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def train(config: Config, data: PreparedData, minutes: float | None = None, model=None, progress: bool = True,
          impl=solutions, *, checkpoint=None, checkpoint_every: int = 0, resume=None, label: str = "",
          position: int | None = None):
    """Train on data.train until `minutes` (default config.minutes), config.max_epochs or config.max_steps run
    out; validation loss after each epoch. Returns (model, history) with history lists for plotting:
    step_loss, lr, tokens_per_s (one per step), val_loss and val_step (one per epoch), and totals.

    One optimizer step takes world * config.accumulate batches of the epoch's order (the same shuffled order
    on every process, from config.seed and the epoch): under `torchrun`, rank r takes its own
    config.accumulate of them (solutions.distributed.rank_share) and DistributedDataParallel averages the
    gradients; only rank 0 shows progress and evaluates. Each micro-batch's loss (per target token) is
    weighted by its share of the step's target tokens: the step's gradient is that of one batch of them all.

    checkpoint: a file written (by rank 0) every `checkpoint_every` steps and when the run stops (time, steps
    or epochs): the weights, tokenizer and config as save_checkpoint writes them, plus the optimizer, the
    schedule, the data position (epoch, step within it), every process's random state and the history.
    resume: such a file (or what torch.load gave); the run goes on as if it had never stopped, and `minutes`
    is this session's budget (history["seconds"] counts all sessions).

    progress: a bar per epoch (tqdm), `label` before its name and at `position` (a line each for runs side by
    side), a line per epoch, and a note when this machine is far slower than the records (slow_machine_note).

    Example: model, history = train(config_for("cpu"), data, minutes=1); history["val_loss"][-1] -> 4.2
             train(cfg, data, checkpoint="runs/x/checkpoint.pt", checkpoint_every=500); later, after a crash,
             the same with resume="runs/x/checkpoint.pt"
    """
    s = _new_state(config, data, model, impl, progress, config.minutes if minutes is None else minutes)
    s.checkpoint, s.checkpoint_every, s.label, s.position = checkpoint, checkpoint_every, label, position
    if resume is not None:
        restore_train_state(s, resume)
    elif s.world > 1:  # each process its own dropout stream (one process keeps the one it has, as before)
        torch.manual_seed(config.seed + s.rank)
    for _ in range(s.first_epoch):  # the shuffles of the epochs already trained: this epoch's order again
        s.rng.shuffle(s.batches)
    s.net = _wrapped(s.model, s.device, s.world, config.compile)
    s.session = time.time()
    s.start = s.session - s.seconds_before  # training time across sessions (snapshots and history count it)
    s.saved_at = s.step if resume is not None else -1
    done = bool(config.max_steps) and s.step >= config.max_steps  # a resumed run that had finished already
    s.speed_from, s.speed_unchecked = (s.step, s.target_tokens), s.progress
    s.model.train()
    for epoch in range(s.first_epoch, s.first_epoch if done else config.max_epochs):
        stop = _train_epoch(s, epoch)
        if s.rank == 0:
            s.history["val_loss"].append(validation_loss(s.model, data.val, config, impl))
            s.history["val_step"].append(s.step)
        if s.progress:
            print(f"{label}epoch {s.history['epochs']:.2f}: step {s.step}, "
                  f"val loss {s.history['val_loss'][-1]:.3f}, {time.time() - s.start:.0f} s", flush=True)
        if stop:
            break
    if checkpoint and s.saved_at != s.step:  # the epochs ran out: the next step would open the next epoch
        save_train_state(s, config.max_epochs, 0)
    if config.average_last and s.snapshots:  # the final weights are the last checkpoint of the average
        _end_on_average(s)
    s.model.eval()
    s.history.update(steps=s.step, seconds=time.time() - s.start, target_tokens=s.target_tokens,
                     mean_tokens_per_s=s.target_tokens / max(time.time() - s.start, 1e-9))
    return s.model, s.history


def _new_state(config: Config, data: PreparedData, model, impl, progress: bool, minutes: float) -> TrainState:
    """The state before the first step: the model (built unless given), its optimizer, the batches."""
    rank, world = distributed.rank_and_world()
    model = model if model is not None else build_model(config, data.tokenizer.vocab_size, impl)
    optimizer, scheduler = make_schedule(config, model, impl)
    amp, scaler = _autocast(next(model.parameters()).device, config.precision)
    lengths = [max(len(s), len(t) + 1) for s, t in data.train]  # +1: <bos>/<eos> on the target side
    batches = _use(impl, "batch_by_tokens")(lengths, config.max_tokens)
    per_step = world * config.accumulate          # batches per optimizer step, all processes together
    steps_per_epoch = len(batches) // per_step    # the last len(batches) % per_step of an epoch's order wait
    if steps_per_epoch == 0:                      # for the next epoch's shuffle (every rank takes as many)
        raise ValueError(f"{len(batches)} batches of at most {config.max_tokens} tokens cannot fill one step "
                         f"of {world} process(es) x accumulate {config.accumulate}: lower max_tokens or "
                         "accumulate")
    return TrainState(config, data, impl, model, optimizer, scheduler, amp, scaler, batches, per_step,
                      steps_per_epoch, rank, world, minutes, progress and rank == 0,
                      rng=random.Random(config.seed),
                      next_snapshot=60 * config.snapshot_minutes)


def _wrapped(model, device: torch.device, world: int, compile: bool):
    """What forward runs: the model, under DistributedDataParallel with several processes, compiled if asked
    (the weights stay the model's)."""
    net = model
    if world > 1:  # the hooks that average gradients over the processes during backward
        ddp = torch.nn.parallel.DistributedDataParallel
        # the buffers (the sinusoid table) are the same everywhere: not sent again at every forward
        no_buffers = ({"forward_sync_buffers": False}
                      if "forward_sync_buffers" in inspect.signature(ddp).parameters
                      else {"broadcast_buffers": False})  # the name before PyTorch 2.13
        net = ddp(model, device_ids=[device.index] if device.type == "cuda" else None, **no_buffers)
    if compile:  # PyTorch's compiler over whatever module forward runs (DDP's included)
        net = torch.compile(net)
    return net


def _train_epoch(s: TrainState, epoch: int) -> bool:
    """The steps of one epoch (from where a resumed run stopped); True when the run stops (time or steps)."""
    s.rng.shuffle(s.batches)  # similar lengths within a batch, random order between batches
    begin = s.first_index if epoch == s.first_epoch else 0
    bar = tqdm(range(begin, s.steps_per_epoch), desc=f"{s.label}epoch {epoch + 1}", disable=not s.progress,
               leave=s.position is None, mininterval=2.0, position=s.position)
    stop = False
    for i in bar:
        stop = _train_step(s, bar, epoch, i)
        if stop:
            s.history["epochs"] = epoch + (i + 1) / s.steps_per_epoch
            break
    else:
        s.history["epochs"] = epoch + 1.0
    bar.close()
    return stop


def _train_step(s: TrainState, bar, epoch: int, i: int) -> bool:
    """Step `i` of the epoch's order, its history, snapshot and checkpoint; True when the run stops."""
    t0 = time.time()
    group = s.batches[i * s.per_step:(i + 1) * s.per_step]  # this step's batches, all processes together
    step_tokens = sum(_target_tokens(s.data.train, idx) for idx in group)
    loss, loss_sum, lr = _optimizer_step(s, group, step_tokens)
    s.step += 1
    s.target_tokens += step_tokens
    out_of_time = time.time() - s.session > 60 * s.minutes
    if s.world > 1:  # the whole step's loss, and one decision to stop for all processes
        loss_sum, late = distributed.all_sum([loss_sum, float(out_of_time)], s.device)
        out_of_time = late > 0
    s.history["step_loss"].append(loss.item() if s.per_step == 1 else loss_sum / step_tokens)
    s.history["lr"].append(lr)
    s.history["tokens_per_s"].append(step_tokens / max(time.time() - t0, 1e-9))
    elapsed = time.time() - s.start
    bar.set_postfix(loss=f"{s.history['step_loss'][-1]:.3f}", lr=f"{lr:.2e}",
                    tok_s=f"{s.target_tokens / elapsed:.0f}", refresh=False)
    _check_speed(s)
    if s.config.average_last and (s.step % s.config.snapshot_steps == 0 if s.config.snapshot_steps
                                  else elapsed >= s.next_snapshot):
        s.snapshots = (s.snapshots + [_cpu_state(s.model)])[-s.config.average_last:]
        s.next_snapshot += 60 * s.config.snapshot_minutes
    stop = out_of_time or s.step == s.config.max_steps
    if s.checkpoint and (stop or (s.checkpoint_every and s.step % s.checkpoint_every == 0)):
        save_train_state(s, epoch, i + 1)
    return stop


def _optimizer_step(s: TrainState, group: list, step_tokens: int):
    """One optimizer step over `group`'s batches: this process's share (distributed.rank_share), each
    micro-batch's loss weighted by its share of the step's target tokens, so that the gradient is that of
    one batch of their union. Returns (the last micro-batch's loss, this process's summed loss, the rate)."""
    make_batch, loss_fn = _use(s.impl, "make_batch"), _use(s.impl, "label_smoothed_loss")
    s.optimizer.zero_grad(set_to_none=True)
    mine = distributed.rank_share(group, s.rank, s.world)
    loss_sum = 0.0  # sum over this process's target tokens of the loss
    for k, idx in enumerate(mine):
        batch = make_batch([s.data.train[j][0] for j in idx], [s.data.train[j][1] for j in idx]).to(s.device)
        last = k == len(mine) - 1  # DDP averages the gradients after the last micro-batch only
        with nullcontext() if last or s.world == 1 else s.net.no_sync():
            with s.amp:  # under bf16/fp16 autocast, the loss on float32 logits (any impl's loss)
                logits = s.net(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (B, Lt, V)
            loss = loss_fn(logits.float(), batch.tgt_out, s.config.label_smoothing)     # per target token
            if s.per_step > 1:  # this batch's share of the step's tokens; x world: DDP divides by world
                weighted = loss * (_target_tokens(s.data.train, idx) * s.world / step_tokens)
            else:
                weighted = loss
            if s.scaler is not None:  # fp16: scale the loss so small gradients do not underflow
                s.scaler.scale(weighted).backward()
            else:
                weighted.backward()
        loss_sum += loss.item() * _target_tokens(s.data.train, idx)
    if s.scaler is not None:
        s.scaler.unscale_(s.optimizer)
    if s.config.clip_norm:
        torch.nn.utils.clip_grad_norm_(s.model.parameters(), s.config.clip_norm)
    lr = s.optimizer.param_groups[0]["lr"]
    if s.scaler is not None:
        s.scaler.step(s.optimizer)
        s.scaler.update()
    else:
        s.optimizer.step()
    s.scheduler.step()
    return loss, loss_sum, lr


def _check_speed(s: TrainState) -> None:
    """Once, after the warm-up of the first steps: a note when this machine is far slower than the records."""
    (first_step, first_tokens), session = s.speed_from, s.session
    if not s.speed_unchecked:
        return
    if s.step - first_step >= SPEED_CHECK[0] and time.time() - session >= SPEED_CHECK[1]:
        s.speed_unchecked = False
        speed = (s.target_tokens - first_tokens) / (time.time() - session)
        note = slow_machine_note(s.config, speed, s.minutes)
        if note and s.progress:
            tqdm.write(note)
            s.history["slow_machine"] = note


def _end_on_average(s: TrainState) -> None:
    """End on the average of the snapshots and the last weights when it validates better, else on the last
    weights; both kept aside in the history (to compare, lesson 15), neither saved in checkpoints."""
    config, history = s.config, s.history
    last = _cpu_state(s.model)
    just_taken = config.snapshot_steps and s.step % config.snapshot_steps == 0  # the last snapshot IS `last`
    states = (s.snapshots + ([] if just_taken else [last]))[-config.average_last:]
    averaged = average_states(states)
    s.model.load_state_dict(averaged)
    history.update(last_state=last, averaged_state=averaged, averaged=len(states),
                   val_loss_averaged=validation_loss(s.model, s.data.val, config, s.impl))
    # the average replaces the last weights only when it validates better (a short run's snapshots may be
    # of a model still far from its end: their mean is then worse than where it got to)
    last_loss = history["val_loss"][-1] if history["val_loss"] else None  # after the last step (rank 0)
    history["kept"] = "average" if last_loss is None or history["val_loss_averaged"] < last_loss else "last"
    if history["kept"] == "last":
        s.model.load_state_dict(last)
    if s.progress:
        print(f"{s.label}averaged the last {len(states)} snapshots: "
              f"val loss {history['val_loss_averaged']:.3f} against "
              + (f"{last_loss:.3f}" if last_loss is not None else "none measured")
              + " for the last weights: kept "
              + ("the average" if history["kept"] == "average" else "the last weights (the average validates "
                                                                     "worse)"), flush=True)


def _speed_fields(config: Config) -> dict:
    """The Config fields that set how many target tokens a second training makes (not those that stop,
    snapshot or decode)."""
    ignore = {"seed", "minutes", "max_steps", "max_epochs", "average_last", "snapshot_minutes",
              "snapshot_steps", "beam_size", "alpha", "max_output_ratio", "max_output_extra",
              "eval_batch_tokens"}
    return {k: v for k, v in dataclasses.asdict(config).items() if k not in ignore}


SLOW_FRACTION = 0.5  # below half the recorded runs' tokens per second, a run is told that it is far slower
SPEED_CHECK = (50, 30.0)  # the speed is measured once, after this many steps and seconds of training


def slow_machine_note(config: Config, tokens_per_s: float, minutes: float) -> str | None:
    """What a run of the recorded CPU model (RECORDED_CPU) on a machine far slower than the recording one
    means: None when `config` is not that model or when this machine makes at least SLOW_FRACTION of the
    recorded target tokens per second. BLEU follows the steps trained, so the note says how many `minutes`
    make here, what the recorded runs reached, and how long the same steps take here.
    Example: slow_machine_note(config_for("cpu"), 1000, 15)
             -> "this machine trains at 1,000 target tokens/s, 31% ..." """
    if _speed_fields(config) != _speed_fields(config_for("cpu")):
        return None
    r = RECORDED_CPU
    recorded = sum(r["tokens_per_s"]) / len(r["tokens_per_s"])
    share = tokens_per_s / recorded
    if share >= SLOW_FRACTION:
        return None
    steps = sum(r["steps"]) / len(r["steps"]) * share * minutes / r["minutes"]
    fp32 = resolved_precision(torch.device("cpu"), config.precision) != "bf16"
    return (f"this machine trains at {tokens_per_s:,.0f} target tokens/s, {share:.0%} of the "
            f"{recorded:,.0f} of the recorded runs of this model on {r['cores']} CPU cores "
            "(benchmarks/translate_cpu.md)"
            + (" (they had bf16 units; float32 here)" if fp32 else "")
            + f": {plural(minutes, 'minute')} here make about {steps:,.0f} steps, where {r['minutes']} "
              f"minutes made {r['steps'][0]:,} and {r['steps'][1]:,} there. BLEU follows the steps: expect "
              f"less than their {r['greedy_bleu'][0]} and {r['greedy_bleu'][1]} greedy (the same model "
              f"stopped at {r['fewer_steps']:,} steps gave {r['fewer_steps_bleu']}, and fewer steps give "
              f"less). Their steps take about {plural(round(r['minutes'] / share), 'minute')} here "
              "(TRAIN_MINUTES in lesson 14, --minutes on the command line); other work on this machine "
              "slows it too")

