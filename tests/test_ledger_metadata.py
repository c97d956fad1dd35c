"""Ledger metadata serde (V1/V2/V3) and write sets, on hand-made bytes and on the real corpus."""

from __future__ import annotations

import base64
import dataclasses
import json
import random

import pytest

from corpus import CORPUS, manifest
from scanner.metadata.ledger import (
    LedgerMetadata,
    LedgerState,
    MetadataFormatError,
    parse_ledger_metadata,
    serialize_ledger_metadata,
)
from scanner.metadata.ledger_paths import LedgerManager, ledger_id_from_path
from scanner.storage.entry import DigestType

HEADER = b"BookieMetadataFormatVersion\t"
B1, B2, B3, B4 = (b"10.0.0.%d:3181" % i for i in (1, 2, 3, 4))


def _member(bookie: bytes) -> bytes:
    return b"\x0a\x0d" + bookie


# The formats doc's worked V3 example (section 6.2), byte by byte.
DOC_V3 = (
    HEADER + b"3\n" + b"\x99\x01"
    + b"\x08\x02" + b"\x10\x03" + b"\x18\xd2\x09" + b"\x20\x0f" + b"\x28\x03"
    + b"\x32\x2f" + _member(B1) + _member(B2) + _member(B3) + b"\x10\x00"
    + b"\x32\x2f" + _member(B1) + _member(B4) + _member(B3) + b"\x10\x0a"
    + b"\x38\x03" + b"\x42\x06secret" + b"\x48\x02" + b"\x50\x80\xd0\x95\xff\xbc\x31"
    + b"\x5a\x15\x0a\x0bapplication\x12\x06pulsar" + b"\x60\x2a"
)  # fmt: skip

# The same ledger as V2 text (section 6.3).
DOC_V2 = HEADER + b"""2
quorumSize: 2
ensembleSize: 3
length: 1234
lastEntryId: 15
state: CLOSED
segment {
  ensembleMember: "10.0.0.1:3181"
  ensembleMember: "10.0.0.2:3181"
  ensembleMember: "10.0.0.3:3181"
  firstEntryId: 0
}
segment {
  ensembleMember: "10.0.0.1:3181"
  ensembleMember: "10.0.0.4:3181"
  ensembleMember: "10.0.0.3:3181"
  firstEntryId: 10
}
digestType: CRC32C
password: "secret"
ackQuorumSize: 2
ctime: 1700000000000
customMetadata {
  key: "application"
  value: "pulsar"
}
"""

# And as V1 (section 6.4): no digest, password, ack quorum, ctime, custom metadata or cToken.
DOC_V1 = HEADER + b"1\n2\n3\n1234\n0\t10.0.0.1:3181\t10.0.0.2:3181\t10.0.0.3:3181\n10\t10.0.0.1:3181\t10.0.0.4:3181\t10.0.0.3:3181\n15\tCLOSED"

ENSEMBLE_0 = ("10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181")
ENSEMBLE_10 = ("10.0.0.1:3181", "10.0.0.4:3181", "10.0.0.3:3181")


def doc_ledger(**changes) -> LedgerMetadata:
    fields = dict(
        ledger_id=7, format_version=3, ensemble_size=3, write_quorum=2, ack_quorum=2,
        state=LedgerState.CLOSED, last_entry_id=15, length=1234,
        segments=((0, ENSEMBLE_0), (10, ENSEMBLE_10)),
        digest_type=DigestType.CRC32C, password=b"secret", ctime=1700000000000,
        custom_metadata=(("application", b"pulsar"),), ctoken=42,
    )  # fmt: skip
    fields.update(changes)
    return LedgerMetadata(**fields)


def test_v3_worked_example_decodes_and_reencodes_byte_for_byte():
    assert len(DOC_V3) - len(HEADER) - 2 - 2 == 153
    assert parse_ledger_metadata(7, DOC_V3) == doc_ledger()
    assert serialize_ledger_metadata(doc_ledger()) == DOC_V3


def test_v3_open_ledger_encodes_like_bookkeeper():
    meta = doc_ledger(state=LedgerState.OPEN, last_entry_id=-1, length=0, password=b"", ctoken=0,
                      segments=((0, ENSEMBLE_0),))  # fmt: skip
    data = serialize_ledger_metadata(meta)
    for field in (b"\x18\x00", b"\x20" + b"\xff" * 9 + b"\x01", b"\x28\x01", b"\x42\x00", b"\x60\x00"):
        assert field in data
    assert parse_ledger_metadata(7, data) == meta


def test_v2_worked_example_decodes_and_reencodes_byte_for_byte():
    meta = doc_ledger(format_version=2, ctoken=None)
    assert parse_ledger_metadata(7, DOC_V2) == meta
    assert serialize_ledger_metadata(meta, version=2) == DOC_V2


def test_v2_never_writes_ctoken():
    assert b"cToken" not in serialize_ledger_metadata(doc_ledger(), version=2)


def test_v1_worked_example_decodes_and_reencodes_byte_for_byte():
    meta = parse_ledger_metadata(7, DOC_V1, znode_ctime=99)
    assert meta == doc_ledger(format_version=1, digest_type=None, password=None, ctime=None,
                              custom_metadata=(), ctoken=None)  # fmt: skip
    assert serialize_ledger_metadata(meta, version=1) == DOC_V1


def test_v1_in_recovery_and_open():
    recovering = parse_ledger_metadata(3, HEADER + b"1\n2\n2\n77\n0\ta:1\tb:1\n-102\tCLOSED")
    assert recovering.state is LedgerState.IN_RECOVERY
    assert (recovering.last_entry_id, recovering.length) == (-1, 0)  # only a CLOSED ledger keeps them
    opened = parse_ledger_metadata(3, HEADER + b"1\n2\n2\n0\n0\ta:1\tb:1\n")
    assert opened.state is LedgerState.OPEN and opened.segments == ((0, ("a:1", "b:1")),)
    for meta in (recovering, opened):
        assert parse_ledger_metadata(3, serialize_ledger_metadata(meta, version=1)) == meta


def test_znode_ctime_fills_in_when_metadata_stores_none():
    data = serialize_ledger_metadata(doc_ledger(ctime=None))
    assert parse_ledger_metadata(7, data, znode_ctime=123).ctime == 123
    assert parse_ledger_metadata(7, DOC_V3, znode_ctime=123).ctime == 1700000000000


def test_fields_other_than_state_are_ignored_unless_closed():
    # A writer puts length 0 and lastEntryId -1 for non-closed ledgers; readers ignore whatever is there.
    text = DOC_V2.replace(b"state: CLOSED", b"state: IN_RECOVERY")
    meta = parse_ledger_metadata(7, text)
    assert (meta.state, meta.last_entry_id, meta.length) == (LedgerState.IN_RECOVERY, -1, 0)


def test_password_without_digest_type_reads_as_crc32():
    meta = parse_ledger_metadata(7, DOC_V2.replace(b"digestType: CRC32C\n", b""))
    assert meta.digest_type is DigestType.CRC32


def test_no_password_means_no_digest_type():
    meta = parse_ledger_metadata(7, DOC_V2.replace(b'password: "secret"\n', b""))
    assert (meta.digest_type, meta.password) == (None, None)
    assert parse_ledger_metadata(7, serialize_ledger_metadata(meta)) == dataclasses.replace(meta, format_version=3)


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("state", list(LedgerState))
def test_round_trips(version, state):
    closed = state is LedgerState.CLOSED
    meta = doc_ledger(state=state, last_entry_id=15 if closed else -1, length=1234 if closed else 0,
                      custom_metadata=(("k", b"\x00\xff binary"), ("empty", b"")), password=b"p\x00\xfe")  # fmt: skip
    if version < 3:
        meta = dataclasses.replace(meta, ctoken=None)
    if version == 1:
        meta = dataclasses.replace(meta, ack_quorum=2, digest_type=None, password=None, ctime=None, custom_metadata=())
    meta = dataclasses.replace(meta, format_version=version)
    assert parse_ledger_metadata(7, serialize_ledger_metadata(meta, version)) == meta


MALFORMED = {
    "empty": b"",
    "bad header": b"BookieMetadataFormatVersoin\t3\n\x00",
    "version 4": HEADER + b"4\n" + DOC_V3[len(HEADER) + 2 :],
    "version 0": HEADER + b"0\n",
    "version not a number": HEADER + b"x\n",
    "no newline after version": HEADER + b"33333333333",
    "negative version": HEADER + b"-1\n",
    "truncated varint": HEADER + b"3\n\x99",
    "varint too long": HEADER + b"3\n\xff\xff\xff\xff\xff\x01",
    "varint negative as int32": HEADER + b"3\n\xff\xff\xff\xff\x0f",
    "length past end": DOC_V3[:-1],
    "garbage protobuf": HEADER + b"3\n\x05\xff\xff\xff\xff\xff",
    "missing required fields": HEADER + b"3\n\x02\x08\x02",
    "v2 garbage": HEADER + b"2\nthis is { not text format",
    "v2 unknown field": DOC_V2 + b"colour: 3\n",
    "v2 not utf-8": HEADER + b"2\nquorumSize: \xff",
    "v2 missing required": HEADER + b"2\nquorumSize: 2\n",
    "v1 too few lines": HEADER + b"1\n2\n3",
    "v1 bad number": HEADER + b"1\n2\nthree\n0\n",
    "v1 segment without bookies": HEADER + b"1\n2\n3\n0\n0",
    "v1 empty line": HEADER + b"1\n2\n3\n0\n\n",
    "v1 ensemble size mismatch": HEADER + b"1\n2\n3\n0\n0\ta:1\tb:1\n",
    "write quorum above ensemble": DOC_V2.replace(b"quorumSize: 2", b"quorumSize: 4"),
    "ack quorum above write quorum": DOC_V2.replace(b"ackQuorumSize: 2", b"ackQuorumSize: 3"),
    "zero ensemble": HEADER + b"1\n0\n0\n0\n",
    "no ensembles": HEADER + b"1\n1\n1\n0\n",
    "segments going backwards": DOC_V2.replace(b"firstEntryId: 10", b"firstEntryId: -5"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_metadata_raises_a_format_error(name):
    with pytest.raises(MetadataFormatError, match="ledger 7"):
        parse_ledger_metadata(7, MALFORMED[name])


def test_errors_name_the_offset():
    with pytest.raises(MetadataFormatError, match=r"153 bytes at offset 32 runs past the end \(152 bytes left\)"):
        parse_ledger_metadata(7, DOC_V3[:-1])
    with pytest.raises(MetadataFormatError, match=r"corrupt at offset 24"):
        parse_ledger_metadata(7, MALFORMED["bad header"])
    with pytest.raises(MetadataFormatError, match=r"^/ledgers/00/0000/L0007: "):
        parse_ledger_metadata(7, b"", source="/ledgers/00/0000/L0007")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # protobuf's text parser on mangled escapes
@pytest.mark.parametrize("sample", [DOC_V3, DOC_V2, DOC_V1])
def test_damaged_bytes_only_ever_raise_format_errors(sample):
    rng = random.Random(20240901)
    damaged = [sample[:cut] for cut in range(len(sample))]
    for _ in range(300):
        buf = bytearray(sample)
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(HEADER) + 2, len(buf))] = rng.randrange(256)
        damaged.append(bytes(buf))
    for data in damaged:
        try:
            parse_ledger_metadata(7, data)
        except MetadataFormatError:
            pass


def test_model_rejects_inconsistent_construction():
    with pytest.raises(MetadataFormatError, match="both be set"):
        doc_ledger(password=None)
    with pytest.raises(MetadataFormatError, match="last_entry_id -1"):
        doc_ledger(state=LedgerState.OPEN)


# --- write sets (formats doc section 8.1) ---


def fragment(ensemble_size, write_quorum, first=0, last=None):
    bookies = tuple(f"b{i}:1" for i in range(ensemble_size))
    meta = LedgerMetadata(
        ledger_id=1, format_version=3, ensemble_size=ensemble_size, write_quorum=write_quorum, ack_quorum=1,
        state=LedgerState.OPEN if last is None else LedgerState.CLOSED,
        last_entry_id=-1 if last is None else last, length=0, segments=((first, bookies),),
        digest_type=None, password=None, ctime=None, custom_metadata=(), ctoken=None,
    )  # fmt: skip
    return meta.fragments()[0]


def test_round_robin_write_sets_match_the_verified_example():
    f = fragment(5, 3)
    assert [f.write_set(e) for e in range(6)] == [(0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 0), (4, 0, 1), (0, 1, 2)]
    assert list(f.entries_of(0, upto=20)) == [0, 3, 4, 5, 8, 9, 10, 13, 14, 15, 18, 19, 20]
    assert [e for e in f.entries_of(3, upto=20) if e >= 10] == [11, 12, 13, 16, 17, 18]


def test_holds_agrees_with_write_sets_including_ids_past_32_bits():
    f = fragment(5, 3)
    ids = [*range(0, 50), 2**31 - 4, 2**31 - 3, 2**31 - 1, 2**31, 3_000_000_000, 2**63 - 7, 2**63 - 1]
    for e in ids:
        members = f.write_set(e)
        assert all(0 <= b < 5 for b in members)
        assert {b for b in range(5) if f.holds(b, e)} == set(members)
    assert f.write_set(3_000_000_000) == (0, 1, 2)  # 3e9 mod 5 = 0; a 32-bit cast would give -1


def test_entries_of_respects_fragment_bounds_and_needs_a_limit_when_open():
    closed = fragment(3, 2, first=4, last=11)
    assert list(closed.entries_of(0)) == [5, 6, 8, 9, 11]  # indexes (e mod 3) and ((e+1) mod 3)
    assert list(closed.entries_of(0, upto=8)) == [5, 6, 8]
    with pytest.raises(ValueError, match="open-ended"):
        fragment(3, 2).entries_of(0)
    with pytest.raises(ValueError):
        closed.entries_of(3)
    assert not closed.holds(3, 5)
    assert closed.bookie_index("b2:1") == 2 and closed.bookie_index("elsewhere:1") is None


def test_fragments_drop_empty_segments_and_stop_at_last_entry():
    four = ("a:1", "b:1", "c:1")
    segments = ((0, four), (5, four[::-1]), (5, four), (9, four[1:] + four[:1]))
    meta = doc_ledger(segments=segments, last_entry_id=12)
    spans = [(f.index, f.first_entry_id, f.last_entry_id, f.is_last) for f in meta.fragments()]
    assert spans == [(0, 0, 4, False), (2, 5, 8, False), (3, 9, 12, True)]

    recovered_below_last_segment = doc_ledger(segments=segments, last_entry_id=7).fragments()
    assert [(f.index, f.last_entry_id, f.is_last) for f in recovered_below_last_segment] == [(0, 4, False), (2, 7, True)]
    assert doc_ledger(last_entry_id=-1, length=0).fragments() == ()

    open_meta = doc_ledger(segments=segments, state=LedgerState.OPEN, last_entry_id=-1, length=0)
    assert [(f.index, f.last_entry_id, f.is_last) for f in open_meta.fragments()] == [
        (0, 4, False), (2, 8, False), (3, None, True)
    ]  # fmt: skip


# --- the real corpus ---


def corpus_ledgers() -> dict[int, LedgerMetadata]:
    ledgers = {}
    for node in json.loads((CORPUS / "zk-dump.json").read_text()):
        ledger_id = ledger_id_from_path(LedgerManager.HIERARCHICAL, "/ledgers", node["path"])
        if ledger_id is not None:
            ledgers[ledger_id] = parse_ledger_metadata(ledger_id, base64.b64decode(node["data_b64"]))
    return ledgers


def test_every_corpus_ledger_decodes_as_the_real_client_read_it():
    ledgers = corpus_ledgers()
    live = [l for l in manifest()["ledgers"] if l["status"] != "DELETED"]
    assert sorted(ledgers) == sorted(l["ledger_id"] for l in live)
    for expected in live:
        meta, stored = ledgers[expected["ledger_id"]], expected["metadata"]
        assert meta.state.name == stored["state"]
        assert (meta.last_entry_id, meta.length) == (stored["last_entry_id"], stored["length"])
        assert (meta.ensemble_size, meta.write_quorum, meta.ack_quorum) == (
            stored["ensemble_size"], stored["write_quorum"], stored["ack_quorum"])  # fmt: skip
        assert meta.digest_type.name == stored["digest_type"].replace("MAC", "HMAC")
        assert meta.password == expected["password"].encode()
        assert meta.format_version == stored["metadata_format_version"]
        assert dict(meta.custom_metadata) == {k: v.encode() for k, v in expected["custom_metadata"].items()}
        assert meta.segments == tuple((e["first_entry_id"], tuple(e["bookies"])) for e in expected["ensembles"])
        assert parse_ledger_metadata(meta.ledger_id, serialize_ledger_metadata(meta)) == meta


def test_write_sets_reproduce_the_manifest_placement_for_every_ledger():
    ledgers = corpus_ledgers()
    for expected in manifest()["ledgers"]:
        if expected["status"] == "DELETED":
            continue
        meta = ledgers[expected["ledger_id"]]
        # Open ledgers have no end in metadata: the manifest counts the entries actually written.
        upto = None if meta.is_closed else expected["last_entry_id_written"]
        placed: dict[str, list[int]] = {}
        for frag in meta.fragments():
            for index, bookie in enumerate(frag.bookies):
                placed.setdefault(bookie, []).extend(frag.entries_of(index, upto=upto))
        placed = {bookie: ids for bookie, ids in placed.items() if ids}
        assert placed == expected["expected_on_by_placement"], expected["ledger_id"]
