"""Fuzzing what the agent reads back: its state files (cursors, suspects, the findings database and the
findings file of earlier versions, the suspect inbox) and the bodies of ``POST /suspects``. A damaged
state file is logged and replaced by a fresh state; a bad body is one ValueError (a 400); nothing else
escapes."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from fuzz.budget import bounded_memory, file_holding, fuzz_settings
from scanner.agent.cursor import Cursor, load_cursor
from scanner.agent.endpoint import suspect_items
from scanner.agent.findingbook import DATABASE_FILE, LEGACY_FILE, FindingBook
from scanner.agent.suspects import INBOX_FILE, STATE_FILE, SuspectQueue, parse_suspect
from scanner.statefile import DamagedStateFile, read_json

LEDGER_DIR = "/data/bk/ledgers"
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**1100), st.floats(),
                    st.text(max_size=12), st.sampled_from(["ledgers", "entry_logs", "waiting", LEDGER_DIR]))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=5)), max_leaves=25)

cursor_fields = [f for f in Cursor.__slots__]
cursor_like = st.fixed_dictionaries({}, optional={name: scalars for name in cursor_fields})
suspect_like = st.one_of(
    st.fixed_dictionaries({"ledger": scalars}), st.fixed_dictionaries({"entry_log": scalars}),
    st.fixed_dictionaries({"kind": st.sampled_from(["ledger", "entry_log", "disk"]), "id": scalars},
                          optional={"ledger_dir": scalars}),
    json_values)
queue_like = st.fixed_dictionaries({}, optional={
    "queued": st.one_of(st.lists(suspect_like, max_size=4), json_values),
    "recent": st.one_of(st.dictionaries(st.text(max_size=10), scalars, max_size=4), json_values)})
findings_like = st.fixed_dictionaries({}, optional={
    "known": st.one_of(st.dictionaries(st.text(max_size=8), st.fixed_dictionaries(
        {"finding": st.one_of(json_values, st.fixed_dictionaries(
            {"category": st.sampled_from(["lost_entry", "corrupt_entry", "nonsense"]), "entries": json_values})),
         "first_seen": scalars, "last_seen": scalars}), max_size=3), json_values),
    "to_mark": json_values})


def _json_text(value) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


def state_files(shape) -> st.SearchStrategy[bytes]:
    """A state file's bytes: well-formed JSON of about the right shape, any JSON, deep nesting, or noise."""
    return st.one_of(shape.map(_json_text), json_values.map(_json_text),
                     st.integers(1000, 100_000).map(lambda n: b"[" * n + b"]" * (n % 2)),
                     st.binary(max_size=100), shape.map(_json_text).map(lambda b: b[:len(b) // 2]))


@fuzz_settings()
@given(data=state_files(cursor_like))
def test_state_file_and_cursor_loader(data):
    with file_holding(data, "cursor-0.json") as path, bounded_memory():
        try:
            read_json(path)
        except DamagedStateFile:
            pass
        cursor = load_cursor(path, LEDGER_DIR)
        assert cursor is None or (cursor.ledger_dir == LEDGER_DIR and 0 <= cursor.pass_progress <= 1)


@fuzz_settings()
@given(queue=state_files(queue_like), inbox=st.lists(st.one_of(suspect_like.map(json.dumps), st.text(max_size=30),
                                                             st.just("[" * 5000)), max_size=6))
def test_suspect_queue_and_inbox_loaders(queue, inbox):
    with tempfile.TemporaryDirectory() as scratch:
        state_dir = Path(scratch)
        (state_dir / STATE_FILE).write_bytes(queue)
        (state_dir / INBOX_FILE).write_text("\n".join(inbox), encoding="utf-8", errors="surrogatepass")
        with bounded_memory():
            suspects = SuspectQueue(state_dir)
            suspects.drain_inbox(lambda suspect: [suspect])
        assert suspects.queued() >= 0


@fuzz_settings()
@given(legacy=state_files(findings_like), database=st.one_of(st.binary(max_size=200), st.just(b"SQLite format 3\x00")))
def test_finding_book_loader(legacy, database):
    """A damaged database is moved aside and a fresh one begun; a damaged record of an earlier version is skipped."""
    with tempfile.TemporaryDirectory() as scratch:
        state_dir = Path(scratch)
        (state_dir / LEGACY_FILE).write_bytes(legacy)
        (state_dir / DATABASE_FILE).write_bytes(database)
        with bounded_memory():
            book = FindingBook(state_dir, [LEDGER_DIR])
        try:
            assert all(count > 0 for count in book.counts().values())
            assert not (state_dir / LEGACY_FILE).exists()
        finally:
            book.close()


@fuzz_settings()
@given(body=st.one_of(st.lists(suspect_like, max_size=5).map(_json_text), suspect_like.map(_json_text),
                      st.integers(1000, 60_000).map(lambda n: b"{\"ledger\":" * n), st.binary(max_size=80)))
def test_post_suspects_body_is_suspects_or_one_value_error(body):
    with bounded_memory():
        try:
            items = suspect_items(body)
            suspects = [parse_suspect(item) for item in items]
        except ValueError:
            return
    assert all(s.id >= 0 for s in suspects)
