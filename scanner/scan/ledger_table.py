"""What a pass keeps per ledger: how to verify its digest, in two arrays, not in metadata objects.

A bookie holds up to millions of ledgers; the walk needs, for each record it meets, only how to
verify that ledger's digest. A cluster uses a few (digest type, password) kinds, each kept once
with its verifier; per ledger the table holds its id and the number of its kind: 9 bytes while
there are at most 256 kinds. Ledgers are appended in any order and looked up by bisection once
the table is frozen.
"""

from __future__ import annotations

import bisect
from array import array

from scanner.native.switch import native_code
from scanner.storage.entry import DigestType, DigestVerifier
from scanner.storage.location import arrow_view, native_array


class LedgerTable:
    def __init__(self):
        self._ids = array("Q")
        self._kinds = array("B")  # per ledger: its kind's number; widened to "I" at the 257th kind
        self._kind_numbers: dict[tuple[DigestType | None, bytes], int] = {}
        self._verifiers: list[DigestVerifier | None] = []  # per kind; None: no digest type, nothing to verify
        self._frozen = True

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, ledger_id: int, digest_type: DigestType | None, password: bytes | None) -> None:
        number = self._number_of((digest_type, password or b""))  # (it may widen the kinds' column)
        self._ids.append(ledger_id)
        self._kinds.append(number)
        self._frozen = False

    def add_ledgers(self, ledger_ids: list[int], kinds: list[tuple[DigestType | None, bytes]]) -> None:
        """Several ledgers, each with its kind (digest type, password or b""), as :meth:`add` takes each in turn."""
        numbers = list(map(self._kind_numbers.get, kinds))
        if None in numbers:  # a kind new to the table
            numbers = list(map(self._number_of, kinds))
        self._ids.extend(ledger_ids)
        self._kinds.extend(numbers)
        self._frozen = False

    def _number_of(self, kind: tuple[DigestType | None, bytes]) -> int:
        number = self._kind_numbers.get(kind)
        if number is None:
            digest_type, password = kind
            number = self._kind_numbers[kind] = len(self._verifiers)
            self._verifiers.append(None if digest_type is None else DigestVerifier(digest_type, password))
            if number > 0xFF and self._kinds.typecode == "B":
                self._kinds = array("I", self._kinds)
        return number

    def lacking(self, ledger_ids: list[int]) -> set[int]:
        """Those of ``ledger_ids`` the table does not hold, found in C-speed steps: the ids are set against the
        table's slice between the least and the greatest of them (ids that come mostly ascending, as a metadata store
        lists them, take each slice about once)."""
        if not ledger_ids:
            return set()
        self.freeze()
        low, high = bisect.bisect_left(self._ids, min(ledger_ids)), bisect.bisect_right(self._ids, max(ledger_ids))
        return set(ledger_ids).difference(self._ids[low:high])

    def freeze(self) -> None:
        """Sort by ledger id (after appends out of order) so lookups can bisect.

        Sorted in the scan's native code when it runs (:mod:`scanner.native.switch`), else by pyarrow: a sort in
        Python would hold an int object per ledger (tens of MB at a million ledgers) for a moment; these hold a few
        columns of ids (natively: the ids, the kinds widened, and the sort's own columns).
        """
        if self._frozen:
            return
        if any(a > b for a, b in zip(self._ids, self._ids[1:])):
            typecode = self._kinds.typecode
            native = native_code()
            if native is not None:
                kinds = array("Q", self._kinds)
                self._kinds = array(typecode)
                native.sort_pairs(self._ids, kinds)
                self._kinds = array(typecode, kinds)
            else:
                import pyarrow.compute as pc

                order = pc.sort_indices(arrow_view(self._ids))
                ids, kinds = pc.take(arrow_view(self._ids), order), pc.take(arrow_view(self._kinds), order)
                del order
                self._ids, self._kinds = array("Q"), array(typecode)  # the unsorted columns go before the copies
                self._ids, self._kinds = native_array(ids, "Q"), native_array(kinds, typecode)
        self._frozen = True

    def columns(self) -> tuple[array, array, list[DigestVerifier | None]]:
        """(ids ascending, each one's kind number, each kind's verifier): the table as the native walker looks ledgers
        up in it (frozen first)."""
        self.freeze()
        return self._ids, self._kinds, self._verifiers

    def __contains__(self, ledger_id: int) -> bool:
        return self._find(ledger_id) is not None

    def lookup(self, ledger_id: int) -> tuple[bool, DigestVerifier | None]:
        """(whether the ledger is in the table, its digest verifier or None when it has no digest type)."""
        i = self._find(ledger_id)
        return (False, None) if i is None else (True, self._verifiers[self._kinds[i]])

    def verifier(self, ledger_id: int) -> DigestVerifier | None:
        """The ledger's digest verifier; None if the ledger is not in the table or has no digest type."""
        return self.lookup(ledger_id)[1]

    def _find(self, ledger_id: int) -> int | None:
        if not self._frozen:
            self.freeze()
        i = bisect.bisect_left(self._ids, ledger_id)
        return i if i < len(self._ids) and self._ids[i] == ledger_id else None
