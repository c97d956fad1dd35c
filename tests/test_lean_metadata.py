"""The lean metadata decode of a pass's index step: the native form (``scanner/native/lean_metadata.c``) gives what the Python reference
gives (the whole metadata decoded, then digest type, password and the completeness count taken from it, and whether
an ensemble has the bookie) on every corpus ledger and on generated and damaged metadata, or leaves the ledger to the
reference; never anything else."""

from __future__ import annotations

import base64
import json
import random
from array import array

from hypothesis import given
from hypothesis import strategies as st

from corpus import CORPUS, reference_walker
from fuzz.budget import fuzz_settings
from scanner.metadata.ledger import (LedgerMetadata, LedgerState, parse_ledger_metadata,
                                     serialize_ledger_metadata)
from scanner.metadata.ledger_paths import LedgerManager, ledger_id_from_path
from scanner.native import switch
from scanner.scan.lean_metadata import lean_ledgers, lean_reference, placed_ledgers, placed_reference
from scanner.storage.entry import DigestType

HEADER = b"BookieMetadataFormatVersion\t3\n"
BOOKIES = [f"10.0.0.{i}:3181" for i in range(1, 6)]


def native(ledger_id: int, data, bookie_id: str, entry_ids):
    return switch.native_code().lean_batch([ledger_id], [data], bookie_id.encode(), [entry_ids])[0]


def agrees(ledger_id: int, data, bookie_id: str, entry_ids) -> bool:
    """Whether the native form gave the reference's answer (True) or left the ledger to it (False); its placement
    answer too, which it gives from the same decode, and where the ledger is placed, the answer from that decode
    kept (the `.idx` index step's), which must be the same."""
    code = switch.native_code()
    found = native(ledger_id, data, bookie_id, entry_ids)
    placed = code.placed_batch([data], bookie_id.encode())[0]
    if placed is not None:
        assert bool(placed) == placed_reference(ledger_id, data, bookie_id)
        assert placed is False or type(placed) is bytes
        if placed:
            assert code.lean_placed_batch([ledger_id], [placed], [entry_ids]) == [found]
    if found is None:
        return False
    assert placed is not None
    assert found == lean_reference(ledger_id, data, bookie_id, entry_ids)
    return True


def owed_entries(meta: LedgerMetadata, bookie_id: str) -> list[int]:
    owed = set()
    for fragment in meta.fragments():
        index = fragment.bookie_index(bookie_id)
        if index is not None and fragment.last_entry_id is not None:
            owed.update(fragment.entries_of(index))
    return sorted(e for e in owed if e >= 0)  # an index holds no negative entry ids


def index_variants(meta: LedgerMetadata, bookie_id: str) -> list[array]:
    """Entry ids an index might hold: all owed, one short, one foreign added, none, and past the last entry."""
    owed = owed_entries(meta, bookie_id)
    last = max(meta.last_entry_id, 0)
    foreign = [e for e in range(last + 2) if e not in owed][:1]
    variants = [owed, owed[1:], sorted(owed + foreign), [], owed + [last + 5, 2**63 + 7]]
    return [array("Q", ids) for ids in variants]


def corpus_nodes() -> list[tuple[int, bytes]]:
    nodes = []
    for node in json.loads((CORPUS / "zk-dump.json").read_text()):
        ledger_id = ledger_id_from_path(LedgerManager.HIERARCHICAL, "/ledgers", node["path"])
        if ledger_id is not None:
            nodes.append((ledger_id, base64.b64decode(node["data_b64"])))
    return nodes


def test_the_lean_decoder_is_built():
    assert switch.native_code() is not None


def test_every_corpus_ledger_decodes_lean_as_the_reference_decodes_it():
    nodes = corpus_nodes()
    assert nodes
    for ledger_id, data in nodes:
        meta = parse_ledger_metadata(ledger_id, data)
        for bookie_id in sorted({b for _, members in meta.segments for b in members}) + ["elsewhere:3181"]:
            for entry_ids in index_variants(meta, bookie_id):
                assert agrees(ledger_id, data, bookie_id, entry_ids) == (meta.format_version == 3)


def test_a_batch_mixes_native_and_reference_answers_in_order():
    meta = LedgerMetadata(7, 3, 3, 2, 2, LedgerState.CLOSED, 9, 100, ((0, tuple(BOOKIES[:3])),), DigestType.CRC32C,
                          b"pw", None, (), None)
    v3, v2 = serialize_ledger_metadata(meta, 3), serialize_ledger_metadata(meta, 2)
    owed = array("Q", owed_entries(meta, BOOKIES[0]))
    ids, data, entry_ids = [7, 8, 9, 10, 11], [v3, v2, b"damaged", None, v3], [owed, owed, owed, owed, None]
    expected = [(3, b"pw", True), (3, b"pw", True), None, None, None]
    assert lean_ledgers(ids, data, BOOKIES[0], entry_ids) == expected
    with reference_walker():
        assert lean_ledgers(ids, data, BOOKIES[0], entry_ids) == expected
    assert native(7, v3, BOOKIES[0], owed[1:]) == (3, b"pw", False)
    assert native(7, v3, BOOKIES[0], list(owed)) is None  # not an array('Q'): left to the reference


def test_a_ledger_is_placed_on_a_bookie_that_any_of_its_ensembles_has():
    meta = LedgerMetadata(7, 3, 3, 2, 2, LedgerState.CLOSED, 9, 100,
                          ((0, tuple(BOOKIES[:3])), (5, (BOOKIES[3], *BOOKIES[1:3]))), DigestType.CRC32C, b"pw", None,
                          (), None)
    v3, v2 = serialize_ledger_metadata(meta, 3), serialize_ledger_metadata(meta, 2)
    ids, data = [7, 8, 9, 10], [v3, v2, b"damaged", None]
    for bookie_id, placed in ((BOOKIES[0], True), (BOOKIES[3], True), (BOOKIES[4], False)):
        expected = [placed, placed, None, None]  # (None: the ledger is decoded whole, which words the error)
        # (the native form keeps the decode of a placed ledger, truthy, where the reference says True)
        assert [None if p is None else bool(p) for p in placed_ledgers(ids, data, bookie_id)] == expected
        with reference_walker():
            assert placed_ledgers(ids, data, bookie_id) == expected
        native_placed = switch.native_code().placed_batch(data, bookie_id.encode())
        assert [None if p is None else bool(p) for p in native_placed] == [placed, None, None, None]


def test_the_lean_answer_from_a_kept_decode_is_the_answer_from_the_bytes():
    meta = LedgerMetadata(7, 3, 3, 2, 2, LedgerState.CLOSED, 9, 100,
                          ((0, tuple(BOOKIES[:3])), (5, (BOOKIES[3], *BOOKIES[1:3]))), DigestType.CRC32C, b"pw", None,
                          (), None)
    v3, v2 = serialize_ledger_metadata(meta, 3), serialize_ledger_metadata(meta, 2)
    owed = array("Q", owed_entries(meta, BOOKIES[1]))
    ids, data = [7, 8, 9, 10, 11], [v3, v2, b"damaged", None, v3]
    placements = placed_ledgers(ids, data, BOOKIES[1])
    assert type(placements[0]) is bytes and placements[1] is True  # (version 2: the reference placed it)
    entry_ids = [owed, owed, owed, owed, owed[1:]]
    expected = [(3, b"pw", True), (3, b"pw", True), None, None, (3, b"pw", False)]
    assert lean_ledgers(ids, data, BOOKIES[1], entry_ids, placements) == expected
    assert lean_ledgers(ids, data, BOOKIES[1], entry_ids) == expected
    with reference_walker():
        assert lean_ledgers(ids, data, BOOKIES[1], entry_ids, placed_ledgers(ids, data, BOOKIES[1])) == expected


def test_a_kept_decode_that_is_not_of_its_form_is_left_to_the_reference():
    code = switch.native_code()
    meta = LedgerMetadata(7, 3, 3, 2, 2, LedgerState.CLOSED, 9, 100, ((0, tuple(BOOKIES[:3])),), DigestType.CRC32C,
                          b"pw", None, (), None)
    kept = code.placed_batch([serialize_ledger_metadata(meta, 3)], BOOKIES[0].encode())[0]
    owed = array("Q", owed_entries(meta, BOOKIES[0]))
    assert code.lean_placed_batch([7], [kept], [owed]) == [(3, b"pw", True)]
    for damaged in (kept[:-1], kept + b"x", kept[:20], b"", True, None, "text"):
        assert code.lean_placed_batch([7], [damaged], [owed]) == [None]
    segments_beyond = bytearray(kept)
    segments_beyond[56:64] = (1 << 40).to_bytes(8, "little")  # the head's count of segments
    assert code.lean_placed_batch([7], [bytes(segments_beyond)], [owed]) == [None]
    assert code.lean_placed_batch([-1, 2**64], [kept, kept], [owed, owed]) == [None, None]  # not a ledger id
    assert code.lean_placed_batch([7], [kept], [None]) == [None]
    assert code.lean_placed_batch([7], [kept], [list(owed)]) == [None]  # not an array('Q'): left to the reference


@st.composite
def ledgers(draw) -> LedgerMetadata:
    ensemble_size = draw(st.integers(1, 5))
    write_quorum = draw(st.integers(1, ensemble_size))
    state = draw(st.sampled_from(list(LedgerState)))
    firsts = sorted(draw(st.lists(st.integers(-3, 40), min_size=1, max_size=4)))
    segments = tuple((first, tuple(draw(st.permutations(BOOKIES))[:ensemble_size])) for first in firsts)
    last = draw(st.integers(-1, 50)) if state is LedgerState.CLOSED else -1
    digest_type = draw(st.sampled_from([None, *DigestType]))
    return LedgerMetadata(draw(st.integers(0, 2**63 - 1)), 3, ensemble_size, write_quorum,
                          draw(st.integers(-2, write_quorum)), state, last, 0 if last < 0 else 10 * (last + 1),
                          segments, digest_type, None if digest_type is None else draw(st.binary(max_size=8)),
                          draw(st.none() | st.integers(0, 2**62)), (("application", b"pulsar"),) * draw(st.integers(0, 1)),
                          draw(st.none() | st.integers(-5, 5)))


@fuzz_settings()
@given(ledgers(), st.sampled_from(BOOKIES), st.randoms(use_true_random=False))
def test_generated_metadata_decodes_lean_as_the_reference_decodes_it(meta, bookie_id, rng):
    data = serialize_ledger_metadata(meta, 3)
    for entry_ids in index_variants(meta, bookie_id):
        assert agrees(meta.ledger_id, data, bookie_id, entry_ids)
    owed = owed_entries(meta, bookie_id)
    sample = array("Q", sorted(rng.sample(owed, rng.randint(0, len(owed)))))
    assert agrees(meta.ledger_id, data, bookie_id, sample)


@fuzz_settings()
@given(ledgers(), st.sampled_from(BOOKIES), st.randoms(use_true_random=False))
def test_damaged_metadata_is_decoded_as_the_reference_decodes_it_or_left_to_it(meta, bookie_id, rng):
    data = bytearray(serialize_ledger_metadata(meta, 3))
    for _ in range(rng.randint(1, 4)):
        where = rng.randrange(len(HEADER) - 3, len(data))
        data[where] = rng.choice([0x00, 0x01, 0x7F, 0x80, 0xFF, rng.randrange(256)])
    damaged = [bytes(data), bytes(data[:rng.randrange(len(data))])]
    for raw in damaged:
        for entry_ids in index_variants(meta, bookie_id):
            agrees(meta.ledger_id, raw, bookie_id, entry_ids)


FIELDS = [(number, kind) for number, kind in ((1, "int32"), (2, "int32"), (3, "int64"), (4, "int64"), (5, "enum"),
                                              (7, "enum"), (9, "int32"), (10, "int64"), (12, "int64"))]
HOSTILE = [0, 1, 2, 3, 4, 5, -1, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63 - 1, -(2**63), 2**64 - 1]


def _varint(value: int) -> bytes:
    value &= 2**64 - 1
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


@fuzz_settings()
@given(ledgers(), st.sampled_from(BOOKIES),
       st.lists(st.tuples(st.sampled_from(FIELDS + [(6, "bytes"), (8, "bytes"), (11, "bytes"), (13, "int64"),
                                                     (1, "bytes")]),
                          st.sampled_from(HOSTILE), st.binary(max_size=12)), min_size=1, max_size=3))
def test_fields_appended_out_of_range_or_of_the_wrong_wire_type_are_decoded_as_the_reference_does(meta, bookie_id,
                                                                                                    extra):
    # Protobuf keeps the last of a repeated scalar field: a field appended wins, whatever its value.
    serialized = serialize_ledger_metadata(meta, 3)[len(HEADER):]
    body = serialized[next(i for i, byte in enumerate(serialized) if byte < 0x80) + 1:]  # after the length varint
    for (number, kind), value, raw in extra:
        if kind == "bytes":
            body += _varint(number << 3 | 2) + _varint(len(raw)) + raw
        else:
            body += _varint(number << 3) + _varint(value)
    data = HEADER + _varint(len(body)) + body
    for entry_ids in index_variants(meta, bookie_id):
        agrees(meta.ledger_id, data, bookie_id, entry_ids)


def test_hostile_lengths_are_left_to_the_reference():
    rng = random.Random(21)
    for length in (0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 2**63, 2**64 - 1):
        for body in (_varint(length), b"\x32" + _varint(length), b"\x42" + _varint(length) + b"x",
                     b"\x32\x05" + b"\x0a" + _varint(length)):
            data = HEADER + _varint(len(body)) + body
            assert native(rng.randrange(100), data, BOOKIES[0], array("Q")) is None
