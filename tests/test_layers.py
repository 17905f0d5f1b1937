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
    ("agents", {"envs", "typed_fields"}),  # make_agent checks hyper-parameters as config does
    ("store", set()),
    ("train", {"envs", "agents", "store"}),
    ("dashboard", set()),
    ("tracking", {"config", "store"}),  # writes a store's history to TensorBoard or MLflow; never the population
])
def test_packages_import_only_the_layers_below_them(package, allowed):
    known = {module_name(p) for p in modules()}
    ours = {}
    for path in modules(package):
        # imported_modules resolves `from dask_podracer import train` and relative imports too; a bare
        # "dask_podracer" (its __init__, which holds only __version__) is no layer
        used = {n.split(".")[1] for n in imported_modules(path, known) if n != "dask_podracer"}
        ours[str(path.relative_to(PACKAGE))] = used - allowed - {package}
    assert {module: used for module, used in ours.items() if used} == {}


def test_typed_fields_imports_nothing_of_ours():
    # the leaf both config and agents check values with: an import of ours here would make a circle
    known = {module_name(p) for p in modules()}
    assert imported_modules(PACKAGE / "typed_fields.py", known) - {"dask_podracer"} == set()


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """Our modules `path` imports, anywhere in it (inside functions and `if TYPE_CHECKING:` included):
    `from pkg import name` names the module `pkg.name` when there is one, else the package `pkg`."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from .x import y
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return found & known


def test_no_module_imports_one_that_imports_it_back():
    """No import circle, however long, counting imports inside functions: each would work only by the order
    in which modules happen to be imported first."""
    paths = {module_name(p): p for p in modules()}
    graph = {name: imported_modules(path, set(paths)) - {name} for name, path in paths.items()}
    circles = []
    # Tarjan's strongly connected components: a component of more than one module is a circle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for other in graph[name]:
            if other not in index:
                visit(other)
                low[name] = min(low[name], low[other])
            elif other in on_stack:
                low[name] = min(low[name], index[other])
        if low[name] == index[name]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == name:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    assert circles == []


def test_the_circle_check_finds_a_circle(tmp_path):
    """The check above is not vacuous: a function-local import that closes a circle is found."""
    package = tmp_path / "dask_podracer"
    package.mkdir()
    (package / "a.py").write_text("from dask_podracer.b import thing\n")
    (package / "b.py").write_text("def thing():\n    from dask_podracer import a\n")
    known = {"dask_podracer.a", "dask_podracer.b"}
    global PACKAGE
    saved, PACKAGE = PACKAGE, package
    try:
        assert imported_modules(package / "a.py", known) == {"dask_podracer.b"}
        assert imported_modules(package / "b.py", known) == {"dask_podracer.a"}
        with pytest.raises(AssertionError):
            test_no_module_imports_one_that_imports_it_back()
    finally:
        PACKAGE = saved


def test_relative_imports_stay_inside_their_package():
    # the checks above read module names as written: `from ..population import x` (or, in a top-level module,
    # `from .population import x`) would cross a layer unseen; `from .format import x` within store/ cannot
    crossing = [(path.relative_to(PACKAGE).as_posix(), node.lineno) for path in modules()
                for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.ImportFrom) and node.level and (node.level > 1 or path.parent == PACKAGE)]
    assert crossing == []
