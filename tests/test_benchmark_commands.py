"""The benchmarks are command lines too: a bad value is one line on stderr and exit status 2 (solutions.cli's
convention, or benchmarks/_args.py's where the course must not be imported), before anything is measured.
Each script is loaded in this process and its main() called with the arguments (a process each would cost a
PyTorch import each); bpe.py, which imports no PyTorch, runs as a real command too."""
import importlib.util
import subprocess
import sys

import pytest

from tests.conftest import ROOT

CASES = [
    ("bpe.py", ["--merges", "0"], "argument --merges: expected a whole number >= 1, got '0'"),
    ("decoding.py", ["--sources", "-5"], "argument --sources: must be >= 1, got -5"),
    ("distributed_cpu.py", ["40", "2", "3x"], "argument runs: expected a comma list of PROCESSESxTHREADS"),
    ("distributed_cpu.py", ["0"], "argument steps: must be >= 1, got 0"),
    ("grading.py", ["--jobs", "-1"], "argument --jobs: must be >= 0, got -1"),
    ("hostile_batch.py", ["--peer", ".", "--runs", "0"], "argument --runs: must be >= 1, got 0"),
    ("kernel_server.py", ["--copies", "0"], "argument --copies: must be >= 1, got 0"),
    ("kernel_start.py", ["--runs", "many"], "argument --runs: expected a whole number >= 1, got 'many'"),
    ("model.py", ["--device", "tpu"], "argument --device: expected cpu or cuda"),
    ("train_step_cpu.py", ["--steps", "0"], "argument --steps: must be >= 1, got 0"),
    ("tune_decoding.py", ["x.pt", "--beams", "0"], "argument --beams: must be >= 1, got 0"),
]


def _load(script, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(f"benchmark_{script[:-3]}", ROOT / "benchmarks" / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("script,argv,says", CASES, ids=[f"{s} {' '.join(a)}" for s, a, _ in CASES])
def test_a_bad_value_is_one_line_and_status_2(script, argv, says, monkeypatch, capsys):
    module = _load(script, monkeypatch)
    monkeypatch.setattr(sys, "argv", [script, *argv])
    with pytest.raises(SystemExit) as stop:
        module._arguments(argv) if script == "distributed_cpu.py" else module.main()
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and out == "", (stop.value.code, out, err)
    assert err.count("\n") == 1 and err.startswith(f"python benchmarks/{script}: error: "), err
    assert says in err, err


def test_the_real_command_says_the_same():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bpe.py"), "--merges", "0"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (2, ""), done
    assert done.stderr == ("python benchmarks/bpe.py: error: argument --merges: expected a whole number "
                           ">= 1, got '0' (see python benchmarks/bpe.py --help)\n"), done.stderr


def test_every_benchmark_script_is_here():
    """A new script gets a case above."""
    scripts = {p.name for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_")}
    assert scripts == {script for script, _, _ in CASES}, scripts ^ {script for script, _, _ in CASES}
