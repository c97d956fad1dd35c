"""The completeness count: whether a ledger's index lists every entry the write sets give this bookie, by counting.

It runs for every ledger of a pass; only a ledger it cannot call complete is judged entry by entry
(:func:`scanner.checks.ledger_check.judge_ledger`). The count over a striped ensemble runs in the scan's native
code when it runs (:mod:`scanner.native.switch`).
"""

from __future__ import annotations

import bisect
from array import array

from scanner.native.switch import native_code


def holds_every_entry(meta, bookie_id: str, entry_ids) -> bool:
    """True when, by counting alone, the index lists every entry the write sets give this bookie.

    Exact: the entries listed in each of the bookie's fragments are as many as its write sets give it,
    and all of them are its own (then none is missing). False means: judge entry by entry.
    """
    # The fragments as LedgerMetadata.fragments() cuts them, without building them: this runs for every ledger.
    segments, size, quorum = meta.segments, meta.ensemble_size, meta.write_quorum
    for i, (first, bookies) in enumerate(segments):
        if bookie_id not in bookies:
            continue
        last = segments[i + 1][0] - 1 if i + 1 < len(segments) else None
        if meta.is_closed:
            last = meta.last_entry_id if last is None else min(last, meta.last_entry_id)
        if last is None or last < first:
            continue  # the open end of a ledger still written, or an empty fragment
        index = bookies.index(bookie_id)
        low, high = bisect.bisect_left(entry_ids, first), bisect.bisect_right(entry_ids, last)
        if quorum == size:
            if high - low != last - first + 1:
                return False
            continue
        if high - low != _striped_count(first, last, index, size, quorum):
            return False
        # As many as owed: complete unless some listed entry is not this bookie's (then judge entry by entry).
        if owned_count(entry_ids, low, high, index, size, quorum) != high - low:
            return False
    return True


def owned_count(entry_ids, low: int, high: int, index: int, size: int, quorum: int) -> int:
    """How many of ``entry_ids[low:high]`` have the bookie at ensemble ``index`` in their write set."""
    native = native_code()
    if native is not None and isinstance(entry_ids, array) and entry_ids.typecode == "Q":
        return native.owned_count(entry_ids, low, high, index, size, quorum)
    return sum(1 for e in entry_ids[low:high] if (index - e) % size < quorum)


def _striped_count(first: int, last: int, index: int, size: int, quorum: int) -> int:
    """How many entries of [first, last] have the bookie at ensemble ``index`` in their write set."""
    whole, rest = divmod(last - first + 1, size)
    return whole * quorum + sum(1 for e in range(first, first + rest) if (index - e) % size < quorum)
