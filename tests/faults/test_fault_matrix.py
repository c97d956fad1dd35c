"""The fault matrix: every kind of damage, injected into copies of every corpus bookie, is reported exactly.

Each fault hits one spot of a real bookie written by BookKeeper 4.16.7 (Interleaved, Sorted and
DbLedgerStorage) and names what the scan must add to the clean copy's report: category, ledger,
entry, entry log (and the offset where it names one spot), nothing more; or why nothing is right.
Faults whose finding needs the reworked entry-log pass are in test_pending_core.py.
"""

from __future__ import annotations

import json
import struct

import pytest

from corpus import BOOKIES
from faults.inject import (append, copy_ledger_dir, index_file, move_location_key, overwrite, set_ledger_record,
                           set_location, xor_byte)
from faults.matrix import (ENTRY_HEADER, LEDGERS_MAP_BATCH_HEADER, Fault, cases, check_fault, corrupt, cut_at_record,
                           cut_inside_record, damaged, expect, finished_log_damage, log_path, lost, missing_ledger,
                           nothing, storage_of, unreadable_index, victim_of_finished_log, zero_a_page)
from faults.pristine import PAGE, RECORDS_START, Log, Pristine, Record, pristine
from scanner.cli import main

_INT = struct.Struct(">i")
_ID = struct.Struct(">q")


# --- a byte flipped in each region of a record -----------------------------------------------


def record_length_prefix(model, copy):
    # 0x40 in the top byte: a length no bookie accepts. The walk cannot frame past it; the entry is unreadable.
    # Whether the ledgers map, which the stopped walk cannot confirm past it, is named too is the scan's choice.
    log, victim = victim_of_finished_log(model)
    xor_byte(log_path(copy, log), victim.prefix, 0x40)
    return expect(damaged(log, victim.prefix), lost(log, {(victim.ledger_id, victim.entry_id)}),
                  said=(f"at offset {victim.prefix}: record length",), damage_by_log_only=True)


def record_ledger_id(model, copy):
    # Now it names another live ledger: the index's location holds the wrong entry (BookKeeper: "bad entry"),
    # and a finished log's ledgers map no longer adds up for either ledger.
    log, victim = victim_of_finished_log(model)
    bit = next(b for b in range(8) if model.is_live(victim.ledger_id ^ (1 << b)))
    xor_byte(log_path(copy, log), victim.pos + 7, 1 << bit)
    if not log.ledgers_map_offset:
        return expect(corrupt(log, victim))
    return expect(corrupt(log, victim), damaged(log, log.ledgers_map_offset), said=("ledgers map disagrees",))


def record_byte(offset_in_entry: int):
    """A byte of the victim's stored entry flipped: every header field and the digest are under the digest."""
    def inject(model, copy):
        log, victim = victim_of_finished_log(model)
        xor_byte(log_path(copy, log), victim.pos + offset_in_entry, 0x01)
        return expect(corrupt(log, victim))
    return inject


def record_payload(model, copy):
    log, victim = victim_of_finished_log(model)
    xor_byte(log_path(copy, log), victim.end - 1, 0x01)
    return expect(corrupt(log, victim))


def record_payload_of_dummy_ledger(model, copy):
    log, target = next((log, r) for log in model.logs.values() for r in log.records
                       if model.is_live(r.ledger_id) and not model.has_digest(r.ledger_id)
                       and model.is_indexed_copy(log, r) and r.length > ENTRY_HEADER)
    xor_byte(log_path(copy, log), target.end - 1, 0x01)
    return nothing("a DUMMY-digest ledger stores no digest: BookKeeper's client accepts any payload, "
                   "and there is nothing to check it against")


def record_length_prefix_shortened_in_a_dummy_ledger(model, copy):
    # No digest fails: a DUMMY ledger's entry is served as short as its length prefix says. The bookie's own files say
    # how long it is (the next entry's location, and its header's length, which counts the ledger's bytes so far):
    # the entry is named, as corrupt. The walk loses its framing there, and says so.
    log, target = next((log, r) for log in model.logs.values() for r in log.records
                       if model.is_live(r.ledger_id) and not model.has_digest(r.ledger_id)
                       and model.ledgers[r.ledger_id]["status"] == "CLOSED" and model.owes(r.ledger_id, r.entry_id)
                       and model.is_indexed_copy(log, r) and r.length > ENTRY_HEADER + 24)
    overwrite(log_path(copy, log), target.prefix, _INT.pack(target.length - 16))
    return expect(corrupt(log, target), damaged(log, None), said=("length prefix",), damage_by_log_only=True)


# --- the entry log's header ------------------------------------------------------------------


def log_header_fingerprint(model, copy):
    log = model.finished_log()
    xor_byte(log_path(copy, log), 0, 0x20)  # "BKLO" -> "bKLO"
    return expect(damaged(log, 0))


def log_header_version(model, copy):
    log = model.finished_log()
    xor_byte(log_path(copy, log), 7, 0x06)  # version 1 -> 7
    return expect(damaged(log, 4))


def log_header_zeroed(model, copy):
    # The header lost under the index: the records stay readable where the index points, but BookKeeper's garbage
    # collector may take the log for empty (no ledgers map) and delete it with them.
    log = model.finished_log()
    overwrite(log_path(copy, log), 0, bytes(RECORDS_START))
    return expect(damaged(log, 0), said=("the header is all zeros",))


def log_zeroed_whole(model, copy):
    # Every byte of a log the index points into zeroed: the header and every record the index locates there.
    log = model.finished_log()
    overwrite(log_path(copy, log), 0, bytes(log.size))
    return expect(damaged(log, 0), lost(log, model.lost_from(log, 0)), said=("the header is all zeros",))


def preallocated_log_of_zeros(model, copy):
    newest = max(int(path.stem, 16) for path in (copy / "current").glob("*.log"))
    (copy / "current" / f"{newest + 1:x}.log").write_bytes(bytes(1 << 20))
    return nothing("DirectEntryLogger creates a log at its full size, zero-filled, and writes its header after; "
                   "the index never points into a log before its header is written, and BookKeeper's garbage "
                   "collector deletes such a log as empty")


def log_header_unused_bytes(model, copy):
    log = model.finished_log()
    xor_byte(log_path(copy, log), 512, 0xFF)
    return nothing("BookKeeper reads only the first 20 header bytes (fingerprint, version, ledgers map "
                   "offset and count); the rest of the 1 KiB header is reserved and never read")


def ledgers_map_item_ledger_id(model, copy):
    # Now the map lists a live ledger with no record in this log and misses one that has records:
    # garbage collection trusts the map and could drop the missed ledger's records.
    log = model.finished_log()
    present = {r.ledger_id for r in log.records}
    stranger = next(lid for lid in sorted(model.ledgers) if model.is_live(lid) and lid not in present)
    overwrite(log_path(copy, log), log.ledgers_map_offset + LEDGERS_MAP_BATCH_HEADER, _ID.pack(stranger))
    return expect(damaged(log, None), said=("ledgers map",), damage_by_log_only=True)


def ledgers_map_item_size(model, copy):
    return finished_log_damage(model, copy, lambda log: log.ledgers_map_offset + LEDGERS_MAP_BATCH_HEADER + 15,
                               mask=0x10)


# --- truncation, and a zeroed page -----------------------------------------------------------


def truncated_at_record_boundary(model, copy):
    # The rotated log loses its tail and its ledgers map: the header's map offset now points past the end.
    log = model.finished_log()
    _, lost_entries = cut_at_record(model, copy, log)
    return expect(damaged(log, 8), lost_entries, said=("ledgers map",))


def truncated_mid_record(model, copy):
    log = model.finished_log()
    victim, lost_entries = cut_inside_record(model, copy, log)
    return expect(damaged(log, 8), damaged(log, victim.prefix, victim.ledger_id), lost_entries)


def newest_log_cut_inside_a_record(model, copy):
    log = model.newest_log()
    victim, lost_entries = cut_inside_record(model, copy, log)
    return expect(damaged(log, victim.prefix), lost_entries, damage_by_log_only=True)


def zeroed_page(model, copy):
    log = model.finished_log()
    first_zeroed, keys = zero_a_page(model, copy, log)
    return expect(damaged(log, first_zeroed), keys, said=(f"at offset {first_zeroed}: zeros",),
                  damage_by_log_only=True)


def torn_tail_of_newest_log(model, copy):
    log = model.newest_log()
    last = log.records[-1]
    header = _INT.pack(1000) + struct.pack(">qq", last.ledger_id, last.entry_id + 1)
    append(log_path(copy, log), header + bytes(100))  # a record of 1000 bytes, cut after 116
    return nothing("a half-written record at the end of the log the bookie is still writing, with no index "
                   "entry pointing into it, is a write in progress (BookKeeper appends past it)")


# --- .idx files ------------------------------------------------------------------------------


def index_signature(model, copy):
    return unreadable_index(model, copy, 0, 0x20)  # "BKLE" -> "bKLE"


def index_version(model, copy):
    return unreadable_index(model, copy, 7, 0x06)


def index_master_key_length(model, copy):
    return unreadable_index(model, copy, 10, 0x10)  # a key longer than the header


def index_unused_header_bytes(model, copy):
    _, victim = victim_of_finished_log(model)
    xor_byte(index_file(copy, victim.ledger_id), 1000, 0xFF)
    return nothing("BookKeeper's index header is signature, version, master key, state bits and the "
                   "explicit-LAC buffer; the padding after them up to 1 KiB is never read")


def index_file_deleted(model, copy):
    _, victim = victim_of_finished_log(model)
    index_file(copy, victim.ledger_id).unlink()
    return missing_ledger(model, victim.ledger_id, "no local index", "still sit in entry log")


# --- locations: .idx slots and RocksDB location values ---------------------------------------


def location_removed(model, copy):
    log, victim = victim_of_finished_log(model)
    set_location(copy, model.storage_kind, victim.ledger_id, victim.entry_id, None)
    return expect(("missing_entry", victim.ledger_id, victim.entry_id, None, None))


def location_at_another_entry(model, copy):
    log, victim = victim_of_finished_log(model)
    other_log, other = _another_entry_of(model, victim)
    set_location(copy, model.storage_kind, victim.ledger_id, victim.entry_id, (other_log.entry_log_id, other.pos))
    return expect(corrupt(other_log, victim, at=other),
                  said=(f"ledger {other.ledger_id} entry {other.entry_id}",))


def _another_entry_of(model: Pristine, victim: Record) -> tuple[Log, Record]:
    return min(((log, r) for log in model.logs.values() for r in log.records
                if r.ledger_id == victim.ledger_id and r.entry_id != victim.entry_id
                and model.is_indexed_copy(log, r)),
               key=lambda lr: abs(lr[1].entry_id - victim.entry_id))


def location_past_log_end(model, copy):
    log, victim = victim_of_finished_log(model)
    set_location(copy, model.storage_kind, victim.ledger_id, victim.entry_id, (log.entry_log_id, log.size + PAGE))
    return expect(lost(log, {(victim.ledger_id, victim.entry_id)}))


def location_in_a_log_that_is_gone(model, copy):
    log, victim = victim_of_finished_log(model)
    gone = max(model.logs) + 100
    set_location(copy, model.storage_kind, victim.ledger_id, victim.entry_id, (gone, victim.pos))
    return expect(("lost_entry", victim.ledger_id, victim.entry_id, gone, None))


def location_key_renamed_past_ledger_end(model, copy):
    log, victim = victim_of_finished_log(model)
    move_location_key(copy, victim.ledger_id, victim.entry_id, victim.entry_id + 1_000_000)
    # The stray key names an entry past the closed ledger's last: no reader ever asks for it.
    return expect(("missing_entry", victim.ledger_id, victim.entry_id, None, None))


# --- DbLedgerStorage's `ledgers` DB ----------------------------------------------------------


def ledger_record_removed(model, copy):
    _, victim = victim_of_finished_log(model)
    set_ledger_record(copy, victim.ledger_id, None)
    return missing_ledger(model, victim.ledger_id, "no local index", "still sit in entry log")


INDEX_FILES = frozenset({"interleaved", "sorted"})
DB = frozenset({"db"})
FAULTS = [
    Fault("record-length-prefix", record_length_prefix),
    Fault("record-ledger-id", record_ledger_id),
    Fault("record-entry-id", record_byte(15)),
    Fault("record-last-add-confirmed", record_byte(23)),
    Fault("record-entry-length", record_byte(31)),
    Fault("record-digest", record_byte(ENTRY_HEADER)),
    Fault("record-payload", record_payload),
    Fault("record-payload-dummy-digest", record_payload_of_dummy_ledger),
    Fault("record-length-prefix-shortened-dummy-digest", record_length_prefix_shortened_in_a_dummy_ledger),
    Fault("log-header-fingerprint", log_header_fingerprint),
    Fault("log-header-version", log_header_version),
    Fault("log-header-unused-bytes", log_header_unused_bytes),
    Fault("log-header-zeroed", log_header_zeroed),
    Fault("log-zeroed-whole", log_zeroed_whole),
    Fault("preallocated-log-of-zeros", preallocated_log_of_zeros),
    Fault("ledgers-map-item-ledger-id", ledgers_map_item_ledger_id, needs_finished_log=True),
    Fault("ledgers-map-item-size", ledgers_map_item_size, needs_finished_log=True),
    Fault("newest-log-cut-inside-a-record", newest_log_cut_inside_a_record),
    Fault("truncated-at-record-boundary", truncated_at_record_boundary, needs_finished_log=True),
    Fault("truncated-mid-record", truncated_mid_record, needs_finished_log=True),
    Fault("zeroed-4k-page", zeroed_page, needs_finished_log=True),
    Fault("torn-tail-of-newest-log", torn_tail_of_newest_log),
    Fault("index-signature", index_signature, INDEX_FILES),
    Fault("index-version", index_version, INDEX_FILES),
    Fault("index-master-key-length", index_master_key_length, INDEX_FILES),
    Fault("index-unused-header-bytes", index_unused_header_bytes, INDEX_FILES),
    Fault("index-file-deleted", index_file_deleted, INDEX_FILES),
    Fault("location-removed", location_removed),
    Fault("location-at-another-entry", location_at_another_entry),
    Fault("location-past-log-end", location_past_log_end),
    Fault("location-in-a-log-that-is-gone", location_in_a_log_that_is_gone),
    Fault("location-key-renamed-past-ledger-end", location_key_renamed_past_ledger_end, DB),
    Fault("ledger-record-removed", ledger_record_removed, DB),
]


@pytest.mark.parametrize("bookie, fault", cases(FAULTS))
def test_fault_is_reported_exactly(capsys, tmp_path, bookie, fault):
    check_fault(capsys, tmp_path, bookie, fault)


@pytest.mark.parametrize("bookie", [b for b in BOOKIES if storage_of(b) == "db"])
def test_an_index_rocksdb_that_cannot_open_is_an_unreadable_index_finding(capsys, tmp_path, bookie):
    # the bookie's damage, not the operator's mistake (issue 11): a finding and exit 1, never exit 2
    model = pristine(bookie, capsys)
    copy = copy_ledger_dir(model.ledger_dir, tmp_path / "ledgers")
    (copy / "current" / "locations" / "CURRENT").write_text("MANIFEST-999999\n")  # names a manifest that is gone
    assert main(["scan", "--full-speed", *model.scan_args(copy), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    [unreadable] = [f for f in report["findings"] if f["category"] == "unreadable_index"]
    assert "locations" in unreadable["detail"] and "MANIFEST-999999" in unreadable["detail"]
