"""What a pass keeps per ledger: its digest type and key, in arrays, not in metadata objects.

A bookie holds up to millions of ledgers; the walk needs, for each record it meets, only how to
verify that ledger's digest. Ledgers are appended in any order and looked up by bisection once
the table is frozen; the few passwords a cluster uses are kept once each.
"""

from __future__ import annotations

import bisect
from array import array

from scanner.storage.entry import DigestType, DigestVerifier

_NO_DIGEST = 0  # metadata without a digest type: records cannot be verified


class LedgerTable:
    def __init__(self):
        self._ids = array("Q")
        self._digests = array("B")
        self._keys = array("I")
        self._passwords: dict[bytes, int] = {}
        self._frozen = True
        self._verifiers: dict[tuple[int, int], DigestVerifier] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, ledger_id: int, digest_type: DigestType | None, password: bytes | None) -> None:
        self._ids.append(ledger_id)
        self._digests.append(_NO_DIGEST if digest_type is None else int(digest_type))
        self._keys.append(self._passwords.setdefault(password or b"", len(self._passwords)))
        self._frozen = False

    def freeze(self) -> None:
        """Sort by ledger id (after appends out of order) so lookups can bisect."""
        if self._frozen:
            return
        if any(a > b for a, b in zip(self._ids, self._ids[1:])):
            order = sorted(range(len(self._ids)), key=self._ids.__getitem__)
            self._ids = array("Q", (self._ids[i] for i in order))
            self._digests = array("B", (self._digests[i] for i in order))
            self._keys = array("I", (self._keys[i] for i in order))
        self._frozen = True

    def __contains__(self, ledger_id: int) -> bool:
        return self._find(ledger_id) is not None

    def lookup(self, ledger_id: int) -> tuple[bool, DigestVerifier | None]:
        """(whether the ledger is in the table, its digest verifier or None when it has no digest type)."""
        i = self._find(ledger_id)
        return (False, None) if i is None else (True, self._verifier_at(i))

    def verifier(self, ledger_id: int) -> DigestVerifier | None:
        """The ledger's digest verifier; None if the ledger is not in the table or has no digest type."""
        return self.lookup(ledger_id)[1]

    def _verifier_at(self, i: int) -> DigestVerifier | None:
        if self._digests[i] == _NO_DIGEST:
            return None
        key = (self._digests[i], self._keys[i])
        verifier = self._verifiers.get(key)
        if verifier is None:
            password = next(p for p, k in self._passwords.items() if k == key[1])
            verifier = self._verifiers[key] = DigestVerifier(DigestType(key[0]), password)
        return verifier

    def _find(self, ledger_id: int) -> int | None:
        if not self._frozen:
            self.freeze()
        i = bisect.bisect_left(self._ids, ledger_id)
        return i if i < len(self._ids) and self._ids[i] == ledger_id else None
