import math
from calc import factorial, digits
def test_big(): assert factorial(2000) == math.factorial(2000)
def test_arg(): assert digits(10 ** 5000) == 5001
