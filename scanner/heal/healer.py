"""The heal itself: read the peers' copies, judge them, give the good one back to this bookie, read it back.

For each target entry (see ``targets``): read it from every peer of its write set at once, verify
each copy's digest, and judge (``verdict``). Only local rot is healed: the verified peer copy is
sent to this bookie as a recovery add with the ledger's master key (SHA-1 of "ledger" and the
password from the metadata, as ``bookkeeper shell recover`` derives it), then read back through the
bookie and compared byte for byte. The bookie's damaged copy is not read through the bookie first:
DbLedgerStorage would keep it in its read-ahead cache and could serve it again after the heal.
Nothing is fenced or deleted and the bookie is never made to deny an entry. Entries are paced
(``entries_per_second``); a dry run stops after the verdict.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from scanner.heal.journal import HealJournal
from scanner.heal.targets import HealTarget
from scanner.heal.verdict import CopyState, PeerCopy, Verdict, judge, judge_copy
from scanner.heal.wire import BookieConnection, BookieUnreachable, ReturnCode, code_name
from scanner.metadata.ledger import LedgerMetadata
from scanner.storage.entry import DigestVerifier, master_key
from throttle import TokenBucket


class Action(str, enum.Enum):
    HEALED = "healed"  # recovery add accepted, read back through the bookie: the same verified bytes
    WOULD_HEAL = "would_heal"  # dry run: a verified peer copy is there
    LEFT_ALONE = "left_alone"  # write-path damage, divergent replicas or unresolved: nothing written
    FAILED = "failed"  # the bookie refused the add or did not give the healed copy back


@dataclass(frozen=True, slots=True)
class HealResult:
    ledger_id: int
    entry_id: int
    bookie_id: str
    verdict: Verdict
    action: Action
    detail: str
    copies: tuple[PeerCopy, ...]
    at_ms: int

    def to_json(self) -> dict:
        return {"ledger_id": self.ledger_id, "entry_id": self.entry_id, "bookie": self.bookie_id,
                "verdict": self.verdict.value, "action": self.action.value, "detail": self.detail,
                "copies": [c.to_json() for c in self.copies], "at_ms": self.at_ms}


class Healer:
    """Heals entries of one bookie (``bookie_id``, reached at its host:port) from its peers."""

    def __init__(self, bookie_id: str, *, dry_run: bool = True, entries_per_second: float | None = 10.0,
                 timeout: float = 10.0, journal: HealJournal | None = None,
                 clock: Callable[[], float] = time.time):
        self.bookie_id = bookie_id
        self.dry_run = dry_run
        self.timeout = timeout
        self.journal = journal
        self._clock = clock
        self._pace = TokenBucket(entries_per_second or None, burst=1.0)
        self._connections: dict[str, BookieConnection] = {}
        self._unreachable: dict[str, str] = {}  # bookies that refused a connection in this run, and why

    async def heal(self, targets: Iterable[HealTarget],
                   metadata: Callable[[int], LedgerMetadata]) -> list[HealResult]:
        """Heal (or, in a dry run, judge) each target; ``metadata(ledger_id)`` gives its fresh metadata."""
        results = []
        try:
            for target in targets:
                await asyncio.to_thread(self._pace.take, 1)
                result = await self._heal_one(target, metadata(target.ledger_id))
                if self.journal is not None and not self.dry_run:
                    self.journal.append(result.to_json())
                results.append(result)
        finally:
            await self.close()
        return results

    async def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            await connection.close()

    async def _heal_one(self, target: HealTarget, meta: LedgerMetadata) -> HealResult:
        verifier = DigestVerifier(meta.digest_type, meta.password)
        copies = tuple(await asyncio.gather(*(self._peer_copy(peer, target, verifier) for peer in target.peers)))
        judgement = judge(copies)

        def result(action: Action, detail: str) -> HealResult:
            return HealResult(target.ledger_id, target.entry_id, self.bookie_id, judgement.verdict, action,
                              detail, copies, int(self._clock() * 1000))

        if judgement.verdict is not Verdict.LOCAL_ROT:
            return result(Action.LEFT_ALONE, judgement.detail)
        if self.dry_run:
            return result(Action.WOULD_HEAL, judgement.detail)
        try:
            added = await self._ask(self.bookie_id, lambda c: c.recovery_add(judgement.good_copy,
                                                                               master_key(meta.password)))
            if not added.ok:
                return result(Action.FAILED, f"{self.bookie_id} refused the recovery add: {code_name(added.code)}")
            back = await self._ask(self.bookie_id, lambda c: c.read_entry(target.ledger_id, target.entry_id))
        except BookieUnreachable as exc:
            return result(Action.FAILED, str(exc))
        if not back.ok:
            return result(Action.FAILED, f"read back from {self.bookie_id}: {code_name(back.code)}")
        if back.body != judgement.good_copy:
            state = judge_copy(target.ledger_id, target.entry_id, back.body, verifier)
            return result(Action.FAILED, f"read back from {self.bookie_id}: not the copy sent ({state.value})")
        return result(Action.HEALED, f"{judgement.detail}; recovery add accepted and read back verified")

    async def _peer_copy(self, peer: str, target: HealTarget, verifier: DigestVerifier) -> PeerCopy:
        try:
            reply = await self._ask(peer, lambda c: c.read_entry(target.ledger_id, target.entry_id))
        except BookieUnreachable as exc:
            return PeerCopy(peer, CopyState.NO_ANSWER, detail=str(exc))
        if reply.code in (ReturnCode.ENOENTRY, ReturnCode.ENOLEDGER):
            return PeerCopy(peer, CopyState.ABSENT, detail=code_name(reply.code))
        if not reply.ok:
            return PeerCopy(peer, CopyState.NO_ANSWER, detail=code_name(reply.code))
        state = judge_copy(target.ledger_id, target.entry_id, reply.body, verifier)
        return PeerCopy(peer, state, reply.body)

    async def _ask(self, bookie_id: str, request):
        """``request(connection)`` on a pooled connection; a broken connection is dropped and raises.

        A bookie that cannot be connected to is not tried again in this run (each try could take a timeout).
        """
        if bookie_id in self._unreachable:
            raise BookieUnreachable(self._unreachable[bookie_id])
        connection = self._connections.get(bookie_id)
        if connection is None:
            try:
                connection = self._connections[bookie_id] = await BookieConnection.open(bookie_id, self.timeout)
            except BookieUnreachable as exc:
                self._unreachable[bookie_id] = str(exc)
                raise
        try:
            return await request(connection)
        except BookieUnreachable:
            self._connections.pop(bookie_id, None)
            await connection.close()
            raise
