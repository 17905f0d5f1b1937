import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # for tests/helpers.py


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tests are seeded and run with one thread, so their numbers repeat exactly."""
    torch.set_num_threads(1)
