"""Moving a damaged copy out of a ledger's ensemble: BookKeeper's own repair, for damage only a digest sees.

A copy added next to a bad one does not last: the bookie keeps the bad record in its entry log, its
read-ahead (DbLedgerStorage) serves it to a reader coming from the entry before, and compaction
copies it and points the index back at it. A repair lasts only when no client is sent to the bad
copy any more, which is what BookKeeper's LedgerFragmentReplicator (and ``bookkeeper shell recover``)
do: copy the fragment to a bookie outside its ensemble, then put that bookie in place of the old
one in the ledger's metadata. A ReplicationWorker does it only for fragments it cannot read; a
readable corrupt copy passes its check. So the scanner does it itself, the same way:

1. take the ledger's under-replication lock (``ledger_lock``): a worker or a bookie's GC holding it
   means "later"; holding it keeps them off the ledger meanwhile;
2. read the ledger's metadata fresh; plan the fragments that place damaged entries on this bookie
   (deleted ledger, or a bookie no longer in them: nothing to do); a ledger's open last fragment
   waits until the ledger is closed;
3. make sure the ledger's mark names this bookie (so a crash leaves it marked for a worker);
4. per fragment, pick a writable bookie outside its ensemble as the placement policy would (one that
   failed an earlier try, or that holds the ledger outside its ensembles and whose garbage collector
   will delete it, only after every other)
   and copy this bookie's share to it, every copy verified (``scanner.repair.fragment_copy``);
5. replace this bookie by the new one in that fragment's ensemble: one ZooKeeper ``multi`` of a check
   that the lock is still ours and a compare-and-set on the ledger znode's version; someone who
   replaced it first wins;
6. take back this bookie's request on the mark (``UnderreplicationMarks.release``: only what it asked,
   never another repairer's); release the lock.

Auto-recovery disabled (``underreplication/disable``) is honoured between any two steps: before each
fragment's copy, before each metadata write and before the mark is touched.

Nothing is written to this bookie, nothing is deleted: the old copy stays in its files until its
garbage collector finds the ledger no longer names the bookie there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kazoo.exceptions import BadVersionError, NoNodeError, RolledBackError

from scanner.bookie_protocol.pool import BookiePool
from scanner.bookie_protocol.transport import TransportRefused, screen_move
from scanner.checks.findings import EntryRanges, in_ranges
from scanner.metadata.bookie_registry import BookieNotResolved, BookieRegistry
from scanner.metadata.ledger import (
    Fragment,
    LedgerMetadata,
    MetadataFormatError,
    move_refusal,
    parse_ledger_metadata,
    replace_ensemble_member,
)
from scanner.metadata.ledger_paths import ledger_path
from scanner.metadata.store import MetadataUnavailable
from scanner.repair.copy_verdict import PeerCopy
from scanner.repair.fragment_copy import CopyFailed, CopyProblem, FragmentCopier
from scanner.repair.ledger_lock import LedgerLock, LockBusy
from scanner.repair.marks import UnderreplicationMarks
from scanner.repair.move_outcome import Outcome
from scanner.repair.placement.choice import NoTarget
from scanner.repair.placement.policy import replacement_candidates
from scanner.repair.placement.settings import PlacementSettings, build_policy
from scanner.repair.placement.sources import legacy_host
from scanner.repair.planner import damaged_fragments
from scanner.repair.zk_acls import zk_acls

log = logging.getLogger(__name__)

TARGETS_TRIED = 3  # new bookies tried per fragment when one does not answer
MAX_METADATA_ATTEMPTS = 16
CONNECTIONS_PER_BOOKIE = 4


@dataclass(frozen=True, slots=True)
class Move:
    """One fragment's copies of this bookie, now on ``target``."""

    first_entry_id: int
    last_entry_id: int
    source: str
    target: str
    entries: int
    bytes: int

    def to_json(self) -> dict:
        return {"first_entry_id": self.first_entry_id, "last_entry_id": self.last_entry_id, "from": self.source,
                "to": self.target, "entries": self.entries, "bytes": self.bytes}


@dataclass(frozen=True, slots=True)
class Attempt:
    ledger_id: int
    bookie_id: str
    outcome: Outcome
    detail: str
    moves: tuple[Move, ...]
    at_ms: int
    seconds: float
    remarked: bool = False  # the mark had been cleared (by a worker) and was filed again under the lock
    mark_zxid: int | None = None  # the creation zxid of the mark, when this bookie created it
    answers: tuple[tuple[int, tuple[PeerCopy, ...]], ...] = ()  # per damaged entry read: what each peer answered

    def to_json(self) -> dict:
        return {"ledger_id": self.ledger_id, "bookie": self.bookie_id, "outcome": self.outcome.value,
                "detail": self.detail, "moves": [m.to_json() for m in self.moves], "at_ms": self.at_ms,
                "seconds": round(self.seconds, 3), "remarked": self.remarked,
                "answers": [{"entry_id": entry_id, "copies": [c.to_json() for c in copies]}
                            for entry_id, copies in self.answers]}


@dataclass
class _Progress:
    """What an attempt did before it ended, however it ended."""

    mark_zxid: int | None
    moves: list[Move] = field(default_factory=list)
    remarked: bool = False


class _Stop(Exception):
    def __init__(self, outcome: Outcome, detail: str, bookie_id: str | None = None):
        super().__init__(detail)
        self.outcome = outcome
        self.detail = detail
        self.bookie_id = bookie_id  # the bookie that did not answer or refused, when it was one


class Rereplicator:
    """Moves this bookie's damaged fragments to other bookies through ``store`` (a live ZooKeeper store).

    ``stopping()`` is polled while copying; ``bytes_per_second`` paces the copying (None: unlimited);
    ``timeout`` bounds each request to a bookie; ``placement`` over the bookie's conf says where a fragment
    goes (``scanner.repair.placement``); ``budget`` (a ``MoveBudget``), when given, is asked
    before each fragment and told what each moved. ``conf`` is the bookie's own configuration: its
    cluster's security settings decide the ACLs of what is created and whether bookies can be spoken to
    (TransportRefused, at once, when the ZooKeeper side cannot be done as BookKeeper does it).
    Bookies are reached through their registration (``BookieRegistry``), as BookKeeper's clients reach them.
    """

    def __init__(self, store, bookie_id: str, *, bytes_per_second: float | None = None, timeout: float = 10.0,
                 stopping: Callable[[], bool] = lambda: False, clock: Callable[[], float] = time.time,
                 budget=None, conf: Mapping[str, str] | None = None,
                 placement: PlacementSettings = PlacementSettings()):
        self.store = store
        self.client = store.client
        self.bookie_id = bookie_id
        self.conf = conf or {}
        self.acl = zk_acls(self.conf, store.client)
        self.registry = BookieRegistry(store)
        # PlacementSettingsError at once when the settings contradict each other or the bookie's conf.
        self.placement = build_policy(placement, self.conf, store, self._host_of)
        self.marks = UnderreplicationMarks(store.client, store.root, acl=self.acl)
        self.lock_holder = f"bookie-scanner on {bookie_id}"
        self.bytes_per_second = bytes_per_second
        self.timeout = timeout
        self.stopping = stopping
        self.clock = clock
        self.budget = budget
        # Targets that failed a try, per ledger: the next try prefers others (a failed try leaves partial
        # copies there, which that bookie's garbage collector, seeing the ledger over-replicated, may delete).
        self._failed_targets: dict[int, set[str]] = {}
        self._answers: dict[int, list[PeerCopy]] = {}  # the attempt's: per damaged entry, what each peer answered

    def rereplicate(self, ledger_id: int, damaged: EntryRanges, *, dry_run: bool = False,
                    mark_zxid: int | None = None) -> Attempt:
        """Move (or, ``dry_run``, judge whether we could move) the fragments holding ``damaged`` on this bookie.

        ``mark_zxid``: the creation zxid of the ledger's mark when this bookie created it (see ``marks.release``).
        """
        started = self.clock()
        progress = _Progress(mark_zxid)
        self._answers.clear()
        try:
            if dry_run:
                outcome, detail = self._judge(ledger_id, damaged)
            else:
                with LedgerLock(self.client, self.store.root, ledger_id, self.lock_holder, self.acl) as lock:
                    self._move(ledger_id, damaged, lock, progress)
                outcome, detail = Outcome.MOVED, "; ".join(
                    f"entries {m.first_entry_id}-{m.last_entry_id} moved from {m.source} to {m.target} "
                    f"({m.entries} copies verified there)" for m in progress.moves)
        except LockBusy as exc:
            outcome, detail = Outcome.BUSY, str(exc)
        except TransportRefused as exc:
            outcome, detail = Outcome.REFUSED, exc.reason
        except _Stop as stop:
            outcome, detail = stop.outcome, stop.detail
        answers = tuple((entry_id, tuple(copies)) for entry_id, copies in sorted(self._answers.items()))
        return Attempt(ledger_id, self.bookie_id, outcome, detail, tuple(progress.moves), int(started * 1000),
                       self.clock() - started, progress.remarked, progress.mark_zxid, answers)

    def release_mark(self, ledger_id: int, mark_zxid: int | None) -> bool:
        """Under the ledger's lock, take back this bookie's request on its mark; False while another holds the lock."""
        try:
            with LedgerLock(self.client, self.store.root, ledger_id, self.lock_holder, self.acl):
                meta = self._fresh_or_none(ledger_id)
                return self._release(ledger_id, meta, mark_zxid)
        except LockBusy:
            return False

    # -- the steps ------------------------------------------------------------------------------

    def _move(self, ledger_id: int, damaged: EntryRanges, lock: LedgerLock, progress: "_Progress") -> None:
        try:
            meta = self._fresh(ledger_id)
            fragments = self._planned(meta, damaged)
        except _Stop as stop:
            if stop.outcome is Outcome.NOT_NEEDED:
                self._release(ledger_id, self._fresh_or_none(ledger_id), progress.mark_zxid)
            raise
        self._require_enabled()
        progress.remarked = self._ensure_marked(ledger_id, progress)
        registered = self.store.bookies()
        writable = self._screened(fragments, registered.writable)
        for fragment in fragments:
            self._require_enabled()
            if self.budget is not None and (refusal := self.budget.refusal()) is not None:
                raise _Stop(Outcome.DEFERRED, refusal)
            move = self._move_fragment(meta, fragment, writable, damaged, lock)
            progress.moves.append(move)
            if self.budget is not None:
                self.budget.spend(move.bytes)
        self._require_enabled()
        self._release(ledger_id, self._fresh_or_none(ledger_id), progress.mark_zxid, registered)

    def _release(self, ledger_id: int, meta: LedgerMetadata | None, mark_zxid: int | None, registered=None) -> bool:
        """Take back this bookie's request on the mark (``marks.release``), given the ledger's metadata now."""
        registered = registered or self.store.bookies()
        in_ensembles = meta is not None and any(self.bookie_id in f.bookies for f in meta.fragments())
        lost = self.bookie_id not in registered.writable | registered.readonly and in_ensembles
        if lost:
            log.info("ledger %d: %s is not registered and still in the ledger's ensembles: its mark is left for "
                     "the other fragments of a lost bookie", ledger_id, self.bookie_id)
        return self.marks.release(ledger_id, self.bookie_id, created_zxid=mark_zxid, bookie_lost=lost)

    def _require_enabled(self) -> None:
        if not self.marks.replication_enabled():
            raise _Stop(Outcome.DEFERRED, "auto-recovery is disabled (underreplication/disable): nothing is moved "
                                          "until it is enabled again")

    def _judge(self, ledger_id: int, damaged: EntryRanges) -> tuple[Outcome, str]:
        meta = self._fresh(ledger_id)
        fragments = self._planned(meta, damaged)
        writable = self._screened(fragments, self.store.bookies().writable)
        plans = []
        for fragment in fragments:
            targets = self._targets(meta, fragment, writable)
            index = fragment.bookie_index(self.bookie_id)
            owed = [e for e in fragment.entries_of(index) if in_ranges(damaged, e)]
            self._run(lambda copier: copier.check(meta, fragment, self.bookie_id, owed))
            plans.append(f"entries {fragment.first_entry_id}-{fragment.last_entry_id} to {targets[0]}")
        return Outcome.WOULD_MOVE, "a verified copy of every damaged entry is on a peer; would move " + "; ".join(plans)

    def _screened(self, fragments: list[Fragment], writable) -> list[str]:
        """The writable bookies that can take copies; TransportRefused when a peer or the cluster cannot be read."""
        screened = screen_move(self.registry, self.conf, {b for f in fragments for b in f.bookies}, sorted(writable))
        for bookie, why in screened.refused.items():
            log.info("%s is not a target: %s", bookie, why)
        return list(screened.targets)

    def _fresh_or_none(self, ledger_id: int) -> LedgerMetadata | None:
        try:
            return self._fresh(ledger_id)
        except _Stop:
            return None

    def _fresh(self, ledger_id: int) -> LedgerMetadata:
        try:
            raw, stat = self.client.get(self._path(ledger_id))
        except NoNodeError:
            raise _Stop(Outcome.NOT_NEEDED, "ledger deleted") from None
        try:
            return parse_ledger_metadata(ledger_id, raw, stat.ctime, source=self._path(ledger_id))
        except MetadataFormatError as exc:
            raise _Stop(Outcome.REFUSED, f"its metadata does not decode: {exc}") from None

    def _planned(self, meta: LedgerMetadata, damaged: EntryRanges) -> list[Fragment]:
        fragments = damaged_fragments(meta, self.bookie_id, damaged)
        if not fragments:
            raise _Stop(Outcome.NOT_NEEDED, f"{self.bookie_id} no longer holds these entries: the ensemble moved on")
        if any(f.last_entry_id is None for f in fragments):
            raise _Stop(Outcome.DEFERRED, f"ledger is {meta.state.name} and the damage is in its last fragment: "
                                          "moved once the ledger is closed")
        refusal = move_refusal(meta)
        if refusal is not None:
            raise _Stop(Outcome.REFUSED, refusal)
        return fragments

    def _ensure_marked(self, ledger_id: int, progress: "_Progress") -> bool:
        """File the mark again if a worker cleared it; True when it had to."""
        mark = self.marks.get(ledger_id)
        if mark is not None and self.bookie_id in mark.replicas:
            return False
        created: dict[int, int] = {}
        self.marks.mark(ledger_id, [self.bookie_id], created)
        progress.mark_zxid = created.get(ledger_id)  # merged into another's mark: not ours to delete
        log.info("marked ledger %d under-replicated again (replica %s): its mark was cleared with the damage "
                 "in place", ledger_id, self.bookie_id)
        return True

    def _move_fragment(self, meta: LedgerMetadata, fragment: Fragment, writable: list[str], damaged: EntryRanges,
                       lock: LedgerLock) -> Move:
        failed_before = self._failed_targets.setdefault(meta.ledger_id, set())
        targets = self._targets(meta, fragment, writable)
        for target in targets[:TARGETS_TRIED]:
            try:
                copied = self._run(lambda copier: copier.copy(meta, fragment, self.bookie_id, target, damaged))
            except _Stop as stop:
                if stop.outcome is Outcome.FAILED and stop.bookie_id == target:
                    failed_before.add(target)
                    log.warning("ledger %d: %s: trying another bookie", meta.ledger_id, stop.detail)
                    continue
                raise
            self._require_enabled()
            self._replace(meta.ledger_id, fragment.first_entry_id, target, lock)
            failed_before.discard(target)
            log.info("ledger %d: entries %d-%d of %s copied to %s (%d entries, %d bytes, each read back and "
                     "verified); the ensemble from entry %d now names %s instead", meta.ledger_id,
                     fragment.first_entry_id, fragment.last_entry_id, self.bookie_id, target, copied.entries,
                     copied.bytes, fragment.first_entry_id, target)
            return Move(fragment.first_entry_id, fragment.last_entry_id, self.bookie_id, target, copied.entries,
                        copied.bytes)
        raise _Stop(Outcome.FAILED, f"none of {', '.join(targets[:TARGETS_TRIED])} took the copies")

    def _targets(self, meta: LedgerMetadata, fragment: Fragment, writable: list[str]) -> list[str]:
        """The bookies to try as the fragment's new member, best first; _Stop NO_TARGET when there is none."""
        try:
            ordered = replacement_candidates(meta, fragment, self.bookie_id, writable, self.placement)
        except NoTarget as exc:
            raise _Stop(Outcome.NO_TARGET, exc.reason) from None
        # Bookies that failed a try of this ledger go after the others, and bookies that already hold the ledger
        # outside its ensembles (a failed try's partial copies, a fragment moved away earlier) after those: such
        # a bookie's garbage collector deletes the ledger in time. It does so only under the ledger's lock, after
        # reading the metadata again, and skips a locked ledger (ScanAndCompareGarbageCollector
        # .removeOverReplicatedledgers), so while we hold the lock and once its ensemble names the bookie the
        # ledger stays; still, a move goes where nothing is to be deleted whenever the placement allows one.
        failed_before = self._failed_targets.get(meta.ledger_id, set())
        in_ensembles = {b for f in meta.fragments() for b in f.bookies}
        probe = next(iter(fragment.entries_of(fragment.bookie_index(self.bookie_id))))
        holders: set[str] = set()
        # Asked a few at a time, best first: a cluster of hundreds of bookies is not asked whole.
        for start in range(0, len(ordered), 2 * TARGETS_TRIED):
            batch = [b for b in ordered[start:start + 2 * TARGETS_TRIED] if b not in in_ensembles]
            holders |= self._run(lambda copier: copier.holding_ledger(batch, meta.ledger_id, probe))
            if sum(1 for b in ordered[:start + 2 * TARGETS_TRIED] if b not in holders | failed_before) >= TARGETS_TRIED:
                break
        if holders:
            log.info("ledger %d: %s already hold the ledger outside its ensembles: tried last", meta.ledger_id,
                     ", ".join(sorted(holders)))
        # stable: the placement order within each group
        return sorted(ordered, key=lambda b: (b in holders, b in failed_before))

    def _host_of(self, bookie_id: str) -> str | None:
        """The host a bookie's registration names (its racks are looked up by it, as BookKeeper's clients do)."""
        try:
            return self.registry.address(bookie_id)[0]
        except (BookieNotResolved, MetadataUnavailable):
            return legacy_host(bookie_id)

    def _run(self, work):
        """``work(copier)`` on a fresh pool; CopyFailed becomes the attempt's outcome."""
        async def run():
            async with BookiePool(self.timeout, CONNECTIONS_PER_BOOKIE, resolver=self.registry) as pool:
                return await work(FragmentCopier(pool, bytes_per_second=self.bytes_per_second,
                                                 stopping=self.stopping, answers=self._answers))
        try:
            return asyncio.run(run())
        except CopyFailed as exc:
            outcome = Outcome.NO_GOOD_COPY if exc.problem is CopyProblem.NO_GOOD_COPY else Outcome.FAILED
            raise _Stop(outcome, str(exc), exc.bookie_id) from None

    def _replace(self, ledger_id: int, first_entry_id: int, target: str, lock: LedgerLock) -> None:
        """Put ``target`` in this bookie's place in the ensemble from ``first_entry_id``.

        One ``multi``: the lock's check and a compare-and-set on the ledger znode's version, so the write
        happens only while the lock is ours, whatever happened to the session since it was checked.
        """
        path = self._path(ledger_id)
        for _ in range(MAX_METADATA_ATTEMPTS):
            try:
                raw, stat = self.client.get(path)
            except NoNodeError:
                raise _Stop(Outcome.NOT_NEEDED, "ledger deleted while its copies were moved") from None
            ensemble = dict(parse_ledger_metadata(ledger_id, raw, source=path).segments).get(first_entry_id)
            if ensemble is None or self.bookie_id not in ensemble:
                log.info("ledger %d: the ensemble from entry %d no longer names %s: replaced meanwhile", ledger_id,
                         first_entry_id, self.bookie_id)
                return
            if target in ensemble:
                raise _Stop(Outcome.FAILED, f"the ensemble from entry {first_entry_id} took {target} meanwhile")
            transaction = self.client.transaction()
            lock.guard(transaction)
            transaction.set_data(path, replace_ensemble_member(raw, first_entry_id, self.bookie_id, target,
                                                               source=path), stat.version)
            lock_result, write_result = transaction.commit()
            if lock_result is True and write_result is not None and not isinstance(write_result, Exception):
                return
            if not isinstance(lock_result, RolledBackError) and lock_result is not True:
                raise _Stop(Outcome.FAILED, "lost the ledger's lock (ZooKeeper session) before updating its metadata")
            if isinstance(write_result, NoNodeError):
                raise _Stop(Outcome.NOT_NEEDED, "ledger deleted while its copies were moved")
            if not isinstance(write_result, BadVersionError):
                raise _Stop(Outcome.FAILED, f"{path}: the metadata write failed: {write_result!r}")
            # the ledger's metadata changed since we read it: read it again
        raise _Stop(Outcome.FAILED, f"{path}: still contended after {MAX_METADATA_ATTEMPTS} attempts")

    def _path(self, ledger_id: int) -> str:
        return ledger_path(self.store.manager, self.store.root, ledger_id)
