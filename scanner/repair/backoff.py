"""When a move that did not happen is tried again, and when it is the operator's turn."""

from __future__ import annotations

from scanner.repair.move_outcome import Outcome

FIRST_RETRY_SECONDS = 30.0  # a move that failed, or could not be made, is tried again after this ([repair] retry_seconds)
RETRY_LIMIT_SECONDS = 600.0  # ... doubling each time, up to this
BUSY_SECONDS = 10.0  # another repairer holds the ledger's lock: ask again after this (or retry_seconds, if shorter)
ESCALATE_AFTER_FAILURES = 3  # moves failed or without a bookie to go to (a bookie down or restarting,
# ZooKeeper trouble) before the operator is told: the third try comes 3 x FIRST_RETRY_SECONDS (90 s) after the first


def retry_seconds(failures: int, first: float = FIRST_RETRY_SECONDS) -> float:
    """How long after the ``failures``-th failed move in a row the next is tried: ``first``, then doubling, up to a
    limit."""
    return min(RETRY_LIMIT_SECONDS, first * 2 ** (failures - 1))


def escalate_now(outcome: Outcome, failures: int) -> bool:
    """Whether a move that did not happen, the ``failures``-th in a row, is for the operator now.

    No verified copy anywhere, or a move this scanner refuses to make, will not come by waiting: at once. No bookie to move to, or a move that
    failed, is what a bookie restarting or a ZooKeeper election looks like for a while: only when it
    lasts (``ESCALATE_AFTER_FAILURES`` in a row), so a bookie's restart pages no one.
    """
    return outcome in (Outcome.NO_GOOD_COPY, Outcome.REFUSED) or failures >= ESCALATE_AFTER_FAILURES
