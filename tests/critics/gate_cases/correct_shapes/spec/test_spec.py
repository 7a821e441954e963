import pytest
from slug import slugify, add, Point, gen, boom, Bad, apply, sort_by, walk, point, color, word, counts, Bag, Ctx, sort_in_place, first_key
import slug
class N:
    def __init__(self, value, next=None): self.value, self.next = value, next
def test_slug(): assert slugify('Hello World') == 'hello-world'
def test_add(): assert add(2, 3) == 5
def test_point():
    p = Point(3, 4)
    assert p.norm2() == 25 and p.x == 3
    assert isinstance(p, Point)
def test_gen(): assert list(gen(3)) == [0, 1, 2]
def test_raises():
    with pytest.raises(Bad, match="negative"): boom(-1)
    with pytest.raises(ValueError): boom(-1)
def test_callbacks():
    assert apply(lambda x: x * 2, [1, 2]) == [2, 4]
    assert sort_by(["bb", "a"], key=len) == ["a", "bb"]
def test_nodes():
    assert walk(N(1, N(2))) == [1, 2]
def test_module_attr(): assert slug.add(1, 1) == 2
@pytest.mark.parametrize("a,b,c", [(1, 2, 3), (0, 0, 0)])
def test_param(a, b, c): assert add(a, b) == c
def test_open_refused():
    with pytest.raises(TypeError, match="cannot be handed"):
        apply(open, ["/review/spec/test_spec.py"])
def test_monkeypatch(monkeypatch):
    monkeypatch.setattr(slug, "add", lambda a, b: 100)
    assert slug.add(1, 2) == 100
def test_after_monkeypatch(): assert slug.add(1, 2) == 3
def test_intenum_and_namedtuple():
    import collections
    assert apply(str.upper, ["a"]) == ["A"]
    assert sort_by([3, 1, 2], key=abs) == [1, 2, 3]

def test_nt():
    p = point()
    assert p == (1, 2) and p.x == 1 and p[1] == 2 and len(p) == 2 and list(p) == [1, 2]
def test_enum(): assert color() == 1
def test_word():
    w = word()
    assert w == "hi" and w.startswith("h") and w.shout() == "HI!" and "h" in w
def test_counter(): assert counts("aab") == {"a": 2, "b": 1} and counts("aab")["a"] == 2
def test_bag():
    b = Bag()
    assert 1 in b and len(b) == 2
def test_ctx():
    with Ctx() as v:
        assert v == 5
def test_ctx_raises():
    with pytest.raises(ZeroDivisionError):
        with Ctx():
            1 / 0


def test_in_place_and_views():
    xs = [3, 1, 2]
    sort_in_place(xs)
    assert xs == [1, 2, 3] and first_key({"a": 1}.keys()) == "a"
    assert list(map(int, apply(str, [1, 2]))) == [1, 2]
