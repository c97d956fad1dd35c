"""Fuzzing the parsers of the cluster's metadata and the bookie's config: ledger metadata V1/V2/V3,
ZooKeeper dumps, cookies and bk_server.conf."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import tempfile
from pathlib import Path

from google.protobuf import text_format
from hypothesis import example, given
from hypothesis import strategies as st

from corpus import reference_walker
from fuzz.budget import HOSTILE_LENGTHS, bounded_memory, file_holding, fuzz_settings
from scanner.metadata.ledger import (HEADER_PREFIX, LedgerMetadata, LedgerState, MetadataFormatError,
                                     parse_ledger_metadata, serialize_ledger_metadata)
from scanner.metadata.ledger_paths import LayoutError as LedgerLayoutError
from scanner.metadata.snapshot import DumpFormatError, SnapshotStore
from scanner.metadata.store import MetadataUnavailable
from scanner.storage.entry import DigestType
from scanner.storage.layout import LayoutError, discover_layout, parse_cookie, parse_properties

FRAGMENT_ENTRIES_LOOKED_AT = 50
bookie_ids = st.sampled_from(["127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3183", "b:1", ""])


# --- ledger metadata -------------------------------------------------------------------------


@st.composite
def honest_metadata(draw) -> LedgerMetadata:
    ensemble = draw(st.integers(1, 5))
    write_quorum = draw(st.integers(1, ensemble))
    state = draw(st.sampled_from(list(LedgerState)))
    closed = state is LedgerState.CLOSED
    firsts = sorted(draw(st.lists(st.integers(0, 2**40), min_size=1, max_size=4)))
    firsts[0] = 0
    digest = draw(st.one_of(st.none(), st.sampled_from(list(DigestType))))
    return LedgerMetadata(
        ledger_id=draw(st.integers(0, 2**63 - 1)), format_version=3, ensemble_size=ensemble,
        write_quorum=write_quorum, ack_quorum=draw(st.integers(1, write_quorum)), state=state,
        last_entry_id=draw(st.integers(-1, 2**62)) if closed else -1,
        length=draw(st.integers(0, 2**62)) if closed else 0,
        segments=tuple((f, tuple(draw(st.lists(bookie_ids, min_size=ensemble, max_size=ensemble)))) for f in firsts),
        digest_type=digest, password=None if digest is None else draw(st.binary(max_size=20)),
        ctime=draw(st.one_of(st.none(), st.integers(0, 2**62))), custom_metadata=(), ctoken=None)


def _mutated(data: bytes, draw) -> bytes:
    for _ in range(draw(st.integers(0, 3))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        how = draw(st.sampled_from(["flip", "cut", "insert"]))
        if how == "flip":
            data = data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1:]
        elif how == "cut":
            data = data[:at]
        else:
            data = data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    return data


def _v3_with_length(length: int, body: bytes) -> bytes:
    out, value = bytearray(), length & 0xFFFFFFFFFF
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return HEADER_PREFIX + b"3\n" + bytes(out + bytes([value])) + body


v1_lines = st.lists(st.one_of(st.integers(-2**64, 2**64).map(str), st.sampled_from(["CLOSED", "", " 1", "-102"]),
                              st.lists(bookie_ids, min_size=1, max_size=4).map("\t".join),
                              st.text(max_size=20)), max_size=8)


@st.composite
def metadata_bytes(draw) -> bytes:
    kind = draw(st.sampled_from(["honest", "v3-lying-length", "v2-text", "v1-text", "raw"]))
    if kind == "honest":
        data = serialize_ledger_metadata(draw(honest_metadata()), draw(st.sampled_from([1, 2, 3])))
    elif kind == "v3-lying-length":
        data = _v3_with_length(draw(st.sampled_from(HOSTILE_LENGTHS)), draw(st.binary(max_size=60)))
    elif kind == "v2-text":
        fields = draw(st.lists(st.sampled_from(["quorumSize: 2", "ensembleSize: 3", "state: CLOSED", "state: 9",
                                                "lastEntryId: -5", "length: 99999999999999999999",
                                                "segment { firstEntryId: 0 ensembleMember: \"a\" }",
                                                "segment {", "digestType: HMAC", "password: \"\\x00\"",
                                                "unknownField: 1", "{{{{"]), max_size=8))
        data = HEADER_PREFIX + b"2\n" + "\n".join(fields).encode()
    elif kind == "v1-text":
        data = HEADER_PREFIX + b"1\n" + "\n".join(draw(v1_lines)).encode()
    else:
        data = draw(st.binary(max_size=120))
    return _mutated(data, draw)


@fuzz_settings(share=2)
@given(data=metadata_bytes(), bookie=bookie_ids)
def test_ledger_metadata_decodes_or_raises_format_error(data, bookie):
    with bounded_memory():
        try:
            meta = parse_ledger_metadata(7, data, znode_ctime=1)
        except MetadataFormatError:
            return
        for fragment in meta.fragments():
            index = fragment.bookie_index(bookie)
            if index is not None:
                list(itertools.islice(fragment.entries_of(index, upto=fragment.first_entry_id + 1000),
                                      FRAGMENT_ENTRIES_LOOKED_AT))


def test_honest_metadata_survives_every_format_version():
    """The fuzzer's honest inputs really decode: the mutations start from valid bytes."""
    @fuzz_settings(share=0.5)
    @given(meta=honest_metadata(), version=st.sampled_from([2, 3]))
    def round_trip(meta, version):
        assert parse_ledger_metadata(meta.ledger_id, serialize_ledger_metadata(meta, version)).segments == meta.segments
    round_trip()


# --- ZooKeeper dumps -------------------------------------------------------------------------

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20)
layout_data = st.sampled_from([b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1",
                               b"1\nflat:1", b"2\n", b"\xff", b"9\nx:1"])
ledger_paths = st.sampled_from(["/ledgers/00/0000/L0007", "/ledgers/L0000000007", "/ledgers/00/0000/L000x",
                                "/ledgers/00/0000", "/ledgers/idgen/ID-0000000001"])


@st.composite
def znodes(draw) -> dict:
    path = draw(st.one_of(ledger_paths, st.just("/ledgers/LAYOUT"), st.text(max_size=20)))
    data = draw(st.one_of(layout_data, metadata_bytes())) if draw(st.booleans()) else None
    node = {"path": path, "data_b64": None if data is None else base64.b64encode(data).decode(),
            "ephemeral": draw(st.booleans()), "mzxid": draw(st.integers(0, 2**63)), "version": draw(st.integers(0, 9))}
    if draw(st.booleans()):
        node[draw(st.sampled_from(["data_b64", "mzxid", "version", "ctime", "path", "ephemeral"]))] = draw(json_values)
    if draw(st.booleans()):  # base64 and next to it: padding in and out of place, other characters
        node["data_b64"] = draw(st.text(alphabet="QUJDab+/=0 \né", max_size=12))
    return node


@st.composite
def dump_files(draw) -> bytes:
    kind = draw(st.sampled_from(["znodes", "json", "deep", "raw"]))
    if kind == "znodes":
        return json.dumps(draw(st.lists(znodes(), max_size=8))).encode()
    if kind == "json":
        return json.dumps(draw(json_values)).encode()
    if kind == "deep":  # nesting deeper than any parser's recursion limit
        return b"[" * draw(st.integers(1000, 100_000))
    return draw(st.binary(max_size=200))


@fuzz_settings()
@given(data=dump_files())
@example(data=b'[{"path": "/ledgers/00/0000/L0007", "data_b64": "\\u0080", "ephemeral": false, "mzxid": 0, "version": 0}]')
def test_dump_loads_or_raises_typed_error(data):
    with file_holding(data, "dump.json") as path, bounded_memory():
        try:
            store = SnapshotStore(path)
        except (DumpFormatError, MetadataUnavailable, LedgerLayoutError):
            return
        for ledger_id in itertools.islice(store.ledger_ids(), 20):
            try:
                store.ledger(ledger_id)
            except MetadataFormatError:
                pass


@fuzz_settings()
@given(data=dump_files())
def test_dump_reads_the_same_natively_and_in_python(data):
    """The native packing and record parsing against the Python reference: the same znodes, or the same error."""
    outcomes = []
    with file_holding(data, "dump.json") as path, bounded_memory():
        for walker in (contextlib.nullcontext, reference_walker):
            with walker():
                try:
                    with SnapshotStore(path) as store:
                        paths = ["/ledgers", "/ledgers/LAYOUT", "/ledgers/00/0000/L0007", "/ledgers/L0000000007"]
                        outcomes.append((store.nodes(paths), store.children("/ledgers"), list(store.ledger_ids())))
                except (DumpFormatError, MetadataUnavailable, LedgerLayoutError) as error:
                    outcomes.append(f"{type(error).__name__}: {error}")
    assert outcomes[0] == outcomes[1]


# --- cookies and bk_server.conf --------------------------------------------------------------

cookie_lines = st.one_of(
    st.sampled_from(['bookieHost: "127.0.0.1:3181"', 'journalDir: "/j"', 'ledgerDirs: "1\\t/l"', 'indexDirs: "x"',
                     'ledgerDirs: "2\\t/a"', 'instanceId: "\\xff\\777\\u12"', 'bookieHost: "\\', "junk", ""]),
    st.builds(lambda f, v: f'{f}: "{v}"', st.sampled_from(["bookieHost", "journalDir", "ledgerDirs", "other"]),
              st.text(max_size=20)),
    st.text(max_size=30))


@st.composite
def cookie_texts(draw) -> str:
    version = draw(st.one_of(st.sampled_from(["3", "4", "5", "2", "", "99999999999999999999999"]), st.text(max_size=5)))
    return "\n".join([version, *draw(st.lists(cookie_lines, max_size=6))])


@fuzz_settings()
@given(text=cookie_texts())
def test_cookie_parses_or_raises_layout_error(text):
    with bounded_memory():
        try:
            parse_cookie(text, Path("VERSION"))
        except LayoutError:
            pass


conf_lines = st.one_of(
    st.sampled_from(["ledgerStorageClass=org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
                     "ledgerStorageClass=nonsense", "sortedLedgerStorageEnabled=maybe", "bookiePort=x",
                     "bookiePort=-1", "advertisedAddress=127.0.0.1", "bookieId=b:1", "indexDirectories=/nowhere",
                     "dbStorage_directIOEntryLogger=yes", "key\\", "\\u12", "\\uzzzz=1", "a=b\\,c"]),
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(["ledgerStorageClass", "bookiePort", "advertisedAddress",
                                                         "sortedLedgerStorageEnabled", "listeningInterface"]),
              st.text(max_size=20)),
    st.text(max_size=40))


@fuzz_settings()
@given(conf=st.lists(conf_lines, max_size=8).map("\n".join), cookie=cookie_texts(),
       raw=st.one_of(st.none(), st.binary(max_size=60)))
def test_bookie_conf_and_cookie_give_a_layout_or_a_layout_error(conf, cookie, raw):
    with tempfile.TemporaryDirectory() as scratch:
        ledger_dir = Path(scratch, "ledgers")
        (ledger_dir / "current").mkdir(parents=True)
        (ledger_dir / "current" / "VERSION").write_text(cookie, encoding="utf-8", errors="surrogatepass")
        conf_path = Path(scratch, "bk_server.conf")
        conf_path.write_bytes(raw if raw is not None else conf.encode("utf-8", errors="surrogatepass"))
        with bounded_memory():
            parse_properties(conf)
            try:
                layout = discover_layout(conf_path, ledger_dirs=[ledger_dir])
            except LayoutError:
                return
        assert layout.ledger_dirs == (ledger_dir,) and isinstance(layout.bookie_id, str)
