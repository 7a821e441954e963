from calc import compute
def test_callback():
    seen = []
    def on_done(value):
        assert value == 982451653
        seen.append(value)
    compute(982451, on_done)
    assert seen == [982451653]
