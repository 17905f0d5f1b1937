"""Only what pyproject.toml cannot say: a wheel holds the package as it is now.

setuptools copies the modules into build/lib and packs what is there, and never empties it: a wheel built again
in the same clone (`pip install .` after a `git pull` that removed or moved a module) shipped the module that is
gone as well. build_py starts from an empty copy of the package here.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class FreshBuildPy(build_py):
    def run(self):
        shutil.rmtree(Path(self.build_lib) / "dask_podracer", ignore_errors=True)
        super().run()


setup(cmdclass={"build_py": FreshBuildPy})
