def flatten(xs):
    out = []
    for x in xs:
        if isinstance(x, list): out.extend(flatten(x))
        else: out.append(x)
    return out
def nest(n):
    d = [1]
    for _ in range(n): d = [d]
    return d
