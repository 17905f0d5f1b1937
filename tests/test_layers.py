"""The layers of DESIGN.md, checked on the source: who may import Dask, zarr and which of our packages."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dask_podracer"


def imports(path: Path) -> set[str]:
    """Top-level names of every module `path` imports, anywhere in it (function-level imports included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def modules(under: str = "") -> list[Path]:
    return sorted((PACKAGE / under).rglob("*.py"))


def layer(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def test_only_population_imports_dask():
    offenders = [str(p.relative_to(PACKAGE)) for p in modules() if layer(p) != "population"
                 and {n.split(".")[0] for n in imports(p)} & {"dask", "distributed"}]
    assert offenders == []


def test_only_store_imports_zarr():
    offenders = [str(p.relative_to(PACKAGE)) for p in modules() if layer(p) != "store"
                 and "zarr" in {n.split(".")[0] for n in imports(p)}]
    assert offenders == []


@pytest.mark.parametrize("package, allowed", [
    ("envs", set()),
    ("agents", {"envs"}),
    ("store", set()),
    ("train", {"envs", "agents", "store"}),
    ("dashboard", set()),
])
def test_packages_import_only_the_layers_below_them(package, allowed):
    ours = {}
    for path in modules(package):
        used = {n.split(".")[1] for n in imports(path) if n.startswith("dask_podracer.")}
        ours[str(path.relative_to(PACKAGE))] = used - allowed - {package}
    assert {module: used for module, used in ours.items() if used} == {}
