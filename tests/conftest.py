import os
import pathlib

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
# the real Multi30k files, beside the repository on the development machine only (never committed)
MULTI30K = pathlib.Path(os.environ.get("MULTI30K_MIRROR", ROOT.parent / "shared" / "data" / "multi30k"))

torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
