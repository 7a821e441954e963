from bitcount import bitcount


def test_bits():
    assert bitcount(127) == 7 and bitcount(128) == 1
