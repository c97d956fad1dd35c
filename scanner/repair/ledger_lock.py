"""The lock a ReplicationWorker takes before it changes a ledger, taken the same way by the scanner.

BookKeeper's repairers agree through one ephemeral znode per ledger,
``<root>/underreplication/locks/urL<%010d id>``: a ReplicationWorker creates it before it checks and
re-replicates a marked ledger, a bookie's garbage collector before it deletes an over-replicated
one, and each leaves a ledger alone while another holds it. The scanner holds it while it moves a
damaged fragment, so the worker never works on the same ledger at the same time. Being ephemeral,
the lock goes with the session that took it: before changing metadata under it, ``still_held``
checks that it is still ours (a session that expired during a ZooKeeper outage has lost it).
"""

from __future__ import annotations

from google.protobuf import text_format
from kazoo.exceptions import NodeExistsError, NoNodeError

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

    def acquire(self) -> None:
        """Create the lock; LockBusy when it exists."""
        try:
            self.client.create(self.path, self._data, acl=self._acl, ephemeral=True, makepath=True)
        except NodeExistsError:
            raise LockBusy(f"ledger {self.ledger_id} is locked by {self._holder_text()}") from None
        self._session = self.client.client_id[0]

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
