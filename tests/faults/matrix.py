"""The fault matrix's machinery: which bookies a fault applies to, and the scan that judges a damaged copy."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from corpus import BOOKIES, CORPUS, manifest, scan_with_both_walkers
from faults.inject import copy_ledger_dir, index_file, overwrite, truncate, xor_byte
from faults.pristine import PAGE, RECORDS_START, Log, Pristine, Record, finding_keys, pristine

_STORAGE = {"org.apache.bookkeeper.bookie.InterleavedLedgerStorage": "interleaved",
            "org.apache.bookkeeper.bookie.SortedLedgerStorage": "sorted",
            "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage": "db"}
_MAP_OFFSET = struct.Struct(">q")
INFORMATIONAL = {"orphan_ledger"}
ENTRY_HEADER = 32
LEDGERS_MAP_BATCH_HEADER = 4 + 8 + 8 + 4  # length, ledger id -1, entry id -2, count
LARGEST_DIGEST = 20  # HMAC-SHA1


@dataclass(frozen=True)
class Expect:
    """What a scan of the damaged copy reports on top of the clean scan: finding keys (see
    ``finding_keys``) and phrases some finding's detail must contain."""

    keys: frozenset = frozenset()
    said: tuple[str, ...] = ()
    # Why nothing is reported, for a fault BookKeeper itself would not care about.
    unnoticed_because: str | None = None
    # damaged_entry_log findings compared by entry log only: which field or record they name is the scan's choice
    damage_by_log_only: bool = False


@dataclass(frozen=True)
class Fault:
    name: str
    inject: Callable[[Pristine, Path], Expect]
    storages: frozenset = frozenset({"interleaved", "sorted", "db"})
    needs_finished_log: bool = False  # a rotated log with a ledgers map, which only the writer's newest lacks

    def applies_to(self, bookie: str) -> bool:
        return storage_of(bookie) in self.storages and (not self.needs_finished_log or has_finished_log(bookie))


def storage_of(bookie: str) -> str:
    return next(_STORAGE[b["ledger_storage_class"]] for b in manifest()["bookies"] if b["name"] == bookie)


def has_finished_log(bookie: str) -> bool:
    for path in (CORPUS / bookie / "ledgers" / "current").glob("*.log"):
        with open(path, "rb") as f:
            head = f.read(16)
        if len(head) == 16 and _MAP_OFFSET.unpack_from(head, 8)[0]:
            return True
    return False


def cases(faults: list[Fault]) -> list:
    """(bookie, fault) pairs for ``pytest.mark.parametrize``, every fault on every bookie it applies to."""
    return [pytest.param(bookie, fault, id=f"{fault.name}-{bookie}-{storage_of(bookie)}")
            for fault in faults for bookie in BOOKIES if fault.applies_to(bookie)]


def check_fault(capsys, tmp_path: Path, bookie: str, fault: Fault) -> None:
    """Inject ``fault`` into a copy of ``bookie`` and assert the scan reports exactly what it expects."""
    model = pristine(bookie, capsys)
    copy = copy_ledger_dir(model.ledger_dir, tmp_path / "ledgers")
    expect = fault.inject(model, copy)
    assert bool(expect.keys) != bool(expect.unnoticed_because), "a fault is either reported or explained"
    status, report = scan_with_both_walkers(capsys, *model.scan_args(copy))
    found = finding_keys(report)
    added, wanted = found - model.baseline, expect.keys
    if expect.damage_by_log_only:
        added, wanted = _damage_by_log(added), _damage_by_log(wanted)
    assert added == wanted, report["findings"]
    hidden = model.baseline - found
    assert all(_gone_with_its_logs(model, key, expect) for key in hidden), \
        f"the fault hid what the clean copy reports: {sorted(hidden)}"
    details = " | ".join(f["detail"] for f in report["findings"])
    for phrase in expect.said:
        assert phrase in details
    damaging = {k for k in found if k[0] not in INFORMATIONAL}
    assert status == (1 if damaging else 0)


def _gone_with_its_logs(model: Pristine, key: tuple, expect: Expect) -> bool:
    """Whether a finding of the clean copy may go unreported in the damaged one: on `.idx` storage, whose index a pass
    reads from the metadata's side, a deleted ledger is seen in its records, so a fault in every entry log that holds
    them (each one a finding of the fault) may hide it."""
    if key[0] not in INFORMATIONAL or model.storage_kind == "db":
        return False
    damaged_logs = {k[3] for k in expect.keys if k[3] is not None}
    return all(log.entry_log_id in damaged_logs for log in model.logs.values()
               if any(record.ledger_id == key[1] for record in log.records))


def _damage_by_log(keys) -> set:
    return {("damaged_entry_log", None, None, k[3], None) if k[0] == "damaged_entry_log" else k for k in keys}


# --- finding keys ----------------------------------------------------------------------------


def corrupt(log: Log, record: Record, at: Record | None = None) -> tuple:
    """``record``'s entry reported corrupt at ``at``'s location (default: its own)."""
    at = at or record
    return ("corrupt_entry", record.ledger_id, record.entry_id, log.entry_log_id, at.pos)


def lost(log: Log, entries) -> set[tuple]:
    return {("lost_entry", ledger, entry, log.entry_log_id, None) for ledger, entry in entries}


def damaged(log: Log, offset: int | None, ledger_id: int | None = None) -> tuple:
    return ("damaged_entry_log", ledger_id, None, log.entry_log_id, offset)


def expect(*keys, said: tuple[str, ...] = (), damage_by_log_only: bool = False) -> Expect:
    flat = set()
    for key in keys:
        flat.update(key if isinstance(key, (set, frozenset)) else {key})
    return Expect(frozenset(flat), said, damage_by_log_only=damage_by_log_only)


def nothing(because: str) -> Expect:
    return Expect(unnoticed_because=because)


def unreadable_index(model, copy, offset: int, mask: int) -> Expect:
    """A byte of the victim ledger's `.idx` header flipped so that BookKeeper cannot read the file."""
    _, victim = victim_of_finished_log(model)
    xor_byte(index_file(copy, victim.ledger_id), offset, mask)
    return missing_ledger(model, victim.ledger_id, "index is unreadable")


def missing_ledger(model: Pristine, ledger_id: int, *said: str) -> Expect:
    keys = {("missing_ledger", ledger_id, e, None, None) for e in model.owed_entries(ledger_id)}
    return expect(keys, said=said)


def finished_log_damage(model: Pristine, copy: Path, offset_in: Callable[[Log], int], mask: int = 0x01) -> Expect:
    """A byte of the finished log's header or ledgers map flipped: the log is damaged, nothing else."""
    log = model.finished_log()
    xor_byte(log_path(copy, log), offset_in(log), mask)
    return expect(damaged(log, None), said=("ledgers map",), damage_by_log_only=True)


# --- damage shared by the finished-log and newest-log rows -----------------------------------


def victim_of_finished_log(model: Pristine) -> tuple[Log, Record]:
    log = model.finished_log()
    return log, model.victim(log)


def log_path(copy: Path, log: Log) -> Path:
    return copy / "current" / log.name


def cut_at_record(model: Pristine, copy: Path, log: Log) -> tuple[Record, set[tuple]]:
    """Truncate ``log`` where an owed record starts: (that record, the lost_entry keys that follow)."""
    victim = model.owed_record(log)
    truncate(log_path(copy, log), victim.prefix)
    return victim, lost(log, model.lost_from(log, victim.prefix))


def cut_inside_record(model: Pristine, copy: Path, log: Log) -> tuple[Record, set[tuple]]:
    """Truncate ``log`` half-way through an owed record (its header stays whole)."""
    victim = model.owed_record(log)
    truncate(log_path(copy, log), victim.pos + victim.length // 2)
    return victim, lost(log, model.lost_from(log, victim.prefix))


def zero_a_page(model: Pristine, copy: Path, log: Log) -> tuple[int, set[tuple]]:
    """Zero a 4 KiB page of ``log``: (the first record prefix zeroed, the lost and corrupt keys that follow)."""
    page, cut, inside = _page_to_zero(log)
    overwrite(log_path(copy, log), page, bytes(PAGE))
    keys = lost(log, {(r.ledger_id, r.entry_id) for r in inside
                      if model.is_indexed_copy(log, r) and model.owes(r.ledger_id, r.entry_id)})
    if cut is not None and model.is_indexed_copy(log, cut) and model.owes(cut.ledger_id, cut.entry_id) \
            and model.has_digest(cut.ledger_id):
        keys.add(corrupt(log, cut))  # its payload runs into the zeroed page
    return inside[0].prefix, keys


def _page_to_zero(log: Log) -> tuple[int, Record | None, list[Record]]:
    """A 4 KiB-aligned page near the middle of the log's records: (offset, the record it cuts into, records
    starting in it). Chosen so the cut record keeps its header and digest and every record starting in the
    page has its whole length prefix zeroed, so what each record suffers is certain."""
    first = -(-RECORDS_START // PAGE) * PAGE
    candidates = []
    for page in range(first, log.records_end - PAGE, PAGE):
        inside = [r for r in log.records if page <= r.prefix < page + PAGE]
        cut = next((r for r in log.records if r.prefix < page < r.end), None)
        if not inside or any(r.prefix > page + PAGE - 4 for r in inside):
            continue
        if cut is not None and cut.pos + ENTRY_HEADER + LARGEST_DIGEST > page:
            continue
        candidates.append((page, cut, inside))
    assert candidates, f"no page to zero in entry log {log.entry_log_id}"
    return min(candidates, key=lambda c: abs(c[0] - log.records_end // 2))
