"""How a check, a graded name and a notebook's run end, as types (as pytest's `_pytest/outcomes.py`), and the
report's line for one check, rendered here only.

Code that must know how something ended reads its outcome, never the text of its message: a check's line is
written for the learner and may hold anything the learner's code raised.
"""
from __future__ import annotations

import enum


class Outcome(enum.Enum):
    """How one check ended (core.run_check, the checker's run)."""
    PASSED = "passed"
    FAILED = "failed"        # the check's verdict, or what the learner's code raised
    TIMEOUT = "timeout"      # past its time limit: the name's other checks are skipped
    LOST = "lost"            # the kernel stopped answering (its channel broke): the other checks are skipped
    REFUSED = "refused"      # the learner's code called a shortcut the stage forbids
    SKIPPED = "skipped"      # not run: an earlier check of the name timed out or lost the kernel


class Verdict(tuple):
    """(points, line) of one check, as run_check has always returned it, and its `outcome`."""

    def __new__(cls, points: float, line: str, outcome: Outcome):
        self = super().__new__(cls, (points, line))
        self.outcome = outcome
        return self

    @property
    def points(self) -> float:
        return self[0]

    @property
    def line(self) -> str:
        return self[1]

    @property
    def stops_the_name(self) -> bool:
        """Whether the name's later checks are skipped after this one."""
        return self.outcome in (Outcome.TIMEOUT, Outcome.LOST)


class Ending(enum.Enum):
    """How the runner's execution of a notebook ended (status.json's "ending"), when it stopped with an error.
    """
    STOPPED = "stopped"          # the notebook's time limit
    DEAD_KERNEL = "dead_kernel"  # the kernel exited, was killed or crashed
    NO_START = "no_start"        # the kernel or the checker did not start (no cell ran)
    CELL_TIMEOUT = "cell_timeout"  # a cell ran past its limit and could not be interrupted
    OTHER = "other"              # anything else that stopped the run


def check_line(title: str, top: float, passed: bool, note: str | None = None) -> str:
    """The report's line for one check worth `top`: "✓ title [2/2]" when it passed, else "✗ title [0/2]"; then
    ": note" when there is one. Example: check_line("rows sum to 1", 2, False, "got 1.5") -> "✗ rows sum to 1
    [0/2]: got 1.5"."""
    head = f"✓ {title} [{top:g}/{top:g}]" if passed else f"✗ {title} [0/{top:g}]"
    return head if note is None else f"{head}: {note}"


def name_lines(lines, flags, error: str | None) -> list[str]:
    """A graded name's lines in the report: its checks' lines, then each thing refused, then the grader's
    error."""
    return list(lines) + [f"✗ refused: {f}" for f in flags] + ([f"✗ {error}"] if error else [])


def failed_title(line: str) -> str | None:
    """The check's title in a "✗" line of the report (check_line's, or a name's own "✗ what: why"), else None:
    the class summary reads the reports already written, whose lines are all it has."""
    if not line.startswith("✗ "):
        return None
    return line[2:].split(" [0/")[0] if " [0/" in line else line[2:].split(":")[0]
