"""Training past one process (issue 19), on a CPU: two gloo processes started as torchrun would start them,
gradient accumulation, and runs that stop and resume. Tiny model, synthetic corpus.

What "the same update" means here: the loss is per target token, so one step over several batches must
weight each batch's loss by its share of the step's target tokens. The tests compare the gradients, not
only the weights: Adam's first step is lr * sign(gradient), blind to a wrongly weighted loss."""
import dataclasses
import os
import random
import socket
import types

import pytest
import torch
import torch.multiprocessing as mp

import solutions
from solutions import distributed
from solutions.data import load_synthetic
from solutions.translate import Config, build_model, make_schedule, prepare_data, train

# no dropout and no clipping: one process on the union of two batches computes the same numbers. The paper's
# warmup of 4000 steps makes the first step's rate 1e-3 / 4000 = 2.5e-7: Adam moves every weight by about
# lr * sign(gradient) at its first step, and a gradient that is 0 in exact arithmetic (the key bias: it adds
# the same number to every score of a row, which the softmax ignores) has a sign made of rounding noise.
EXACT = Config(d_model=32, n_heads=4, n_layers=1, d_ff=64, dropout=0.0, attention_dropout=0.0, clip_norm=0.0,
               bpe_merges=60, max_tokens=300, lr_peak=1e-3, warmup_steps=4000, max_epochs=50, minutes=5,
               precision="fp32")  # float32 everywhere: "auto" is bf16 on a CPU with bf16 units


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data():
    return prepare_data(EXACT, load_synthetic(150, 10, 10, seed=0), progress=False)


def first_batches(config, data, n):
    """The first n batches of epoch 1, as train() orders them: batch_by_tokens, then one shuffle by
    Random(seed)."""
    lengths = [max(len(s), len(t) + 1) for s, t in data.train]
    batches = solutions.batch_by_tokens(lengths, config.max_tokens)
    random.Random(config.seed).shuffle(batches)
    return batches[:n]


def one_step_on_union(config, data, batches):
    """The reference: one process, one batch made of all `batches`, one optimizer step."""
    union = [j for idx in batches for j in idx]
    model = build_model(config, data.tokenizer.vocab_size)
    optimizer, scheduler = make_schedule(config, model)
    batch = solutions.make_batch([data.train[j][0] for j in union], [data.train[j][1] for j in union])
    loss = solutions.label_smoothed_loss(model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask),
                                         batch.tgt_out, config.label_smoothing)
    loss.backward()
    optimizer.step()
    scheduler.step()
    return model, loss.item()


def assert_same(weights: dict, grads: dict, reference):
    """Weights and the last step's gradients equal to 1e-6, each named when it differs."""
    for name, p in reference.named_parameters():
        w, g = weights[name].detach(), grads[name]
        assert torch.allclose(w, p.detach(), atol=1e-6,
                              rtol=0), f"weights {name}: max diff {(w - p).abs().max()}"
        assert torch.allclose(g, p.grad, atol=1e-6,
                              rtol=0), f"gradient {name}: max diff {(g - p.grad).abs().max()}"


def parameters_and_grads(model) -> tuple[dict, dict]:
    return dict(model.named_parameters()), {name: p.grad for name, p in model.named_parameters()}


def test_accumulation_equals_one_batch_of_the_union(data):
    config = dataclasses.replace(EXACT, accumulate=3, max_steps=1)
    model, history = train(config, data, progress=False)
    reference, loss = one_step_on_union(config, data, first_batches(config, data, 3))
    assert_same(*parameters_and_grads(model), reference)
    assert history["step_loss"][0] == pytest.approx(loss, abs=1e-6)  # the union's loss per target token
    # the schedule counts optimizer steps: 2 steps of 3 micro-batches run at noam_lr(1) and noam_lr(2)
    _, history = train(dataclasses.replace(config, max_steps=2), data, progress=False)
    expected = [solutions.noam_lr(k, config.d_model, config.warmup_steps, config.noam_factor) for k in (1, 2)]
    assert history["steps"] == 2 and history["lr"] == pytest.approx(expected)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LearnersTransformer(solutions.Transformer):
    """Stands for a learner's Transformer (another class, the same contract)."""


def _worker(rank, world, port, data, out):
    """One process of the group, joined as under torchrun: its rank and the rendezvous in the environment."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    got_rank, got_world, device = distributed.init_from_env("cpu")
    assert (got_rank, got_world, device) == (rank, world, "cpu")
    try:
        model, history = train(dataclasses.replace(EXACT, max_steps=1), data, progress=False)
        weights, grads = parameters_and_grads(model)
        result = {"state": {k: v.detach() for k, v in weights.items()}, "grads": grads, "history": history}
        # a short run that learns: dropout and clipping on, as in the lesson
        learn = dataclasses.replace(EXACT, dropout=0.1, clip_norm=1.0, lr_peak=3e-3, warmup_steps=10,
                                    max_steps=60)
        _, result["learn"] = train(learn, data, progress=False)
        # a learner's own classes (lesson 14's impl=...): DDP wraps whatever module build_model returns
        mine, _ = train(dataclasses.replace(EXACT, max_steps=2), data, progress=False,
                        impl=types.SimpleNamespace(Transformer=LearnersTransformer))
        result["learner"] = type(mine).__name__
        torch.save(result, f"{out}.{rank}")
    finally:
        distributed.close()


def test_two_gloo_processes_equal_one_process_on_the_union(data, tmp_path):
    out = tmp_path / "result"
    mp.spawn(_worker, args=(2, _free_port(), data, str(out)), nprocs=2, join=True)
    rank0, rank1 = (torch.load(f"{out}.{r}", weights_only=True) for r in (0, 1))
    # step 1: rank 0 took batch 0 of the epoch's order, rank 1 batch 1; DDP averaged their gradients
    reference, loss = one_step_on_union(EXACT, data, first_batches(EXACT, data, 2))
    assert_same(rank0["state"], rank0["grads"], reference)
    assert_same(rank1["state"], rank1["grads"], reference)  # one model: every process holds the same weights
    assert rank0["history"]["step_loss"][0] == pytest.approx(loss, abs=1e-6)
    # only rank 0 evaluates; both see the whole step's loss
    assert len(rank0["history"]["val_loss"]) == 1 and rank1["history"]["val_loss"] == []
    assert rank0["learner"] == rank1["learner"] == "LearnersTransformer"
    learn = rank0["learn"]
    assert learn["steps"] == 60 and learn["step_loss"] == rank1["learn"]["step_loss"]
    first, last = sum(learn["step_loss"][:5]) / 5, sum(learn["step_loss"][-5:]) / 5
    assert last < first - 1.0, (first, last)  # it learns: measured 5.7 (about log 168, the vocabulary) -> 4.2


def test_rank_share_splits_each_step():
    step = [[0], [1], [2], [3]]
    assert [distributed.rank_share(step, r, 2) for r in (0, 1)] == [[[0], [1]], [[2], [3]]]
    assert distributed.rank_and_world() == (0, 1) and distributed.init_from_env("cpu") == (0, 1, "cpu")


def test_a_resumed_run_equals_one_never_stopped(data, tmp_path):
    """Stopped at step s = 5 (mid-epoch: 17 batches, 2 a step, make 8 steps an epoch) and resumed to step 2s =
    10, across the end of epoch 1;
    dropout on, so the random states must come back too."""
    config = dataclasses.replace(EXACT, dropout=0.1, accumulate=2, clip_norm=1.0, warmup_steps=10)
    whole_model, whole = train(dataclasses.replace(config, max_steps=10), data, progress=False)
    path = tmp_path / "checkpoint.pt"
    _, first = train(dataclasses.replace(config, max_steps=5), data, progress=False, checkpoint=path,
                     checkpoint_every=3)
    saved = torch.load(path, weights_only=True)
    assert saved["step"] == 5 and saved["position"]["epoch"] == 0 and saved["position"]["index"] == 5
    model, resumed = train(dataclasses.replace(config, max_steps=10), data, progress=False, checkpoint=path,
                           checkpoint_every=3, resume=path)
    assert resumed["steps"] == 10 and whole["val_step"] == resumed["val_step"] == [8, 10]
    assert resumed["step_loss"] == pytest.approx(whole["step_loss"], abs=1e-6)
    assert resumed["val_loss"] == pytest.approx(whole["val_loss"], abs=1e-6)
    for (name, a), b in zip(whole_model.state_dict().items(), model.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6), name
    # the checkpoint loads for translating, like save_checkpoint's files
    from solutions.translate import load_checkpoint
    again, tokenizer, _ = load_checkpoint(path)
    assert tokenizer.itos == data.tokenizer.itos
    with pytest.raises(ValueError, match="d_model 32"):  # another model cannot continue this one
        train(dataclasses.replace(config, d_model=64, max_steps=10), data, progress=False, resume=path)


def test_paper_sizes_on_the_command_line():
    from solutions.translate import build_parser, config_from_args

    def config(*flags, world=1):
        return config_from_args(build_parser().parse_args(["train", *flags]), world=world)

    base = config("--size", "base", "--accumulate", "2", world=4)
    # the paper's 25,000 tokens a step, shared: 4 processes x 2 micro-batches of 3,125
    assert (base.d_model, base.d_ff, base.n_heads, base.n_layers, base.dropout) == (512, 2048, 8, 6, 0.1)
    assert (base.warmup_steps, base.max_steps, base.max_tokens, base.accumulate) == (4000, 100000, 3125, 2)
    assert base.noam_factor == pytest.approx(1.0)  # equation 3 as printed: lrate = d_model^-0.5 * min(...)
    big = config("--size", "big", "--steps", "10")
    assert (big.d_model, big.d_ff, big.n_heads, big.dropout, big.max_steps, big.max_tokens) == \
        (1024, 4096, 16, 0.3, 10, 25000)
    assert big.noam_factor == pytest.approx(1.0)
    assert config("--steps", "7").max_steps == 7 and config().d_model == 256  # without --size: as before
    # against the base model, the big one departs where the paper's big model does, and says so
    from solutions.translate import departures, paper_config
    fp32 = {"precision": "fp32"}  # "auto" adds a "number format" row on a CPU with bf16 units
    rows = {what: why for what, _, _, why in departures(paper_config("cpu", "big", **fp32), "wmt14-en-de")}
    assert list(rows) == ["model size", "warmup and peak rate", "dropout, label smoothing", "training time",
                          "BLEU"]
    assert "big model" in rows["model size"] and "big model" in rows["dropout, label smoothing"]
    assert [what for what, *_ in departures(paper_config("cpu", **fp32), "wmt14")] == ["data",
                                                                                       "training time",
                                                                                       "BLEU"]


def test_torchrun_trains_checkpoints_and_resumes(tmp_path):
    """The command itself under torchrun: 2 gloo processes, stopped at step 4 by --steps, resumed to step
    6."""
    import json
    import subprocess
    import sys

    from .conftest import ROOT

    def run(*flags):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
               str(_free_port()), "-m", "solutions.translate", "train", "--data", "synthetic",
               "--synthetic-train",
               "300", "--d-model", "32", "--n-heads", "2", "--n-layers", "1", "--d-ff", "64", "--bpe-merges",
               "100",
               "--max-tokens", "300", "--max-test", "5", "--beam-size", "2", "--device", "cpu", "--threads",
               "1", "--quiet", "--out", str(tmp_path / "run"), *flags]
        result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
        return result.stdout, json.loads((tmp_path / "run" / "results.json").read_text())

    out, results = run("--steps", "4", "--checkpoint-every", "2")
    assert results["processes"] == 2 and results["steps"] == 4 and out.count("test BLEU") == 1  # rank 0 alone
    assert torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["step"] == 4
    out, results = run("--steps", "6", "--resume", str(tmp_path / "run" / "checkpoint.pt"))
    saved = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)  # written again when it stopped
    assert results["steps"] == 6 and saved["step"] == 6 and len(saved["history"]["step_loss"]) == 6


def test_the_time_limit_writes_a_checkpoint(data, tmp_path):
    """A budget of 0 minutes stops after the first step; with a checkpoint file, it is written then, even
    without checkpoint_every (a Colab session that ends keeps its work)."""
    path = tmp_path / "checkpoint.pt"
    _, history = train(EXACT, data, minutes=0, progress=False, checkpoint=path)
    saved = torch.load(path, weights_only=True)
    assert history["steps"] == saved["step"] == 1 and saved["history"]["step_loss"] == history["step_loss"]
