"""The product uses only the public APIs of the libraries it imports; server/compat.py is the one place for what
the MCP SDK offers no public way to do (issue 50).

A library's private name is one starting with `_` (not a `__dunder__`) that the library defines. Python does not
say who owns `x._name`, so three checks together tell it apart from our own privates:

1. `lib._name` where `lib` (or the root of `lib.a.b`) is a name imported from a third-party module: a private of
   that library, whatever it is (`psycopg._x`, `Database._x`).
2. `obj._name` on any other object (a variable, a call's result, `self.x`) where `_name` is defined nowhere in the
   product (no `def`/`class`, assignment, attribute store, class field or import binds it): it can only be a
   library's (`pgconn._encoding`, `server._tool_manager`). A library private that shares a name with one of ours
   escapes this check; checks 1 and 3 do not depend on names.
3. A class of ours that inherits a third-party class (followed through the real MRO, so through our own
   intermediate classes too) and defines, reads or writes on `self` a private name that the library's class
   has, as a class attribute or as `self._name` in its source: an override of a library internal
   (`TomlConfigSettingsSource._read_file`) or a use of its state.
Plus an import of a library's private module or name (`from mcp.server._otel import ...`), `getattr`/`hasattr`/
`setattr`/`delattr` with a constant private name, which hides any of the above, and
no class inheriting psycopg's Connection (a driver of our own around libpq; psycopg.connect is the public way).

The standard library is out of scope (its documented underscore names: os._exit, sys._getframe, namedtuple's
_replace and _asdict).
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import sys

from test_import_cycles import ROOT, project_modules

ALLOWED = {ROOT / "server" / "compat.py"}  # the one place for the MCP SDK's gaps
NAMEDTUPLE = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}  # public despite the underscore
IMPLICIT = {"_abc_impl"}  # set by ABCMeta on every abstract class, ours included
KNOWN: set[tuple[str, str]] = set()  # (file, name) found and accepted for now; a stale entry fails


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def top(module: str) -> str:
    return module.partition(".")[0]


def third_party(module: str) -> bool:
    return bool(module) and top(module) not in sys.stdlib_module_names and top(module) not in ("hiveboard", "builtins")


def third_party_imports(tree: ast.Module) -> set[str]:
    """The local names a module binds to third-party modules or their members."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).partition(".")[0] for a in node.names if third_party(a.name)}
        elif isinstance(node, ast.ImportFrom) and not node.level and third_party(node.module or ""):
            names |= {a.asname or a.name for a in node.names}
    return names


def defined_names(tree: ast.Module) -> set[str]:
    """Every name the module binds: definitions, assignment targets (attributes too), class fields, imports."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name | ast.arg):
            names.add(node.id if isinstance(node, ast.Name) else node.arg)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).partition(".")[0])
    return names


def root(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


def reflective_private(node: ast.AST) -> str | None:
    """The private name a getattr-like call names as a constant, if it is one."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
        and private(node.args[1].value)
    ):
        return node.args[1].value
    return None


def attribute_uses(tree: ast.Module, ours: set[str]) -> list[tuple[str, int, str]]:
    """Checks 1 and 2, and the getattr-like calls: (name, line, why)."""
    imported = third_party_imports(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom) and not getattr(node, "level", 0):
            sources = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            names = [] if isinstance(node, ast.Import) else [a.name for a in node.names]
            for part in [p for source in sources if third_party(source) for p in source.split(".")] + (
                names if third_party(sources[0]) else []
            ):
                if private(part):
                    found.append((part, node.lineno, "an import of a library's private module or name"))
        if (name := reflective_private(node)) is not None:
            found.append((name, node.lineno, f"{node.func.id} with a private name"))
        if not (isinstance(node, ast.Attribute) and private(node.attr)) or node.attr in NAMEDTUPLE:
            continue
        base = root(node.value)
        if isinstance(base, ast.Name) and base.id in imported:
            found.append((node.attr, node.lineno, f"a private attribute of {base.id}, a third-party import"))
        elif isinstance(base, ast.Name) and base.id in ("self", "cls"):
            continue  # check 3
        elif isinstance(base, ast.Name) and base.id in sys.stdlib_module_names:
            continue
        elif node.attr not in ours:
            found.append((node.attr, node.lineno, "a private attribute the product defines nowhere"))
    return found


@functools.cache
def library_privates(cls: type) -> frozenset[str]:
    """The private names a library class has: class attributes, and `self._name` in its source."""
    names = {name for name in dir(cls) if private(name)}
    try:
        source = ast.parse(inspect.getsource(cls).lstrip())  # a nested class's source is indented
    except (OSError, TypeError, SyntaxError):  # a class written in C has no source
        source = None
    if source is not None:
        names |= {
            node.attr
            for node in ast.walk(source)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
        }
    return frozenset(name for name in names if private(name)) - IMPLICIT


def class_uses(module: str, tree: ast.Module) -> list[tuple[str, int, str]]:
    """Check 3 for the module's top-level classes that inherit a third-party class."""
    found = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or not node.bases:
            continue
        cls = getattr(importlib.import_module(module), node.name, None)
        if not isinstance(cls, type):
            continue
        libraries = [
            base for base in cls.__mro__ if third_party(base.__module__) and top(base.__module__) != top(module)
        ]
        if not libraries:
            continue
        if any(base.__module__.startswith("psycopg") and base.__name__ == "Connection" for base in libraries):
            why = "subclasses psycopg's connection: use psycopg.connect and its public API"
            found.append((f"{node.name}(psycopg.Connection)", node.lineno, why))
        theirs = frozenset().union(*(library_privates(base) for base in libraries))
        for item in ast.walk(node):
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item in node.body:
                name, why = item.name, "overrides"
            elif isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name) and item.value.id == "self":
                name, why = item.attr, "uses"
            else:
                continue
            if private(name) and name in theirs:
                owner = next(base for base in libraries if name in library_privates(base))
                found.append((f"{node.name}.{name}", item.lineno, f"{why} {owner.__module__}.{owner.__qualname__}'s"))
    return found


def violations() -> list[tuple[str, str, int, str]]:
    """(file, name, line, why) for every use of a library's private name outside ALLOWED."""
    modules = {m: p for m, p in project_modules().items() if not m.endswith(".__main__")}  # that one serves
    trees = {m: ast.parse(p.read_text(encoding="utf-8"), filename=str(p)) for m, p in modules.items()}
    ours = set().union(*(defined_names(tree) for tree in trees.values()))
    found = []
    for module, path in modules.items():
        if path in ALLOWED:
            continue
        where = str(path.relative_to(ROOT))
        for name, line, why in attribute_uses(trees[module], ours) + class_uses(module, trees[module]):
            found.append((where, name, line, why))
    return found


def test_only_server_compat_touches_a_library_private():
    found = violations()
    unexpected = [f"{f}:{line}: {name}: {why}" for f, name, line, why in found if (f, name) not in KNOWN]
    assert not unexpected, "use the library's public API, or (the MCP SDK only) server/compat.py:\n" + "\n".join(
        unexpected
    )
    stale = KNOWN - {(f, name) for f, name, _, _ in found}
    assert not stale, f"no longer found, remove from KNOWN: {sorted(stale)}"


def test_each_check_catches_its_kind(tmp_path, monkeypatch):
    code = """
import psycopg
from mcp.server._otel import OpenTelemetryMiddleware
from pydantic_settings import TomlConfigSettingsSource


def uses(conn):
    return psycopg._encodings, conn.pgconn._encoding, getattr(conn, "_sock"), conn._mine, conn.parts._replace(a=1)


class Source(TomlConfigSettingsSource):
    def _read_file(self, path):
        return self._any_file_exists(path) and self._mine

    def _ours(self):
        return {}


class Driver(psycopg.Connection):
    pass
"""
    (tmp_path / "hb_sample.py").write_text(code, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    tree = ast.parse(code)
    assert [(name, why.split(",")[0]) for name, _, why in attribute_uses(tree, {"_mine"})] == [
        ("_otel", "an import of a library's private module or name"),
        ("_encodings", "a private attribute of psycopg"),
        ("_encoding", "a private attribute the product defines nowhere"),
        ("_sock", "getattr with a private name"),
    ]
    toml = "pydantic_settings.sources.providers.toml.TomlConfigSettingsSource"
    assert [(name, why) for name, _, why in class_uses("hb_sample", tree)] == [
        ("Source._read_file", f"overrides {toml}'s"),
        ("Source._any_file_exists", f"uses {toml}'s"),
        ("Driver(psycopg.Connection)", "subclasses psycopg's connection: use psycopg.connect and its public API"),
    ]
