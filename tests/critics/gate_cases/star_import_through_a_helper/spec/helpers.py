from calc import *
def approx_eq(a, b): return abs(a - b) < 1e-9
