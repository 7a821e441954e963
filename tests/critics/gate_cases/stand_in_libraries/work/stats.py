def mean(xs): return 0.0   # wrong
