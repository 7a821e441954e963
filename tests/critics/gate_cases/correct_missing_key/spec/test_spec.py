from calc import word_count, group
def test_counter_missing(): assert word_count("a b")["z"] == 0
def test_dd_missing(): assert group([1, 3])[0] == []
def test_counter_get(): assert word_count("a b").get("z", 0) == 0
