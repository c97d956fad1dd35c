"""The heal's rules on bytes and metadata alone: which entries qualify, from which peers, and the verdicts."""

from __future__ import annotations

import struct

import pytest

from corpus import CORPUS, scan_args
from scanner.checks.findings import Category, Finding
from scanner.cli import main
from scanner.heal.targets import HealTarget, damaged_entries, heal_targets
from scanner.heal.verdict import CopyState, PeerCopy, Verdict, judge, judge_copy
from scanner.heal.wire import parse_address, read_request, recovery_add_request
from scanner.metadata.ledger import LedgerMetadata, LedgerState
from scanner.storage.entry import DigestType, DigestVerifier, build_entry, master_key

A, B, C, D = "10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181", "10.0.0.4:3181"


def ledger(state=LedgerState.CLOSED, last=99, segments=((0, (A, B, C)),), wq=2, digest=DigestType.CRC32C):
    closed = state is LedgerState.CLOSED
    return LedgerMetadata(ledger_id=7, format_version=3, ensemble_size=3, write_quorum=wq, ack_quorum=2, state=state,
                          last_entry_id=last if closed else -1, length=1000 if closed else 0, segments=segments,
                          digest_type=digest, password=None if digest is None else b"pw", ctime=None,
                          custom_metadata=(), ctoken=None)


def test_closed_ledger_entries_heal_from_the_rest_of_their_write_set():
    targets, refused = heal_targets(7, ((0, 2), (150, 150)), ledger(wq=2), A)
    # write quorum 2 over (A, B, C): entry 0 on A,B; entry 2 on C,A; entry 1 is not A's.
    assert targets == [HealTarget(7, 0, (B,)), HealTarget(7, 2, (C,))]
    assert {(n.entries, n.reason.split(" (")[0]) for n in refused} == {
        (((1, 1),), "this bookie does not hold it in the current metadata"),
        (((150, 150),), "past the ledger's last entry")}


def test_open_ledger_heals_only_fragments_before_its_last():
    meta = ledger(state=LedgerState.OPEN, segments=((0, (A, B, C)), (50, (D, B, C))), wq=3)
    targets, refused = heal_targets(7, ((10, 10), (60, 60)), meta, B)
    assert targets == [HealTarget(7, 10, (C, A))]
    assert [(n.entries, "writer may still add" in n.reason) for n in refused] == [(((60, 60),), True)]


def test_deleted_or_digestless_ledgers_are_not_healed():
    targets, refused = heal_targets(7, ((0, 5),), None, A)
    assert targets == [] and [(n.entries, n.reason) for n in refused] == [(((0, 5),), "ledger deleted")]
    targets, refused = heal_targets(7, ((0, 5),), ledger(digest=None), A)
    assert targets == [] and "cannot be verified" in refused[0].reason


def test_only_damage_that_needs_a_copy_counts():
    findings = [Finding(Category.CORRUPT_ENTRY, 7, ((3, 4),), 1, 0, ""),
                Finding(Category.MISSING_ENTRY, 7, ((6, 6),), None, None, ""),
                Finding(Category.ORPHAN_LEDGER, 8, ((0, 9),), None, None, "")]
    assert damaged_entries(findings) == {7: ((3, 4), (6, 6))}


def entry(payload: bytes, entry_id: int = 3) -> bytes:
    return build_entry(7, entry_id, 2, 500, payload, DigestType.CRC32C)


def copy(bookie, data):
    return PeerCopy(bookie, judge_copy(7, 3, data, DigestVerifier(DigestType.CRC32C)), data)


def test_verdicts():
    good, other = entry(b"x" * 200), entry(b"y" * 200)
    bad = good[:-1] + b"z"
    rot = judge([copy(B, good), copy(C, bad)])
    assert (rot.verdict, rot.good_copy) == (Verdict.LOCAL_ROT, good)
    assert judge([copy(B, good), copy(C, good)]).verdict is Verdict.LOCAL_ROT
    assert judge([copy(B, good), copy(C, other)]).verdict is Verdict.DIVERGENT
    assert judge([copy(B, bad), copy(C, bad)]).verdict is Verdict.WRITE_PATH
    assert judge([copy(B, bad), PeerCopy(C, CopyState.NO_ANSWER)]).verdict is Verdict.UNRESOLVED
    assert judge([PeerCopy(B, CopyState.ABSENT)]).verdict is Verdict.UNRESOLVED
    # A copy of another entry that verifies on its own is not a copy of this one.
    assert judge_copy(7, 3, entry(b"x" * 200, entry_id=4), DigestVerifier(DigestType.CRC32C)) is CopyState.BAD


def test_wire_frames_follow_the_v2_protocol():
    assert read_request(7, 3) == struct.pack(">iiqq", 20, 0x02020000, 7, 3)
    stored = entry(b"p" * 10)
    key = master_key(b"pw")
    frame = recovery_add_request(stored, key)
    length, header = struct.unpack_from(">ii", frame)
    assert (length, header) == (len(frame) - 4, 0x02010002)  # version 2, ADD_ENTRY, RECOVERY_ADD
    assert frame[8:28] == key and frame[28:] == stored
    assert parse_address("[::1]:3181") == ("::1", 3181)
    with pytest.raises(ValueError):
        parse_address("bookie-7")


def test_writing_heal_needs_live_metadata(capsys):
    status = main(["heal", *scan_args("bookie1"), "--metadata", f"file:{CORPUS / 'zk-dump.json'}", "--no-dry-run"])
    err = capsys.readouterr().err
    assert status == 2 and "needs the live metadata" in err and len(err.strip().splitlines()) == 1


def test_the_report_shouts_divergence_and_settles_only_when_everything_healed():
    from scanner.heal.after_scan import HealReport
    from scanner.heal.healer import Action, HealResult
    from scanner.heal.targets import NotHealable

    def result(entry_id, verdict, action):
        return HealResult(7, entry_id, A, verdict, action, "why", (PeerCopy(B, CopyState.VERIFIES),), 0)

    healed = HealReport(A, dry_run=False, results=[result(1, Verdict.LOCAL_ROT, Action.HEALED)])
    assert healed.settled and healed.counts() == {"healed": 1}
    loud = HealReport(A, dry_run=False, results=[result(1, Verdict.LOCAL_ROT, Action.HEALED),
                                                 result(2, Verdict.DIVERGENT, Action.LEFT_ALONE),
                                                 result(3, Verdict.LOCAL_ROT, Action.HEALED)],
                      not_healable=[NotHealable(7, ((9, 12),), "ledger deleted")])
    text = loud.to_text()
    assert not loud.settled
    assert "ledger 7 entry 2: divergent, left_alone: DIVERGENT REPLICAS: why" in text
    assert "ledger 7 entries 1, 3: local_rot, healed: why" in text
    assert "ledger 7 entries 9-12: not healed here: ledger deleted" in text
    assert not HealReport(A, dry_run=True, results=[result(1, Verdict.LOCAL_ROT, Action.HEALED)]).settled


def test_bad_options_are_one_line_usage_errors(capsys, tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")
    for extra in (["--entries-per-second", "-1"], ["--max-entries", "0"], ["--state-dir", str(blocked / "state")]):
        status = main(["heal", *scan_args("bookie1"), "--metadata", f"file:{CORPUS / 'zk-dump.json'}", *extra])
        err = capsys.readouterr().err
        assert status == 2 and len(err.strip().splitlines()) == 1 and err.startswith("bookie-scanner heal: "), err


def test_mac_copies_verify_only_with_the_ledgers_password():
    stored = build_entry(7, 3, 2, 500, b"m" * 64, DigestType.HMAC, b"pw")
    assert judge_copy(7, 3, stored, DigestVerifier(DigestType.HMAC, b"pw")) is CopyState.VERIFIES
    assert judge_copy(7, 3, stored, DigestVerifier(DigestType.HMAC, b"other")) is CopyState.BAD
