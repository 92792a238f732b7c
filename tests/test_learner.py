"""Lesson 14 with a learner's completed lessons: their code is collected (autograder.learner), and the final
lesson's code tokenizes, trains, decodes and scores with it. The lessons are solved by code written apart
from solutions/ (tests/submissions/independent.py), so a reference object slipping in is seen: every
object below must come from a lesson cell, and every name must be recorded as having run."""
import ast
import inspect

import nbformat
import pytest
import torch

import solutions
from autograder.learner import collect, contract_names, find_lessons
from solutions.data import load_synthetic
from solutions.translate import (
    Config,
    bleu_scores,
    build_model,
    decoding_args,
    load_checkpoint,
    prepare_data,
    save_checkpoint,
    train,
    translate_batch,
    validation_loss,
)
from tests.submissions import independent

from .conftest import ROOT

# a few seconds of training: the point is which code runs, not how well it translates
TINY = Config(d_model=32, n_heads=4, n_layers=1, d_ff=64, bpe_merges=120, max_tokens=500, lr_peak=2e-3,
              warmup_steps=20, max_epochs=2, minutes=2, eval_batch_tokens=2000)


@pytest.fixture(scope="module")
def lessons(tmp_path_factory):
    folder = tmp_path_factory.mktemp("independent_lessons")
    independent.write(folder)
    return folder


@pytest.fixture(scope="module")
def impl(lessons, one_thread):
    """The independent lesson set collected once (its 186 checks run here)."""
    return collect(lessons, fallback=solutions, log=[].append)


def _lesson_of(obj) -> str:
    """The lesson whose cell defined obj: collect runs lesson NN_x in a namespace named learner_NN_x."""
    return obj.__module__


def test_every_name_of_the_independent_lessons_is_theirs(impl):
    names = contract_names()
    assert len(names) == 35 and impl.mine == names, impl.report
    for name in names:
        obj = getattr(impl, name)
        assert obj is not getattr(solutions, name) and _lesson_of(obj).startswith("learner_"), name
    assert _lesson_of(impl.BPETokenizer) == "learner_01_tokenization"
    assert _lesson_of(impl.Transformer) == "learner_10_output_projection"
    assert _lesson_of(impl.corpus_bleu) == "learner_13_decoding"


def test_lesson14_trains_decodes_and_scores_with_the_learners_code(impl, tmp_path):
    impl.forget_runs()  # count from here: what lesson 14's code runs
    splits = load_synthetic(600, 40, 30, seed=0)
    data = prepare_data(TINY, splits, progress=False, impl=impl)
    assert type(data.tokenizer) is impl.BPETokenizer  # their tokenizer learned the joint vocabulary
    model, history = train(TINY, data, progress=False, impl=impl)
    assert type(model) is impl.Transformer and history["steps"] > 0
    # the model is theirs all the way down: their stacks, layers, attention, feed-forward, norms, embeddings
    kinds = {type(m).__name__: _lesson_of(type(m)) for m in model.modules()
             if _lesson_of(type(m)).startswith("learner_")}
    assert kinds == {"Transformer": "learner_10_output_projection",
                     "TokenEmbedding": "learner_01_tokenization",
                     "PositionalEncoding": "learner_02_positional_encoding", "Encoder": "learner_08_encoder",
                     "EncoderLayer": "learner_08_encoder", "Decoder": "learner_09_decoder",
                     "DecoderLayer": "learner_09_decoder",
                     "MultiHeadAttention": "learner_04_multi_head_attention",
                     "PositionwiseFeedForward": "learner_06_feed_forward",
                     "SublayerConnection": "learner_07_residual_layer_norm",
                     "LayerNorm": "learner_07_residual_layer_norm"}, kinds
    de, en = splits["test"]
    for method in ("greedy", "beam"):
        hyps = translate_batch(model, data.tokenizer, de, method, impl=impl, **decoding_args(TINY))
        scores = bleu_scores(hyps, en, impl)
        assert scores["corpus_bleu"] == pytest.approx(scores["no_smoothing"], abs=1e-9), scores
    save_checkpoint(tmp_path / "model.pt", model, data.tokenizer, TINY, history)
    again, tokenizer, _ = load_checkpoint(tmp_path / "model.pt", impl=impl)
    assert type(again) is impl.Transformer and type(tokenizer) is impl.BPETokenizer
    assert tokenizer.encode(de[0]) == data.tokenizer.encode(de[0])
    # seen in use: every one of the 35 names ran, from get_pair_stats (inside their learn_bpe) to corpus_bleu
    assert impl.ran() == impl.mine, sorted(set(impl.mine) - set(impl.ran()))
    assert "ran: 35 of your 35 names" in impl.usage_report()


def test_the_learners_code_trains_under_the_cpu_defaults_bf16(impl):
    """Issue 22: the CPU default trains under bfloat16 autocast where the CPU has bf16 units (precision
    "auto"). Their code, which knows nothing of it, runs under it as it is: their Transformer's logits come
    out bf16, the loss is taken on float32 logits, and training lowers their validation loss as float32
    does."""
    data = prepare_data(TINY, load_synthetic(600, 40, 30, seed=0), progress=False, impl=impl)
    dtypes, losses = [], {}
    for precision in ("fp32", "bf16"):
        config = Config(**{**TINY.__dict__, "precision": precision})
        torch.manual_seed(0)
        untrained = validation_loss(build_model(config, data.tokenizer.vocab_size, impl), data.val, config,
                                    impl)
        model = build_model(config, data.tokenizer.vocab_size, impl)
        model.generator.register_forward_hook(lambda m, i, out, p=precision: dtypes.append((p, out.dtype)))
        _, history = train(config, data, model=model, progress=False, impl=impl)
        losses[precision] = (untrained, history["val_loss"][-1])
    assert type(model) is impl.Transformer
    assert {d for p, d in dtypes if p == "bf16"} == {torch.bfloat16}, dtypes
    (_, after32), (before16, after16) = losses["fp32"], losses["bf16"]
    assert after16 < 0.8 * before16 and abs(after16 - after32) < 0.1 * after32, losses

def test_a_name_that_did_not_run_is_never_reported_as_run(impl):
    impl.forget_runs()
    impl.softmax(torch.zeros(2, 3))
    assert impl.ran() == ["softmax"]
    report = impl.usage_report()
    assert "ran: 1 of your 35 names (softmax)" in report and "never called in this run" in report
    assert "corpus_bleu" in report.split("never called")[1]


def test_a_name_short_of_full_points_falls_back_to_the_reference(tmp_path):
    nb = independent.solved_lessons()["13_decoding.ipynb"]
    cell = next(c for c in nb.cells if c.get("metadata", {}).get("course",
                                                                 {}).get("names", [None])[0] == "corpus_bleu")
    assert "(h_grams & r_grams)" in cell.source
    # n-grams not clipped by the reference
    cell.source = cell.source.replace("(h_grams & r_grams)", "h_grams")
    nbformat.write(nb, str(tmp_path / "13_decoding.ipynb"))
    lines, threads = [], torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        impl = collect(tmp_path, fallback=solutions, log=lines.append)
        # lesson 13's imports cell asks for one thread: lesson 14 keeps its own
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    assert impl.corpus_bleu is solutions.corpus_bleu and "corpus_bleu" not in impl.mine
    assert impl.report["corpus_bleu"].startswith("reference: yours scores ")
    assert impl.mine == ["greedy_decode", "length_penalty", "beam_search"]
    assert impl.report["Transformer"] == "reference: not found in the lessons"
    assert impl.Transformer is solutions.Transformer
    text = "\n".join(lines)
    assert "yours from here on: 3 of 35 names" in text and "corpus_bleu: reference: yours scores" in text
    # a name the learner keeps from the reference (KEEP_REFERENCE in lesson 14), also inside their own code
    impl = collect(tmp_path, fallback=solutions, log=lines.append, exclude=["length_penalty"])
    assert impl.mine == ["greedy_decode", "beam_search"] and impl.length_penalty is solutions.length_penalty
    assert impl.report["length_penalty"] == "reference: you chose it (exclude)"
    assert inspect.unwrap(impl.beam_search).__globals__["length_penalty"] is solutions.length_penalty


def test_find_lessons(tmp_path):
    assert find_lessons(tmp_path) is None
    (tmp_path / "14_translate.ipynb").write_text("{}")
    (tmp_path / "15_experiments.ipynb").write_text("{}")
    assert find_lessons(tmp_path) is None  # lessons 14 and 15 have nothing of the learner's
    (tmp_path / "lessons").mkdir()
    (tmp_path / "lessons" / "03_attention.ipynb").write_text("{}")
    assert find_lessons(tmp_path, tmp_path / "lessons") == tmp_path / "lessons"


def test_solutions_import_nothing_of_the_grader():
    """solutions/ is the reference: it depends on no other part of the course (issue 20)."""
    for path in sorted((ROOT / "solutions").rglob("*.py")):  # solutions/translate/ too
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            else:
                continue
            assert not any(m.split(".")[0] in ("autograder", "tests") for m in modules), (str(path), modules)


def test_the_learners_decoder_trains_inside_the_reference_transformer(tmp_path):
    """Issue 37: their finished parts run even where a later stage is not theirs. With only lesson 09 done,
    the reference Transformer is rebuilt to read `Decoder` from their names: the model trains on their
    decoder, the report says so, and the reference class itself is left as it was."""
    nbformat.write(independent.solved_lessons()["09_decoder.ipynb"], str(tmp_path / "09_decoder.ipynb"))
    lines = []
    impl = collect(tmp_path, fallback=solutions, log=lines.append)
    assert impl.mine == ["DecoderLayer", "Decoder"]
    assert impl.Transformer is not solutions.Transformer and issubclass(impl.Transformer,
                                                                        solutions.Transformer)
    assert impl.rebuilt == {"Transformer": ["Decoder"]}
    assert impl.report["Transformer"] == "reference: not found in the lessons; built from your Decoder"
    assert "Transformer: reference: not found in the lessons; built from your Decoder" in "\n".join(lines)
    impl.forget_runs()
    data = prepare_data(TINY, load_synthetic(300, 20, 10, seed=0), progress=False, impl=impl)
    model, history = train(Config(**{**TINY.__dict__, "max_steps": 3}), data, progress=False, impl=impl)
    assert history["steps"] == 3 and type(model) is impl.Transformer
    assert _lesson_of(type(model.decoder)) == "learner_09_decoder"
    assert {_lesson_of(type(layer)) for layer in model.decoder.layers} == {"learner_09_decoder"}
    assert type(model.encoder) is solutions.Encoder  # not theirs: the reference's
    assert impl.ran() == ["DecoderLayer", "Decoder"]
    report = impl.usage_report()
    assert "your code that ran: 2 of your 2 names" in report
    assert "the reference's Transformer, built from your Decoder" in report
    assert type(solutions.Transformer(20, 20, d_model=8, n_heads=2, n_layers=1,
                                      d_ff=16).decoder) is solutions.Decoder
    # a name kept from the reference keeps the reference's parts too
    kept = collect(tmp_path, fallback=solutions, log=[].append, exclude=["Transformer"])
    assert kept.Transformer is solutions.Transformer and kept.rebuilt == {}


def test_a_decorated_reference_function_is_rebuilt_around_the_learners_part(tmp_path):
    """greedy_decode (under @torch.no_grad()) reads causal_mask: with their lesson 05, the reference decoder's
    copy calls their causal_mask, still without gradients."""
    nbformat.write(independent.solved_lessons()["05_masks.ipynb"], str(tmp_path / "05_masks.ipynb"))
    impl = collect(tmp_path, fallback=solutions, log=[].append)
    assert impl.mine == ["padding_mask", "causal_mask", "target_mask"]
    assert "greedy_decode" in impl.rebuilt and "causal_mask" in impl.rebuilt["greedy_decode"]
    model = solutions.Transformer(10, 10, d_model=8, n_heads=2, n_layers=1, d_ff=16).eval()
    src = torch.tensor([[4, 5, 6]])
    impl.forget_runs()
    out = impl.greedy_decode(model, src, impl.padding_mask(src), max_len=4)
    assert out == solutions.greedy_decode(model, src, solutions.padding_mask(src), max_len=4)
    assert "causal_mask" in impl.ran()
    assert inspect.unwrap(solutions.greedy_decode).__globals__["causal_mask"] is solutions.causal_mask


@pytest.mark.parametrize("newer", ["05_masks-Copy1.ipynb", "05_masks.ipynb"])
def test_two_notebooks_of_one_lesson_the_last_saved_is_used_and_said(tmp_path, newer):
    """Jupyter's copy beside the lesson: one of the two is used (the one saved last), collect names it, and
    every score reported is that notebook's: here the copy is the released lesson (nothing written: 0
    points)."""
    import os
    solved = independent.solved_lessons()["05_masks.ipynb"]
    released = nbformat.read(str(ROOT / "lessons" / "05_masks.ipynb"), as_version=4)
    other = "05_masks.ipynb" if newer != "05_masks.ipynb" else "05_masks-Copy1.ipynb"
    nbformat.write(solved, str(tmp_path / newer))
    nbformat.write(released, str(tmp_path / other))
    os.utime(tmp_path / other, (1_000_000_000, 1_000_000_000))  # saved long before
    lines = []
    impl = collect(tmp_path, fallback=solutions, log=lines.append)
    assert [p.name for p in impl.notebooks] == [newer]
    assert f"lesson 05: 2 notebooks; using {newer}, the one saved last (not {other})" in "\n".join(lines)
    assert impl.mine == ["padding_mask", "causal_mask", "target_mask"]
    # and the other way round: the released one saved last scores 0, and that is what is reported
    os.utime(tmp_path / newer, (900_000_000, 900_000_000))
    os.utime(tmp_path / other, (1_000_000_000, 1_000_000_000))
    impl = collect(tmp_path, fallback=solutions, log=lines.append)
    assert [p.name for p in impl.notebooks] == [other] and impl.mine == []
    assert impl.report["padding_mask"].startswith("reference: yours scores 0/")
