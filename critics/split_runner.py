"""The card creator's tests in one process, the code under test in another: a verdict the code cannot write.

Started as a script, twice, each in a sandbox of its own (critics/sandbox.py `Box.run_pair`); the server
never imports it:

    python -I -B split_runner.py judge ROOT BUDGET MODULES -- pytest ARGS     the creator's files, no submitted code
    python -I -B split_runner.py judge ROOT BUDGET MODULES -- script PATH ARGS | module NAME ARGS
    python -I -B split_runner.py judge ROOT BUDGET MODULES -- code PATH ARGV0 ARGS    a command's code, in a file
    python -I -B split_runner.py host                                         the submitted code, no creator's files
    python -I -B split_runner.py own ROOT SRC -- ARGS                         the author's own tests, with its code

The judge runs the creator's pytest tests (or the creator's script, module, or a command's code written to
a file of the creator's) itself. A module of the submitted work (MODULES, a comma-separated list; a name the
creator's files or the environment also have is theirs) is a stand-in there: every attribute, call and
operation on it is a request over a pipe to the host, which imports the real code and answers. Only data
crosses the pipe (JSON with tags for tuples, sets, bytes and a few value types), or a numbered reference to an
object that stays on its side. So:

- the report is written by the judge, to a pipe the host has no handle on (another sandbox, another pid
  namespace): patching pytest, rewriting reports, writing to descriptors or ending the process inside the
  code under test changes nothing the judge reads; a host that ends or stops answering fails the tests
  that need it;
- comparisons with data are made by the judge on data: an object of the code's is never equal to plain
  data (an object built on a plain type, such as an int subclass or a named tuple, is compared by its
  value); the host never sees the expected side of a comparison, nor the test's source, so reading the
  caller's stack finds the pipe loop;
- an exception from the host arrives as its type, mapped onto a fixed list of built-in exception
  classes (a class of the code's becomes a local subclass of its nearest built-in base): a `SkipTest`
  raised by the code is a failure like any other, and skipped or xfailed creator tests fail too;
- the host can call back into the judge only on objects the tests handed it, and only their calls and
  public attributes, never a module or a part of pytest.

What remains the code's own word, and is counted in the report (`decided_by_code`): a comparison of two
objects of the code's that have no plain value, and the truth of such an object. The integrity critic
(critics/integrity.py) reads the code for constant `__eq__` and the like.
"""

import builtins
import collections
import datetime
import decimal
import fractions
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import operator
import os
import pathlib
import select
import sys
import threading
import time
import traceback
import types

__tracebackhide__ = True  # pytest leaves this module's frames out of a failing test's traceback
MAX_LINE = 16 << 20  # one message; a longer one is a protocol error
DEPTH = 200  # nesting encoded as data; deeper parts go by reference
MESSAGE = 600
DETAIL = 2500
VALUE = 200
# A report counts every test but lists only those that did not pass: the first KEPT in full, then by id
# while the listing stays under REPORT_BYTES. The server reads 1 MB of a report (critics/sandbox.py), and a
# run of 100,000 passing tests must fit as well as one with a failure in each.
KEPT = 50
REPORT_BYTES = 512 * 1024
# The exception classes an exception crossing the pipe can become, by name (a class of the code's becomes
# a local subclass of the nearest of these); the hidden-test report names only these.
EXCEPTIONS = {
    name: getattr(builtins, name)
    for name in (
        "ArithmeticError",
        "AssertionError",
        "AttributeError",
        "BufferError",
        "EOFError",
        "Exception",
        "FileExistsError",
        "FileNotFoundError",
        "FloatingPointError",
        "ImportError",
        "IndexError",
        "IsADirectoryError",
        "KeyError",
        "LookupError",
        "MemoryError",
        "ModuleNotFoundError",
        "NameError",
        "NotADirectoryError",
        "NotImplementedError",
        "OSError",
        "OverflowError",
        "PermissionError",
        "RecursionError",
        "RuntimeError",
        "StopIteration",
        "SyntaxError",
        "SystemExit",
        "TimeoutError",
        "TypeError",
        "UnboundLocalError",
        "UnicodeError",
        "ValueError",
        "ZeroDivisionError",
    )
}


# What the host may be handed to call: built-ins that compute on their arguments only (no open, eval,
# getattr, __import__, input…), functions of modules that do the same, and a few in-memory types.
PURE_BUILTINS = frozenset(
    {
        "abs",
        "all",
        "any",
        "ascii",
        "bin",
        "bool",
        "bytes",
        "callable",
        "chr",
        "complex",
        "dict",
        "divmod",
        "enumerate",
        "filter",
        "float",
        "format",
        "frozenset",
        "hash",
        "hex",
        "int",
        "isinstance",
        "issubclass",
        "iter",
        "len",
        "list",
        "map",
        "max",
        "min",
        "next",
        "oct",
        "ord",
        "pow",
        "range",
        "repr",
        "reversed",
        "round",
        "set",
        "slice",
        "sorted",
        "str",
        "sum",
        "tuple",
        "zip",
    }
)
PURE_MODULES = frozenset(
    {
        "math",
        "cmath",
        "operator",
        "_operator",
        "string",
        "itertools",
        "bisect",
        "_bisect",
        "heapq",
        "_heapq",
        "statistics",
        "decimal",
        "_decimal",
        "fractions",
        "unicodedata",
    }
)
MUTABLE = (list, dict, set, bytearray)  # passed by value, and back again after a call
DATA_TYPES = (str, bytes, bytearray, int, float, complex, bool, list, tuple, dict, set, frozenset)
SHAREABLE_TYPES = frozenset(
    {
        "_io.StringIO",
        "_io.BytesIO",
        "collections.Counter",
        "collections.OrderedDict",
        "collections.defaultdict",
        "collections.deque",
        "types.SimpleNamespace",
    }
)


FROM_CODE = "ErrorFromCodeUnderTest"  # a failure's kind when the code raised it, whatever it raised


class CodeUnderTestEnded(Exception):
    """The host process ended, broke the protocol or ran out of time: nothing more can be asked of it."""


VALUE_TYPES = {
    "Fraction": (fractions.Fraction, str, fractions.Fraction),
    "Decimal": (decimal.Decimal, str, decimal.Decimal),
    "date": (datetime.date, datetime.date.isoformat, datetime.date.fromisoformat),
    "datetime": (datetime.datetime, datetime.datetime.isoformat, datetime.datetime.fromisoformat),
    "time": (datetime.time, datetime.time.isoformat, datetime.time.fromisoformat),
    "timedelta": (
        datetime.timedelta,
        lambda d: [d.days, d.seconds, d.microseconds],
        lambda v: datetime.timedelta(days=v[0], seconds=v[1], microseconds=v[2]),
    ),
    "PosixPath": (pathlib.PosixPath, str, pathlib.PosixPath),
    "PurePosixPath": (pathlib.PurePosixPath, str, pathlib.PurePosixPath),
}
BY_TYPE = {t: (name, dump) for name, (t, dump, _) in VALUE_TYPES.items()}
# an object built on a plain type has that type's value (an OrderedDict keeps its order: it compares by it)
PROJECTIONS = (
    (bool, bool),
    (int, int),
    (float, float),
    (complex, complex),
    (str, str),
    (bytes, bytes),
    (tuple, tuple),
    (list, list),
    (collections.OrderedDict, collections.OrderedDict),
    (dict, dict),
    (frozenset, frozenset),
    (set, set),
)


PLAIN_BASES = {
    "bool": bool,
    "int": int,
    "float": float,
    "complex": complex,
    "str": str,
    "bytes": bytes,
    "tuple": tuple,
    "list": list,
    "OrderedDict": collections.OrderedDict,
    "dict": dict,
    "frozenset": frozenset,
    "set": set,
}


def project(obj):
    """An object's plain value, by the first plain type it is built on."""
    cast = next(cast for base, cast in PROJECTIONS if isinstance(obj, base))
    return cast(obj)


DICT_KEYS, DICT_VALUES, DICT_ITEMS = type({}.keys()), type({}.values()), type({}.items())


class Codec:
    """Data as JSON with tags; anything else by reference (`ref` makes one, `deref` reads one)."""

    def __init__(self, ref, deref):
        self.ref = ref
        self.deref = deref

    def encode(self, value, depth=0):
        t = type(value)
        if value is None or t in (bool, int, str):
            return value
        if t is float:
            return (
                value
                if value == value and value not in (float("inf"), float("-inf"))
                else {"$": "float", "v": repr(value)}
            )
        if depth > DEPTH:
            return self.ref(value)
        if t is list:
            return [self.encode(v, depth + 1) for v in value]
        if t in (tuple, set, frozenset):
            return {"$": t.__name__, "v": [self.encode(v, depth + 1) for v in value]}
        if t in (dict, collections.OrderedDict):
            return {
                "$": "dict" if t is dict else "odict",
                "v": [[self.encode(k, depth + 1), self.encode(v, depth + 1)] for k, v in value.items()],
            }
        if t in (bytes, bytearray):
            return {"$": t.__name__, "v": bytes(value).hex()}
        if t is complex:
            return {"$": "complex", "v": [repr(value.real), repr(value.imag)]}
        if t in BY_TYPE:
            name, dump = BY_TYPE[t]
            return {"$": "value", "t": name, "v": dump(value)}
        if t in (DICT_KEYS, DICT_VALUES, DICT_ITEMS):  # a view goes as the list it shows
            return self.encode(list(value), depth)
        if t is range:
            return {"$": "range", "v": [value.start, value.stop, value.step]}
        if isinstance(value, type) and EXCEPTIONS.get(value.__name__) is value:  # retry(on=ValueError)
            return {"$": "exception", "v": value.__name__}
        return self.ref(value)

    def decode(self, value):
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        tag, v = value.get("$"), value.get("v")
        if tag == "float":
            return float(v)
        if tag in ("tuple", "set", "frozenset"):
            return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](self.decode(x) for x in v)
        if tag in ("dict", "odict"):
            return (dict if tag == "dict" else collections.OrderedDict)((self.decode(k), self.decode(x)) for k, x in v)
        if tag in ("bytes", "bytearray"):
            return (bytes if tag == "bytes" else bytearray)(bytes.fromhex(v))
        if tag == "complex":
            return complex(float(v[0]), float(v[1]))
        if tag == "value" and value.get("t") in VALUE_TYPES:
            return VALUE_TYPES[value["t"]][2](v)
        if tag == "range":
            return range(*(int(x) for x in v))
        if tag == "exception" and v in EXCEPTIONS:
            return EXCEPTIONS[v]
        return self.deref(value)


class Channel:
    """Requests and answers as JSON lines both ways; while waiting for an answer, requests from the other
    side are served (a callback may call back)."""

    def __init__(self, read_fd, write_fd, serve, deadline=None):
        self.read_fd = read_fd
        self.write_fd = write_fd
        self.serve = serve  # (request dict) -> answer dict
        self.deadline = deadline  # time.monotonic() after which the other side is given up on
        self.buffer = bytearray()
        self.broken = None

    def send(self, message):
        view = memoryview((json.dumps(message, separators=(",", ":")) + "\n").encode())
        while view:
            view = view[os.write(self.write_fd, view) :]

    def receive(self):
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[: end + 1]
                break
            if len(self.buffer) > MAX_LINE:
                raise CodeUnderTestEnded("the code under test sent a message too long to read")
            if self.deadline is not None:
                left = self.deadline - time.monotonic()
                if left <= 0 or not select.select([self.read_fd], [], [], left)[0]:
                    raise CodeUnderTestEnded("the code under test did not answer within the time limit")
            chunk = os.read(self.read_fd, 1 << 16)
            if not chunk:
                raise CodeUnderTestEnded("the process of the code under test ended")
            self.buffer += chunk
        try:
            return json.loads(line)
        except (ValueError, RecursionError):
            raise CodeUnderTestEnded("the code under test sent a malformed message") from None

    def ask(self, request):
        """Send a request; serve the other side's requests until its answer comes."""
        if self.broken:
            raise CodeUnderTestEnded(self.broken)
        try:
            self.send({"q": request})
            while True:
                message = self.receive()
                if not isinstance(message, dict):
                    raise CodeUnderTestEnded("the code under test sent a malformed message")
                if "q" in message:
                    self.send(self.serve(message["q"]))
                    continue
                return message
        except (CodeUnderTestEnded, OSError) as exc:
            self.broken = str(exc) if isinstance(exc, CodeUnderTestEnded) else "the pipe to the code under test broke"
            raise CodeUnderTestEnded(self.broken) from None

    def serve_forever(self):
        while True:
            try:
                message = self.receive()
            except CodeUnderTestEnded:
                return
            if isinstance(message, dict) and "q" in message:
                self.send(self.serve(message["q"]))


def _short(value):
    try:
        text = repr(value)
    except Exception:  # a __repr__ of the code's may raise
        text = f"<{type(value).__name__}>"
    return text if len(text) <= VALUE else text[:VALUE] + "…"


# ============================================================================ the host: the code under test

OPS = {
    "len": len,
    "iter": iter,
    "next": next,
    "bool": bool,
    "repr": repr,
    "str": str,
    "hash": hash,
    "getitem": operator.getitem,
    "setitem": operator.setitem,
    "delitem": operator.delitem,
    "contains": operator.contains,
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "truediv": operator.truediv,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "pow": pow,
    "matmul": operator.matmul,
    "and": operator.and_,
    "or": operator.or_,
    "xor": operator.xor,
    "lshift": operator.lshift,
    "rshift": operator.rshift,
    "neg": operator.neg,
    "pos": operator.pos,
    "abs": abs,
    "invert": operator.invert,
    "index": operator.index,
    "int": int,
    "float": float,
    "complex": complex,
    "round": round,
    "isinstance": isinstance,
    "issubclass": issubclass,
    "dir": dir,
    "enter": lambda obj: obj.__enter__(),
    "exit": lambda obj, *a: obj.__exit__(*a),
    "getattr": getattr,
    "setattr": setattr,
    "delattr": delattr,
    "call": lambda f, args, kwargs: f(*args, **dict(kwargs)),
    "import": importlib.import_module,
    "plain": project,
    "format": format,
}


def _nearest_builtin(cls):
    return next((c.__name__ for c in cls.__mro__ if EXCEPTIONS.get(c.__name__) is c), "Exception")


def host():
    """Serve the judge's requests on the submitted code until the pipe closes."""
    objects, numbers = {}, {}
    proxies, judges = {}, {}  # the tests' objects here: number -> proxy, id(proxy) -> number

    def ref(obj):
        if id(obj) in judges:  # one of the tests' objects, going back: the judge gets its own object
            return {"$": "p", "id": judges[id(obj)]}
        number = numbers.get(id(obj))
        if number is None:
            number = numbers[id(obj)] = len(objects) + 1
            objects[number] = obj
        out = {"$": "h", "id": number, "type": type(obj).__name__[:100]}
        if isinstance(obj, type):
            out["class"] = obj.__name__[:100]
            if issubclass(obj, BaseException):
                out["exception"] = _nearest_builtin(obj)
        elif isinstance(obj, types.ModuleType):
            out["module"] = str(getattr(obj, "__name__", ""))[:200]
        if any(isinstance(obj, base) for base, _ in PROJECTIONS):
            # the judge asks for its current value (op "plain") whenever it needs it
            out["plain"] = next(base.__name__ for base, _ in PROJECTIONS if isinstance(obj, base))
        return out

    def deref(value):
        if value.get("$") == "h":
            return objects[int(value["id"])]
        if value.get("$") == "p":
            number = int(value["id"])
            if number not in proxies:
                proxies[number] = _judge_proxy(channel, codec, number, value.get("callable", False))
                judges[id(proxies[number])] = number
            return proxies[number]
        raise ValueError("unknown reference")

    codec = Codec(ref, deref)

    def serve(request):
        try:
            op = OPS[request["op"]]
            args = [codec.decode(a) for a in request.get("args", [])]
            result = op(*args)
            if request["op"] != "call":
                return {"a": codec.encode(result)}
            # lists, dicts and sets the tests passed go back as the call left them (sort_in_place(xs))
            positional, keywords = args[1], args[2]
            out = [[n, codec.encode(a)] for n, a in enumerate(positional) if type(a) in MUTABLE] + [
                [k, codec.encode(a)] for k, a in keywords if type(a) in MUTABLE
            ]
            return {"a": codec.encode(result), **({"out": out} if out else {})}
        except BaseException as exc:  # everything the code raises goes back as data, SystemExit included
            return {"e": _exception(exc, ref)}

    channel = Channel(int(os.environ.pop("HIVEBOARD_CALL_IN")), int(os.environ.pop("HIVEBOARD_CALL_OUT")), serve)
    sys.path.append(os.getcwd())
    sys.set_int_max_str_digits(0)
    channel.serve_forever()


def _exception(exc, ref):
    try:
        message = str(exc)[:2000]
    except Exception:
        message = ""
    cls = type(exc)
    out = {"type": cls.__name__[:100], "base": _nearest_builtin(cls), "message": message}
    if EXCEPTIONS.get(cls.__name__) is not cls:
        out["class"] = ref(cls)["id"]
    if isinstance(exc, SystemExit):
        out["code"] = exc.code if isinstance(exc.code, (int, str, type(None))) else str(exc.code)
    return out


def _judge_proxy(channel, codec, number, is_callable):
    """An object of the tests' as the code under test sees it: calls and public attributes, asked back."""

    def ask(op, *args):
        answer = channel.ask({"op": op, "id": number, "args": [codec.encode(a) for a in args]})
        if "e" in answer:
            error = answer["e"] if isinstance(answer["e"], dict) else {}
            raise EXCEPTIONS.get(str(error.get("base")), Exception)(str(error.get("message", ""))[:2000])
        return codec.decode(answer.get("a"))

    class JudgeObject:
        __slots__ = ()

        def __getattr__(self, name):
            if name.startswith("_"):
                raise AttributeError(name)
            return ask("getattr", name)

        def __setattr__(self, name, value):  # e.g. a linked list's nodes relinked by the code
            ask("setattr", name, value)

        def __iter__(self):
            return ask("iter")

        def __next__(self):
            return ask("next")

        def __len__(self):
            return ask("len")

        def __bool__(self):
            return ask("bool")

        def __getitem__(self, key):
            return ask("getitem", key)

        def __contains__(self, item):
            return ask("contains", item)

        def __repr__(self):
            return ask("repr")

        def __str__(self):
            return ask("str")

    if is_callable:

        class JudgeCallable(JudgeObject):
            __slots__ = ()

            def __call__(self, *args, **kwargs):
                return ask("call", list(args), sorted(kwargs.items()))

        return JudgeCallable()
    return JudgeObject()


# ============================================================================ the judge: the creator's tests


class Judge:
    """The judge's side of the pipe: stand-ins for the code's objects, and callbacks on the tests' objects."""

    CALLBACKS = {"getattr", "setattr", "call", "iter", "next", "len", "bool", "getitem", "contains", "repr", "str"}

    def __init__(self, channel, root):
        self.channel = channel
        self.root = os.path.abspath(root)
        self.lock = threading.RLock()  # one request at a time on the pipe; a callback may ask again
        self.codec = Codec(self.ref, self.deref)
        self.far = {}  # host object number -> its stand-in here
        self.mine = {}  # number -> an object of the tests' handed to the host
        self.numbers = {}  # id(obj) -> number
        self.classes = {}  # host class number -> local exception class
        self.served = set()  # top-level names of the submitted modules the tests import
        self.decided_by_code = 0

    # --- references
    def ref(self, obj):
        if isinstance(obj, Far):
            return {"$": "h", "id": object.__getattribute__(obj, "_id")}
        if isinstance(obj, RemoteModule):
            return {"$": "h", "id": obj.__dict__["_hb_id"]}
        if isinstance(obj, type) and obj in self.classes.values():
            return {"$": "h", "id": next(k for k, v in self.classes.items() if v is obj)}
        if not self.shareable(obj):
            raise TypeError(
                f"{_short(obj)} cannot be handed to the code under test: it runs in another process, "
                "which is given data, and functions and objects of the tests' own files"
            )
        number = self.numbers.get(id(obj))
        if number is None:
            number = self.numbers[id(obj)] = len(self.mine) + 1
            self.mine[number] = obj
        return {"$": "p", "id": number, "callable": callable(obj)}

    def shareable(self, obj):
        """An object of this side the host may call or read public attributes of: one of the creator's files
        (a function, a class, an instance, a bound method), a pure built-in, a method of plain data, or a
        few in-memory standard types. Never `open`, `eval`, a module or anything of pytest's."""
        if isinstance(obj, types.MethodType):
            return self.shareable(obj.__func__)
        if isinstance(obj, type):  # int or str as a key, a class of the creator's
            return self.ours(obj) or (obj.__module__ == "builtins" and obj.__name__ in PURE_BUILTINS)
        if isinstance(obj, types.FunctionType):  # the creator's, or a pure module's (statistics.mean)
            return self.ours(obj) or obj.__module__ in PURE_MODULES
        if isinstance(obj, types.GeneratorType):  # a generator of the creator's files, iterated by the code
            return os.path.abspath(obj.gi_code.co_filename).startswith(self.root + os.sep)
        if isinstance(
            obj,
            (
                types.BuiltinFunctionType,
                types.MethodDescriptorType,
                types.WrapperDescriptorType,
                types.MethodWrapperType,
                types.ClassMethodDescriptorType,
            ),
        ):
            owner = getattr(obj, "__self__", None) or getattr(obj, "__objclass__", None)
            if owner is None or isinstance(owner, types.ModuleType):
                module = getattr(owner, "__name__", None) or getattr(obj, "__module__", None)
                return (module == "builtins" and obj.__name__ in PURE_BUILTINS) or module in PURE_MODULES
            return (
                type(owner) in DATA_TYPES
                or owner in DATA_TYPES
                or type(owner).__module__ in PURE_MODULES
                or (not isinstance(owner, type) and self.shareable(owner))
            )  # a StringIO's write
        if isinstance(obj, (operator.itemgetter, operator.attrgetter, operator.methodcaller)):
            return True
        cls = type(obj)
        return self.ours(cls) or f"{cls.__module__}.{cls.__qualname__}" in SHAREABLE_TYPES

    def ours(self, obj):
        """Defined in the creator's files (under the judge's root)."""
        code = getattr(obj, "__code__", None)
        if code is not None:
            path = code.co_filename
        else:
            path = getattr(sys.modules.get(getattr(obj, "__module__", None) or ""), "__file__", None) or ""
        return os.path.abspath(path).startswith(self.root + os.sep)

    def deref(self, value):
        if value.get("$") == "p":
            return self.mine[int(value["id"])]
        if value.get("$") != "h":
            raise CodeUnderTestEnded("the code under test sent an unknown reference")
        number = int(value["id"])
        if "exception" in value:
            return self.exception_class(number, str(value.get("class") or "Error"), str(value["exception"]))
        module = value.get("module")
        if module and isinstance(module, str) and module.split(".")[0] not in self.served:
            try:  # a module of the environment (the code's `math`) is this process's own, never the code's
                return importlib.import_module(module)
            except ImportError:
                pass
        far = self.far.get(number)
        if far is None:
            far = self.far[number] = Far(
                self,
                number,
                PLAIN_BASES.get(value.get("plain")) if isinstance(value.get("plain"), str) else None,
                str(value.get("type", "object"))[:100],
            )
        return far

    def exception_class(self, number, name, base):
        if number not in self.classes:
            parent = EXCEPTIONS.get(base, Exception)
            if parent is StopIteration:
                parent = Exception
            self.classes[number] = type(
                name if name.isidentifier() else "Error", (parent,), {"__module__": "code_under_test"}
            )
        return self.classes[number]

    # --- asking the host
    def call(self, far, args, kwargs):
        """Call an object of the code's; the tests' lists, dicts and sets it was given come back changed as
        the call changed them (data only: the code could have returned the same)."""
        answer = self._ask("call", far, list(args), sorted(kwargs.items()))
        for where, value in answer.get("out") or []:
            target = args[where] if isinstance(where, int) and 0 <= where < len(args) else kwargs.get(where)
            new = self.codec.decode(value)
            if type(target) is type(new) and type(target) in MUTABLE:
                if isinstance(target, (list, bytearray)):
                    target[:] = new
                else:
                    target.clear()
                    target.update(new)
        return self.codec.decode(answer.get("a"))

    def ask(self, op, *args):
        return self.codec.decode(self._ask(op, *args).get("a"))

    def _ask(self, op, *args):
        with self.lock:
            answer = self.channel.ask({"op": op, "args": [self.codec.encode(a) for a in args]})
        if not isinstance(answer, dict):
            raise CodeUnderTestEnded("the code under test sent a malformed answer")
        if "e" in answer:
            exc = self.raised(answer["e"])
            if isinstance(exc, StopIteration) and op != "next":
                # as in a generator (PEP 479): a StopIteration out of a call would end the tests' own loop
                # (all(map(f, cases)) would be true of nothing)
                raise RuntimeError(f"the code under test raised StopIteration from {op}") from None
            raise exc
        return answer

    def raised(self, error):
        if not isinstance(error, dict):
            return CodeUnderTestEnded("the code under test sent a malformed answer")
        name, base, message = str(error.get("type", "")), str(error.get("base", "")), str(error.get("message", ""))
        if "class" in error:
            cls = self.exception_class(int(error["class"]), name, base)
        elif EXCEPTIONS.get(name) is not None:
            cls = EXCEPTIONS[name]
        else:
            cls = self.exception_class(-len(self.classes) - 1, name, base)
        try:
            if issubclass(cls, SystemExit):
                exc = cls(error.get("code"))
            elif issubclass(cls, KeyError) and message[:1] == message[-1:] == "'":
                exc = cls(message[1:-1])
            else:
                exc = cls(message)
        except Exception:
            exc = Exception(message)
        exc.from_code_under_test = True  # a SystemExit(0) of the code's does not end the creator's script well
        return exc

    # --- the host asking us (only on objects the tests handed it)
    def serve(self, request):
        try:
            op = request.get("op")
            obj = self.mine[int(request["id"])]
            args = [self.codec.decode(a) for a in request.get("args", [])]
            if op not in self.CALLBACKS:
                raise TypeError(f"{op} is not allowed on an object of the tests")
            if op == "getattr":
                if not isinstance(args[0], str) or args[0].startswith("_"):
                    raise AttributeError("only public attributes of the tests' objects can be read")
                result = getattr(obj, args[0])
            elif op == "setattr":
                # data on an instance of the creator's classes; never a class, a function or a method swapped in
                if (
                    not isinstance(args[0], str)
                    or args[0].startswith("_")
                    or isinstance(obj, type)
                    or not self.ours(type(obj))
                    or callable(args[1])
                ):
                    raise AttributeError(
                        "the code under test may set only public data attributes of the tests' own objects"
                    )
                result = setattr(obj, args[0], args[1])
            elif op == "call":
                result = obj(*args[0], **dict(args[1]))
            else:
                result = OPS[op](obj, *args)
            return {"a": self.codec.encode(result)}
        except CodeUnderTestEnded:
            raise
        except BaseException as exc:  # its type only: an assert's message in the tests' callback names the answer
            return {"e": {"type": type(exc).__name__, "base": _nearest_builtin(type(exc)), "message": ""}}


NOTHING = object()
# methods that change a list, dict or set: called on the code's object itself, not on a copy of its value
MUTATORS = frozenset(
    {
        "append",
        "extend",
        "insert",
        "pop",
        "remove",
        "clear",
        "sort",
        "reverse",
        "update",
        "setdefault",
        "popitem",
        "add",
        "discard",
        "difference_update",
        "intersection_update",
        "symmetric_difference_update",
        "move_to_end",
    }
)
# dunder attributes of the code's objects the tests may read; any other (a library's protocol probe) is absent
DUNDERS = frozenset(
    {"__name__", "__qualname__", "__doc__", "__module__", "__version__", "__wrapped__", "__annotations__"}
)


def _far_op(op):
    def method(self, *args):
        return object.__getattribute__(self, "_judge").ask(op, self, *args)

    return method


def _value(far):
    """The current plain value of an object of the code's (asked each time: it may have changed), or NOTHING.
    It must be data of the type the object is built on, never a reference back to the code's objects."""
    base = object.__getattribute__(far, "_plain")
    if base is None:
        return NOTHING
    value = object.__getattribute__(far, "_judge").ask("plain", far)
    if type(value) is not base:
        raise TypeError(f"the code under test answered the value of its {base.__name__} with something else")
    return value


def _arith(op, python, reflected=False):
    """Arithmetic: on plain values here; between two objects of the code's, asked of the code (counted);
    never an object of the code's with no plain value against data (it would decide the result, and learn
    the tests' operand: `abs(area - 12.566) < 1e-9`)."""

    def method(self, other):
        mine = _value(self)
        theirs = _value(other) if isinstance(other, Far) else other
        if mine is not NOTHING and theirs is not NOTHING:
            return python(theirs, mine) if reflected else python(mine, theirs)
        judge = object.__getattribute__(self, "_judge")
        if not isinstance(other, Far):
            raise TypeError(
                f"an object of the code under test ({object.__getattribute__(self, '_type')}) with no "
                "plain value cannot be combined with data"
            )
        judge.decided_by_code += 1
        return judge.ask(op, *((other, self) if reflected else (self, other)))

    return method


def _unary(op, python):
    def method(self, *args):
        mine = _value(self)
        if mine is not NOTHING:
            return python(mine, *args)
        return object.__getattribute__(self, "_judge").ask(op, self, *args)

    return method


def _plain_op(op, python, missing=False):
    """An operation that reads a value: on the plain value when there is one (the code never sees what the
    tests look for in it), else asked of the code (counted when it decides a truth). `missing`: a key the
    value lacks is asked of the code (a Counter's 0, a defaultdict's default)."""

    def method(self, *args):
        plain = _value(self)
        if plain is not NOTHING:
            try:
                return python(plain, *args)
            except KeyError:
                if not missing or not isinstance(plain, dict):
                    raise
        if plain is not NOTHING:
            return object.__getattribute__(self, "_judge").ask(op, self, *args)
        judge = object.__getattribute__(self, "_judge")
        if op == "contains":
            judge.decided_by_code += 1
        return judge.ask(op, self, *args)

    return method


def _decided(op):
    """A comparison or truth test: on the plain value when there is one, else the code's answer (counted)."""
    python = getattr(operator, op)

    def method(self, *args):
        plain = _value(self)
        other = args[0] if args else NOTHING
        if isinstance(other, Far):
            other_plain = _value(other)
            if plain is not NOTHING and other_plain is not NOTHING:
                return python(plain, other_plain)
        elif plain is not NOTHING:
            return python(plain, *args)
        elif op in ("eq", "ne"):  # an object with no plain value is not equal to data
            return op == "ne"
        elif args:  # nor ordered against it: the code would learn the tests' bound
            raise TypeError(
                f"an object of the code under test ({object.__getattribute__(self, '_type')}) with no "
                "plain value cannot be ordered against data"
            )
        judge = object.__getattribute__(self, "_judge")
        judge.decided_by_code += 1
        return judge.ask(op, self, *args)

    return method


class Far:
    """An object of the code under test, as the tests see it: every use is a request to the host."""

    __slots__ = ("_judge", "_id", "_plain", "_type")

    def __init__(self, judge, number, plain, type_name):
        object.__setattr__(self, "_judge", judge)
        object.__setattr__(self, "_id", number)
        object.__setattr__(self, "_plain", plain)
        object.__setattr__(self, "_type", type_name)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__") and name not in DUNDERS:
            raise AttributeError(name)  # protocol probes (numpy's __array__…) are not the code's to answer
        if object.__getattribute__(self, "_plain") and not name.startswith("_") and name not in MUTATORS:
            plain = _value(self)
            if hasattr(type(plain), name):
                return getattr(plain, name)  # str.startswith, list.count…: the value's, not the code's override
        return object.__getattribute__(self, "_judge").ask("getattr", self, name)

    def __setattr__(self, name, value):
        object.__getattribute__(self, "_judge").ask("setattr", self, name, value)

    def __delattr__(self, name):
        object.__getattribute__(self, "_judge").ask("delattr", self, name)

    def __call__(self, *args, **kwargs):
        return object.__getattribute__(self, "_judge").call(self, args, kwargs)

    @property
    def __class__(self):  # isinstance(counter, dict): an object built on a plain type is one
        base = object.__getattribute__(self, "_plain")
        return base if base is not None else Far

    def __format__(self, spec):
        plain = _value(self)
        if plain is not NOTHING:
            return format(plain, spec)
        return object.__getattribute__(self, "_judge").ask("format", self, spec)

    def __instancecheck__(self, obj):
        object.__getattribute__(self, "_judge").decided_by_code += 1
        return object.__getattribute__(self, "_judge").ask("isinstance", obj, self)

    def __hash__(self):
        plain = _value(self)
        if plain is not NOTHING:
            return hash(plain)
        return object.__getattribute__(self, "_judge").ask("hash", self)

    def __repr__(self):
        plain = _value(self)
        if plain is not NOTHING:
            return repr(plain)
        return object.__getattribute__(self, "_judge").ask("repr", self)

    def __str__(self):
        return object.__getattribute__(self, "_judge").ask("str", self)

    def __dir__(self):
        return object.__getattribute__(self, "_judge").ask("dir", self)

    def __enter__(self):
        return object.__getattribute__(self, "_judge").ask("enter", self)

    def __exit__(self, *exc):
        # the exception itself stays here, and the code's context manager never swallows one: a failing
        # assert inside `with code_object:` fails
        object.__getattribute__(self, "_judge").ask("exit", self, None, None, None)
        return False

    __eq__, __ne__ = _decided("eq"), _decided("ne")
    __lt__, __le__, __gt__, __ge__ = _decided("lt"), _decided("le"), _decided("gt"), _decided("ge")
    __contains__, __len__, __iter__ = (
        _plain_op("contains", operator.contains),
        _plain_op("len", len),
        _plain_op("iter", iter),
    )
    __getitem__ = _plain_op("getitem", operator.getitem, missing=True)
    __next__ = _far_op("next")
    __setitem__, __delitem__ = _far_op("setitem"), _far_op("delitem")
    __neg__, __pos__, __abs__, __invert__ = (
        _unary("neg", operator.neg),
        _unary("pos", operator.pos),
        _unary("abs", abs),
        _unary("invert", operator.invert),
    )
    __index__, __int__, __float__, __complex__, __round__ = (
        _unary("index", operator.index),
        _unary("int", int),
        _unary("float", float),
        _unary("complex", complex),
        _unary("round", round),
    )


def _bool(self):
    plain = _value(self)
    if plain is not NOTHING:
        return bool(plain)
    judge = object.__getattribute__(self, "_judge")
    judge.decided_by_code += 1
    result = judge.ask("bool", self)
    if type(result) is not bool:
        raise TypeError("the code under test answered a truth test with something other than True or False")
    return result


Far.__bool__ = _bool
for _name in (
    "add",
    "sub",
    "mul",
    "truediv",
    "floordiv",
    "mod",
    "pow",
    "matmul",
    "and",
    "or",
    "xor",
    "lshift",
    "rshift",
):
    _python = pow if _name == "pow" else getattr(operator, _name + "_" if _name in ("and", "or") else _name)
    setattr(Far, f"__{_name}__", _arith(_name, _python))
    setattr(Far, f"__r{_name}__", _arith(_name, _python, reflected=True))


class RemoteModule(types.ModuleType):
    """A module of the submitted work, as the tests see it."""

    def __getattr__(self, name):
        if name.startswith("__") and name not in ("__all__", "__version__", "__doc__"):
            raise AttributeError(name)
        judge = self.__dict__["_hb_judge"]
        if name == "__all__":
            try:
                names = judge.ask("getattr", self, "__all__")
            except AttributeError:
                names = judge.ask("dir", self)
            return _star_names(names)
        value = judge.ask("getattr", self, name)
        if (
            isinstance(value, Far)
            and name not in judge.served
            and (name in sys.stdlib_module_names or name in sys.modules)
        ):
            # a real module comes back as this process's own; an object of the code's posing as `math` never
            raise AttributeError(f"the code under test's {name!r} is not the module of that name")
        return value

    def __setattr__(self, name, value):
        if name.startswith("__") or "_hb_judge" not in self.__dict__:
            super().__setattr__(name, value)  # the import system's own attributes
        else:  # e.g. monkeypatch.setattr(module, "helper", fake): the code's module changes, over there
            judge, saved = self.__dict__["_hb_judge"], self.__dict__.setdefault("_hb_saved", {})
            if name not in saved:
                try:
                    saved[name] = judge.ask("getattr", self, name)
                except AttributeError:
                    saved[name] = NOTHING
            judge.ask("setattr", self, name, value)

    def __delattr__(self, name):
        if name.startswith("__") or name in self.__dict__:
            super().__delattr__(name)
            return
        # monkeypatch undoes a setattr on a module with delattr (this module's own __dict__ never had the
        # name): what the code's module had before comes back
        original = self.__dict__.get("_hb_saved", {}).pop(name, NOTHING)
        if original is NOTHING:
            self.__dict__["_hb_judge"].ask("delattr", self, name)
        else:
            self.__dict__["_hb_judge"].ask("setattr", self, name, original)


STAR_ROOT = [""]  # the creator's files' root, set by judge()


def _star_names(names):
    """What `from module_of_the_code import *` may bind: public names that are not built-ins and not already
    bound where the import happens (the code must not rebind the tests' `math`, `abs` or `isclose`)."""
    frame = sys._getframe(2)  # the star import runs in C: the next frame up is the importer (or importlib's)
    while frame is not None and frame.f_code.co_filename.startswith("<frozen"):
        frame = frame.f_back
    taken = set(frame.f_globals if frame is not None else ())
    root = STAR_ROOT[0]
    for module in list(sys.modules.values()):  # nor anything a module of the creator's files already binds
        path = getattr(module, "__file__", None) or ""
        if root and os.path.abspath(path).startswith(root + os.sep):
            taken |= set(vars(module))
    return [
        n
        for n in (names if isinstance(names, (list, tuple)) else [])
        if isinstance(n, str)
        and n.isidentifier()
        and not n.startswith("_")
        and n not in taken
        and not hasattr(builtins, n)
    ]


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports of the submitted modules become stand-ins, unless the creator's files or the environment
    have a module of that name."""

    def __init__(self, judge, names):
        self.judge = judge
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in self.names:
            return None
        machinery = importlib.machinery
        if any(
            finder.find_spec(name, path) is not None
            for finder in (machinery.BuiltinImporter, machinery.FrozenImporter, machinery.PathFinder)
        ):
            return None
        return importlib.util.spec_from_loader(name, self, is_package=True)

    def create_module(self, spec):
        module = RemoteModule(spec.name)
        far = self.judge.ask("import", spec.name)  # raises here when the code fails to import (or ends)
        module.__dict__["_hb_judge"] = self.judge
        module.__dict__["_hb_id"] = object.__getattribute__(far, "_id")
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def _exception_name(exc):
    """The kind of a failure, from a fixed list, none of it chosen by the code: the code ended or stopped
    answering; the code raised (whatever it raised); the test's own assert failed; else the nearest built-in
    type of an error in the test itself."""
    if isinstance(exc, CodeUnderTestEnded):
        return "CodeUnderTestEnded"
    if getattr(exc, "from_code_under_test", False):
        return FROM_CODE
    return _nearest_builtin(type(exc))


class Report:
    """Per-test outcomes as the judge saw them; a test passes only when its body ran to its end here."""

    def __init__(self, judge):
        self.judge = judge
        self.outcomes = {}  # every test's outcome, by id
        self.details = {}  # the first KEPT tests that did not pass: how each failed
        self.collected = 0
        self.finished = set()  # tests whose body returned here
        self.watched = set()  # tests whose body is watched (plain pytest functions)
        self.current = None
        self.compared = {}
        self.exceptions = {}

    def pytest_collection_modifyitems(self, session, config, items):
        import pytest

        for item in items:
            if type(item) is pytest.Function and callable(item.obj):
                item.obj = self._watched(item.obj, item.nodeid)
                self.watched.add(item.nodeid)

    def _watched(self, function, nodeid):
        finished = self.finished

        def body(*args, **kwargs):
            result = function(*args, **kwargs)
            finished.add(nodeid)
            return result

        body.__wrapped__ = function
        return body

    def pytest_collection_finish(self, session):
        self.collected = len(session.items)

    def pytest_collectreport(self, report):
        if report.failed:
            self._record(report.nodeid or "collection", "error", report)

    def pytest_runtest_setup(self, item):
        self.current = item.nodeid

    def pytest_assertrepr_compare(self, config, op, left, right):
        if self.current is not None:
            self.compared.setdefault(self.current, (op, _short(left), _short(right)))
        return None

    def pytest_runtest_makereport(self, item, call):
        if call.excinfo is not None:
            self.exceptions.setdefault(item.nodeid, _exception_name(call.excinfo.value))
        return None  # pytest's own report

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            outcome = "error" if report.failed and report.when != "call" else report.outcome
            if hasattr(report, "wasxfail"):
                outcome = "xfailed" if report.skipped else "xpassed"
            if outcome == "passed" and report.nodeid in self.watched and report.nodeid not in self.finished:
                outcome = "failed"  # pytest says passed, but the test's body never returned here
            if self.outcomes.get(report.nodeid, "passed") == "passed":  # a teardown error outranks a pass
                self._record(report.nodeid, outcome, report)

    def _record(self, nodeid, outcome, report=None, entry=None):
        self.outcomes[nodeid] = outcome
        if outcome != "passed" and (nodeid in self.details or len(self.details) < KEPT):
            self.details[nodeid] = entry or self._entry(outcome, report)

    def never_ran(self, expected):
        """Record the tests of `expected` (ids) that pytest never collected or ran as errors."""
        ran = set()
        for node in self.outcomes:  # a test's own id, and the function's for each parametrized case
            ran.add(node)
            cut = node.find("[")
            while cut != -1:
                ran.add(node[:cut])
                cut = node.find("[", cut + 1)
        for test in expected:
            if test not in ran:
                message = "defined in the card's tests but never collected or run"
                self._record(test, "error", entry={"outcome": "error", "exception": "Exception", "message": message})

    def _entry(self, outcome, report):
        entry = {"outcome": outcome}
        if outcome != "passed":
            entry["exception"] = self.exceptions.get(report.nodeid, "Exception")
        if report.nodeid in self.compared:
            op, left, right = self.compared[report.nodeid]
            entry["compared"] = {"op": op, "actual": left, "expected": right}
        if outcome not in ("passed",):
            crash = getattr(report.longrepr, "reprcrash", None)
            text = str(report.longrepr or "").strip()
            entry["message"] = (crash.message if crash is not None else text.splitlines()[-1] if text else "")[:MESSAGE]
            entry["detail"] = (report.longreprtext or "")[-DETAIL:]
        return entry

    def result(self, exitstatus):
        """Every test counted by outcome; the tests that did not pass listed, as many as fit (see KEPT)."""
        counts, tests, size = {}, {}, 0
        for node, outcome in self.outcomes.items():
            counts[outcome] = counts.get(outcome, 0) + 1
            if outcome == "passed":
                continue
            entry = self.details.get(node) or {"outcome": outcome}
            cost = len(json.dumps(node)) + len(json.dumps(entry)) + 2
            if size + cost <= REPORT_BYTES:
                size += cost
                tests[node] = entry
        return {
            "exitstatus": int(exitstatus),
            "collected": self.collected,
            "counts": counts,
            "tests": tests,
            "decided_by_code": self.judge.decided_by_code if self.judge else 0,
        }


def _script(kind, target, args, root):
    """Run the creator's script, module or code (a file of the creator's, `args[0]` its argv[0]: "-c" or "-")
    here, as python would; (outcome, exception type, message, detail)."""
    sys.argv = [target, *args] if kind != "code" else list(args)
    import runpy

    try:
        if kind == "script":
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
        else:  # like `python -m` and `python -c`, from the creator's files, which are on the path
            sys.path.insert(0, root)
            if kind == "module":
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                with open(target, encoding="utf-8") as source:
                    code = compile(source.read(), target, "exec")
                exec(code, {"__name__": "__main__", "__builtins__": builtins})
    except SystemExit as exc:
        if exc.code in (None, 0) and not getattr(exc, "from_code_under_test", False):
            return "passed", None, "", ""
        return "failed", "SystemExit", f"exited with {exc.code!r}"[:MESSAGE], ""
    except BaseException as exc:
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next  # from the creator's code on: this runner's own frames say nothing to its reader
        detail = "".join(traceback.format_exception(type(exc), exc, tb))[-DETAIL:]
        return "failed", _exception_name(exc), f"{type(exc).__name__}: {exc}"[:MESSAGE], detail
    return "passed", None, "", ""


def judge(argv):
    root, budget, modules = argv[0], float(argv[1]), [m for m in argv[2].split(",") if m]
    mode, *rest = argv[4:]  # argv[3] is "--"
    report_fd = int(os.environ.pop("HIVEBOARD_REPORT_FD"))
    holder = {}
    channel = Channel(
        int(os.environ.pop("HIVEBOARD_CALL_IN")),
        int(os.environ.pop("HIVEBOARD_CALL_OUT")),
        lambda request: holder["judge"].serve(request),
        deadline=time.monotonic() + budget,
    )
    referee = holder["judge"] = Judge(channel, root)
    STAR_ROOT[0] = os.path.abspath(root)
    sys.set_int_max_str_digits(0)  # factorial(2000) is data too
    imported, expected = _read_tests(root)
    # only what the creator's files import by name is the code's: a submitted `scipy.py` or `hypothesis/`
    # does not answer pytest.importorskip("scipy") or stand in for a library the tests use
    referee.served = set(modules) & imported
    sys.meta_path.insert(0, Finder(referee, referee.served))
    hidden = os.environ.pop("HIVEBOARD_HIDDEN", "") == "1"
    if mode == "pytest":
        import pytest

        report = Report(referee)
        # hidden: no assertion explanations (nobody reads them, and describing a failure would ask the code)
        code = pytest.main(
            [
                "-p",
                "no:cacheprovider",
                "-p",
                "no:xdist",
                "-p",
                "no:anyio",
                "--rootdir",
                root,
                "--confcutdir",
                root,
                "-c",
                os.devnull,
                *(["--assert=plain"] if hidden else []),
                *rest,
            ],
            plugins=[report],
        )
        if rest == ["-q", root]:  # the default run: every test the files define must have been collected
            report.never_ran(expected)
        result = report.result(code)
    else:
        outcome, exc, message, detail = _script(mode, rest[0], rest[1:], referee.root)
        result = {
            "script": {"outcome": outcome, "exception": exc, "message": message, "detail": detail},
            "decided_by_code": referee.decided_by_code,
        }
    with os.fdopen(report_fd, "w") as out:
        json.dump(result, out)
    os._exit(0)  # the stand-ins' pipe may still be busy: nothing after the report matters


def _read_tests(root):
    """From the creator's own files (read, never imported): the top-level names they import, and the ids
    of the tests pytest should collect from them (test_*.py / *_test.py: test* functions, Test* classes'
    test* methods)."""
    import ast

    imported, expected = set(), []
    for folder, _, files in os.walk(root):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            try:
                with open(path, encoding="utf-8") as source:
                    tree = ast.parse(source.read())
            except (OSError, SyntaxError, ValueError, RecursionError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    imported |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    imported.add(node.module.split(".")[0])
            if not (name.startswith("test_") or name.endswith("_test.py")):
                continue
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                    expected.append(f"{rel}::{node.name}")
                elif (
                    isinstance(node, ast.ClassDef)
                    and node.name.startswith("Test")
                    and not any(isinstance(n, ast.FunctionDef) and n.name == "__init__" for n in node.body)
                ):
                    expected += [
                        f"{rel}::{node.name}::{n.name}"
                        for n in node.body
                        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test")
                    ]
    return imported, expected


def own(argv):
    """The author's own tests, in one process with the code they test (`own ROOT SRC -- pytest ARGS`): the
    submitted files go on the import path after the standard library and the installed packages, so a
    submitted `pytest.py` or `json.py` cannot stand in for them; ROOT is pytest's root and the last
    directory it reads conftest.py files from. This report is only as good as its author's word."""
    root, src, args = argv[0], argv[1], argv[3:]  # argv[2] is "--"
    report_fd = int(os.environ.pop("HIVEBOARD_REPORT_FD"))
    sys.path.append(src)
    import pytest

    report = Report(None)
    code = pytest.main(["-p", "no:cacheprovider", "--rootdir", root, "--confcutdir", root, *args], plugins=[report])
    with os.fdopen(report_fd, "w") as out:
        json.dump(report.result(code), out)
    sys.exit(int(code))


if __name__ == "__main__":
    {"host": lambda argv: host(), "judge": judge, "own": own}[sys.argv[1]](sys.argv[2:])
