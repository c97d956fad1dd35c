"""The walk of a full pass (:mod:`scanner.scan.full_pass`): each entry log once, every digest verified, every
location the index holds matched against the record the walk finds there (condition 3 and the index-to-record check
as a join), every finished log's ledgers map checked against what the walk saw. What a walk finds is judged once
confirmed (:mod:`scanner.scan.confirmation`).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterator

from scanner.checks.entry_log_check import judge_entry_log
from scanner.checks.findings import Category, Finding
from scanner.checks.ledger_check import RecordFault
from scanner.scan.record_walk import walk_records
from scanner.scan.targeted import LedgerScanner
from scanner.storage.bookie import BookieStorage, EntryLogFile
from scanner.storage.dbstorage import DbIndexError
from scanner.storage.entry import DIGEST_LENGTH
from scanner.storage.entrylog import (LENGTH_PREFIX, PACE_INTERVAL, EntryLog, EntryLogError, MissingEntryLog,
                                     TruncatedRecord, ZeroedHeader)
from scanner.storage.indexfile import IndexFileError
from scanner.storage.location import EntryLocation

log = logging.getLogger(__name__)

# How long a DirectEntryLogger log's ledgers map, announced by its header but not (yet) as the walk saw, is read
# again before it is reported: the map's own write comes right after the header's.
MAP_WRITE_WAIT = 5.0


class Stopped(Exception):
    """A walk ended early at the caller's request (its ``checkpoint`` said so)."""


@dataclass
class _LogWalk:
    """One walk of one log: what it found that is not judged yet, and how far judging has got."""

    log_file: EntryLogFile
    entry_log: EntryLog
    walk: object  # a walk from scanner.scan.record_walk.walk_records
    whole: bool  # walked from its first record (so its ledgers map can be checked)
    faults: dict[int, list[RecordFault]] = field(default_factory=lambda: defaultdict(list))
    drained: int = 0  # index faults of the walk already among ``faults``
    judged: int = 0  # problems of the log already judged
    # cut records and a header of zeros: judged when the walk has ended, on the file read again
    held: list[EntryLogError] = field(default_factory=list)


class LogWalks:
    """The pass's step 3, a part of :class:`scanner.scan.full_pass.BookiePass` (whose state it reads and fills)."""

    def walk(self, log_file: EntryLogFile, start: int | None = None,
             checkpoint: Callable[[int, list[Finding]], bool] | None = None, progress=None,
             pace_interval: int = PACE_INTERVAL) -> list[Finding]:
        """Walk one entry log from ``start`` (a record boundary; None: its first record) to its end.

        About every ``pace_interval`` bytes, ``checkpoint(offset, findings)`` gets the record boundary reached and the
        confirmed findings about everything before it; when it returns True the walk raises
        :class:`Stopped` there. Returns the findings after the last checkpoint.
        """
        try:
            entry_log = EntryLog(log_file.path, log_file.entry_log_id)
        except MissingEntryLog:
            self.vanished.add(log_file.entry_log_id)  # its indexed entries are confirmed by ``finish``
            return []
        except EntryLogError as error:
            return judge_entry_log(log_file.entry_log_id, [error], False)
        self._own_log_ids.add(log_file.entry_log_id)
        with entry_log:
            self.totals.entry_logs_scanned += 1
            first = start if start is not None else (entry_log.header.data_start if entry_log.header else 0)
            expected = () if self.runs is None else self.runs.windows(log_file.entry_log_id, first)
            state = _LogWalk(log_file, entry_log,
                             walk_records(entry_log, self._verifier_for, expected, start, self._known),
                             whole=start is None)
            reached = first

            def pace(n: int) -> None:
                # The checkpoint first: what lies before ``reached`` is judged already, so a restart need not walk
                # it again, however long the pacer then holds the walk (a record longer than the pace interval
                # is paid for whole, several seconds on a slow pass).
                nonlocal reached
                reached += n
                if progress:
                    progress.advance(n)
                if checkpoint is not None and checkpoint(reached, self._settle(state, final=False)):
                    raise Stopped
                self.pacer.take_bytes(n)

            self._walk_records(state, pace, pace_interval)
            if entry_log.changed_since_open():
                # Truncated or replaced under the walk (no bookie does that to a log it still indexes): what
                # the walk saw of it is no evidence. The next pass walks it again.
                log.warning("entry log %d changed under the walk (%d bytes when opened); not judged this pass",
                            log_file.entry_log_id, entry_log.size)
                self.changed.add(log_file.entry_log_id)
                return []
            self._note_ledgers_seen(state)
            found = self._settle(state, final=True)
        if progress and entry_log.size > reached:
            progress.advance(entry_log.size - reached)
        return found

    def _walk_records(self, state: _LogWalk, pace: Callable[[int], None], pace_interval: int) -> None:
        """Walk the log's records; those whose digest fails are faults when the index points at them (or, with no
        index read, when confirmation finds it does)."""
        walk, entry_log_id = state.walk, state.log_file.entry_log_id
        try:
            for failure in walk.failures(pace, pace_interval):
                if failure.indexed or self.runs is None:
                    state.faults[failure.ledger_id].append(
                        RecordFault(failure.entry_id, entry_log_id, failure.pos, False, failure.reason))
        finally:
            self.totals.entries_verified += walk.stats.entries_verified
            self.totals.bytes_scanned += walk.stats.bytes_scanned

    def _note_ledgers_seen(self, state: _LogWalk) -> None:
        """The logs that hold records of deleted ledgers (orphans) and of ledgers the index lacks."""
        if not self._absent and not self._unindexed:
            return  # (none met so far: the walk's ledgers are not asked for)
        entry_log_id = state.log_file.entry_log_id
        misread = {f.found_ledger_id for f in state.walk.index_faults if f.found_ledger_id is not None}
        seen = state.walk.stats.ledgers_seen  # (a log of a busy bookie holds a little of very many ledgers: only
        for ledger_id in self._absent.intersection(seen):  # the few of note are looked at one by one)
            if ledger_id not in misread and self._reports_orphan(ledger_id):
                self.orphans[ledger_id].logs.add(entry_log_id)
        for ledger_id in self._unindexed.keys() & seen:
            self._unindexed[ledger_id].logs.add(entry_log_id)

    def _reports_orphan(self, ledger_id: int) -> bool:
        """Whether this pass reports a deleted ledger met in its logs: on DbLedgerStorage the pass of the ledger's own
        dir (whose logs alone hold its records); on `.idx` storage, whose ledger dirs share one id space of logs,
        the pass of every dir whose logs hold its records (the index, read from the metadata's side, does not show
        the ledger to the pass that owns it)."""
        return self.owns_ledger(ledger_id) or self.storage.layout.storage != "db"

    def _settle(self, state: _LogWalk, final: bool) -> list[Finding]:
        """The confirmed findings about what the walk has passed since the last settling (all of it when ``final``)."""
        entry_log, entry_log_id = state.entry_log, state.log_file.entry_log_id
        index_faults = state.walk.index_faults
        for fault in index_faults[state.drained:]:
            state.faults[fault.ledger_id].append(RecordFault(fault.entry_id, entry_log_id, fault.pos, fault.lost,
                                                             fault.reason))
        state.drained = len(index_faults)
        if final:
            self._add_cut_short(state)
        # The index expects a record right where the log's data stops: the data was cut there.
        cut = entry_log.valid_end is not None and any(
            f.offset == entry_log.valid_end + LENGTH_PREFIX for faults in state.faults.values() for f in faults)
        found = self._confirm(sorted(state.faults), state.faults) if state.faults else []
        state.faults.clear()
        lost_here = [f for f in found if f.category is Category.LOST_ENTRY and f.entry_log == entry_log_id]
        problems = self._file_problems(state, final, cut_where_index_expects_more=bool(lost_here) and cut)
        if problems:
            active = not lost_here and self.storage.is_active_log(state.log_file, entry_log.header_has_map)
            found += judge_entry_log(entry_log_id, problems, active,
                                     lambda: bool(lost_here) or self._indexed_into(state.log_file))
        return found

    def _add_cut_short(self, state: _LogWalk) -> None:
        """When the walk lost its framing right after a record, and the bookie's own files make that record longer
        than its length prefix says (its header's ledger length less the previous entry's; else where the index's
        next record in the log starts), the prefix was cut: the bookie serves the entry short, whatever its digest
        type. That entry is a fault (confirmed as the others are)."""
        entry_log, record = state.entry_log, state.walk.last_record
        end = entry_log.valid_end
        if (record is None or end is None or end >= entry_log.records_end or record.pos + record.length != end
                or not any(p.offset == end for p in entry_log.problems)):
            return
        verifier = self._verifier_for(record.ledger_id)
        if verifier is None or getattr(verifier, "digest_type", None) is None:
            return
        location = EntryLocation(state.log_file.entry_log_id, record.pos)
        with self.reopen() as fresh, LedgerScanner(fresh, self.store, self.bookie_id) as scanner:
            length = scanner.length_from_headers(record.ledger_id, record.entry_id, location,
                                                 DIGEST_LENGTH[verifier.digest_type])
            if length is None:
                length = self._length_to_next_record(scanner, location, end)
        if length is None or length <= record.length:
            return
        self._proven_lengths[(location.entry_log_id, location.pos)] = length
        state.faults[record.ledger_id].append(RecordFault(
            record.entry_id, location.entry_log_id, location.pos, False,
            f"its length prefix says {record.length} bytes; the bookie's own files make the entry {length} bytes "
            "long: it is served cut short"))

    def _length_to_next_record(self, scanner: LedgerScanner, location: EntryLocation, end: int) -> int | None:
        """The length of the entry at ``location`` if it runs up to the next record the index holds in the log,
        which is there and is that entry; None when there is none (or no index was read)."""
        if self.runs is None:
            return None
        window = next(iter(self.runs.windows(location.entry_log_id, end + 1)), None)
        if window is None or not len(window.pos):
            return None
        following = EntryLocation(location.entry_log_id, window.pos[0])
        if scanner.check_record(window.ledger_ids[0], window.entry_ids[0], following, None) is not None:
            return None
        return following.pos - LENGTH_PREFIX - location.pos

    def _file_problems(self, state: _LogWalk, final: bool, cut_where_index_expects_more: bool) -> list[EntryLogError]:
        """The log's file-level damage found since the last settling; a cut record only once the walk has ended
        (the torn tail of the log being written, or damage)."""
        entry_log = state.entry_log
        before_map = len(entry_log.problems)
        map_problems = []
        if final and state.whole and entry_log.valid_end is not None:
            map_problems = self._ledgers_map_problems(state)
            map_problems[:0] = entry_log.problems[before_map:]  # what reading the map found
            if map_problems and self._map_written_since(state):
                map_problems = []
        problems = entry_log.problems[state.judged:before_map]
        state.judged = len(entry_log.problems)
        state.held.extend(p for p in problems if isinstance(p, (TruncatedRecord, ZeroedHeader)))
        problems = [p for p in problems if not isinstance(p, (TruncatedRecord, ZeroedHeader))]
        if not final:
            return problems
        # Judged on a fresh look at the file: the writer may have completed a cut record as the log rotated, or
        # written the header of a log it had just created.
        problems += [p for p in state.held if _still_there(entry_log, p)] + map_problems
        if cut_where_index_expects_more and not problems:
            problems.append(EntryLogError(
                entry_log.path, entry_log.entry_log_id, entry_log.valid_end,
                f"the log's records end at offset {entry_log.valid_end}, where the index expects more: "
                "its data was cut there"))
        return problems

    def _indexed_into(self, log_file: EntryLogFile) -> bool:
        """Whether the bookie's index, read now, locates an entry in ``log_file``: an entry of the ledgers the pass's
        index located there (none: False), or, with no index read (chosen logs), of any ledger. A ledger whose index
        does not read is left out: its own check reports that."""
        entry_log_id = log_file.entry_log_id
        candidates = None
        if self.runs is not None:
            candidates = sorted({ledger_id for window in self.runs.windows(entry_log_id)
                                 for ledger_id in window.ledger_ids})
        if candidates != []:
            with self.reopen() as fresh:
                located = _logs_of_every_ledger(fresh) if candidates is None else _logs_of(fresh, candidates)
                if any(entry_log_id in log_ids and _same_file(fresh, ledger_id, log_file)
                       for ledger_id, log_ids in located):
                    return True
        log.info("entry log %d reads as zeros and the index does not point into it: created, not written yet",
                 entry_log_id)
        return False

    def _map_written_since(self, state: _LogWalk) -> bool:
        """Whether the ledgers map of a DirectEntryLogger log, which did not read or did not agree with the walk, does
        within ``MAP_WRITE_WAIT`` seconds, read again. That logger writes the header, with the map's offset, before
        the map: ``LogMetadata.write`` queues the header block's write, then flushes the buffer holding the map."""
        if not state.entry_log.header.direct:
            return False  # DefaultEntryLogger flushes the map before it writes its offset into the header
        deadline = time.monotonic() + MAP_WRITE_WAIT
        while True:
            try:
                with EntryLog(state.entry_log.path, state.entry_log.entry_log_id) as again:
                    if again.ledgers_map() == state.walk.stats.ledger_bytes:
                        log.info("entry log %d: its ledgers map, read again, is written now and agrees with its "
                                 "records", state.entry_log.entry_log_id)
                        return True
            except EntryLogError:
                return False
            if time.monotonic() >= deadline:
                return False
            time.sleep(MAP_WRITE_WAIT / 20)

    def _ledgers_map_problems(self, state: _LogWalk) -> list[EntryLogError]:
        """The map BookKeeper's garbage collector trusts, against what the walk of the whole log saw (what does not
        read goes to the log's problems)."""
        entry_log = state.entry_log
        items = entry_log.ledgers_map_items()
        if items is None or state.walk.agrees_with_map(items):
            return []
        listed, seen = entry_log.ledgers_map(), state.walk.stats.ledger_bytes
        wrong = sorted({ledger_id for ledger_id, _ in set(listed.items()) ^ set(seen.items())})
        if not wrong:
            return []
        details = [f"ledger {ledger_id}: map {listed.get(ledger_id, 'absent')}, records {seen.get(ledger_id, 'absent')}"
                   for ledger_id in wrong[:5]]
        more = f" and {len(wrong) - 5} more" if len(wrong) > 5 else ""
        return [EntryLogError(entry_log.path, entry_log.entry_log_id, entry_log.header.ledgers_map_offset,
                              "the ledgers map disagrees with the records (bytes per ledger): "
                              + "; ".join(details) + more)]


def _still_there(entry_log: EntryLog, problem: EntryLogError) -> bool:
    """Whether a problem held until the walk's end is there in the file read again now."""
    if isinstance(problem, ZeroedHeader):
        return entry_log.header_zeroed()
    return entry_log.still_cut(problem)


def _logs_of(storage: BookieStorage, ledger_ids: list[int]) -> Iterator[tuple[int, set[int]]]:
    """(ledger id, the entry logs its index locates entries in) of each of ``ledger_ids`` whose index reads."""
    for ledger_id in ledger_ids:
        try:
            yield ledger_id, {location.entry_log_id for _, location in storage.locations(ledger_id)}
        except (IndexFileError, DbIndexError, OSError, ValueError):
            continue


def _logs_of_every_ledger(storage: BookieStorage) -> Iterator[tuple[int, set[int]]]:
    """(ledger id, the entry logs its index locates entries in) of every ledger of the index, as far as it reads."""
    try:
        for ledger_id, entry_ids, raw_locations in storage.indexed_ledgers():
            if entry_ids is not None:
                yield ledger_id, {raw >> 32 for raw in raw_locations}
    except DbIndexError as error:
        log.warning("%s", error)


def _same_file(storage: BookieStorage, ledger_id: int, log_file: EntryLogFile) -> bool:
    """Whether the ledger's locations into entry log ``log_file.entry_log_id`` name that file (DbLedgerStorage's
    ledger dirs each number their logs)."""
    try:
        return storage.entry_log_path(ledger_id, log_file.entry_log_id) == log_file.path
    except MissingEntryLog:
        return False
