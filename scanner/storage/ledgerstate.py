"""What a bookie's index keeps about a ledger besides entry locations, for every storage type."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LedgerState:
    """Master key, fence bit and explicit-LAC buffer as last flushed to the index (they can lag the journal).

    ``limbo`` exists only in DbLedgerStorage (4.15+): the ledger's state is unknown after an unclean shutdown.
    """

    master_key: bytes
    fenced: bool
    explicit_lac: bytes | None
    limbo: bool = False
