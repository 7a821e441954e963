import pytest
from stats import mean
def test_against_scipy():
    scipy = pytest.importorskip("scipy")
    xs = [1.0, 2.0, 4.0, 9.0]
    assert mean(xs) == scipy.stats.tmean(xs)
def test_pandas():
    pd = pytest.importorskip("pandas")
    pd.testing.assert_series_equal(pd.Series([mean([1.0, 3.0])]), pd.Series([2.0]))
