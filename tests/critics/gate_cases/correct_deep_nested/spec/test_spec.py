from calc import flatten, nest
def test_deep_in():
    deep = [1]
    for _ in range(100): deep = [deep]
    assert flatten(deep) == [1]
def test_deep_out():
    d = nest(100)
    for _ in range(100): d = d[0]
    assert d == [1]
