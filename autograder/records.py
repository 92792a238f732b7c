"""What crosses between the grade command's processes, as typed records (as pytest's `reports.py`): the spec
each child reads, the checker's verdict on a graded name, the runner's status, and each cell's and notebook's
result.

Each record is written by one process and read by another, as JSON whose keys are its fields in order (the
files keep the bytes they had as plain dicts): `to_json()` gives that dict, `from_json(d)` reads one back,
taking the fields it knows and the defaults for those missing (a record from an older run, or a child that
stopped early)."""
from __future__ import annotations

import dataclasses
import json
import pathlib
from dataclasses import dataclass, field


class Record:
    """to_json/from_json, write/read for a dataclass of plain values."""

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_json(cls, data: dict):
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def write(self, path) -> None:
        pathlib.Path(path).write_text(json.dumps(self.to_json()))

    @classmethod
    def read(cls, path):
        return cls.from_json(json.loads(pathlib.Path(path).read_text()))


# ------------------------------------------------------------------------- the specs each child reads
@dataclass
class CheckerSpec(Record):
    """checker.json, read by autograder/checker.py: its socket, its results file, {cell nonce: contract name},
    the kernel's uid (None without isolation), its threads, its own temporary folder, its address space
    (bytes)."""
    socket: str
    results: str
    cells: dict
    uid: int | None = None
    threads: int = 1
    tmp: str | None = None
    memory: int | None = None


@dataclass
class JailSpec(Record):
    """jail.json, read by autograder/jail.py (the kernel's launcher): the kernel's folders, what it may write,
    its token, limits, whether it is isolated, and what its file system shows, hides and protects."""
    work: str = ""
    home: str = ""
    conn: str | None = None
    writable: list = field(default_factory=list)
    token: str = ""
    memory: int | None = None
    file_size: int | None = None
    isolate: bool = False
    threads: int = 1
    protected: list = field(default_factory=list)
    hide: list = field(default_factory=list)
    show: list = field(default_factory=list)
    views: dict = field(default_factory=dict)
    server: str | None = None


@dataclass
class RunSpec(Record):
    """spec.json, read by the runner (autograder/runner.py's `_execute`): the prepared notebook, where to
    write its status, the kernel's working folder, the limits and deadline, the checker's spec and the folders
    of the run."""
    prepared: str
    status: str
    work: str
    cell_timeout: float
    log: str
    timeout: float
    deadline: float
    checker: str
    private: str
    ipc: str
    connection_file: str
    sealed: str
    checker_server: str | None = None


# ------------------------------------------------------------------------------- what comes back
@dataclass
class RunStatus(Record):
    """status.json, the runner's report: the error that stopped it and how it ended (outcomes.Ending), the
    prepared notebook's cell it was in, the cells interrupted at their time limit, what cells raised, the last
    cell reached."""
    error: str | None = None
    cell: int | None = None
    interrupted: list = field(default_factory=list)
    errors: dict = field(default_factory=dict)
    reached: int | None = None
    stopped: bool = False
    ending: str | None = None


@dataclass
class NameVerdict(Record):
    """A line of results.jsonl: the checker's verdict on the graded name of one cell (`cell`, its nonce)."""
    cell: str
    name: str | None = None
    points: float = 0.0
    max_points: float = 0.0
    lines: list = field(default_factory=list)
    flags: list = field(default_factory=list)
    error: str | None = None
    seconds: float | None = None
    undefined: bool = False  # the kernel had no such name when the cell ran (the grade command says why)


@dataclass
class CellResult(Record):
    """One graded cell in the report."""
    grade_id: str
    points: float
    max_points: float
    message: str


@dataclass
class NotebookResult(Record):
    """One notebook in the report, as grade_notebook returns it (the batch adds student, sha256, graded_at).
    """
    path: str
    points: float = 0.0
    max_points: float = 0.0
    error: str | None = None
    problems: list = field(default_factory=list)
    cells: list = field(default_factory=list)  # CellResult
    seconds: float = 0.0
    isolated: bool = False
    lesson: str | None = None

    def to_json(self) -> dict:
        out = super().to_json()
        out["cells"] = [c.to_json() if isinstance(c, CellResult) else c for c in self.cells]
        return out

    @classmethod
    def from_json(cls, data: dict):
        out = super().from_json(data)
        out.cells = [CellResult.from_json(c) if isinstance(c, dict) else c for c in out.cells]
        return out
