"""The lock a ReplicationWorker takes before it changes a ledger, taken the same way by the scanner.

BookKeeper's repairers agree through one ephemeral znode per ledger,
``<root>/underreplication/locks/urL<%010d id>``: a ReplicationWorker creates it before it checks and
re-replicates a marked ledger, a bookie's garbage collector before it deletes an over-replicated
one, and each leaves a ledger alone while another holds it. The scanner holds it while it moves a
damaged fragment, so the worker never works on the same ledger at the same time. Being ephemeral,
the lock goes with the session that took it: before changing metadata under it, ``still_held``
checks that it is still ours (a session that expired during a ZooKeeper outage has lost it).

A metadata write under the lock goes in one ZooKeeper ``multi`` with a check of the lock (``guard``), so
no lock lost between a check and the write can let the write through. A ``multi`` check compares a
version only, not the owner: so once created, the lock's data is written again, giving it version 1,
which a lock created anew by one of BookKeeper's repairers does not have (a ReplicationWorker and a
bookie's garbage collector write their lock once, ``ZkLedgerUnderreplicationManager.lockLedger``). Another
scanner's lock would pass the check; the compare-and-set on the ledger's own version still keeps
two scanners' writes from overwriting each other.
"""

from __future__ import annotations

from google.protobuf import text_format
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from scanner.metadata.proto.data_formats_pb2 import LockDataFormat
from scanner.repair.marks import lock_holder_name, lock_path


class LockBusy(Exception):
    """Another repairer (a ReplicationWorker, a bookie's GC, another agent) holds the ledger's lock."""


class LedgerLock:
    """The under-replication lock of one ledger; ``holder`` is what ``listunderreplicated`` shows for it."""

    def __init__(self, client, root: str, ledger_id: int, holder: str, acl=None):
        self.client = client
        self.path = lock_path(root, ledger_id)
        self.ledger_id = ledger_id
        self._data = text_format.MessageToString(LockDataFormat(bookieId=holder)).encode("utf-8")
        self._acl = acl
        self._session: int | None = None
        self._version: int | None = None

    def acquire(self) -> None:
        """Create the lock; LockBusy when it exists."""
        try:
            self.client.create(self.path, self._data, acl=self._acl, ephemeral=True, makepath=True)
        except NodeExistsError:
            raise LockBusy(f"ledger {self.ledger_id} is locked by {self._holder_text()}") from None
        self._session = self.client.client_id[0]
        try:
            self._version = self.client.set(self.path, self._data, version=0).version
        except (NoNodeError, BadVersionError):
            self._session = None  # the session was lost at once: as if never taken
            raise LockBusy(f"ledger {self.ledger_id}: its lock was lost as it was taken") from None

    def guard(self, transaction) -> None:
        """Add to ``transaction`` a check that fails unless this lock is still ours (see the module's note)."""
        if self._version is None:
            raise RuntimeError(f"the lock of ledger {self.ledger_id} is not held")
        transaction.check(self.path, self._version)

    def still_held(self) -> bool:
        """True while the lock znode exists and belongs to the session that created it."""
        if self._session is None:
            return False
        stat = self.client.exists(self.path)
        return stat is not None and stat.ephemeralOwner == self._session

    def release(self) -> None:
        """Delete the lock if it is still ours (a lost session's lock is gone already, or someone else's)."""
        if self.still_held():
            try:
                self.client.delete(self.path)
            except NoNodeError:
                pass
        self._session = None
        self._version = None

    def _holder_text(self) -> str:
        try:
            raw, _ = self.client.get(self.path)
        except NoNodeError:
            return "another repairer (released since)"
        return lock_holder_name(raw) or "another repairer"

    def __enter__(self) -> "LedgerLock":
        self.acquire()
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()
