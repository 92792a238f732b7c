"""The machinery of `check`: a registry of checks per contract name, a time limit per check, silence on
stderr, and messages that say what was expected, what came back, and the likely mistake."""
from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import threading
import traceback
import warnings
from dataclasses import dataclass
from typing import Callable

DEFAULT_TIMEOUT = 10.0  # seconds per check: generous for a correct CPU implementation, short for a hang


class CheckFailure(Exception):
    """A check's verdict on wrong code: what was checked, expected, got, and the likely cause."""

    def __init__(self, what: str, expected=None, got=None, hint: str | None = None):
        super().__init__(what)
        self.what, self.expected, self.got, self.hint = what, expected, got, hint

    def __str__(self):
        parts = [self.what]
        if self.expected is not None:
            parts.append(f"expected {self.expected}")
        if self.got is not None:
            parts.append(f"got {self.got}")
        text = "; ".join(parts)
        return text + (f". Likely: {self.hint}" if self.hint else "")


class CheckTimeout(Exception):
    pass


@dataclass
class Check:
    name: str          # the contract name it grades, e.g. "softmax"
    title: str         # what it verifies, one short line
    points: float
    fn: Callable       # fn(obj) -> None; raises CheckFailure (or anything) when obj is wrong
    timeout: float


REGISTRY: dict[str, list[Check]] = {}


def register(name: str, title: str, points: float = 1.0, timeout: float = DEFAULT_TIMEOUT):
    """Decorator: add a check for the contract name `name`."""
    def wrap(fn):
        REGISTRY.setdefault(name, []).append(Check(name, title, points, fn, timeout))
        return fn
    return wrap


def max_points(name: str) -> float:
    """The most that check() can return for the contract name `name`."""
    from . import checks  # noqa: F401  (fills the registry)
    if name not in REGISTRY:
        raise KeyError(f"no checks for {name!r}; known names: {', '.join(sorted(REGISTRY))}")
    return float(sum(c.points for c in REGISTRY[name]))


# ------------------------------------------------------------------------------------------ running
@contextlib.contextmanager
def _silenced():
    """Nothing reaches stderr (nbgrader zeroes a graded cell that writes there) and warnings are
    dropped; the learner's own prints during a check are swallowed too, so the check's lines stay clean."""
    sink = io.StringIO()
    saved_fd = None
    try:
        sys.stderr.flush()
        saved_fd = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)  # C-level writes (PyTorch's C++ warnings) too
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        saved_fd = None
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(sink), contextlib.redirect_stdout(sink):
            warnings.simplefilter("ignore")
            yield
    finally:
        if saved_fd is not None:
            os.dup2(saved_fd, 2)
            os.close(saved_fd)


def _alarm_available() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def _run_limited(fn: Callable, seconds: float):
    """Run fn() with a time limit: SIGALRM in the main thread (interrupts a Python loop), else a
    daemon thread that is abandoned when it overruns."""
    if _alarm_available():
        def on_alarm(signum, frame):
            raise CheckTimeout()
        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return fn()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001  (handed to the caller)
            box["error"] = e
    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        raise CheckTimeout()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _describe_exception(e: BaseException) -> str:
    """`TypeError: ... (in your_function, line 12: `the line`)`: the innermost frame of the learner's code (not the
    autograder's, not a library's), with its line as written."""
    frames = _learner_frames(e)
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    where = ""
    if frames:
        frame, lineno = frames[-1]
        line = _source_line(frame, lineno)
        where = f" (in {frame.f_code.co_name}, line {lineno}" + (f": `{line}`" if line else "") + ")"
    else:
        where = _remote_where(e)
    return f"{type(e).__name__}{': ' + msg[:300] if msg else ''}{where}"


def _remote_where(e: BaseException) -> str:
    """The same `(in f, line n: `line`)` for an error raised in the notebook's kernel and rebuilt here by the grade
    command's channel, from the frames it sent along (remote_frames: file, line number, function, line)."""
    frames = _remote_learner_frames(e)
    if not frames:
        return ""
    _, lineno, name, *rest = frames[-1]
    line = str(rest[0]).strip() if rest else ""
    line = line if len(line) <= 120 else line[:117] + "..."
    return f" (in {name}, line {lineno}" + (f": `{line}`" if line else "") + ")"


def _remote_learner_frames(e: BaseException) -> list:
    """The frames of the learner's code among those that the notebook's kernel sent with an error (file, line number,
    function, line), outermost first. By where the file is, as _frame_kind says: the kernel's cells live in a folder
    whose name may hold any word ("/tmp/autograder-x/home/tmp/ipykernel_1/2928958320.py")."""
    return [f for f in getattr(e, "remote_frames", None) or [] if isinstance(f, tuple) and len(f) >= 3
            and _frame_kind(str(f[0])) == "learner"]


def _learner_frames(e: BaseException) -> list:
    """(frame, line number) of each traceback entry in the learner's code, outermost first (none for an error rebuilt
    from the notebook's kernel: its frames are there, see _remote_where)."""
    if getattr(e, "remote_frames", None):
        return []
    out, tb = [], e.__traceback__
    while tb is not None:
        if _frame_kind(tb.tb_frame.f_code.co_filename) == "learner":
            out.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return out


def _source_line(frame, lineno) -> str:
    import linecache
    try:
        line = linecache.getline(frame.f_code.co_filename, lineno, frame.f_globals).strip()
    except Exception:  # noqa: BLE001  (no source: a compiled or generated function)
        return ""
    return line if len(line) <= 120 else line[:117] + "..."


def _shape_of(value):
    """The shape of a tensor or an array, as a tuple (None for anything else)."""
    shape = getattr(value, "shape", None)
    if shape is None or isinstance(value, type):
        return None
    try:
        return tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        return None


def _names_in(line: str) -> list[str]:
    import keyword
    import re
    seen = []
    for m in re.finditer(r"(?<![\w.])([A-Za-z_]\w*)", line):
        name = m.group(1)
        if not keyword.iskeyword(name) and name not in seen:
            seen.append(name)
    return seen


def failing_site(e: BaseException) -> dict | None:
    """The learner's innermost frame of an exception, as plain data: {"file", "line" (its number), "text" (the line as
    written), "shapes": {name: shape} of the tensors named on that line, "last": {name: shape} of the tensors that its
    function indexes as name[-1]}; None when no frame of the learner's code raised. A Likely is made from it
    (_shapes_hint); the notebook's kernel makes it there and sends it along with the error (serve.py), since the
    frame's locals stay on that side of the channel."""
    import inspect
    import re
    frames = _learner_frames(e)
    if not frames:
        return None
    frame, lineno = frames[-1]
    text, local_vars = _source_line(frame, lineno), frame.f_locals
    shapes = {n: s for n in _names_in(text) if n != "self" and n in local_vars
              and (s := _shape_of(local_vars[n])) is not None}
    try:
        source = inspect.getsource(frame.f_code)
    except (OSError, TypeError):
        source = ""
    last = {n: s for n in dict.fromkeys(re.findall(r"(?<![\w.])([A-Za-z_]\w*)\[-1\]", source))
            if (s := _shape_of(local_vars.get(n))) is not None}
    return {"file": frame.f_code.co_filename, "line": lineno, "text": text, "shapes": shapes, "last": last}


def _plain_shapes(value) -> dict:
    """{name: shape} from what the notebook's kernel sent: names and sizes checked, at most 16 of them."""
    out = {}
    if isinstance(value, dict):
        for name, shape in list(value.items())[:16]:
            if isinstance(name, str) and name.isidentifier() and len(name) <= 64 and isinstance(shape, list) \
                    and len(shape) <= 16 and all(type(d) is int and 0 <= d < 2 ** 48 for d in shape):
                out[name] = tuple(shape)
    return out


def _site(e: BaseException) -> dict | None:
    """failing_site of an error raised here, or the one the notebook's kernel sent with an error rebuilt by the grade
    command's channel (used only when it names the same frame as the frames sent along: file and line number)."""
    if not getattr(e, "remote_frames", None):
        return failing_site(e)
    site = getattr(e, "remote_site", None)
    frames = _remote_learner_frames(e)
    if not isinstance(site, dict) or not frames or str(site.get("file")) != frames[-1][0] \
            or str(site.get("line")) != str(frames[-1][1]):
        return None
    text = str(frames[-1][3]).strip() if len(frames[-1]) > 3 else ""
    return {"text": text if len(text) <= 120 else text[:117] + "...", "shapes": _plain_shapes(site.get("shapes")),
            "last": _plain_shapes(site.get("last"))}


def failing_line(e: BaseException) -> str:
    """The learner's line that raised `e` as written ("" when unknown), here or in the notebook's kernel: what a
    check reads before it names a cause, so that the cause it names is the one on that line."""
    site = _site(e)
    return site["text"] if site else ""


def _shapes_hint(e: BaseException) -> tuple[str, str | None]:
    """(the shapes of the tensors named on the learner's failing line, a 'Likely' made from them or None). The
    Likely only says which of those tensors' dimensions have the sizes that the error names (a size mismatch):
    a fact about this call, not a guess; None when the sizes do not point at exactly one dimension each."""
    import re
    site = _site(e)
    shapes = site["shapes"] if site else {}
    if not shapes:
        return "", None
    described = ", ".join(f"{n} {s}" for n, s in list(shapes.items())[:6])
    text = str(e)
    sizes = [int(v) for v in re.findall(r"size of tensor [ab] \((\d+)\)", text)]
    if len(sizes) != 2:
        m = re.search(r"shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)", text) or \
            re.search(r"()()Expected size (\d+) but got size (\d+)", text)
        sizes = [int(m.group(3)), int(m.group(4))] if m and not m.group(1) else \
            [int(m.group(2)), int(m.group(3))] if m else []
    if len(sizes) != 2 or sizes[0] == sizes[1]:
        return described, None
    last_item = _last_item_of_batch(site["last"], sizes)
    if last_item:
        return described, last_item
    owners = []
    for size in sizes:
        found = [(n, d) for n, s in shapes.items() for d, v in enumerate(s) if v == size]
        if len({n for n, _ in found}) != 1 and len(found) != 1:
            return described, None
        owners.append(found)
    (a, da), (b, db) = owners[0][0], owners[1][0]
    if len(owners[0]) > 1 or len(owners[1]) > 1:
        return described, None
    return described, (f"{sizes[0]} is {a}'s size at dim {da} and {sizes[1]} is {b}'s size at dim {db}: on this line "
                       f"the one stands where the other was needed (a sum or a mean without keepdim=True, an index, a "
                       "transpose or a view that took the wrong dimension)")


def _last_item_of_batch(last: dict, sizes) -> str | None:
    """`x[-1]` in the function, for a local tensor x of 3 or more dims whose batch (dim 0) has one of the sizes that the
    error says do not match: the last sentence of the batch was taken where the last position was meant (x[:, -1]),
    and the batch size is what went missing. `last`: {name: shape} of the names indexed as name[-1]."""
    for name, shape in last.items():
        if len(shape) >= 3 and shape[0] in sizes and shape[0] != shape[1]:
            return (f"{name}[-1] takes the last item of the batch ({name} is {shape}, dim 0 the batch of {shape[0]}), "
                    f"where the last position was meant: {name}[:, -1] keeps one row per sentence")
    return None


def _argument_text(value) -> str | None:
    """An argument as a message shows it: a tensor by its shape, a number, a bool or None as it is, a list or tuple by
    its length (None for anything else)."""
    shape = _shape_of(value)
    if shape is not None:
        return str(shape)
    if isinstance(value, (bool, int, float)) or value is None:
        return repr(value)
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    return None


def _given_arguments(e: BaseException, frame) -> dict:
    """{parameter: value} as the learner's outermost frame was entered, when a module's __call__ (torch's _call_impl)
    entered it: its args and kwargs still hold what the check passed, where the frame's own locals may have been
    reassigned since (x = x - x.mean(-1))."""
    tb, caller = e.__traceback__, None
    while tb is not None and tb.tb_frame is not frame:
        caller, tb = tb.tb_frame, tb.tb_next
    if caller is None or "/torch/" not in caller.f_code.co_filename.replace("\\", "/"):
        return {}
    args, kwargs = caller.f_locals.get("args"), caller.f_locals.get("kwargs")
    if not isinstance(args, tuple) or not isinstance(kwargs, dict):
        return {}
    code = frame.f_code
    params = [n for n in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount] if n != "self"]
    given = dict(zip(params, args))
    given.update((k, v) for k, v in kwargs.items() if k in params)
    return given


def _entry_call(e: BaseException) -> str:
    """`name(arg (shape), n=3, ...)`: the learner's function or method that the check called, with the arguments it
    was given (an argument the function reassigns is shown as it was given when a module's call shows that, else left
    out: its value now is not the one it was given). For an error raised in the notebook's kernel, the call as the
    check made it, from the checker's side (_remote_call)."""
    import dis
    frames = _learner_frames(e)
    if not frames:
        return _remote_call(e)
    frame = frames[0][0]
    code = frame.f_code
    n_args = code.co_argcount + code.co_kwonlyargcount
    names = [n for n in code.co_varnames[:n_args] if n != "self"]
    try:
        stored = {i.argval for i in dis.get_instructions(code) if i.opname in ("STORE_FAST", "DELETE_FAST")}
    except Exception:  # noqa: BLE001
        return ""
    given = _given_arguments(e, frame) if stored & set(names) else {}
    parts = []
    for name in names:
        if name in given:
            value = given[name]
        elif name in stored or name not in frame.f_locals:
            continue
        else:
            value = frame.f_locals[name]
        text = _argument_text(value)
        if text is not None:
            parts.append(f"{name} {text}" if _shape_of(value) is not None else f"{name}={text}")
    owner = type(frame.f_locals["self"]).__name__ + "." if "self" in code.co_varnames[:1] and "self" in frame.f_locals \
        else ""
    return f"{owner}{code.co_name}({', '.join(parts)})" if parts else ""


def _remote_call(e: BaseException) -> str:
    """For an error raised in the notebook's kernel: the call the check made, from the checker's side of the channel
    (the outermost call of a proxy in the traceback, whose args and kwargs are the check's own values), named after
    the learner's function that it entered (the kernel's first frame of the learner's code). Parameter names stay
    on the other side: positional arguments are given by their shapes alone."""
    frames = _remote_learner_frames(e)
    if not frames:
        return ""
    tb = e.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "__call__" and code.co_filename.replace("\\", "/").endswith("autograder/remote.py"):
            break
        tb = tb.tb_next
    if tb is None:
        return ""
    local = tb.tb_frame.f_locals
    args, kwargs, proxy = local.get("args"), local.get("kwargs"), local.get("self")
    if not isinstance(args, tuple) or not isinstance(kwargs, dict):
        return ""
    import types
    parts = [_argument_text(v) or getattr(getattr(v, "__class__", None), "__name__", "?") for v in args]
    parts += [f"{k} {_shape_of(v)}" if _shape_of(v) is not None else f"{k}={_argument_text(v) or '...'}"
              for k, v in kwargs.items()]
    try:
        cls = proxy.__class__
    except Exception:  # noqa: BLE001
        cls = None
    plain = (type, types.FunctionType, types.MethodType, types.BuiltinFunctionType)
    owner = f"{cls.__name__}." if isinstance(cls, type) and cls not in plain and cls is not object else ""
    return f"{owner}{frames[0][2]}({', '.join(parts)})"


def _exception_line(e: BaseException) -> str:
    """What run_check says about an exception raised in the learner's code: the error, the learner's own line that
    raised, the shapes of the tensors on it, and, when the sizes in the error point at them, which dimensions met."""
    text = f"your code raised {_describe_exception(e)}"
    try:
        shapes, hint = _shapes_hint(e)
        call = _entry_call(e)
    except Exception:  # noqa: BLE001  (the description above is enough)
        shapes, hint, call = "", None, ""
    if shapes:
        text += f", with {shapes}"
    if call:
        text += f"; the call was {call}"
    return text + (f". Likely: {hint}" if hint else "")


def run_check(c: Check, obj) -> tuple[float, str]:
    """(points, one line of report) for one check; never raises for anything the learner's code does.
    When the stage forbids a library shortcut (see `forbid`) and the learner's code used it during this
    check, the check earns nothing, whatever its verdict."""
    used: list[str] = []
    rules = FORBIDDEN.get(c.name)
    try:
        with _silenced():
            _run_limited(lambda: _watched(c.fn, obj, rules, used) if rules else c.fn(obj), c.timeout)
    except CheckFailure as e:
        points, line = 0.0, f"✗ {c.title} [0/{c.points:g}]: {e}"
    except NotImplementedError:
        points, line = 0.0, f"✗ {c.title} [0/{c.points:g}]: not implemented yet"
    except CheckTimeout:
        points, line = 0.0, (f"✗ {c.title} [0/{c.points:g}]: took longer than {c.timeout:g} s. Likely: an endless "
                             "loop (a while loop whose condition never changes), or work repeated far more than needed")
    except RecursionError:
        points, line = 0.0, f"✗ {c.title} [0/{c.points:g}]: endless recursion. Likely: the function calls itself"
    except MemoryError:
        points, line = 0.0, f"✗ {c.title} [0/{c.points:g}]: ran out of memory. Likely: a tensor far larger than needed"
    except BaseException as e:  # noqa: BLE001  (SystemExit and KeyboardInterrupt from learner code included)
        if isinstance(e, KeyboardInterrupt) and not isinstance(e, CheckTimeout):
            raise  # the learner pressed stop: let the notebook stop
        points, line = 0.0, f"✗ {c.title} [0/{c.points:g}]: {_exception_line(e)}"
    else:
        points, line = c.points, f"✓ {c.title} [{c.points:g}/{c.points:g}]"
    if used:
        names = ", ".join(dict.fromkeys(used))
        points, line = 0.0, (f"✗ {c.title} [0/{c.points:g}]: your code calls {names}, which does this "
                             "lesson's work for you: write it yourself")
    return points, line


def run_checks(obj) -> tuple[str | None, float, float, list[str]]:
    """(contract name, points earned, most points, one line per check) for obj, printing nothing.
    The name is None when no checks are registered for obj.__name__."""
    from . import checks  # noqa: F401  (fills the registry)
    name = getattr(obj, "__name__", None)
    if not isinstance(name, str) or name not in REGISTRY:
        return None, 0.0, 0.0, []
    return run_named(name, obj)


def run_named(name: str, obj, run: Callable | None = None) -> tuple[str | None, float, float, list[str]]:
    """The checks of the contract name `name` (not obj's own __name__) against obj. `run(check, obj)` runs
    one check, run_check by default (the grade command's runs it across to the notebook's kernel)."""
    if name not in REGISTRY:
        return None, 0.0, 0.0, []
    run = run or run_check
    total, earned, lines, timed_out = 0.0, 0.0, [], False
    for c in REGISTRY[name]:
        if timed_out:  # the code hangs: do not make the learner (or nbgrader's cell timeout) wait for each check
            points, line = 0.0, f"✗ {c.title} [0/{c.points:g}]: skipped, an earlier check ran out of time"
        else:
            points, line = run(c, obj)
            timed_out = "took longer than" in line
        earned += points
        total += c.points
        lines.append(line)
    return name, earned, total, lines


def check(obj, verbose: bool = True) -> float:
    """Run every check registered for `obj.__name__` against obj, print one line per check, and return
    the points earned (so that a graded cell ending in check(...) gets partial credit in nbgrader)."""
    name, earned, total, lines = run_checks(obj)
    if name is None:
        known = ", ".join(sorted(REGISTRY))
        shown = getattr(obj, "__name__", None)
        print(f"✗ no checks for {shown if isinstance(shown, str) else type(obj).__name__!r}: pass the function or "
              f"class itself, e.g. check(softmax). Known names: {known}")
        return 0.0
    for line in lines:
        print(line)
    print(f"{name}: {earned:g}/{total:g} points")
    return earned


# ------------------------------------------------------------------------------- library shortcuts
@dataclass
class Forbidden:
    """A library call that does a stage's own work. `functions`: the __name__s of torch functions
    (torch.softmax, F.softmax and Tensor.softmax all report "softmax"), caught through a
    TorchFunctionMode whatever alias the learner used; `classes`: dotted paths of torch classes
    (nn.LayerNorm), caught when the learner's code builds one or calls one it did not get from the
    check; `when(args, kwargs)`: only the calls it accepts count (e.g. label_smoothing > 0)."""
    label: str
    functions: tuple = ()
    classes: tuple = ()
    when: Callable | None = None


FORBIDDEN: dict[str, list[Forbidden]] = {}


def forbid(names, label: str, *, functions=(), classes=(), when=None) -> None:
    """Declare that the contract names `names` must not get their work done by a library call: during
    their checks, a use of it from the learner's code makes each check earn nothing, with a message
    naming `label`. The same calls stay allowed everywhere else (other names, other stages, the checks)."""
    for name in ([names] if isinstance(names, str) else names):
        FORBIDDEN.setdefault(name, []).append(Forbidden(label, tuple(functions), tuple(classes), when))


_HERE = os.path.dirname(os.path.abspath(__file__))
_KIND: dict[str, str] = {}
_LIBRARY_DIRS: list[tuple[str, ...]] = []
_TRANSPARENT: set = set()  # the code of the watchers themselves: skipped when looking for who called


def _library_dirs() -> tuple[str, ...]:
    if not _LIBRARY_DIRS:
        import sysconfig
        dirs = set()
        paths = sysconfig.get_paths()
        for key in ("stdlib", "platstdlib", "purelib", "platlib"):
            if paths.get(key):
                dirs.add(os.path.realpath(paths[key]))
        for mod in ("torch", "numpy"):
            m = sys.modules.get(mod)
            if m is not None and getattr(m, "__file__", None):
                dirs.add(os.path.dirname(os.path.realpath(m.__file__)))
        _LIBRARY_DIRS.append(tuple(d.rstrip(os.sep) + os.sep for d in dirs if d))
    return _LIBRARY_DIRS[0]


def _frame_kind(filename: str) -> str:
    """'ours' (the autograder's files), 'library' (Python, PyTorch and installed packages) or 'learner'
    (notebook cells, tests, the course's solutions: anything else)."""
    kind = _KIND.get(filename)
    if kind is None:
        if filename.startswith("<frozen"):
            kind = "library"
        else:
            real = filename if filename.startswith("<") else os.path.realpath(filename)
            if real.startswith(_HERE + os.sep):
                kind = "ours"
            elif real.startswith(_library_dirs()):
                kind = "library"
            else:
                kind = "learner"
        _KIND[filename] = kind
    return kind


def _called_by_learner(frame) -> bool:
    """Whether the innermost frame outside the libraries, from `frame` outwards, is the learner's code
    (a reference the check computes itself is not a shortcut)."""
    while frame is not None:
        if frame.f_code not in _TRANSPARENT:
            kind = _frame_kind(frame.f_code.co_filename)
            if kind != "library":
                return kind == "learner"
        frame = frame.f_back
    return False


def _resolve(path: str):
    import importlib
    module, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def _watched(fn: Callable, obj, rules: list[Forbidden], used: list[str]):
    """fn(obj), recording in `used` the labels of the forbidden calls made by the learner's code."""
    with watching(rules, obj, used):
        return fn(obj)


@contextlib.contextmanager
def watching(rules: list[Forbidden], obj, used: list[str]):
    """While inside, record in `used` the labels of the forbidden calls (`rules`) made by the learner's code;
    `obj`, the graded object, counts when it is the library's own class or function."""
    from torch.overrides import TorchFunctionMode

    by_name: dict[str, list[Forbidden]] = {}
    for rule in rules:
        for f in rule.functions:
            by_name.setdefault(f, []).append(rule)

    class Watch(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            for rule in by_name.get(getattr(func, "__name__", None), ()):
                if (rule.when is None or rule.when(args, kwargs)) and _called_by_learner(sys._getframe(1)):
                    used.append(rule.label)
            return func(*args, **kwargs)

    theirs_ok: set[int] = set()  # instances the check built itself, which the learner's code may call
    patched = []

    def wrap(cls, attr, rule):
        original = cls.__dict__[attr]

        def init(self, *args, **kwargs):
            if _called_by_learner(sys._getframe(1)):
                used.append(rule.label)
            else:
                theirs_ok.add(id(self))
            return original(self, *args, **kwargs)

        def forward(self, *args, **kwargs):
            if id(self) not in theirs_ok and _called_by_learner(sys._getframe(1)):
                used.append(rule.label)
            return original(self, *args, **kwargs)
        _TRANSPARENT.update((init.__code__, forward.__code__))
        patched.append((cls, attr, original))
        setattr(cls, attr, init if attr == "__init__" else forward)

    _TRANSPARENT.add(Watch.__torch_function__.__code__)
    for rule in rules:  # the graded object is the library's own (a subclass, or the function itself)
        if isinstance(obj, type):
            if any(issubclass(obj, _resolve(path)) for path in rule.classes):
                used.append(rule.label)
        elif getattr(obj, "__name__", None) in rule.functions:
            code = getattr(obj, "__code__", None)
            if code is None or _frame_kind(code.co_filename) == "library":
                used.append(rule.label)
    try:
        for rule in rules:
            for path in rule.classes:
                cls = _resolve(path)
                for attr in ("__init__", "forward"):
                    if attr in cls.__dict__:
                        wrap(cls, attr, rule)
        if by_name:
            with Watch():
                yield
        else:
            yield
    finally:
        for cls, attr, original in reversed(patched):
            setattr(cls, attr, original)
