from calc import word_count, origin, group
def test_counter(): r = word_count("a b a"); assert isinstance(r, dict) and r == {"a": 2, "b": 1}
def test_nt(): p = origin(); assert isinstance(p, tuple) and p == (0, 0) and p.x == 0
def test_dd(): assert isinstance(group([1, 2, 3]), dict)
def test_counter_most(): assert word_count("a b a").most_common(1) == [("a", 2)]
def test_fmt(): assert f"{word_count('a a')['a']:03d}" == "002"
