"""The project's modules import each other in layers, without cycles: server -> critics -> memory -> board.

Every import statement counts, wherever it stands: at the top, inside a function, under
`if TYPE_CHECKING:`. A cycle that only a lazy or a typing import closes is still two modules that
cannot be understood (or moved) one without the other.

How an import becomes an edge, from module M:
- `import hiveboard.a.b` -> hiveboard.a.b (a package: its __init__);
- `from X import name` (X absolute or relative to M) -> X.name when that is a module of the project
  (`from . import lanes` imports the submodule), otherwise X, whose __init__ then has its own edges
  to what it re-exports.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("hiveboard.board", "hiveboard.memory", "hiveboard.critics", "hiveboard.server")  # lowest first


def package_dirs() -> dict[str, Path]:
    """Package name -> its directory, as pyproject's [tool.setuptools.package-dir] maps them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {name: ROOT / folder for name, folder in config["tool"]["setuptools"]["package-dir"].items()}


def project_modules(dirs: dict[str, Path] | None = None, roots: tuple[str, ...] = LAYERS) -> dict[str, Path]:
    """Module name -> file, for every module of the `roots` packages (and their subpackages)."""
    dirs = dirs or package_dirs()
    modules: dict[str, Path] = {}
    for root in roots:
        for path in sorted(dirs[root].rglob("*.py")):
            # the innermost mapped package holding the file names it (server/web is hiveboard.server.web)
            package, folder = max(
                ((name, d) for name, d in dirs.items() if path.parent.is_relative_to(d)),
                key=lambda nd: len(nd[1].parts),
            )
            parts = [*path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


def is_package(module: str, modules: dict[str, Path]) -> bool:
    return modules[module].name == "__init__.py"


def imports(module: str, modules: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(imported project module, line) for every import statement in `module` that names one."""
    tree = ast.parse(modules[module].read_text(encoding="utf-8"), filename=str(modules[module]))
    package = module if is_package(module, modules) else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("hiveboard."):
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0]
                source = f"{base}.{node.module}" if node.module else base
            elif node.module == "hiveboard" or (node.module or "").startswith("hiveboard."):
                source = node.module
            else:
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                yield (submodule if submodule in modules else source), node.lineno


def import_graph(modules: dict[str, Path]) -> tuple[dict[str, dict[str, int]], list[str]]:
    """module -> {imported module: first line}, and the imports that name no module of the project."""
    graph: dict[str, dict[str, int]] = {module: {} for module in modules}
    unresolved = []
    for module in modules:
        for target, line in imports(module, modules):
            if target in modules:
                graph[module][target] = min(line, graph[module].get(target, line))
            else:
                unresolved.append(f"{where(modules[module])}:{line} imports {target}")
    return graph, unresolved


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module, and modules importing themselves
    (Tarjan's algorithm, iterative: no recursion limit to meet)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph[node]:
                        found.append(sorted(component))
    return sorted(found)


def describe(component: list[str], graph: dict[str, dict[str, int]], modules: dict[str, Path]) -> str:
    """A cycle as its modules and the imports inside it, with file and line, to know where to cut."""
    lines = [" <-> ".join(component)]
    for module in component:
        for target, line in sorted(graph[module].items()):
            if target in component:
                lines.append(f"    {where(modules[module])}:{line}: {module} imports {target}")
    return "\n".join(lines)


def where(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def layer(module: str) -> int:
    return next(rank for rank, package in enumerate(LAYERS) if module == package or module.startswith(package + "."))


def test_the_walker_sees_every_kind_of_import(tmp_path):
    """The rules above on a small package: a walker that missed a kind of import would pass any project."""
    files = {
        "a/__init__.py": "from .x import X\n",
        "a/x.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .y import Y\nX = 1\n",
        "a/y.py": "def f():\n    from . import x\nY = 1\n",
        "a/sub/__init__.py": "from .. import y\n",
        "a/sub/z.py": "import hiveboard.a.sub\nfrom hiveboard.a import X, x\nfrom hiveboard import a\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    modules = project_modules({"hiveboard.a": tmp_path / "a", "hiveboard.a.sub": tmp_path / "a/sub"}, ("hiveboard.a",))
    graph, unresolved = import_graph(modules)
    assert not unresolved
    assert {module: sorted(targets) for module, targets in graph.items()} == {
        "hiveboard.a": ["hiveboard.a.x"],
        "hiveboard.a.x": ["hiveboard.a.y"],
        "hiveboard.a.y": ["hiveboard.a.x"],
        "hiveboard.a.sub": ["hiveboard.a.y"],
        "hiveboard.a.sub.z": ["hiveboard.a", "hiveboard.a.sub", "hiveboard.a.x"],
    }
    assert cycles(graph) == [["hiveboard.a.x", "hiveboard.a.y"]]
    assert cycles({"m": {"m": 1}}) == [["m"]]


def test_every_project_import_names_a_module_of_the_project():
    _, unresolved = import_graph(project_modules())
    assert not unresolved, "imports of hiveboard modules that do not exist:\n" + "\n".join(unresolved)


def test_no_import_cycles():
    modules = project_modules()
    graph, _ = import_graph(modules)
    found = cycles(graph)
    assert not found, f"{len(found)} import cycle(s):\n" + "\n".join(describe(c, graph, modules) for c in found)


def test_packages_import_only_lower_layers():
    modules = project_modules()
    graph, _ = import_graph(modules)
    upward = [
        f"{where(modules[module])}:{line}: {module} imports {target}"
        for module, targets in sorted(graph.items())
        for target, line in sorted(targets.items())
        if layer(target) > layer(module)
    ]
    assert not upward, (
        "imports from a lower layer to a higher one (server -> critics -> memory -> board):\n" + "\n".join(upward)
    )
