"""glibc's malloc thresholds under a Dask nanny's environment, and a segment undoing the freeze."""

import ctypes
import json
import os
import subprocess
import sys

import pytest

from dask_podracer.train import host_memory
from dask_podracer.train.host_memory import restore_malloc_thresholds

GLIBC_WITH_MALLINFO2 = sys.platform.startswith("linux") and hasattr(ctypes.CDLL(None), "mallinfo2")

# In a fresh process (glibc reads its variables at start): is a new 1 MiB block a fresh mmap? host_memory.py needs
# ctypes only: it is loaded from its file, not through dask_podracer.train, whose import loads torch (2-3 s a process).
PROBE = """
import ctypes, importlib.util, json, sys
spec = importlib.util.spec_from_file_location("host_memory", sys.argv[2])
host_memory = importlib.util.module_from_spec(spec)
spec.loader.exec_module(host_memory)
restore_malloc_thresholds = host_memory.restore_malloc_thresholds

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
restored = restore_malloc_thresholds() if sys.argv[1] == "restore" else False
before = libc.mallinfo2().hblks
block = bytearray(1 << 20)
print(json.dumps({"restored": restored, "mmapped": libc.mallinfo2().hblks - before}))
"""


def probe(mode: str, **variables: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | variables
    out = subprocess.run([sys.executable, "-c", PROBE, mode, host_memory.__file__], env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout)


@pytest.mark.skipif(not GLIBC_WITH_MALLINFO2, reason="needs glibc 2.33+ (mallinfo2)")
def test_the_nanny_variable_makes_every_large_block_an_mmap_and_the_restore_undoes_it():
    assert probe("keep", MALLOC_TRIM_THRESHOLD_="65536") == {"restored": False, "mmapped": 1}
    assert probe("restore", MALLOC_TRIM_THRESHOLD_="65536") == {"restored": True, "mmapped": 0}


@pytest.mark.skipif(not GLIBC_WITH_MALLINFO2, reason="needs glibc 2.33+ (mallinfo2)")
def test_a_chosen_mmap_threshold_or_no_variable_is_left_alone():
    assert probe("restore", MALLOC_TRIM_THRESHOLD_="65536", MALLOC_MMAP_THRESHOLD_="131072")["restored"] is False
    assert probe("restore")["restored"] is False  # glibc's dynamic threshold is already on


def test_restore_reads_the_environment_it_is_given():
    assert restore_malloc_thresholds({}) is False
    assert restore_malloc_thresholds({"MALLOC_MMAP_THRESHOLD_": "1", "MALLOC_TRIM_THRESHOLD_": "1"}) is False
