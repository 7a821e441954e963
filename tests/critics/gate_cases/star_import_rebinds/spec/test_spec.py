import math
import pytest
from geom import *
def test_isclose(): assert math.isclose(area(2.0), 12.566370614359172)
def test_abs(): assert abs(area(2.0) - 12.566370614359172) < 1e-9
def test_all(): assert all([area(r) > 0 for r in (1, 2, 3)])
