"""The grader's side inside the kernel of a notebook that `python -m autograder grade` runs. Never
imported: the grade command executes this file's text (read from disk, in a fresh namespace) in a
hidden cell before the notebook's first cell (`startup`) and in place of each graded cell (`grade_cell`).

What it guards against, best effort (the learner's code runs in the same process, so a determined
submission can always find a way around an in-process check; see autograder/grade.py's docstring):

* the notebook's own `check`, `autograder` modules or fixtures: the checks are compiled afresh from the
  sources the grade command read before the run, into modules the notebook never saw;
  the notebook's copies of the autograder's functions are made to raise while its code is graded;
* patched libraries: the identity of every function and class the checks rely on (torch, torch.nn,
  torch.nn.functional, Tensor's and nn's classes, builtins, math, ...) is recorded before the first
  cell and compared before and after each graded name;
* the course's `solutions`: a graded object that is, subclasses, or wraps solutions' own object of that
  name earns nothing, and solutions' object raises while the name is graded;
* reading the autograder's files (fixtures, sources) from the notebook's code, adding audit hooks,
  and, while being graded, inspecting the grader's frames, walking the garbage collector, or setting
  attributes on classes and functions: each is reported and the graded name earns nothing;
* threads the notebook left running.

The startup makes a random key, which it prints (before any of the notebook's code has run) for the
grade command only, and keeps in the audit hook's closure; every verdict is one line
`AUTOGRADER-RESULT <cell nonce> <HMAC-SHA256 of "<cell nonce> <json>"> <json>` on the kernel's original
stdout, and the grade command accepts exactly one line with a valid signature per graded cell. Code that
could reach the key (the garbage collector's object lists, ctypes, the grader's frames while graded)
makes the hook forget it: nothing is signed after that, so the rest of the notebook earns nothing.
"""
import builtins
import hashlib
import os
import sys
import threading
import types

_MODULES = sys.modules  # the real one, taken before the notebook ran

MARK = "AUTOGRADER-RESULT"
START = "AUTOGRADER-START"
WATCH_MODULES = (
    "builtins", "math", "operator", "functools", "itertools", "collections", "collections.abc", "copy", "random",
    "json", "io", "os", "os.path", "signal", "threading", "time", "traceback", "warnings", "contextlib",
    "dataclasses", "types", "numbers", "re", "hashlib", "pathlib", "tempfile", "sysconfig", "importlib",
    "importlib.util", "importlib.machinery", "importlib._bootstrap", "importlib._bootstrap_external", "sys",
    "torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.nn.modules.module", "torch.random",
    "torch.overrides", "torch.linalg", "torch.special", "torch.autograd", "torch.testing", "torch.optim",
    "torch.optim.lr_scheduler", "torch._C", "torch._C._nn", "torch._C._VariableFunctions",
)
# attributes that the kernel itself changes while it runs
VOLATILE = {"builtins._", "builtins.__", "builtins.___", "builtins.input", "builtins.raw_input", "builtins.getpass",
            "sys.displayhook", "sys.excepthook", "sys.stdout", "sys.stderr", "sys.stdin", "sys.breakpointhook",
            "sys.unraisablehook", "sys.__stdout__", "sys.__stderr__", "sys.__stdin__", "sys.__displayhook__",
            "sys.__excepthook__", "sys.ps1", "sys.ps2", "sys.last_type", "sys.last_value", "sys.last_traceback",
            "signal.default_int_handler"}
WINDOW_EVENTS = {"sys._getframe", "gc.get_objects", "gc.get_referrers", "gc.get_referents", "object.__setattr__",
                 "object.__delattr__", "sys.settrace", "sys.setprofile", "ctypes.dlsym", "ctypes.cdata",
                 "ctypes.addressof", "ctypes.string_at", "ctypes.wstring_at", "ctypes.call_function", "code.__new__",
                 "function.__new__", "sys._current_frames"}
WINDOW_EVENTS.add("object.__getattr__")
FRAME_EVENTS = {"sys._getframe", "sys._current_frames", "object.__getattr__"}
FRAME_APIS = {"currentframe", "stack", "trace", "getouterframes", "getinnerframes", "walk_stack", "walk_tb",
              "<lambda>", "_getframe"}
FRAME_ATTRS = {"tb_frame", "f_back", "gi_frame", "cr_frame", "ag_frame", "f_globals", "f_locals", "f_builtins"}
GUARDED_MODULES = ("torch", "autograder", "_autograder", "builtins", "math", "solutions", "sys", "importlib",
                   "types", "functools", "signal", "threading", "contextlib", "traceback", "warnings")
ALWAYS_EVENTS = {"open", "sys.addaudithook", "autograder.report", "autograder.window"}
SOLUTIONS_MARK = "autograder: the course's solutions were called"
AUTOGRADER_MARK = "autograder: the notebook's copy of the autograder was called"


# ----------------------------------------------------------------------------------- whose frame
def _dirs():
    import sysconfig
    paths = sysconfig.get_paths()
    stdlib = {os.path.realpath(paths[k]) + os.sep for k in ("stdlib", "platstdlib") if paths.get(k)}
    site = {os.path.realpath(paths[k]) + os.sep for k in ("purelib", "platlib") if paths.get(k)}
    return tuple(stdlib), tuple(site - stdlib)


def _make_classifier(root):
    """frame filename -> 'ours' | 'stdlib' | 'library' | 'learner' (cached)."""
    stdlib, site = _dirs()
    ours = os.path.realpath(root) + os.sep
    cache = {}

    def kind(filename):
        k = cache.get(filename)
        if k is None:
            if filename.startswith("<frozen"):
                k = "stdlib"
            else:
                real = filename if filename.startswith("<") else os.path.realpath(filename)
                k = ("ours" if real.startswith(ours) else "library" if real.startswith(site) and not
                     real.startswith(stdlib) else "stdlib" if real.startswith(stdlib) else "learner")
                if k == "stdlib" and real.startswith(site):
                    k = "library"
            cache[filename] = k
        return k
    return kind


# ---------------------------------------------------------------------------------- fingerprints
def _tracked(v):
    return callable(v) or isinstance(v, (type, types.ModuleType, property, staticmethod, classmethod))


def _watched_classes():
    classes = []
    torch = _MODULES.get("torch")
    if torch is not None:
        classes += [torch.Tensor, torch._C.TensorBase, torch.nn.Parameter]
        classes += [v for v in vars(torch.nn).values() if isinstance(v, type)]
        try:
            from torch.overrides import TorchFunctionMode
            classes.append(TorchFunctionMode)
        except ImportError:
            pass
    return list({id(c): c for c in classes}.values())


def _fingerprint(classes):
    """{"torch.allclose": the object, ...}: what the checks may use, in the modules and classes watched."""
    fp = {}
    for name in WATCH_MODULES:
        m = _MODULES.get(name)
        if m is None:
            continue
        fp["sys.modules[" + name + "]"] = m
        try:
            items = list(vars(m).items())
        except TypeError:
            continue
        for k, v in items:
            key = name + "." + k
            if key not in VOLATILE and _tracked(v):
                fp[key] = v
    for cls in classes:
        for k, v in list(vars(cls).items()):
            if _tracked(v):
                fp[f"{cls.__module__}.{cls.__qualname__}.{k}"] = v
    fp["sys.meta_path"] = tuple(sys.meta_path)
    fp["sys.path_hooks"] = tuple(sys.path_hooks)
    return fp


def _same(old, new, kind):
    if old is new:
        return True
    if isinstance(old, types.MethodType) and isinstance(new, types.MethodType):
        return old.__func__ is new.__func__ and old.__self__ is new.__self__
    if isinstance(old, tuple) and isinstance(new, tuple):
        return len(old) == len(new) and all(a is b for a, b in zip(old, new))
    # a library's own wrapper of the original (importing torch._dynamo wraps torch.manual_seed)
    code, w = getattr(new, "__code__", None), new
    for _ in range(5):
        w = getattr(w, "__wrapped__", None)
        if w is None:
            break
        if w is old:
            return code is not None and kind(code.co_filename) == "library"
    return False


def _changed(baseline, now, kind):
    return sorted(k for k, v in baseline.items() if k not in now or not _same(v, now[k], kind))


# ------------------------------------------------------------------------------ signed results
def _encode(v):
    """JSON text of a result (str, numbers, bool, None, lists, dicts), written here rather than with
    the json module, which the notebook's code could have changed."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, (int, float)):
        return repr(float(v)) if v == v and v not in (float("inf"), float("-inf")) else "null"
    if isinstance(v, str):
        out = []
        for ch in v:
            o = ord(ch)
            out.append("\\\\" if ch == "\\" else '\\"' if ch == '"' else ch if 32 <= o < 127 else "\\u%04x" % o
                       if o < 0x10000 else "\\u%04x\\u%04x" % (0xD800 + ((o - 0x10000) >> 10), 0xDC00 + (o & 0x3FF)))
        return '"' + "".join(out) + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_encode(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(_encode(str(k)) + ":" + _encode(x) for k, x in v.items()) + "}"
    return _encode(str(v))


def _hmac(sha256, key, text):
    """HMAC-SHA256(key, text) in hex, from the sha256 captured before the notebook ran."""
    k = bytes.fromhex(key)
    k = k + b"\0" * (64 - len(k))
    inner = sha256(bytes(b ^ 0x36 for b in k) + text.encode()).digest()
    return sha256(bytes(b ^ 0x5C for b in k) + inner).hexdigest()


# ------------------------------------------------------------------------------------- startup
def startup(cfg):
    """Before the notebook's first cell: record what the checks rely on, make the signing key, and
    install the audit hook that grades (on the event "autograder.grade") and watches the learner's code."""
    import importlib
    for name in WATCH_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    try:
        import solutions  # noqa: F401  (imported now, before the notebook, so that grading finds it intact)
    except Exception:  # noqa: BLE001
        pass
    root = os.path.realpath(cfg["root"])
    kind = _make_classifier(root)
    classes = _watched_classes()
    baseline = _fingerprint(classes)
    keys = sorted(baseline)
    state = {"nonce": cfg["nonce"], "stdout": sys.stdout, "classes": classes, "baseline": baseline, "keys": keys,
             "threads": {t.ident for t in threading.enumerate()}, "records": [], "window": [], "grading": False,
             "key": os.urandom(32).hex(), "sha256": hashlib.sha256, "modules": sys.modules, "root": root,
             "course": os.path.realpath(cfg["course"]), "kind": kind,
             "sources": {rel: compile(text, os.path.join(root, rel), "exec") for rel, text in cfg["sources"].items()},
             "lost": None, "active": False}
    busy = []
    getframe = sys._getframe
    nonce = cfg["nonce"]

    def learner_direct(frame, frames=False):
        """The frame that triggered an event is the learner's; with `frames`, also when the learner's
        code got there through the standard library's functions that hand frames back (inspect.stack,
        traceback.walk_stack, ...), not through its other uses of frames (logging, namedtuple)."""
        first, api = True, False
        while frame is not None:
            code = frame.f_code
            k = kind(code.co_filename)
            if k == "stdlib" and frames:
                # an API that hands frames back, called by the learner's code itself (not logging's
                # findCaller using its currentframe, nor print_exc walking a traceback)
                caller = frame.f_back
                api = api or (code.co_name in FRAME_APIS and caller is not None and
                              kind(caller.f_code.co_filename) != "stdlib")
                first = False
                frame = frame.f_back
                continue
            return k == "learner" and (first or api)
        return False

    def learner_reads(frame):
        """An `open` of the autograder's files by the learner's code, not by an import."""
        while frame is not None:
            fn = frame.f_code.co_filename
            if fn.startswith("<frozen importlib"):
                return False
            k = kind(fn)
            if k in ("learner", "ours"):
                return k == "learner"
            frame = frame.f_back
        return False

    def lose_key(why):
        """The learner's code could now reach the key: nothing more gets signed."""
        if state["key"] is not None:
            state["key"] = None
            state["lost"] = why

    def write(cell, result):
        text = _encode(result)
        key = state["key"]
        sig = _hmac(state["sha256"], key, cell + " " + text) if key is not None else "unsigned"
        state["stdout"].write(f"\n{MARK} {cell} {sig} {text}\n")
        state["stdout"].flush()

    def grade(cfg2):
        cell = str(cfg2.get("cell", ""))
        if state["grading"]:
            write(cell, {"cell": cell, "name": cfg2.get("name"), "points": 0.0, "lines": [],
                         "flags": ["the grader was called again from inside a graded function"], "error": None})
            return
        result = {"cell": cell, "name": cfg2.get("name"), "points": 0.0, "max_points": None, "lines": [],
                  "flags": [], "error": None}
        state["active"] = True  # until signed: the learner's code (a finalizer, a thread) must not see frames
        try:
            _grade(state, str(cfg2.get("name")), cell, result)
            threads = _learner_threads(state, kind)
            if threads:
                result["flags"].append("the code being graded left threads running: " + ", ".join(threads[:5]))
        except BaseException as e:  # noqa: BLE001  (an interrupt included: reported, signed)
            result["error"] = f"the grader stopped: {type(e).__name__}: {str(e)[:300]}"
        finally:
            state["grading"] = False
            if state["lost"]:
                result["flags"].append(state["lost"])
            if result["flags"] or result["error"]:
                result["points"] = 0.0
            write(cell, result)
            state["active"] = False

    def hook(event, args):
        if event == "autograder.grade":
            if len(args) == 2 and args[0] == nonce and isinstance(args[1], dict):
                grade(args[1])
            return
        if busy:
            return
        if event == "open":
            busy.append(1)
            try:
                path = args[0] if args else None
                if isinstance(path, (str, bytes, os.PathLike)):
                    path = os.path.realpath(os.fsdecode(path))
                    if path.startswith(root + os.sep) and learner_reads(getframe(1)):
                        state["records"].append(f"the notebook's code read the autograder's file "
                                                f"{os.path.relpath(path, root)}")
            finally:
                busy.clear()
            return
        if event == "sys.addaudithook":
            state["records"].append("the notebook's code added an audit hook")
            return
        if event.startswith("gc.get_") or (event.startswith("ctypes.") and event not in ("ctypes.dlopen", "ctypes.dlsym")):
            busy.append(1)
            try:
                if event.startswith("gc.") or learner_direct(getframe(1)):
                    lose_key(f"the notebook's code called {event} (which can reach the grader's memory)")
            finally:
                busy.clear()
            return
        if event not in WINDOW_EVENTS or not (state["grading"] or (state["active"] and event in FRAME_EVENTS)):
            return
        busy.append(1)
        try:  # a window event, while the learner's code is being graded
            if event in ("object.__setattr__", "object.__delattr__", "object.__getattr__"):
                target, attr = (args[0], args[1]) if len(args) >= 2 else (None, None)
                if event == "object.__getattr__":
                    if attr not in FRAME_ATTRS:
                        return
                elif not str(getattr(target, "__module__", "") or "").startswith(GUARDED_MODULES):
                    return
                what = f"{event} {getattr(target, '__qualname__', type(target).__name__)}.{attr}"
            else:
                what = event
            if learner_direct(getframe(1), frames=event in FRAME_EVENTS):
                state["window"].append(what)
                if event in FRAME_EVENTS:
                    lose_key(f"while graded, the code used {what} (reaching the grader's frames)")
        finally:
            busy.clear()

    sys.addaudithook(hook)
    state["stdout"].write(f"{START} {nonce} {state['key']}\n")
    state["stdout"].flush()


# --------------------------------------------------------------------------------------- grading
def _load_private(root, sources, tag, state):
    """Fresh module objects for autograder.core and autograder.checks.*, executed from `sources` (code
    compiled at startup from the text the grade command read before the notebook ran: not the
    notebook's modules, nor the disk), under a package name the notebook never saw. Returns (core
    module, list of modules)."""
    pkg = "_autograder_private_" + tag
    loaded = []
    sys_modules = state["modules"]

    def load(modname, rel, package):
        path = os.path.join(root, rel)
        m = types.ModuleType(modname)
        m.__file__, m.__package__ = path, package
        sys_modules[modname] = m
        exec(sources[rel], m.__dict__)  # noqa: S102  (the autograder's own code, compiled at startup)
        loaded.append(m)
        return m

    top = types.ModuleType(pkg)
    top.__path__, top.__package__, top.__file__ = [root], pkg, os.path.join(root, "__init__.py")
    checks = types.ModuleType(pkg + ".checks")
    checks.__path__, checks.__package__ = [os.path.join(root, "checks")], pkg + ".checks"
    checks.__file__ = os.path.join(root, "checks", "__init__.py")
    sys_modules[pkg], sys_modules[pkg + ".checks"] = top, checks
    try:
        top.core = load(pkg + ".core", "core.py", pkg)
        top.checks = checks
        checks._util = load(pkg + ".checks._util", "checks/_util.py", pkg + ".checks")
        for rel in sorted(sources):
            stem = rel[len("checks/"):-len(".py")]
            if rel.startswith("checks/stage") and rel.endswith(".py"):
                setattr(checks, stem, load(f"{pkg}.checks.{stem}", rel, pkg + ".checks"))
    finally:
        for k in [k for k in sys_modules if k == pkg or k.startswith(pkg + ".")]:
            del sys_modules[k]
    return top.core, loaded + [top, checks]


def _module_state(modules, core, sha256):
    """Everything the private checks hold, to notice the learner's code changing it while graded."""
    h = sha256()
    for m in modules:
        for k, v in list(vars(m).items()):
            h.update(f"{m.__name__}.{k}={id(v)}\n".encode())
    for name, checks in sorted(core.REGISTRY.items()):
        for c in checks:
            h.update(f"{name}:{id(c.fn)}:{c.points}:{c.timeout}:{c.title}\n".encode())
            h.update(f"{id(c.fn.__code__) if hasattr(c.fn, '__code__') else ''}\n".encode())
    for name, rules in sorted(core.FORBIDDEN.items()):
        for r in rules:
            h.update(f"{name}:{r.label}:{r.functions}:{r.classes}:{id(r.when)}\n".encode())
    return h.hexdigest()


def _tripwire(message, n_free):
    """A code object that raises RuntimeError(message), with n_free free variables (so that it can
    replace the __code__ of any function with a closure of that size)."""
    names = [f"_v{i}" for i in range(n_free)]
    src = "def _outer():\n"
    src += "".join(f"    {v} = None\n" for v in names)
    src += "    def _inner(*args, **kwargs):\n"
    if names:
        src += f"        ({', '.join(names)},)\n"
    src += f"        raise RuntimeError({message!r})\n    return _inner\n"
    ns = {}
    exec(compile(src, "<autograder tripwire>", "exec"), ns)  # noqa: S102
    return ns["_outer"]().__code__


def _course_modules(directory, modules):
    """Modules in sys.modules loaded from files under `directory`."""
    directory = os.path.realpath(directory) + os.sep
    out = []
    for m in list(modules.values()):
        f = getattr(m, "__file__", None) if isinstance(m, types.ModuleType) else None
        if isinstance(f, str) and os.path.realpath(f).startswith(directory):
            out.append(m)
    return out


def _is_solutions(v, name):
    mod = getattr(v, "__module__", None)
    return isinstance(mod, str) and (mod == "solutions" or mod.startswith("solutions.")) and \
        getattr(v, "__name__", None) == name


def _functions_of(obj):
    """The functions that make up obj: itself, or a class's methods (properties, static and class methods)."""
    if isinstance(obj, type):
        out = []
        for klass in obj.__mro__:
            if klass is object or getattr(klass, "__module__", "").startswith(("torch", "builtins")):
                continue
            for v in vars(klass).values():
                if isinstance(v, (staticmethod, classmethod)):
                    v = v.__func__
                if isinstance(v, property):
                    out += [f for f in (v.fget, v.fset, v.fdel) if f is not None]
                elif isinstance(v, types.FunctionType):
                    out.append(v)
        return out
    if isinstance(obj, types.MethodType):
        obj = obj.__func__
    return [obj] if isinstance(obj, types.FunctionType) else []


def _references(fn, depth=2):
    """Objects a function refers to by name (globals, builtins, attributes of modules it names), its
    closure and its defaults."""
    names = set()
    stack = [fn.__code__]
    while stack:
        code = stack.pop()
        names.update(code.co_names)
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    found = []
    g = fn.__globals__
    for n in names:
        if n in g:
            found.append(g[n])
    for cell in fn.__closure__ or ():
        try:
            found.append(cell.cell_contents)
        except ValueError:
            pass
    found += list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values())
    for _ in range(depth):  # solutions.softmax, solutions.attention.softmax
        more = []
        for v in found:
            if isinstance(v, types.ModuleType):
                more += [getattr(v, n) for n in names if hasattr(v, n)]
        found += more
    return found


def _solutions_use(obj, name):
    """Why obj is (or leans on) the course's own solution for `name`, or None."""
    if _is_solutions(obj, name):
        return f"{name} is the course's solutions.{name} itself, not your code"
    if isinstance(obj, type):
        for base in obj.__mro__[1:]:
            mod = getattr(base, "__module__", "") or ""
            if mod == "solutions" or mod.startswith("solutions."):
                return f"{name} subclasses the course's solutions.{base.__name__}: write your own"
    for fn in _functions_of(obj):
        for v in _references(fn):
            if _is_solutions(v, name) or (isinstance(v, type) and any(_is_solutions(b, name) for b in v.__mro__)):
                return f"{name} calls the course's solutions.{name}: write your own"
    return None


def _autograder_use(obj, root):
    """Whether obj's code refers to the notebook's copy of the autograder (other than `check`)."""
    root = os.path.realpath(root) + os.sep
    for fn in _functions_of(obj):
        for v in _references(fn):
            f = getattr(v, "__file__", None) if isinstance(v, types.ModuleType) else \
                getattr(getattr(v, "__code__", None), "co_filename", None)
            if isinstance(f, str) and os.path.realpath(f).startswith(root):
                return True
    return False


def _learner_threads(state, kind):
    out = []
    for t in threading.enumerate():
        if t.ident in state["threads"] or not t.is_alive():
            continue
        target = getattr(t, "_target", None)
        code = getattr(target, "__code__", None) or getattr(getattr(type(t), "run", None), "__code__", None)
        if code is not None and kind(code.co_filename) == "learner":
            out.append(t.name)
    return out


def _grade(state, name, cell, result):
    """Grade the object named `name` in the notebook's namespace with a private copy of the checks,
    filling `result` (points, lines, flags)."""
    root, course, kind = state["root"], state["course"], state["kind"]
    now = _fingerprint(state["classes"])
    changed = _changed(state["baseline"], now, kind)
    if changed:
        result["flags"].append("the notebook replaced functions the checks rely on: " + ", ".join(changed[:8]))
    result["flags"] += list(dict.fromkeys(state["records"]))
    threads = _learner_threads(state, kind)
    if threads:
        result["flags"].append("the notebook left threads running: " + ", ".join(threads[:5]))

    shell = getattr(_MODULES.get("builtins"), "get_ipython", lambda: None)()
    ns = shell.user_ns if shell is not None else state["modules"]["__main__"].__dict__
    if name not in ns:
        result["lines"] = [f"✗ {name} is not defined: run the cell that defines it"]
        return
    obj = ns[name]
    why = _solutions_use(obj, name)
    if why:
        result["flags"].append(why)
    if _autograder_use(obj, root):
        result["flags"].append(f"{name} uses the autograder's own code")

    core, modules = _load_private(root, state["sources"], cell[:16], state)
    before = _module_state(modules, core, state["sha256"])
    restore = []
    try:  # while graded: solutions' own `name` and the notebook's copy of the autograder raise
        seen = set()
        for m in _course_modules(os.path.join(course, "solutions"), state["modules"]):
            v = vars(m).get(name)
            if v is None or id(v) in seen or not _is_solutions(v, name):
                continue
            seen.add(id(v))
            if isinstance(v, type):
                for attr, f in list(vars(v).items()):
                    if isinstance(f, types.FunctionType):
                        restore.append((v, attr, f))
                        setattr(v, attr, types.FunctionType(_tripwire(SOLUTIONS_MARK, 0), {}, attr))
            elif isinstance(v, types.FunctionType):
                restore.append((v, "__code__", v.__code__))
                v.__code__ = _tripwire(SOLUTIONS_MARK, len(v.__code__.co_freevars))
        for m in _course_modules(root, state["modules"]):
            for f in list(vars(m).values()):
                if isinstance(f, types.FunctionType) and id(f) not in seen and \
                        os.path.realpath(f.__code__.co_filename).startswith(root + os.sep):
                    seen.add(id(f))
                    restore.append((f, "__code__", f.__code__))
                    f.__code__ = _tripwire(AUTOGRADER_MARK, len(f.__code__.co_freevars))
        state["window"].clear()
        state["grading"] = True
        try:
            graded, earned, total, lines = core.run_registered(obj)
        finally:
            state["grading"] = False
    finally:
        for target, attr, original in reversed(restore):
            try:
                setattr(target, attr, original)
            except Exception:  # noqa: BLE001
                pass
    if graded is None:
        shown = getattr(obj, "__name__", None)
        lines = [f"✗ {name} has no checks under the name {shown!r}: keep the name the lesson gives it"]
        earned, total = 0.0, 0.0
    result["lines"], result["points"], result["max_points"] = list(lines), float(earned), float(total)
    if any(SOLUTIONS_MARK in line for line in lines):
        result["flags"].append(f"{name} calls the course's solutions.{name} while graded: write your own")
    if any(AUTOGRADER_MARK in line for line in lines):
        result["flags"].append(f"{name} calls the autograder's own code")
    if state["window"]:
        result["flags"].append("while graded, the code used " + ", ".join(dict.fromkeys(state["window"][:5]))
                               + " (inspecting or changing the grader)")
    if _module_state(modules, core, state["sha256"]) != before:
        result["flags"].append("the code changed the grader's checks while being graded")
    changed_after = [k for k in _changed(state["baseline"], _fingerprint(state["classes"]), kind) if k not in changed]
    if changed_after:
        result["flags"].append("while graded, the code replaced functions the checks rely on: "
                               + ", ".join(changed_after[:8]))
