"""One ledger through its index, by random reads: ``scan --ledger``, suspects, follow-ups, and the
re-reads that confirm what a pass found.

BP-24's first step for one ledger (conditions 1 and 2, and whether every record the index points to
is still there and, when asked, verifies) reads the ledger's index and each record it names; the
judgement itself is in ``scanner.checks``. Whole entry logs are walked by :mod:`scanner.scan.full_pass`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict, defaultdict

from scanner.checks.findings import Category, Finding
from scanner.checks.ledger_check import LedgerEvidence, RecordFault, judge_ledger
from scanner.metadata.ledger import LedgerMetadata, MetadataFormatError
from scanner.scan.orphans import OrphanTrace, orphan_findings
from scanner.scan.pacing import Pacer, Unpaced
from scanner.scan.totals import ScanTotals
from scanner.storage.bookie import BookieStorage
from scanner.storage.dbstorage import DbIndexError
from scanner.storage.entry import METADATA_LENGTH, DigestVerifier, parse_header
from scanner.storage.entrylog import EntryLog, EntryLogError, MissingEntryLog, WrongEntry
from scanner.storage.indexfile import IndexFileError

log = logging.getLogger(__name__)

# How often a ledger's metadata may change under one judgement before we report what we have.
MAX_REJUDGEMENTS = 3
OPEN_LOG_CACHE = 32


class LedgerScanner:
    """Scans ledgers of one bookie one at a time, through their index by random reads, against a metadata store."""

    def __init__(self, storage: BookieStorage, store, bookie_id: str, pacer: Pacer | None = None):
        self.storage = storage
        self.store = store
        self.bookie_id = bookie_id
        self.pacer = pacer or Unpaced()
        self.totals = ScanTotals()
        self._logs: OrderedDict[str, EntryLog] = OrderedDict()
        self.orphans: dict[int, OrphanTrace] = defaultdict(OrphanTrace)
        self.undecodable: set[int] = set()  # ledgers whose metadata does not decode

    def close(self) -> None:
        for entry_log in self._logs.values():
            entry_log.close()
        self._logs.clear()

    def __enter__(self) -> "LedgerScanner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- a ledger ---------------------------------------------------------------------

    def scan_ledger(self, ledger_id: int, verify_digests: bool = False) -> list[Finding]:
        """Conditions 1 and 2 plus the index-to-record check for one ledger.

        Only record headers are read unless ``verify_digests``: then every indexed record's digest is
        checked too (condition 3 for this ledger alone: suspects, follow-ups, ``scan --ledger``).
        """
        self.totals.ledgers_checked += 1
        meta = self._read(ledger_id)
        verifier = verifier_of(meta) if verify_digests else None
        evidence = self.ledger_evidence(ledger_id, verifier)
        findings = judge_ledger(meta, self.bookie_id, evidence)
        if any(f.category is Category.MISSING_LEDGER for f in findings):
            evidence = self._with_logged_records(evidence)
            findings = judge_ledger(meta, self.bookie_id, evidence)
        for _ in range(MAX_REJUDGEMENTS):
            if all(f.category.informational for f in findings):
                break
            # BP-34's rule: the metadata may have moved on while we read; judge again on the fresh copy.
            fresh = self._read(ledger_id)
            if fresh == meta:
                break
            meta = fresh
            findings = judge_ledger(meta, self.bookie_id, evidence)
        if ledger_id in self.undecodable:
            return []
        if meta is None:
            orphan = self.orphans[ledger_id]
            orphan.indexed = None if evidence.indexed is None else len(evidence.indexed)
            orphan.unreadable = sum(1 for f in evidence.faults if f.lost)
            return []
        return findings

    def ledger_evidence(self, ledger_id: int, verifier: DigestVerifier | None) -> LedgerEvidence:
        """What the index shows of the ledger now, each record it points to read back (and verified with
        ``verifier``)."""
        indexed: list[int] = []
        faults: list[RecordFault] = []
        try:
            if self.storage.ledger_index(ledger_id) is None:
                return LedgerEvidence(ledger_id, None)
            for entry_id, location in self.storage.locations(ledger_id):
                indexed.append(entry_id)
                self.pacer.take_entries(1)
                fault = self.check_record(ledger_id, entry_id, location, verifier)
                if fault is not None:
                    faults.append(fault)
        except FileNotFoundError:
            return LedgerEvidence(ledger_id, None)  # deleted under us; the metadata re-read tells
        except (IndexFileError, DbIndexError) as exc:
            return LedgerEvidence(ledger_id, None, tuple(faults), index_problem=str(exc))
        return LedgerEvidence(ledger_id, indexed, tuple(faults))

    def check_record(self, ledger_id: int, entry_id: int, location, verifier: DigestVerifier | None,
                     proven_length: int | None = None) -> RecordFault | None:
        """The record the location names, read now: a fault when it is not there, is another entry's, fails its
        digest (with ``verifier``) or is not ``proven_length`` bytes long (what the bookie's files say it is)."""
        try:
            entry = self.read_record(ledger_id, entry_id, location)
        except WrongEntry as exc:
            return RecordFault(entry_id, location.entry_log_id, location.pos, False, str(exc))
        except EntryLogError as exc:
            return RecordFault(entry_id, location.entry_log_id, location.pos, True, str(exc))
        if proven_length is not None and len(entry) != proven_length:
            return RecordFault(entry_id, location.entry_log_id, location.pos, False,
                               f"its length prefix says {len(entry)} bytes; the bookie's own files make the entry "
                               f"{proven_length} bytes long: it is served cut short")
        if verifier is not None:
            self.pacer.take_bytes(len(entry))
            self.totals.entries_verified += 1
            self.totals.bytes_scanned += len(entry)
            if not verifier.verify(entry):
                return RecordFault(entry_id, location.entry_log_id, location.pos, False,
                                   f"{verifier.digest_type.name} digest mismatch ({len(entry)} bytes)")
        return None

    def read_record(self, ledger_id: int, entry_id: int, location) -> memoryview:
        """The stored entry at ``location``, checked to be (``ledger_id``, ``entry_id``); raises EntryLogError."""
        entry_log = self._open_log(self.storage.entry_log_path(ledger_id, location.entry_log_id),
                                   location.entry_log_id)
        return entry_log.read_entry(location.pos, ledger_id, entry_id)

    def length_from_headers(self, ledger_id: int, entry_id: int, location, digest_length: int) -> int | None:
        """How long the entry at ``location`` is by its header's ledger length (the ledger's bytes up to and including
        it) less the previous entry's (read through this bookie's index); None when this bookie cannot tell."""
        try:
            headers = [self.read_record(ledger_id, entry_id, location)]
            if entry_id > 0:
                located = next((loc for e, loc in self.storage.locations(ledger_id) if e == entry_id - 1), None)
                if located is None:
                    return None  # the previous entry is another bookie's
                headers.append(self.read_record(ledger_id, entry_id - 1, located))
        except (EntryLogError, DbIndexError, IndexFileError, OSError):
            return None
        if any(len(header) < METADATA_LENGTH for header in headers):
            return None
        own, *previous = (parse_header(header).length for header in headers)
        payload = own - (previous[0] if previous else 0)
        return METADATA_LENGTH + digest_length + payload if payload >= 0 else None

    def _with_logged_records(self, evidence: LedgerEvidence) -> LedgerEvidence:
        """For a ledger without index: which of its records still sit in the entry logs."""
        entries: set[int] = set()
        logs: set[int] = set()
        for log_file in self.storage.entry_logs():
            try:
                entry_log = self._open_log(log_file.path, log_file.entry_log_id)
            except MissingEntryLog:
                continue
            ledgers_map = entry_log.ledgers_map()
            if ledgers_map is not None and evidence.ledger_id not in ledgers_map:
                continue  # a finished log says what it holds; only map-less logs need a walk
            for record in entry_log.records(pace=self.pacer.take_bytes):
                if record.ledger_id == evidence.ledger_id:
                    entries.add(record.entry_id)
                    logs.add(log_file.entry_log_id)
        return dataclasses.replace(evidence, logged_entries=sorted(entries), logged_in=tuple(sorted(logs)))

    def orphan_findings(self) -> list[Finding]:
        """Informational findings for data of ledgers the metadata no longer has."""
        return orphan_findings(self.orphans)

    # -- plumbing -----------------------------------------------------------------------------

    def _read(self, ledger_id: int) -> LedgerMetadata | None:
        try:
            return self.store.ledger(ledger_id)
        except MetadataFormatError as exc:
            # Not ours to judge without metadata we can read; never call it deleted.
            if ledger_id not in self.undecodable:
                log.warning("ledger %d not judged: %s", ledger_id, exc)
                self.undecodable.add(ledger_id)
            return None

    def _open_log(self, path, entry_log_id: int) -> EntryLog:
        key = str(path)
        entry_log = self._logs.get(key)
        if entry_log is None:
            entry_log = EntryLog(path, entry_log_id)
            self._logs[key] = entry_log
            if len(self._logs) > OPEN_LOG_CACHE:
                self._logs.popitem(last=False)[1].close()
        else:
            self._logs.move_to_end(key)
        return entry_log


def verifier_of(meta: LedgerMetadata | None) -> DigestVerifier | None:
    """How the ledger's stored entries are verified; None when there is no metadata or no digest type."""
    if meta is None or meta.digest_type is None:
        return None
    return DigestVerifier(meta.digest_type, meta.password or b"")
