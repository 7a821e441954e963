"""What a card may hold: the size limits and the checks that enforce them, in one sentence each.

The MCP edge bounds every argument's type and shape; these are the board's own limits (lengths, counts),
which also hold for callers that are not tools (the web board, the CLI).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import InvalidInput
from .models import AcceptanceTests

TASK_TYPE_RE = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
RULE_RE = re.compile(r"^[A-Z]{1,8}[0-9]{0,6}$")  # an analyser's rule id: B324, S608, E501, PLE1142
MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class Limits:
    """Size limits; a value over a limit is refused with the limit in the message."""

    description: int = 20_000
    output: int = 200_000
    summary: int = 2_000
    note: int = 4_000
    labels: int = 20
    label_chars: int = 50
    criteria: int = 30
    criterion_chars: int = 500
    test_files: int = 50
    test_chars: int = 200_000
    depends_on: int = 50
    artifacts: int = 20
    artifact_chars: int = 200_000
    history: int = 100
    message_chars: int = 64_000
    message_summary: int = 500
    metadata_chars: int = 8_000


def check_text(value: str | None, limit: int, what: str) -> None:
    if value is not None and len(value) > limit:
        raise InvalidInput(
            f"{what} is {len(value)} characters; the limit is {limit}. Shorten it, or put long material in an artifact"
        )


def check_labels(labels: list[str], limits: Limits) -> list[str]:
    clean = list(dict.fromkeys(label.strip() for label in labels))
    if len(clean) > limits.labels:
        raise InvalidInput(f"{len(clean)} labels given; at most {limits.labels} are allowed")
    for label in clean:
        if not 0 < len(label) <= limits.label_chars:
            raise InvalidInput(f"label {label!r} must be 1-{limits.label_chars} characters")
    return clean


def check_criteria(criteria: list[str], limits: Limits) -> None:
    if len(criteria) > limits.criteria:
        raise InvalidInput(f"{len(criteria)} acceptance criteria given; at most {limits.criteria}")
    for c in criteria:
        check_text(c, limits.criterion_chars, "an acceptance criterion")


def check_tests(tests: AcceptanceTests | None, limits: Limits) -> str | None:
    """The creator's acceptance tests as stored (JSON), once they are within the limits."""
    if tests is None or not (tests.files or tests.commands):
        return None
    if len(tests.files) > limits.test_files or len(tests.commands) > limits.criteria:
        raise InvalidInput(
            f"acceptance_tests has {len(tests.files)} files and {len(tests.commands)} commands; "
            f"at most {limits.test_files} files and {limits.criteria} commands"
        )
    if sum(len(f.content) for f in tests.files) > limits.test_chars:
        raise InvalidInput(
            f"acceptance_tests files hold more than {limits.test_chars} characters in all; "
            "send fewer or smaller test files"
        )
    for c in tests.commands:
        check_text(c, limits.criterion_chars, "an acceptance test command")
    return tests.model_dump_json()
