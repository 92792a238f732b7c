"""Files a run writes and reads: a model (save_checkpoint, load_checkpoint), a resumable training state
(save_train_state, restore_train_state), and the paper's checkpoint averaging."""
from __future__ import annotations

import dataclasses
import pathlib
import tempfile
import time
import warnings

import torch

import solutions
from solutions.cli import UsageError
from solutions.tokenization import BPETokenizer
from solutions.translate.config import Config
from solutions.translate.implementation import _use
from solutions.translate.model import build_model

#: Config fields a resumed run may change: they stop or score the run, but do not change its steps
RESUME_MAY_CHANGE = {"compile", "minutes", "max_steps", "max_epochs", "device", "eval_batch_tokens",
                     "beam_size", "alpha", "max_output_ratio", "max_output_extra"}


def check_resume(config: Config, state: dict) -> None:
    """Raise UsageError when `config` changes a setting of the checkpoint `state` that alters the steps (only
    RESUME_MAY_CHANGE may change). Example: d_model 64 for a checkpoint of d_model 32 -> "cannot resume: the
    checkpoint was trained with other settings: d_model 32 (now 64); ..." """
    saved = state["config"]
    changed = sorted(k for k, v in dataclasses.asdict(config).items()
                     if k not in RESUME_MAY_CHANGE and k in saved and saved[k] != v)
    if changed:
        raise UsageError("cannot resume: the checkpoint was trained with other settings: "
                         + ", ".join(f"{k} {saved[k]!r} (now {getattr(config, k)!r})" for k in changed)
                         + "; give the checkpoint's settings (a resumed run may change only "
                         + ", ".join(sorted(RESUME_MAY_CHANGE - {"device"})) + ")")



def _cpu_state(model) -> dict:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def average_checkpoints(paths) -> dict:
    """The paper's checkpoint averaging (section 6.1) over files: the element-wise mean of the model weights
    saved in `paths` (save_checkpoint's files, or plain state dicts from torch.save). Example:
    model.load_state_dict(average_checkpoints([f"runs/x/step{k}.pt" for k in (600, 700, 800, 900, 1000)]))"""
    if not paths:
        raise ValueError("average_checkpoints needs at least one path")
    states = []
    for path in paths:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        states.append(saved["model"] if isinstance(saved, dict) and "model" in saved else saved)
    return average_states(states)


def average_states(states: list[dict]) -> dict:
    """The element-wise mean of state dicts (the paper's checkpoint averaging); integer tensors keep the last.
    Example: average_states([{"w": tensor([0., 2.])}, {"w": tensor([2., 4.])}]) -> {"w": tensor([1., 3.])}"""
    out = {}
    for key, last in states[-1].items():
        if last.is_floating_point():
            out[key] = torch.stack([s[key].float() for s in states]).mean(0).to(last.dtype)
        else:
            out[key] = last
    return out


def _tokenizer_text(tokenizer) -> str:
    """What tokenizer.save writes (the contract's way to store any BPETokenizer, the learner's included)."""
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "tokenizer.json"
        tokenizer.save(path)
        return path.read_text(encoding="utf-8")


def _tokenizer_from_text(text: str, impl=solutions):
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "tokenizer.json"
        path.write_text(text, encoding="utf-8")
        return _use(impl, "BPETokenizer").load(path)


class CheckpointError(UsageError):
    """A file that is not a checkpoint of this course (or not the kind asked for), said in one line."""


#: What each kind of file holds: save_checkpoint's model.pt, and train's checkpoint.pt (which holds a
#: model.pt's too)
CHECKPOINT_KEYS = {"model": ("config", "tokenizer", "model"),
                   "resume": ("config", "tokenizer", "model", "optimizer", "scheduler", "position", "step",
                              "rng")}


def read_checkpoint(path, kind: str = "model", map_location="cpu", label: str = "") -> dict:
    """torch.load(path, weights_only=True) (tensors and plain containers only: a file of unknown origin runs
    no code), checked to be a checkpoint of this course of `kind`: "model" (save_checkpoint's model.pt, or a
    checkpoint.pt) or "resume" (train's checkpoint.pt). Anything else raises CheckpointError saying what the
    file
    is and what to give instead. Example: read_checkpoint("runs/x/model.pt", "resume") -> CheckpointError("...
    a model file (save_checkpoint's model.pt): it holds no optimizer or data position to resume from; ...")"""
    import pickle
    import zipfile

    written = ("give a model.pt or a checkpoint.pt that `python -m solutions.translate train` wrote"
               if kind == "model" else "give the checkpoint.pt that `train --checkpoint-every N` wrote")
    path = pathlib.Path(path)
    name = f"{label} {path}" if label else str(path)
    corrupt = (f"{name} is corrupt or not a file that torch.save wrote (nothing in it could be read as "
               f"tensors and plain data); {written}")
    if not path.exists():
        raise CheckpointError(f"{name}: no such file; {written}")
    if path.is_dir():
        raise CheckpointError(f"{name} is a folder; give the file in it (model.pt, or checkpoint.pt to "
                              "resume)")
    try:
        # PyTorch's own warnings about the pickle protocol: the error says enough
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            saved = torch.load(path, map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, zipfile.BadZipFile, EOFError, UnicodeDecodeError, ValueError) as e:
        if "Unsupported global" in str(e):
            raise CheckpointError(f"{name} holds Python objects beyond tensors and plain data (not loaded: "
                                  f"loading them could run its code); it is not a checkpoint of this course; "
                                  f"{written}") from None
        raise CheckpointError(corrupt) from None
    except RuntimeError as e:  # PyTorch's reader: a zip archive cut short or damaged
        text = str(e)
        what = ("truncated or damaged (PyTorch could not read its archive)" if "zip" in text.lower()
                or "stream" in text.lower() else f"unreadable ({text.strip().splitlines()[0][:80]})")
        raise CheckpointError(f"{name} is {what}: copy it again, or {written}") from None
    except MemoryError:
        raise
    except Exception:  # torch's unpickler fed bytes it did not write: an IndexError, a KeyError, ...
        raise CheckpointError(corrupt) from None
    if not isinstance(saved, dict) or not all(k in saved for k in CHECKPOINT_KEYS["model"]):
        keys = sorted(map(str, saved))[:6] if isinstance(saved, dict) else type(saved).__name__
        raise CheckpointError(f"{name} is a PyTorch file but not a checkpoint of this course (it holds "
                              f"{keys}, not config, tokenizer and model); {written}")
    missing = [k for k in CHECKPOINT_KEYS[kind] if k not in saved]
    if missing:
        raise CheckpointError(f"{name} is a model file (save_checkpoint's model.pt): it holds no "
                              f"{', '.join(missing[:3])} to resume from; {written} (OUT/checkpoint.pt)")
    return saved


def save_checkpoint(path, model, tokenizer: BPETokenizer, config: Config,
                    history: dict | None = None) -> None:
    """One file with the config, the tokenizer (what its save() writes) and the weights."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"config": dataclasses.asdict(config),
                "tokenizer": {"saved": _tokenizer_text(tokenizer)},
                "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
                "history": {k: v for k, v in (history or {}).items()
                            if k not in ("last_state", "averaged_state")}},
               path)


def load_checkpoint(path, device: str = "cpu", impl=solutions):
    """(model in eval mode on `device`, tokenizer, config) from save_checkpoint's file, both built with impl's
    classes; a GPU checkpoint loads on a CPU.
    Example: model, tokenizer, config = load_checkpoint("runs/x/model.pt")"""
    return _from_saved(read_checkpoint(path, "model", map_location=device), device, impl)


def _from_saved(saved: dict, device: str = "cpu", impl=solutions):
    """load_checkpoint's (model, tokenizer, config) from what read_checkpoint gave."""
    # a checkpoint from before a field was added loads too
    known = {f.name for f in dataclasses.fields(Config)}
    config = dataclasses.replace(Config(**{k: v for k, v in saved["config"].items() if k in known}),
                                 device=str(device))
    if "saved" in saved["tokenizer"]:
        tokenizer = _tokenizer_from_text(saved["tokenizer"]["saved"], impl)
    else:  # the older format: the reference tokenizer's merges and vocabulary
        tokenizer = BPETokenizer()
        tokenizer.merges = [tuple(m) for m in saved["tokenizer"]["merges"]]
        tokenizer.itos = list(saved["tokenizer"]["itos"])
        tokenizer.stoi = {s: i for i, s in enumerate(tokenizer.itos)}
    model = build_model(config, tokenizer.vocab_size, impl)
    model.load_state_dict(saved["model"])
    return model.eval(), tokenizer, config



def save_train_state(s, epoch: int, index: int) -> None:
    """The checkpoint of train's state `s` (a loop.TrainState) after its step; the next step is `index` of
    `epoch`'s order. Written by rank 0, whole then renamed (a crash leaves the last one); every process's
    random state is gathered first (a collective, so every rank calls this)."""
    from solutions import distributed

    rngs = distributed.rng_states(s.device)  # every process's: a collective, so every rank is here
    s.saved_at = s.step
    if s.rank != 0:
        return
    path = pathlib.Path(s.checkpoint)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")  # written whole, then renamed: a crash leaves the last one
    torch.save({"config": dataclasses.asdict(s.config),
                "tokenizer": {"saved": _tokenizer_text(s.data.tokenizer)},
                "model": {k: v.detach() for k, v in s.model.state_dict().items()},
                "history": s.history, "optimizer": s.optimizer.state_dict(),
                "scheduler": s.scheduler.state_dict(),
                "scaler": s.scaler.state_dict() if s.scaler is not None else None, "rng": rngs,
                "position": {"epoch": epoch, "index": index, "n_batches": len(s.batches),
                             "per_step": s.per_step},
                "step": s.step, "target_tokens": s.target_tokens, "seconds": time.time() - s.start,
                "snapshots": s.snapshots, "next_snapshot": s.next_snapshot}, tmp)
    tmp.replace(path)


def restore_train_state(s, resume) -> None:
    """Put train's state `s` (a loop.TrainState) where the checkpoint `resume` (a file, or what torch.load
    gave) left it: weights, optimizer, schedule, random states, history, snapshots, step and data position.
    Raises UsageError when the checkpoint's settings or batches differ from this run's."""
    from solutions import distributed

    state = resume if isinstance(resume, dict) else read_checkpoint(resume, "resume", map_location=s.device)
    check_resume(s.config, state)
    where = state["position"]
    if (where["n_batches"], where["per_step"]) != (len(s.batches), s.per_step):
        raise UsageError(f"cannot resume: the checkpoint's epochs have {where['n_batches']} batches taken "
                         f"{where['per_step']} per step, this run's {len(s.batches)} taken {s.per_step} per "
                         "step (other data, or another number of processes x accumulate)")
    s.model.load_state_dict(state["model"])
    s.optimizer.load_state_dict(state["optimizer"])
    s.scheduler.load_state_dict(state["scheduler"])
    if s.scaler is not None and state.get("scaler"):
        s.scaler.load_state_dict(state["scaler"])
    distributed.set_rng_state(state["rng"], s.device)
    s.history = {k: list(v) if isinstance(v, list) else v for k, v in state["history"].items()}
    s.snapshots, s.next_snapshot = list(state["snapshots"]), state["next_snapshot"]
    s.step, s.target_tokens = state["step"], state["target_tokens"]
    s.first_epoch, s.first_index, s.seconds_before = where["epoch"], where["index"], state["seconds"]
