"""Copying one bookie's share of a fragment to a new bookie, every copy verified: the data half of a move.

For each entry the fragment places on the bookie being replaced, the copies on the other bookies
of its write set are read and their digests checked against the ledger metadata; a copy that
verifies (all that verify must be the same entry: ``copy_verdict``) is sent to the new bookie as a recovery add with
the ledger's master key, as BookKeeper's LedgerFragmentReplicator does, then read back from it and compared
byte for byte. The stored bytes are copied as they are (header, digest, payload), so the new copy is
the writer's own. When no peer holds a verifying copy, the replaced bookie's own copy is used if
the scan did not find it damaged and it verifies. Nothing is written to the replaced bookie.

A copy stops at the first entry that cannot be copied: with no good copy anywhere (the writer's
bad bytes, or replicas that disagree) nothing is decided for the operator; a bookie that does not
answer, or a new bookie that refuses, is worth another try later. Entries go in windows of
``WINDOW`` at once, at most ``bytes_per_second`` (paced on what is read).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from dataclasses import dataclass

from scanner.bookie_protocol.pool import BookiePool
from scanner.bookie_protocol.wire import BookieUnreachable, ReturnCode, code_name
from scanner.checks.findings import EntryRanges, in_ranges
from scanner.metadata.ledger import Fragment, LedgerMetadata
from scanner.repair.copy_verdict import CopyState, PeerCopy, Verdict, judge, judge_copy
from scanner.storage.entry import DigestVerifier, master_key
from throttle import TokenBucket

WINDOW = 16


class CopyProblem(str, enum.Enum):
    NO_GOOD_COPY = "no_good_copy"  # write-path damage or divergent replicas: nothing to copy, ask a person
    UNREACHABLE = "unreachable"  # a peer or the new bookie did not answer: try again later
    REFUSED = "refused"  # the new bookie refused the add, or did not give the copy back
    STOPPED = "stopped"  # the agent is stopping


class CopyFailed(Exception):
    def __init__(self, problem: CopyProblem, entry_id: int | None, detail: str, bookie_id: str | None = None):
        super().__init__(detail)
        self.problem = problem
        self.entry_id = entry_id
        self.bookie_id = bookie_id  # the bookie that did not answer or refused, when it was one


@dataclass(frozen=True, slots=True)
class Copied:
    entries: int
    bytes: int


class FragmentCopier:
    """Copies fragments over one pool of connections, paced and stoppable (``stopping()`` polled per window)."""

    def __init__(self, pool: BookiePool, *, bytes_per_second: float | None = None,
                 stopping: Callable[[], bool] = lambda: False, answers: dict[int, list[PeerCopy]] | None = None):
        self.pool = pool
        self.answers = answers if answers is not None else {}  # per damaged entry: what each bookie answered
        self._pace = TokenBucket(bytes_per_second or None, burst=max(bytes_per_second or 0, 1 << 20))
        self._stopping = stopping

    async def copy(self, meta: LedgerMetadata, fragment: Fragment, source: str, target: str,
                   damaged: EntryRanges) -> Copied:
        """Copy ``source``'s share of ``fragment`` to ``target``; CopyFailed says why not."""
        index = fragment.bookie_index(source)
        if index is None:
            raise ValueError(f"{source} is not in the ensemble of fragment {fragment.index}")
        verifier = DigestVerifier(meta.digest_type, meta.password)
        key = master_key(meta.password)
        entries = list(fragment.entries_of(index))
        done = Copied(0, 0)
        for start in range(0, len(entries), WINDOW):
            if self._stopping():
                raise CopyFailed(CopyProblem.STOPPED, entries[start], "stopping")
            window = entries[start:start + WINDOW]
            sizes = await _all(self._copy_entry(meta.ledger_id, e, fragment, index, source, target,
                                                in_ranges(damaged, e), verifier, key) for e in window)
            done = Copied(done.entries + len(window), done.bytes + sum(sizes))
        return done

    async def _copy_entry(self, ledger_id: int, entry_id: int, fragment: Fragment, index: int, source: str,
                          target: str, damaged_here: bool, verifier: DigestVerifier, key: bytes) -> int:
        good = await self.good_copy(ledger_id, entry_id, fragment, index, source, damaged_here, verifier)
        await asyncio.to_thread(self._pace.take, len(good))
        try:
            added = await self.pool.ask(target, lambda c: c.recovery_add(good, key))
            if not added.ok:
                raise CopyFailed(CopyProblem.REFUSED, entry_id,
                                 f"entry {entry_id}: {target} refused the recovery add: {code_name(added.code)}", target)
            back = await self.pool.ask(target, lambda c: c.read_entry(ledger_id, entry_id))
        except BookieUnreachable as exc:
            raise CopyFailed(CopyProblem.UNREACHABLE, entry_id, f"entry {entry_id}: {exc}", target) from None
        if not back.ok or back.body != good:
            state = code_name(back.code) if not back.ok else "another copy"
            raise CopyFailed(CopyProblem.REFUSED, entry_id,
                             f"entry {entry_id}: read back from {target}: {state}, not the copy sent", target)
        return len(good)

    async def good_copy(self, ledger_id: int, entry_id: int, fragment: Fragment, index: int, source: str,
                        damaged_here: bool, verifier: DigestVerifier) -> bytes:
        """A verified copy of the entry, from the peers (or ``source`` when its copy is not damaged); else CopyFailed."""
        peers = [fragment.bookies[i] for i in fragment.write_set(entry_id) if i != index]
        copies = list(await asyncio.gather(*(self._read(p, ledger_id, entry_id, verifier) for p in peers)))
        if damaged_here:
            self.answers[entry_id] = copies
        judgement = judge(copies, verifier.digest_length)
        if judgement.good_copy is not None:
            return judgement.good_copy
        if judgement.verdict is not Verdict.DIVERGENT and not damaged_here:
            own = await self._read(source, ledger_id, entry_id, verifier)
            if own.state is CopyState.VERIFIES:
                return own.data
        if judgement.verdict is Verdict.UNRESOLVED:
            silent = next((c.bookie_id for c in copies if c.state is CopyState.NO_ANSWER), None)
            raise CopyFailed(CopyProblem.UNREACHABLE, entry_id, f"entry {entry_id}: {judgement.detail}", silent)
        raise CopyFailed(CopyProblem.NO_GOOD_COPY, entry_id,
                         f"entry {entry_id}: {judgement.verdict.value}: {judgement.detail}")

    async def check(self, meta: LedgerMetadata, fragment: Fragment, source: str, entry_ids: list[int]) -> None:
        """That a verified copy of each of ``entry_ids`` (damaged on ``source``) can be had; else CopyFailed."""
        index = fragment.bookie_index(source)
        verifier = DigestVerifier(meta.digest_type, meta.password)
        for start in range(0, len(entry_ids), WINDOW):
            await _all(self.good_copy(meta.ledger_id, e, fragment, index, source, True, verifier)
                       for e in entry_ids[start:start + WINDOW])

    async def holding_ledger(self, bookie_ids: list[str], ledger_id: int, entry_id: int) -> set[str]:
        """Which of ``bookie_ids`` hold the ledger: answer a read of it with anything but "no such ledger".

        Asked of new bookies outside every ensemble of the ledger: one holding it there is over-replicated
        in its own eyes, and its garbage collector may delete the ledger, copies we add included. A bookie
        that does not answer is not counted here: the copy to it fails and the next one is tried.
        """
        async def holds(bookie_id: str) -> bool:
            try:
                reply = await self.pool.ask(bookie_id, lambda c: c.read_entry(ledger_id, entry_id))
            except BookieUnreachable:
                return False
            return reply.code != ReturnCode.ENOLEDGER
        answers = await asyncio.gather(*(holds(b) for b in bookie_ids))
        return {b for b, held in zip(bookie_ids, answers) if held}

    async def _read(self, bookie_id: str, ledger_id: int, entry_id: int, verifier: DigestVerifier) -> PeerCopy:
        try:
            reply = await self.pool.ask(bookie_id, lambda c: c.read_entry(ledger_id, entry_id))
        except BookieUnreachable as exc:
            return PeerCopy(bookie_id, CopyState.NO_ANSWER, detail=str(exc))
        if reply.code in (ReturnCode.ENOENTRY, ReturnCode.ENOLEDGER):
            return PeerCopy(bookie_id, CopyState.ABSENT, detail=code_name(reply.code))
        if not reply.ok:
            return PeerCopy(bookie_id, CopyState.NO_ANSWER, detail=code_name(reply.code))
        return PeerCopy(bookie_id, judge_copy(ledger_id, entry_id, reply.body, verifier), reply.body)


async def _all(coroutines) -> list:
    """The coroutines' results; the first to fail cancels the others, which are awaited, and its error is raised."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(c) for c in coroutines]
    except ExceptionGroup as failed:
        raise failed.exceptions[0] from None
    return [t.result() for t in tasks]
