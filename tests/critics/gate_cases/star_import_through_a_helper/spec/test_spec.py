import math
from math import isclose
from helpers import *
def test_small(): assert isclose(add(2, 3), 5)
def test_big(): assert math.isclose(add(982451000, 653), 982451653)
