from calc import greet, encode, learned
def test_str(): assert greet("Bob").startswith("Hello, Bob")
def test_end(): assert greet("Bob").endswith("!")
def test_count(): assert greet("Bob").count("o") == 1
def test_bytes(): assert encode("x").startswith(b"\x89PNG")
def test_leak(): assert "'Hello, Bob'" in learned()
