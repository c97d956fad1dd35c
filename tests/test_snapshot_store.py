"""The dump store at scale: streamed decoding, the same view as the dump, little memory, threads and forks."""

from __future__ import annotations

import base64
from array import array
import io
import json
import os
import tempfile
import threading
import tracemalloc

import pytest

from corpus import CORPUS
from scanner.metadata import json_list
from scanner.metadata.json_list import NotAList, NotJson, json_list_items
from scanner.metadata.ledger_paths import LedgerManager, layout_bytes, ledger_path
from scanner.metadata.snapshot import DumpFormatError, SnapshotStore, write_dump_nodes
from scanner.metadata.store import ZNode

LIVE_DUMP = CORPUS / "zk-dump-live.json"
# numbers, strings with escapes and non-ASCII, nesting: every kind of value a chunk boundary can cut
ITEMS = [
    {"path": "/ledgers/00/0000/L0001", "data_b64": "QkFTRTY0PT0=", "ephemeral": False, "mzxid": 12345678901234},
    [], {}, 0, -1.5e-7, 123456789012345678901234567890, True, None, "",
    "tab\t quote\" backslash\\ unicode \u00e9\u4e2d \ud83d\ude00",
    {"nested": [1, [2, [3, {"deep": "é中"}]]], "empty": {}},
]


def a_line_each(items: list) -> str:
    """The list as write_dump lays a dump out: an item a line."""
    return "[\n" + ",\n".join(json.dumps(item, ensure_ascii=False) for item in items) + "\n]\n"


@pytest.mark.parametrize("indent", [None, 0, 2, "a line each"])
@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 8, 13, 64, 1 << 20])
def test_a_list_read_in_chunks_gives_the_items_json_gives(monkeypatch, indent, chunk):
    monkeypatch.setattr(json_list, "READ_CHUNK", chunk)
    for items in (ITEMS, [], ITEMS[:1], ITEMS[::-1], ITEMS * 50):
        text = a_line_each(items) if indent == "a line each" else json.dumps(items, indent=indent, ensure_ascii=False)
        assert list(json_list_items(io.StringIO(text))) == json.loads(text)


@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
@pytest.mark.parametrize("damage", ["{]", ",", "", "[1,", '{"a": 1}\n{"b": 2}', "1 2"])
def test_damage_after_whole_lines_is_refused_where_the_item_by_item_reader_refuses_it(monkeypatch, chunk, damage):
    monkeypatch.setattr(json_list, "READ_CHUNK", chunk)
    good = a_line_each(ITEMS * 20)[:-3]  # the items, each line but the last ending in a comma
    for text in (f"{good},\n{damage}\n]", f"{good},\n{damage},\n{good[2:]}\n]"):
        with pytest.raises(NotJson) as by_lines:
            list(json_list_items(io.StringIO(text)))
        reader = json_list._ListReader(io.StringIO(text))
        reader._by_lines = False
        with pytest.raises(NotJson) as one_at_a_time:
            list(reader.batches())
        assert str(by_lines.value) == str(one_at_a_time.value)


@pytest.mark.parametrize(
    "text, error, message",
    [
        ("", NotJson, "at character 0"),
        ('[{"a": 1} {"b": 2}]', NotJson, "at character 10: expecting ',' or ']'"),
        ('[{"a": 1},]', NotJson, "at character 10"),
        ('[{"a": 1}', NotJson, "at character 9: expecting ',' or ']'"),
        ("[1] [2]", NotJson, "at character 4: extra data"),
        ('{"path": "/"}', NotAList, "found dict"),
        ('"x"', NotAList, "found str"),
    ],
)
def test_text_that_is_not_a_json_list_is_refused_with_the_place(text, error, message):
    with pytest.raises(error, match=message):
        list(json_list_items(io.StringIO(text)))


def test_every_znode_of_a_dump_reads_back_as_dumped_and_children_follow_the_paths():
    entries = json.loads(LIVE_DUMP.read_text())
    children: dict[str, set[str]] = {}
    for entry in entries:
        parent, _, name = entry["path"].rpartition("/")
        children.setdefault(parent or "/", set()).add(name)
    with SnapshotStore(LIVE_DUMP) as store:
        for entry in entries:
            node = store.node(entry["path"])
            assert node.data == base64.b64decode(entry["data_b64"])
            assert (node.ephemeral, node.mzxid, node.version) == (entry["ephemeral"], entry["mzxid"], entry["version"])
            assert sorted(store.children(entry["path"])) == sorted(children.get(entry["path"], ()))
        assert store.children("/") == ["ledgers"]
        assert store.node("ledgers") is None and store.children("ledgers") == []
        assert store.node("/ledgers/00/0000/L9999") is None


def node_line(path, data, **fields):
    encoded = None if data is None else base64.b64encode(data).decode()
    return json.dumps({"path": path, "data_b64": encoded, "ephemeral": False, "mzxid": 1, "version": 0, **fields})


def test_a_path_given_twice_keeps_the_last_and_no_data_stays_distinct_from_empty_data(tmp_path):
    dump = tmp_path / "dump.json"
    layout = layout_bytes(LedgerManager.HIERARCHICAL)
    lines = [node_line("/ledgers", None), node_line("/ledgers/LAYOUT", layout),
             node_line("/ledgers/x", b"old"), node_line("/ledgers/x", b"", version=3)]
    dump.write_text("[" + ",\n".join(lines) + "]")
    with SnapshotStore(dump) as store:
        assert store.node("/ledgers").data is None
        assert store.node("/ledgers/x") == ZNode("/ledgers/x", b"", False, 1, 3, None)
        assert sorted(store.children("/ledgers")) == ["LAYOUT", "x"]


def test_a_number_zookeeper_cannot_hold_is_a_dump_error(tmp_path):
    dump = tmp_path / "dump.json"
    dump.write_text("[" + node_line("/ledgers", None, mzxid=2**63) + "]")
    with pytest.raises(DumpFormatError, match="'mzxid' must be an integer"):
        SnapshotStore(dump)


def ledger_dump(path, ledgers):
    """A dump of ``ledgers`` ledgers (same metadata bytes each), one znode per line."""
    data = (CORPUS / "zk-dump.json").read_text()
    metadata = base64.b64decode(next(e for e in json.loads(data) if e["path"] == "/ledgers/00/0000/L0046")["data_b64"])

    def nodes():
        yield ZNode("/ledgers", b"", False, 1, 0, None)
        yield ZNode("/ledgers/LAYOUT", layout_bytes(LedgerManager.HIERARCHICAL), False, 2, 0, None)
        for ledger_id in range(ledgers):
            leaf = ledger_path(LedgerManager.HIERARCHICAL, "/ledgers", ledger_id)
            if ledger_id % 10000 == 0:
                yield ZNode(leaf.rsplit("/", 1)[0], b"", False, 3, 0, None)
                if ledger_id == 0:
                    yield ZNode("/ledgers/00", b"", False, 3, 0, None)
            yield ZNode(leaf, metadata, False, 4 + ledger_id, 0, None)

    with open(path, "w") as out:
        write_dump_nodes(nodes(), out)


@pytest.mark.slow
def test_the_store_holds_no_znode_in_python_memory(tmp_path):
    dump = tmp_path / "dump.json"
    ledger_dump(dump, 30000)
    tracemalloc.start()
    try:
        store = SnapshotStore(dump)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    with store:
        assert held < 1 << 20, held  # a dict of 30,000 znodes alone would take over 10 MB
        assert peak < 12 << 20, peak  # one read chunk and a few copies of it, not the decoded list
        assert sum(1 for _ in store.ledger_ids()) == 30000
        assert store.ledger(29999).segments == store.ledger(0).segments


def test_the_store_answers_after_its_dump_is_gone_and_leaves_no_file_behind(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    dump = tmp_path / "dump.json"
    dump.write_bytes(LIVE_DUMP.read_bytes())
    store = SnapshotStore(dump)
    expected = store.ledger(46)
    dump.unlink()
    assert store.ledger(46) == expected and len(list(store.ledger_ids())) == 49
    assert os.listdir(scratch) == []  # its scratch file has no name: nothing is left whatever ends the process
    store.close()
    assert os.listdir(scratch) == []
    assert store.node("/ledgers") is None and store.children("/ledgers") == []
    assert store.root == "/ledgers"


def test_threads_read_at_once(tmp_path):
    dump = tmp_path / "dump.json"
    ledger_dump(dump, 2000)
    with SnapshotStore(dump) as store:
        expected = store.ledger(0).segments
        results = []

        def read_all(offset):
            ids = [(offset + i) % 2000 for i in range(2000)]
            results.append(all(store.ledger(i).ledger_id == i and store.ledger(i).segments == expected for i in ids))

        threads = [threading.Thread(target=read_all, args=(n * 500,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert results == [True] * 4


def test_a_forked_process_reads_the_store_and_its_exit_leaves_the_parent_reading(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with SnapshotStore(LIVE_DUMP) as store:
        expected = store.ledger(46)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                same = store.ledger(46) == expected and len(list(store.ledger_ids())) == 49
                os.write(write_end, b"1" if same else b"0")
                store.close()
            finally:
                os._exit(0)
        os.close(write_end)
        answer = os.read(read_end, 1)
        os.close(read_end)
        os.waitpid(pid, 0)
        assert answer == b"1"
        assert store.ledger(46) == expected and len(list(store.ledger_ids())) == 49
    assert os.listdir(scratch) == []


@pytest.mark.parametrize("walker", ["native", "python"])
@pytest.mark.parametrize("hashing", ["hash", "colliding"])
def test_the_scratch_table_answers_as_the_dump_says_natively_and_in_python(tmp_path, monkeypatch, walker, hashing):
    """Every node, batch, child list and ledger's bytes as the dump gives them (a path given twice: the last), with
    the native lookups and record parser and with the Python reference; also when every hash collides."""
    from scanner.metadata import znode_table

    monkeypatch.setenv("BOOKIE_SCANNER_NATIVE", "1" if walker == "native" else "0")
    if hashing == "colliding":
        monkeypatch.setattr(znode_table, "_hash", lambda path: len(path) % 3)
    nodes = [ZNode("/", b"root", False, 1, 0, None), ZNode("/ledgers", None, False, 2, 0, 5),
             ZNode("/ledgers/LAYOUT", layout_bytes(LedgerManager.HIERARCHICAL), False, 3, 0, 1700000000000),
             ZNode("/ledgers/00", b"", True, 4, -1, -(2**63)), ZNode("/ledgers/00/0000", b"", False, 5, 2**63 - 1, 0)]
    for ledger_id in range(40):
        nodes.append(ZNode(ledger_path(LedgerManager.HIERARCHICAL, "/ledgers", ledger_id), bytes([ledger_id]) * ledger_id,
                           ledger_id % 2 == 0, 10 + ledger_id, ledger_id, None if ledger_id % 3 else ledger_id))
    nodes += [ZNode("/ledgers/00/0000/L0007", b"again", False, 99, 5, None), ZNode("/ledgers/\udcff\u00e9", None, False, 7, 0, None)]
    dump = tmp_path / "dump.json"
    with open(dump, "w") as out:
        write_dump_nodes(nodes, out)
    expected = {node.path: node for node in nodes}  # the last of a path wins
    with SnapshotStore(dump) as store:
        paths = list(expected) + ["/ledgers/00/0000/L0099", "/nothing", "relative", "/ledgers/"]
        assert store.nodes(paths) == [expected.get(path) for path in paths]
        assert [store.node(path) for path in paths] == [expected.get(path) for path in paths]
        assert store.children("/") == ["ledgers"]
        assert store.children("/ledgers") == sorted(["LAYOUT", "00", "\udcff\u00e9"])
        assert store.children("/ledgers/00/0000") == [f"L{i:04d}" for i in range(40)]
        assert store.children("/ledgers/00/0000/L0001") == [] and store.children("relative") == []
        ids = list(range(45)) + [-1, 2**63]
        assert store.ledger_data(ids) == [None if node is None else node.data for _, node in store.ledger_nodes(ids)]
        assert store.ledger_data([7]) == [b"again"] and list(store.ledger_ids()) == list(range(40))


# Items of the common form, and items next to it that the native packer leaves to the Python reference: each read
# (or refused, with the same words) the same with either.
ODD_ITEMS = [
    {"path": "/ledgers/a", "data_b64": "QUJD", "ephemeral": False, "mzxid": 1, "version": 0, "ctime": 5},
    {"path": "/ledgers/b", "data_b64": None, "ephemeral": True, "mzxid": -(2**63), "version": 2**63 - 1, "ctime": None},
    {"path": "/ledgers/c", "data_b64": "QQ==", "extra": [1, 2]},
    {"path": "/ledgers/d", "data_b64": "QR==", "ephemeral": 1, "mzxid": None},
    {"path": "/ledgers/é", "data_b64": "QUI=", "ephemeral": "", "version": 3},
    {"path": "/ledgers/f", "data_b64": "", "ctime": 0},
    {"path": "/ledgers/g", "data_b64": "QUJD=", "mzxid": 7},
    {"path": "/ledgers/h", "data_b64": "QQ", "mzxid": 7},
    {"path": "/ledgers/i", "data_b64": "QU JD"},
    {"path": "/ledgers/j", "data_b64": "QUJDé"},
    {"path": "/ledgers/k", "mzxid": True},
    {"path": "/ledgers/l", "version": 2**63},
    {"path": "/ledgers/m", "ctime": 1.5},
    {"path": "ledgers/n"},
    {"path": None},
    {"data_b64": "QUJD"},
    ["not", "an", "object"],
]


@pytest.mark.parametrize("odd", range(2, len(ODD_ITEMS)))
def test_native_packing_reads_and_refuses_each_item_as_the_python_reference(tmp_path, monkeypatch, odd):
    dump = tmp_path / "dump.json"
    items = [{"path": "/ledgers", "data_b64": None}, {"path": "/ledgers/LAYOUT",
             "data_b64": base64.b64encode(layout_bytes(LedgerManager.HIERARCHICAL)).decode()},
             *ODD_ITEMS[:2], ODD_ITEMS[odd], *ODD_ITEMS[:2]]
    dump.write_text(a_line_each(items))
    outcomes = []
    for walker in ("native", "python"):
        monkeypatch.setenv("BOOKIE_SCANNER_NATIVE", "1" if walker == "native" else "0")
        try:
            with SnapshotStore(dump) as store:
                paths = [item["path"] for item in items if isinstance(item, dict) and isinstance(item.get("path"), str)]
                outcomes.append((store.nodes(paths), store.children("/ledgers")))
        except DumpFormatError as error:
            outcomes.append(str(error))
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("span_limit", [1, 300, 1 << 16])
def test_records_read_in_spans_of_any_length_are_the_same_records(tmp_path, monkeypatch, span_limit):
    # Each record alone, a few at a time, or many: neighbours (a parent's children) and scattered records (a batch of
    # ledgers) read back the same nodes and children.
    from scanner.metadata import znode_table
    nodes = [ZNode("/ledgers", None, False, 2, 0, 5),
             ZNode("/ledgers/LAYOUT", layout_bytes(LedgerManager.HIERARCHICAL), False, 3, 0, None)]
    nodes += [ZNode(path, b"", False, 4, 0, None) for path in ("/ledgers/00", "/ledgers/00/0000", "/ledgers/00/0001")]
    nodes += [ZNode(ledger_path(LedgerManager.HIERARCHICAL, "/ledgers", ledger_id), bytes([ledger_id % 256]) * (ledger_id % 97),
                    False, 10 + ledger_id, 0, None) for ledger_id in range(0, 20_000, 67)]
    dump = tmp_path / "dump.json"
    with open(dump, "w") as out:
        write_dump_nodes(nodes, out)
    with SnapshotStore(dump) as store:
        paths = [node.path for node in nodes]
        ledger_ids = list(store.ledger_ids())
        scattered = ledger_ids[::3] + ledger_ids[1::3]
        expected = (store.nodes(paths), [store.children(path) for path in paths], store.ledger_data(scattered))
        monkeypatch.setattr(znode_table, "_SPAN_LIMIT", span_limit)
        assert (store.nodes(paths), [store.children(path) for path in paths], store.ledger_data(scattered)) == expected
    assert expected[0] == nodes and len(ledger_ids) == 299


def test_children_are_noted_natively_as_the_reference_notes_them():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from corpus import reference_walker
    from scanner.metadata.znode_table import ZNodeTable
    from scanner.native import _native

    def noted(paths: list[str], first: int) -> dict:
        table = ZNodeTable.__new__(ZNodeTable)  # only its children's index, filled from scratch
        table._children = {}
        table._note_children(paths, first)
        return {parent: list(numbers) for parent, numbers in table._children.items()}

    names = st.sampled_from(["", "a", "L0001", "é", "ledgers", "x\U0001F600", "LAYOUT"])
    paths = st.lists(names, max_size=4).map("/".join) | st.lists(names, min_size=1, max_size=4).map(
        lambda parts: "/" + "/".join(parts))

    @settings(max_examples=300, deadline=None)
    @given(st.lists(paths, max_size=30), st.integers(0, 2**32 - 31))
    def agree(batch, first):
        with reference_walker():
            expected = noted(batch, first)
        assert noted(batch, first) == expected

    agree()
    assert _native.child_runs(["/a/b", "/a/c", "/d/e", "/a/f", "/", "/a/"], 7) == [
        ("/a", array("I", [7, 8]).tobytes()), ("/d", array("I", [9]).tobytes()), ("/a", array("I", [10]).tobytes())]
    with pytest.raises(ValueError):
        _native.child_runs(["/a", "/b"], 2**32 - 1)
    with pytest.raises(TypeError):
        _native.child_runs(["/a", b"/b"], 0)


def test_the_native_record_parser_refuses_fields_it_does_not_give():
    from scanner.native import _native

    assert _native.parse_records(b"", [], 2) == []
    for fields in (-1, 3):
        with pytest.raises(ValueError):
            _native.parse_records(b"", [], fields)


def test_whole_lines_packed_from_their_text_are_what_json_and_the_item_packer_make_of_them():
    # The native packer of a dump's whole lines takes only the form `metadata dump` writes and gives exactly what the
    # items decoded by json and packed item by item give; any other text (a change anywhere) it leaves to them.
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from scanner.native import _native

    def reference(text: str):
        try:
            items = json.loads("[" + text + "]")
        except json.JSONDecodeError:
            return None
        records, paths, lengths, taken = _native.pack_znodes(items, 0)
        return (records, paths, lengths) if taken == len(items) and items else None

    int64 = st.integers(-(2**63), 2**63 - 1)
    nodes = st.builds(ZNode, st.text(st.characters(min_codepoint=32, max_codepoint=130), max_size=12).map(
        lambda name: "/" + name), st.none() | st.binary(max_size=20), st.booleans(), int64, int64, st.none() | int64)

    @settings(max_examples=300, deadline=None)
    @given(st.lists(nodes, min_size=1, max_size=6), st.integers(0, 10**6), st.sampled_from(
        ["", "x", " ", "\\n", ",", "0", "1.5", "e5", "-", '"', "\\\\", "null", "true", "{", "}", "é"]))
    def agree(batch, where, change):
        out = io.StringIO()
        write_dump_nodes(batch, out)
        text = out.getvalue()[2:-3]  # the items and commas, between "[\n" and "\n]\n"
        packed = _native.pack_dump_lines(text)
        if all(node.path.isascii() and not set(node.path) & {'"', "\\", "\x7f"} for node in batch):
            assert packed is not None
        if packed is not None:
            assert packed == reference(text)
        at = where % (len(text) + 1)
        changed = text[:at] + change + text[at:]
        packed = _native.pack_dump_lines(changed)
        if packed is not None:
            assert packed == reference(changed)

    agree()
    line = '{"path": "/a", "data_b64": "QUJD", "ephemeral": false, "mzxid": 1, "version": 0, "ctime": null}'
    assert _native.pack_dump_lines(" " + line + ",\n\t" + line + " ")[1] == ["/a", "/a"]
    for other in ("", line + ",", line.replace("1,", "01,"), line.replace('"QUJD"', '"QUJ"'), line.replace("1,", "1.0,"),
                  line.replace("1,", "9223372036854775808,"), line.replace("false", "0"), "[" + line + "]",
                  line.replace('"/a"', '"a"'), line.replace(": ", ":")):
        assert _native.pack_dump_lines(other) is None, other
    assert _native.pack_dump_lines(line.replace("1,", "-9223372036854775808,")) is not None
