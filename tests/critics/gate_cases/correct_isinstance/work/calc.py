from collections import Counter, namedtuple, defaultdict
Point = namedtuple("Point", "x y")
def word_count(s): return Counter(s.split())
def origin(): return Point(0, 0)
def group(xs):
    d = defaultdict(list)
    for x in xs: d[x % 2].append(x)
    return d
def mean(xs):
    import statistics
    return statistics.fmean(xs)
