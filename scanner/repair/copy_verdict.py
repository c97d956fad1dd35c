"""Which kind of damage a bad local copy is, judged from the copies its peers hold. Pure.

- local rot: a peer holds a copy whose digest verifies (and all verifying copies are the same entry): copy it;
- write-path damage: every peer answered, none holds a copy that verifies: the writer sent bad
  bytes, so there is nothing good to copy;
- divergent replicas: two copies verify but are not the same entry: the cluster disagrees with
  itself; report loudly, never pick one;
- unresolved: no verifying copy could be read and not every peer answered (or none holds the entry):
  nothing can be decided now.

Two verifying copies are the same entry when their ledger id, entry id, length and payload agree. Their
last-add-confirmed fields, and so their digests, may differ: BookKeeper's re-replication re-adds each
entry with the LAC its reader knows (``LedgerFragmentReplicator.recoverLedgerFragmentEntry`` packs it
with ``lh.getLastAddConfirmed()``), and ledger recovery re-adds with its own, so any fragment a
worker or ``shell recover`` ever moved holds copies whose stored bytes differ.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from scanner.storage.entry import HEADER, DigestVerifier, parse_header


class Verdict(str, enum.Enum):
    LOCAL_ROT = "local_rot"
    WRITE_PATH = "write_path"
    DIVERGENT = "divergent"
    UNRESOLVED = "unresolved"


class CopyState(str, enum.Enum):
    VERIFIES = "verifies"
    BAD = "bad"  # read, but its digest fails or its header names another entry
    ABSENT = "absent"  # the peer answered that it has no such ledger or entry
    NO_ANSWER = "no_answer"  # unreachable, timed out, or an error code


@dataclass(frozen=True, slots=True)
class PeerCopy:
    bookie_id: str
    state: CopyState
    data: bytes | None = None  # the stored entry, when one was read
    detail: str = ""

    def to_json(self) -> dict:
        out = {"bookie": self.bookie_id, "state": self.state.value}
        if self.detail:
            out["detail"] = self.detail
        return out


@dataclass(frozen=True, slots=True)
class Judgement:
    verdict: Verdict
    good_copy: bytes | None  # the copy to repair with (local rot only)
    detail: str


def judge_copy(ledger_id: int, entry_id: int, data: bytes, verifier: DigestVerifier) -> CopyState:
    """VERIFIES when ``data`` is this entry (by its header) and its digest matches, else BAD."""
    if len(data) < verifier.min_length:
        return CopyState.BAD
    header = parse_header(data)
    if (header.ledger_id, header.entry_id) != (ledger_id, entry_id):
        return CopyState.BAD
    return CopyState.VERIFIES if verifier.verify(memoryview(data)) else CopyState.BAD


def same_entry_key(data: bytes, digest_length: int) -> tuple:
    """What makes two verifying copies the same entry: ledger id, entry id, length and payload (not LAC or digest)."""
    header = parse_header(data)
    return header.ledger_id, header.entry_id, header.length, bytes(data[HEADER.size + digest_length:])


def judge(copies: Sequence[PeerCopy], digest_length: int) -> Judgement:
    """The verdict on one damaged entry from what its peers hold (``digest_length`` of the ledger's digest type)."""
    verifying = sorted((c for c in copies if c.state is CopyState.VERIFIES), key=lambda c: c.bookie_id)
    entries = {same_entry_key(c.data, digest_length) for c in verifying}
    holders = [c.bookie_id for c in verifying]
    if len(entries) > 1:
        return Judgement(Verdict.DIVERGENT, None,
                         f"{len(entries)} different entries verify (on {', '.join(holders)}): their lengths or "
                         "payloads differ, the replicas disagree")
    if verifying:
        return Judgement(Verdict.LOCAL_ROT, verifying[0].data, f"a verifying copy is on {', '.join(holders)}")
    silent = sorted(c.bookie_id for c in copies if c.state is CopyState.NO_ANSWER)
    bad = sorted(c.bookie_id for c in copies if c.state is CopyState.BAD)
    if silent:
        return Judgement(Verdict.UNRESOLVED, None, f"no verifying copy read; no answer from {', '.join(silent)}")
    if not bad:
        return Judgement(Verdict.UNRESOLVED, None, "no peer holds the entry")
    return Judgement(Verdict.WRITE_PATH, None,
                     f"no copy verifies ({', '.join(bad)} hold bad copies too): the writer produced bad bytes")
