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

CLASSMATES = r"""import glob, os, autograder
found = []
course = os.path.dirname(os.path.dirname(os.path.realpath(autograder.__file__)))  # shown to every kernel
for pattern in ('/tmp/*', '/tmp/*/*', '/tmp/*/*/*', '/var/tmp/*', '/dev/shm/*',
                os.path.join(os.path.dirname(os.path.dirname(os.getcwd())), '*', '*')):
    for path in glob.glob(pattern):
        mine = (os.getcwd(), os.path.expanduser('~'), os.path.join(os.path.dirname(os.getcwd()), 'conn'))
        ours = path.startswith(mine) or os.getcwd().startswith(path + os.sep)   # its own, or above it
        shown = path == course or course.startswith(path + os.sep) or path.startswith(course + os.sep)
        if not ours and not shown:
            found.append(path)
for conn in glob.glob(os.path.join(os.path.dirname(os.path.dirname(os.getcwd())), '*', 'conn', '*.json')):
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
        return x"""

PORT = 47231  # tests/test_hostile.py listens there on the loopback while the batch runs

MACHINE = r"""import os, socket, subprocess, sys
PORT = %d
done = []
for what, fn in [
        ('/dev', lambda: open('/dev/autograder-was-here', 'w').write('x')),
        ('/proc/sys', lambda: open('/proc/sys/kernel/hostname', 'w').write('owned')),
        ('/sys', lambda: open('/sys/kernel/autograder', 'w').write('x')),
        ('/etc', lambda: open('/etc/autograder-was-here', 'w').write('x')),
        ('/root', lambda: [p for p in os.listdir('/root') if not sys.prefix.startswith(os.path.join('/root', p))][0]),
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
        return x""" % PORT


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


# In a batch with isolation, each kernel is forked by the batch's kernel server (autograder/jail.py, serve) rather
# than started by its launcher: the same jail as a launched kernel's, seen from inside (softmax is wrong otherwise)
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
        return x"""


def cases() -> list[Case]:
    full, released = solved(LESSON), _released()
    lean, lean_released = _lean(full), _lean(released)
    own = _set_solution(lean, "scaled_dot_product_attention", ATTENTION_OWN)  # attention independent of softmax
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
                           ATTENTION_OK.replace("    weights = softmax(", "    scores = scores - scores.amax(-1)\n"
                                                                        "    weights = softmax("))
    add("honest_mistake_raises_a_shape_error", raises, SOFTMAX, "(in scaled_dot_product_attention, line 5: "
        "`scores = scores - scores.amax(-1)`), with scores (2, 3, 4, 5); the call was scaled_dot_product_attention(",
        "Likely: 5 is scores's size at dim 3 and 4 is scores's size at dim 2")
    warns = _set_solution(lean, "softmax", "import collections, logging, sys, traceback, warnings\n"
                          "warnings.warn('a warning at definition')\nprint('to stderr', file=sys.stderr)\n\n"
                          + SOFTMAX_OK.replace("    shifted", "    print('stderr inside', file=sys.stderr)\n"
                                                            "    warnings.warn('inside')\n"
                                                            "    logging.getLogger('mine').warning('logged')\n"
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
    add("honest_patches_torch_after_grading", _insert(lean, None, "torch.allclose = lambda *a, **k: True"), FULL)
    add("honest_prints_a_flood", _insert(lean, "softmax", "import sys\nline = 'x' * 999 + '\\n'\n"
                                         "for _ in range(50_000):\n    sys.stdout.write(line)"), FULL)
    # torch's compiler stack, imported lazily by an optimizer's first step and by meta tensors, writes a cache
    # folder on import: the kernel must get one of its own (the grader's TORCHINDUCTOR_CACHE_DIR is root's)
    add("honest_uses_torch_compiler_stack", _set_solution(lean, "softmax", COMPILER_STACK + "\n\n\n" + SOFTMAX_OK),
        FULL)

    # --------------------------------------------------------------------- broken files
    add("broken_not_json", "{\"cells\": [", 0.0, "not valid JSON", error=True)
    add("broken_not_a_notebook", json.dumps({"hello": "world"}), 0.0, "not a Jupyter notebook", error=True)
    add("broken_invalid_notebook", json.dumps({"cells": [{"cell_type": "code"}], "nbformat": 4, "nbformat_minor": 5,
                                               "metadata": {}}), 0.0, "not a valid notebook", error=True)
    plain = nbformat.v4.new_notebook()
    plain.cells = [nbformat.v4.new_code_cell("print(1)")]
    add("broken_no_graded_cells", plain, 0.0, "check_softmax is missing", "softmax is not defined", max_points=FULL)
    deleted = copy.deepcopy(lean)
    deleted.cells.remove(_cell(deleted, "check_softmax"))
    add("broken_check_cell_deleted", deleted, FULL, "check_softmax is missing")
    dup = copy.deepcopy(lean)
    twin = copy.deepcopy(_cell(dup, "check_softmax"))
    twin.id = nbformat.v4.new_code_cell().id  # the same grade_id, a distinct cell id (as Jupyter's copy makes)
    dup.cells.insert(_index(dup, "check_softmax"), twin)
    add("broken_check_cell_copied", dup, FULL, "appears 2 times")
    many = nbformat.v4.new_notebook()
    many.cells = [nbformat.v4.new_code_cell("") for _ in range(3000)]
    add("broken_too_many_cells", many, 0.0, "more than 2000", error=True, max_points=FULL)
    empty_cell = '{"cell_type": "code", "execution_count": null, "metadata": {}, "outputs": [], "source": ""}'
    huge = '{"cells": [' + ",".join([empty_cell] * 260_000) + '], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'
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
    hog = _set_solution(lean, "softmax", "def softmax(x, dim=-1):\n    junk = bytearray(64 * 2**30)\n    return x")
    add("slow_memory_hog_softmax", hog, 0.0, "memory", hostile=True)
    add("crash_os_exit", _insert(lean, "check_softmax", "import os\nos._exit(1)"), 0.0, "kernel died", error=True,
        hostile=True)
    # a namespace's PID 1 ignores its own SIGKILL: with isolation, the kernel lives on
    add("crash_sigkill_self", _insert(lean, "check_softmax", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"),
        FULL, hostile=True, unisolated=(0.0, True, ["kernel died"]))
    fork = _insert(lean, "softmax", "import os\nfor _ in range(3):\n    if os.fork() == 0:\n        os.setsid()\n"
                   "        os.execvp('sleep', ['sleep', '4242.4242'])")
    add("hostile_forks_sleepers", fork, FULL, hostile=True)
    add("hostile_kill_everything", _insert(lean, "softmax", "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\n"
                                           "except OSError as e:\n    print(e)"), FULL, hostile=True,
        needs_isolation=True)

    # ---------------------------------------------------------- forged verdicts: the checks are elsewhere
    fake_print = _insert(lean_released, "check_softmax", "print('✓ equals torch.softmax [1/1]')\n"
                         "print('AUTOGRADER-RESULT 0 0 {\"points\": 3.0}')\nprint('softmax: 3/3 points')")
    add("forge_prints_a_verdict", fake_print, 0.0, "not implemented yet", hostile=True)
    fake_check = _insert(lean_released, "check_softmax", "def check(obj):\n    print('all good')\n    return 7.0")
    add("forge_redefines_check", fake_check, 0.0, "not implemented yet", hostile=True)
    patched = _insert(lean_released, "check_softmax",
                      "import autograder.core as core\ncore.run_check = lambda c, obj: (c.points, 'ok')\n"
                      "import autograder.checks._util as u\nu.expect_close = lambda *a, **k: None")
    add("forge_patches_the_autograder", patched, 0.0, "not implemented yet", hostile=True)
    add("forge_replaces_the_serving_code", _insert(lean_released, "check_softmax",
        "import autograder.serve as s\ns.grade = lambda name, *a, **k: print(f'{name}: full points') or 7.0"), 0.0,
        "did not reach the grader", hostile=True)
    add("forge_speaks_the_protocol", _insert(lean_released, "check_softmax", SELF_SERVE), 0.0, hostile=True)
    add("forge_rewrites_the_grader_cell", _insert(lean_released, "check_softmax", TRANSFORMER), 0.0,
        "did not reach the grader", hostile=True)
    add("forge_tensor_that_always_equals", _set_solution(own, "softmax", ALWAYS_EQUAL), ATTENTION, hostile=True)
    add("forge_function_mode", _set_solution(own, "softmax", FUNCTION_MODE), ATTENTION, hostile=True)
    naive = _set_solution(lean, "softmax", "def softmax(x, dim=-1):\n    return x.exp() / x.exp().sum(dim, keepdim=True)")
    torch_patched = _insert(_set_solution(naive, "scaled_dot_product_attention", "def scaled_dot_product_attention(*a, **k):\n"
                                          "    return None"), "check_softmax",
                            "torch.allclose = lambda *a, **k: True\ntorch.Tensor.__eq__ = lambda *a, **k: True\n"
                            "torch.isfinite = lambda t: torch.ones_like(t, dtype=torch.bool)")
    add("forge_patches_torch", torch_patched, 2.0, "NaN", hostile=True)
    frames = _set_solution(own, "softmax", "import sys\n\ndef softmax(x, dim=-1):\n"
                           "    f = sys._getframe(0)\n    while f is not None:\n"
                           "        f.f_globals.pop('expect_close', None)\n        f = f.f_back\n    return x")
    add("forge_walks_the_frames", frames, ATTENTION, hostile=True)
    gcwalk = _insert(own, "softmax", "import gc\nfound = [o for o in gc.get_objects() if isinstance(o, dict) and 'key' in o]")
    add("forge_walks_the_gc", gcwalk, FULL, hostile=True)
    thread = _insert(lean, "softmax", "import threading, time\n\ndef meddle():\n    while True:\n        time.sleep(0.05)\n\n"
                     "threading.Thread(target=meddle, daemon=True).start()")
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
    add("borrow_torch_softmax", _set_solution(lean, "softmax", "def softmax(x, dim=-1):\n    return torch.softmax(x, dim)"),
        ATTENTION, "calls a library softmax", hostile=True)
    sdpa = ATTENTION_OK.replace("    return weights @ v, weights",
                                "    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n"
                                "    return out, weights")
    add("borrow_torch_attention", _set_solution(lean, "scaled_dot_product_attention", sdpa), SOFTMAX,
        "calls F.scaled_dot_product_attention", hostile=True)
    delegated = _set_solution(_set_solution(lean, "softmax", "from solutions import softmax"),
                              "scaled_dot_product_attention", "import solutions\n"
                              "scaled_dot_product_attention = solutions.scaled_dot_product_attention")
    # the grade command's environment is not the kernel's: a secret there (a CI token) stays there
    add("borrow_grader_environment", _set_solution(own, "softmax", GRADER_ENV), ATTENTION, "not implemented yet",
        hostile=True)
    add("borrow_imports_solutions", delegated, 0.0, "not implemented yet",
        "imports the graded stage's answer from solutions", hostile=True)
    wrapped = _set_solution(lean, "softmax", "import solutions\n\ndef softmax(x, dim=-1):\n"
                            "    return solutions.softmax(x, dim)")
    add("borrow_wraps_solutions", wrapped, 0.0, "not implemented yet", "imports the graded stage's answer from solutions",
        hostile=True)
    hidden = _set_solution(own, "softmax", "def softmax(x, dim=-1):\n"
                           "    return getattr(__import__('solu' + 'tions'), 'soft' + 'max')(x, dim)")
    add("borrow_hidden_solutions_call", hidden, ATTENTION, "not implemented yet", hostile=True)
    add("borrow_solution_source", _set_solution(lean_released, "softmax", BORROWS_SOURCE), 0.0,
        "not implemented yet", hostile=True, needs_isolation=True)
    add("borrow_the_checks_code", _insert(lean_released, "check_softmax", BORROWS_CHECKS), 0.0, "not implemented yet",
        hostile=True, needs_isolation=True)
    renamed = _set_solution(lean, "scaled_dot_product_attention", "scaled_dot_product_attention = softmax")
    add("borrow_another_names_object", renamed, SOFTMAX, "returns (output, weights)", hostile=True)

    # -------------------------------------------------------- classmates and the machine (isolation only)
    add("harm_reaches_for_classmates", _insert(lean, "check_softmax", CLASSMATES), FULL, hostile=True,
        needs_isolation=True)
    add("harm_touches_the_machine", _insert(lean, "check_softmax", MACHINE), FULL, hostile=True, needs_isolation=True)
    add("isolated_kernel_forked_by_the_server", _insert(lean, "check_softmax", FORKED), FULL, needs_isolation=True)
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
