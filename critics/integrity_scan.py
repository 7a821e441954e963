"""Integrity scan: finds code that passes tests by attacking the test machinery instead of doing the work.

Run inside the review sandbox as a script, never imported by the server for a review:

    python -I -B integrity_scan.py [--spec DIR] [--test PATH]... [--hidden] -- FILE...

It reads each FILE with `ast` (nothing is imported or run) and prints one JSON object on stdout:
`{"findings": [{"rule", "path", "line", "what"}], "errors": [{"path", "error"}]}`. `--test` names the
files that are tests (or conftest.py): they may use pytest freely, but not rewrite its results. `--spec`
is the card creator's test directory; literals of the submitted code that equal the inputs and expected
values found there are reported (copied-expected); with `--hidden` a finding never quotes them and is marked
`"hidden": true`: the server shows it only to the card's creator and people (board/review_models.sealed).

RULES is the catalogue: the server reads each rule's id, sentence and suggestion from it (this module has
no imports beyond the standard library, so that costs nothing), and config validates rule names against it.
Context decides what is allowed:
- test code (a --test file, a `test_*` function, a `Test*` or TestCase class, a fixture) is held only to
  the rules marked strict: it may inspect frames, patch modules and builtins, skip, and compare with
  always-equal helpers, as tests do;
- `if __name__ == "__main__":` blocks never run under a test, so nothing in them is flagged;
- functions named main, cli or _main may exit and install signal handlers (a CLI's job), but not call
  os._exit or os.abort, which would end a test run that calls them as if it had passed.
"""

from __future__ import annotations

import ast
import json
import os
import re
import sys
from typing import NamedTuple


class Rule(NamedTuple):
    code: str  # the id an operator ignores or demotes and a card's creator waives (board rule-id syntax)
    sentence: str  # what the finding means, for the critique
    suggestion: str


RULES: dict[str, Rule] = {
    "test-machinery": Rule(
        "INT001",
        "touches the test framework's machinery (pytest, _pytest, unittest internals, pluggy) from code under test",
        "compute the result; do not patch, hook or import the test runner from the code under test",
    ),
    "test-skip": Rule(
        "INT002",
        "skips, xfails or ends the test run from code under test",
        "compute the result; do not skip, xfail or stop the tests from the code they test",
    ),
    "heap-inspection": Rule(
        "INT003",
        "walks the garbage collector's heap (gc.get_objects / gc.get_referrers), which reaches the tests' own objects",
        "compute the result from the arguments; do not search the heap for the tests' objects",
    ),
    "frame-inspection": Rule(
        "INT004",
        "inspects the call stack or the caller's frames or source, where the test's expected values live",
        "compute the result from the arguments; do not read the caller's frames or the tests' source",
    ),
    "interpreter-patching": Rule(
        "INT005",
        "patches the interpreter (sys.modules, builtins, import hooks, trace or "
        "exception hooks, atexit, a function's __code__)",
        "compute the result; do not change the interpreter the tests run in",
    ),
    "process-exit": Rule(
        "INT006",
        "exits or signals the process from library code, which can end a test run before it reports a failure",
        "compute the result and raise an exception on errors; exit only in an `if __name__ == "
        '"__main__":` block or a main() or cli() function (never with os._exit)',
    ),
    "fd-access": Rule(
        "INT007",
        "writes to raw file descriptors or reads /proc, past the test runner's capture and report",
        "compute the result and return it; do not write to inherited file descriptors or read /proc",
    ),
    "always-equal": Rule(
        "INT008",
        "defines an object whose comparison or truth is a constant, so any assert on it passes",
        "compute the result and return a real value; do not override __eq__, __ne__, __bool__ "
        "or ordering to a constant",
    ),
    "copied-expected": Rule(
        "INT009",
        "hard-codes the answers of the card's tests",
        "compute the result; do not hard-code the tests' inputs and expected outputs",
    ),
}

MAX_FINDINGS = 300
WHAT = 160  # characters of a finding's `what`

# ---------------------------------------------------------------- what is looked for

MACHINERY_ROOTS = ("pytest", "_pytest", "pluggy", "unittest")
PRIVATE_MODULES = (
    "_pytest",
    "pluggy",
    "unittest.case",
    "unittest.result",
    "unittest.runner",
    "unittest.suite",
    "unittest.loader",
    "unittest.signals",
    "unittest.util",
)
# pytest's test-writing API: fine in a code file that carries its own tests
PYTEST_PUBLIC = {
    "raises",
    "approx",
    "warns",
    "deprecated_call",
    "fixture",
    "mark",
    "param",
    "fail",
    "main",
    "skip",
    "xfail",
    "exit",
    "importorskip",
    "MonkeyPatch",
    "TempPathFactory",
    "LogCaptureFixture",
    "CaptureFixture",
    "FixtureRequest",
    "WarningsRecorder",
}
SKIPS = {
    "pytest.skip",
    "pytest.xfail",
    "pytest.importorskip",
    "unittest.SkipTest",
    "unittest.case.SkipTest",
    "pytest.skip.Exception",
    "_pytest.outcomes.Skipped",
    "_pytest.outcomes.XFailed",
    "_pytest.outcomes.Exit",
    "_pytest.outcomes.OutcomeException",
}
# hooks that see or rewrite a test's outcome, the session's exit status or how a test is called
OUTCOME_HOOKS = {
    "pytest_runtest_makereport",
    "pytest_report_teststatus",
    "pytest_runtest_protocol",
    "pytest_runtest_call",
    "pytest_pyfunc_call",
    "pytest_runtest_logreport",
    "pytest_runtestloop",
    "pytest_sessionfinish",
    "pytest_terminal_summary",
    "pytest_runtest_logfinish",
}
REPORT_ATTRS = {"outcome", "longrepr", "exitstatus", "wasxfail", "testscollected", "testsfailed"}

# references (called or not) by dotted name or prefix: (rule, strict)
REFERENCES: dict[str, tuple[str, bool]] = {
    "gc.get_objects": ("heap-inspection", True),
    "gc.get_referrers": ("heap-inspection", True),
    "sys._getframe": ("frame-inspection", False),
    "sys._current_frames": ("frame-inspection", False),
    "inspect.stack": ("frame-inspection", False),
    "inspect.currentframe": ("frame-inspection", False),
    "inspect.getouterframes": ("frame-inspection", False),
    "inspect.getinnerframes": ("frame-inspection", False),
    "inspect.trace": ("frame-inspection", False),
    "traceback.extract_stack": ("frame-inspection", False),
    "traceback.walk_stack": ("frame-inspection", False),
    "traceback.format_stack": ("frame-inspection", False),
    "traceback.StackSummary": ("frame-inspection", False),
    "sys.settrace": ("interpreter-patching", True),
    "sys.setprofile": ("interpreter-patching", True),
    "sys.addaudithook": ("interpreter-patching", True),
    "sys.monitoring": ("interpreter-patching", True),
    "sys.call_tracing": ("interpreter-patching", True),
    "threading.settrace": ("interpreter-patching", True),
    "threading.setprofile": ("interpreter-patching", True),
    "threading.settrace_all_threads": ("interpreter-patching", True),
    "threading.setprofile_all_threads": ("interpreter-patching", True),
    "atexit.register": ("interpreter-patching", True),
    "atexit.unregister": ("interpreter-patching", True),
    "ctypes.pythonapi": ("interpreter-patching", True),
    "unittest.mock.ANY": ("always-equal", False),
    "mock.ANY": ("always-equal", False),
}
# exits: (allowed in main()/cli(), strict)
EXITS: dict[str, tuple[bool, bool]] = {
    "os._exit": (False, True),
    "os.abort": (False, True),
    "posix._exit": (False, True),
    "os.kill": (True, True),
    "os.killpg": (True, True),
    "signal.signal": (True, True),
    "signal.alarm": (True, True),
    "signal.setitimer": (True, True),
    "signal.raise_signal": (True, True),
    "signal.pthread_kill": (True, True),
    "signal.siginterrupt": (True, True),
    "sys.exit": (True, False),
    "builtins.exit": (True, False),
    "builtins.quit": (True, False),
}
# The caller's frame is reached only through f_back or the calls above. A frame the code got otherwise (its
# own, or one of a traceback it caught) holds the code's own and inner frames, so f_locals, f_globals,
# tb_frame and linecache are not flagged by themselves: traceback and debugging utilities use them honestly.
FRAME_ATTRS = {"f_back"}
# writes to these (assignment, del, setattr, mutating calls): (rule, strict)
WRITES: dict[str, tuple[str, bool]] = {
    "sys.modules": ("interpreter-patching", False),
    "builtins": ("interpreter-patching", False),
    "sys.meta_path": ("interpreter-patching", True),
    "sys.path_hooks": ("interpreter-patching", True),
    "sys.path_importer_cache": ("interpreter-patching", True),
    "sys.excepthook": ("interpreter-patching", True),
    "sys.unraisablehook": ("interpreter-patching", True),
    "sys.displayhook": ("interpreter-patching", True),
    "sys.breakpointhook": ("interpreter-patching", True),
    "threading.excepthook": ("interpreter-patching", True),
}
MUTATORS = {
    "update",
    "setdefault",
    "pop",
    "popitem",
    "clear",
    "insert",
    "append",
    "extend",
    "remove",
    "__setitem__",
    "__delitem__",
}
# exact string constants that name the targets above (getattr(sys, "_get" "frame") and friends): (rule, strict)
STRINGS: dict[str, tuple[str, bool]] = {
    "_getframe": ("frame-inspection", False),
    "f_back": ("frame-inspection", False),
    "get_objects": ("heap-inspection", True),
    "get_referrers": ("heap-inspection", True),
    "_pytest": ("test-machinery", False),
    "pluggy": ("test-machinery", False),
    "runtest": ("test-machinery", False),
    "settrace": ("interpreter-patching", True),
    "setprofile": ("interpreter-patching", True),
    "meta_path": ("interpreter-patching", True),
    "path_hooks": ("interpreter-patching", True),
    "excepthook": ("interpreter-patching", True),
    "_exit": ("process-exit", True),
    "HIVEBOARD_REPORT_FD": ("fd-access", True),
    "/dev/stdout": ("fd-access", True),
    "/dev/stderr": ("fd-access", True),
    "/dev/tty": ("fd-access", True),
}
TEST_FILE = re.compile(r"(?:^|[/\\])(?:test_\w*|\w+_test|conftest)\.py$")  # opening the tests to read their answers
STRING_PREFIXES: tuple[tuple[str, str, bool], ...] = (
    ("_pytest.", "test-machinery", False),
    ("PYTEST_", "test-machinery", False),
    ("/proc/", "fd-access", True),
    ("/dev/fd", "fd-access", True),
)
COMPARISONS = {
    "__eq__": True,
    "__ne__": False,
    "__contains__": True,
    "__instancecheck__": True,
    "__subclasscheck__": True,
}  # dunder -> the constant that is an attack
# Flagged only on subclasses of built-in values: elsewhere a constant __bool__ (an object with __len__ that
# is always truthy) or ordering (a sentinel that sorts first or last) is a common, honest pattern, and an
# object is truthy anyway.
ORDERING = {"__lt__", "__le__", "__gt__", "__ge__", "__bool__"}
BUILTIN_TYPES = {
    "int",
    "float",
    "complex",
    "str",
    "bytes",
    "bytearray",
    "list",
    "tuple",
    "dict",
    "set",
    "frozenset",
    "bool",
    "decimal.Decimal",
    "fractions.Fraction",
    "collections.UserString",
    "collections.UserList",
    "collections.UserDict",
}
MAIN_FUNCTIONS = {"main", "cli", "_main"}
RUNNERS = {"pytest", "_pytest", "unittest", "pluggy"}  # `"pytest" in sys.modules`: behaving differently under test


def _walk_local(node: ast.AST):
    """The nodes of a function body, not descending into nested functions, lambdas or classes."""
    todo = list(ast.iter_child_nodes(node))
    while todo:
        child = todo.pop()
        yield child
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(child))


def _constant(node: ast.AST | None) -> tuple[bool, object]:
    """(True, value) for a constant expression: a literal or `not <literal>`."""
    if node is None:
        return True, None
    if isinstance(node, ast.Constant):
        return True, node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        ok, value = _constant(node.operand)
        return ok, (not value) if ok else None
    return False, None


def constant_result(fn: ast.AST) -> tuple[bool, object]:
    """(True, value) when every return of the function (or lambda) gives the same constant."""
    if isinstance(fn, ast.Lambda):
        return _constant(fn.body)
    returns = [n for n in _walk_local(fn) if isinstance(n, ast.Return)]
    if not returns or any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Raise)) for n in _walk_local(fn)):
        return False, None
    values = [_constant(r.value) for r in returns]
    if not all(ok for ok, _ in values):
        return False, None
    first = values[0][1]
    same = all(type(v) is type(first) and v == first for _, v in values)
    return (True, first) if same else (False, None)


def _is_main_guard(test: ast.AST) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and any(
        isinstance(s, ast.Constant) and s.value == "__main__" for s in sides
    )


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                found.add(id(first.value))
    return found


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= WHAT else text[: WHAT - 1] + "…"


# ---------------------------------------------------------------- the visitor


def _is_test_class(name: str, bases: list[str]) -> bool:
    return name.startswith("Test") or any(b.endswith("TestCase") for b in bases)


class Scan(ast.NodeVisitor):
    """One file's findings, keyed by (rule, line). `test_file`: the whole file is test code."""

    def __init__(self, tree: ast.Module, test_file: bool):
        self.findings: dict[tuple[str, int], str] = {}
        self.test_depth = int(test_file)
        self.guard_depth = 0  # inside `if __name__ == "__main__":`
        self.main_depth = 0  # inside main() / cli()
        self.aliases: dict[str, str] = {"__builtins__": "builtins", "exit": "builtins.exit", "quit": "builtins.quit"}
        self.docstrings = _docstrings(tree)
        bound = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if a.name != "*":
                        self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                bound.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
        for name in ("exit", "quit"):  # a variable or function of the file called exit is not the builtin
            if name in bound:
                self.aliases.pop(name)
        self.exempt = self._module_name_only(tree)
        # loop variables over range(): `for fd in range(3, 256): os.write(fd, …)` tries every inherited descriptor
        self.counted = {
            n.target.id
            for n in ast.walk(tree)
            if isinstance(n, (ast.For, ast.comprehension))
            and isinstance(n.target, ast.Name)
            and isinstance(n.iter, ast.Call)
            and self.dotted(n.iter.func) in ("range", "builtins.range")
        }

    # -- helpers

    def flag(self, rule: str, node: ast.AST, what: str, strict: bool = False) -> None:
        if self.guard_depth or (self.test_depth and not strict) or id(node) in self.exempt:
            return
        self.findings.setdefault((rule, getattr(node, "lineno", 0)), _short(what))

    def dotted(self, node: ast.AST) -> str | None:
        """The dotted name an expression refers to, through the file's imports (`Function` after
        `from _pytest.python import Function` is `_pytest.python.Function`), getattr with a literal name
        and __import__ / importlib.import_module of a literal module."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call) and node.args:
            func, args = self.dotted(node.func), node.args
            name = args[1] if len(args) >= 2 else None
            if (
                func in ("getattr", "builtins.getattr")
                and isinstance(name, ast.Constant)
                and isinstance(name.value, str)
            ):
                base = self.dotted(args[0])
                return f"{base}.{name.value}" if base else None
            if (
                func in ("__import__", "builtins.__import__", "importlib.import_module", "importlib.__import__")
                and isinstance(args[0], ast.Constant)
                and isinstance(args[0].value, str)
            ):
                return args[0].value
        return None

    def _module_name_only(self, tree: ast.Module) -> set[int]:
        """`sys._getframe(n)` whose frame is used only as `.f_globals.get("__name__")` or
        `.f_globals["__name__"]`: the idiom that sets __module__ of a generated class (collections.namedtuple
        does it) reads the caller's module name and nothing else. Returns the ids of those references."""
        parent = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

        def name_only(frame: ast.AST) -> bool:
            attr = parent.get(id(frame))
            if not (isinstance(attr, ast.Attribute) and attr.attr == "f_globals"):
                return False
            use = parent.get(id(attr))
            key = use.slice if isinstance(use, ast.Subscript) else None
            if isinstance(use, ast.Attribute) and use.attr == "get":
                call = parent.get(id(use))
                key = call.args[0] if isinstance(call, ast.Call) and call.func is use and call.args else None
            return isinstance(key, ast.Constant) and key.value == "__name__"

        exempt = set()
        for call in ast.walk(tree):
            if not (isinstance(call, ast.Call) and self.dotted(call.func) == "sys._getframe"):
                continue
            holder = parent.get(id(call))
            if isinstance(holder, ast.Assign) and len(holder.targets) == 1 and isinstance(holder.targets[0], ast.Name):
                scope = holder
                while scope is not None and not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
                    scope = parent.get(id(scope))
                var = holder.targets[0].id
                uses = [
                    n
                    for n in ast.walk(scope or tree)
                    if isinstance(n, ast.Name) and n.id == var and isinstance(n.ctx, ast.Load)
                ]
                if uses and all(name_only(n) for n in uses):
                    exempt.add(id(call.func))
            elif name_only(call):
                exempt.add(id(call.func))
        return exempt

    @staticmethod
    def _match(name: str, table: dict) -> str | None:
        """The key of `table` that `name` is or starts with (`linecache.getline` -> `linecache`)."""
        parts = name.split(".")
        for n in range(len(parts), 0, -1):
            key = ".".join(parts[:n])
            if key in table:
                return key
        return None

    def is_fixture(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        for d in node.decorator_list:
            name = self.dotted(d.func if isinstance(d, ast.Call) else d) or ""
            if name.startswith(("pytest.fixture", "pytest.mark")):
                return True
        return False

    # -- scopes

    def _scoped(self, node: ast.AST, test: bool = False, main: bool = False) -> None:
        self.test_depth += test
        self.main_depth += main
        self.generic_visit(node)
        self.test_depth -= test
        self.main_depth -= main

    def visit_FunctionDef(self, node):
        name = node.name
        if name.startswith("pytest_"):
            if name in OUTCOME_HOOKS:
                self.flag("test-machinery", node, f"defines the pytest hook {name}", strict=True)
            else:
                self.flag("test-machinery", node, f"defines the pytest hook {name} in code under test")
            for stmt in _walk_local(node):  # a report or session whose outcome a hook rewrites
                targets = (
                    stmt.targets
                    if isinstance(stmt, ast.Assign)
                    else [stmt.target]
                    if isinstance(stmt, ast.AugAssign)
                    else []
                )
                for t in targets:
                    if isinstance(t, ast.Attribute) and t.attr in REPORT_ATTRS:
                        self.flag("test-machinery", stmt, f"{name} sets .{t.attr}", strict=True)
        self._scoped(node, test=name.startswith("test") or self.is_fixture(node), main=name in MAIN_FUNCTIONS)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        bases = [self.dotted(b) or "" for b in node.bases]
        test = _is_test_class(node.name, bases)
        if not test:
            self._always_equal(node, bases)
        self._scoped(node, test=test)

    def visit_If(self, node):
        if not _is_main_guard(node.test):
            self.generic_visit(node)
            return
        self.guard_depth += 1
        for stmt in node.body:
            self.visit(stmt)
        self.guard_depth -= 1
        for stmt in node.orelse:
            self.visit(stmt)

    # -- imports and references

    @staticmethod
    def _private(name: str) -> bool:
        return any(name == p or name.startswith(p + ".") for p in PRIVATE_MODULES)

    def _imported(self, module: str, node: ast.AST) -> None:
        if self._private(module):
            self.flag("test-machinery", node, f"imports {module}")

    def visit_Import(self, node):
        for a in node.names:
            self._imported(a.name, node)

    def visit_ImportFrom(self, node):
        if node.module and not node.level:
            self._imported(node.module, node)

    def _reference(self, name: str, node: ast.AST) -> None:
        key = self._match(name, REFERENCES)
        if key:
            rule, strict = REFERENCES[key]
            self.flag(rule, node, name, strict)
        key = self._match(name, EXITS)
        if key and not (EXITS[key][0] and self.main_depth):
            self.flag("process-exit", node, name.replace("builtins.", ""), EXITS[key][1])
        if name.startswith(("pytest.exit", "_pytest.outcomes.exit")):
            self.flag("test-skip", node, name, strict=True)  # ends the whole session, other tests included
        elif name in SKIPS:
            self.flag("test-skip", node, name)
        if self._machinery(name):
            self.flag("test-machinery", node, name)

    def _machinery(self, name: str) -> bool:
        """A test framework's internals: _pytest, pluggy, pytest beyond its test-writing API, private names
        and internal modules of unittest."""
        root, _, rest = name.partition(".")
        parts = rest.split(".") if rest else []
        return (
            root in ("_pytest", "pluggy")
            or self._private(name)
            or (root == "pytest" and bool(parts) and parts[0] not in PYTEST_PUBLIC and not parts[0].startswith("__"))
            or (root == "unittest" and any(p.startswith("_") and not p.startswith("__") for p in parts))
        )

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load):
            name = self.aliases.get(node.id)
            if name is not None and name != node.id:  # an imported name (a plain name refers to nothing known)
                self._reference(name, node)

    def visit_Attribute(self, node):
        self._attribute(node)
        name = self.dotted(node)
        if name is None or not isinstance(node.ctx, ast.Load):
            self.generic_visit(node)
            return
        self._reference(name, node)
        inner = node.value  # a chain of names is one reference: its inner names are not reported again
        while isinstance(inner, ast.Attribute):
            self._attribute(inner)
            inner = inner.value
        if not isinstance(inner, ast.Name):
            self.visit(inner)

    def _attribute(self, node: ast.Attribute) -> None:
        """Attributes that are suspect on any object."""
        if node.attr in FRAME_ATTRS:
            self.flag("frame-inspection", node, f".{node.attr}")
        if node.attr in ("force_result", "force_exception"):
            self.flag("test-machinery", node, f".{node.attr}, which rewrites a hook's result", strict=True)

    def visit_Constant(self, node):
        value = node.value
        if not isinstance(value, str) or id(node) in self.docstrings or len(value) > 200:
            return
        hit = STRINGS.get(value) or next(
            ((rule, strict) for prefix, rule, strict in STRING_PREFIXES if value.startswith(prefix)), None
        )
        if hit is None and value == "/proc":
            hit = ("fd-access", True)
        if hit is None and TEST_FILE.search(value):
            hit = ("frame-inspection", False)
        if hit:
            self.flag(hit[0], node, f"the string {value!r}", hit[1])

    def visit_Compare(self, node):
        if (
            any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
            and isinstance(node.left, ast.Constant)
            and node.left.value in RUNNERS
            and any(self.dotted(c) == "sys.modules" for c in node.comparators)
        ):
            self.flag("test-machinery", node, f"checks whether {node.left.value} is loaded")
        self.generic_visit(node)

    # -- calls

    def visit_Call(self, node):
        func = self.dotted(node.func)
        reached = self.dotted(node)  # what getattr(mod, "name") or __import__("mod") reaches
        if reached:
            self._reference(reached, node)
        if func:
            self._call(func, node)
        self.generic_visit(node)

    def _call(self, func: str, node: ast.Call) -> None:
        args = node.args
        if func in ("setattr", "delattr", "builtins.setattr", "builtins.delattr", "object.__setattr__") and args:
            attr = args[1].value if len(args) > 1 and isinstance(args[1], ast.Constant) else "*"
            self._written(f"{self.dotted(args[0]) or '?'}.{attr}", node, args[2] if len(args) > 2 else None)
        elif "." in func and func.rsplit(".", 1)[1] in MUTATORS:
            self._written(func.rsplit(".", 1)[0], node, None, mutated=True)
        if (
            func
            in (
                "os.write",
                "os.fdopen",
                "open",
                "builtins.open",
                "io.open",
                "io.FileIO",
                "os.dup",
                "os.dup2",
                "os.dup3",
            )
            and args
        ):
            fd = args[0]
            called = self.dotted(fd.func) or "" if isinstance(fd, ast.Call) else ""
            raw = (
                (isinstance(fd, ast.Constant) and type(fd.value) is int)
                or called.endswith("fileno")
                or called in ("int", "builtins.int")
                or (isinstance(fd, ast.Name) and fd.id in self.counted)
            )
            if raw or func in ("os.dup2", "os.dup3"):
                self.flag("fd-access", node, f"{func}({ast.unparse(fd)}, …)", strict=True)
        if func == "sys.modules.get" and args and isinstance(args[0], ast.Constant) and args[0].value in RUNNERS:
            self.flag("test-machinery", node, f"checks whether {args[0].value} is loaded")
        if func.endswith(".skipTest"):
            self.flag("test-skip", node, func)
        if func == "type" and len(args) == 3 and isinstance(args[2], ast.Dict):
            for key, value in zip(args[2].keys, args[2].values):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    self._comparison(value, key.value, node)

    def visit_Raise(self, node):
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if exc is not None and self.dotted(exc) in ("SystemExit", "builtins.SystemExit") and not self.main_depth:
            self.flag("process-exit", node, "raise SystemExit")
        self.generic_visit(node)

    # -- writes

    def visit_Assign(self, node):
        for target in node.targets:
            self._target(target, node, node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._target(node.target, node, None)
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        self._target(node.target, node, node.value)
        self.generic_visit(node)

    def visit_Delete(self, node):
        for target in node.targets:
            self._target(target, node, None)
        self.generic_visit(node)

    def _target(self, target: ast.AST, node: ast.AST, value: ast.AST | None) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._target(t, node, None)
        elif isinstance(target, ast.Attribute):
            self._written(f"{self.dotted(target.value) or '?'}.{target.attr}", node, value)
        elif isinstance(target, ast.Subscript):
            base = self.dotted(target.value)
            own = isinstance(target.slice, ast.Name) and target.slice.id == "__name__"
            if base and not (own and base == "sys.modules"):  # replacing its own module is the module's business
                self._written(base, node, None, mutated=True)
        elif isinstance(target, ast.Name) and target.id == "pytest_plugins":
            self.flag("test-machinery", node, "sets pytest_plugins in code under test")

    def _written(self, name: str, node: ast.AST, value: ast.AST | None, mutated: bool = False) -> None:
        """An assignment to, or a change or deletion of, the dotted `name`."""
        root, _, rest = name.partition(".")
        attr = name.rsplit(".", 1)[-1]
        verb = "changes" if mutated else "assigns"
        key = self._match(name, WRITES)
        if root in MACHINERY_ROOTS and rest:
            self.flag("test-machinery", node, f"{verb} {name}", strict=True)
        elif key:
            self.flag(WRITES[key][0], node, f"{verb} {name}", WRITES[key][1])
        elif attr == "__code__":
            self.flag("interpreter-patching", node, f"replaces {name}", strict=True)
        if value is not None and not mutated:
            self._comparison(value, attr, node)

    # -- always-equal objects

    def _comparison(self, fn: ast.AST, dunder: str, where: ast.AST, builtin: bool = False) -> None:
        """Flag a comparison or truth dunder that always returns the constant that makes asserts pass."""
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        if (dunder in ORDERING and not builtin) or (dunder not in ORDERING and dunder not in COMPARISONS):
            return
        ok, value = constant_result(fn)
        if ok and (dunder in ORDERING or bool(value) is COMPARISONS[dunder]):
            self.flag("always-equal", where, f"{dunder} always returns {value!r}")

    def _always_equal(self, cls: ast.ClassDef, bases: list[str]) -> None:
        builtin = any(b in BUILTIN_TYPES for b in bases)
        methods: dict[str, ast.AST] = {}
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                methods[stmt.name] = stmt
            elif isinstance(stmt, ast.Assign):
                for t in stmt.targets:
                    if isinstance(t, ast.Name):
                        methods[t.id] = stmt.value
        for name, fn in methods.items():
            self._comparison(fn, name, fn, builtin)
        # equality decided by a constant hash: every instance equals every other
        eq, hashed = methods.get("__eq__"), methods.get("__hash__")
        if (
            isinstance(eq, (ast.FunctionDef, ast.Lambda))
            and isinstance(hashed, (ast.FunctionDef, ast.Lambda))
            and constant_result(hashed)[0]
        ):
            hashes = [
                n
                for n in ast.walk(eq)
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "hash"
            ]
            if len(hashes) >= 2:
                self.flag("always-equal", eq, f"{cls.name}.__eq__ compares hashes and __hash__ is a constant")


# ---------------------------------------------------------------- copied expected values


def canon(value: object) -> object:
    """A hashable form in which equal test values are equal (a list and a tuple of the same items too)."""
    if isinstance(value, bool) or value is None:
        return ("const", value)
    if isinstance(value, (int, float, complex)):
        return ("num", value)
    if isinstance(value, (str, bytes)):
        return ("str", value)
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(canon(v) for v in value))
    if isinstance(value, (set, frozenset)):
        return ("set", frozenset(canon(v) for v in value))
    if isinstance(value, dict):
        return ("dict", frozenset((canon(k), canon(v)) for k, v in value.items()))
    return ("other", repr(value))


def distinctive(value: object) -> bool:
    """Non-trivial: a string of 4 or more characters, a number outside -10..10, a container of 3 or more
    items or holding a distinctive item."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, (int, float)):
        return not -10 <= value <= 10
    if isinstance(value, (str, bytes)):
        return len(value) >= 4
    if isinstance(value, dict):
        return len(value) >= 2 or any(distinctive(v) for v in (*value.keys(), *value.values()))
    if isinstance(value, (list, tuple, set, frozenset)):
        return len(value) >= 3 or any(distinctive(v) for v in value)
    return isinstance(value, complex)


def _literal(node: ast.AST | None) -> tuple[bool, object]:
    if node is None:
        return False, None
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


class Case(NamedTuple):
    inputs: frozenset  # canon of each literal argument, and of all of them together
    expected: object  # canon
    where: str  # file:line in the spec


def _case(inputs: list, expected: object, where: str) -> Case:
    keys = {canon(v) for v in inputs}
    if len(inputs) > 1:
        keys.add(canon(list(inputs)))
    return Case(frozenset(keys), canon(expected), where)


def _pairs(value: object, where: str) -> list[Case]:
    """Cases from a table of (inputs..., expected) rows, or {input: expected}."""
    if isinstance(value, dict) and len(value) >= 2:
        return [_case([k], v, where) for k, v in value.items()]
    out = []
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (list, tuple)) and len(v) >= 2 for v in value):
        for *ins, expected in value:
            # QuixBugs style [[arg, arg], expected]: the argument list and each argument
            args = [*ins[0], ins[0]] if len(ins) == 1 and isinstance(ins[0], (list, tuple)) else ins
            out.append(_case(args, expected, where))
    return out


def _call_args(node: ast.AST) -> list:
    """The literal arguments of the calls in an expression (`sorted(f([3, 1]))` -> [[3, 1]])."""
    values = []
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        for a in [*call.args, *(k.value for k in call.keywords)]:
            ok, value = _literal(a)
            if ok:
                values.append(value)
    return values


ASSERT_METHODS = {
    "assertEqual",
    "assertEquals",
    "assertListEqual",
    "assertDictEqual",
    "assertTupleEqual",
    "assertSetEqual",
    "assertCountEqual",
    "assertIs",
    "assertSequenceEqual",
    "assertAlmostEqual",
}


def spec_cases(name: str, text: str) -> list[Case]:
    """The (inputs, expected) cases of one of the creator's test files: `assert f(LIT) == LIT`,
    assertEqual, parametrize rows, literal tables of rows, and JSON (lines) of [input, expected]."""
    if name.endswith(".json"):
        try:
            return _pairs(json.loads(text), name)
        except ValueError:
            pass
        cases = []
        for number, line in enumerate(text.splitlines(), 1):
            try:
                cases += _pairs([json.loads(line)], f"{name}:{number}")
            except ValueError:
                continue
        return cases
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    cases = []
    for node in ast.walk(tree):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
        pair = None
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.Is)):
            pair = (node.left, node.comparators[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ASSERT_METHODS and len(node.args) >= 2:
            pair = (node.args[0], node.args[1])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "parametrize" and len(node.args) >= 2:
            ok, rows = _literal(node.args[1])
            if ok and isinstance(rows, (list, tuple)):
                cases += _pairs([r for r in rows if isinstance(r, (list, tuple))], where)
        elif isinstance(node, (ast.Assign, ast.For)):
            table = node.value if isinstance(node, ast.Assign) else node.iter
            ok, rows = _literal(table) if isinstance(table, (ast.List, ast.Tuple, ast.Dict)) else (False, None)
            if ok:
                cases += _pairs(rows, where)
        for called, other in (pair, pair[::-1]) if pair else ():
            ok, expected = _literal(other)
            if ok and any(isinstance(n, ast.Call) for n in ast.walk(called)):
                cases.append(_case(_call_args(called), expected, where))
    return cases


class Entry(NamedTuple):
    group: int  # the entries of one table, or one function's special cases, are judged together
    keys: tuple  # literals the input is compared with or looked up by (empty: a function ignoring its input)
    value: object  # the literal returned or stored
    line: int


class Tables(ast.NodeVisitor):
    """Literal answers in the code under test: dict displays, lists of pairs, `if x == LIT: return LIT`
    and `case LIT: return LIT`, and functions with parameters that return one literal whatever they get.
    Test code and `if __name__ == "__main__":` blocks are left out."""

    def __init__(self, scan: Scan):
        self.scan = scan
        self.entries: list[Entry] = []
        self.groups = 0
        self.skip = 0

    def _group(self) -> int:
        self.groups += 1
        return self.groups

    def _add(self, group: int, keys: list, value_node: ast.AST) -> None:
        ok, value = _literal(value_node)
        if ok:
            self.entries.append(Entry(group, tuple(keys), value, value_node.lineno))

    def visit_FunctionDef(self, node):
        test = node.name.startswith("test") or self.scan.is_fixture(node)
        self.skip += test
        if not self.skip:
            self._function(node)
        self.generic_visit(node)
        self.skip -= test

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        test = _is_test_class(node.name, [self.scan.dotted(b) or "" for b in node.bases])
        self.skip += test
        self.generic_visit(node)
        self.skip -= test

    def visit_If(self, node):
        for stmt in node.orelse if _is_main_guard(node.test) else [node.test, *node.body, *node.orelse]:
            self.visit(stmt)

    def visit_Dict(self, node):
        if not self.skip:
            group = self._group()
            for k, v in zip(node.keys, node.values):
                ok, key = _literal(k)
                if ok:
                    self._add(group, [key], v)
        self.generic_visit(node)

    def visit_List(self, node):
        self._sequence(node)

    def visit_Tuple(self, node):
        self._sequence(node)

    def _sequence(self, node):
        if self.skip or len(node.elts) < 2:
            self.generic_visit(node)
            return
        if all(isinstance(e, (ast.List, ast.Tuple)) and len(e.elts) == 2 for e in node.elts):
            group = self._group()  # a table of (input, answer) pairs
            for e in node.elts:
                ok, key = _literal(e.elts[0])
                if ok:
                    self._add(group, [key, *(key if isinstance(key, (list, tuple)) else [])], e.elts[1])
            return
        ok, values = _literal(node)
        if ok and all(isinstance(v, (list, tuple, dict, set)) for v in values):
            group = self._group()  # a list of answers handed out in turn: each must match a case with inputs
            for e in node.elts:
                self._add(group, [], e)
            return
        self.generic_visit(node)

    def _function(self, fn):
        params = [
            a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs) if a.arg not in ("self", "cls")
        ] + ([fn.args.vararg.arg] if fn.args.vararg else [])
        body = list(_walk_local(fn))
        returns = [n for n in body if isinstance(n, ast.Return) and n.value is not None]
        group = self._group()
        branches = (ast.If, ast.IfExp, ast.Match, ast.Try, ast.For, ast.While, ast.BoolOp, ast.comprehension)
        if params and returns and not any(isinstance(n, branches) for n in body):
            for r in returns:  # one literal whatever the arguments
                self._add(group, [], r.value)
            return
        for node in body:  # special cases: `if x == LIT: return LIT`, `case LIT: return LIT`
            keys, then = [], []
            if isinstance(node, ast.If):
                for cmp in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
                    if all(isinstance(op, (ast.Eq, ast.Is, ast.In)) for op in cmp.ops):
                        for side in (cmp.left, *cmp.comparators):
                            ok, value = _literal(side)
                            if ok:
                                keys.append(value)
                                if isinstance(cmp.ops[0], ast.In) and isinstance(value, (list, tuple, set)):
                                    keys.extend(value)
                then = node.body
            elif isinstance(node, ast.match_case) and isinstance(node.pattern, ast.MatchValue):
                ok, value = _literal(node.pattern.value)
                keys, then = ([value] if ok else []), node.body
            if keys:
                for stmt in then:
                    if isinstance(stmt, ast.Return):
                        self._add(group, keys, stmt.value)


def copied(entries: list[Entry], cases: list[Case]) -> list[tuple[Entry, Case, object]]:
    """Entries that reproduce the tests' cases. An entry answers a case when its value is the case's expected
    value and its key is one of the case's inputs (or it has no key: the same answer whatever the input). A
    table is reported when an entry answers a case by a distinctive container input (the test's exact input
    structure), when a keyless answer is distinctive, or when two or more of its entries answer cases and
    they are at least 80 % of its distinctive entries (a table made of the tests' cases)."""
    by_expected: dict[object, list[Case]] = {}
    for case in cases:
        by_expected.setdefault(case.expected, []).append(case)
    groups: dict[int, list[Entry]] = {}
    for e in entries:
        groups.setdefault(e.group, []).append(e)
    found = []
    for group in groups.values():
        hits: list[tuple[Entry, Case, object]] = []  # (entry, the case it answers, the input it is keyed by)
        strong = False
        for e in group:
            for case in by_expected.get(canon(e.value), ()):
                shared = [k for k in e.keys if canon(k) in case.inputs]
                if e.keys and shared and (distinctive(e.value) or any(distinctive(k) for k in shared)):
                    hits.append((e, case, max(shared, key=lambda k: len(repr(k)))))
                    strong |= any(isinstance(k, (list, tuple, dict, set)) and distinctive(k) for k in shared)
                    break
                if not e.keys and case.inputs and distinctive(e.value):
                    hits.append((e, case, None))
                    strong = True
                    break
        telling = [e for e in group if distinctive(e.value) or any(distinctive(k) for k in e.keys)]
        if strong or (len(hits) >= 2 and len(hits) >= 0.8 * len(telling)):
            found += hits
    return found


def _show(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------- the script


def scan_source(text: str, path: str, test_file: bool, cases: list[Case], hidden: bool) -> list[dict]:
    """One file's findings (raises SyntaxError and friends for a file that does not parse)."""
    tree = ast.parse(text, filename=path)
    visitor = Scan(tree, test_file)
    visitor.visit(tree)
    found = [
        {"rule": rule, "path": path, "line": line, "what": what} for (rule, line), what in visitor.findings.items()
    ]
    if cases and not test_file:
        tables = Tables(visitor)
        tables.visit(tree)
        hits = copied(tables.entries, cases)
        if hits and hidden:  # for people only: the critic marks it, and only the card's creator and people see it
            lines = sorted({e.line for e, _, _ in hits})
            found.append(
                {
                    "rule": "copied-expected",
                    "path": path,
                    "line": lines[0],
                    "what": f"returns {len(hits)} constant(s) (line {', '.join(map(str, lines[:10]))}) that "
                    "appear in the card's hidden tests",
                    "hidden": True,
                }
            )
        per_line: dict[int, list] = {}
        for hit in [] if hidden else hits:
            per_line.setdefault(hit[0].line, []).append(hit)
        for line, ((e, case, key), *more) in per_line.items():
            given = "whatever the input" if key is None else f"for the input {_show(key, 40)}"
            found.append(
                {
                    "rule": "copied-expected",
                    "path": path,
                    "line": line,
                    "what": f"returns {_show(e.value)} {given}, as {case.where} expects"
                    + (f" (and {len(more)} more answer(s) of the tests on this line)" if more else ""),
                }
            )
    return sorted(found, key=lambda f: (f["line"], f["rule"]))


def scan(files: list[str], tests: set[str], spec: str | None, hidden: bool) -> dict:
    cases: list[Case] = []
    for root, _, names in os.walk(spec) if spec else ():
        for n in sorted(names):
            if n.endswith((".py", ".json")):
                path = os.path.join(root, n)
                with open(path, encoding="utf-8", errors="replace") as f:
                    try:
                        cases += spec_cases(os.path.relpath(path, spec), f.read())
                    except (MemoryError, RecursionError):  # a test file too deep to read cases from
                        continue
    findings, errors = [], []
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                findings += scan_source(f.read(), path, path in tests, cases, hidden)
        except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
            errors.append({"path": path, "error": f"{type(exc).__name__}: {exc}"[:300]})
    # cut apart: how many findings of the hidden tests there are must not change which others are shown
    shown = [f for f in findings if not f.get("hidden")]
    secret = [f for f in findings if f.get("hidden")]
    return {
        "findings": shown[:MAX_FINDINGS] + secret[:MAX_FINDINGS],
        "errors": errors,
        "truncated": max(0, len(shown) - MAX_FINDINGS),
    }


def main(argv: list[str]) -> int:
    spec, tests, hidden, files = None, set(), False, []
    args = iter(argv)
    for arg in args:
        if arg == "--spec":
            spec = next(args)
        elif arg == "--test":
            tests.add(next(args))
        elif arg == "--hidden":
            hidden = True
        elif arg == "--":
            files += list(args)
        else:
            files.append(arg)
    sys.setrecursionlimit(10_000)  # deeply nested submissions; the box's memory limit still holds
    json.dump(scan(files, tests, spec, hidden), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
