import math, unittest
from geom import area
def test_area(): assert abs(area(2.0) - 12.566370614359172) < 1e-9
def test_area_rev(): assert abs(12.566370614359172 - area(2.0)) < 1e-9
class T(unittest.TestCase):
    def test_almost(self): self.assertAlmostEqual(area(3.0), 28.274333882308138)
