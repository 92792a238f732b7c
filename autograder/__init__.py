"""The course's autograder. In a lesson: `from autograder import check`, then `check(softmax)` prints
one line per check and returns the points earned. It never imports `solutions`: the checks hold the
learner's code against PyTorch's own modules, sacrebleu, stored fixtures and properties.

The names below are loaded on first use (PEP 562), so that the grade command's own processes (reading a
submission, running a kernel, the jail) start without importing PyTorch and the checks."""
__all__ = ["check", "max_points", "CheckFailure", "REGISTRY"]


def __getattr__(name):
    if name in __all__:
        from . import core
        return getattr(core, name)
    raise AttributeError(f"module 'autograder' has no attribute {name!r}")
