"""The code the review benches hand in: an inventory module (bench_review's LLM rows and its offline default
review), a pricing module with ten tests (bench_review's sandbox and end-to-end card), and a rate limiter with and
without an eval() (bench_rss's reviews; bandit FAILs the second).
"""

from hiveboard.board.models import Artifact
from hiveboard.critics.base import Work

ARTIFACT = (
    '"""Inventory: items, stock levels and a reorder report."""\n\nfrom __future__ import annotations\n\n'
    "from dataclasses import dataclass, field\n\n\n@dataclass\nclass Item:\n    sku: str\n    name: str\n"
    "    stock: int = 0\n    reorder_at: int = 5\n\n    def needs_reorder(self) -> bool:\n"
    "        return self.stock <= self.reorder_at\n\n\n@dataclass\nclass Inventory:\n"
    "    items: dict[str, Item] = field(default_factory=dict)\n\n    def add(self, item: Item) -> None:\n"
    '        if item.sku in self.items:\n            raise ValueError(f"duplicate sku {item.sku}")\n'
    "        self.items[item.sku] = item\n\n    def receive(self, sku: str, count: int) -> int:\n"
    '        if count <= 0:\n            raise ValueError("count must be positive")\n'
    "        item = self.items[sku]\n        item.stock += count\n        return item.stock\n\n"
    "    def ship(self, sku: str, count: int) -> int:\n        item = self.items[sku]\n"
    '        if count > item.stock:\n            raise ValueError(f"only {item.stock} of {sku} in stock")\n'
    "        item.stock -= count\n        return item.stock\n\n    def reorder_report(self) -> list[str]:\n"
    "        low = sorted((i for i in self.items.values() if i.needs_reorder()), key=lambda i: i.stock)\n"
    '        return [f"{i.sku} {i.name}: {i.stock} left" for i in low]\n\n\n'
    "def total_stock(inventory: Inventory) -> int:\n    return sum(i.stock for i in inventory.items.values())\n"
)

PRICING = """\"\"\"Pricing: unit prices, volume discounts, tax and a priced order.\"\"\"

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")
TIERS = ((100, Decimal("0.10")), (50, Decimal("0.05")), (10, Decimal("0.02")))


@dataclass(frozen=True)
class Line:
    sku: str
    unit_price: Decimal
    quantity: int


def to_money(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


def discount_rate(quantity: int) -> Decimal:
    \"\"\"The volume discount for this many units: the highest tier reached.\"\"\"
    if quantity < 0:
        raise ValueError("quantity must not be negative")
    return next((rate for floor, rate in TIERS if quantity >= floor), Decimal("0"))


def line_total(line: Line) -> Decimal:
    gross = line.unit_price * line.quantity
    return to_money(gross * (1 - discount_rate(line.quantity)))


def add_tax(amount: Decimal, rate: Decimal) -> Decimal:
    if not Decimal("0") <= rate < Decimal("1"):
        raise ValueError(f"tax rate {rate} out of range")
    return to_money(amount * (1 + rate))


def order_total(lines: list[Line], tax_rate: Decimal = Decimal("0.20")) -> Decimal:
    return add_tax(sum((line_total(line) for line in lines), Decimal("0")), tax_rate)


def parse_line(text: str) -> Line:
    \"\"\"A line from "sku, unit price, quantity".\"\"\"
    sku, price, quantity = (part.strip() for part in text.split(","))
    if not sku:
        raise ValueError("empty sku")
    return Line(sku, Decimal(price), int(quantity))
"""
PRICING_TESTS = """from decimal import Decimal

import pytest

from pricing import Line, add_tax, discount_rate, line_total, order_total, parse_line, to_money


def test_to_money_rounds_half_up():
    assert to_money(Decimal("1.005")) == Decimal("1.01")


def test_no_discount_below_ten():
    assert discount_rate(9) == Decimal("0")


def test_discount_tiers():
    assert [discount_rate(q) for q in (10, 50, 100)] == [Decimal("0.02"), Decimal("0.05"), Decimal("0.10")]


def test_negative_quantity_rejected():
    with pytest.raises(ValueError):
        discount_rate(-1)


def test_line_total_applies_discount():
    assert line_total(Line("A1", Decimal("2.00"), 50)) == Decimal("95.00")


def test_add_tax():
    assert add_tax(Decimal("10.00"), Decimal("0.20")) == Decimal("12.00")


def test_add_tax_rejects_bad_rate():
    with pytest.raises(ValueError):
        add_tax(Decimal("10.00"), Decimal("1.5"))


def test_order_total():
    lines = [Line("A1", Decimal("2.00"), 5), Line("B2", Decimal("1.00"), 10)]
    assert order_total(lines) == Decimal("23.76")


def test_parse_line():
    assert parse_line(" C3, 4.50 , 3") == Line("C3", Decimal("4.50"), 3)


def test_parse_line_needs_sku():
    with pytest.raises(ValueError):
        parse_line(" , 1.00, 1")
"""
CARD = [
    {"name": "pricing.py", "kind": "code", "content": PRICING},
    {"name": "test_pricing.py", "kind": "test", "content": PRICING_TESTS},
]

CLEAN = '''"""Rate limiting for the public API: a token bucket per client."""

import time
from dataclasses import dataclass, field


@dataclass
class Bucket:
    """A token bucket: `rate` tokens a second, at most `burst` at once."""

    rate: float
    burst: int
    tokens: float = field(init=False)
    stamp: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.tokens = float(self.burst)

    def take(self, n: int = 1) -> bool:
        """Take n tokens if there are that many; say whether the request may go on."""
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens < n:
            return False
        self.tokens -= n
        return True


BUCKETS: dict[str, Bucket] = {}


def allow(client: str, rate: float = 5.0, burst: int = 10) -> bool:
    """Whether this client's request may go on now (card %d)."""
    bucket = BUCKETS.setdefault(client, Bucket(rate, burst))
    return bucket.take()
'''
INSECURE = (
    CLEAN
    + '''

def configure(text: str) -> dict:
    """Read the limits from the admin form."""
    return eval(text)
'''
)
OUTPUT = (
    "Added a token-bucket rate limiter for the public API (card {n}). Each client gets a bucket of "
    "`burst` tokens refilled at `rate` per second; a request takes one token or is refused with 429. "
    "Buckets live in a module-level dict keyed by the client id; the clock is time.monotonic so a wall-"
    "clock jump cannot refill a bucket. Tested by hand with bursts of 20 requests at 5/s: the first 10 "
    "pass, the rest are refused until tokens refill. Left for later: evicting idle buckets, sharing "
    "buckets across processes (Redis), and per-route limits. "
) * 2


def card_work() -> Work:
    """The pricing card as a critic sees it (what the engine hands each critic)."""
    return Work(
        id=0,
        task_id=0,
        round=1,
        agent="bench",
        fencing_token=1,
        task_type="code",
        title="pricing module",
        description="review me",
        acceptance_criteria=["it works"],
        output="done; see artifacts",
        summary="pricing module",
        artifacts=[Artifact(**a) for a in CARD],
        attempts=0,
    )
