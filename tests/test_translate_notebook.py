"""The final notebook runs top to bottom, offline, scripted with papermill: synthetic data, a tiny model."""
import json
import pathlib
import subprocess
import sys

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "lessons" / "14_translate.ipynb"


def test_parameters_cell_is_tagged_and_holds_the_settings():
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1
    for name in ("DATA", "TRAIN_MINUTES", "USE_MY_CODE", "TEST_SENTENCES"):
        assert f"\n{name} = " in "\n" + params[0].source, name
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code")


def test_notebook_runs_offline_on_the_synthetic_corpus(tmp_path):
    pytest.importorskip("papermill")
    out = tmp_path / "out.ipynb"
    proc = subprocess.run(
        [sys.executable, "-m", "papermill", str(NOTEBOOK), str(out), "-p", "DATA", "synthetic",
         "-p", "TRAIN_MINUTES", "0.3", "-p", "SIZE", "tiny", "-p", "TEST_SENTENCES", "40",
         "-p", "CHECKPOINT", str(tmp_path / "model.pt"), "--cwd", str(tmp_path)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    nb = nbformat.read(str(out), as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                   if o.output_type == "stream")
    assert "data: synthetic" in text and "BLEU" in text and "translates identically: True" in text
    figures = sum(1 for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "display_data")
    assert figures >= 2, "the loss curves and the cross-attention map"
    assert (tmp_path / "model.pt").exists()
