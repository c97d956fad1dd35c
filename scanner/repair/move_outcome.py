"""What one try at moving a ledger's damaged fragments off this bookie came to."""

from __future__ import annotations

import enum


class Outcome(str, enum.Enum):
    MOVED = "moved"  # every damaged fragment now lists another bookie; its copies there verified
    WOULD_MOVE = "would_move"  # dry run: a verified copy of every damaged entry and a new bookie are there
    NOT_NEEDED = "not_needed"  # deleted ledger, or this bookie no longer holds the damaged entries
    BUSY = "busy"  # another repairer holds the ledger's lock
    DEFERRED = "deferred"  # damage in the last fragment of a ledger not closed yet
    NO_TARGET = "no_target"  # no writable bookie outside the ensemble
    NO_GOOD_COPY = "no_good_copy"  # no verifying copy of a damaged entry anywhere (write path, divergent)
    REFUSED = "refused"  # this scanner cannot move it: TLS or authentication in the way, metadata it does not rewrite
    FAILED = "failed"  # a bookie did not answer or refused, the lock was lost, ZooKeeper trouble: try again

    @property
    def final(self) -> bool:
        """The damage is out of the way (or there was none to move)."""
        return self in (Outcome.MOVED, Outcome.NOT_NEEDED)
