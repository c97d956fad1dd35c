"""The fault matrix's machinery: which bookies a fault applies to, and the scan that judges a damaged copy."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from corpus import BOOKIES, CORPUS, manifest, scan
from faults.inject import copy_ledger_dir
from faults.pristine import Pristine, finding_keys, pristine

_STORAGE = {"org.apache.bookkeeper.bookie.InterleavedLedgerStorage": "interleaved",
            "org.apache.bookkeeper.bookie.SortedLedgerStorage": "sorted",
            "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage": "db"}
_MAP_OFFSET = struct.Struct(">q")
INFORMATIONAL = {"orphan_ledger"}


@dataclass(frozen=True)
class Expect:
    """What a scan of the damaged copy reports on top of the clean scan: finding keys (see
    ``finding_keys``) and phrases some finding's detail must contain."""

    keys: frozenset = frozenset()
    said: tuple[str, ...] = ()
    # Why nothing is reported, for a fault BookKeeper itself would not care about.
    unnoticed_because: str | None = None


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
    import pytest

    return [pytest.param(bookie, fault, id=f"{fault.name}-{bookie}-{storage_of(bookie)}")
            for fault in faults for bookie in BOOKIES if fault.applies_to(bookie)]


def check_fault(capsys, tmp_path: Path, bookie: str, fault: Fault) -> None:
    """Inject ``fault`` into a copy of ``bookie`` and assert the scan reports exactly what it expects."""
    model = pristine(bookie, capsys)
    copy = copy_ledger_dir(model.ledger_dir, tmp_path / "ledgers")
    expect = fault.inject(model, copy)
    assert bool(expect.keys) != bool(expect.unnoticed_because), "a fault is either reported or explained"
    status, report = scan(capsys, *model.scan_args(copy))
    found = finding_keys(report)
    assert found - model.baseline == expect.keys, report["findings"]
    assert model.baseline <= found, "the fault hid what the clean copy reports"
    details = " | ".join(f["detail"] for f in report["findings"])
    for phrase in expect.said:
        assert phrase in details
    damaging = {k for k in found if k[0] not in INFORMATIONAL}
    assert status == (1 if damaging else 0)
