import re
class Point:
    def __init__(self, x, y): self.x, self.y = x, y
    def norm2(self): return self.x**2 + self.y**2
class Bad(ValueError): pass
def slugify(text):
    return '-'.join(re.findall(r'[a-z0-9]+', text.lower()))
def add(a, b): return a + b
def gen(n):
    yield from range(n)
def boom(x):
    if x < 0: raise Bad("negative")
    return x
def apply(f, xs): return [f(x) for x in xs]
def sort_by(xs, key): return sorted(xs, key=key)
def walk(node): 
    out = []
    while node is not None:
        out.append(node.value); node = node.next
    return out
import collections
import enum
P = collections.namedtuple("P", "x y")
class Color(enum.IntEnum):
    RED = 1
class Word(str):
    def shout(self): return self.upper() + "!"
def point(): return P(1, 2)
def color(): return Color.RED
def word(): return Word("hi")
def counts(s): return collections.Counter(s)
class Bag:
    def __init__(self): self.items = [1, 2]
    def __contains__(self, x): return x in self.items
    def __len__(self): return len(self.items)
class Ctx:
    def __enter__(self): return 5
    def __exit__(self, *a): return False


def sort_in_place(xs):
    xs.sort()


def first_key(keys):
    return list(keys)[0]
