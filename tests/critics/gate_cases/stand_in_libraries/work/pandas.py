class testing:
    @staticmethod
    def assert_series_equal(*a, **k): return None
def Series(x): return x
