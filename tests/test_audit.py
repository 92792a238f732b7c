"""autograder/audit.py: what reaches below the library-shortcut watch is named for review, read from the
cells' source before they run; an honest lesson never trips it."""
import nbformat
import pytest

from autograder.audit import audit, audit_notebook
from autograder.notebooks import LESSONS, solved

LESSON_PATHS = sorted(LESSONS.glob("*.ipynb"))


@pytest.mark.parametrize("path", LESSON_PATHS, ids=[p.stem for p in LESSON_PATHS])
def test_no_lesson_trips_it_solved_or_released(path):
    assert audit_notebook(solved(path)) == []
    assert audit_notebook(nbformat.read(str(path), as_version=4)) == []


@pytest.mark.parametrize("source,says", [
    ("with torch._C.DisableTorchFunction():\n    y = torch.softmax(x, -1)", "torch._C.DisableTorchFunction"),
    ("from torch._C import DisableTorchFunction", "imports torch._C"),
    ("from torch import _C as c\nc._disabled_torch_function_impl", "imports torch._C"),
    ("y = torch.ops.aten._softmax.default(x, -1, False)", "torch.ops.aten._softmax.default"),
    ("import torch as T\n%timeit 1\nT.ops.aten.add", "torch.ops.aten.add"),
    ("import torch.nn.functional as G\ny = G.softmin(-x, -1)", "softmin"),
    ("from torch.nn.functional import softmin", "softmin"),
    ("f.__code__ = (lambda x: x).__code__", "__code__"),
    ("y = getattr(torch, 'soft' + 'max')(x, -1)", "name built at run time"),
    ("y = getattr(getattr(torch, '_' + 'C'), 'Disable' + 'TorchFunction')", "name built at run time"),
    ("t = __import__('tor' + 'ch')", "__import__"),
    ("import importlib\nm = importlib.import_module('torch')", "importlib.import_module"),
    ("exec(code)", "exec"),
    ("import sys\nm = sys.modules['tor' + 'ch']", "computed key"),
])
def test_each_way_below_the_watch_is_named_with_its_line(source, says):
    found = audit(source)
    assert found and says in found[0][1], found
    assert 1 <= found[0][0] <= len(source.splitlines())


@pytest.mark.parametrize("source", [
    # every setup cell
    "import importlib.util\nif importlib.util.find_spec('autograder') is None:\n    pass",
    # layers in a loop
    "for n in ('q', 'k', 'v'):\n    setattr(self, n, nn.Linear(d, d))",
    "w = getattr(module, 'weight')\nmodel.eval()\ny = F.log_softmax(x, -1)",
    "def softmax(x, dim=-1):\n    e = (x - x.amax(dim, keepdim=True)).exp()\n"
    "    return e / e.sum(dim, keepdim=True)",
    "%matplotlib inline\n!ls",
])
def test_honest_code_is_not_named(source):
    assert audit(source) == []


def test_the_report_says_the_cell_and_line():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("torch.ops"), nbformat.v4.new_code_cell("import torch"),
                nbformat.v4.new_code_cell("x = 1\ny = torch.ops.aten.exp(x)")]
    (line,) = audit_notebook(nb)
    assert line.startswith("cell 3, line 2: `y = torch.ops.aten.exp(x)` uses torch.ops.aten.exp") and \
        "library-shortcut watch" in line
