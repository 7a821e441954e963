LEARNED = []
class Inner(str):
    def __str__(self): return self
class S(str):
    # the plain value the host reports is str(self): an Inner, itself a str subclass -> a Far again
    def __str__(self): return Inner("")
    def startswith(self, p, *a): LEARNED.append(p); return True
    def endswith(self, p, *a): LEARNED.append(p); return True
    def count(self, p, *a): LEARNED.append(p); return 1
def greet(name): return S("")          # wrong
class BB(bytes):
    def __bytes__(self): return BB2(b"")
    def startswith(self, p, *a): LEARNED.append(p); return True
class BB2(bytes):
    def __bytes__(self): return self
def encode(x): return BB(b"")          # wrong
def learned(): return list(map(repr, LEARNED))
