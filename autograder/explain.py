"""What the learner's error means: which frames are the learner's (by file location), the failing line and the
shapes on it, the call that led there, and the likely mistake. Used by the running of checks (core) and by
the checks themselves (failing_line)."""
from __future__ import annotations

import os
import sys

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


def _describe_exception(e: BaseException) -> str:
    """`TypeError: ... (in your_function, line 12: `the line`)`: the innermost frame of the learner's code
    (not the autograder's, not a library's), with its line as written."""
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
    """The same `(in f, line n: `line`)` for an error raised in the notebook's kernel and rebuilt here by the
    grade command's channel, from the frames it sent along (remote_frames: file, line number, function,
    line)."""
    frames = _remote_learner_frames(e)
    if not frames:
        return ""
    _, lineno, name, *rest = frames[-1]
    line = str(rest[0]).strip() if rest else ""
    line = line if len(line) <= 120 else line[:117] + "..."
    return f" (in {name}, line {lineno}" + (f": `{line}`" if line else "") + ")"


def _remote_learner_frames(e: BaseException) -> list:
    """The frames of the learner's code among those that the notebook's kernel sent with an error (file, line
    number, function, line), outermost first. By where the file is, as _frame_kind says: the kernel's cells
    live in a folder whose name may hold any word ("/tmp/autograder-x/home/tmp/ipykernel_1/2928958320.py")."""
    return [f for f in getattr(e, "remote_frames", None) or [] if isinstance(f, tuple) and len(f) >= 3
            and _frame_kind(str(f[0])) == "learner"]


def _learner_frames(e: BaseException) -> list:
    """(frame, line number) of each traceback entry in the learner's code, outermost first (none for an error
    rebuilt from the notebook's kernel: its frames are there, see _remote_where)."""
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
    """The learner's innermost frame of an exception, as plain data: {"file", "line" (its number), "text" (the
    line as written), "shapes": {name: shape} of the tensors named on that line, "last": {name: shape} of the
    tensors that its function indexes as name[-1]}; None when no frame of the learner's code raised. A Likely
    is made from it (_shapes_hint); the notebook's kernel makes it there and sends it along with the error
    (serve.py), since the frame's locals stay on that side of the channel."""
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
    entry = frames[0][0].f_code
    params = [n for n in entry.co_varnames[:entry.co_argcount] if n != "self"]
    return {"file": frame.f_code.co_filename, "line": lineno, "text": text, "shapes": shapes, "last": last,
            "entry": {"name": entry.co_name, "params": params}}


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
    """failing_site of an error raised here, or the one the notebook's kernel sent with an error rebuilt by
    the grade command's channel (used only when it names the same frame as the frames sent along: file and
    line number)."""
    if not getattr(e, "remote_frames", None):
        return failing_site(e)
    site = getattr(e, "remote_site", None)
    frames = _remote_learner_frames(e)
    if not isinstance(site, dict) or not frames or str(site.get("file")) != frames[-1][0] \
            or str(site.get("line")) != str(frames[-1][1]):
        return None
    text = str(frames[-1][3]).strip() if len(frames[-1]) > 3 else ""
    return {"text": text if len(text) <= 120 else text[:117] + "...",
            "shapes": _plain_shapes(site.get("shapes")),
            "last": _plain_shapes(site.get("last"))}


def failing_line(e: BaseException) -> str:
    """The learner's line that raised `e` as written ("" when unknown), here or in the notebook's kernel: what
    a check reads before it names a cause, so that the cause it names is the one on that line."""
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
    return described, (f"{sizes[0]} is {a}'s size at dim {da} and {sizes[1]} is {b}'s size at dim {db}: on "
                       "this line the one stands where the other was needed (a sum or a mean without "
                       "keepdim=True, an index, a "
                       "transpose or a view that took the wrong dimension)")


def _last_item_of_batch(last: dict, sizes) -> str | None:
    """`x[-1]` in the function, for a local tensor x of 3 or more dims whose batch (dim 0) has one of the
    sizes that the error says do not match: the last sentence of the batch was taken where the last position
    was meant (x[:, -1]), and the batch size is what went missing. `last`: {name: shape} of the names indexed
    as name[-1]."""
    for name, shape in last.items():
        if len(shape) >= 3 and shape[0] in sizes and shape[0] != shape[1]:
            return (f"{name}[-1] takes the last item of the batch ({name} is {shape}, dim 0 the batch of "
                    f"{shape[0]}), where the last position was meant: {name}[:, -1] keeps one row per "
                    "sentence")
    return None


def _argument_text(value) -> str | None:
    """An argument as a message shows it: a tensor by its shape, a number, a bool or None as it is, a list or
    tuple by its length (None for anything else)."""
    shape = _shape_of(value)
    if shape is not None:
        return str(shape)
    if isinstance(value, (bool, int, float)) or value is None:
        return repr(value)
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    return None


def _given_arguments(e: BaseException, frame) -> dict:
    """{parameter: value} as the learner's outermost frame was entered, when a module's __call__ (torch's
    _call_impl) entered it: its args and kwargs still hold what the check passed, where the frame's own locals
    may have been reassigned since (x = x - x.mean(-1))."""
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
    """`name(arg (shape), n=3, ...)`: the learner's function or method that the check called, with the
    arguments it was given (an argument the function reassigns is shown as it was given when a module's call
    shows that, else left out: its value now is not the one it was given). For an error raised in the
    notebook's kernel, the call as the check made it, from the checker's side (_remote_call)."""
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
    owner = (type(frame.f_locals["self"]).__name__ + "."
             if "self" in code.co_varnames[:1] and "self" in frame.f_locals else "")
    return f"{owner}{code.co_name}({', '.join(parts)})" if parts else ""


def _remote_call(e: BaseException) -> str:
    """For an error raised in the notebook's kernel: the call the check made, from the checker's side of the
    channel (the outermost call of a proxy in the traceback, whose args and kwargs are the check's own
    values), named after the learner's function that it entered (the kernel's first frame of the learner's
    code). Positional arguments are named after that function's parameters, as the kernel sent them
    (_entry_params), else given alone."""
    frames = _remote_learner_frames(e)
    if not frames:
        return ""
    tb = e.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "__call__" and \
                code.co_filename.replace("\\", "/").endswith("autograder/remote_proxies.py"):
            break
        tb = tb.tb_next
    if tb is None:
        return ""
    local = tb.tb_frame.f_locals
    args, kwargs, proxy = local.get("args"), local.get("kwargs"), local.get("self")
    if not isinstance(args, tuple) or not isinstance(kwargs, dict):
        return ""
    import types
    params = _entry_params(e, frames[0][2])
    named = list(zip(params, args)) if len(args) <= len(params) else [(None, v) for v in args]
    parts = [(f"{k} {_shape_of(v)}" if _shape_of(v) is not None else f"{k}={_argument_text(v) or '...'}") if k
             else
             _argument_text(v) or getattr(getattr(v, "__class__", None), "__name__", "?") for k, v in named]
    parts += [f"{k} {_shape_of(v)}" if _shape_of(v) is not None else f"{k}={_argument_text(v) or '...'}"
              for k, v in kwargs.items()]
    try:
        cls = proxy.__class__
    except Exception:  # noqa: BLE001
        cls = None
    plain = (type, types.FunctionType, types.MethodType, types.BuiltinFunctionType)
    owner = f"{cls.__name__}." if isinstance(cls, type) and cls not in plain and cls is not object else ""
    return f"{owner}{frames[0][2]}({', '.join(parts)})"


def _entry_params(e: BaseException, name: str) -> list[str]:
    """The names of the positional parameters of the learner's function that the check's call entered (self
    left out), as the notebook's kernel sent them with an error (site "entry"): [] unless they are names and
    the function is the one the frames say (`name`)."""
    site = getattr(e, "remote_site", None)
    entry = site.get("entry") if isinstance(site, dict) else None
    if not isinstance(entry, dict) or entry.get("name") != name or not isinstance(entry.get("params"), list):
        return []
    params = entry["params"][:32]
    if not all(isinstance(p, str) and p.isidentifier() and len(p) <= 64 for p in params):
        return []
    return params


def _exception_line(e: BaseException) -> str:
    """What run_check says about an exception raised in the learner's code: the error, the learner's own line
    that raised, the shapes of the tensors on it, and, when the sizes in the error point at them, which
    dimensions met."""
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
