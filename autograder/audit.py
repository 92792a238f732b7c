"""What the grade command cannot prevent, it flags: each code cell of a submission is read before it runs
(parsed with `ast`, never executed), and a cell that reaches below the kernel's library-shortcut watch is
named in the report's problems, with its line, for the instructor to review (autograder/GRADING.md, "Not
protected").

The watch (core.forbid) runs in the kernel, around each call of the learner's code: a TorchFunctionMode and
wrappers of the forbidden classes. A determined student can go below it, and the library's answer then earns
what it earns; what is named here is how:

* PyTorch's layers under the Python API: `torch._C` (DisableTorchFunction, the function-mode stack),
`torch.ops`
  (`torch.ops.aten.*` overloads), `torch._ops`, `torch._refs`, `torch._prims`, `torch._decomp`;
* a library softmax in disguise: `softmin` (softmax(x) is softmin(-x));
* code swapped at run time: an assignment to (or setattr of) `__code__`, `types.CodeType`,
`types.FunctionType`;
* names built at run time: getattr/setattr/delattr on torch (or on what a call returned) with a name that is
not a
  literal, `__import__`, `importlib.import_module` (importlib.util.find_spec, which every lesson's setup cell
  uses, is not flagged), `eval`/`exec`/`compile`, `sys.modules[...]`, `vars(...)[...]`, `globals()[...]` and
  `__dict__[...]` with a computed key.

An honest lesson never trips it (tests/test_audit.py reads every solved lesson). `audit(source)` gives the
findings of one cell, `audit_notebook(nb)` the report's lines for a notebook.
"""
from __future__ import annotations

import ast

LOW_LEVEL = ("torch._C", "torch.ops", "torch._ops", "torch._refs", "torch._prims", "torch._decomp",
             "torch.overrides._pop_mode", "torch.overrides._get_current_function_mode")
NAMES = {"softmin": "a library softmax in disguise (softmax(x) is softmin(-x))",
         "Softmin": "a library softmax in disguise (softmax(x) is softmin(-x))",
         "DisableTorchFunction": "switches off the watch (torch._C.DisableTorchFunction)",
         "DisableTorchFunctionSubclass": "switches off the watch (torch._C.DisableTorchFunctionSubclass)",
         "_disabled_torch_function_impl": "switches off the watch",
         "_pop_mode": "takes the watch's mode off the stack",
         "_pop_torch_function_stack": "takes the watch's mode "
         "off the stack", "CodeType": "builds code objects at run time",
         "__code__": "swaps a function's code"}
DYNAMIC_CALLS = {"__import__": "imports a module named at run time", "eval": "runs code built at run time",
                 "exec": "runs code built at run time", "compile": "compiles code built at run time"}
NAME_ATTRS = ("getattr", "setattr", "delattr")
WHY = "it reaches below the library-shortcut watch: review by hand"


def _parse(source: str):
    """The cell's syntax tree (IPython's magics and shell escapes made Python first), or None."""
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        pass
    try:
        from IPython.core.inputtransformer2 import TransformerManager
        return ast.parse(TransformerManager().transform_cell(source))
    except Exception:  # noqa: BLE001  (a cell that is not Python: the kernel will say so)
        return None


class _Reader(ast.NodeVisitor):
    def __init__(self, aliases: dict):
        self.aliases = aliases   # local name -> the module path it stands for (import torch as t: t -> torch)
        self.found: list[tuple[int, str]] = []

    def flag(self, node, what: str) -> None:
        self.found.append((getattr(node, "lineno", 0), what))

    def dotted(self, node) -> str | None:
        """`torch.ops.aten` for an attribute chain that starts at a name, aliases resolved."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        parts.append(self.aliases.get(node.id, node.id))
        return ".".join(reversed(parts))

    def low_level(self, name: str | None) -> str | None:
        if not name:
            return None
        return next((p for p in LOW_LEVEL if name == p or name.startswith(p + ".")), None)

    def visit_Import(self, node):
        for a in node.names:
            if self.low_level(a.name):
                self.flag(node, f"imports {a.name}")
            if a.name == "importlib" or a.name.startswith("importlib."):
                # importlib.util.find_spec is the lessons' own; import_module is flagged where it is called
                pass
            if a.asname:
                self.aliases[a.asname] = a.name
            else:
                self.aliases.pop(a.name.split(".")[0], None)
        self.generic_visit(node)

    def visit_ImportFrom(self, node):
        module = node.module or ""
        for a in node.names:
            full = f"{module}.{a.name}" if module else a.name
            if self.low_level(module) or self.low_level(full):
                self.flag(node, f"imports {full}")
            elif a.name in NAMES:
                self.flag(node, f"imports {full}: {NAMES[a.name]}")
            elif module == "importlib" and a.name in ("import_module", "__import__"):
                self.flag(node, f"imports importlib.{a.name}: imports a module named at run time")
            self.aliases[a.asname or a.name] = full
        self.generic_visit(node)

    def visit_Attribute(self, node):
        name = self.dotted(node)
        top = self.low_level(name)
        if top and not isinstance(getattr(node, "_parent_attr", None), ast.Attribute):
            self.flag(node, f"uses {name}")
        elif node.attr in NAMES and not top:
            self.flag(node, f"uses .{node.attr}: {NAMES[node.attr]}")
        elif name in ("importlib.import_module", "importlib.__import__", "builtins.__import__"):
            self.flag(node, f"uses {name}: imports a module named at run time")
        for child in ast.iter_child_nodes(node):
            child._parent_attr = node
        if top:  # one finding for the whole chain
            return
        self.generic_visit(node)

    def visit_Name(self, node):
        full = self.aliases.get(node.id)
        if full and self.low_level(full) and not isinstance(getattr(node, "_parent_attr", None),
                                                            ast.Attribute):
            self.flag(node, f"uses {full} (as {node.id})")
        elif node.id in NAMES:
            self.flag(node, f"uses {node.id}: {NAMES[node.id]}")

    def visit_Call(self, node):
        fn = node.func
        if isinstance(fn, ast.Name) and fn.id in DYNAMIC_CALLS and fn.id not in self.aliases:
            self.flag(node, f"calls {fn.id}(): {DYNAMIC_CALLS[fn.id]}")
        if isinstance(fn, ast.Name) and fn.id in NAME_ATTRS and len(node.args) >= 2:
            name, target = node.args[1], node.args[0]
            of = self.dotted(target) if isinstance(target, (ast.Attribute, ast.Name)) else None
            # a computed name on a module (torch, or what a call gave): self's layers made in a loop are not
            # flagged
            on_module = isinstance(target, ast.Call) or bool(of and (of == "torch" or of.startswith("torch.")
                                                                     or
                                                                     of in ("sys", "builtins", "importlib")))
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                if on_module:
                    self.flag(node, f"calls {fn.id}() on {of or 'a module'} with a name built at run time")
            elif name.value in NAMES or self.low_level(f"torch.{name.value}") or name.value in ("_C", "ops"):
                self.flag(node, f"calls {fn.id}(..., {name.value!r})")
        self.generic_visit(node)

    def visit_Subscript(self, node):
        target = node.value
        computed = not (isinstance(node.slice, ast.Constant))
        name = self.dotted(target) if isinstance(target, (ast.Attribute, ast.Name)) else None
        if computed and (name == "sys.modules"
                         or (isinstance(target, ast.Attribute) and target.attr == "__dict__")
                         or (isinstance(target, ast.Call) and isinstance(target.func, ast.Name)
                             and target.func.id in ("vars", "globals"))):
            self.flag(node, "looks a name up at run time (a computed key)")
        self.generic_visit(node)

    def _store(self, target, node):
        if isinstance(target, ast.Attribute) and target.attr == "__code__":
            self.flag(node, "assigns a function's __code__: " + NAMES["__code__"])

    def visit_Assign(self, node):
        for t in node.targets:
            for sub in ast.walk(t):
                self._store(sub, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._store(node.target, node)
        self.generic_visit(node)


def audit(source: str, aliases: dict | None = None) -> list[tuple[int, str]]:
    """[(line, what)] for one cell's source, in line order (one finding per line). `aliases`: the module names
    the earlier cells bound (updated with this cell's imports)."""
    tree = _parse(source)
    if tree is None:
        return []
    reader = _Reader({} if aliases is None else aliases)
    reader.visit(tree)
    seen, out = set(), []
    for line, what in sorted(reader.found, key=lambda f: f[0]):
        if line not in seen:
            seen.add(line)
            out.append((line, what))
    return out


def audit_notebook(nb, limit: int = 10) -> list[str]:
    """The report's problems for a notebook's code cells (numbered as in the submission, from 1): each finding
    with its cell, line and code; at most `limit`, and a count of the rest."""
    aliases: dict = {}
    out: list[str] = []
    total = 0
    for number, cell in enumerate(getattr(nb, "cells", []) or [], 1):
        if cell.get("cell_type") != "code" or not isinstance(cell.get("source"), str):
            continue
        lines = cell["source"].splitlines()
        for line, what in audit(cell["source"], aliases):
            total += 1
            if len(out) < limit:
                code = lines[line - 1].strip()[:120] if 0 < line <= len(lines) else ""
                out.append(f"cell {number}, line {line}: `{code}` {what}; {WHY}")
    if total > len(out):
        out.append(f"{total - len(out)} more lines reach below the library-shortcut watch")
    return out
