"""Cards with a real bug fixed in round 2, for the lesson tests and bench/bench_lessons.py.

Each card has the creator's visible acceptance tests, a first submission with one kind of mistake and a
second with the fix; `kind` is the mistake as the lesson should name it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Card:
    module: str
    title: str
    description: str
    kind: str  # what the lesson's title should start with
    buggy: str
    fixed: str
    spec: str  # the creator's acceptance tests (pytest)


CARDS = [
    Card(
        "series",
        "Sum the integers from 1 to n",
        "sum_to(n) returns 1 + 2 + ... + n.",
        "off-by-one",
        "def sum_to(n):\n    total = 0\n    for i in range(1, n):\n        total += i\n    return total\n",
        "def sum_to(n):\n    total = 0\n    for i in range(1, n + 1):\n        total += i\n    return total\n",
        "from series import sum_to\n\n\ndef test_sums_up_to_n():\n    assert sum_to(5) == 15\n\n\n"
        "def test_one():\n    assert sum_to(1) == 1\n",
    ),
    Card(
        "listing",
        "Last item of a list",
        "last_item(xs) returns the final element of a non-empty list.",
        "off-by-one",
        "def last_item(xs):\n    return xs[len(xs)]\n",
        "def last_item(xs):\n    return xs[len(xs) - 1]\n",
        "from listing import last_item\n\n\ndef test_last_of_three():\n    assert last_item([1, 2, 3]) == 3\n",
    ),
    Card(
        "ages",
        "Adult check for sign-up",
        "is_adult(age) is true from the 18th birthday on.",
        "off-by-one",
        "def is_adult(age):\n    return age > 18\n",
        "def is_adult(age):\n    return age >= 18\n",
        "from ages import is_adult\n\n\ndef test_eighteen_is_adult():\n    assert is_adult(18) is True\n\n\n"
        "def test_child():\n    assert is_adult(12) is False\n",
    ),
    Card(
        "paging",
        "First n results of a search",
        "first_n(results, n) keeps the first n results.",
        "off-by-one",
        "def first_n(results, n):\n    return results[:n - 1]\n",
        "def first_n(results, n):\n    return results[:n]\n",
        "from paging import first_n\n\n\ndef test_keeps_n_results():\n    assert first_n(['a', 'b', 'c', 'd'], 2) == "
        "['a', 'b']\n",
    ),
    Card(
        "temperature",
        "Convert Celsius to Fahrenheit",
        "to_fahrenheit(c) for the weather widget.",
        "wrong operator",
        "def to_fahrenheit(c):\n    return c * 9 / 5 - 32\n",
        "def to_fahrenheit(c):\n    return c * 9 / 5 + 32\n",
        "from temperature import to_fahrenheit\n\n\ndef test_boiling_point():\n    assert to_fahrenheit(100) == 212"
        "\n\n\ndef test_freezing_point():\n    assert to_fahrenheit(0) == 32\n",
    ),
    Card(
        "pricing",
        "Price after a discount",
        "net_price(price, discount) applies a fractional discount.",
        "wrong operator",
        "def net_price(price, discount):\n    return price + price * discount\n",
        "def net_price(price, discount):\n    return price - price * discount\n",
        "from pricing import net_price\n\n\ndef test_twenty_percent_off():\n    assert net_price(100, 0.2) == 80\n",
    ),
    Card(
        "speed",
        "Average speed of a trip",
        "average_speed(km, hours) in km/h.",
        "wrong operator",
        "def average_speed(km, hours):\n    return km * hours\n",
        "def average_speed(km, hours):\n    return km / hours\n",
        "from speed import average_speed\n\n\ndef test_speed_in_km_per_hour():\n    assert average_speed(120, 2) == 60\n",
    ),
    Card(
        "voting",
        "Who may vote",
        "can_vote(age, registered) needs both an adult age and a registration.",
        "wrong operator",
        "def can_vote(age, registered):\n    return age >= 18 or registered\n",
        "def can_vote(age, registered):\n    return age >= 18 and registered\n",
        "from voting import can_vote\n\n\ndef test_unregistered_adult_cannot_vote():\n    assert can_vote(30, False) is "
        "False\n\n\ndef test_registered_adult_votes():\n    assert can_vote(30, True) is True\n",
    ),
    Card(
        "stats",
        "Mean of a list of scores",
        "mean(scores) is the average; an empty list has mean 0.",
        "missing empty-input check",
        "def mean(scores):\n    return sum(scores) / len(scores)\n",
        "def mean(scores):\n    if not scores:\n        return 0.0\n    return sum(scores) / len(scores)\n",
        "from stats import mean\n\n\ndef test_mean_of_three():\n    assert mean([1, 2, 3]) == 2\n\n\n"
        "def test_empty_scores():\n    assert mean([]) == 0.0\n",
    ),
    Card(
        "words",
        "Length of the longest word",
        "longest_word(text) is the length of the longest word, 0 for blank text.",
        "missing empty-input check",
        "def longest_word(text):\n    words = text.split()\n    return max(len(w) for w in words)\n",
        "def longest_word(text):\n    words = text.split()\n    if not words:\n        return 0\n"
        "    return max(len(w) for w in words)\n",
        "from words import longest_word\n\n\ndef test_longest():\n    assert longest_word('a bb ccc') == 3\n\n\n"
        "def test_blank_text():\n    assert longest_word('   ') == 0\n",
    ),
    Card(
        "titles",
        "Capitalise a headline",
        "capitalise(s) upper-cases the first letter; '' stays ''.",
        "missing empty-input check",
        "def capitalise(s):\n    return s[0].upper() + s[1:]\n",
        "def capitalise(s):\n    if not s:\n        return s\n    return s[0].upper() + s[1:]\n",
        "from titles import capitalise\n\n\ndef test_capitalises():\n    assert capitalise('hello') == 'Hello'\n\n\n"
        "def test_empty_headline():\n    assert capitalise('') == ''\n",
    ),
    Card(
        "users",
        "Display name of a user",
        "display_name(user) shows the user's name, or 'guest' without a user.",
        "missing None check",
        "def display_name(user):\n    return user['name'].title()\n",
        "def display_name(user):\n    if user is None:\n        return 'guest'\n    return user['name'].title()\n",
        "from users import display_name\n\n\ndef test_named_user():\n    assert display_name({'name': 'ada'}) == 'Ada'"
        "\n\n\ndef test_no_user_is_guest():\n    assert display_name(None) == 'guest'\n",
    ),
    Card(
        "minimum",
        "Smaller of two numbers",
        "smaller(a, b) returns the smaller argument.",
        "wrong comparison",
        "def smaller(a, b):\n    return a if a > b else b\n",
        "def smaller(a, b):\n    return a if a < b else b\n",
        "from minimum import smaller\n\n\ndef test_smaller_first():\n    assert smaller(2, 9) == 2\n",
    ),
    Card(
        "ordering",
        "Check a list is sorted",
        "is_sorted(xs) is true when xs is in ascending order.",
        "wrong comparison",
        "def is_sorted(xs):\n    return all(xs[i] >= xs[i + 1] for i in range(len(xs) - 1))\n",
        "def is_sorted(xs):\n    return all(xs[i] <= xs[i + 1] for i in range(len(xs) - 1))\n",
        "from ordering import is_sorted\n\n\ndef test_ascending_is_sorted():\n    assert is_sorted([1, 2, 3]) is True\n",
    ),
    Card(
        "geometry",
        "Area of a rectangle",
        "area(width, height) of a rectangle.",
        "wrong variable",
        "def area(width, height):\n    return width * width\n",
        "def area(width, height):\n    return width * height\n",
        "from geometry import area\n\n\ndef test_area_of_two_by_three():\n    assert area(2, 3) == 6\n",
    ),
    Card(
        "people",
        "Full name from parts",
        "full_name(first, last) joins the parts with a space.",
        "wrong variable",
        "def full_name(first, last):\n    return f'{first} {first}'\n",
        "def full_name(first, last):\n    return f'{first} {last}'\n",
        "from people import full_name\n\n\ndef test_joins_first_and_last():\n    assert full_name('Ada', 'Lovelace') == "
        "'Ada Lovelace'\n",
    ),
    Card(
        "doubling",
        "Double every number",
        "double_all(xs) returns a new list with each number doubled.",
        "missing return",
        "def double_all(xs):\n    result = [2 * x for x in xs]\n",
        "def double_all(xs):\n    result = [2 * x for x in xs]\n    return result\n",
        "from doubling import double_all\n\n\ndef test_doubles():\n    assert double_all([1, 2]) == [2, 4]\n",
    ),
    Card(
        "ports",
        "Parse a TCP port",
        "parse_port(text) returns the port number; out of range raises ValueError.",
        "wrong exception type",
        "def parse_port(text):\n    port = int(text)\n    if not 0 < port < 65536:\n        raise TypeError(port)\n"
        "    return port\n",
        "def parse_port(text):\n    port = int(text)\n    if not 0 < port < 65536:\n        raise ValueError(port)\n"
        "    return port\n",
        "import pytest\n\nfrom ports import parse_port\n\n\ndef test_valid_port():\n    assert parse_port('8080') == "
        "8080\n\n\ndef test_port_out_of_range():\n    with pytest.raises(ValueError):\n        parse_port('70000')\n",
    ),
    Card(
        "products",
        "Product of a list",
        "product(xs) multiplies the numbers; the empty product is 1.",
        "wrong initial value",
        "def product(xs):\n    p = 0\n    for x in xs:\n        p *= x\n    return p\n",
        "def product(xs):\n    p = 1\n    for x in xs:\n        p *= x\n    return p\n",
        "from products import product\n\n\ndef test_product():\n    assert product([2, 3, 4]) == 24\n",
    ),
    Card(
        "signs",
        "Sign of a number",
        "sign(x) is 1, -1, or 0 for zero.",
        "missing edge case",
        "def sign(x):\n    return 1 if x > 0 else -1\n",
        "def sign(x):\n    if x == 0:\n        return 0\n    return 1 if x > 0 else -1\n",
        "from signs import sign\n\n\ndef test_positive():\n    assert sign(5) == 1\n\n\ndef test_zero_has_no_sign():\n"
        "    assert sign(0) == 0\n",
    ),
]

# Cards claimed after the loop: cards like one whose lesson they should get first (by the kind of mistake), and
# work unrelated to any lesson (code and other), which should get none.
RELATED = [
    ("Sum the even numbers from 1 to n", "sum_evens(n) returns 2 + 4 + ... up to and including n.", "off-by-one"),
    (
        "Median of a list of scores",
        "median(scores) of the scores; an empty list has median 0.",
        "missing empty-input check",
    ),
    ("Convert Fahrenheit to Celsius", "to_celsius(f) for the weather widget.", "wrong operator"),
    ("Larger of two numbers", "larger(a, b) returns the larger argument.", "wrong comparison"),
    ("Area of a triangle", "triangle_area(base, height) is half the base times the height.", "wrong variable"),
    (
        "Greeting for a user",
        "greeting(user) says hello to the user by name, or to 'guest' without a user.",
        "missing None check",
    ),
    (
        "Shipping cost for members",
        "shipping_cost(cost, member) takes a 10% member discount off the cost.",
        "wrong operator",
    ),
    (
        "Initials of a name",
        "initials(name) is the first letter of each word; an empty name gives ''.",
        "missing empty-input check",
    ),
    ("Convert Kelvin to Celsius", "kelvin_to_celsius(k) for the lab dashboard.", "wrong operator"),
    (
        "Check a list is in descending order",
        "is_descending(xs) is true when each item is at least the next.",
        "wrong comparison",
    ),
    (
        "Parse a port range",
        "parse_range('8000-8080') returns the two ports; a port out of range raises ValueError.",
        "wrong exception type",
    ),
    (
        "Sum of the first n odd numbers",
        "sum_odds(n) returns 1 + 3 + 5 + ... for the first n odd numbers.",
        "off-by-one",
    ),
]
UNRELATED = [
    ("Write the release notes for 2.1", "List the user-visible changes since 2.0 in CHANGELOG.md."),
    ("Add a dark mode toggle to the settings page", "A switch in the settings page that swaps the CSS theme."),
    ("Set up nightly database backups", "A cron job that dumps Postgres to object storage every night."),
    ("Translate the onboarding emails into German", "The three welcome emails, in German, same tone."),
    ("Rate limiter for the public API", "A token bucket per API key, refilled every second."),
    ("Parse timestamps in the log reader", "parse_timestamp(line) returns a log line's ISO 8601 time."),
    ("Retry failed HTTP requests", "Retry idempotent requests with exponential backoff and jitter."),
    ("Thumbnails for uploaded images", "Resize each uploaded image to a 200 px wide JPEG thumbnail."),
    ("Export orders to CSV", "Write the orders table to a CSV file with a header row."),
    ("Websocket heartbeat", "Send a ping every 30 s and close connections idle for two minutes."),
    ("Validate email addresses at sign-up", "Reject addresses without an @ or without a domain."),
    ("Cache HTTP responses", "Keep GET responses for five minutes in an LRU cache."),
]
