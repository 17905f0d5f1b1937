"""What a new user met installing the package from a wheel (not editable) and using it outside the repository.

Found by the install hunt: `pip install '.[box2d]'` left LunarLander unbuildable (gymnasium's box2d module imports
pygame), and `podracer pin` / `--unpin` on a store one may only read ended in a traceback from deep in zarr.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from packaging.requirements import Requirement

from dask_podracer.store import PodracerStore

ROOT = Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", Requirement(requirement).name).lower()


def test_the_box2d_extra_installs_what_gymnasiums_box2d_envs_import():
    """gymnasium's box2d module imports pygame for every Box2D id (CarRacing's import), so `[box2d]` with only
    the Box2D wheel gave 'pygame is not installed' for LunarLander-v3, and the hint named the extra just installed."""
    ours = {_name(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
            ["optional-dependencies"]["box2d"]}
    theirs = set()
    for text in importlib.metadata.requires("gymnasium") or []:
        requirement = Requirement(text)
        if requirement.marker is not None and requirement.marker.evaluate({"extra": "box2d"}) \
                and not requirement.marker.evaluate({"extra": ""}):
            theirs.add(_name(text))
    assert theirs, "gymnasium's metadata names no box2d extra any more: revisit this test"
    # box2d-py and swig are gymnasium's source build of Box2D, which our box2d wheel replaces
    missing = theirs - ours - {"box2d-py", "swig"}
    assert not missing, f"the box2d extra lacks {sorted(missing)}, which gymnasium's box2d envs import"


def _as_a_user_who_cannot_write(command: list[str]) -> list[str]:
    """`command` run where a read-only directory stops it: as root, without the capability to override modes."""
    if os.geteuid() != 0:
        return command
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root writes into read-only directories, and setpriv (to drop that) is not here")
    caps = "-dac_override,-dac_read_search,-fowner"
    return [setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}", *command]


def _read_only(path: Path) -> None:
    for folder, dirs, files in os.walk(path):
        for name in files:
            p = Path(folder, name)
            p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    for folder, dirs, files in sorted(os.walk(path), reverse=True):  # the deepest first
        p = Path(folder)
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _writable_again(path: Path) -> None:
    for folder, dirs, files in os.walk(path):
        Path(folder).chmod(0o755)
        for name in files:
            Path(folder, name).chmod(0o644)


@pytest.mark.parametrize("unpin", [False, True])
def test_pin_and_unpin_on_a_read_only_store_say_so_in_one_line(tmp_path, unpin):
    path = tmp_path / "shared é store.zarr"
    store = PodracerStore(path, create=True)
    store.save_checkpoint("s000001-a", {"w": np.arange(4.0)}, {"score": 1.0})
    if unpin:
        store.pin("s000001-a", "pinned before the store was made read-only")
    _read_only(path)
    probe = path / "probe"
    try:
        if os.geteuid() == 0 and shutil.which("setpriv"):
            can_write = subprocess.run(_as_a_user_who_cannot_write(["mkdir", str(probe)]),
                                       capture_output=True, check=False).returncode == 0
        else:
            can_write = os.access(path, os.W_OK)
        if can_write:
            pytest.skip("this file system lets a read-only directory be written")
        command = [sys.executable, "-m", "dask_podracer.cli", "pin", str(path), "s000001-a"]
        done = subprocess.run(_as_a_user_who_cannot_write(command + (["--unpin"] if unpin else [])),
                              capture_output=True, text=True, timeout=120, check=False)
    finally:
        _writable_again(path)
    verb = "unpin" if unpin else "pin"
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines() == [f"podracer: error: cannot {verb} 's000001-a' in store '{path}': "
                                        "Permission denied"], done.stderr
    reopened = PodracerStore(path)  # nothing stored was lost
    assert reopened.checkpoint_keys() == ["s000001-a"]
    assert np.array_equal(reopened.load_checkpoint("s000001-a").arrays["w"], np.arange(4.0))
    assert reopened.pinned() == ({"s000001-a"} if unpin else set())


def test_a_file_url_of_a_path_with_spaces_and_accents_opens_that_store(tmp_path, capsys):
    """`Path.as_uri()` percent-encodes: `file:///tmp/my%20runs/%C3%A9preuve.zarr` opened nothing ('no podracer
    store at .../my%20runs/%C3%A9preuve.zarr'), and `train --store` with it started a second store there."""
    from dask_podracer.cli import main

    path = tmp_path / "my runs" / "épreuve.zarr"
    store = PodracerStore(path, create=True)
    store.save_checkpoint("s000001-a", {"w": np.arange(4.0)}, {"score": 1.0})
    url = path.as_uri()
    assert "%20" in url and "%C3%A9" in url
    assert PodracerStore(url).url == str(path)
    assert PodracerStore(url).checkpoint_keys() == ["s000001-a"]
    assert PodracerStore(url.replace("file://", "file://localhost")).url == str(path)
    assert main(["status", url]) == 0
    assert str(path) in capsys.readouterr().out
    assert not (tmp_path / "my%20runs").exists()  # nothing made under the encoded name


def test_a_wheel_built_again_in_the_same_clone_leaves_out_a_module_removed_meanwhile(tmp_path):
    """setuptools packs build/lib, which it never empties: `pip install .` after a pull that removed a module still
    installed it (seen with a module added, built, deleted and built again: the second wheel had it)."""
    import zipfile

    clone = tmp_path / "clone"
    clone.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, clone / name)
    shutil.copytree(ROOT / "dask_podracer", clone / "dask_podracer",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))

    def build() -> set[str]:
        out = tmp_path / f"wheels{len(list(tmp_path.glob('wheels*')))}"
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                               "-q", "-w", str(out), str(clone)],
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        (wheel,) = out.glob("*.whl")
        return set(zipfile.ZipFile(wheel).namelist())

    (clone / "dask_podracer" / "gone_since.py").write_text("X = 1\n")
    assert "dask_podracer/gone_since.py" in build()
    (clone / "dask_podracer" / "gone_since.py").unlink()
    names = build()
    assert "dask_podracer/gone_since.py" not in names
    assert "dask_podracer/cli.py" in names and not any(n.startswith("tests/") for n in names)


def test_train_on_a_store_it_cannot_write_is_refused_before_the_embedded_cluster_starts(tmp_path):
    """The run's lock was first opened after the embedded cluster had started (seconds, Dask's port warnings)."""
    path = tmp_path / "read only.zarr"
    PodracerStore(path, create=True)
    config = tmp_path / "c.toml"
    config.write_text('[run]\nenv = "Pendulum-v1"\nalgorithm = "sac"\nmax_segments = 1\n'
                      '[cluster]\nworkers = 1\ndashboard_address = "127.0.0.1:0"\n')
    _read_only(path)
    try:
        if os.geteuid() == 0 and shutil.which("setpriv"):
            can_write = subprocess.run(_as_a_user_who_cannot_write(["mkdir", str(path / "probe")]),
                                       capture_output=True, check=False).returncode == 0
        else:
            can_write = os.access(path, os.W_OK)
        if can_write:
            pytest.skip("this file system lets a read-only directory be written")
        command = [sys.executable, "-m", "dask_podracer.cli", "train", str(config), "--store", str(path)]
        scratch = tmp_path / "tmp"  # where a cluster's workers would make their dask-scratch-space
        scratch.mkdir()
        done = subprocess.run(_as_a_user_who_cannot_write(command), capture_output=True, text=True, timeout=120,
                              check=False, env={**os.environ, "TMPDIR": str(scratch)})
    finally:
        _writable_again(path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [f"podracer: error: store '{path}': cannot open its run.lock "
                                        "(Permission denied)"], done.stderr
    assert not (scratch / "dask-scratch-space").exists(), "a cluster started"
