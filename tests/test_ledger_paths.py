"""Ledger znode paths per manager (formats doc section 7.3), LAYOUT, and the lazy tree walk."""

from __future__ import annotations

import pytest

from corpus import CORPUS
from scanner.metadata.ledger_paths import (
    LayoutError,
    LedgerManager,
    is_special_znode,
    layout_bytes,
    ledger_id_from_path,
    ledger_path,
    ledger_paths,
    parse_layout,
    walk_ledger_ids,
)
from scanner.metadata.snapshot import SnapshotStore

FLAT, HIER, LONG, LEGACY = (LedgerManager.FLAT, LedgerManager.HIERARCHICAL,
                            LedgerManager.LONG_HIERARCHICAL, LedgerManager.LEGACY_HIERARCHICAL)  # fmt: skip

# id -> {manager: path under /ledgers, or None when the manager cannot hold the id}
PATHS = {
    1: {HIER: "/00/0000/L0001", LONG: "/000/0000/0000/0000/L0001", LEGACY: "/00/0000/L0001", FLAT: "/L0000000001"},
    123456789: {HIER: "/01/2345/L6789", LONG: "/000/0000/0001/2345/L6789", LEGACY: "/01/2345/L6789",
                FLAT: "/L0123456789"},
    2147483646: {HIER: "/21/4748/L3646", LONG: "/000/0000/0021/4748/L3646", LEGACY: "/21/4748/L3646",
                 FLAT: "/L2147483646"},
    2147483647: {HIER: "/000/0000/0021/4748/L3647", LONG: "/000/0000/0021/4748/L3647", LEGACY: None,
                 FLAT: "/L2147483647"},
    4294967311: {HIER: "/000/0000/0042/9496/L7311", LONG: "/000/0000/0042/9496/L7311", LEGACY: None,
                 FLAT: "/L4294967311"},
    2**40 + 5: {HIER: "/000/0001/0995/1162/L7781", LONG: "/000/0001/0995/1162/L7781", LEGACY: None,
                FLAT: "/L1099511627781"},
}  # fmt: skip


@pytest.mark.parametrize("manager", list(LedgerManager))
@pytest.mark.parametrize("ledger_id", sorted(PATHS))
def test_paths_match_the_verified_table_and_parse_back(manager, ledger_id):
    expected = PATHS[ledger_id][manager]
    if expected is None:
        with pytest.raises(ValueError, match="too large for the legacy"):
            ledger_path(manager, "/ledgers", ledger_id)
        return
    path = ledger_path(manager, "/ledgers", ledger_id)
    assert path == "/ledgers" + expected
    assert ledger_id_from_path(manager, "/ledgers", path) == ledger_id
    assert ledger_id_from_path(manager, "/other", path) is None


@pytest.mark.parametrize("manager", list(LedgerManager))
def test_a_batch_of_paths_is_each_ids_path(manager):
    # A batch in the short range (named in one step where the manager has it) and batches reaching out of it, or out
    # of what the manager can hold (None there), give what ledger_path gives each id.
    short = [0, 1, 9, 10, 123456789, 2147483646, 99999999, 100000000]
    for batch in (short, short + [2147483647], [-1] + short, short + [2**63], sorted(PATHS), []):
        expected = []
        for ledger_id in batch:
            try:
                expected.append(ledger_path(manager, "/ledgers", ledger_id))
            except ValueError:
                expected.append(None)
        assert ledger_paths(manager, "/ledgers", batch) == expected


def test_ids_outside_the_java_long_range_are_refused():
    for manager in LedgerManager:
        with pytest.raises(ValueError):
            ledger_path(manager, "/ledgers", -1)
        with pytest.raises(ValueError):
            ledger_path(manager, "/ledgers", 2**63)
    assert ledger_path(LONG, "/l", 2**63 - 1) == "/l/922/3372/0368/5477/L5807"


def test_paths_of_the_other_scheme_or_of_special_nodes_are_not_ledgers():
    assert ledger_id_from_path(LONG, "/ledgers", "/ledgers/00/0000/L0001") is None
    assert ledger_id_from_path(LEGACY, "/ledgers", "/ledgers/000/0000/0000/0000/L0001") is None
    assert ledger_id_from_path(FLAT, "/ledgers", "/ledgers/00/0000/L0001") is None
    for path in ("/ledgers/LAYOUT", "/ledgers/available/1.2.3.4:3181", "/ledgers/00/0000/L12a4",
                 "/ledgers/00/0000/X0001", "/ledgers/00/0000", "/ledgers/ID-0000000001"):  # fmt: skip
        assert ledger_id_from_path(HIER, "/ledgers", path) is None
        assert ledger_id_from_path(FLAT, "/ledgers", path) is None


def test_special_znodes():
    for name in ("available", "cookies", "LAYOUT", "INSTANCEID", "underreplication", "idgen", "idgen-long",
                 "ID-0000000042"):  # fmt: skip
        assert is_special_znode(name)
    for name in ("00", "000", "L0000000001", "ledgers", "id"):
        assert not is_special_znode(name)


def test_layout_of_the_corpus_and_of_every_manager():
    real = SnapshotStore(CORPUS / "zk-dump.json").node("/ledgers/LAYOUT").data
    layout = parse_layout(real)
    assert (layout.format_version, layout.manager, layout.manager_version) == (2, HIER, 1)
    assert layout_bytes(HIER) == real
    for manager in LedgerManager:
        assert parse_layout(layout_bytes(manager)).manager is manager
    assert parse_layout(b"1\nflat:1").manager is FLAT
    assert parse_layout(b"1\nhierarchical:1").manager is HIER
    shaded = b"2\ndlshade.org.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory:1"
    assert parse_layout(shaded).manager is LONG


@pytest.mark.parametrize(
    "data, message",
    [
        (b"3\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:1", "layout format 3"),
        (b"2", "no '<ledger manager>:<version>' line"),
        (b"two\nflat:1", "not a layout format version"),
        (b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory", "expected '<ledger manager>:<version>'"),
        (b"2\norg.apache.bookkeeper.meta.MSLedgerManagerFactory:1", "not one the scanner reads"),
        (b"1\nlonghierarchical:1", "expected 'flat' or 'hierarchical'"),
        (b"2\n\xff:1", "not UTF-8 at offset 2"),
    ],
)
def test_bad_layouts_are_refused_with_a_reason(data, message):
    with pytest.raises(LayoutError, match=message):
        parse_layout(data, source="/ledgers/LAYOUT")


class Tree:
    """An in-memory znode tree that records which paths were listed."""

    def __init__(self, paths):
        self.kids: dict[str, set[str]] = {}
        for path in paths:
            parent, _, name = path.rpartition("/")
            while name:
                self.kids.setdefault(parent, set()).add(name)
                parent, _, name = parent.rpartition("/")
        self.listed: list[str] = []

    def children(self, path):
        self.listed.append(path)
        return list(self.kids.get(path, ()))


def test_walk_finds_both_hierarchical_schemes_and_skips_what_is_not_a_ledger():
    ids = [0, 1, 9999, 123456789, 2147483646, 2147483647, 4294967311, 2**40 + 5]
    junk = ["/ledgers/LAYOUT", "/ledgers/available/readonly", "/ledgers/idgen-long/HOB-0000000000",
            "/ledgers/00/0000/L12a4", "/ledgers/00/0000/L00001", "/ledgers/00/junk/L0001", "/ledgers/7/0000/L0001",
            "/ledgers/underreplication/ledgers/0000/0000/0000/0001/urL0000000001", "/ledgers/99/9999"]  # fmt: skip
    tree = Tree([ledger_path(HIER, "/ledgers", i) for i in ids] + junk)
    assert list(walk_ledger_ids(HIER, "/ledgers", tree.children)) == ids
    assert list(walk_ledger_ids(LEGACY, "/ledgers", tree.children)) == [i for i in ids if i < 2**31 - 1]
    assert list(walk_ledger_ids(LONG, "/ledgers", tree.children)) == [i for i in ids if i >= 2**31 - 1]


def test_flat_walk_is_numeric_across_widths():
    ids = [5, 10**10 + 3, 123, 2**31 - 2]
    tree = Tree([ledger_path(FLAT, "/l", i) for i in ids] + ["/l/LAYOUT", "/l/ID-0000000007", "/l/00/0000/L0001"])
    assert list(walk_ledger_ids(FLAT, "/l", tree.children)) == sorted(ids)


def test_walk_is_lazy_one_branch_at_a_time():
    ids = [i * 10_000 for i in range(1, 40)] + [2**40 + i for i in range(5)]
    tree = Tree([ledger_path(HIER, "/ledgers", i) for i in ids])
    walk = walk_ledger_ids(HIER, "/ledgers", tree.children)
    assert next(walk) == 10_000
    # Only the root and the first branch were listed to produce the first id.
    assert tree.listed == ["/ledgers", "/ledgers/00", "/ledgers/00/0001"]
    assert list(walk) == ids[1:]


def test_the_corpus_has_ledgers_under_both_schemes():
    store = SnapshotStore(CORPUS / "zk-dump.json")
    found = list(store.ledger_ids())
    assert 123456789 in found and 4294967311 in found
    assert found.index(123456789) < found.index(4294967311)  # the 2-4-4 tree is walked first


def test_the_native_short_paths_are_the_reference_paths():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from corpus import reference_walker
    from scanner.native import _native as native

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.integers(0, 2147483646), max_size=50), st.sampled_from(["/ledgers", "", "/a/b-c_d", "/lé"]))
    def agree(batch, root):
        with reference_walker():
            expected = ledger_paths(LedgerManager.HIERARCHICAL, root, batch)
        assert expected == [root + ledger_path(LedgerManager.HIERARCHICAL, "", i) for i in batch]
        assert ledger_paths(LedgerManager.HIERARCHICAL, root, batch) == expected
        assert ledger_paths(LedgerManager.LEGACY_HIERARCHICAL, root, batch) == expected
        if root.isascii():
            assert native.short_ledger_paths(root, batch) == expected

    agree()
    for outside in ([2147483647], [-1], [2**63], [2**64], [1, 2**70]):
        with pytest.raises(ValueError):
            native.short_ledger_paths("/ledgers", outside)
    with pytest.raises(ValueError):
        native.short_ledger_paths("/lé", [1])
    with pytest.raises(TypeError):
        native.short_ledger_paths("/ledgers", [1.5])


def test_a_parents_leaves_give_their_ids_whichever_way_they_are_read():
    # A listing of leaves alone, all of one width, is read in C-speed steps; any other name by name: both give each
    # leaf's id, ascending, and pass over what is not a leaf.
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from scanner.metadata.ledger_paths import _FLAT_TREE, _LEGACY_TREE, _LONG_TREE, _leaf_ids

    def by_name(tree, prefix: str, names: list[str]) -> list[int]:
        leaves = sorted((name for name in names if tree.leaf.fullmatch(name)), key=lambda name: (len(name), name))
        return [int(prefix + name[1:]) for name in leaves]

    leaf = st.integers(0, 9999).map(lambda i: f"L{i:04d}")
    other = st.sampled_from(["L12", "L123456", "Lx234", "l1234", "L１２３４", "L12345", "12345", "available"])

    @settings(max_examples=200, deadline=None)
    @given(st.lists(leaf, unique=True, max_size=40), st.lists(other, unique=True, max_size=3),
           st.sampled_from([(_LEGACY_TREE, "/ledgers/00/0012", "000012"), (_LONG_TREE, "/ledgers/000/0000/0001/0002",
                                                                           "000000000010002")]))
    def agree(leaves, others, where):
        tree, parent, prefix = where
        for names in (leaves, sorted(leaves + others)):
            assert _leaf_ids(tree, "/ledgers", parent, names) == by_name(tree, prefix, names)

    agree()
    flat = ["L0000000001", "L0000000010", "L00000000099", "LAYOUT", "INSTANCEID"]
    assert _leaf_ids(_FLAT_TREE, "/ledgers", "/ledgers", flat) == [1, 10, 99]
    assert _leaf_ids(_FLAT_TREE, "/ledgers", "/ledgers", flat[:2]) == [1, 10]
