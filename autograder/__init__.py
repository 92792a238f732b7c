"""The course's autograder. In a lesson: `from autograder import check`, then `check(softmax)` prints
one line per check and returns the points earned. It never imports `solutions`: the checks hold the
learner's code against PyTorch's own modules, sacrebleu, stored fixtures and properties."""
from .core import CheckFailure, check, max_points, REGISTRY

__all__ = ["check", "max_points", "CheckFailure", "REGISTRY"]
