"""The lessons' demonstration cells: when the learner's code fails in one, the cell says what failed and what
their code had returned until then, and the notebook goes on (issues 37 and 38).

A demonstration cell runs the learner's functions to draw or print something; it is not graded. Its own
`except NotImplementedError` still prints "Complete ... above" for a stub; any other exception (a mask of the
wrong shape that makes the drawing index past its end, say) is caught here, and the cell prints

    This demonstration stopped at line 9 of this cell: IndexError: too many indices for tensor of dimension 2
    What the cell had computed: pad = tensor of shape (3, 6), torch.bool; causal = tensor of shape (1, 1, 6,
    6) ... The checks above say what is wrong; the next cells go on.

Example: with demonstration():
             try:
                 pad = padding_mask(ids)
             except NotImplementedError:
                 print("Complete padding_mask above to see it.")
             else:
                 plt.imshow(pad[0, 0])

It does not catch KeyboardInterrupt or SystemExit, and it knows nothing of the checks: what it prints is what
ran. Printed on stdout (nbgrader scores a cell that writes to stderr zero, and this module runs beside graded
cells).
"""
from __future__ import annotations

import sys
import types


def describe(value) -> str | None:
    """A few words on a value the learner's code returned; None for what is not worth listing (modules,
    functions, classes, figures)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return f"tensor of shape {tuple(value.shape)}, {value.dtype}"
    if isinstance(value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)):
        return None
    if type(value).__module__.split(".")[0] in ("matplotlib", "IPython"):
        return None
    if isinstance(value, (tuple, list)) and value and len(value) <= 4:
        parts = [describe(v) for v in value]
        if all(p is not None for p in parts):
            opening, closing = "()" if isinstance(value, tuple) else "[]"
            return opening + "; ".join(parts) + closing
    if isinstance(value, (tuple, list, dict, set)):
        return f"{type(value).__name__} of {len(value)}"
    if isinstance(value, (bool, int, float, str)) or value is None:
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."
    return type(value).__name__


class demonstration:
    """Context manager for a demonstration cell: any Exception inside it is reported in three lines and
    swallowed, so that the cells after it run. See the module's docstring."""

    def __init__(self):
        self.scope, self.filename, self.before, self.figures = {}, "", {}, set()

    def __enter__(self):
        frame = sys._getframe(1)
        self.scope, self.filename = frame.f_globals, frame.f_code.co_filename
        self.before = {name: id(value) for name, value in self.scope.items()}
        plt = sys.modules.get("matplotlib.pyplot")
        self.figures = set(plt.get_fignums()) if plt is not None else set()
        return self

    def __exit__(self, kind, error, tb):
        if error is None or not isinstance(error, Exception):
            return False
        line = None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self.filename:
                line = tb.tb_lineno
            tb = tb.tb_next
        if isinstance(error, NotImplementedError):
            print("This demonstration needs a function above that is not written yet (NotImplementedError"
                  + (f" at line {line} of this cell" if line else "")
                  + "): complete it and run this cell again.")
        else:
            where = f" at line {line} of this cell" if line else ""
            print(f"This demonstration stopped{where}: {type(error).__name__}: {error}")
            made = [f"{name} = {text}" for name, value in self.scope.items()
                    if not name.startswith("_") and self.before.get(name) != id(value)
                    and (text := describe(value)) is not None]
            if made:
                print("What the cell had computed: " + "; ".join(made))
            print("The checks above say what is wrong; the next cells go on.")
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is not None:  # a figure half drawn when the error came: not shown
            for number in set(plt.get_fignums()) - self.figures:
                plt.close(number)
        return True
