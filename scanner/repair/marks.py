"""Under-replication marks in ZooKeeper, written exactly as BookKeeper's Auditor writes them.

A mark is the persistent znode ``<root>/underreplication/ledgers/<h1>/<h2>/<h3>/<h4>/urL<%010d id>``
holding ``UnderreplicatedLedgerFormat`` in protobuf text: the bookies whose copies are bad, then the
mark time in ms. Marking creates it (and its parents); if it exists this bookie is merged into its
replica list with a versioned set.

A mark is a request, and not only ours: the Auditor's marks name lost bookies, its placement marks name
none, and a worker removes a mark only after its check found every fragment of the ledger whole. So
once this bookie's damaged copies are out of the ledger's ensembles, ``release`` takes back only what
this bookie asked: it takes the bookie off the replica list, deletes the mark only when it was created
by us (its znode's creation zxid is the one our create returned) and names nothing else, and leaves the
mark untouched while the bookie is gone from the cluster yet still in the ledger's ensembles (the
Auditor's request for the rest of a lost bookie's fragments).
Locks (``underreplication/locks/*``) are read here for listing; ``ledger_lock`` takes them.
"""

from __future__ import annotations

import enum
import re
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from google.protobuf import text_format
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.security import OPEN_ACL_UNSAFE

from scanner.metadata.proto.data_formats_pb2 import LockDataFormat, UnderreplicatedLedgerFormat

UNDERREPLICATION_NODE = "underreplication"
_MARK_LEAF = re.compile(r"urL(\d+)$")
# Enough for every real conflict (each retry means another writer made progress), finite for a bug.
MAX_ATTEMPTS = 64


class MarkError(Exception):
    """A ledger that could not be marked."""


class DamagedMark(MarkError, ValueError):
    """A mark znode whose data is not ``UnderreplicatedLedgerFormat`` text: left as it is."""


class MarkingFailed(MarkError):
    """ZooKeeper refused a mark for a reason other than a lost race."""


class MarkOutcome(str, enum.Enum):
    CREATED = "created"  # no mark existed: ours is new
    MERGED = "merged"  # a mark existed without this bookie: added to its replicas
    UNCHANGED = "unchanged"  # the mark already names this bookie


@dataclass(frozen=True, slots=True)
class MarkData:
    replicas: tuple[str, ...]
    ctime: int | None  # ms since the epoch; None when the writer did not store one


@dataclass(frozen=True, slots=True)
class Mark:
    """One under-replicated ledger as a listing shows it."""

    ledger_id: int
    replicas: tuple[str, ...]
    ctime: int | None
    age_ms: int | None
    lock_holder: str | None  # the ReplicationWorker's host while one works on the ledger
    problem: str | None = None  # why the mark's data could not be read

    def to_json(self) -> dict:
        return {"ledger_id": self.ledger_id, "replicas": list(self.replicas), "ctime": self.ctime,
                "age_ms": self.age_ms, "lock_holder": self.lock_holder, "problem": self.problem}


def underreplication_path(root: str) -> str:
    return f"{root.rstrip('/')}/{UNDERREPLICATION_NODE}"


def mark_path(root: str, ledger_id: int) -> str:
    """The mark znode of ``ledger_id`` under the ledgers root ``root`` (16-bit hex levels, high first)."""
    if not 0 <= ledger_id < 2**63:
        raise ValueError(f"ledger id {ledger_id} outside 0..2^63-1")
    levels = "/".join(f"{(ledger_id >> shift) & 0xFFFF:04x}" for shift in (48, 32, 16, 0))
    return f"{underreplication_path(root)}/ledgers/{levels}/urL{ledger_id:010d}"


def lock_path(root: str, ledger_id: int) -> str:
    return f"{underreplication_path(root)}/locks/urL{ledger_id:010d}"


def lock_holder_name(raw: bytes) -> str:
    """Who holds a lock, from its znode's ``LockDataFormat`` text (what is there when it is not that)."""
    text = bytes(raw).decode("utf-8", errors="replace")
    msg = LockDataFormat()
    try:
        text_format.Parse(text, msg)
    except text_format.ParseError:
        return text
    return msg.bookieId


def encode_mark(data: MarkData) -> bytes:
    """The znode bytes: protobuf text, fields in number order, one per line (what Java's toString gives)."""
    msg = UnderreplicatedLedgerFormat(replica=data.replicas)
    if data.ctime is not None:
        msg.ctime = data.ctime
    return text_format.MessageToString(msg).encode("utf-8")


def decode_mark(raw: bytes, where: str) -> MarkData:
    """Parse a mark's bytes; DamagedMark names ``where`` and what is wrong."""
    msg = UnderreplicatedLedgerFormat()
    try:
        text_format.Parse(bytes(raw).decode("utf-8"), msg)
    except UnicodeDecodeError as exc:
        raise DamagedMark(f"{where}: mark data is not UTF-8 at offset {exc.start}") from None
    except text_format.ParseError as exc:
        raise DamagedMark(f"{where}: mark data is not UnderreplicatedLedgerFormat text: {exc}") from None
    return MarkData(tuple(msg.replica), msg.ctime if msg.HasField("ctime") else None)


def merged(existing: MarkData, missing: Sequence[str], now_ms: int | None) -> MarkData | None:
    """``existing`` with the ``missing`` bookies it lacks appended in order, or None if it names them all.

    The ctime is renewed (to ``now_ms``, None keeps it) only when something was added.
    """
    replicas = list(existing.replicas)
    for bookie in missing:
        if bookie not in replicas:
            replicas.append(bookie)
    if len(replicas) == len(existing.replicas):
        return None
    return MarkData(tuple(replicas), existing.ctime if now_ms is None else now_ms)


class UnderreplicationMarks:
    """Marks under one ledgers root, through a connected KazooClient.

    ``store_ctime`` mirrors BookKeeper's ``storeSystemTimeAsLedgerUnderreplicatedMarkTime`` (default on);
    ``acl`` is what ``zkEnableSecurity=false`` gives (open), pass CREATOR_ALL_ACL for a secured cluster.
    """

    def __init__(self, client, root: str, *, store_ctime: bool = True, acl=OPEN_ACL_UNSAFE,
                 clock: Callable[[], float] = time.time):
        self.client = client
        self.root = "/" + root.strip("/")
        self.store_ctime = store_ctime
        self.acl = acl
        self.clock = clock

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def replication_enabled(self) -> bool:
        """False while ``underreplication/disable`` exists (an operator paused auto-recovery)."""
        return self.client.exists(f"{underreplication_path(self.root)}/disable") is None

    def mark(self, ledger_id: int, missing: Sequence[str], created_zxids: dict[int, int] | None = None) -> MarkOutcome:
        """Mark one ledger; see ``mark_many``. Raises its MarkError."""
        outcome = self.mark_many([ledger_id], missing, created_zxids)[ledger_id]
        if isinstance(outcome, MarkError):
            raise outcome
        return outcome

    def mark_many(self, ledger_ids: Iterable[int], missing: Sequence[str],
                  created_zxids: dict[int, int] | None = None) -> dict[int, MarkOutcome | MarkError]:
        """Mark every ledger as missing the ``missing`` bookies, requests pipelined round by round.

        Each ledger follows the Auditor's steps: create with persistent parents; on NodeExists read,
        merge, and set with the version read; BadVersion reads again, NoNode creates again. A ledger
        that fails gets its MarkError (a DamagedMark is never overwritten); the others go on.
        ``created_zxids`` receives the creation zxid of each mark this call created (what ``release`` needs).
        """
        missing = tuple(missing)
        creating = list(dict.fromkeys(ledger_ids))
        reading: list[int] = []
        outcomes: dict[int, MarkOutcome | MarkError] = {}
        for _ in range(MAX_ATTEMPTS):
            if not creating and not reading:
                break
            exists = self._create_round(creating, missing, outcomes, created_zxids)
            creating, reading = self._merge_round(reading + exists, missing, outcomes)
        for ledger_id in creating + reading:
            outcomes[ledger_id] = MarkingFailed(
                f"{mark_path(self.root, ledger_id)}: still contended after {MAX_ATTEMPTS} attempts")
        return outcomes

    def _create_round(self, ledger_ids: list[int], missing: tuple[str, ...], outcomes: dict,
                      created_zxids: dict[int, int] | None) -> list[int]:
        data = encode_mark(MarkData(missing, self._now_ms() if self.store_ctime else None))
        pending = [(ledger_id, self.client.create_async(mark_path(self.root, ledger_id), data, acl=self.acl,
                                                        makepath=True, include_data=True))
                   for ledger_id in ledger_ids]
        exists = []
        for ledger_id, result in pending:
            try:
                _, stat = result.get()
                outcomes[ledger_id] = MarkOutcome.CREATED
                if created_zxids is not None:
                    created_zxids[ledger_id] = stat.czxid
            except NodeExistsError:
                exists.append(ledger_id)
            except Exception as exc:  # kazoo raises a class per ZooKeeper error code
                outcomes[ledger_id] = MarkingFailed(f"{mark_path(self.root, ledger_id)}: create failed: {exc!r}")
        return exists

    def _merge_round(self, ledger_ids: list[int], missing: tuple[str, ...], outcomes: dict):
        recreate, reread = [], []
        reads = [(ledger_id, self.client.get_async(mark_path(self.root, ledger_id))) for ledger_id in ledger_ids]
        writes = []
        for ledger_id, result in reads:
            path = mark_path(self.root, ledger_id)
            try:
                raw, stat = result.get()
            except NoNodeError:
                recreate.append(ledger_id)  # a worker removed it between our create and read
                continue
            except Exception as exc:
                outcomes[ledger_id] = MarkingFailed(f"{path}: read failed: {exc!r}")
                continue
            try:
                update = merged(decode_mark(raw, path), missing, self._now_ms() if self.store_ctime else None)
            except DamagedMark as exc:
                outcomes[ledger_id] = exc
                continue
            if update is None:
                outcomes[ledger_id] = MarkOutcome.UNCHANGED
            else:
                writes.append((ledger_id, self.client.set_async(path, encode_mark(update), stat.version)))
        for ledger_id, result in writes:
            try:
                result.get()
                outcomes[ledger_id] = MarkOutcome.MERGED
            except BadVersionError:
                reread.append(ledger_id)
            except NoNodeError:
                recreate.append(ledger_id)
            except Exception as exc:
                outcomes[ledger_id] = MarkingFailed(f"{mark_path(self.root, ledger_id)}: update failed: {exc!r}")
        return recreate, reread

    def get(self, ledger_id: int) -> MarkData | None:
        """The ledger's mark, or None when it is not marked."""
        path = mark_path(self.root, ledger_id)
        try:
            raw, _ = self.client.get(path)
        except NoNodeError:
            return None
        return decode_mark(raw, path)

    def release(self, ledger_id: int, bookie_id: str, *, created_zxid: int | None, bookie_lost: bool) -> bool:
        """Take back this bookie's request on the ledger's mark once its copies need no re-replication.

        ``created_zxid``: the creation zxid of the mark when we created it (else None); ``bookie_lost``:
        the bookie is not registered yet still in the ledger's ensembles, so the mark's request for its
        other fragments stands and nothing is changed. Otherwise the bookie is taken off the replica list;
        a mark we created that names no one else is deleted with the version read (a mark renewed
        meanwhile stays), then its empty hex levels; anyone else's mark stays, with what else it names
        (nothing, for a placement mark: a worker still checks the whole ledger before removing it).
        Returns True when the mark no longer asks anything of this bookie (or is gone). Call it
        holding the ledger's lock (``LedgerLock``).
        """
        path = mark_path(self.root, ledger_id)
        if bookie_lost:
            return False
        for _ in range(MAX_ATTEMPTS):
            try:
                raw, stat = self.client.get(path)
            except NoNodeError:
                return True
            data = decode_mark(raw, path)
            if bookie_id not in data.replicas:
                return True
            rest = tuple(r for r in data.replicas if r != bookie_id)
            try:
                if rest or stat.czxid != created_zxid:
                    self.client.set(path, encode_mark(MarkData(rest, data.ctime)), stat.version)
                else:
                    self.client.delete(path, stat.version)
                    self._remove_empty_levels(path)
                return True
            except BadVersionError:
                continue  # marked again meanwhile: read what it says now
            except NoNodeError:
                return True
        raise MarkingFailed(f"{path}: still contended after {MAX_ATTEMPTS} attempts")

    def _remove_empty_levels(self, path: str) -> None:
        for _ in range(4):
            path = path.rsplit("/", 1)[0]
            try:
                self.client.delete(path)
            except (NotEmptyError, NoNodeError):
                return  # another ledger's mark shares this level, or it is gone already

    def lock_holder(self, ledger_id: int) -> str | None:
        """The host of the ReplicationWorker holding the ledger's lock ("" if it wrote none), or None."""
        try:
            raw, _ = self.client.get(lock_path(self.root, ledger_id))
        except NoNodeError:
            return None
        return lock_holder_name(raw)

    def marked_ledgers(self) -> list[int]:
        """Every marked ledger id, ascending (walks the hex levels like the workers do)."""
        found: list[int] = []
        queue = [f"{underreplication_path(self.root)}/ledgers"]
        while queue:
            parent = queue.pop()
            try:
                children = self.client.get_children(parent)
            except NoNodeError:
                continue  # a worker cleaned this level up while we walked
            for child in children:
                leaf = _MARK_LEAF.match(child)
                if child.startswith("urL"):
                    if leaf:
                        found.append(int(leaf.group(1)))
                else:
                    queue.append(f"{parent}/{child}")
        return sorted(found)

    def list_marks(self) -> list[Mark]:
        """Every mark with its replicas, ctime, age and lock holder; an unreadable one says why."""
        now = self._now_ms()
        marks = []
        for ledger_id in self.marked_ledgers():
            try:
                data = self.get(ledger_id)
            except DamagedMark as exc:
                marks.append(Mark(ledger_id, (), None, None, self.lock_holder(ledger_id), str(exc)))
                continue
            if data is None:
                continue  # removed since we listed it
            age = None if data.ctime is None else max(0, now - data.ctime)
            marks.append(Mark(ledger_id, data.replicas, data.ctime, age, self.lock_holder(ledger_id)))
        return marks
