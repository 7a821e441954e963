"""Errors raised by the board. Each message says what was wrong and what to do instead.

    BoardError
    ├── NotFound            unknown task or agent id
    ├── InvalidInput        a value the board cannot accept (too long, bad reference, cycle)
    ├── Conflict            the card is not in a state that allows this
    │   ├── IllegalTransition   e.g. completing a card that is still todo
    │   ├── NotYourClaim        the card is claimed by another agent
    │   └── StaleToken          the fencing token is from an older claim (or the lease expired)
    ├── Forbidden           the caller may not do this (identity)
    ├── OverQuota           the caller wrote its share for now, or the database is at its size limit
    ├── Unavailable         the database server cannot be reached right now (PostgreSQL); retry
    └── MissingExtra        an optional part's package is not installed (board/optional.py names the extra)

The server turns every BoardError into an MCP tool error with the same text; nothing is written
when one is raised.
"""


class BoardError(Exception):
    """Base class: the message is meant to be read by the agent that caused it."""


class NotFound(BoardError):
    pass


class InvalidInput(BoardError):
    pass


class Conflict(BoardError):
    pass


class IllegalTransition(Conflict):
    pass


class NotYourClaim(Conflict):
    pass


class StaleToken(Conflict):
    pass


class Forbidden(BoardError):
    pass


class OverQuota(BoardError):
    pass


class Unavailable(BoardError):
    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.reason = reason  # the driver's own words, for a caller that words the sentence itself


class MissingExtra(BoardError):
    pass


def first_line(exc: BaseException) -> str:
    """An error's message as one line (its first), or its type's name when it has none."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class WouldWait(Exception):
    """A write of a call that must not wait (`db.not_waiting`) found the write lock held: nothing was written.
    Not a BoardError: the server runs the call again where it may wait; no agent ever reads it."""
