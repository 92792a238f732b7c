"""A corpus of lesson-03 submissions, honest, broken, slow and hostile, each with the score it must get
and a phrase its report must contain. Generated from lessons/03_attention.ipynb (its solved version,
autograder.notebooks.solved, and the released one), never committed as notebooks.

    python -m tests.submissions.corpus OUT_DIR      # writes them, to grade by hand:
    python -m autograder grade OUT_DIR/*.ipynb --jobs 2 --cell-timeout 15

Lesson 03 is worth 10: softmax 3, scaled_dot_product_attention 7. Most submissions are "lean" (the
lesson without its markdown, plots and demo cells) so that the whole corpus grades in a few minutes.
The batch grades them all as lesson 03 (`--lesson 03_attention`, as an instructor grading one assignment).
The classes of attack follow autograder/GRADING.md: forged verdicts, borrowed answers, harm to classmates
and to the machine, and resources.
"""
from __future__ import annotations

import copy
import json
import os
import pathlib
import sys
from dataclasses import dataclass, field

import nbformat

from autograder.notebooks import LESSONS, solved

LESSON = LESSONS / "03_attention.ipynb"
FULL = 10.0
SOFTMAX, ATTENTION = 3.0, 7.0


@dataclass
class Case:
    name: str                  # file stem
    points: float | None       # the score it must get (None: only "less than full")
    says: list = field(default_factory=list)   # phrases the report (error, problems, messages) must contain
    error: bool = False        # whether the notebook-level error must be set
    hostile: bool = False      # tries to cheat or to harm
    needs_isolation: bool = False  # only safe (or only meaningful) with the kernel's namespaces
    content: object = None     # a notebook, or raw bytes/str for a broken file
    max_points: float = FULL
    unisolated: tuple | None = None  # (points, error, says) instead, when kernels run without namespaces

    def expected(self, isolated: bool) -> tuple:
        """(points, error, phrases) this case must get."""
        if not isolated and self.unisolated is not None:
            return self.unisolated
        return self.points, self.error, self.says


def _released():
    return nbformat.read(str(LESSON), as_version=4)


def _lean(nb):
    """The lesson without markdown, plots and demo cells (setup, imports, stubs and check cells stay)."""
    nb = copy.deepcopy(nb)
    keep = []
    for cell in nb.cells:
        meta = cell.get("metadata", {})
        if cell.cell_type != "code":
            continue
        if "nbgrader" in meta or "importlib.util" in cell.source:
            keep.append(cell)
        elif "from autograder import check" in cell.source:
            cell.source = cell.source.replace("import matplotlib.pyplot as plt\n", "")
            keep.append(cell)
    nb.cells = keep
    return nb


def _cell(nb, grade_id):
    return next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def _index(nb, grade_id):
    return nb.cells.index(_cell(nb, grade_id))


def _insert(nb, before_grade_id, source):
    """A new code cell just before the cell with that grade_id (at the end when None)."""
    nb = copy.deepcopy(nb)
    cell = nbformat.v4.new_code_cell(source)
    if before_grade_id is None:
        nb.cells.append(cell)
    else:
        nb.cells.insert(_index(nb, before_grade_id), cell)
    return nb


def _set_solution(nb, grade_id, source):
    nb = copy.deepcopy(nb)
    _cell(nb, grade_id).source = source
    return nb


SOFTMAX_OK = '''def softmax(x, dim=-1):
    shifted = x - x.amax(dim=dim, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim=dim, keepdim=True)'''

ATTENTION_OK = '''def scaled_dot_product_attention(q, k, v, mask=None, dropout=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = softmax(scores, dim=-1)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ v, weights'''


# the attention of the lesson with the library's softmax (allowed there): a case that breaks `softmax` keeps 7
ATTENTION_OWN = ATTENTION_OK.replace("softmax(scores, dim=-1)", "torch.softmax(scores, dim=-1)")

# an input transformer that rewrites the grader's cell into a print of a made-up verdict
TRANSFORMER = r"""def fake(lines):
    if "autograder.serve" in "".join(lines):
        return ['print("softmax: 3/3 points")\n', '3.0\n']
    return lines

get_ipython().input_transformers_post.append(fake)"""

# speaks the grader's protocol itself: says hello for the cell, then makes up a verdict and leaves
SELF_SERVE = r"""import socket, json, struct
import autograder.serve as serve

def grade(name, cell, path, namespace=None):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    for msg in ({"k": "hello", "name": name, "cell": cell},
                {"k": "done", "lines": ["made up"], "points": 3.0},
                {"k": "rep", "id": 1, "ok": True, "v": 3.0}):
        head = json.dumps(msg).encode()
        s.sendall(struct.pack("<II", len(head), 0) + head)
    s.close()
    print(f"{name}: 3/3 points")
    return 3.0

serve.grade = grade"""

ALWAYS_EQUAL = r"""class Yes(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("allclose", "equal", "__eq__", "isclose", "eq"):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})

def softmax(x, dim=-1):
    return torch.zeros_like(x).as_subclass(Yes)"""

FUNCTION_MODE = r"""from torch.overrides import TorchFunctionMode

class AllTrue(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("allclose", "equal", "isclose"):
            return True
        return func(*args, **(kwargs or {}))

AllTrue().__enter__()   # left on for the rest of the notebook, the grading included

def softmax(x, dim=-1):
    return x"""

BORROWS_SOURCE = r"""import glob, os, subprocess, solutions
found = []
here = os.path.dirname(os.path.dirname(solutions.__file__))
try:    # the reference's own file
    src = open(os.path.join(os.path.dirname(solutions.__file__), 'attention.py')).read()
    if 'NotImplementedError' not in src.split('def softmax')[1].split('def ')[0]:
        found.append('solutions/attention.py')
    exec(src)
except Exception as e:
    print(type(e).__name__, e)
try:    # the course's git history
    src = subprocess.run(['git', '-C', here, 'show', 'HEAD:solutions/attention.py'], capture_output=True,
                         text=True).stdout
    if 'def softmax' in src:
        found.append('git')
        exec(src)
except Exception as e:
    print(type(e).__name__, e)
for path in glob.glob(os.path.join(here, 'tests', '*.py')) + glob.glob(os.path.join(here, '.git', '*')):
    found.append(path)
print('found', found)"""

BORROWS_CHECKS = r"""import importlib, os, autograder
checks = importlib.import_module('autograder.checks.stage03_attention')
borrowed = [getattr(checks, n) for n in dir(checks) if callable(getattr(checks, n)) and
            any(w in n.lower() for w in ('softmax', 'attention', 'reference', 'expected'))]
fixtures = os.listdir(os.path.join(os.path.dirname(autograder.__file__), 'fixtures')) \\
    if os.path.isdir(os.path.join(os.path.dirname(autograder.__file__), 'fixtures')) else []
print('borrowed', borrowed, 'fixtures', fixtures)
if borrowed:
    softmax = borrowed[0]"""

# what the jail shows again of the machine (autograder/jail.py): the course, and Python (sys.prefix and
# sys.base_prefix: a virtual environment under /tmp, the interpreter it was made from under /root), each with
# the folders above it (as mount points); anything else under /tmp, /var/tmp or the batch's folder is a
# classmate's
PYTHONS = r"""import os, sys
pythons = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                          os.path.dirname(os.path.realpath(sys.executable)))}

def python(path):
    real = os.path.realpath(path)
    return any(real == p or p.startswith(real.rstrip(os.sep) + os.sep) or real.startswith(p + os.sep) for p in pythons)
"""  # noqa: E501  (a submission's code, graded as written)

CLASSMATES = PYTHONS + r"""import glob, os, autograder
found = []
course = os.path.dirname(os.path.dirname(os.path.realpath(autograder.__file__)))  # shown to every kernel
# its notebook's folder in the batch's: NOTEBOOK/scratch/work (autograder/folders.py); NOTEBOOK/sock, its checker's
# socket, is shown to it read-only
notebook = os.path.dirname(os.path.dirname(os.getcwd()))
for pattern in ('/tmp/*', '/tmp/*/*', '/tmp/*/*/*', '/var/tmp/*', '/dev/shm/*',
                os.path.join(os.path.dirname(notebook), '*', '*'), os.path.join(notebook, '*', '*')):
    for path in glob.glob(pattern):
        mine = (os.getcwd(), os.path.expanduser('~'), os.path.join(os.path.dirname(os.getcwd()), 'conn'),
                os.path.join(notebook, 'sock'))
        ours = path.startswith(mine) or os.getcwd().startswith(path + os.sep)   # its own, or above it
        shown = path == course or course.startswith(path + os.sep) or path.startswith(course + os.sep) or python(path)
        if not ours and not shown:
            found.append(path)
for conn in glob.glob(os.path.join(os.path.dirname(notebook), '*', '*', 'conn', '*.json')) + \
        glob.glob(os.path.join(os.path.dirname(notebook), '*', 'conn', '*.json')):
    if not conn.startswith(os.path.dirname(os.getcwd())):
        found.append(conn)
        try:    # inject code into the classmate's kernel
            from jupyter_client import BlockingKernelClient
            kc = BlockingKernelClient(connection_file=conn)
            kc.load_connection_file()
            kc.start_channels()
            kc.execute('softmax = scaled_dot_product_attention = None')
        except Exception as e:
            print(type(e).__name__, e)
print('found', found)
if found:   # what it could reach costs it its own points, so that the test sees it
    def softmax(x, dim=-1):
        return x"""  # noqa: E501  (a submission's code, graded as written)

PORT = 47231  # tests/test_hostile.py listens there on the loopback while the batch runs

MACHINE = PYTHONS + r"""import os, socket, subprocess, sys
PORT = %d
done = []
for what, fn in [
        ('/dev', lambda: open('/dev/autograder-was-here', 'w').write('x')),
        ('/proc/sys', lambda: open('/proc/sys/kernel/hostname', 'w').write('owned')),
        ('/sys', lambda: open('/sys/kernel/autograder', 'w').write('x')),
        ('/etc', lambda: open('/etc/autograder-was-here', 'w').write('x')),
        ('/root', lambda: [p for p in os.listdir('/root') if not python(os.path.join('/root', p))][0]),
        ('network', lambda: socket.create_connection(('127.0.0.1', PORT), timeout=1)),
        ('setuid', lambda: os.setuid(0)),
        ('mount', lambda: subprocess.run(['mount', '-t', 'tmpfs', 'x', os.getcwd()], check=True, capture_output=True)),
        ('hostname', lambda: subprocess.run(['hostname', 'owned'], check=True, capture_output=True)),
]:
    try:
        fn()
        done.append(what)
    except Exception as e:
        print(what, type(e).__name__)
from multiprocessing import shared_memory
leak = shared_memory.SharedMemory(name='autograder_leak', create=True, size=4096)   # left behind on purpose
print('done', done, 'uid', os.getuid())
if done or os.getuid() == 0:
    def softmax(x, dim=-1):
        return x""" % PORT  # noqa: E501  (a submission's code, graded as written)


COMPILER_STACK = r"""import torch._dynamo
torch.empty(3, device="meta").exp()
w = torch.nn.Parameter(torch.ones(2))
opt = torch.optim.Adam([w])
w.sum().backward()
opt.step()"""

# GRADER_SECRET is in the grade command's environment while tests/test_hostile.py grades the batch
GRADER_ENV = r"""import os

if os.environ.get("GRADER_SECRET"):
    def softmax(x, dim=-1):
        shifted = x - x.amax(dim=dim, keepdim=True)
        return shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)
else:
    def softmax(x, dim=-1):
        raise NotImplementedError"""


# In a batch with isolation, each kernel is forked by the batch's kernel server (autograder/jail.py, serve)
# rather than started by its launcher: the same jail as a launched kernel's, seen from inside (softmax is
# wrong otherwise)
FORKED = r"""import ctypes, os, signal, sys
death = ctypes.c_int(0)
ctypes.CDLL(None).prctl(2, ctypes.byref(death), 0, 0, 0)  # PR_GET_PDEATHSIG
status = dict(line.split(':', 1) for line in open('/proc/self/status').read().splitlines() if ':' in line)
facts = {
    'forked by the server': open('/proc/self/cmdline', 'rb').read().split(b'\0')[1:4] == [b'-m', b'autograder.jail',
                                                                                        b'--serve'],
    'nobody': os.getresuid() == os.getresgid() == (65534,) * 3 and os.getgroups() == [],
    'no capability': all(int(status[k], 16) == 0 for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')),
    'no_new_privs': status['NoNewPrivs'].strip() == '1',
    'PID 1 of its own namespace': os.getpid() == 1,
    'no secret': b'GRADER_SECRET' not in open('/proc/self/environ', 'rb').read() and 'GRADER_SECRET' not in os.environ,
    'none of the server': not any(m.startswith('autograder.jail') for m in sys.modules),
    'dies with its bridge': death.value == signal.SIGKILL,
}
print(facts)
if not all(facts.values()):
    def softmax(x, dim=-1):
        return x"""  # noqa: E501  (a submission's code, graded as written)


def cases() -> list[Case]:
    full, released = solved(LESSON), _released()
    lean, lean_released = _lean(full), _lean(released)
    # attention independent of softmax
    own = _set_solution(lean, "scaled_dot_product_attention", ATTENTION_OWN)
    out: list[Case] = []

    def add(name, content, points, *says, **kw):
        out.append(Case(name, points, list(says), content=content, **kw))

    # ------------------------------------------------------------------------------ honest
    add("honest_solved_full", full, FULL)
    add("honest_solved", lean, FULL)
    add("honest_released", lean_released, 0.0, "not implemented yet")
    mistake = _set_solution(lean, "scaled_dot_product_attention",
                            ATTENTION_OK.replace("softmax(scores, dim=-1)", "softmax(scores, dim=-2)"))
    add("honest_mistake_softmax_over_queries", mistake, 4.0, "softmax over the queries")
    # an error raised in the kernel: the message names the line with its tensors' shapes, sent by the kernel
    raises = _set_solution(lean, "scaled_dot_product_attention",
                           ATTENTION_OK.replace("    weights = softmax(",
                                                "    scores = scores - scores.amax(-1)\n"
                                                                        "    weights = softmax("))
    add("honest_mistake_raises_a_shape_error", raises, SOFTMAX, "(in scaled_dot_product_attention, line 5: "
        "`scores = scores - scores.amax(-1)`), with scores (2, 3, 4, 5); the call was "
        "scaled_dot_product_attention(",
        "Likely: 5 is scores's size at dim 3 and 4 is scores's size at dim 2")
    warns = _set_solution(lean, "softmax", "import collections, logging, sys, traceback, warnings\n"
                          "warnings.warn('a warning at definition')\nprint('to stderr', file=sys.stderr)\n\n"
                          + SOFTMAX_OK.replace("    shifted", "    print('stderr inside', file=sys.stderr)\n"
                                                            "    warnings.warn('inside')\n"
                                                            "    logging.getLogger('mine')"
                                                            ".warning('logged')\n"
                                                            "    collections.namedtuple('Pair', 'a b')\n"
                                                            "    try:\n        1 / 0\n"
                                                            "    except ZeroDivisionError:\n"
                                                            "        traceback.print_exc()\n    shifted"))
    add("honest_stderr_warnings", warns, FULL)
    odd = lean
    for source in ("undefined_name + 1",                                   # an error
                   "import sys\nsys.exit(3)",                              # SystemExit, which IPython catches
                   "import os\nopen('notes.txt', 'w').write('x' * 1000)\n"  # files in its own folder and HOME
                   "open(os.path.expanduser('~/x.txt'), 'w').write('home')",
                   "try:\n    junk = bytearray(64 * 2**30)\nexcept MemoryError:\n    print('no memory')"):
        odd = _insert(odd, "softmax", source)
    add("honest_odd_cells", odd, FULL)
    add("honest_reads_the_checks", _insert(lean, "softmax", "import autograder, os\nsrc = open(os.path.join("
                                           "os.path.dirname(autograder.__file__), 'core.py')).read()"), FULL)
    add("honest_patches_torch_after_grading", _insert(lean, None, "torch.allclose = lambda *a, **k: True"),
        FULL)
    add("honest_prints_a_flood", _insert(lean, "softmax", "import sys\nline = 'x' * 999 + '\\n'\n"
                                         "for _ in range(50_000):\n    sys.stdout.write(line)"), FULL)
    # torch's compiler stack, imported lazily by an optimizer's first step and by meta tensors, writes a cache
    # folder on import: the kernel must get one of its own (the grader's TORCHINDUCTOR_CACHE_DIR is root's)
    add("honest_uses_torch_compiler_stack",
        _set_solution(lean, "softmax", COMPILER_STACK + "\n\n\n" + SOFTMAX_OK), FULL)

    # --------------------------------------------------------------------- broken files
    add("broken_not_json", "{\"cells\": [", 0.0, "not valid JSON", error=True)
    add("broken_not_a_notebook", json.dumps({"hello": "world"}), 0.0, "not a Jupyter notebook", error=True)
    add("broken_invalid_notebook", json.dumps({"cells": [{"cell_type": "code"}], "nbformat": 4,
                                               "nbformat_minor": 5,
                                               "metadata": {}}), 0.0, "not a valid notebook", error=True)
    plain = nbformat.v4.new_notebook()
    plain.cells = [nbformat.v4.new_code_cell("print(1)")]
    add("broken_no_graded_cells", plain, 0.0, "check_softmax is missing", "softmax is not defined",
        max_points=FULL)
    deleted = copy.deepcopy(lean)
    deleted.cells.remove(_cell(deleted, "check_softmax"))
    add("broken_check_cell_deleted", deleted, FULL, "check_softmax is missing")
    dup = copy.deepcopy(lean)
    twin = copy.deepcopy(_cell(dup, "check_softmax"))
    # the same grade_id, a distinct cell id (as Jupyter's copy makes)
    twin.id = nbformat.v4.new_code_cell().id
    dup.cells.insert(_index(dup, "check_softmax"), twin)
    add("broken_check_cell_copied", dup, FULL, "appears 2 times")
    many = nbformat.v4.new_notebook()
    many.cells = [nbformat.v4.new_code_cell("") for _ in range(3000)]
    add("broken_too_many_cells", many, 0.0, "more than 2000", error=True, max_points=FULL)
    empty_cell = '{"cell_type": "code", "execution_count": null, "metadata": {}, "outputs": [], "source": ""}'
    huge = ('{"cells": [' + ",".join([empty_cell] * 260_000) +
            '], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    add("broken_huge_file", huge, 0.0, "more than 20 MB", error=True, max_points=FULL)
    other = solved(LESSONS / "04_multi_head_attention.ipynb")
    add("broken_another_lessons_notebook", other, 0.0, "lesson 04_multi_head_attention's", max_points=FULL)

    # ----------------------------------------------------------------- slow, crashing
    add("slow_endless_loop_cell", _insert(lean, "softmax", "while True:\n    pass"), FULL,
        "ran past the cell time limit")
    add("slow_sleep_cell", _insert(lean, "softmax", "import time\ntime.sleep(10**6)"), FULL,
        "ran past the cell time limit")
    hang = _set_solution(lean, "softmax", "def softmax(x, dim=-1):\n    while True:\n        pass")
    add("slow_hanging_softmax", hang, 0.0, "took longer than")
    hog = _set_solution(lean, "softmax",
                        "def softmax(x, dim=-1):\n    junk = bytearray(64 * 2**30)\n    return x")
    add("slow_memory_hog_softmax", hog, 0.0, "memory", hostile=True)
    add("crash_os_exit", _insert(lean, "check_softmax", "import os\nos._exit(1)"), 0.0, "kernel died",
        error=True, hostile=True)
    # a namespace's PID 1 ignores its own SIGKILL: with isolation, the kernel lives on
    add("crash_sigkill_self",
        _insert(lean, "check_softmax", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"),
        FULL, hostile=True, unisolated=(0.0, True, ["kernel died"]))
    fork = _insert(lean, "softmax",
                   "import os\nfor _ in range(3):\n    if os.fork() == 0:\n        os.setsid()\n"
                   "        os.execvp('sleep', ['sleep', '4242.4242'])")
    add("hostile_forks_sleepers", fork, FULL, hostile=True)
    add("hostile_kill_everything", _insert(lean, "softmax",
                                           "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\n"
                                           "except OSError as e:\n    print(e)"), FULL, hostile=True,
        needs_isolation=True)

    # ---------------------------------------------------------- forged verdicts: the checks are elsewhere
    fake_print = _insert(lean_released, "check_softmax", "print('✓ equals torch.softmax [1/1]')\n"
                         "print('AUTOGRADER-RESULT 0 0 {\"points\": 3.0}')\nprint('softmax: 3/3 points')")
    add("forge_prints_a_verdict", fake_print, 0.0, "not implemented yet", hostile=True)
    fake_check = _insert(lean_released, "check_softmax",
                         "def check(obj):\n    print('all good')\n    return 7.0")
    add("forge_redefines_check", fake_check, 0.0, "not implemented yet", hostile=True)
    patched = _insert(lean_released, "check_softmax",
                      "import autograder.core as core\ncore.run_check = lambda c, obj: (c.points, 'ok')\n"
                      "import autograder.checks._util as u\nu.expect_close = lambda *a, **k: None")
    add("forge_patches_the_autograder", patched, 0.0, "not implemented yet", hostile=True)
    add("forge_replaces_the_serving_code", _insert(lean_released, "check_softmax",
        "import autograder.serve as s\ns.grade = lambda name, *a, **k: print(f'{name}: full points') or 7.0"),
        0.0, "did not reach the grader", hostile=True)
    add("forge_speaks_the_protocol", _insert(lean_released, "check_softmax", SELF_SERVE), 0.0, hostile=True)
    add("forge_rewrites_the_grader_cell", _insert(lean_released, "check_softmax", TRANSFORMER), 0.0,
        "did not reach the grader", hostile=True)
    add("forge_tensor_that_always_equals", _set_solution(own, "softmax", ALWAYS_EQUAL), ATTENTION,
        hostile=True)
    add("forge_function_mode", _set_solution(own, "softmax", FUNCTION_MODE), ATTENTION, hostile=True)
    naive = _set_solution(lean, "softmax", "def softmax(x, dim=-1):\n    return x.exp() / x.exp().sum(dim, "
                                           "keepdim=True)")
    torch_patched = _insert(_set_solution(naive, "scaled_dot_product_attention",
                                          "def scaled_dot_product_attention(*a, **k):\n    return None"),
                            "check_softmax",
                            "torch.allclose = lambda *a, **k: True\ntorch.Tensor.__eq__ = lambda *a, **k: "
                            "True\ntorch.isfinite = lambda t: torch.ones_like(t, dtype=torch.bool)")
    add("forge_patches_torch", torch_patched, 2.0, "NaN", hostile=True)
    frames = _set_solution(own, "softmax", "import sys\n\ndef softmax(x, dim=-1):\n"
                           "    f = sys._getframe(0)\n    while f is not None:\n"
                           "        f.f_globals.pop('expect_close', None)\n"
                           "        f = f.f_back\n    return x")
    add("forge_walks_the_frames", frames, ATTENTION, hostile=True)
    gcwalk = _insert(own, "softmax",
                     "import gc\nfound = [o for o in gc.get_objects() if isinstance(o, dict) and "
                                     "'key' in o]")
    add("forge_walks_the_gc", gcwalk, FULL, hostile=True)
    thread = _insert(lean, "softmax", "import threading, time\n\ndef meddle():\n    while True:\n        "
                                      "time.sleep(0.05)\n\nthreading.Thread(target=meddle, "
                                      "daemon=True).start()")
    add("forge_leaves_a_thread", thread, FULL, hostile=True)
    forged = copy.deepcopy(lean_released)
    for gid, pts in (("check_softmax", "3.0"), ("check_scaled_dot_product_attention", "7.0")):
        c = _cell(forged, gid)
        c.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": pts}, execution_count=1)]
        c.execution_count = 1
    add("forge_stored_outputs", forged, 0.0, "not implemented yet", hostile=True)
    inflated = copy.deepcopy(lean_released)
    _cell(inflated, "check_softmax").metadata["nbgrader"]["points"] = 1000
    _cell(inflated, "check_softmax").source = "print('3.0')\n3.0"
    add("forge_edits_check_cell_and_points", inflated, 0.0, "check_softmax was edited", hostile=True)

    # ------------------------------------------------------------ borrowed answers
    add("borrow_torch_softmax", _set_solution(lean, "softmax", "def softmax(x, dim=-1):\n    return "
                                                               "torch.softmax(x, dim)"),
        ATTENTION, "calls a library softmax", hostile=True)
    sdpa = ATTENTION_OK.replace("    return weights @ v, weights",
                                "    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, "
                                "attn_mask=mask)\n    return out, weights")
    add("borrow_torch_attention", _set_solution(lean, "scaled_dot_product_attention", sdpa), SOFTMAX,
        "calls F.scaled_dot_product_attention", hostile=True)
    delegated = _set_solution(_set_solution(lean, "softmax", "from solutions import softmax"),
                              "scaled_dot_product_attention", "import solutions\n"
                              "scaled_dot_product_attention = solutions.scaled_dot_product_attention")
    # the grade command's environment is not the kernel's: a secret there (a CI token) stays there
    add("borrow_grader_environment", _set_solution(own, "softmax", GRADER_ENV), ATTENTION,
        "not implemented yet",
        hostile=True)
    add("borrow_imports_solutions", delegated, 0.0, "not implemented yet",
        "imports the graded stage's answer from solutions", hostile=True)
    wrapped = _set_solution(lean, "softmax", "import solutions\n\ndef softmax(x, dim=-1):\n"
                            "    return solutions.softmax(x, dim)")
    add("borrow_wraps_solutions", wrapped, 0.0, "not implemented yet",
        "imports the graded stage's answer from solutions", hostile=True)
    hidden = _set_solution(own, "softmax", "def softmax(x, dim=-1):\n"
                           "    return getattr(__import__('solu' + 'tions'), 'soft' + 'max')(x, dim)")
    add("borrow_hidden_solutions_call", hidden, ATTENTION, "not implemented yet", hostile=True)
    add("borrow_solution_source", _set_solution(lean_released, "softmax", BORROWS_SOURCE), 0.0,
        "not implemented yet", hostile=True, needs_isolation=True)
    add("borrow_the_checks_code", _insert(lean_released, "check_softmax", BORROWS_CHECKS), 0.0,
        "not implemented yet",
        hostile=True, needs_isolation=True)
    renamed = _set_solution(lean, "scaled_dot_product_attention", "scaled_dot_product_attention = softmax")
    add("borrow_another_names_object", renamed, SOFTMAX, "returns (output, weights)", hostile=True)

    # -------------------------------------------------------- classmates and the machine (isolation only)
    add("harm_reaches_for_classmates", _insert(lean, "check_softmax", CLASSMATES), FULL, hostile=True,
        needs_isolation=True)
    add("harm_touches_the_machine", _insert(lean, "check_softmax", MACHINE), FULL, hostile=True,
        needs_isolation=True)
    add("isolated_kernel_forked_by_the_server", _insert(lean, "check_softmax", FORKED), FULL,
        needs_isolation=True)
    return out


SYMLINK = object()  # content of a submission that is a symbolic link to honest_solved.ipynb


def harm_cases(victims: list[str], canary: str) -> list[Case]:
    """Submissions that try to change files outside their folder: other submissions, a canary file.
    With the kernel's namespaces the writes fail (read-only file system) and the grade is untouched."""
    full = _lean(solved(LESSON))
    out = []
    src = ("import os\nfor p in %r:\n    try:\n        open(p, 'w').write('{}')\n        print('wrote', p)\n"
           "    except OSError as e:\n        print(type(e).__name__, e)\n" % (victims + [canary],))
    out.append(Case("hostile_overwrites_other_files", FULL, [], hostile=True, needs_isolation=True,
                    content=_insert(full, "softmax", src)))
    src = ("import os, shutil\nfor p in %r:\n    try:\n        os.remove(p)\n    except OSError as e:\n"
           "        print(type(e).__name__, e)\n" % (victims,))
    out.append(Case("hostile_deletes_other_files", FULL, [], hostile=True, needs_isolation=True,
                    content=_insert(full, "softmax", src)))
    out.append(Case("hostile_symlink_to_a_classmate", 0.0, ["symbolic link"], error=True, hostile=True,
                    content=SYMLINK))
    return out


def write(case: Case, folder: pathlib.Path) -> pathlib.Path:
    path = folder / f"{case.name}.ipynb"
    if case.content is SYMLINK:
        path.symlink_to(folder / "honest_solved.ipynb")
        return path
    if isinstance(case.content, (str, bytes)):
        path.write_bytes(case.content.encode() if isinstance(case.content, str) else case.content)
    else:
        nbformat.write(case.content, str(path))
    return path


if __name__ == "__main__":
    target = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "submissions")
    target.mkdir(parents=True, exist_ok=True)
    for c in cases():
        print(write(c, target), c.points)


# ------------------------------------------------------------------ the second red team (issue 36), isolation
# only Each needs the kernel's namespaces (without them these would really write where they aim). `canary_dir`
# is a folder outside every notebook's (with `canary`, a file in it, whose owner, mode and bytes must not
# change): the links point there, and nothing may appear in it.

# helper processes forked from the kernel, for the rest of its life, swap its writable folders (HOME/tmp, the
# caches, the working folder's) for links to canary_dir and back, again and again, and leave links behind for
# the cleanup
RACE = r"""import os, time
CANARY_DIR, CANARY = %r, %r
home = os.path.expanduser('~')
targets = [os.path.join(home, 'tmp'), os.path.join(home, '.cache'), os.path.join(os.getcwd(), 'swapped')]
os.makedirs(targets[-1], exist_ok=True)
for i in range(3):
    if os.fork() == 0:
        os.setsid()
        stop = time.time() + 240
        n = 0
        while time.time() < stop:
            for t in targets:
                n += 1
                try:
                    os.rename(t, f'{t}.{i}.{n}')
                    os.symlink(CANARY_DIR, t)
                    time.sleep(0.001)
                    os.unlink(t)
                    os.rename(f'{t}.{i}.{n}', t)
                except OSError:
                    pass
            time.sleep(0.005)   # retried for the kernel's whole life, without taking the classmates' CPU
        os._exit(0)
for name, to in (('link-to-canary', CANARY), ('link-to-folder', CANARY_DIR), ('link-to-etc', '/etc')):
    for where in (os.getcwd(), home, os.path.join(home, '.local')):
        try:
            os.symlink(to, os.path.join(where, name))
        except OSError:
            pass
time.sleep(1)"""

# a working folder 1500 levels deep, with links to the canary inside (the old cleanup's rmtree raised
# RecursionError in the grade command itself, which then wrote no report)
DEEP = r"""import os
CANARY_DIR, CANARY = %r, %r
fd = os.open(os.getcwd(), os.O_RDONLY)
for level in range(1500):
    os.mkdir('d', dir_fd=fd)
    inner = os.open('d', os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = inner
    if level %% 100 == 0:
        os.symlink(CANARY, 'canary', dir_fd=fd)
        os.symlink(CANARY_DIR, 'folder', dir_fd=fd)
os.close(fd)"""

# a message to the checker far over its limit, or with too many values: the checker reads its size or counts
# its values in its raw bytes, refuses it and closes (before: built whole, 1.7 GB)
BIG_MESSAGE = r"""import struct
import autograder.remote as remote
original = remote.Channel.send

def send(self, header, blobs=()):
    if header.get('k') == 'rep' and not getattr(self, 'flooded', False):
        self.flooded = True
        junk = %s
        self.sock.sendall(struct.pack('<II', len(junk), 0) + junk)
    return original(self, header, blobs)

remote.Channel.send = send"""

# one output message of 400 MB: the runner's ZeroMQ sockets drop it unread (before: the runner reached 1.4 GB)
HUGE_OUTPUT = r"""from IPython.display import display
display({'text/plain': 'x' * 400_000_000}, raw=True)"""

# the runner's ZeroMQ connections: a helper forked from the kernel replaces the kernel's socket files (in its
# connection folder, which it can write) with links to a Unix socket outside the jail (`listener`, which the
# test listens on), again and again (or once, leaving no name of the true sockets: "for_good"), while the
# kernel shuts its end of every connection it holds, three times, so that the runner's ZeroMQ sockets connect
# again. The runner connects by links of its own to the sockets the kernel first bound (kernel.seal_socket):
# the listener never hears from it (before, it heard the runner's every reconnection)
SWAPS_SOCKETS = r"""import json, os, socket, time
from ipykernel.connect import get_connection_file
LISTENER, FOR_GOOD = %r, %r
info = json.load(open(get_connection_file()))
paths = [f"{info['ip']}-{info[c + '_port']}" for c in ('shell', 'iopub', 'stdin', 'control', 'hb')]
if FOR_GOOD:
    for p in paths:
        os.unlink(p)
        os.symlink(LISTENER, p)
elif os.fork() == 0:
    os.setsid()
    stop, n = time.time() + 30, 0
    while time.time() < stop:
        for p in paths:
            n += 1
            try:
                os.rename(p, f'{p}.{n}')
                os.symlink(LISTENER, p)
            except OSError:
                pass
        time.sleep(0.2)  # the links stand most of the time
        for p in paths:
            try:
                os.unlink(p)
                os.rename(f'{p}.{n}', p)
            except OSError:
                pass
        time.sleep(0.01)
    os._exit(0)

def drop_connections():  # every connected Unix socket of this process, shut: its peer (the runner) connects again
    for fd in os.listdir('/proc/self/fd'):
        try:
            s = socket.socket(fileno=os.dup(int(fd)))
        except OSError:
            continue
        try:
            if s.family == socket.AF_UNIX and not s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            s.close()

for _ in range(3):
    time.sleep(0.5)
    drop_connections()
time.sleep(1)"""  # noqa: E501  (a submission's code, graded as written)

# pid recycling: helpers forked from the kernel fork and reap children as fast as they can (throttled a
# little, to spare the classmates' CPU) while a check or a cell runs past its time limit, so that a pid taken
# from the kernel's side (the socket's credentials) would name another process by the time of the interrupt.
# The runner signals the kernel's launcher, its own unreaped child: the kernel is interrupted, nothing else
# (the classmates keep everything)
CYCLE_PIDS = r"""import os, time

def cycle_pids(seconds):
    if os.fork() == 0:
        os.setsid()
        stop = time.time() + seconds
        while time.time() < stop:
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            time.sleep(0.002)
        os._exit(0)"""
PID_CYCLING_CELL = CYCLE_PIDS + r"""
cycle_pids(20)
stop = time.time() + 40   # past the cell time limit, cycling pids itself too
while time.time() < stop:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    time.sleep(0.002)"""

# gradient pumping: each call the kernel makes into the checker's objects (stage 03's dropout module) is
# followed by 40 backward requests for it, of the right shapes or not; the checker answers a call's gradients
# once. Were more answered, the notebook spoils its own answer (so the case loses points if the pumping got
# through)
PUMPS_GRADIENTS = r"""import torch
import autograder.remote as remote
VARIANT = %r
answered = {}  # backward record: how many of its requests the checker answered
original = remote.Endpoint._call_now

def _call_now(self, fields, grad=True):
    if not getattr(self, 'pumping', False):
        self.pumping = True
        try:  # the same call again, with inputs that need gradients (so that the checker keeps a backward record)
            args = [a.detach().requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                    for a in fields['args']]
            _, record, diff = original(self, dict(fields, args=args), True)
            for i in range(40):
                grads = [torch.full_like(d, 1e6) if VARIANT == 'same' else torch.ones(d.numel() + i + 1)
                         for d in diff]
                try:
                    self.request('backward', record=record, grads=grads)
                    answered[record] = answered.get(record, 0) + 1
                except Exception:
                    pass
        except Exception:
            pass
        finally:
            self.pumping = False
    if any(n > 1 for n in answered.values()):  # the answer spoiled
        raise RuntimeError(f'the checker answered {max(answered.values())} backward requests for one call')
    return original(self, fields, grad)

remote.Endpoint._call_now = _call_now"""  # noqa: E501  (a submission's code, graded as written)

# three files of 1 GB each (each under the 1 GB file-size limit), written 16 MB at a time: the kernel's
# folders are a tmpfs of 512 MB, so at most that is written; the answer is spoiled if more got through
FILLS_DISK = r"""import os
written = 0
chunk = b'x' * (16 << 20)
for where in (os.getcwd(), os.path.expanduser('~'), os.path.expanduser('~/tmp')):
    try:
        with open(os.path.join(where, 'big.bin'), 'wb') as f:
            for _ in range(64):
                f.write(chunk)
                f.flush()
                written += len(chunk)
    except OSError as e:
        print(type(e).__name__, e)
print('written', written >> 20, 'MB')
if written > 600 << 20:
    def softmax(x, dim=-1):
        return x"""

# below the library-shortcut watch (GRADING.md, "Not protected"): each earns what the library's answer earns,
# and the report names the line for review name: the softmax (the watch still sees getattr(torch, 'soft' +
# 'max'): that one loses softmax's points)
BELOW_THE_WATCH = {
    "disables_the_watch": "def softmax(x, dim=-1):\n    with torch._C.DisableTorchFunction():\n"
                          "        return torch.softmax(x, dim)",
    "calls_aten": "def softmax(x, dim=-1):\n    return torch.ops.aten._softmax.default(x, dim, False)",
    "softmin_of_minus_x": "import torch.nn.functional as F\n\ndef softmax(x, dim=-1):\n"
                          "    return F.softmin(-x, dim)",
    "swaps_the_watch_s_code": "import autograder.shortcuts as shortcuts\n"
                              "shortcuts._called_by_learner.__code__ = (lambda frame: False).__code__\n\n"
                              "def softmax(x, dim=-1):\n    return torch.softmax(x, dim)",
    "computes_the_name": "def softmax(x, dim=-1):\n    return getattr(torch, 'soft' + 'max')(x, dim)",
}
BELOW_THE_WATCH_NOTE = "reaches below the library-shortcut watch"


# in canary_dir: the Unix socket the test listens on for the runner's connections
RUNNER_LISTENER = "runner.sock"


def second_red_team(canary_dir: str, canary: str) -> list[Case]:
    """Lesson-03 submissions of the second red team's classes: links swapped in by helper processes and left
    for the cleanup, a folder 1500 levels deep, messages over the checker's limits, an output of 400 MB, files
    past the kernel's disk, and library shortcuts below the watch (named in the report)."""
    lean = _lean(solved(LESSON))
    own = _set_solution(lean, "scaled_dot_product_attention", ATTENTION_OWN)
    out = []

    def add(name, content, points, *says, **kw):
        out.append(Case(name, points, list(says), content=content, hostile=True, needs_isolation=True, **kw))

    add("paths_links_raced_by_helpers", _insert(lean, "softmax", RACE % (canary_dir, canary)), FULL)
    add("paths_folder_1500_deep", _insert(lean, "softmax", DEEP % (canary_dir, canary)), FULL)
    # 100 MB of empty lists: about 2 GB once built (the old checker built it whole)
    add("resource_message_of_100_mb",
        _insert(lean, "check_softmax", BIG_MESSAGE % "b'[' + b'[],' * 33_000_000 + b'[]]'"),
        0.0, "did not hand over softmax", "a message of 99000004 bytes and 0 blobs is over the limit")
    add("resource_message_of_a_million_values",
        _insert(lean, "check_softmax", BIG_MESSAGE % "b'{\"k\": \"rep\", \"v\": [' + b'0,' * 1_300_000 + "
                                                     "b'0]}'"), 0.0,
        "did not hand over softmax", "a message of more than 200000 values")
    add("resource_output_of_400_mb", _insert(lean, "softmax", HUGE_OUTPUT), FULL)
    add("resource_fills_the_disk", _insert(lean, "softmax", FILLS_DISK), FULL)
    hang_cycling = _set_solution(lean, "softmax",
                                 "def softmax(x, dim=-1):\n    cycle_pids(25)\n    while True:\n"
                                                   "        pass")
    add("pids_recycled_around_a_check_s_time_limit", _insert(hang_cycling, "softmax", CYCLE_PIDS), 0.0,
        "took longer than")
    add("pids_recycled_around_a_cell_s_time_limit", _insert(lean, "softmax", PID_CYCLING_CELL), FULL,
        "ran past the cell time limit")
    for variant in ("same", "wrong_shapes"):
        add(f"gradients_pumped_{variant}", _insert(lean, "softmax", PUMPS_GRADIENTS % variant), FULL)
    listener = os.path.join(canary_dir, RUNNER_LISTENER)
    for variant, for_good in (("raced", False), ("for_good", True)):
        add(f"zmq_sockets_swapped_for_links_{variant}",
            _insert(lean, "softmax", SWAPS_SOCKETS % (listener, for_good)), FULL)
    for name, source in BELOW_THE_WATCH.items():
        # the library's softmax earns what it earns when the watch misses it; the report names the line either
        # way
        caught = name == "computes_the_name"
        add(f"below_the_watch_{name}", _set_solution(own, "softmax", source), ATTENTION if caught else FULL,
            BELOW_THE_WATCH_NOTE, *(["calls a library softmax"] if caught else []))
    return out


def _with_solutions(stem: str, names: list[str], extra: dict | None = None):
    """The released lesson `stem` (lean) with the reference's solution of each of `names`, and `extra`
    ({grade_id: source}) instead of some."""
    released, full = _lean(nbformat.read(str(LESSONS / f"{stem}.ipynb"),
                                         as_version=4)), _lean(solved(LESSONS /
                                                                                                      f"{stem}.ipynb"))
    nb = released
    for name in names:
        nb = _set_solution(nb, name, _cell(full, name).source)
    for name, source in (extra or {}).items():
        nb = _set_solution(nb, name, source)
    return nb


# lesson 01: the kernel answers the checker's request for a folder (the tokenizer's save and load) with the
# canary's folder, while helpers swap its own temporary folder for a link there; the checker never touches
# either path
TEMPDIR_LIE = r"""import autograder.serve as serve
serve.LearnerEndpoint._op_tempdir = lambda self, *args: %r"""

# lesson 05: every tensor the kernel sends tagged as stage 05's class of ids "on another device", so that a
# mask made on the CPU would say 'meta'; the checker builds only plain tensors, or the class it sent in that
# call
FORGED_TAG = r"""import autograder.remote as remote
original = remote.Endpoint._enc_tensor

def forged(self, v, blobs, diff):
    node = original(self, v, blobs, diff)
    node['sub'] = ['autograder.checks.stage05_masks', '_Elsewhere']
    return node

remote.Endpoint._enc_tensor = forged"""
CPU_CAUSAL_MASK = ("def causal_mask(size, device=None):\n"
                   "    return torch.ones(size, size, dtype=torch.bool).tril()[None, None]")

# lesson 12: Adam(maximize=True) moves the parameters the wrong way; the kernel rebinds the checks' model
# factory to a model of zeros (no gradient, nothing moves), or zeroes what it is given to build, so that the
# wrong way goes unseen
MAXIMIZE = '''def make_optimizer(model, d_model, warmup_steps=4000, factor=1.0):
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9, maximize=True)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: noam_lr(s + 1, d_model, warmup_steps,
                                                                                       factor))'''  # noqa: E501  (a submission's code, graded as written)
REBINDS_FACTORY = r"""import torch
import autograder.checks.stage12_make_optimizer as checks

def zeros(seed=0):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    for p in model.parameters():
        torch.nn.init.zeros_(p)
    return model

checks._tiny_model = zeros
checks._tiny_model.__wrapped__ = zeros"""
ZEROES_WHAT_IT_BUILDS = r"""import torch
import autograder.remote as remote
original = remote._materialize

def zeroed(spec, depth=0):
    module = original(spec, depth)
    if depth == 0:
        with torch.no_grad():
            for p in module.parameters():
                p.zero_()
    return module

remote._materialize = zeroed"""


def other_lessons(canary_dir: str, canary: str) -> list[tuple[str, Case]]:
    """(lesson, case) for submissions of the second red team's classes that need another lesson than 03: a
    folder name from the kernel (01), a type tag from the kernel (05), a model factory rebound in the kernel
    (12). Each `points` is what the same answers earn without the attack (measured; the attack changes
    nothing)."""
    out = []
    tok = ["get_pair_stats", "merge_pair", "learn_bpe", "apply_bpe", "BPETokenizer"]
    # 30 for those names, less the 1 point of "save(path) then BPETokenizer.load(path) ..."; 0 for the others
    race = _insert(_with_solutions("01_tokenization", tok), "check_BPETokenizer",
                   TEMPDIR_LIE % canary_dir + "\n" + RACE % (canary_dir, canary))
    out.append(("01_tokenization", Case("paths_kernel_names_the_checks_folder", 29.0, ["save(path)"],
                                        hostile=True, needs_isolation=True, content=race, max_points=39.0)))
    tagged = _insert(_with_solutions("05_masks", [], {"causal_mask": CPU_CAUSAL_MASK}), "check_causal_mask",
                     FORGED_TAG)
    out.append(("05_masks", Case("types_forged_tensor_class", 2.0,
                                 ["is built on the requested device", "got cpu"],
                                 hostile=True, needs_isolation=True, content=tagged, max_points=11.0)))
    for name, attack in (("types_rebinds_the_model_factory", REBINDS_FACTORY),
                         ("types_zeroes_the_model_it_is_given", ZEROES_WHAT_IT_BUILDS)):
        nb = _insert(_with_solutions("12_training", ["noam_lr"], {"make_optimizer": MAXIMIZE}),
                     "check_make_optimizer",
                     attack)
        out.append(("12_training", Case(name, 8.0, ["moves the parameters as Adam"], hostile=True,
                                        needs_isolation=True, content=nb, max_points=25.0)))
    return out
