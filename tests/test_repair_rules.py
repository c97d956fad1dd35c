"""Repair's rules on bytes and metadata alone: which fragments move where, the ensemble rewrite, verdicts, frames."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest

from corpus import CORPUS, scan_args
from scanner.bookie_protocol.wire import read_request, recovery_add_request
from scanner.checks.findings import in_ranges, merge_ranges
from scanner.cli import main
from scanner.metadata.ledger import (LedgerMetadata, LedgerState, MetadataFormatError, parse_ledger_metadata,
                                     replace_ensemble_member, serialize_ledger_metadata)
from scanner.repair.copy_verdict import CopyState, PeerCopy, Verdict, judge, judge_copy
from scanner.repair.placement.choice import NoTarget
from scanner.repair.placement.policy import PlacementPolicy, replacement_candidates
from scanner.repair.planner import damaged_fragments
from scanner.storage.entry import DigestType, DigestVerifier, build_entry, master_key

A, B, C, D = "10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181", "10.0.0.4:3181"


def ledger(state=LedgerState.CLOSED, last=99, segments=((0, (A, B, C)),), wq=2, digest=DigestType.CRC32C):
    closed = state is LedgerState.CLOSED
    return LedgerMetadata(ledger_id=7, format_version=3, ensemble_size=3, write_quorum=wq, ack_quorum=2, state=state,
                          last_entry_id=last if closed else -1, length=1000 if closed else 0, segments=segments,
                          digest_type=digest, password=None if digest is None else b"pw", ctime=None,
                          custom_metadata=(), ctoken=None)


def test_damaged_fragments_are_those_placing_a_damaged_entry_on_the_bookie():
    meta = ledger(segments=((0, (A, B, C)), (50, (D, B, C))), wq=2)
    # write quorum 2 over (A, B, C): A holds entries 0, 2, 3, 5, ...; entry 1 is B's and C's only.
    assert damaged_fragments(meta, A, ((1, 1),)) == []
    assert [f.first_entry_id for f in damaged_fragments(meta, A, ((2, 2),))] == [0]
    assert [f.first_entry_id for f in damaged_fragments(meta, B, ((10, 10), (60, 61)))] == [0, 50]
    assert damaged_fragments(meta, A, ((60, 99),)) == []  # A is not in the second ensemble
    assert damaged_fragments(meta, B, ((150, 150),)) == []  # past the last entry


def test_replacements_are_writable_bookies_outside_the_ensemble_in_a_stable_spread_order():
    meta = ledger(segments=((0, (A, B, C)),))
    (fragment,) = meta.fragments()
    E, F = "10.0.0.5:3181", "10.0.0.6:3181"
    def order(ledger_id, writable):
        return replacement_candidates(replace(meta, ledger_id=ledger_id), fragment, A, writable, PlacementPolicy())

    assert sorted(order(7, [A, B, C, D, E, F])) == [D, E, F] and order(7, [A, B, C, D, E, F]) == order(7, [F, E, D, C])
    with pytest.raises(NoTarget, match="no writable bookie outside the ensemble"):
        order(7, [A, B, C])
    spread = {order(ledger_id, [D, E, F])[0] for ledger_id in range(30)}
    assert spread == {D, E, F}  # different ledgers go to different bookies


@pytest.mark.parametrize("version", (2, 3))
def test_replacing_an_ensemble_member_keeps_everything_else(version):
    meta = ledger(segments=((0, (A, B, C)), (50, (D, B, C))))
    meta = replace(meta, format_version=version, custom_metadata=(("pulsar/managed-ledger", b"orders"),),
                   ctime=1700000000000, ctoken=None if version == 2 else 9)
    raw = serialize_ledger_metadata(meta, version)
    changed = replace_ensemble_member(raw, 50, B, A, source="L7")
    assert changed.startswith(f"BookieMetadataFormatVersion\t{version}\n".encode())
    assert parse_ledger_metadata(7, changed) == replace(meta, segments=((0, (A, B, C)), (50, (D, A, C))))
    # Only the named ensemble changes, and only one member of it.
    assert serialize_ledger_metadata(parse_ledger_metadata(7, changed), version) == changed


def test_a_field_the_scanner_does_not_know_survives_the_rewrite():
    raw = serialize_ledger_metadata(ledger(), 3)
    header, body = raw.split(b"\n", 1)
    length, body = body[0], body[1:]
    unknown = bytes([(13 << 3) | 2, 3]) + b"new"  # field 13, length-delimited: from a newer BookKeeper
    raw = header + b"\n" + bytes([length + len(unknown)]) + body + unknown
    changed = replace_ensemble_member(raw, 0, C, D, source="L7")
    assert changed.endswith(unknown) and parse_ledger_metadata(7, changed).segments == ((0, (A, B, D)),)


def test_an_ensemble_rewrite_refuses_what_it_cannot_do_exactly():
    raw = serialize_ledger_metadata(ledger(), 3)
    for first, old, new, why in ((5, A, D, "no ensemble starts at entry 5"), (0, D, A, "does not name"),
                                 (0, A, B, "already names")):
        with pytest.raises(MetadataFormatError, match=why):
            replace_ensemble_member(raw, first, old, new, source="L7")
    with pytest.raises(MetadataFormatError, match="version 1 is not rewritten"):
        replace_ensemble_member(serialize_ledger_metadata(ledger(), 1), 0, A, D, source="L7")


def test_entry_ranges_membership():
    ranges = ((0, 3), (7, 7), (10, 20))
    assert [e for e in range(25) if in_ranges(ranges, e)] == [0, 1, 2, 3, 7, *range(10, 21)]
    assert not in_ranges((), 0)
    assert merge_ranges([(5, 9), (0, 2), (3, 4), (20, 21), (8, 12)]) == ((0, 12), (20, 21))


def entry(payload: bytes, entry_id: int = 3, last_add_confirmed: int = 2, length: int = 500) -> bytes:
    return build_entry(7, entry_id, last_add_confirmed, length, payload, DigestType.CRC32C)


def copy(bookie, data):
    return PeerCopy(bookie, judge_copy(7, 3, data, DigestVerifier(DigestType.CRC32C)), data)


CRC32C_LENGTH = DigestVerifier(DigestType.CRC32C).digest_length


def verdict(*copies):
    return judge(list(copies), CRC32C_LENGTH)


def test_verdicts():
    good, other = entry(b"x" * 200), entry(b"y" * 200)
    bad = good[:-1] + b"z"
    rot = verdict(copy(B, good), copy(C, bad))
    assert (rot.verdict, rot.good_copy) == (Verdict.LOCAL_ROT, good)
    assert verdict(copy(B, good), copy(C, good)).verdict is Verdict.LOCAL_ROT
    assert verdict(copy(B, good), copy(C, other)).verdict is Verdict.DIVERGENT
    assert verdict(copy(B, bad), copy(C, bad)).verdict is Verdict.WRITE_PATH
    assert verdict(copy(B, bad), PeerCopy(C, CopyState.NO_ANSWER)).verdict is Verdict.UNRESOLVED
    assert verdict(PeerCopy(B, CopyState.ABSENT)).verdict is Verdict.UNRESOLVED
    # A copy of another entry that verifies on its own is not a copy of this one.
    assert judge_copy(7, 3, entry(b"x" * 200, entry_id=4), DigestVerifier(DigestType.CRC32C)) is CopyState.BAD


def test_copies_rewritten_by_recovery_with_another_lac_are_the_same_entry():
    # BookKeeper's re-replication and ledger recovery re-add an entry with their own LAC: the stored
    # bytes (LAC field and digest) differ, the entry does not.
    written, re_added = entry(b"x" * 200, last_add_confirmed=2), entry(b"x" * 200, last_add_confirmed=9)
    assert written != re_added
    same = verdict(copy(C, re_added), copy(B, written))
    assert same.verdict is Verdict.LOCAL_ROT
    assert same.good_copy == written  # the copy of the first bookie by id, whichever answered first
    assert same.detail == f"a verifying copy is on {B}, {C}"
    # Another length (a writer's different entry, not a re-add) is divergence, as is another payload.
    assert verdict(copy(B, written), copy(C, entry(b"x" * 200, length=700))).verdict is Verdict.DIVERGENT
    assert verdict(copy(B, written), copy(C, entry(b"w" * 200, last_add_confirmed=9))).verdict is Verdict.DIVERGENT


def test_wire_frames_follow_the_v2_protocol():
    assert read_request(7, 3) == struct.pack(">iiqq", 20, 0x02020000, 7, 3)
    stored = entry(b"p" * 10)
    key = master_key(b"pw")
    frame = recovery_add_request(stored, key)
    length, header = struct.unpack_from(">ii", frame)
    assert (length, header) == (len(frame) - 4, 0x02010002)  # version 2, ADD_ENTRY, RECOVERY_ADD
    assert frame[8:28] == key and frame[28:] == stored


def test_repair_needs_live_metadata(capsys):
    status = main(["repair", *scan_args("bookie1"), "--metadata", f"file:{CORPUS / 'zk-dump.json'}"])
    err = capsys.readouterr().err
    assert status == 2 and "needs the live metadata" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("extra, says", [
    (["--timeout", "0"], "--timeout must be a positive number of seconds, got 0"),
    (["--state-dir", "{blocked}/state"], "cannot use --state-dir {blocked}/state: Not a directory"),
    (["--copy-rate", "-5"], "argument --copy-rate: rate '-5': expected a number"),
])
def test_bad_options_are_one_line_usage_errors(capsys, tmp_path, extra, says):
    # The dump (file:) is refused too, after the options: each error must be the option's own.
    blocked = tmp_path / "file"
    blocked.write_text("")
    extra = [value.format(blocked=blocked) for value in extra]
    status = main(["repair", *scan_args("bookie1"), "--metadata", f"file:{CORPUS / 'zk-dump.json'}", *extra])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"bookie-scanner repair: {says.format(blocked=blocked)}"), err


def test_mac_copies_verify_only_with_the_ledgers_password():
    stored = build_entry(7, 3, 2, 500, b"m" * 64, DigestType.HMAC, b"pw")
    assert judge_copy(7, 3, stored, DigestVerifier(DigestType.HMAC, b"pw")) is CopyState.VERIFIES
    assert judge_copy(7, 3, stored, DigestVerifier(DigestType.HMAC, b"other")) is CopyState.BAD
