from calc import mean
def test_fmt(): assert f"{mean([1, 2])}" == "1.5" and f"{mean([1, 2]):.2f}" == "1.50"
