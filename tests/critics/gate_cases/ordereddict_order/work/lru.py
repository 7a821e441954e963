from collections import OrderedDict
class LRU:
    def __init__(self, n): self.n, self.d = n, OrderedDict()
    def put(self, k, v): self.d[k] = v                   # wrong: never moves used keys, never evicts in order
    def get(self, k): return self.d.get(k)
    def snapshot(self): return OrderedDict(reversed(self.d.items()))   # wrong order
