from collections import OrderedDict
from lru import LRU
def test_order():
    c = LRU(3); c.put("a", 1); c.put("b", 2); c.put("c", 3)
    assert c.snapshot() == OrderedDict([("a", 1), ("b", 2), ("c", 3)])
