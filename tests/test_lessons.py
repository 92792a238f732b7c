"""The lessons against solutions/ (no drift) and as learners get them (they run, score zero, say why)."""
import ast
import io
import json

import nbformat
import pytest

from autograder import max_points
from autograder.grade import grade
from autograder.notebooks import MODULES, clear_solutions, lesson_paths, solution_source, solved, sync

LESSONS = lesson_paths()
IDS = [p.stem for p in LESSONS]


def stub_cells(nb):
    return [c for c in nb.cells if c.get("metadata", {}).get("course", {}).get("names")]


def test_lessons_exist():
    assert "03_attention" in IDS


def test_regenerating_the_stubs_changes_nothing():
    assert sync(write=False) == [], "run: python -m autograder lessons --write"


def defs(source):
    """{qualified name: (arguments, docstring, body)} of the top-level functions, classes and methods."""
    out = {}

    def walk(nodes, prefix=""):
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                args = ast.unparse(node.args) if isinstance(node, ast.FunctionDef) else None
                out[prefix + node.name] = (args, ast.get_docstring(node), node.body)
                if isinstance(node, ast.ClassDef):  # methods; what a function defines inside is its body
                    walk(node.body, prefix + node.name + ".")
    walk(ast.parse(source).body)
    return out


@pytest.mark.parametrize("path", LESSONS, ids=IDS)
def test_stubs_keep_the_solution_signature_and_docstring(path):
    nb = nbformat.read(str(path), as_version=4)
    for cell in stub_cells(nb):
        stub = defs(cell.source)
        ref = defs(solution_source(MODULES[path.stem], cell.metadata["course"]["names"]))
        assert stub.keys() == ref.keys()
        for name, (args, doc, _) in stub.items():
            assert (args, doc) == ref[name][:2], \
                f"{name}: the stub's signature or docstring drifted from solutions/"
        assert "raise NotImplementedError()" in cell.source and "### BEGIN SOLUTION" not in cell.source


@pytest.mark.parametrize("path", LESSONS, ids=IDS)
def test_graded_cells_are_worth_max_points_and_cover_the_stubs(path):
    nb = nbformat.read(str(path), as_version=4)
    graded = {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells
              if c.metadata.get("nbgrader", {}).get("grade")}
    for grade_id, cell in graded.items():
        name = grade_id.removeprefix("check_")
        assert cell.source.strip() == f"check({name})"
        assert cell.metadata["nbgrader"]["points"] == max_points(name), grade_id
        assert cell.metadata["nbgrader"]["locked"] is True
    stubbed = {n for c in stub_cells(nb) for n in c.metadata["course"]["names"]}
    checked = {g.removeprefix("check_") for g in graded}
    assert checked <= stubbed, f"checks without a stub: {checked - stubbed}"
    ids = [c.metadata["nbgrader"]["grade_id"] for c in nb.cells if "nbgrader" in c.metadata]
    assert len(ids) == len(set(ids)), "duplicate grade_id"


@pytest.mark.parametrize("path", LESSONS, ids=IDS)
def test_committed_without_outputs(path):
    nb = json.loads(path.read_text())
    dirty = [i for i, c in enumerate(nb["cells"])
             if c["cell_type"] == "code" and (c["outputs"] or c["execution_count"])]
    assert not dirty, f"cells {dirty} carry outputs: strip them"


def test_clear_solutions_is_nbgrader_s():
    src = ("def f(x):\n    \"\"\"doc\"\"\"\n    y = 1\n"
           "    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION\n")
    assert clear_solutions(src) == \
        "def f(x):\n    \"\"\"doc\"\"\"\n    y = 1\n    # YOUR CODE HERE\n    raise NotImplementedError()\n"
    assert "### END SOLUTION" in solution_source("attention", ["softmax"])


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """{("released" or "solved", stem): report} of every lesson as a learner gets it and as solved, graded by
    one batch of the grade command, two notebooks at a time (each in its own kernel, as an instructor's
    batch)."""
    folder = tmp_path_factory.mktemp("lessons")
    paths = {}
    for path in LESSONS:
        for kind, nb in (("released", nbformat.read(str(path), as_version=4)), ("solved", solved(path))):
            (folder / kind).mkdir(exist_ok=True)
            paths[kind, path.stem] = folder / kind / path.name
            nbformat.write(nb, str(paths[kind, path.stem]))
    report = grade(list(paths.values()), stream=io.StringIO(), jobs=2)
    by_path = {n["path"]: n for n in report["notebooks"]}
    return {key: by_path[str(p)] for key, p in paths.items()}


@pytest.mark.parametrize("stem", IDS)
def test_released_lesson_runs_to_the_end_with_zero_points(graded, stem):
    r = graded["released", stem]
    assert r["error"] is None, r["error"]
    for cell in r["cells"]:
        assert cell["points"] == 0 and "not implemented yet" in cell["message"], cell


@pytest.mark.parametrize("stem", IDS)
def test_solved_lesson_gets_full_points(graded, stem):
    r = graded["solved", stem]
    assert r["error"] is None, r["error"]
    assert r["points"] == r["max_points"] > 0, [c for c in r["cells"] if c["points"] < c["max_points"]]


# Lessons whose cells have been cut to size (issue 16): all of them.
SHORT_CELLS = ["01_tokenization", "02_positional_encoding", "03_attention", "04_multi_head_attention",
               "05_masks",
               "06_feed_forward", "07_residual_layer_norm", "08_encoder", "09_decoder",
               "10_output_projection", "11_label_smoothing", "12_training", "13_decoding", "14_translate",
               "15_experiments"]


@pytest.mark.parametrize("stem", SHORT_CELLS)
def test_cells_are_short_enough_to_read(stem):
    """No markdown cell over 250 words; no code cell over 30 lines, the stubs (generated from solutions/)
    included."""
    nb = nbformat.read(str(next(p for p in lesson_paths(graded_only=False) if p.stem == stem)), as_version=4)
    long_text = [(i, len(c.source.split())) for i, c in enumerate(nb.cells)
                 if c.cell_type == "markdown" and len(c.source.split()) > 250]
    long_code = [(i, len(c.source.splitlines())) for i, c in enumerate(nb.cells)
                 if c.cell_type == "code" and len(c.source.splitlines()) > 30]
    assert not long_text, f"markdown cells over 250 words (cell, words): {long_text}"
    assert not long_code, f"code cells over 30 lines (cell, lines): {long_code}"


# ------------------------------------------------------------------ worked examples in the stubs' docstrings
# (object, setup, [(words of its docstring, a Python check of what those words say)]): a docstring
# example that stops being true, or is reworded, fails here (issue 37).
DOCSTRING_EXAMPLES = [
    ("PositionwiseFeedForward", """
ffn = solutions.PositionwiseFeedForward(2, 3, dropout=0.0)
with torch.no_grad():
    ffn.w_1.weight.copy_(torch.tensor([[1., 0.], [0., 1.], [1., 1.]]))
    ffn.w_1.bias.copy_(torch.tensor([0., 0., -1.]))
    ffn.w_2.weight.copy_(torch.tensor([[1., 1., 1.], [0., 0., 1.]])); ffn.w_2.bias.zero_()
x = torch.tensor([1., -2.])
""", [("w_1(x) = [1, -2, -2], relu -> [1, 0, 0], w_2 -> [1, 0]",
       "ffn.w_1(x).tolist() == [1, -2, -2] and torch.relu(ffn.w_1(x)).tolist() == [1, 0, 0] "
       "and ffn(x).tolist() == [1, 0]"),
      ("ffn(torch.randn(4, 7, 2)).shape -> (4, 7, 2)", "ffn(torch.randn(4, 7, 2)).shape == (4, 7, 2)")]),
    ("DecoderLayer", """
layer = solutions.DecoderLayer(8, 2, 16, dropout=0.0)
out = layer(torch.randn(1, 5, 8), torch.randn(1, 7, 8), None, solutions.causal_mask(5))
""", [("layer(torch.randn(1, 5, 8), torch.randn(1, 7, 8), None, causal_mask(5)).shape -> (1, 5, 8)",
       "out.shape == (1, 5, 8)"),
      ("layer.cross_attn.attn_weights.shape -> (1, 2, 5, 7)",
       "layer.cross_attn.attn_weights.shape == (1, 2, 5, 7)"),
      ("layer.self_attn.attn_weights[0, :, 0, 1:].sum().item() -> 0.0",
       "layer.self_attn.attn_weights[0, :, 0, 1:].sum().item() == 0.0")]),
    ("Transformer", """
m = solutions.Transformer(100, 100, d_model=32, n_heads=4, n_layers=2, d_ff=64)
""", [("m(torch.ones(2, 7).long(), torch.ones(2, 5).long(), None, None).shape -> (2, 5, 100)",
       "m(torch.ones(2, 7).long(), torch.ones(2, 5).long(), None, None).shape == (2, 5, 100)"),
      ("m.generator.weight is m.tgt_embed.embedding.weight is m.src_embed.embedding.weight -> True",
       "m.generator.weight is m.tgt_embed.embedding.weight is m.src_embed.embedding.weight")]),
]


@pytest.mark.parametrize("name,setup,examples", DOCSTRING_EXAMPLES, ids=[e[0] for e in DOCSTRING_EXAMPLES])
def test_the_worked_examples_in_the_docstrings_are_true(name, setup, examples):
    import torch

    import solutions
    doc = " ".join(getattr(solutions, name).__doc__.split())
    torch.manual_seed(0)
    namespace = {"torch": torch, "solutions": solutions}
    exec(setup, namespace)
    for words, holds in examples:
        assert " ".join(words.split()) in doc, \
            f"{name}'s docstring no longer says {words!r}: update this test"
        assert eval(holds, namespace), f"{name}'s docstring says {words!r}, but {holds} is False"


# ------------------------------------------------------------------------------------- demonstration cells
def _catches_not_implemented(node) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.ExceptHandler) and n.type is not None:
            types_ = n.type.elts if isinstance(n.type, ast.Tuple) else [n.type]
            if any(isinstance(t, ast.Name) and t.id == "NotImplementedError" for t in types_):
                return True
    return False


@pytest.mark.parametrize("path", LESSONS, ids=IDS)
def test_every_demonstration_cell_goes_on_when_the_learners_code_fails(path):
    """A cell that runs the learner's code for a figure or a printout, and catches NotImplementedError for a
    stub, sits inside `with demonstration():` (autograder/demo.py), so that any other error is reported, not
    raised."""
    nb = nbformat.read(str(path), as_version=4)
    bare = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or cell.metadata.get("course", {}).get("names"):
            continue
        for node in ast.parse(cell.source).body:
            wrapped = isinstance(node, ast.With) and any(
                isinstance(item.context_expr, ast.Call) and getattr(item.context_expr.func, "id", "")
                == "demonstration"
                for item in node.items)
            if _catches_not_implemented(node) and not wrapped and not isinstance(node, ast.FunctionDef):
                bare.append(i)
    assert not bare, f"cells {bare} catch NotImplementedError outside `with demonstration():`"


def test_a_wrong_padding_mask_is_reported_and_lesson_05_goes_on(tmp_path):
    """Issue 38: a padding_mask that returns (B, 1, L) (one singleton dimension forgotten) made two of lesson
    05's demonstration cells crash with IndexError. Now each says what failed and what the cell had computed,
    and the lesson runs to its end."""
    from nbclient import NotebookClient

    from autograder.notebooks import ROOT, solved
    nb = solved(next(p for p in LESSONS if p.stem == "05_masks"))
    at = next(i for i, c in enumerate(nb.cells)
              if c.metadata.get("nbgrader", {}).get("grade_id") == "check_padding_mask")
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(
        "def padding_mask(ids, pad_id=PAD):\n    return (ids != pad_id)[:, None, :]   # (B, 1, L): a "
        "dimension forgotten"))
    nb.cells.insert(0, nbformat.v4.new_code_cell(f"import sys; sys.path.insert(0, {str(ROOT)!r})"))
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    printed = {i: "".join(o.get("text", "") for o in c.get("outputs", []) if o.output_type == "stream")
               for i, c in enumerate(nb.cells) if c.cell_type == "code"}
    stopped = [text for text in printed.values() if "This demonstration stopped" in text]
    assert len(stopped) == 2, printed
    assert all("The checks above say what is wrong; the next cells go on." in text for text in stopped)
    # the error, and what the learner's functions returned before it: target_mask, built on that padding_mask,
    # gives (1, B, L, L), whose row b = 1 does not exist
    assert all("IndexError" in text for text in stopped), stopped
    assert "pad = tensor of shape (3, 1, 6), torch.bool" in stopped[0], stopped[0]
    assert "tgt = tensor of shape (1, 3, 6, 6), torch.bool" in stopped[0], stopped[0]
    assert "|change| of the output at positions 0..5" in printed[max(printed)] or any(
        "|change| of the output" in t for t in printed.values())   # the cells after them ran
