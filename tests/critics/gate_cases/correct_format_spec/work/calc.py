import numpy as np
def mean(xs): return np.mean(xs)     # numpy.float64, a float subclass
