from hypothesis import given, strategies as st
from calc import add
def test_zero(): assert add(0, 5) == 5
@given(st.integers(), st.integers())
def test_commutes_with_sum(a, b): assert add(a, b) == a + b
