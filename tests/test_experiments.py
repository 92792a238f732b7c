"""Issue 18: the pieces of lesson 15 (the paper's Table 3 at small scale). Learned positions are checked
against PyTorch's own nn.Embedding, checkpoint averaging against the mean of the state dicts worked out here
by hand, the Config knobs by what the model and the optimizer become, and the command on a tiny synthetic
run."""
import dataclasses
import json
import math
import pathlib

import pytest
import torch
from torch import nn

from solutions import experiments
from solutions.data import load_data
from solutions.positional_encoding import LearnedPositionalEncoding, PositionalEncoding
from solutions.translate import (
    Config,
    average_checkpoints,
    average_states,
    build_model,
    make_schedule,
    prepare_data,
    save_checkpoint,
    train,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = dict(d_model=32, n_heads=4, n_layers=1, d_ff=64, bpe_merges=200, max_tokens=400, warmup_steps=5)


# ------------------------------------------------------------------------------------ learned positions
def test_learned_positions_equal_an_nn_embedding_of_the_positions_with_the_same_weights():
    torch.manual_seed(0)
    ours = LearnedPositionalEncoding(8, max_len=12, dropout=0.0)
    theirs = nn.Embedding(12, 8)
    theirs.weight.data.copy_(ours.embedding.weight.data)
    x = torch.randn(3, 5, 8)                                            # (B, L, d_model)
    expected = x + theirs(torch.arange(5)).unsqueeze(0)                 # every sentence gets the same 5 rows
    assert torch.allclose(ours(x), expected)
    # the same interface as the sinusoidal module: (d_model, max_len, dropout), a too-long sequence is a clear
    # error
    assert PositionalEncoding(8, 12, 0.0)(x).shape == ours(x).shape
    with pytest.raises(ValueError, match="longer than max_len=12"):
        ours(torch.zeros(1, 13, 8))


def test_learned_positions_are_trained_and_move_with_the_model():
    pe = LearnedPositionalEncoding(4, max_len=6, dropout=0.0)
    # a parameter, unlike the sinusoids' buffer
    assert [n for n, _ in pe.named_parameters()] == ["embedding.weight"]
    pe(torch.zeros(2, 3, 4)).sum().backward()
    # d(sum)/d(row p) = 2 (two sentences) for p < 3
    grad = pe.embedding.weight.grad
    assert torch.equal(grad[:3], torch.full((3, 4), 2.0)) and torch.equal(grad[3:], torch.zeros(3, 4))


# ------------------------------------------------------------------------------------ checkpoint averaging
def test_average_checkpoints_is_the_mean_of_the_state_dicts(tmp_path):
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)) for _ in range(3)]
    for i, m in enumerate(models):
        m[1].num_batches_tracked.fill_(10 * (i + 1))
    paths = []
    for i, m in enumerate(models):
        path = tmp_path / f"ck{i}.pt"
        # one file as save_checkpoint's {"model": ...} layout, the others as plain state dicts
        torch.save({"model": m.state_dict()} if i == 0 else m.state_dict(), path)
        paths.append(path)
    avg = average_checkpoints(paths)
    # by hand: (w0 + w1 + w2) / 3 for each float tensor
    w = [m[0].weight.detach() for m in models]
    assert torch.allclose(avg["0.weight"], (w[0] + w[1] + w[2]) / 3)
    b = [m[0].bias.detach() for m in models]
    assert torch.allclose(avg["0.bias"], (b[0] + b[1] + b[2]) / 3)
    assert avg["1.num_batches_tracked"].item() == 30  # an integer counter keeps the last value, not 20
    assert avg.keys() == models[0].state_dict().keys()
    with pytest.raises(ValueError, match="at least one"):
        average_checkpoints([])


def test_average_states_of_one_state_is_that_state():
    state = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(3)}
    assert torch.equal(average_states([state])["w"], state["w"])


# ------------------------------------------------------------------------------------ Config knobs
def test_build_model_honours_the_table_3_knobs():
    base = build_model(Config(**TINY), 50)
    assert base.generator.weight is base.tgt_embed.embedding.weight and isinstance(base.positional,
                                                                                   PositionalEncoding)
    untied = build_model(Config(**TINY, tie_embeddings=False), 50)
    assert untied.generator.weight is not untied.tgt_embed.embedding.weight
    learned = build_model(Config(**TINY, positional="learned"), 50)
    assert isinstance(learned.positional, LearnedPositionalEncoding)
    small_keys = build_model(Config(**TINY, d_k=2), 50)                 # h 4 x d_k 2: queries and keys of 8
    attn = small_keys.encoder.layers[0].self_attn
    assert attn.w_q.weight.shape == (8, 32) and attn.w_k.weight.shape == (8, 32) \
        and attn.w_v.weight.shape == (32, 32)
    src, tgt = torch.tensor([[5, 6, 7]]), torch.tensor([[1, 8]])
    for model in (untied, learned, small_keys):
        logits = model(src, tgt, torch.ones(1, 1, 1, 3, dtype=torch.bool),
                       torch.ones(1, 1, 2, 2, dtype=torch.bool))
        assert logits.shape == (1, 2, 50) and torch.isfinite(logits).all()
    with pytest.raises(ValueError, match="positional"):
        build_model(Config(**TINY, positional="rotary"), 50)


def test_constant_schedule_keeps_the_peak_rate_and_warmup_is_the_paper_s():
    model = nn.Linear(2, 2)
    optimizer, scheduler = make_schedule(Config(lr_schedule="constant", lr_peak=3e-4), model)
    rates = []
    for _ in range(5):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates == [3e-4] * 5
    config = Config(d_model=16, warmup_steps=4, lr_peak=1e-3)
    optimizer, scheduler = make_schedule(config, model)
    rates = []
    for _ in range(8):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    # the peak at step 4 = warmup_steps
    assert max(rates) == pytest.approx(1e-3) and rates.index(max(rates)) == 3
    with pytest.raises(ValueError, match="lr_schedule"):
        make_schedule(Config(lr_schedule="cosine"), model)


@pytest.fixture(scope="module")
def tiny_data():
    _, splits = load_data("synthetic", synthetic_sizes=(300, 40, 40))
    return prepare_data(Config(**TINY), splits, progress=False)


def test_step_snapshots_average_the_last_five(tiny_data, tmp_path):
    """snapshot_steps 2, 10 steps: snapshots after steps 2, 4, ..., 10; the last five (the final weights are
    the step-10 snapshot, counted once) are averaged. The same run without averaging ends on the same last
    weights."""
    config = Config(**TINY, max_steps=10, average_last=5, snapshot_steps=2, minutes=60)
    model, history = train(config, tiny_data, progress=False)
    assert history["steps"] == 10 and history["averaged"] == 5
    plain, _ = train(dataclasses.replace(config, average_last=0), tiny_data, progress=False)
    last, averaged = history["last_state"], history["averaged_state"]
    assert all(torch.equal(last[k], v) for k, v in plain.state_dict().items())  # the last weights, kept aside
    assert not torch.equal(averaged["generator.bias"], last["generator.bias"])  # the average differs
    kept = averaged if history["kept"] == "average" else last  # whichever validates better
    assert all(torch.equal(kept[k], v) for k, v in model.state_dict().items())
    save_checkpoint(tmp_path / "m.pt", model, tiny_data.tokenizer, config, history)
    saved = torch.load(tmp_path / "m.pt", weights_only=True)["history"]
    assert "last_state" not in saved and "averaged_state" not in saved and saved["kept"] == history["kept"]


# ------------------------------------------------------------------------------------ the command
def test_rows_and_groups():
    assert experiments.rows_for(["base", "D"]) == ["base", "D-drop0", "D-ls0"]
    assert experiments.rows_for(["all"]) == list(experiments.ROWS)
    with pytest.raises(ValueError, match="unknown row"):
        experiments.rows_for(["Z"])
    config = experiments.row_config("A-h1", seed=3, steps=100)
    assert (config.n_heads, config.d_model, config.max_steps, config.seed, config.snapshot_steps) == (1, 128,
                                                                                                      100, 3,
                                                                                                      2)
    for row in experiments.ROWS:  # every row is a Config that builds, and its paper row is known
        experiments.row_config(row)
        assert row in experiments.PAPER


def test_a_tiny_table_runs_and_is_written(tmp_path, capsys):
    tiny = json.dumps({k: v for k, v in TINY.items()})
    experiments.main(["run", "--rows", "base", "D-ls0", "--seeds", "0", "1", "--steps", "4", "--data",
                      "synthetic", "--out", str(tmp_path), "--max-test", "10", "--base", tiny])
    files = sorted(p.name for p in tmp_path.glob("*.json"))
    assert files == ["D-ls0.seed0.json", "D-ls0.seed1.json", "base.seed0.json", "base.seed1.json"]
    run = json.loads((tmp_path / "base.seed0.json").read_text())
    for key in ("config", "seed", "steps", "val_loss", "val_ppl", "bleu", "train_seconds", "bleu_averaged"):
        assert key in run, key
    assert run["steps"] == 4 and math.isclose(run["val_ppl"], math.exp(run["val_loss"]))
    assert "bleu_averaged" not in json.loads((tmp_path / "D-ls0.seed0.json").read_text())  # base only
    table, bars = capsys.readouterr()
    assert "| base |" in table and "| D-ls0 |" in table and " ± " in table
    # a progress bar inside each run
    assert "base seed 0: epoch 1" in bars and "D-ls0 seed 1: epoch 1" in bars
    assert "greedy decoding" in bars  # and the test set's decoding
    experiments.main(["run", "--rows", "base", "--seeds", "0", "--data", "synthetic", "--out", str(tmp_path)])
    assert "0 runs to do" in capsys.readouterr().out  # a run whose JSON exists is not run again
    (tmp_path / "base.seed0.json").unlink()
    experiments.main(["run", "--rows", "base", "--seeds", "0", "--steps", "2", "--data", "synthetic", "--out",
                      str(tmp_path), "--max-test", "4", "--base", tiny, "--quiet"])
    assert "epoch 1" not in "".join(capsys.readouterr())  # --quiet: no bars


def test_recorded_table_has_two_seeds_per_reported_row():
    runs = experiments.load_results(ROOT / "benchmarks" / "results" / "table3")
    if not runs:
        pytest.skip("no recorded runs")
    assert {r["steps"] for r in runs} == {runs[0]["steps"]}  # every run the same number of steps
    for s in experiments.summarize(runs):
        assert s["seeds"] == [0, 1], s["row"]


def test_table3_cpu_md_states_the_recorded_runs():
    """benchmarks/table3_cpu.md's table is markdown_table of the recorded runs, row for row, and its averaging
    sentence counts them: a rerun or a new row cannot leave the page behind."""
    runs = experiments.load_results(ROOT / "benchmarks" / "results" / "table3")
    if not runs:
        pytest.skip("no recorded runs")
    page = (ROOT / "benchmarks" / "table3_cpu.md").read_text()
    assert experiments.markdown_table(runs) in page
    changes = [r["val_ppl_averaged"] - r["val_ppl"] for r in runs]
    sentence = (f"Over all {len(runs)} runs (every row, both seeds), the average of the last 5 snapshots has "
                f"the lower validation perplexity in {sum(c < 0 for c in changes)}; the mean change is "
                f"{sum(changes) / len(changes):+.2f}.")
    assert sentence in page, sentence
