"""A process whose import of torch was interrupted (a notebook's stop button during the first import of ours) is
told what happened and what mends it, in one line, when it imports torch again through us."""

import subprocess
import sys

INTERRUPTED_THEN_AGAIN = """
import importlib.abc
import sys


class StopButton(importlib.abc.MetaPathFinder):
    # KeyboardInterrupt, as a notebook's stop button raises it, once torch's import reaches torch.nn
    def find_spec(self, name, path=None, target=None):
        if name == "torch.nn":
            sys.meta_path.remove(self)
            raise KeyboardInterrupt
        return None


sys.meta_path.insert(0, StopButton())
try:
    from dask_podracer.envs import make_vec_env
except KeyboardInterrupt:
    print("interrupted with", sum(m.startswith("torch.") for m in sys.modules), "parts of torch loaded")
try:
    from dask_podracer.envs import make_vec_env
    print("imported again")
except BaseException as e:
    print(f"{type(e).__name__}: {e}")
"""


def test_an_interrupted_import_of_torch_names_the_remedy_when_imported_again():
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_THEN_AGAIN], capture_output=True, text=True,
                          timeout=120, check=True)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("interrupted with") and not lines[0].startswith("interrupted with 0 "), lines
    # without the guard: "AttributeError: partially initialized module 'torch' has no attribute ..."
    assert lines[1] == ("ImportError: an earlier import of torch in this process was interrupted (a notebook's stop "
                        "button, Ctrl-C) and left parts of it loaded, which cannot be loaded again: restart the "
                        "Python process (the notebook's kernel)"), lines


def test_the_guard_leaves_a_usual_import_alone():
    code = ("import sys\nimport dask_podracer\nimport torch, numpy\n"
            "from dask_podracer._import_guard import InterruptedImportGuard\n"
            "print(sum(isinstance(f, InterruptedImportGuard) for f in sys.meta_path), torch.ones(2).sum().item())\n"
            "import importlib; importlib.reload(dask_podracer)\n"
            "print(sum(isinstance(f, InterruptedImportGuard) for f in sys.meta_path))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["1", "2.0", "1"]  # installed once, however often the package is loaded
