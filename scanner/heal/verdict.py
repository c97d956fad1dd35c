"""Which kind of damage a bad local copy is, judged from the copies its peers hold. Pure.

- local rot: a peer holds a copy whose digest verifies (and all verifying copies agree): copy it;
- write-path damage: every peer answered, none holds a copy that verifies: the writer sent bad
  bytes, so there is nothing good to copy;
- divergent replicas: two copies verify but differ: the cluster disagrees with itself; report
  loudly, never pick one;
- unresolved: no verifying copy could be read and not every peer answered (or none holds the entry):
  nothing can be decided now.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from scanner.storage.entry import DigestVerifier, parse_header


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


def judge(copies: Sequence[PeerCopy]) -> Judgement:
    """The verdict on one damaged entry from what its peers hold."""
    good = {c.data for c in copies if c.state is CopyState.VERIFIES}
    holders = sorted(c.bookie_id for c in copies if c.state is CopyState.VERIFIES)
    if len(good) > 1:
        return Judgement(Verdict.DIVERGENT, None,
                         f"{len(good)} different copies verify (on {', '.join(holders)}): the replicas disagree")
    if good:
        return Judgement(Verdict.LOCAL_ROT, next(iter(good)), f"a verifying copy is on {', '.join(holders)}")
    silent = sorted(c.bookie_id for c in copies if c.state is CopyState.NO_ANSWER)
    bad = sorted(c.bookie_id for c in copies if c.state is CopyState.BAD)
    if silent:
        return Judgement(Verdict.UNRESOLVED, None, f"no verifying copy read; no answer from {', '.join(silent)}")
    if not bad:
        return Judgement(Verdict.UNRESOLVED, None, "no peer holds the entry")
    return Judgement(Verdict.WRITE_PATH, None,
                     f"no copy verifies ({', '.join(bad)} hold bad copies too): the writer produced bad bytes")
